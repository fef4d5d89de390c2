/* attr.c - device attributes by zram's sysfs names: one table says, for each, how it is shown,
 * what a write takes and what it does, and uzram_attr_get, uzram_attr_set, uzram_attr_names
 * and uzram_attr_usage are all made from it. The control socket and `uzram attr` go through
 * here. The values made of words are parsed by attr_words.c. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/attr_words.h"
#include "codec/codec_table.h"
#include "codec/comp.h"
#include "device/device.h"
#include "recompress/recompress.h"
#include "api/stats.h"
#include "uzram.h"
#include "tier/writeback.h"

/* ---- showing ----------------------------------------------------------------- */

static int print_number(char *buf, size_t size, uint64_t value)
{
    int length = snprintf(buf, size, "%" PRIu64 "\n", value);
    return length < 0 || (size_t)length >= size ? -ERANGE : length;
}

static struct uzram_config config_of(struct uzram *dev)
{
    struct uzram_config config;
    uzram_get_config(dev, &config);
    return config;
}

static struct uzram_stats stats_of(struct uzram *dev)
{
    struct uzram_stats stats;
    uzram_get_stats(dev, &stats, sizeof stats);
    return stats;
}

static struct writeback_settings writeback_of(struct uzram *dev)
{
    struct writeback_settings settings;
    writeback_settings(dev, &settings);
    return settings;
}

/* recompress_idle, recompress_rate or recompress_cpu (`which` 0, 1, 2). */
static uint64_t recompressor_of(struct uzram *dev, int which)
{
    uint64_t idle_seconds, pages_per_second;
    unsigned cpu_percent;
    recompressor_settings(dev, &idle_seconds, &pages_per_second, &cpu_percent);
    return which == 0 ? idle_seconds : which == 1 ? pages_per_second : cpu_percent;
}

static int set_recompress_cpu(struct uzram *dev, uint64_t percent)
{
    return percent > 100 ? -EINVAL : uzram_set_recompress_cpu(dev, (unsigned)percent);
}

static int set_recompress_group(struct uzram *dev, uint64_t pages)
{
    return pages > UINT32_MAX ? -EINVAL : uzram_set_recompress_group(dev, (unsigned)pages);
}

/* The attributes that show one number: show_NAME() prints VALUE, an expression of `dev`. */
#define SHOW_NUMBER(NAME, VALUE)                                                                   \
    static int show_##NAME(struct uzram *dev, char *buf, size_t size)                              \
    {                                                                                              \
        return print_number(buf, size, (VALUE));                                                   \
    }

SHOW_NUMBER(disksize, config_of(dev).disksize)
SHOW_NUMBER(initstate, ((void)dev, 1))
SHOW_NUMBER(same_filled, config_of(dev).same_filled)
SHOW_NUMBER(use_dedup, config_of(dev).use_dedup)
SHOW_NUMBER(mem_limit, stats_of(dev).mem_limit)
SHOW_NUMBER(mem_used_max, stats_of(dev).mem_used_max)
SHOW_NUMBER(recompress_idle, recompressor_of(dev, 0))
SHOW_NUMBER(recompress_rate, recompressor_of(dev, 1))
SHOW_NUMBER(recompress_cpu, recompressor_of(dev, 2))
SHOW_NUMBER(recompress_group, uzram_recompress_group(dev))
SHOW_NUMBER(writeback_limit, writeback_of(dev).limit)
SHOW_NUMBER(writeback_limit_enable, writeback_of(dev).limit_enable)
SHOW_NUMBER(writeback_when_full, writeback_of(dev).when_full)
SHOW_NUMBER(writeback_idle, writeback_of(dev).idle_seconds)
SHOW_NUMBER(writeback_rate, writeback_of(dev).rate)

/* zram's list of algorithms with the one in use in brackets. */
static int show_comp_algorithm(struct uzram *dev, char *buf, size_t size)
{
    int length = uzram_algorithm_list(config_of(dev).comp_algorithm, buf, size);
    if (length < 0 || (size_t)length + 2 > size)
        return -ERANGE;
    buf[length++] = '\n';
    buf[length] = '\0';
    return length;
}

