/* devices.h - the server's device factory: a device's settings, layered from the
 * configuration file, the command line and its SPEC (NAME[:SIZE[:KEY=VALUE]...]), checked,
 * and made into a uzram device with its background threads. `uzram serve` makes its devices
 * with it at start (cli/serve.c), and a hot-add request at run time, so that a device added
 * later takes exactly what --device takes. */
#ifndef UZRAM_SERVER_DEVICES_H
#define UZRAM_SERVER_DEVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/config.h"
#include "server/serve_options.h"
#include "uzram.h"

/* One device to make: its settings as given, checked by device_check(). */
struct device_plan {
    const char *name;
    struct uzram_config config;
    const char *size_text, *level_text;
    const char *recompress; /* --recompress as given, checked once the device exists */
    uint64_t recompress_idle;
    unsigned recompress_cpu; /* 0: the library's default */
    /* Writeback, set once the device exists. */
    const char *backing_file;
    uint64_t backing_size, writeback_idle, writeback_rate;
    bool writeback_when_full, backing_overwrite;
    bool read_only;
    /* --persist: NULL none, "" systemd's descriptor store, else the state file's path. */
    const char *persist;
    /* Where each option was last set, for the messages of checks made later. */
    struct origin from[SERVE_OPTION_COUNT];
};

/* A device option given on the command line without --device: applied to every device. */
struct given_option {
    const struct cli_option *option;
    const char *arg;
};

/* What every device of one server starts from, and where complaints go. Filled by
 * cli/serve.c from the command line and the configuration; only read afterwards. */
struct device_factory {
    const struct config *file;           /* --config, or NULL */
    const struct config_section *server; /* its section of server settings, or NULL */
    bool several;                        /* the devices are listed (--device, a devices key) */
    const struct given_option *given;    /* the command line's device options, in order */
    size_t given_count;
    /* The server's --swap and --server-mem-limit, and where each server option was set: a
     * swap device needs a memory limit. */
    bool swap;
    uint64_t server_mem_limit;
    const struct origin *server_from;
    /* Complaints: to stderr, or (hot-add) into a request's answer; a hot-add takes
     * absolute paths only, as it comes from another process. */
    struct complaints to;
};

/* A device made: it is its caller's to serve or destroy. */
struct device_made {
    struct uzram *dev;
    char name[65]; /* 1-64 characters (util_valid_name) */
    bool read_only;
};

/* One device option (a row of a SETS_DEVICE group) with its value, into `device`. Returns
 * 0, or -1 after one line that names where the bad value came from and says what is
 * allowed. */
int device_apply_option(const struct device_factory *factory, struct device_plan *device,
                        const struct cli_option *option, const char *arg,
                        const struct origin *from);

/* The device options of a configuration section into `device`: with `own` the section is
 * the device's own [NAME] (a server key there is refused), else the server's (its server
 * keys are skipped). Returns 0 or -1 after a complaint. */
int device_apply_section(const struct device_factory *factory, struct device_plan *device,
                         const struct config_section *section, bool own);

/* One device's settings, each layer over the one before: the defaults; the device options
 * of the server's section (with several devices; the one device's section otherwise); the
 * device's own section, when the file has one ([NAME]; a bare NAME must have one); the
 * device options of the command line; the keys of its SPEC (`spec`: the text after NAME,
 * NULL for none, cut in place, and used by `device` as long as it lives). Then its size,
 * algorithm, level and memory limit are checked, each mistake with its own message.
 * Returns 0 or -1 after a complaint. */
int device_settings(const struct device_factory *factory, struct device_plan *device,
                    const char *name, char *spec, const struct origin *from);

/* Make a planned device, with its background threads. Returns 0 or -1 after a complaint. */
int device_make(const struct device_factory *factory, const struct device_plan *device,
                struct device_made *out);

/* What a hot-add request's SPEC (NAME[:SIZE[:KEY=VALUE]...]) makes, over what the server's
 * devices take by default (its section's device keys, the command line's device options,
 * [NAME] of its configuration file if there is one), exactly as --device would. Returns 0,
 * or a negative errno with one line in `message`. Safe on any thread: `factory` is read. */
int device_hot_add(const struct device_factory *factory, const char *spec, struct device_made *out,
                   char *message, size_t message_size);

#endif
