/* attr.c - reading and writing device attributes by zram's sysfs names.
 * The control socket and `uzram attr` go through here, so names live in one place. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "uzram.h"

enum attr_access { ATTR_READ = 1, ATTR_WRITE = 2 };

struct attr {
    const char *name;
    unsigned access;
};

static const struct attr attrs[] = {
    {"disksize", ATTR_READ},
    {"initstate", ATTR_READ},
    {"comp_algorithm", ATTR_READ | ATTR_WRITE},
    {"algorithm_params", ATTR_READ | ATTR_WRITE},
    {"same_filled", ATTR_READ | ATTR_WRITE},
    {"use_dedup", ATTR_READ | ATTR_WRITE},
    {"mem_limit", ATTR_READ | ATTR_WRITE},
    {"mem_used_max", ATTR_READ | ATTR_WRITE},
    {"mm_stat", ATTR_READ},
    {"io_stat", ATTR_READ},
    {"debug_stat", ATTR_READ},
    {"stat_json", ATTR_READ},
    {"compact", ATTR_WRITE},
    {"reset", ATTR_WRITE},
    {"idle", ATTR_WRITE},
};

const char *uzram_attr_names(void)
{
    return "disksize initstate comp_algorithm algorithm_params same_filled use_dedup "
           "mem_limit mem_used_max mm_stat io_stat debug_stat stat_json compact reset idle";
}

static const struct attr *attr_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof attrs / sizeof attrs[0]; i++)
        if (strcmp(attrs[i].name, name) == 0)
            return &attrs[i];
    return NULL;
}

static int print(char *buf, size_t size, const char *fmt, uint64_t value)
{
    int length = snprintf(buf, size, fmt, value);
    return length < 0 || (size_t)length >= size ? -ERANGE : length;
}

int uzram_attr_get(struct uzram *dev, const char *name, char *buf, size_t size)
{
    const struct attr *attr = attr_find(name);
    if (!attr)
        return -ENOENT;
    if (!(attr->access & ATTR_READ))
        return -EACCES;
    struct uzram_config config;
    struct uzram_stats stats;
    uzram_get_config(dev, &config);
    uzram_get_stats(dev, &stats, sizeof stats);

    if (strcmp(name, "disksize") == 0)
        return print(buf, size, "%" PRIu64 "\n", config.disksize);
    if (strcmp(name, "initstate") == 0)
        return print(buf, size, "%" PRIu64 "\n", 1);
    if (strcmp(name, "comp_algorithm") == 0) {
        int length = uzram_algorithm_list(config.comp_algorithm, buf, size);
        if (length < 0 || (size_t)length + 2 > size)
            return -ERANGE;
        buf[length++] = '\n';
        buf[length] = '\0';
        return length;
    }
    if (strcmp(name, "algorithm_params") == 0) {
        int length =
            snprintf(buf, size, "algo=%s level=%d\n", config.comp_algorithm, config.comp_level);
        return length < 0 || (size_t)length >= size ? -ERANGE : length;
    }
    if (strcmp(name, "same_filled") == 0)
        return print(buf, size, "%" PRIu64 "\n", config.same_filled);
    if (strcmp(name, "use_dedup") == 0)
        return print(buf, size, "%" PRIu64 "\n", config.use_dedup);
    if (strcmp(name, "mem_limit") == 0)
        return print(buf, size, "%" PRIu64 "\n", stats.mem_limit);
    if (strcmp(name, "mem_used_max") == 0)
        return print(buf, size, "%" PRIu64 "\n", stats.mem_used_max);
    if (strcmp(name, "mm_stat") == 0)
        return uzram_format_mm_stat(&stats, buf, size);
    if (strcmp(name, "io_stat") == 0)
        return uzram_format_io_stat(&stats, buf, size);
    if (strcmp(name, "debug_stat") == 0)
        return stats_format_debug(&stats, buf, size);
    return uzram_format_json(&stats, buf, size); /* stat_json */
}

