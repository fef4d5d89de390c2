/* devices.c - the server's device factory (devices.h): a device's settings from the
 * configuration file, the command line and its SPEC, checked, then the device made with its
 * recompression and writeback. Run by `uzram serve` at start and by hot-add at run time. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "common/text.h"
#include "server/devices.h"
#include "server/persist.h"
#include "server/recover.h"

#define complain(factory, ...) option_complain(&(factory)->to, __VA_ARGS__)

/* A device's settings before any option: the defaults. */
static void device_defaults(struct device_plan *device, const char *name)
{
    memset(device, 0, sizeof *device);
    device->name = name;
    uzram_config_init(&device->config);
    device->config.comp_algorithm = "lz4";
    device->size_text = "1G";
}

/* --recompress-idle, --writeback-idle, --writeback-rate: a number of seconds or pages. */
static int apply_number(const struct device_factory *factory, struct device_plan *device,
                        const struct cli_option *option, const char *arg, const struct label *label)
{
    unsigned long value;
    bool idle = option->code != OPT_WRITEBACK_RATE;
    if (option_parse_uint(arg, UINT32_MAX, 10, &value) < 0) {
        complain(factory, "%sbad %s '%s'; use a number%s, 0 for %s", label->where, label->name, arg,
                 idle ? " of seconds" : "", idle ? "off" : "no limit");
        return -1;
    }
    *(option->code == OPT_RECOMPRESS_IDLE ? &device->recompress_idle
      : idle                              ? &device->writeback_idle
                                          : &device->writeback_rate) = value;
    return 0;
}

int device_apply_option(const struct device_factory *factory, struct device_plan *device,
                        const struct cli_option *option, const char *arg, const struct origin *from)
{
    struct label label;
    bool flag;
    struct uzram_config *config = &device->config;

    if (option_note(&factory->to, device->from, option, arg, from, &label, &flag) < 0)
        return -1;
    switch (option->code) {
    case 's':
        device->size_text = arg;
        break;
    case 'a':
        config->comp_algorithm = arg;
        break;
    case 'l':
        device->level_text = arg;
        break;
    case OPT_NO_SAME_FILLED:
        config->same_filled = !flag;
        break;
    case 'd':
        config->use_dedup = flag;
        break;
    case 'm':
        return option_parse_size(&factory->to, &label, arg, &config->mem_limit);
    case 'r':
        device->read_only = flag;
        break;
    case OPT_PERSIST:
        device->persist = !flag ? NULL : arg != NULL && !option_is_flag_word(arg) ? arg : "";
        break;
    case OPT_RECOMPRESS_IDLE:
    case OPT_WRITEBACK_IDLE:
    case OPT_WRITEBACK_RATE:
        return apply_number(factory, device, option, arg, &label);
    case OPT_RECOMPRESS:
        device->recompress = arg;
        break;
    case OPT_RECOMPRESS_CPU: {
        unsigned long percent;
        if (option_parse_uint(arg, 100, 10, &percent) < 0 || percent == 0) {
            complain(factory, "%sbad %s '%s'; use a percent of one CPU, 1 to 100", label.where,
                     label.name, arg);
            return -1;
        }
        device->recompress_cpu = (unsigned)percent;
        break;
    }
    case OPT_BACKING_FILE:
        device->backing_file = arg;
        break;
    case OPT_BACKING_SIZE:
        return option_parse_size(&factory->to, &label, arg, &device->backing_size);
    case OPT_OVERWRITE_BACKING_FILE:
        device->backing_overwrite = flag;
        break;
    case OPT_WRITEBACK_WHEN_FULL:
        device->writeback_when_full = flag;
        break;
    default:
        complain(factory, "%s%s is a setting of the whole server; it cannot be set here",
                 label.where, label.name);
        return -1;
    }
    return 0;
}

