/* config.c - reads the configuration file of `uzram serve` (systemd's INI syntax) into
 * sections and entries with their line numbers, so every complaint can name its line. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/config.h"

static char *trim(char *text)
{
    while (*text == ' ' || *text == '\t')
        text++;
    size_t length = strlen(text);
    while (length > 0 &&
           (text[length - 1] == ' ' || text[length - 1] == '\t' || text[length - 1] == '\r'))
        text[--length] = '\0';
    return text;
}

/* The whole file, NUL-terminated; a file with a NUL byte is not text. */
static int read_text(const char *path, char **text, char *error, size_t error_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        snprintf(error, error_size, "cannot read %s: %s", path, strerror(err));
        return -err;
    }
    struct stat st;
    int rc = 0;
    char *buffer = NULL;
    size_t length = 0;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(error, error_size, "cannot read %s: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        rc = -EISDIR;
        snprintf(error, error_size, "%s is a directory; give the configuration file", path);
    } else if ((buffer = malloc(CONFIG_MAX_BYTES + 1)) == NULL) {
        rc = -ENOMEM;
        snprintf(error, error_size, "cannot read %s: out of memory", path);
    }
    while (rc == 0) {
        ssize_t n = read(fd, buffer + length, CONFIG_MAX_BYTES + 1 - length);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            snprintf(error, error_size, "cannot read %s: %s", path, strerror(errno));
        } else if (n == 0) {
            break;
        } else if ((length += (size_t)n) > CONFIG_MAX_BYTES) {
            rc = -EFBIG;
            snprintf(error, error_size, "%s is larger than %u KiB; is it the configuration file?",
                     path, CONFIG_MAX_BYTES >> 10);
        }
    }
    close(fd);
    if (rc == 0 && memchr(buffer, '\0', length) != NULL) {
        rc = -EINVAL;
        snprintf(error, error_size, "%s holds a NUL byte; is it the configuration file?", path);
    }
    if (rc < 0) {
        free(buffer);
        return rc;
    }
    buffer[length] = '\0';
    *text = buffer;
    return 0;
}

/* Room for one more element in an array whose capacity is implicit: 4, 8, 16, ...
 * Returns the (maybe moved) array, or NULL when out of memory. */
static void *room_for_one_more(void *array, size_t count, size_t element)
{
    bool full = count == 0 || (count >= 4 && (count & (count - 1)) == 0);
    if (!full)
        return array;
    return realloc(array, (count ? count * 2 : 4) * element);
}

/* ---- an index of names: a file of many sections or keys reads in linear time ---- */

/* Open addressing: slots hold the position of a name in its array + 1 (0: empty), at most
 * half of them used. `name_of` gives the name at a position. */
struct config_index {
    uint32_t *slots;
    size_t size, used;
    size_t *comparisons; /* counted here */
    const char *(*name_of)(const void *array, uint32_t position);
    const void *array;
};

static size_t hash_name(const char *name)
{
    size_t hash = 14695981039346656037u; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        hash = (hash ^ *c) * 1099511628211u;
    return hash;
}

/* The slot of `name`: the one holding it, or the empty one where it would go. */
static uint32_t *index_slot(const struct config_index *index, const char *name)
{
    for (size_t at = hash_name(name);; at++) {
        uint32_t *slot = &index->slots[at & (index->size - 1)];
        if (*slot == 0)
            return slot;
        ++*index->comparisons;
        if (strcmp(index->name_of(index->array, *slot - 1), name) == 0)
            return slot;
    }
}

/* The position of `name`, or -1. */
static long index_find(const struct config_index *index, const char *name)
{
    if (index->size == 0)
        return -1;
    uint32_t slot = *index_slot(index, name);
    return slot ? (long)slot - 1 : -1;
}

/* Add the name at `position` (not in the index yet; `array` may have moved). 0 or -ENOMEM. */
static int index_add(struct config_index *index, const void *array, uint32_t position)
{
    index->array = array;
    if (2 * (index->used + 1) > index->size) {
        struct config_index bigger = *index;
        bigger.size = index->size ? 2 * index->size : 16;
        bigger.slots = calloc(bigger.size, sizeof *bigger.slots);
        if (bigger.slots == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < index->size; i++)
            if (index->slots[i])
                *index_slot(&bigger, index->name_of(array, index->slots[i] - 1)) = index->slots[i];
        free(index->slots);
        *index = bigger;
    }
    *index_slot(index, index->name_of(array, position)) = position + 1;
    index->used++;
    return 0;
}

static const char *section_name(const void *array, uint32_t position)
{
    return ((const struct config_section *)array)[position].name;
}

static const char *entry_key(const void *array, uint32_t position)
{
    return ((const struct config_entry *)array)[position].key;
}

/* ---- the lines ----------------------------------------------------------------------- */

/* "[NAME]" (its brackets cut off in `text`, of `length`) at `line`: a new section, and a new
 * index for its keys. */
