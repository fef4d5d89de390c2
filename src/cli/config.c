/* config.c - reads the configuration file of `uzram serve` (systemd's INI syntax) into
 * sections and entries with their line numbers, so every complaint can name its line. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/config.h"

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

int config_load(const char *path, struct config **out, char *error, size_t error_size)
{
    struct config *config = calloc(1, sizeof *config);
    if (config == NULL) {
        snprintf(error, error_size, "cannot read %s: out of memory", path);
        return -ENOMEM;
    }
    config->path = path;
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
        size_t length = strlen(text);
        if (text[0] == '[') {
            if (text[length - 1] != ']') {
                snprintf(error, error_size, "%s:%u: a section line is [NAME], not '%s'", path, line,
                         text);
                rc = -EINVAL;
                break;
            }
            text[length - 1] = '\0';
            char *name = trim(text + 1);
            const struct config_section *earlier = config_section(config, name);
            if (earlier != NULL) {
                snprintf(error, error_size,
                         "%s:%u: section [%s] again (first at line %u); one section per device",
                         path, line, name, earlier->line);
                rc = -EINVAL;
                break;
            }
            struct config_section *bigger =
                room_for_one_more(config->sections, config->section_count, sizeof *bigger);
            if (bigger == NULL) {
                rc = -ENOMEM;
                snprintf(error, error_size, "cannot read %s: out of memory", path);
                break;
            }
            config->sections = bigger;
            config->sections[config->section_count++] =
                (struct config_section){.name = name, .line = line};
            continue;
        }
        char *equals = strchr(text, '=');
        if (equals == NULL) {
            snprintf(error, error_size,
                     "%s:%u: expected [NAME], KEY = VALUE or a # comment, not '%s'", path, line,
                     text);
            rc = -EINVAL;
            break;
        }
        *equals = '\0';
        char *key = trim(text), *value = trim(equals + 1);
        if (*key == '\0') {
            snprintf(error, error_size, "%s:%u: a key is missing before '='", path, line);
            rc = -EINVAL;
            break;
        }
        if (config->section_count == 0) {
            snprintf(error, error_size,
                     "%s:%u: key '%s' comes before any [NAME] section; put it in the section "
                     "of its device",
                     path, line, key);
            rc = -EINVAL;
            break;
        }
        struct config_section *section = &config->sections[config->section_count - 1];
        for (size_t i = 0; i < section->entry_count; i++) {
            if (strcmp(section->entries[i].key, key) == 0) {
                snprintf(error, error_size, "%s:%u: key '%s' again in [%s] (first at line %u)",
                         path, line, key, section->name, section->entries[i].line);
                rc = -EINVAL;
                break;
            }
        }
        if (rc < 0)
            break;
        struct config_entry *bigger =
            room_for_one_more(section->entries, section->entry_count, sizeof *bigger);
        if (bigger == NULL) {
            rc = -ENOMEM;
            snprintf(error, error_size, "cannot read %s: out of memory", path);
            break;
        }
        section->entries = bigger;
        section->entries[section->entry_count++] =
            (struct config_entry){.key = key, .value = value, .line = line};
    }
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
    free(config->text);
    free(config);
}

const struct config_section *config_section(const struct config *config, const char *name)
{
    for (size_t i = 0; i < config->section_count; i++)
        if (strcmp(config->sections[i].name, name) == 0)
            return &config->sections[i];
    return NULL;
}
