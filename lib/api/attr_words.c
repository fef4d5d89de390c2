/* attr_words.c - the values of the attributes that take words (KEY=VALUE pairs, zram's
 * modes): algorithm_params, recomp_algorithm, recompress and writeback, parsed into the
 * library's calls; and the whole number every counting attribute takes. The table of
 * attributes that calls them is attr.c's. */
#include "api/attr_words.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_table.h"
#include "codec/comp.h"
#include "device/device.h"

/* A whole unsigned decimal number, with an optional trailing newline. */
int attr_parse_count(const char *value, uint64_t *out)
{
    size_t length = strcspn(value, "\n");
    if (length == 0 || length > 19 || strspn(value, "0123456789") != length)
        return -EINVAL;
    *out = strtoull(value, NULL, 10);
    return 0;
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
    if (!text || attr_parse_count(text, &number) < 0 || number > max)
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
    for (unsigned priority = CODEC_TABLE_PRIORITY_MAX + 1; priority-- > 0;) {
        struct codec_config config;
        if (codec_table_setting(&dev->codecs, priority, &config) &&
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
int attr_store_algorithm_params(struct uzram *dev, const char *value)
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
            rc = parse_number(arg, CODEC_TABLE_PRIORITY_MAX, &priority);
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
int attr_store_recomp_algorithm(struct uzram *dev, const char *value)
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
            rc = parse_number(arg, CODEC_TABLE_PRIORITY_MAX, &priority) ?: priority ? 0 : -EINVAL;
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
int attr_store_recompress(struct uzram *dev, const char *value)
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
            rc = parse_number(arg, CODEC_TABLE_PRIORITY_MAX, &priority) ?: priority ? 0 : -EINVAL;
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
int attr_store_writeback(struct uzram *dev, const char *value)
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