static int add_section(struct config *config, struct config_index *keys, char *text, size_t length,
                       unsigned line, char *error, size_t error_size)
{
    const char *path = config->path;
    if (text[length - 1] != ']') {
        snprintf(error, error_size, "%s:%u: a section line is [NAME], not '%s'", path, line, text);
        return -EINVAL;
    }
    text[length - 1] = '\0';
    char *name = trim(text + 1);
    const struct config_section *earlier = config_section(config, name);
    if (earlier != NULL) {
        snprintf(error, error_size,
                 "%s:%u: section [%s] again (first at line %u); one section per device", path, line,
                 name, earlier->line);
        return -EINVAL;
    }
    struct config_section *bigger =
        room_for_one_more(config->sections, config->section_count, sizeof *bigger);
    if (bigger == NULL || config->section_count >= UINT32_MAX - 1)
        goto no_memory;
    config->sections = bigger;
    config->sections[config->section_count] = (struct config_section){.name = name, .line = line};
    if (index_add(config->index, bigger, (uint32_t)config->section_count) < 0)
        goto no_memory;
    config->section_count++;
    free(keys->slots);
    *keys = (struct config_index){.name_of = entry_key, .comparisons = &config->comparisons};
    return 0;
no_memory:
    snprintf(error, error_size, "cannot read %s: out of memory", path);
    return -ENOMEM;
}

/* "KEY = VALUE" (`text`, with `equals` at its '=') at `line`, in the last section. */
static int add_entry(struct config *config, struct config_index *keys, char *text, char *equals,
                     unsigned line, char *error, size_t error_size)
{
    const char *path = config->path;
    *equals = '\0';
    char *key = trim(text), *value = trim(equals + 1);
    if (*key == '\0') {
        snprintf(error, error_size, "%s:%u: a key is missing before '='", path, line);
        return -EINVAL;
    }
    if (config->section_count == 0) {
        snprintf(error, error_size,
                 "%s:%u: key '%s' comes before any [NAME] section; put it in the section "
                 "of its device",
                 path, line, key);
        return -EINVAL;
    }
    struct config_section *section = &config->sections[config->section_count - 1];
    long earlier = index_find(keys, key);
    if (earlier >= 0) {
        snprintf(error, error_size, "%s:%u: key '%s' again in [%s] (first at line %u)", path, line,
                 key, section->name, section->entries[earlier].line);
        return -EINVAL;
    }
    struct config_entry *bigger =
        room_for_one_more(section->entries, section->entry_count, sizeof *bigger);
    if (bigger == NULL || section->entry_count >= UINT32_MAX - 1)
        goto no_memory;
    section->entries = bigger;
    section->entries[section->entry_count] =
        (struct config_entry){.key = key, .value = value, .line = line};
    if (index_add(keys, bigger, (uint32_t)section->entry_count) < 0)
        goto no_memory;
    section->entry_count++;
    return 0;
no_memory:
    snprintf(error, error_size, "cannot read %s: out of memory", path);
    return -ENOMEM;
}

int config_load(const char *path, struct config **out, char *error, size_t error_size)
{
    struct config *config = calloc(1, sizeof *config);
    struct config_index *sections = calloc(1, sizeof *sections);
    if (config == NULL || sections == NULL) {
        free(config);
        free(sections);
        snprintf(error, error_size, "cannot read %s: out of memory", path);
        return -ENOMEM;
    }
    *sections = (struct config_index){.name_of = section_name, .comparisons = &config->comparisons};
    config->path = path;
    config->index = sections;
    struct config_index keys = {.name_of = entry_key, .comparisons = &config->comparisons};
    int rc = read_text(path, &config->text, error, error_size);
    char *next = config->text;
    unsigned line = 0;
    while (rc == 0 && next != NULL && *next != '\0') {
        char *text = next;
        next = strchr(text, '\n');
        if (next != NULL)
            *next++ = '\0';
        line++;
        text = trim(text);
        if (*text == '\0' || *text == '#' || *text == ';')
            continue;
        char *equals = strchr(text, '=');
        if (text[0] == '[')
            rc = add_section(config, &keys, text, strlen(text), line, error, error_size);
        else if (equals != NULL)
            rc = add_entry(config, &keys, text, equals, line, error, error_size);
        else {
            snprintf(error, error_size,
                     "%s:%u: expected [NAME], KEY = VALUE or a # comment, not '%s'", path, line,
                     text);
            rc = -EINVAL;
        }
    }
    free(keys.slots);
    if (rc < 0) {
        config_free(config);
        return rc;
    }
    *out = config;
    return 0;
}

void config_free(struct config *config)
{
    if (config == NULL)
        return;
    for (size_t i = 0; i < config->section_count; i++)
        free(config->sections[i].entries);
    free(config->sections);
    if (config->index != NULL)
        free(config->index->slots);
    free(config->index);
    free(config->text);
    free(config);
}

const struct config_section *config_section(const struct config *config, const char *name)
{
    long position = index_find(config->index, name);
    return position < 0 ? NULL : &config->sections[position];
}
