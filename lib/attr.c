/* attr.c - reading and writing device attributes by zram's sysfs names.
 * The control socket and `uzram attr` go through here, so names live in one place. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs.h"
#include "comp.h"
#include "device.h"
#include "recompress.h"
#include "stats.h"
#include "writeback.h"
#include "uzram.h"

enum attr_access { ATTR_READ = 1, ATTR_WRITE = 2 };

struct attr {
    const char *name;
    unsigned access;
    const char *usage; /* what a write takes, for the error that refuses one */
};

static const struct attr attrs[] = {
    {"disksize", ATTR_READ, NULL},
    {"initstate", ATTR_READ, NULL},
    {"comp_algorithm", ATTR_READ | ATTR_WRITE, "an algorithm name from the list it shows"},
    {"algorithm_params", ATTR_READ | ATTR_WRITE,
     "[algo=NAME|priority=N] [level=N] [dict=PATH|auto] [dict_size=BYTES], e.g. "
     "'priority=1 level=7 dict=auto'"},
    {"same_filled", ATTR_READ | ATTR_WRITE, "0 or 1"},
    {"use_dedup", ATTR_READ | ATTR_WRITE, "0 or 1"},
    {"mem_limit", ATTR_READ | ATTR_WRITE, "a size in bytes (K/M/G/T), 0 for none"},
    {"mem_used_max", ATTR_READ | ATTR_WRITE, "0 (resets the peak)"},
    {"mm_stat", ATTR_READ, NULL},
    {"io_stat", ATTR_READ, NULL},
    {"debug_stat", ATTR_READ, NULL},
    {"stat_json", ATTR_READ, NULL},
    {"compact", ATTR_WRITE, "any value"},
    {"reset", ATTR_WRITE, "1"},
    {"idle", ATTR_WRITE, "all, or a number of seconds since the last access (1 or more)"},
    {"recomp_algorithm", ATTR_READ | ATTR_WRITE,
     "algo=NAME [priority=1..3] [level=N], e.g. 'algo=zstd priority=1'"},
    {"recompress", ATTR_WRITE,
     "[type=idle|huge|huge_idle] [threshold=BYTES] [max_pages=N] [algo=NAME|priority=N], "
     "e.g. 'type=idle'"},
    {"recompress_idle", ATTR_READ | ATTR_WRITE,
     "seconds a page must be unused before the background thread recompresses it, 0 for off"},
    {"recompress_rate", ATTR_READ | ATTR_WRITE,
     "pages per second the background thread may recompress, 0 for no limit"},
    {"backing_dev", ATTR_READ | ATTR_WRITE,
     "the absolute path of a file or block device, or none (only while the device holds no "
     "data)"},
    {"writeback", ATTR_WRITE,
     "idle, huge, huge_idle or incompressible (or type=...), and/or page_index=N and "
     "page_indexes=FIRST-LAST, e.g. 'idle' or 'page_indexes=0-1023'"},
    {"writeback_limit", ATTR_READ | ATTR_WRITE,
     "a number of 4 KiB pages writeback may write while writeback_limit_enable is 1"},
    {"writeback_limit_enable", ATTR_READ | ATTR_WRITE, "0 or 1"},
    {"bd_stat", ATTR_READ, NULL},
    {"writeback_when_full", ATTR_READ | ATTR_WRITE,
     "1: a write past mem_limit first writes back the coldest pages; 0: it fails"},
    {"writeback_idle", ATTR_READ | ATTR_WRITE,
     "seconds a page must be unused before the background thread writes it back, 0 for off"},
    {"writeback_rate", ATTR_READ | ATTR_WRITE,
     "pages per second the background thread may write back, 0 for no limit"},
};

const char *uzram_attr_names(void)
{
    return "disksize initstate comp_algorithm algorithm_params same_filled use_dedup "
           "mem_limit mem_used_max mm_stat io_stat debug_stat stat_json compact reset idle "
           "recomp_algorithm recompress recompress_idle recompress_rate backing_dev writeback "
           "writeback_limit writeback_limit_enable bd_stat writeback_when_full writeback_idle "
           "writeback_rate";
}

