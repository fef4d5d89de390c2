/* stats.c - the counters by name and the text forms of a snapshot: mm_stat, io_stat,
 * bd_stat, debug_stat, JSON. All of them follow the one list UZRAM_STATS in uzram.h. */
#include "api/stats.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

enum stat_form { STAT_FORM_MM, STAT_FORM_IO, STAT_FORM_BD, STAT_FORM_DEBUG };

static const struct stat_field {
    const char *name;
    size_t offset;
    enum stat_form form;
    int kind;
    const char *help;
} fields[] = {
#define STAT_FIELD(name, form, kind, help)                                                         \
    {#name, offsetof(struct uzram_stats, name), STAT_FORM_##form, UZRAM_STAT_##kind, help},
    UZRAM_STATS(STAT_FIELD)
#undef STAT_FIELD
};
#define FIELD_COUNT (sizeof fields / sizeof fields[0])

_Static_assert(sizeof(struct uzram_stats) == FIELD_COUNT * sizeof(uint64_t),
               "struct uzram_stats is one uint64_t per counter, nothing else");

/* uzram.h promises that 2048 bytes always hold the JSON form: braces, and
 * per counter its quoted name, ": ", up to 20 digits and ", ". */
#define STAT_NAME_BYTES(name, form, kind, help) +sizeof #name
_Static_assert(2 + (0 UZRAM_STATS(STAT_NAME_BYTES)) + FIELD_COUNT * (2 + 2 + 20 + 2) + 2 <= 2048,
               "the JSON form of every counter fits in 2048 bytes");
#undef STAT_NAME_BYTES

size_t uzram_stat_count(void)
{
    return FIELD_COUNT;
}

const char *uzram_stat_name(size_t index)
{
    return index < FIELD_COUNT ? fields[index].name : NULL;
}

const char *uzram_stat_help(size_t index)
{
    return index < FIELD_COUNT ? fields[index].help : NULL;
}

int uzram_stat_kind(size_t index)
{
    return index < FIELD_COUNT ? fields[index].kind : -EINVAL;
}

uint64_t uzram_stat_value(const struct uzram_stats *stats, size_t size, size_t index)
{
    if (!stats || index >= FIELD_COUNT || fields[index].offset + sizeof(uint64_t) > size)
        return 0;
    uint64_t value;
    memcpy(&value, (const char *)stats + fields[index].offset, sizeof value);
    return value;
}

int text_append(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    int length = vsnprintf(buf + *used, size - *used, fmt, args);
    va_end(args);
    if (length < 0 || (size_t)length >= size - *used)
        return -ERANGE;
    *used += (size_t)length;
    return 0;
}

/* The counters of one form: as "name: value" lines when `named`, else as
 * the numbers alone on one line, space separated (zram's positional form). */
static int format_form(const struct uzram_stats *stats, enum stat_form form, bool named, char *buf,
                       size_t size, size_t *used)
{
    bool first = true;
    for (size_t i = 0; i < FIELD_COUNT; i++) {
        if (fields[i].form != form)
            continue;
        unsigned long long value = uzram_stat_value(stats, sizeof *stats, i);
        int rc = named ? text_append(buf, size, used, "%s: %llu\n", fields[i].name, value)
                       : text_append(buf, size, used, "%s%llu", first ? "" : " ", value);
        if (rc < 0)
            return rc;
        first = false;
    }
    return named ? 0 : text_append(buf, size, used, "\n");
}

static int format_line(const struct uzram_stats *stats, enum stat_form form, char *buf, size_t size)
{
    size_t used = 0;
    int rc = format_form(stats, form, false, buf, size, &used);
    return rc < 0 ? rc : (int)used;
}

int uzram_format_mm_stat(const struct uzram_stats *stats, char *buf, size_t size)
{
    return format_line(stats, STAT_FORM_MM, buf, size);
}

int uzram_format_io_stat(const struct uzram_stats *stats, char *buf, size_t size)
{
    return format_line(stats, STAT_FORM_IO, buf, size);
}

int uzram_format_bd_stat(const struct uzram_stats *stats, char *buf, size_t size)
{
    return format_line(stats, STAT_FORM_BD, buf, size);
}

int stats_format_debug(const struct uzram_stats *stats, char *buf, size_t size)
{
    size_t used = 0;
    /* zram's debug_stat starts with a version line */
    int rc = text_append(buf, size, &used, "version: 1\n");
    if (rc == 0)
        rc = format_form(stats, STAT_FORM_DEBUG, true, buf, size, &used);
    return rc < 0 ? rc : (int)used;
}

int uzram_format_json(const struct uzram_stats *stats, char *buf, size_t size)
{
    size_t used = 0;
    int rc = 0;
    for (size_t i = 0; i < FIELD_COUNT && rc == 0; i++)
        rc = text_append(buf, size, &used, "%s\"%s\": %llu", i ? ", " : "{", fields[i].name,
                         (unsigned long long)uzram_stat_value(stats, sizeof *stats, i));
    if (rc == 0)
        rc = text_append(buf, size, &used, "}\n");
    return rc < 0 ? rc : (int)used;
}