static int show_backing_dev(struct uzram *dev, char *buf, size_t size)
{
    int length = uzram_get_backing_dev(dev, buf, size > 0 ? size - 1 : 0);
    if (length < 0)
        return -ERANGE;
    buf[length++] = '\n';
    buf[length] = '\0';
    return length;
}

/* The primary first, as before ("algo=lz4 level=1"), then one line per
 * secondary algorithm with its priority and dictionary. */
static int show_algorithm_params(struct uzram *dev, char *buf, size_t size)
{
    size_t used = 0;
    int rc = 0;
    for (unsigned priority = 0; priority <= CODEC_TABLE_PRIORITY_MAX && rc == 0; priority++) {
        struct codec_config config;
        if (!codec_table_setting(&dev->codecs, priority, &config))
            continue;
        if (priority)
            rc = text_append(buf, size, &used, "priority=%u ", priority);
        if (rc == 0)
            rc = text_append(buf, size, &used, "algo=%s level=%d", comp_name(config.algorithm),
                             config.level);
        if (rc == 0 && config.dict_auto)
            rc = config.dict
                     ? text_append(buf, size, &used,
                                   " dict=auto (trained, %zu bytes in memory, training %u, "
                                   "from %llu pages stored)",
                                   comp_dict_memory(config.dict), (unsigned)config.trainings,
                                   (unsigned long long)config.trained_pages)
                     : text_append(buf, size, &used, " dict=auto (to be trained, up to %u bytes)",
                                   (unsigned)config.dict_size);
        else if (rc == 0 && config.dict)
            rc = text_append(buf, size, &used, " dict=(%u bytes, %zu in memory)",
                             (unsigned)config.dict_size, comp_dict_memory(config.dict));
        if (rc == 0)
            rc = text_append(buf, size, &used, "\n");
    }
    return rc < 0 ? rc : (int)used;
}

/* zram's form: "#1: lzo lz4 [zstd] ..." for each priority that has one. */
static int show_recomp_algorithm(struct uzram *dev, char *buf, size_t size)
{
    size_t used = 0;
    for (unsigned priority = 1; priority <= CODEC_TABLE_PRIORITY_MAX; priority++) {
        struct codec_config config;
        if (!codec_table_setting(&dev->codecs, priority, &config))
            continue;
        int rc = text_append(buf, size, &used, "#%u: ", priority);
        int length =
            rc < 0 ? rc
                   : uzram_algorithm_list(comp_name(config.algorithm), buf + used, size - used);
        if (length < 0)
            return -ERANGE;
        used += (size_t)length;
        if (text_append(buf, size, &used, "\n") < 0)
            return -ERANGE;
    }
    if (used == 0 && size > 1) { /* none set: an empty line, as zram shows */
        buf[used++] = '\n';
        buf[used] = '\0';
    }
    return (int)used;
}

/* ---- storing ----------------------------------------------------------------- */

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

/* comp_algorithm: its first word names the algorithm (the level stays the algorithm's). */
static int store_comp_algorithm(struct uzram *dev, const char *value)
{
    char algo[32];
    size_t length = strcspn(value, " \t\n");
    if (length == 0 || length >= sizeof algo)
        return -EINVAL;
    memcpy(algo, value, length);
    algo[length] = '\0';
    return uzram_set_algorithm(dev, algo, 0);
}

static int store_mem_limit(struct uzram *dev, const char *value)
{
    uint64_t bytes;
    return uzram_parse_size(value, &bytes) ?: uzram_set_mem_limit(dev, bytes);
}

/* mem_used_max: only 0, which resets the peak. */
static int store_mem_used_max(struct uzram *dev, const char *value)
{
    uint64_t bytes;
    int rc = uzram_parse_size(value, &bytes);
    return rc ? rc : bytes != 0 ? -EINVAL : uzram_reset_mem_used_max(dev);
}

static int store_compact(struct uzram *dev, const char *value)
{
    (void)value;
    return uzram_compact(dev, NULL);
}

static int store_reset(struct uzram *dev, const char *value)
{
    bool on;
    if (parse_bool(value, &on) || !on)
        return -EINVAL;
    return uzram_reset(dev);
}