static const struct attr *attr_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof attrs / sizeof attrs[0]; i++)
        if (strcmp(attrs[i].name, name) == 0)
            return &attrs[i];
    return NULL;
}

const char *uzram_attr_usage(const char *name)
{
    const struct attr *attr = attr_find(name);
    return attr ? attr->usage : NULL;
}

static int print(char *buf, size_t size, const char *fmt, uint64_t value)
{
    int length = snprintf(buf, size, fmt, value);
    return length < 0 || (size_t)length >= size ? -ERANGE : length;
}

/* The primary first, as before ("algo=lz4 level=1"), then one line per
 * secondary algorithm with its priority and dictionary. */
static int show_algorithm_params(struct uzram *dev, char *buf, size_t size)
{
    size_t used = 0;
    int rc = 0;
    for (unsigned priority = 0; priority <= CODECS_PRIORITY_MAX && rc == 0; priority++) {
        struct codec_config config;
        if (!codecs_setting(&dev->codecs, priority, &config))
            continue;
        if (priority)
            rc = text_append(buf, size, &used, "priority=%u ", priority);
        if (rc == 0)
            rc = text_append(buf, size, &used, "algo=%s level=%d", comp_name(config.algorithm),
                             config.level);
        if (rc == 0 && config.dict_auto)
            rc = config.dict
                     ? text_append(buf, size, &used, " dict=auto (trained, %zu bytes in memory)",
                                   comp_dict_memory(config.dict))
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
    for (unsigned priority = 1; priority <= CODECS_PRIORITY_MAX; priority++) {
        struct codec_config config;
        if (!codecs_setting(&dev->codecs, priority, &config))
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
    if (strcmp(name, "algorithm_params") == 0)
        return show_algorithm_params(dev, buf, size);
    if (strcmp(name, "recomp_algorithm") == 0)
        return show_recomp_algorithm(dev, buf, size);
    if (strcmp(name, "recompress_idle") == 0 || strcmp(name, "recompress_rate") == 0) {
        uint64_t idle_seconds, rate;
        int priority_class;
        recompressor_settings(dev, &idle_seconds, &rate, &priority_class);
        return print(buf, size, "%" PRIu64 "\n",
                     strcmp(name, "recompress_rate") == 0 ? rate : idle_seconds);
    }
    if (strcmp(name, "backing_dev") == 0) {
        int length = uzram_get_backing_dev(dev, buf, size > 0 ? size - 1 : 0);
        if (length < 0)
            return -ERANGE;
        buf[length++] = '\n';
        buf[length] = '\0';
        return length;
    }
    if (strcmp(name, "writeback_when_full") == 0 || strcmp(name, "writeback_idle") == 0 ||
        strcmp(name, "writeback_rate") == 0) {
        struct writeback_settings settings;
        writeback_settings(dev, &settings);
        return print(buf, size, "%" PRIu64 "\n",
                     strcmp(name, "writeback_when_full") == 0 ? (uint64_t)settings.when_full
                     : strcmp(name, "writeback_idle") == 0    ? settings.idle_seconds
                                                              : settings.rate);
    }
    if (strcmp(name, "writeback_limit") == 0)
        return print(buf, size, "%" PRIu64 "\n", stats.writeback_limit);
    if (strcmp(name, "writeback_limit_enable") == 0)
        return print(buf, size, "%" PRIu64 "\n", stats.writeback_limit_enable);
    if (strcmp(name, "bd_stat") == 0)
        return uzram_format_bd_stat(&stats, buf, size);
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

/* The words of an attribute value: KEY=VALUE pairs split on blanks. */
struct words {
    char *copy;
    char *save;
    bool started;
};

static char *next_word(struct words *words, char **value)
{
    char *word = strtok_r(words->started ? NULL : words->copy, " \t\n", &words->save);
    words->started = true;
    if (!word)
        return NULL;
    char *equals = strchr(word, '=');
    *value = equals ? equals + 1 : NULL;
    if (equals)
        *equals = '\0';
    return word;
}

static int parse_number(const char *text, uint64_t max, uint64_t *out)
{
    uint64_t number;
    if (!text || parse_count(text, &number) < 0 || number > max)
        return -EINVAL;
    *out = number;
    return 0;
}

static int parse_level(const char *text, long *level)
{
    char *end;
    *level = strtol(text, &end, 10);
    return end == text || *end || *level < -1000000 || *level > 1000000 ? -EINVAL : 0;
}

/* The priority an algo=NAME names: the secondary that has it, else 0 when it
 * is the primary; -1 when none has it. */
static int priority_of(struct uzram *dev, const char *name)
{
    for (unsigned priority = CODECS_PRIORITY_MAX + 1; priority-- > 0;) {
        struct codec_config config;
        if (codecs_setting(&dev->codecs, priority, &config) &&
            strcmp(comp_name(config.algorithm), name) == 0)
            return (int)priority;
    }
    return -1;
}

/* Read a dictionary file whole (at most COMP_DICT_MAX bytes). */
static int read_file(const char *path, void **content, size_t *size)
{
    FILE *file = fopen(path, "rb");
    if (!file)
        return -errno;
    char *buf = malloc(COMP_DICT_MAX + 1);
    size_t length = buf ? fread(buf, 1, COMP_DICT_MAX + 1, file) : 0;
    int rc = !buf ? -ENOMEM : ferror(file) ? -EIO : length > COMP_DICT_MAX ? -EFBIG : 0;
    fclose(file);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *content = buf;
    *size = length;
    return 0;
}

/* dict=auto's size unless dict_size= says: see docs/BENCHMARKS.md for the
 * measurements behind it. */
#define DEFAULT_DICT_SIZE (64u * 1024u)

/* algorithm_params: [algo=NAME|priority=N] [level=N] [dict=PATH|auto]
 * [dict_size=BYTES]. The words set the level and dictionary of one
 * algorithm together, as zram's do. algo=NAME of no configured algorithm
 * chooses the primary algorithm (while the device is empty). */
static int parse_algorithm_params(struct uzram *dev, const char *value)
{
    struct words words = {.copy = strdup(value)};
    if (!words.copy)
        return -ENOMEM;
    const char *algo = NULL, *dict = NULL;
    uint64_t priority = UINT64_MAX, dict_size = 0;
    long level = 0;
    int rc = 0;
    char *word, *arg;
    while (rc == 0 && (word = next_word(&words, &arg))) {
        if (!arg)
            rc = -EINVAL;
        else if (strcmp(word, "level") == 0)
            rc = parse_level(arg, &level);
        else if (strcmp(word, "algo") == 0 && *arg)
            algo = arg;
        else if (strcmp(word, "priority") == 0)
            rc = parse_number(arg, CODECS_PRIORITY_MAX, &priority);
        else if (strcmp(word, "dict") == 0 && *arg)
            dict = arg;
        else if (strcmp(word, "dict_size") == 0)
            rc = parse_number(arg, COMP_DICT_MAX, &dict_size);
        else
            rc = -EINVAL;
    }
    if (rc == 0 && algo && priority == UINT64_MAX) {
        int found = priority_of(dev, algo);
        if (found < 0 && !dict) {
            /* a new primary algorithm, as before recompression existed */
            rc = uzram_set_algorithm(dev, algo, (int)level);
            free(words.copy);
            return rc;
        }
        priority = found < 0 ? 0 : (uint64_t)found;
    }
    if (priority == UINT64_MAX)
        priority = 0;
    void *content = NULL;
    size_t size = 0;
    if (rc == 0 && dict && strcmp(dict, "auto") == 0)
        size = dict_size ? dict_size : DEFAULT_DICT_SIZE;
    else if (rc == 0 && dict)
        rc = dict_size ? -EINVAL : read_file(dict, &content, &size);
    if (rc == 0 && dict && size == 0)
        rc = -EINVAL;
    if (rc == 0 && dict_size && !dict)
        rc = -EINVAL;
    if (rc == 0)
        rc = uzram_set_algorithm_params(dev, (unsigned)priority, (int)level, content, size);
    free(content);
    free(words.copy);
    return rc;
}

/* recomp_algorithm: algo=NAME [priority=1..3] [level=N]. */
static int parse_recomp_algorithm(struct uzram *dev, const char *value)
{
    struct words words = {.copy = strdup(value)};
    if (!words.copy)
        return -ENOMEM;
    const char *algo = NULL;
    uint64_t priority = 1;
    long level = 0;
    int rc = 0;
    char *word, *arg;
    while (rc == 0 && (word = next_word(&words, &arg))) {
        if (arg && strcmp(word, "algo") == 0 && *arg)
            algo = arg;
        else if (arg && strcmp(word, "priority") == 0)
            rc = parse_number(arg, CODECS_PRIORITY_MAX, &priority) ?: priority ? 0 : -EINVAL;
        else if (arg && strcmp(word, "level") == 0)
            rc = parse_level(arg, &level);
        else
            rc = -EINVAL;
    }
    if (rc == 0)
        rc = algo ? uzram_set_recomp_algorithm(dev, (unsigned)priority, algo, (int)level) : -EINVAL;
    free(words.copy);
    return rc;
}

/* A word of a table of names: zram's type= words. */
struct named_type {
    const char *name;
    unsigned type;
};

static int find_type(const struct named_type *types, size_t count, const char *text, unsigned *type)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(text, types[i].name) == 0) {
            *type = types[i].type;
            return 0;
        }
    return -EINVAL;
}

static int parse_type(const char *text, unsigned *type)
{
    static const struct named_type types[] = {
        {"idle", UZRAM_RECOMPRESS_IDLE},
        {"huge", UZRAM_RECOMPRESS_HUGE},
        {"huge_idle", UZRAM_RECOMPRESS_IDLE | UZRAM_RECOMPRESS_HUGE},
    };
    return find_type(types, sizeof types / sizeof types[0], text, type);
}

/* recompress: [type=idle|huge|huge_idle] [threshold=BYTES] [max_pages=N]
 * [algo=NAME|priority=N]. */
static int parse_recompress(struct uzram *dev, const char *value)
{
    struct words words = {.copy = strdup(value)};
    if (!words.copy)
        return -ENOMEM;
    unsigned type = 0;
    uint64_t threshold = 0, max_pages = 0, priority = 0;
    int rc = 0;
    char *word, *arg;
    while (rc == 0 && (word = next_word(&words, &arg))) {
        if (!arg) {
            rc = -EINVAL;
        } else if (strcmp(word, "type") == 0) {
            rc = parse_type(arg, &type);
        } else if (strcmp(word, "threshold") == 0) {
            rc = parse_number(arg, UZRAM_PAGE_SIZE, &threshold);
        } else if (strcmp(word, "max_pages") == 0) {
            rc = parse_number(arg, UINT64_MAX / 2, &max_pages);
        } else if (strcmp(word, "priority") == 0) {
            rc = parse_number(arg, CODECS_PRIORITY_MAX, &priority) ?: priority ? 0 : -EINVAL;
        } else if (strcmp(word, "algo") == 0) {
            int found = priority_of(dev, arg);
            rc = found > 0 ? 0 : -ENOENT;
            priority = found > 0 ? (uint64_t)found : 0;
        } else {
            rc = -EINVAL;
        }
    }
    free(words.copy);
    return rc < 0 ? rc
                  : uzram_recompress(dev, type, threshold, max_pages, (unsigned)priority, NULL);
}

/* backing_dev: an absolute path (the whole value but its newline), or
 * "none". A relative one would be taken from the server's working folder,
 * which whoever writes the attribute does not see. */
static int parse_backing_dev(struct uzram *dev, const char *value)
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

/* zram's writeback modes, as words or as type=WORD. */
static int parse_writeback_type(const char *text, unsigned *type)
{
    static const struct named_type types[] = {
        {"idle", UZRAM_WRITEBACK_IDLE},
        {"huge", UZRAM_WRITEBACK_HUGE},
        {"huge_idle", UZRAM_WRITEBACK_IDLE | UZRAM_WRITEBACK_HUGE},
        {"incompressible", UZRAM_WRITEBACK_INCOMPRESSIBLE},
    };
    return find_type(types, sizeof types / sizeof types[0], text, type);
}

#define WRITEBACK_RANGES 64

/* "FIRST-LAST" (page_indexes) or "N" (page_index). */
static int parse_page_range(const char *text, bool range, uint64_t *first, uint64_t *last)
{
    char number[24];
    const char *dash = range ? strchr(text, '-') : NULL;
    if (range && !dash)
        return -EINVAL;
    size_t length = dash ? (size_t)(dash - text) : strlen(text);
    if (length == 0 || length >= sizeof number)
        return -EINVAL;
    memcpy(number, text, length);
    number[length] = '\0';
    int rc = parse_number(number, UINT64_MAX - 1, first);
    *last = *first;
    if (rc == 0 && dash)
        rc = parse_number(dash + 1, UINT64_MAX - 1, last);
    return rc < 0 || *last < *first ? -EINVAL : 0;
}

/* writeback: zram's modes (idle, huge, huge_idle, incompressible, also as
 * type=MODE) and pages (page_index=N, page_indexes=FIRST-LAST, several of
 * either; page=N too). With both, the mode picks among those pages. */
static int parse_writeback(struct uzram *dev, const char *value)
{
    struct words words = {.copy = strdup(value)};
    if (!words.copy)
        return -ENOMEM;
    unsigned type = 0;
    bool typed = false;
    uint64_t first[WRITEBACK_RANGES], last[WRITEBACK_RANGES];
    unsigned ranges = 0;
    int rc = 0;
    char *word, *arg;
    while (rc == 0 && (word = next_word(&words, &arg))) {
        bool range = strcmp(word, "page_indexes") == 0;
        if (!arg && !typed) {
            rc = parse_writeback_type(word, &type);
            typed = true;
        } else if (arg && strcmp(word, "type") == 0 && !typed) {
            rc = parse_writeback_type(arg, &type);
            typed = true;
        } else if (arg && (range || strcmp(word, "page_index") == 0 || strcmp(word, "page") == 0) &&
                   ranges < WRITEBACK_RANGES) {
            rc = parse_page_range(arg, range, &first[ranges], &last[ranges]);
            ranges++;
        } else {
            rc = -EINVAL;
        }
    }
    free(words.copy);
    if (rc == 0 && !typed && ranges == 0)
        rc = -EINVAL; /* zram writes back nothing for an empty request */
    if (rc == 0 && ranges == 0)
        return uzram_writeback(dev, type, 0, UINT64_MAX, NULL);
    for (unsigned i = 0; i < ranges && rc == 0; i++)
        rc = uzram_writeback(dev, type, first[i], last[i], NULL);
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
    if (strcmp(name, "recomp_algorithm") == 0)
        return parse_recomp_algorithm(dev, value);
    if (strcmp(name, "recompress") == 0)
        return parse_recompress(dev, value);
    if (strcmp(name, "backing_dev") == 0)
        return parse_backing_dev(dev, value);
    if (strcmp(name, "writeback") == 0)
        return parse_writeback(dev, value);
    if (strcmp(name, "writeback_limit_enable") == 0 || strcmp(name, "writeback_when_full") == 0) {
        int rc = parse_bool(value, &on);
        return rc < 0 ? rc
               : strcmp(name, "writeback_when_full") == 0
                   ? uzram_set_writeback_when_full(dev, on)
                   : uzram_set_writeback_limit_enable(dev, on);
    }
    if (strcmp(name, "writeback_limit") == 0 || strcmp(name, "writeback_idle") == 0 ||
        strcmp(name, "writeback_rate") == 0) {
        uint64_t number;
        int rc = parse_count(value, &number);
        return rc < 0                                 ? rc
               : strcmp(name, "writeback_limit") == 0 ? uzram_set_writeback_limit(dev, number)
               : strcmp(name, "writeback_idle") == 0  ? uzram_set_writeback_idle(dev, number)
                                                      : uzram_set_writeback_rate(dev, number);
    }
    if (strcmp(name, "recompress_idle") == 0 || strcmp(name, "recompress_rate") == 0) {
        uint64_t number;
        int rc = parse_count(value, &number);
        return rc < 0                                 ? rc
               : strcmp(name, "recompress_rate") == 0 ? uzram_set_recompress_rate(dev, number)
                                                      : uzram_set_recompress_idle(dev, number);
    }
    /* reset */
    if (parse_bool(value, &on) || !on)
        return -EINVAL;
    return uzram_reset(dev);
}