/* "0"/"1" (and a trailing newline, as `echo 1 > attr` sends). */
static int parse_bool(const char *value, bool *out)
{
    size_t length = strcspn(value, "\n");
    if (length == 1 && (value[0] == '0' || value[0] == '1')) {
        *out = value[0] == '1';
        return 0;
    }
    return -EINVAL;
}

/* A whole unsigned decimal number, with an optional trailing newline. */
static int parse_count(const char *value, uint64_t *out)
{
    size_t length = strcspn(value, "\n");
    if (length == 0 || length > 19 || strspn(value, "0123456789") != length)
        return -EINVAL;
    *out = strtoull(value, NULL, 10);
    return 0;
}

/* zram's idle: "all", or a number of seconds since the last access. */
static int parse_idle(struct uzram *dev, const char *value)
{
    uint64_t seconds;
    if (strncmp(value, "all", 3) == 0 && (value[3] == '\0' || strcmp(value + 3, "\n") == 0))
        return uzram_mark_idle(dev, 0, NULL);
    int rc = parse_count(value, &seconds);
    /* 0 seconds would mark everything, as "all" does: say so instead */
    return rc < 0 || seconds == 0 ? -EINVAL : uzram_mark_idle(dev, seconds, NULL);
}

static int parse_algorithm_params(struct uzram *dev, const char *value)
{
    struct uzram_config config;
    uzram_get_config(dev, &config);
    char algo[32];
    snprintf(algo, sizeof algo, "%s", config.comp_algorithm);
    long level = config.comp_level;
    char *copy = strdup(value);
    if (!copy)
        return -ENOMEM;
    int rc = 0;
    char *save = NULL;
    for (char *word = strtok_r(copy, " \t\n", &save); word && rc == 0;
         word = strtok_r(NULL, " \t\n", &save)) {
        char *end;
        if (strncmp(word, "level=", 6) == 0) {
            level = strtol(word + 6, &end, 10);
            if (end == word + 6 || *end)
                rc = -EINVAL;
        } else if (strncmp(word, "algo=", 5) == 0 && strlen(word + 5) < sizeof algo) {
            snprintf(algo, sizeof algo, "%s", word + 5);
        } else {
            rc = -EINVAL;
        }
    }
    free(copy);
    if (rc == 0)
        rc = level < -1000000 || level > 1000000 ? -EINVAL
                                                 : uzram_set_algorithm(dev, algo, (int)level);
    return rc;
}

int uzram_attr_set(struct uzram *dev, const char *name, const char *value)
{
    const struct attr *attr = attr_find(name);
    if (!attr)
        return -ENOENT;
    if (!(attr->access & ATTR_WRITE))
        return -EACCES;
    if (!value)
        return -EINVAL;
    bool on;
    if (strcmp(name, "comp_algorithm") == 0) {
        char algo[32];
        size_t length = strcspn(value, " \t\n");
        if (length == 0 || length >= sizeof algo)
            return -EINVAL;
        memcpy(algo, value, length);
        algo[length] = '\0';
        return uzram_set_algorithm(dev, algo, 0);
    }
    if (strcmp(name, "algorithm_params") == 0)
        return parse_algorithm_params(dev, value);
    if (strcmp(name, "same_filled") == 0)
        return parse_bool(value, &on) ?: uzram_set_same_filled(dev, on);
    if (strcmp(name, "use_dedup") == 0)
        return parse_bool(value, &on) ?: uzram_set_dedup(dev, on);
    if (strcmp(name, "mem_limit") == 0) {
        uint64_t bytes;
        return uzram_parse_size(value, &bytes) ?: uzram_set_mem_limit(dev, bytes);
    }
    if (strcmp(name, "mem_used_max") == 0) {
        uint64_t bytes;
        int rc = uzram_parse_size(value, &bytes);
        return rc ? rc : bytes != 0 ? -EINVAL : uzram_reset_mem_used_max(dev);
    }
    if (strcmp(name, "compact") == 0)
        return uzram_compact(dev, NULL);
    if (strcmp(name, "idle") == 0)
        return parse_idle(dev, value);
    /* reset */
    if (parse_bool(value, &on) || !on)
        return -EINVAL;
    return uzram_reset(dev);
}