int device_apply_section(const struct device_factory *factory, struct device_plan *device,
                         const struct config_section *section, bool own)
{
    for (size_t e = 0; e < section->entry_count; e++) {
        const struct config_entry *entry = &section->entries[e];
        const struct origin from = {factory->file->path, entry->line, NULL, false};
        if (strcmp(entry->key, DEVICES_KEY) == 0)
            continue;
        const struct cli_option *option = option_by_key(entry->key);
        bool sets_device = option_sets_device(option);
        if (own && !sets_device) {
            complain(factory,
                     "%s:%u: '%s' in [%s] is a setting of the whole server, not of one of its "
                     "devices: put it in the server's section or on the command line",
                     factory->file->path, entry->line, entry->key, section->name);
            return -1;
        }
        if (sets_device && device_apply_option(factory, device, option, entry->value, &from) < 0)
            return -1;
    }
    return 0;
}

/* The keys of a device SPEC after NAME: ":SIZE" (may be empty: the default), then
 * ":KEY=VALUE" or ":KEY" (a flag: yes) per setting. `text` is cut in place and must live
 * as long as the device's plan. */
static int apply_spec(const struct device_factory *factory, struct device_plan *device, char *text,
                      const struct origin *from)
{
    char *size = text;
    char *rest = strchr(size, ':');
    if (rest != NULL)
        *rest++ = '\0';
    if (size[0] != '\0')
        device_apply_option(factory, device, option_by_code('s'), size, from);
    while (rest != NULL) {
        char *key = rest;
        rest = strchr(key, ':');
        if (rest != NULL)
            *rest++ = '\0';
        char *value = strchr(key, '=');
        if (value != NULL)
            *value++ = '\0';
        const struct cli_option *option = option_by_key(key);
        if (option == NULL || !option_sets_device(option)) {
            char keys[512] = "";
            size_t used = 0;
            for (size_t i = 0; i < SERVE_OPTION_COUNT && used < sizeof keys; i++)
                if (serve_options[i].name != NULL && option_sets_device(&serve_options[i]))
                    used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s",
                                             used ? ", " : "", serve_options[i].name);
            complain(factory,
                     "%s'%s' is %s; a device takes NAME:SIZE, then KEY=VALUE with the keys %s "
                     "(separated by ':')",
                     option_label(option_by_code('s'), from, &(struct label){0})->where, key,
                     option == NULL ? "no key" : "a setting of the whole server", keys);
            return -1;
        }
        if (value == NULL && option->has_arg == required_argument) {
            complain(factory, "in '%s': %s needs a value: %s=%s", from->spec, key, key,
                     option->arg ? option->arg : "VALUE");
            return -1;
        }
        if (device_apply_option(factory, device, option, value, from) < 0)
            return -1;
    }
    return 0;
}

/* The layers of device_settings(), the defaults first. */
static int apply_layers(const struct device_factory *factory, struct device_plan *device,
                        const char *name, char *spec, const struct origin *from)
{
    device_defaults(device, name);
    if (factory->server != NULL &&
        device_apply_section(factory, device, factory->server, false) < 0)
        return -1;
    if (factory->several && factory->file != NULL) {
        const struct config_section *own = config_section(factory->file, name);
        if (own == NULL && spec == NULL && from->spec != NULL) {
            complain(factory, "%s has no section [%s]; give the device a size: %s:SIZE",
                     factory->file->path, name, name);
            return -1;
        }
        if (own != NULL && own != factory->server &&
            device_apply_section(factory, device, own, true) < 0)
            return -1;
    }
    const struct origin command_line = {NULL, 0, NULL, false};
    for (size_t i = 0; i < factory->given_count; i++)
        if (device_apply_option(factory, device, factory->given[i].option, factory->given[i].arg,
                                &command_line) < 0)
            return -1;
    if (spec != NULL && apply_spec(factory, device, spec, from) < 0)
        return -1;
    return 0;
}

/* The level, checked against the algorithm's range. */
static int check_level(const struct device_factory *factory, struct device_plan *device,
                       int min_level, int max_level, int default_level)
{
    struct uzram_config *config = &device->config;
    const char *level_text = device->level_text;
    if (level_text == NULL)
        return 0;
    char *end;
    errno = 0;
    long level = strtol(level_text, &end, 10);
    if (errno || end == level_text || *end != '\0' ||
        (min_level == 0 && max_level == 0 && level != 0) ||
        (level != 0 && (level < min_level || level > max_level))) {
        struct label label;
        option_label_of(device->from, 'l', &label);
        if (min_level == 0 && max_level == 0)
            complain(factory, "%salgorithm %s has no levels; drop %s", label.where,
                     config->comp_algorithm, label.name);
        else
            complain(factory, "%sbad %s '%s' for %s; use %d to %d (default %d)", label.where,
                     label.name, level_text, config->comp_algorithm, min_level, max_level,
                     default_level);
        return -1;
    }
    config->comp_level = (int)level;
    return 0;
}

