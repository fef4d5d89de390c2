/* zramgen.h - zram-generator's configuration (zram-generator.conf(5)) as uzram reads it: the
 * files and their precedence, each [zramN] section's keys, and what the device becomes in
 * uzram (zramgen_conf.c); `uzram zram-generator`, which serves a device, sets up its swap or
 * mount and writes the systemd units at boot from it (zramgen.c). */
#ifndef UZRAM_ZRAMGEN_H
#define UZRAM_ZRAMGEN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sizes.h"

/* The keys of a [zramN] section, in the order of zram-generator.conf(5). */
enum zramgen_key {
    ZG_HOST_MEMORY_LIMIT,
    ZG_ZRAM_SIZE,
    ZG_RESIDENT_LIMIT,
    ZG_COMPRESSION,
    ZG_WRITEBACK,
    ZG_SWAP_PRIORITY,
    ZG_MOUNT_POINT,
    ZG_FS_TYPE,
    ZG_OPTIONS,
    ZG_FRACTION, /* obsolete: zram-fraction */
    ZG_MAX_SIZE, /* obsolete: max-zram-size */
    ZG_KEY_COUNT
};

/* A key's value where it was last set (NULL value: not set). */
struct zramgen_setting {
    const char *value;
    const char *file;
    unsigned line;
};

#define ZRAMGEN_NAME_MAX 24

/* One [zramN] section, and what zramgen_load() made of it. */
struct zramgen_device {
    char name[ZRAMGEN_NAME_MAX];
    struct zramgen_setting set[ZG_KEY_COUNT];
    bool created;       /* false: host-memory-limit below MemTotal, or a size of 0 */
    char why_not[192];  /* why it is not created */
    uint64_t disksize;  /* bytes, whole 4 KiB pages */
    uint64_t mem_limit; /* bytes, 0: none (zram-resident-limit; for swap, the size) */
    bool mem_limit_is_size;
    char algorithm[32];   /* "": uzram's default */
    char level[16];       /* "": the algorithm's default */
    char recompress[600]; /* serve's --recompress SPEC, "": none */
    bool swap;            /* neither a mount point nor another fs-type */
    int swap_priority;
    const char *writeback; /* writeback-device: serve's --backing-file, or NULL */
    const char *mount_point, *fs_type, *options;
};

struct zramgen_config {
    char root[PATH_MAX]; /* ZRAM_GENERATOR_ROOT, or "" */
    uint64_t ram;        /* MemTotal, bytes */
    char **files;        /* the files read, in order (origins point here) */
    char **texts;        /* their contents (values point here) */
    size_t file_count;
    struct zramgen_device *devices;
    size_t device_count;
    struct sizes_variable variables[33]; /* ram, then set!'s */
    char variable_names[32][64];
    size_t variable_count;
    bool disabled; /* systemd.zram=0 on the kernel command line */
};

/* Read the configuration: `path` and its PATH.d/ *.conf drop-ins, or (NULL) zram-generator's
 * places under ZRAM_GENERATOR_ROOT: the last of {/usr/lib, /usr/local/lib, /etc,
 * /run}/systemd/zram-generator.conf that exists, then every zram-generator.conf.d/ *.conf of
 * those directories by file name (a later directory's file of the same name replaces an
 * earlier one's; a link to /dev/null masks it). The kernel's systemd.zram option is obeyed
 * as zram-generator does. Unknown keys and sections, and settings uzram cannot follow, are
 * warned about on stderr with FILE:LINE; a bad value is an error (-EINVAL, with FILE:LINE in
 * `error`), as it is for zram-generator. */
int zramgen_load(const char *path, struct zramgen_config **out, char *error, size_t error_size);
void zramgen_free(struct zramgen_config *config);
struct zramgen_device *zramgen_device(struct zramgen_config *config, const char *name);

/* The `uzram serve` command line of a created device (argv[0] "uzram serve"): at most
 * ZRAMGEN_ARGS_MAX words, pointing into `device` and `storage`. Returns the count. */
#define ZRAMGEN_ARGS_MAX 24
int zramgen_serve_argv(const struct zramgen_device *device, char storage[4][64],
                       char *argv[ZRAMGEN_ARGS_MAX]);

#endif