/* zram's idle: "all", or a number of seconds since the last access. */
static int store_idle(struct uzram *dev, const char *value)
{
    uint64_t seconds;
    if (strncmp(value, "all", 3) == 0 && (value[3] == '\0' || strcmp(value + 3, "\n") == 0))
        return uzram_mark_idle(dev, 0, NULL);
    int rc = attr_parse_count(value, &seconds);
    /* 0 seconds would mark everything, as "all" does: say so instead */
    return rc < 0 || seconds == 0 ? -EINVAL : uzram_mark_idle(dev, seconds, NULL);
}

/* backing_dev: an absolute path (the whole value but its newline), or
 * "none". A relative one would be taken from the server's working folder,
 * which whoever writes the attribute does not see. */
static int store_backing_dev(struct uzram *dev, const char *value)
{
    size_t length = strcspn(value, "\n");
    if (length == 0 || (value[length] && value[length + 1]) ||
        (value[0] != '/' && strncmp(value, "none", length > 4 ? length : 4) != 0))
        return -EINVAL;
    char *path = strndup(value, length);
    if (!path)
        return -ENOMEM;
    int rc = uzram_set_backing_dev(dev, path, 0);
    free(path);
    return rc;
}

/* ---- the table --------------------------------------------------------------- */

/* One attribute: how a read shows it (`show`, or `format`, a text form of the statistics;
 * neither: write-only) and what a write does (`store` with the value's words, or a setter
 * of "0"/"1" or of a whole number; none: read-only). `usage` says what a write takes, for the
 * error that refuses one: exactly the writable attributes have one. uzram_attr_names() lists
 * them in this order. */
struct attr {
    const char *name;
    int (*show)(struct uzram *dev, char *buf, size_t size);
    int (*format)(const struct uzram_stats *stats, char *buf, size_t size);
    int (*store)(struct uzram *dev, const char *value);
    int (*set_flag)(struct uzram *dev, bool on);
    int (*set_count)(struct uzram *dev, uint64_t count);
    const char *usage;
};

static const struct attr attrs[] = {
    {"disksize", .show = show_disksize},
    {"initstate", .show = show_initstate},
    {"comp_algorithm", .show = show_comp_algorithm, .store = store_comp_algorithm,
     .usage = "an algorithm name from the list it shows"},
    {"algorithm_params", .show = show_algorithm_params, .store = attr_store_algorithm_params,
     .usage = "[algo=NAME|priority=N] [level=N] [dict=PATH|auto] [dict_size=BYTES], e.g. "
              "'priority=1 level=7 dict=auto'"},
    {"same_filled", .show = show_same_filled, .set_flag = uzram_set_same_filled, .usage = "0 or 1"},
    {"use_dedup", .show = show_use_dedup, .set_flag = uzram_set_dedup, .usage = "0 or 1"},
    {"mem_limit", .show = show_mem_limit, .store = store_mem_limit,
     .usage = "a size in bytes (K/M/G/T), 0 for none"},
    {"mem_used_max", .show = show_mem_used_max, .store = store_mem_used_max,
     .usage = "0 (resets the peak)"},
    {"mm_stat", .format = uzram_format_mm_stat},
    {"io_stat", .format = uzram_format_io_stat},
    {"debug_stat", .format = stats_format_debug},
    {"stat_json", .format = uzram_format_json},
    {"compact", .store = store_compact, .usage = "any value"},
    {"reset", .store = store_reset, .usage = "1"},
    {"idle", .store = store_idle,
     .usage = "all, or a number of seconds since the last access (1 or more)"},
    {"recomp_algorithm", .show = show_recomp_algorithm, .store = attr_store_recomp_algorithm,
     .usage = "algo=NAME [priority=1..3] [level=N], e.g. 'algo=zstd priority=1'"},
    {"recompress", .store = attr_store_recompress,
     .usage = "[type=idle|huge|huge_idle] [threshold=BYTES] [max_pages=N] [algo=NAME|priority=N], "
              "e.g. 'type=idle'"},
    {"recompress_idle", .show = show_recompress_idle, .set_count = uzram_set_recompress_idle,
     .usage = "seconds a page must be unused before the background thread recompresses it, 0 "
              "for off"},
    {"recompress_rate", .show = show_recompress_rate, .set_count = uzram_set_recompress_rate,
     .usage = "pages per second the background thread may recompress, 0 for no limit"},
    {"recompress_cpu", .show = show_recompress_cpu, .set_count = set_recompress_cpu,
     .usage = "percent of one CPU the background thread may use (1..100)"},
    {"recompress_group", .show = show_recompress_group, .set_count = set_recompress_group,
     .usage = "pages of neighbours recompression packs into one object (2..16), 0 for off"},
    {"backing_dev", .show = show_backing_dev, .store = store_backing_dev,
     .usage = "the absolute path of a file or block device, or none (only while the device "
              "holds no data)"},
    {"writeback", .store = attr_store_writeback,
     .usage = "idle, huge, huge_idle or incompressible (or type=...), and/or page_index=N and "
              "page_indexes=FIRST-LAST, e.g. 'idle' or 'page_indexes=0-1023'"},
    {"writeback_limit", .show = show_writeback_limit, .set_count = uzram_set_writeback_limit,
     .usage = "a number of 4 KiB pages writeback may write while writeback_limit_enable is 1"},
    {"writeback_limit_enable", .show = show_writeback_limit_enable,
     .set_flag = uzram_set_writeback_limit_enable, .usage = "0 or 1"},
    {"bd_stat", .format = uzram_format_bd_stat},
    {"writeback_when_full", .show = show_writeback_when_full,
     .set_flag = uzram_set_writeback_when_full,
     .usage = "1: a write past mem_limit first writes back the coldest pages; 0: it fails"},
    {"writeback_idle", .show = show_writeback_idle, .set_count = uzram_set_writeback_idle,
     .usage = "seconds a page must be unused before the background thread writes it back, 0 "
              "for off"},
    {"writeback_rate", .show = show_writeback_rate, .set_count = uzram_set_writeback_rate,
     .usage = "pages per second the background thread may write back, 0 for no limit"},
};