/* The setting of a device whose data a state file cannot keep yet (include/uzram.h,
 * uzram_create_in), as a message names it, or NULL. Only the server's group: dedup and bundles
 * are kept. */
static const char *persist_conflict(const struct device_factory *factory)
{
    if (factory->server_mem_limit != 0)
        return "a device in a --server-mem-limit group";
    return NULL;
}

/* Size, algorithm and level, checked before the device is made so that each
 * mistake gets its own message. */
static int check_settings(const struct device_factory *factory, struct device_plan *device)
{
    struct uzram_config *config = &device->config;
    struct label label;

    option_label_of(device->from, 's', &label);
    if (option_parse_size(&factory->to, &label, device->size_text, &config->disksize) < 0)
        return -1;
    if (config->disksize == 0 || config->disksize % UZRAM_PAGE_SIZE != 0) {
        complain(factory, "%s%s '%s' must be a non-zero multiple of 4K", label.where, label.name,
                 device->size_text);
        return -1;
    }
    int min_level, max_level, default_level;
    if (uzram_algorithm_levels(config->comp_algorithm, &min_level, &max_level, &default_level) <
        0) {
        char list[256] = "";
        uzram_algorithm_list(NULL, list, sizeof list);
        list[strcspn(list, "\n")] = '\0';
        option_label_of(device->from, 'a', &label);
        complain(factory, "%sunknown %s '%s'; choose one of: %s", label.where, label.name,
                 config->comp_algorithm, list);
        return -1;
    }
    if (check_level(factory, device, min_level, max_level, default_level) < 0)
        return -1;
    /* A swap device that needs memory to store what is swapped out must not grow without
     * bound: the limit is where writes start failing instead of the machine. */
    if (factory->swap && config->mem_limit == 0 && factory->server_mem_limit == 0) {
        option_label_of(factory->server_from, OPT_SWAP, &label);
        complain(factory,
                 "%s%s needs a memory limit: add %s (e.g. a quarter of RAM) so that "
                 "swapped-out pages cannot take all memory%s%s",
                 label.where, label.name,
                 label.where[0] ? "'mem-limit = SIZE' to the section" : "--mem-limit SIZE",
                 factory->several ? "; or --server-mem-limit; device " : "",
                 factory->several ? device->name : "");
        return -1;
    }
    if (device->persist != NULL) {
        uint64_t swap_bytes = !factory->swap
                                  ? 0
                                  : config->mem_limit + config->disksize / UZRAM_PAGE_SIZE *
                                                            UZRAM_TABLE_BYTES_PER_PAGE;
        option_label_of(device->from, OPT_PERSIST, &label);
        if (persist_check(&factory->to, &label, device->name, device->persist,
                          factory->to.message != NULL, persist_conflict(factory), swap_bytes) < 0)
            return -1;
    }
    return 0;
}

int device_settings(const struct device_factory *factory, struct device_plan *device,
                    const char *name, char *spec, const struct origin *from)
{
    if (apply_layers(factory, device, name, spec, from) < 0)
        return -1;
    return check_settings(factory, device);
}

/* --recompress algo=NAME[,level=N][,dict=PATH|auto][,group=N], --recompress-idle and
 * --recompress-cpu: the secondary algorithm of priority 1, bundles of N pages and the
 * background thread, set through the attributes that change them at run time
 * (recomp_algorithm, algorithm_params, recompress_group, recompress_cpu, recompress_idle). */
