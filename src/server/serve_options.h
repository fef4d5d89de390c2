/* serve_options.h - the options of `uzram serve`, in one table of the command framework's rows
 * (cli/command.h): getopt's options, the lines of --help, the keys of a configuration file
 * and the keys of a device SPEC (--device, hot-add) are all made from it. Also where a
 * setting came from, how a message names it, and the parsers of the values several options
 * share. Used by cli/serve.c (the command line), server/devices.c (a device's settings, also
 * at run time) and cli/hotplug.c (hot-add). */
#ifndef UZRAM_SERVER_SERVE_OPTIONS_H
#define UZRAM_SERVER_SERVE_OPTIONS_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/command.h"

enum {
    OPT_NO_SAME_FILLED = CLI_LONG_ONLY,
    OPT_NO_UNIX,
    OPT_SOCKET_MODE,
    OPT_SOCKET_GROUP,
    OPT_THREADS,
    OPT_CONFIG,
    OPT_RECOMPRESS_IDLE,
    OPT_RECOMPRESS,
    OPT_BACKING_FILE,
    OPT_BACKING_SIZE,
    OPT_OVERWRITE_BACKING_FILE,
    OPT_WRITEBACK_WHEN_FULL,
    OPT_WRITEBACK_IDLE,
    OPT_WRITEBACK_RATE,
    OPT_SWAP,
    OPT_SWAP_STALL_LIMIT,
    OPT_TLS,
    OPT_TLS_CERTIFICATES,
    OPT_TLS_PSK,
    OPT_TLS_VERIFY_PEER,
    OPT_DEVICE,
    OPT_SERVER_MEM_LIMIT,
    OPT_PERSIST,
    OPT_RECOMPRESS_CPU,
};

/* The tags of serve's rows (struct cli_option's `tags`). A heading's: what the options below
 * it set, a device's own settings (each --device, configuration section and hot-add may set
 * them) or the whole server's. An option's: SERVE_COMMAND_LINE_ONLY, not a configuration
 * key. Flags (optional_argument) take `=yes` or `=no` in their long form, so the command
 * line can undo a file's setting; a flag with an argument name ("[=PATH]": --persist) takes
 * a value besides yes and no: a yes/no word is the flag's value, any other the option's. */
enum { SETS_SERVER = 0, SETS_DEVICE = 1, SERVE_COMMAND_LINE_ONLY = 2 };

/* The rows of the table (serve_options.c checks the count); --help is the framework's. */
#define SERVE_OPTION_COUNT 39
extern const struct cli_option serve_options[SERVE_OPTION_COUNT];

/* The configuration key that makes a section a server's: the sections of its devices. */
#define DEVICES_KEY "devices"

/* The option a configuration key names, or NULL: every option but the command-line-only ones. */
const struct cli_option *option_by_key(const char *key);
/* The option of getopt's `code`, or NULL. */
const struct cli_option *option_by_code(int code);
/* Is `option` a device's own setting (in a SETS_DEVICE group of the table)? */
bool option_sets_device(const struct cli_option *option);

/* Where a setting came from: the command line (file and spec NULL), a line of the
 * configuration, or a device SPEC (--device, hot-add). */
struct origin {
    const char *file;
    unsigned line;
    const char *spec;
    bool given; /* set at all, anywhere (the command line's origin is NULL, 0, NULL) */
};

/* How a message names an option: "--size" on the command line; "size", after "FILE:LINE: ",
 * from a configuration file, or after "in 'SPEC': " from a device spec. Messages read
 * "WHERE... NAME 'VALUE' ...". */
struct label {
    char where[PATH_MAX + 32];
    char name[64];
};

const struct label *option_label(const struct cli_option *option, const struct origin *from,
                                 struct label *label);
/* Whether option `code` was set at all, among the origins `from` (a device's, the server's:
 * one per row of the table). */
bool option_given(const struct origin *from, int code);
/* How a later check names option `code`, as it was last given, among the origins `from`. */
const struct label *option_label_of(const struct origin *from, int code, struct label *label);

struct complaints;
/* Where `option` was set, into `origins` (one per row: a device's, the server's), its name in
 * `label` for messages, and a flag's value (yes when given alone) in *flag. The first step
 * of applying an option. Returns 0, or -1 after a complaint about a bad flag value. */
int option_note(const struct complaints *to, struct origin *origins,
                const struct cli_option *option, const char *arg, const struct origin *from,
                struct label *label, bool *flag);

/* Where a complaint goes: stderr ("uzram: ...\n") when `message` is NULL; else the first
 * complaint only, into `message` (the answer to a hot-add request). */
struct complaints {
    char *message;
    size_t size;
};

/* One line saying what is wrong and what to do. */
void option_complain(const struct complaints *to, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* A whole number up to `max` in `base`; 0, or -1 (nothing said). */
int option_parse_uint(const char *text, unsigned long max, int base, unsigned long *value);
/* A size (512M, or 50% of RAM); 0, or -1 after a complaint. */
int option_parse_size(const struct complaints *to, const struct label *label, const char *text,
                      uint64_t *bytes);
/* Is `text` one of the words a flag's value is spelled with (yes, no, on, off...)? */
bool option_is_flag_word(const char *text);
/* A flag's value: none (the flag alone: yes), or yes/no as systemd spells them; 0, or -1
 * after a complaint. */
int option_parse_flag(const struct complaints *to, const struct label *label, const char *text,
                      bool *value);

#endif
