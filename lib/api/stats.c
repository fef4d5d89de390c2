/* stats.c - the statistics: a snapshot gathered from the device's parts (uzram_get_stats), the
 * counters by name and the text forms of a snapshot: mm_stat, io_stat, bd_stat, debug_stat,
 * JSON. All of them follow the one list UZRAM_STATS in uzram.h. */
#include "api/stats.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "backing/backing.h"
#include "dedup/dedup.h"
#include "device/device.h"
#include "pool/pool.h"
#include "pool/pool_reserve.h"
#include "store/table.h"
#include "tier/writeback.h"

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

int uzram_get_stats(struct uzram *dev, struct uzram_stats *stats, size_t size)
{
    if (!stats)
        return -EINVAL;
    uint64_t pages = counter_get(&dev->pages_stored);
    uint64_t dict_mem = codec_table_dict_mem(&dev->codecs);
    struct dedup *dedup = device_dedup(dev);
    struct backing *backing = device_backing(dev);
    struct writeback_settings writeback;
    writeback_settings(dev, &writeback);
    struct pool_reserve_counts reserve;
    pool_reserve_counts(dev->pool, &reserve);
    const struct uzram_stats all = {
        .orig_data_size = pages * UZRAM_PAGE_SIZE,
        .compr_data_size = counter_get(&dev->compr_data_size),
        .mem_used_total = pool_mem_used(dev->pool) + dict_mem,
        .mem_limit = atomic_load(&dev->mem_limit),
        .mem_used_max = pool_mem_used_max(dev->pool) + dict_mem,
        .same_pages = counter_get(&dev->same_pages),
        .pages_compacted = counter_get(&dev->events->pages_compacted),
        .huge_pages = counter_get(&dev->huge_pages),
        .huge_pages_since = counter_get(&dev->events->huge_pages_since),
        .dup_data_size = dedup_dup_data_size(dedup),
        .meta_data_size = dedup_meta_size(dedup) + counter_get(&dev->bundle_mem),
        .failed_reads = counter_get(&dev->events->failed_reads),
        .failed_writes = counter_get(&dev->events->failed_writes),
        .invalid_io = counter_get(&dev->events->invalid_io),
        .notify_free = counter_get(&dev->events->notify_free),
        .dedup_hash_collisions = dedup_hash_collisions(dedup),
        .pages_stored = pages,
        .zero_pages = counter_get(&dev->zero_pages),
        .idle_pages = counter_get(&dev->idle_pages),
        .recomp_pages = counter_get(&dev->events->recomp_pages),
        .recomp_bytes = counter_get(&dev->events->recomp_bytes),
        .recomp_saved_bytes = counter_get(&dev->events->recomp_saved_bytes),
        .incompressible_pages = counter_get(&dev->incompressible_pages),
        .dict_mem = dict_mem,
        .bd_count = backing ? backing_blocks_used(backing) : 0,
        .bd_reads = counter_get(&dev->events->bd_reads),
        .bd_writes = counter_get(&dev->events->bd_writes),
        .bd_objects = counter_get(&dev->bd_objects),
        .bd_data_size = counter_get(&dev->bd_data_size),
        .bd_write_errors = counter_get(&dev->events->bd_write_errors),
        .bd_nospace = counter_get(&dev->events->bd_nospace),
        .writeback_limit = writeback.limit,
        .writeback_limit_enable = writeback.limit_enable,
        .bd_checksum_errors = counter_get(&dev->events->bd_checksum_errors),
        .table_mem = table_bytes(dev),
        .dedup_entries = dedup_entries(dedup),
        .bundles = counter_get(&dev->bundles),
        .bundled_pages = counter_get(&dev->bundled_pages),
        .bundle_dead_pages = counter_get(&dev->bundle_dead_pages),
        .bundle_saved_bytes = counter_get(&dev->bundle_saved_bytes),
        .bundle_mem = counter_get(&dev->bundle_mem),
        .dict_trainings = counter_get(&dev->events->dict_trainings),
        .recomp_passes = counter_get(&dev->events->recomp_passes),
        .reserve_empty = reserve.empty,
        .state_lock_timeouts = counter_get(&dev->events->state_lock_timeouts),
        .cached_mem = pool_span_cache_bytes(dev->pool),
    };
    /* Callers built against another version of the struct: an older one
     * gets the prefix it knows, a newer one zeros past what we have. */
    size_t known = size < sizeof all ? size : sizeof all;
    memcpy(stats, &all, known);
    if (size > known)
        memset((char *)stats + known, 0, size - known);
    return 0;
}
