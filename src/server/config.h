/* config.h - the configuration file of `uzram serve`: systemd's INI syntax, a [NAME] section
 * per device. This file only reads the syntax; server/serve_options.c knows the keys (serve's
 * options).
 */
#ifndef UZRAM_SERVER_CONFIG_H
#define UZRAM_SERVER_CONFIG_H

#include <stddef.h>

struct config_index;

/* Larger files are refused: a configuration is a few lines per device. */
#define CONFIG_MAX_BYTES (1u << 20)

struct config_entry {
    const char *key, *value; /* trimmed; value may be "" */
    unsigned line;
};

struct config_section {
    const char *name; /* the text between the brackets, trimmed */
    unsigned line;
    struct config_entry *entries;
    size_t entry_count;
};

struct config {
    const char *path;
    struct config_section *sections;
    size_t section_count;
    char *text;                 /* the file, cut into the strings above */
    struct config_index *index; /* the sections by name (config.c) */
    size_t comparisons;         /* of names, by config_load(): about one per line (tests) */
};

/* Read `path`: blank lines and lines starting with '#' or ';' are comments, "[NAME]" starts a
 * section, "KEY = VALUE" belongs to the last section. A line that is none of these, a key
 * before the first section, a section or a key given twice, or an unreadable file: returns
 * a negative errno and one line in `error` naming the file and the line ("FILE:LINE: ..."). */
int config_load(const char *path, struct config **out, char *error, size_t error_size);
void config_free(struct config *config);

/* The section called `name`, or NULL. */
const struct config_section *config_section(const struct config *config, const char *name);

#endif