static int recompression(const struct device_factory *factory, struct uzram *dev,
                         const struct device_plan *device)
{
    /* also without a thread yet: recompress_idle may start one later */
    if (device->recompress_cpu)
        (void)uzram_set_recompress_cpu(dev, device->recompress_cpu); /* 1..100: checked */
    if (!device->recompress && device->recompress_idle == 0)
        return 0;
    /* zstd at level 7 unless told: docs/BENCHMARKS.md measured it the best trade on build
     * output (higher levels save next to nothing more and cost more CPU). The words of
     * SPEC become the attributes' words: algo= for recomp_algorithm, the rest for
     * algorithm_params. */
    char algorithm[96] = "algo=zstd", params[PATH_MAX + 64] = "priority=1", group[16] = "";
    const char *spec = device->recompress ? device->recompress : "";
    bool has_level = false;
    for (const char *word = spec; *word;) {
        size_t length = strcspn(word, ",");
        bool is_algo = strncmp(word, "algo=", 5) == 0 && length > 5 && length < 64;
        bool is_param = strncmp(word, "level=", 6) == 0 || strncmp(word, "dict=", 5) == 0;
        bool is_group = strncmp(word, "group=", 6) == 0 && length > 6 && length < 6 + 8;
        if (is_algo) {
            snprintf(algorithm, sizeof algorithm, "%.*s", (int)length, word);
        } else if (is_group) {
            snprintf(group, sizeof group, "%.*s", (int)length - 6, word + 6);
        } else if (is_param && strlen(params) + length + 2 < sizeof params) {
            snprintf(params + strlen(params), sizeof params - strlen(params), " %.*s", (int)length,
                     word);
            has_level |= strncmp(word, "level=", 6) == 0;
        } else {
            complain(factory,
                     "bad --recompress '%s'; use algo=NAME[,level=N][,dict=PATH|auto][,group=N], "
                     "e.g. algo=zstd,level=7,dict=auto",
                     spec);
            return -1;
        }
        word += length + (word[length] == ',');
    }
    if (!has_level && strcmp(algorithm, "algo=zstd") == 0)
        strcat(params, " level=7");
    strcat(algorithm, " priority=1");
    /* A state made with the same spec has it already (recover.h says why it is kept). */
    bool kept = recover_same_recompress(dev, spec);
    int rc = kept ? 0 : uzram_attr_set(dev, "recomp_algorithm", algorithm);
    if (rc == 0 && !kept)
        rc = uzram_attr_set(dev, "algorithm_params", params);
    if (rc == 0 && !kept)
        recover_note_recompress(dev, spec);
    if (rc < 0) {
        complain(factory,
                 "--recompress '%s': %s; use algo=NAME[,level=N][,dict=PATH|auto] with an "
                 "algorithm, level and dictionary file this build takes (dictionaries: zstd only)",
                 spec, strerror(-rc));
        return -1;
    }
    if (group[0] && uzram_attr_set(dev, "recompress_group", group) < 0) {
        complain(factory,
                 "--recompress '%s': group=%s is not a number of pages from 2 to 16 (or 0: no "
                 "bundles)",
                 spec, group);
        return -1;
    }
    rc = uzram_set_recompress_idle(dev, device->recompress_idle);
    if (rc < 0) {
        complain(factory, "cannot start the recompression thread: %s", strerror(-rc));
        return -1;
    }
    return 0;
}

/* A device taken over from its state with a backing store (the library opened it again by
 * the path the state records): 1 when --backing-file names that file, -1 (said) when it names
 * another or none, 0 for a device without one. */
static int kept_backing(const struct device_factory *factory, struct uzram *dev,
                        const struct device_plan *device)
{
    char kept[PATH_MAX + 1];
    if (device->persist == NULL || uzram_get_backing_dev(dev, kept, sizeof kept) < 0 ||
        strcmp(kept, "none") == 0)
        return 0;
    char *given = device->backing_file ? realpath(device->backing_file, NULL) : NULL;
    bool same = given != NULL && strcmp(given, kept) == 0;
    free(given);
    if (!same)
        complain(factory,
                 "device %s was taken over from its state with pages written back to %s: give "
                 "--backing-file %s (not %s), or remove the state to start empty",
                 device->name, kept, kept, device->backing_file ? device->backing_file : "none");
    return same ? 1 : -1;
}

/* --backing-file, --backing-size, --writeback-when-full, --writeback-idle, --writeback-rate:
 * the backing store and writeback, through the library calls behind the attributes that
 * change them at run time (backing_dev, writeback_when_full, writeback_idle, writeback_rate). */