#define ATTR_COUNT (sizeof attrs / sizeof attrs[0])

static const struct attr *attr_find(const char *name)
{
    for (size_t i = 0; name && i < ATTR_COUNT; i++)
        if (strcmp(attrs[i].name, name) == 0)
            return &attrs[i];
    return NULL;
}

static bool attr_writable(const struct attr *attr)
{
    return attr->store || attr->set_flag || attr->set_count;
}

int uzram_attr_get(struct uzram *dev, const char *name, char *buf, size_t size)
{
    const struct attr *attr = attr_find(name);
    if (!attr)
        return -ENOENT;
    if (attr->show)
        return attr->show(dev, buf, size);
    if (!attr->format)
        return -EACCES;
    struct uzram_stats stats = stats_of(dev);
    return attr->format(&stats, buf, size);
}

int uzram_attr_set(struct uzram *dev, const char *name, const char *value)
{
    const struct attr *attr = attr_find(name);
    if (!attr)
        return -ENOENT;
    if (!attr_writable(attr))
        return -EACCES;
    if (!value)
        return -EINVAL;
    if (attr->store)
        return attr->store(dev, value);
    if (attr->set_flag) {
        bool on;
        return parse_bool(value, &on) ?: attr->set_flag(dev, on);
    }
    uint64_t count;
    return attr_parse_count(value, &count) ?: attr->set_count(dev, count);
}

const char *uzram_attr_usage(const char *name)
{
    const struct attr *attr = attr_find(name);
    return attr ? attr->usage : NULL;
}

/* The names, space separated, made once from the table: zram's, each well under
 * ATTR_NAME_ROOM bytes. */
#define ATTR_NAME_ROOM 32u
static char name_list[ATTR_COUNT * ATTR_NAME_ROOM];
static pthread_once_t name_list_once = PTHREAD_ONCE_INIT;

static void make_name_list(void)
{
    size_t used = 0;
    for (size_t i = 0; i < ATTR_COUNT && used < sizeof name_list; i++)
        used += (size_t)snprintf(name_list + used, sizeof name_list - used, "%s%s", i ? " " : "",
                                 attrs[i].name);
}

const char *uzram_attr_names(void)
{
    pthread_once(&name_list_once, make_name_list);
    return name_list;
}