static int writeback(const struct device_factory *factory, struct uzram *dev,
                     const struct device_plan *device)
{
    struct label label;
    int kept = kept_backing(factory, dev, device);
    if (kept < 0)
        return -1;
    const char *needs = device->writeback_when_full ? "--writeback-when-full"
                        : device->writeback_idle    ? "--writeback-idle"
                        : device->backing_size      ? "--backing-size"
                        : device->backing_overwrite ? "--overwrite-backing-file"
                        : option_given(device->from, OPT_WRITEBACK_RATE) ? "--writeback-rate"
                                                                         : NULL;
    if (!device->backing_file) {
        if (needs)
            complain(factory, "%s needs --backing-file PATH, where pages are written back", needs);
        return needs ? -1 : 0;
    }
    option_label_of(device->from, OPT_BACKING_FILE, &label);
    char why[PATH_MAX + 256]; /* hot-add: from another process, so an absolute path only */
    int rc = kept ? 0
                  : backing_dev_open(dev, device->backing_file, device->backing_size,
                                     device->backing_overwrite, factory->to.message != NULL, why,
                                     sizeof why);
    if (rc < 0) {
        complain(factory, "%scannot use %s '%s' to write back to: %s", label.where, label.name,
                 device->backing_file, why);
        return -1;
    }
    if (option_given(device->from, OPT_WRITEBACK_RATE))
        uzram_set_writeback_rate(dev, device->writeback_rate);
    rc = uzram_set_writeback_when_full(dev, device->writeback_when_full);
    if (rc == 0)
        rc = uzram_set_writeback_idle(dev, device->writeback_idle);
    if (rc < 0) {
        complain(factory, "cannot start the writeback thread: %s", strerror(-rc));
        return -1;
    }
    return 0;
}

int device_make(const struct device_factory *factory, const struct device_plan *device,
                struct device_made *out)
{
    struct uzram *dev;
    if (device->persist != NULL) {
        struct label label;
        option_label_of(device->from, OPT_PERSIST, &label);
        if (persist_make(&factory->to, &label, device->name, device->persist, &device->config,
                         &dev) < 0)
            return -1;
    }
    int rc = device->persist != NULL ? 0 : uzram_create(&device->config, &dev);
    if (rc < 0) {
        char why[200];
        util_table_figures(device->config.disksize, why, sizeof why);
        if (rc == -ENOMEM || rc == -E2BIG) /* -E2BIG: the table would pass the machine's share */
            complain(factory, "not enough memory to create a %s device: %s; use a smaller size",
                     device->size_text, why);
        else
            complain(factory, "cannot create device %s: %s; check its size, algorithm and level",
                     device->name, strerror(-rc));
        return -1;
    }
    if (recompression(factory, dev, device) < 0 || writeback(factory, dev, device) < 0) {
        uzram_destroy(dev);
        if (device->persist != NULL)
            persist_forget(device->name, true);
        return -1;
    }
    *out = (struct device_made){.dev = dev, .read_only = device->read_only};
    snprintf(out->name, sizeof out->name, "%s", device->name);
    return 0;
}

int device_hot_add(const struct device_factory *server, const char *spec, struct device_made *out,
                   char *message, size_t message_size)
{
    /* The server's factory is only read; complaints go to this request's own answer. */
    struct device_factory *factory = malloc(sizeof *factory);
    struct device_plan *device = malloc(sizeof *device);
    char *copy = strdup(spec);
    int rc = -ENOMEM;
    snprintf(message, message_size, "out of memory");
    if (factory != NULL && device != NULL && copy != NULL) {
        *factory = *server;
        factory->to = (struct complaints){message, message_size};
        factory->several = true;
        message[0] = '\0';
        char *colon = strchr(copy, ':');
        if (colon != NULL)
            *colon = '\0';
        const struct origin from = {NULL, 0, spec, false};
        rc = -EINVAL;
        if (!util_valid_name(copy))
            complain(factory,
                     "bad device name '%s'; use 1-64 characters from A-Z a-z 0-9 . _ -, not "
                     "starting with -",
                     copy);
        else if (device_settings(factory, device, copy, colon ? colon + 1 : NULL, &from) == 0 &&
                 device_make(factory, device, out) == 0)
            rc = 0;
    }
    free(copy);
    free(device);
    free(factory);
    return rc;
}
