/* serve.c - `uzram serve`: command line of the NBD server, its devices, socket paths.
 * Every bad setting ends with one line saying what to do; the server itself is in nbd/server.c.
 * The devices' settings are read here for hot-add too (make_device()), so that a device
 * added at run time takes exactly what --device takes. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/serve.h"
#include "nbd/server.h"
#include "control/service.h"
#include "attach/attach.h"
#include "common/sizes.h"
#include "common/systemd.h"
#include "common/util.h"

enum {
    OPT_NO_SAME_FILLED = 256,
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
    OPT_TLS,
    OPT_TLS_CERTIFICATES,
    OPT_TLS_PSK,
    OPT_TLS_VERIFY_PEER,
    OPT_DEVICE,
    OPT_SERVER_MEM_LIMIT,
};

/* The `code` of a row that starts a group of --help: what the options below it set. */
enum { SETS_SERVER = 0, SETS_DEVICE = 1 };

/* Every option of `uzram serve`, once: getopt's table, the lines of --help and the keys of
 * the configuration file are all made from this list, so an option added here is a key
 * too. A row without a name starts a group of --help; the options of a SETS_DEVICE group
 * are a device's own settings (each --device, configuration section and hot-add may set
 * them), the others the whole server's. Flags (optional_argument) take `=yes` or `=no` in
 * their long form, so the command line can undo a file's setting. */
static const struct serve_option {
    const char *name; /* long option and configuration key */
    int code;         /* short option letter, or OPT_* */
    int has_arg;      /* required_argument, optional_argument (a flag), no_argument */
    const char *arg;  /* what --help calls the argument */
    const char *help; /* lines after the first are indented under it */
    bool command_line_only;
} serve_options[] = {
    {NULL, SETS_DEVICE, 0, NULL, "Device (with several, each --device may set these):", false},
    {"size", 's', required_argument, "SIZE", "disk size: 512M, 4G, 50% (of RAM); default 1G",
     false},
    {"algorithm", 'a', required_argument, "NAME", "compression algorithm (default lz4)", false},
    {"level", 'l', required_argument, "N", "compression level (default: the algorithm's)", false},
    {"no-same-filled", OPT_NO_SAME_FILLED, optional_argument, NULL,
     "do not store same-filled pages as one word", false},
    {"dedup", 'd', optional_argument, NULL, "store identical pages once", false},
    {"mem-limit", 'm', required_argument, "SIZE",
     "most memory the compressed pages may use (default none)", false},
    {"recompress-idle", OPT_RECOMPRESS_IDLE, required_argument, "N",
     "recompress pages unused for N seconds, in the\n"
     "background at the lowest CPU priority (default 0: off)",
     false},
    {"recompress", OPT_RECOMPRESS, required_argument, "SPEC",
     "the algorithm that recompresses: algo=NAME[,level=N]\n"
     "[,dict=PATH|auto] (default algo=zstd,level=7)",
     false},
    {"backing-file", OPT_BACKING_FILE, required_argument, "PATH",
     "write pages back to PATH, a new or empty file of\n"
     "yours (mode 0600, sized sparsely) or a block device;\n"
     "what it holds is as volatile as the memory part",
     false},
    {"overwrite-backing-file", OPT_OVERWRITE_BACKING_FILE, optional_argument, NULL,
     "let --backing-file empty a file that holds data", false},
    {"backing-size", OPT_BACKING_SIZE, required_argument, "SIZE",
     "size of the backing file (default twice --size; a\n"
     "block device: all of it)",
     false},
    {"writeback-when-full", OPT_WRITEBACK_WHEN_FULL, optional_argument, NULL,
     "a write past --mem-limit writes back the coldest\n"
     "pages instead of failing (needs --backing-file)",
     false},
    {"writeback-idle", OPT_WRITEBACK_IDLE, required_argument, "N",
     "write back pages unused for N seconds, in the\n"
     "background, paced by --writeback-rate (default 0: off)",
     false},
    {"writeback-rate", OPT_WRITEBACK_RATE, required_argument, "N",
     "pages a second the background writeback may write\n"
     "(default 4096; 0: no limit)",
     false},
    {"read-only", 'r', optional_argument, NULL, "refuse writes", false},
    {NULL, SETS_SERVER, 0, NULL, "Server:", false},
    {"name", 'n', required_argument, "NAME",
     "device and export name (default uzram0); with --device\n"
     "or a devices key, the server's name (default: its first\n"
     "device's); with --config, the section to serve",
     true},
    {"device", OPT_DEVICE, required_argument, "SPEC",
     "serve one more device, SPEC = NAME[:SIZE[:KEY=VALUE]...]\n"
     "with the keys of the device options above (dedup alone\n"
     "for dedup=yes); a bare NAME with --config: its section.\n"
     "Repeat it for several; the first is the default export",
     true},
    {"server-mem-limit", OPT_SERVER_MEM_LIMIT, required_argument, "SIZE",
     "most memory the compressed pages of all the devices\n"
     "together may use (default none)",
     false},
    {"swap", OPT_SWAP, optional_argument, NULL,
     "for swap: lock memory, allocate without waiting for\n"
     "I/O, no OOM kill (needs --mem-limit or\n"
     "--server-mem-limit, and root)",
     false},
    {NULL, SETS_SERVER, 0, NULL, "Listening:", false},
    {"unix", 'u', required_argument, "PATH",
     "NBD Unix socket (default NAME.sock in the runtime\n"
     "directory, $XDG_RUNTIME_DIR/uzram; see uzram(1))",
     false},
    {"no-unix", OPT_NO_UNIX, optional_argument, NULL, "no Unix socket (needs --tcp)", false},
    {"tcp", 't', required_argument, "[ADDR:]PORT", "also listen on TCP (default address 127.0.0.1)",
     false},
    {"socket-mode", OPT_SOCKET_MODE, required_argument, "OCTAL",
     "mode of the NBD Unix socket (default 0600)", false},
    {"socket-group", OPT_SOCKET_GROUP, required_argument, "GROUP", "group of the NBD Unix socket",
     false},
    {"threads", OPT_THREADS, required_argument, "N",
     "most worker threads per client connection (default:\n"
     "number of CPUs, at least 2); helpers start only while\n"
     "costly requests queue up",
     false},
    {NULL, SETS_SERVER, 0, NULL, "TLS (clients use nbds:// URIs):", false},
    {"tls", OPT_TLS, required_argument, "off|on|require",
     "on: offer TLS (NBD_OPT_STARTTLS); require: refuse\n"
     "clients that do not start it (default: require when\n"
     "credentials are given, else off)",
     false},
    {"tls-certificates", OPT_TLS_CERTIFICATES, required_argument, "DIR",
     "X.509: DIR holds server-cert.pem, server-key.pem and\n"
     "ca-cert.pem (certtool makes them)",
     false},
    {"tls-psk", OPT_TLS_PSK, required_argument, "FILE",
     "pre-shared keys, USERNAME:HEXKEY lines (psktool\n"
     "-u NAME -p FILE)",
     false},
    {"tls-verify-peer", OPT_TLS_VERIFY_PEER, optional_argument, NULL,
     "X.509: clients must show a certificate signed by\n"
     "DIR/ca-cert.pem",
     false},
    {NULL, SETS_SERVER, 0, NULL, "Other:", false},
    {"config", OPT_CONFIG, required_argument, "FILE",
     "read the options of device NAME from the [NAME] section\n"
     "of FILE; options on the command line win",
     true},
    {"quiet", 'q', optional_argument, NULL, "print no banner and no per-client messages", false},
    {"help", 'h', no_argument, NULL, "show this help", true},
};
#define SERVE_OPTION_COUNT (sizeof serve_options / sizeof serve_options[0])
#define HELP_COLUMN 26

/* The configuration key that makes a section a server's: the sections of its devices. */
#define DEVICES_KEY "devices"

static void serve_usage(FILE *out)
{
    fputs("Usage: uzram serve [OPTION]...\n"
          "Create compressed RAM disks and serve them over NBD until SIGINT/SIGTERM\n"
          "(SIGHUP is ignored): one (uzram0), or one per --device.\n",
          out);
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++) {
        const struct serve_option *o = &serve_options[i];
        if (o->name == NULL) {
            fprintf(out, "\n%s\n", o->help);
            continue;
        }
        char left[64];
        int n = snprintf(left, sizeof left, "  %c%c%c --%s%s%s", o->code < 256 ? '-' : ' ',
                         o->code < 256 ? o->code : ' ', o->code < 256 ? ',' : ' ', o->name,
                         o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "%-*s", HELP_COLUMN - 1, left);
        if (n >= HELP_COLUMN - 1)
            fputc(' ', out);
        for (const char *line = o->help; line != NULL;) {
            const char *end = strchr(line, '\n');
            fprintf(out, " %.*s\n", end ? (int)(end - line) : (int)strlen(line), line);
            line = end ? end + 1 : NULL;
            if (line != NULL)
                fprintf(out, "%*s", HELP_COLUMN - 1, "");
        }
    }
    fputs("\n"
          "Flags take an optional =yes or =no in their long form (--dedup=no). The keys of a\n"
          "--config file are the long options above, one 'KEY = VALUE' a line, in a [NAME]\n"
          "section per device; a section with a 'devices = NAME...' key is a server of those\n"
          "devices, and its device keys are their defaults. With several devices the device\n"
          "options given alone apply to each (a --device's own keys win). The control socket\n"
          "NAME.ctl is created in the runtime directory (only you can write there); see uzram\n"
          "status, uzram attr, uzram hot-add and hot-remove. The disks live only in this\n"
          "process, like zram and tmpfs: they are lost when the server stops. Examples:\n"
          "  uzram serve -s 4G -a zstd --dedup &\n"
          "  nbdcopy disk.img \"$(uzram status -n -o uri uzram0)\"\n"
          "  uzram serve --name pool --device db:4G:dedup --device tmp:1G:algorithm=zstd &\n"
          "  nbdinfo \"$(uzram status -n -o uri tmp)\"\n",
          out);
}

static int parse_uint(const char *text, unsigned long max, int base, unsigned long *value)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, base);
    if (errno || end == text || *end != '\0' || v > max || text[0] == '-')
        return -1;
    *value = v;
    return 0;
}

/* Where a setting came from: the command line (file and spec NULL), a line of the
 * configuration, or a device SPEC (--device, hot-add). */
struct origin {
    const char *file;
    unsigned line;
    const char *spec;
    bool given; /* set at all, anywhere (the command line's origin is NULL, 0, NULL) */
};

/* One device to serve: its settings as given, checked by device_settings(). */
struct device_plan {
    const char *name;
    struct uzram_config config;
    const char *size_text, *level_text;
    const char *recompress; /* --recompress as given, checked once the device exists */
    uint64_t recompress_idle;
    /* Writeback, set once the device exists. */
    const char *backing_file;
    uint64_t backing_size, writeback_idle, writeback_rate;
    bool writeback_when_full, backing_overwrite;
    bool read_only;
    /* Where each option was last set, for the messages of checks made later. */
    struct origin from[SERVE_OPTION_COUNT];
};

/* A device option given on the command line without --device: applied to every device. */
struct given_option {
    const struct serve_option *option;
    const char *arg;
};

/* What `uzram serve` was asked for: the devices, and where to listen. */
struct serve_plan {
    struct nbd_server_options options;
    const char *unix_path;
    bool no_unix;
    bool tls_given;                         /* --tls was set, not defaulted */
    struct origin from[SERVE_OPTION_COUNT]; /* of the server's options */
    /* The devices: from --device (specs), a server section's devices key, or the one. */
    struct device_plan *devices;
    size_t device_count;
    const char **specs; /* --device as given */
    size_t spec_count;
    struct given_option *given; /* the command line's device options, in order */
    size_t given_count;
    const struct config *file;           /* --config, or NULL */
    const struct config_section *server; /* its section of server settings, or NULL */
    bool several;                        /* --device or a devices key: the devices are listed */
    char *listed_text;                   /* the server section's devices key, cut in words */
    const char *listed[NBD_SERVER_MAX_EXPORTS];
    size_t listed_count;
    /* Where a complaint goes: stderr ("uzram: ...\n"), or, for hot-add, this buffer. */
    char *message;
    size_t message_size;
    /* Storage for the paths options points to when they are derived. */
    char unix_buffer[PATH_MAX], ctl_path[PATH_MAX];
    int inherited[SYSTEMD_MAX_LISTEN_FDS]; /* sockets handed over (socket activation) */
    char **spec_copies;                    /* per device: its --device text, cut by apply_spec() */
    bool name_given;                       /* --name */
};

/* The GO_ON-or-status steps below return GO_ON, or the exit status to stop with. */
#define GO_ON (-1)

/* One line saying what is wrong and what to do: on stderr, or the answer to hot-add. */
static void complain(const struct serve_plan *plan, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static void complain(const struct serve_plan *plan, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    if (plan->message != NULL) {
        if (plan->message[0] == '\0')
            vsnprintf(plan->message, plan->message_size, format, args);
    } else {
        fputs("uzram: ", stderr);
        vfprintf(stderr, format, args);
        fputc('\n', stderr);
    }
    va_end(args);
}

/* The option a configuration key names, or NULL: every option but the command-line-only ones. */
static const struct serve_option *option_by_key(const char *key)
{
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++)
        if (serve_options[i].name != NULL && !serve_options[i].command_line_only &&
            strcmp(serve_options[i].name, key) == 0)
            return &serve_options[i];
    return NULL;
}

static const struct serve_option *option_by_code(int code)
{
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++)
        if (serve_options[i].name != NULL && serve_options[i].code == code)
            return &serve_options[i];
    return NULL;
}

/* Is `option` a device's own setting (in a SETS_DEVICE group of the table)? */
static bool sets_device(const struct serve_option *option)
{
    for (const struct serve_option *row = option; row >= serve_options; row--)
        if (row->name == NULL)
            return row->code == SETS_DEVICE;
    return false;
}

/* How a message names an option: "--size" on the command line; "size", after "FILE:LINE: ",
 * from a configuration file, or after "in 'SPEC': " from a device spec. Messages read
 * "WHERE... NAME 'VALUE' ...". */
struct label {
    char where[PATH_MAX + 32];
    char name[64];
};

static const struct label *option_label(const struct serve_option *option,
                                        const struct origin *from, struct label *label)
{
    if (from->file == NULL && from->spec == NULL) {
        label->where[0] = '\0';
        snprintf(label->name, sizeof label->name, "--%s", option->name);
    } else {
        if (from->file != NULL)
            snprintf(label->where, sizeof label->where, "%s:%u: ", from->file, from->line);
        else
            snprintf(label->where, sizeof label->where, "in '%.4000s': ", from->spec);
        snprintf(label->name, sizeof label->name, "%s", option->name);
    }
    return label;
}

static int parse_size_option(const struct serve_plan *plan, const struct label *label,
                             const char *text, uint64_t *bytes)
{
    int rc = sizes_parse(text, bytes); /* 512M, or 50% of RAM */
    if (rc < 0)
        complain(plan,
                 rc == -ERANGE   ? "%s%s '%s' is too large"
                 : rc != -EINVAL ? "%s%s '%s': cannot read this machine's memory size"
                                 : "%s%s '%s' is not a size; use a number with an optional K, "
                                   "M, G or T suffix, e.g. 512M, or a share of RAM, e.g. 50%%",
                 label->where, label->name, text);
    return rc < 0 ? -1 : 0;
}

/* A flag's value: none (the flag alone), or yes/no as systemd spells them. */
static int parse_flag(const struct serve_plan *plan, const struct label *label, const char *text,
                      bool *value)
{
    static const char *const yes[] = {"yes", "y", "true", "on", "1"};
    static const char *const no[] = {"no", "n", "false", "off", "0"};
    if (text == NULL) {
        *value = true;
        return 0;
    }
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(text, yes[i]) == 0 || strcasecmp(text, no[i]) == 0) {
            *value = strcasecmp(text, yes[i]) == 0;
            return 0;
        }
    }
    complain(plan, "%sbad %s '%s'; use yes or no", label->where, label->name, text);
    return -1;
}

/* A device's settings before any option: the defaults. */
static void device_defaults(struct device_plan *device, const char *name)
{
    memset(device, 0, sizeof *device);
    device->name = name;
    uzram_config_init(&device->config);
    device->config.comp_algorithm = "lz4";
    device->size_text = "1G";
}

/* One option, from the command line, the configuration or a device spec: a device's own
 * settings go to `device` (NULL: there is none to set, the option is refused), the others
 * to the server. Returns 0, or -1 after one line that names where the bad value came from
 * and says what is allowed. */
static int apply_option(struct serve_plan *plan, struct device_plan *device,
                        const struct serve_option *option, const char *arg,
                        const struct origin *from)
{
    struct nbd_server_options *options = &plan->options;
    struct label label;
    unsigned long value;
    bool flag = false;

    option_label(option, from, &label);
    if (sets_device(option) && device == NULL) {
        complain(plan, "%s%s is a setting of one device; it cannot be set here", label.where,
                 label.name);
        return -1;
    }
    struct origin *where =
        &(sets_device(option) ? device->from : plan->from)[option - serve_options];
    *where = *from;
    where->given = true;
    struct uzram_config *config = device ? &device->config : NULL;
    if (option->has_arg == optional_argument && parse_flag(plan, &label, arg, &flag) < 0)
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
        return parse_size_option(plan, &label, arg, &config->mem_limit);
    case 'r':
        device->read_only = flag;
        break;
    case OPT_RECOMPRESS_IDLE:
        if (parse_uint(arg, UINT32_MAX, 10, &value) < 0) {
            complain(plan, "%sbad %s '%s'; use a number of seconds, 0 for off", label.where,
                     label.name, arg);
            return -1;
        }
        device->recompress_idle = value;
        break;
    case OPT_RECOMPRESS:
        device->recompress = arg;
        break;
    case OPT_BACKING_FILE:
        device->backing_file = arg;
        break;
    case OPT_BACKING_SIZE:
        return parse_size_option(plan, &label, arg, &device->backing_size);
    case OPT_OVERWRITE_BACKING_FILE:
        device->backing_overwrite = flag;
        break;
    case OPT_WRITEBACK_WHEN_FULL:
        device->writeback_when_full = flag;
        break;
    case OPT_WRITEBACK_IDLE:
    case OPT_WRITEBACK_RATE:
        if (parse_uint(arg, UINT32_MAX, 10, &value) < 0) {
            complain(plan, "%sbad %s '%s'; use a number%s, 0 for %s", label.where, label.name, arg,
                     option->code == OPT_WRITEBACK_IDLE ? " of seconds" : "",
                     option->code == OPT_WRITEBACK_IDLE ? "off" : "no limit");
            return -1;
        }
        *(option->code == OPT_WRITEBACK_IDLE ? &device->writeback_idle : &device->writeback_rate) =
            value;
        break;
    case 'n':
        if (!util_valid_name(arg)) {
            complain(plan,
                     "%sbad %s '%s'; use 1-64 characters from A-Z a-z 0-9 . _ -, not starting "
                     "with -",
                     label.where, label.name, arg);
            return -1;
        }
        options->name = arg;
        break;
    case OPT_SWAP:
        options->swap = flag;
        break;
    case OPT_SERVER_MEM_LIMIT:
        return parse_size_option(plan, &label, arg, &options->server_mem_limit);
    case 'u':
        plan->unix_path = arg;
        break;
    case OPT_NO_UNIX:
        plan->no_unix = flag;
        break;
    case 't':
        options->tcp = arg;
        break;
    case OPT_SOCKET_MODE:
        if (parse_uint(arg, 0777, 8, &value) < 0) {
            complain(plan, "%sbad %s '%s'; use an octal mode like 0660", label.where, label.name,
                     arg);
            return -1;
        }
        options->socket_mode = (unsigned)value;
        break;
    case OPT_SOCKET_GROUP: {
        struct group *group = getgrnam(arg);
        if (group != NULL)
            options->socket_gid = (long)group->gr_gid;
        else if (parse_uint(arg, INT_MAX, 10, &value) == 0)
            options->socket_gid = (long)value;
        else {
            complain(plan, "%sunknown %s '%s'; give a group name or id", label.where, label.name,
                     arg);
            return -1;
        }
        break;
    }
    case OPT_THREADS:
        if (parse_uint(arg, NBD_SERVER_MAX_THREADS, 10, &value) < 0 || value == 0) {
            complain(plan, "%sbad %s '%s'; use a number from 1 to %u", label.where, label.name, arg,
                     NBD_SERVER_MAX_THREADS);
            return -1;
        }
        options->threads = (unsigned)value;
        break;
    case 'q':
        options->quiet = flag;
        break;
    case OPT_TLS:
        if (strcmp(arg, "off") == 0) {
            options->tls.mode = NBD_TLS_OFF;
        } else if (strcmp(arg, "on") == 0) {
            options->tls.mode = NBD_TLS_ON;
        } else if (strcmp(arg, "require") == 0) {
            options->tls.mode = NBD_TLS_REQUIRE;
        } else {
            complain(plan, "%sbad %s '%s'; use off, on or require", label.where, label.name, arg);
            return -1;
        }
        plan->tls_given = true;
        break;
    case OPT_TLS_CERTIFICATES:
        options->tls.certificates = arg;
        break;
    case OPT_TLS_PSK:
        options->tls.psk_file = arg;
        break;
    case OPT_TLS_VERIFY_PEER:
        options->tls.verify_peer = flag;
        break;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * The configuration file
 * ---------------------------------------------------------------------- */

/* Which keys of a section apply. */
enum section_part {
    SECTION_SERVER,   /* the server's section (or the one device's): its server keys */
    SECTION_DEFAULTS, /* the same section's device keys: the one device's, or each one's */
    SECTION_DEVICE,   /* a device's section, one of several: device keys only */
};

static int apply_section(struct serve_plan *plan, struct device_plan *device,
                         const struct config_section *section, enum section_part part)
{
    for (size_t e = 0; e < section->entry_count; e++) {
        const struct config_entry *entry = &section->entries[e];
        const struct origin from = {plan->file->path, entry->line, NULL, false};
        if (strcmp(entry->key, DEVICES_KEY) == 0)
            continue;
        const struct serve_option *option = option_by_key(entry->key);
        bool own = sets_device(option);
        if (part == SECTION_DEVICE && !own) {
            complain(plan,
                     "%s:%u: '%s' in [%s] is a setting of the whole server, not of one of its "
                     "devices: put it in the server's section or on the command line",
                     plan->file->path, entry->line, entry->key, section->name);
            return -1;
        }
        if ((part == SECTION_SERVER && own) || (part == SECTION_DEFAULTS && !own))
            continue;
        if (apply_option(plan, own ? device : NULL, option, entry->value, &from) < 0)
            return -1;
    }
    return 0;
}

/* The names a server section's devices key lists (space or comma separated), cut into
 * words in `plan->listed_text`. Returns how many, or -1 after a complaint. */
static int section_devices(struct serve_plan *plan, const struct config_section *section)
{
    const struct config_entry *entry = NULL;
    for (size_t e = 0; e < section->entry_count; e++)
        if (strcmp(section->entries[e].key, DEVICES_KEY) == 0)
            entry = &section->entries[e];
    if (entry == NULL)
        return 0;
    plan->listed_text = strdup(entry->value);
    if (plan->listed_text == NULL) {
        complain(plan, "out of memory");
        return -1;
    }
    size_t count = 0;
    char *save = NULL;
    for (char *word = strtok_r(plan->listed_text, " ,\t", &save); word;
         word = strtok_r(NULL, " ,\t", &save)) {
        if (!util_valid_name(word)) {
            complain(plan, "%s:%u: bad device name '%s' in %s; list the sections of the devices",
                     plan->file->path, entry->line, word, DEVICES_KEY);
            return -1;
        }
        if (count == NBD_SERVER_MAX_EXPORTS) {
            complain(plan, "%s:%u: more than %u devices; one server serves at most that many",
                     plan->file->path, entry->line, NBD_SERVER_MAX_EXPORTS);
            return -1;
        }
        plan->listed[count++] = word;
    }
    return (int)count;
}

/* Load --config and check every section's keys, so a typo anywhere in the file is found at
 * once; then pick the section to serve: the one --name names, or the only one (unless
 * --device lists the devices). */
static int load_config(struct serve_plan *plan, const char *path, const char *name,
                       struct config **loaded)
{
    char error[PATH_MAX + 512];
    if (config_load(path, loaded, error, sizeof error) < 0) {
        fprintf(stderr, "uzram: %s\n", error);
        return 1;
    }
    const struct config *config = *loaded;
    plan->file = config;
    char keys[1024] = "";
    size_t used = 0;
    for (size_t i = 0; i < SERVE_OPTION_COUNT && used < sizeof keys; i++)
        if (serve_options[i].name != NULL && !serve_options[i].command_line_only)
            used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", used ? ", " : "",
                                     serve_options[i].name);
    if (used < sizeof keys)
        snprintf(keys + used, sizeof keys - used, ", " DEVICES_KEY);
    for (size_t s = 0; s < config->section_count; s++) {
        const struct config_section *section = &config->sections[s];
        if (!util_valid_name(section->name)) {
            fprintf(stderr,
                    "uzram: %s:%u: bad section name [%s]; a device name is 1-64 characters "
                    "from A-Z a-z 0-9 . _ -, not starting with -\n",
                    path, section->line, section->name);
            return 1;
        }
        for (size_t e = 0; e < section->entry_count; e++) {
            const struct config_entry *entry = &section->entries[e];
            const struct serve_option *option = option_by_key(entry->key);
            if (option == NULL && strcmp(entry->key, "name") == 0) {
                fprintf(stderr,
                        "uzram: %s:%u: 'name' is not a key: the section [%s] names its device\n",
                        path, entry->line, section->name);
                return 1;
            }
            if (option == NULL && strcmp(entry->key, DEVICES_KEY) != 0) {
                fprintf(stderr, "uzram: %s:%u: unknown key '%s' in [%s]; the keys are: %s\n", path,
                        entry->line, entry->key, section->name, keys);
                return 1;
            }
            if (entry->value[0] == '\0') {
                fprintf(stderr, "uzram: %s:%u: key '%s' needs a value%s\n", path, entry->line,
                        entry->key,
                        option && option->has_arg == optional_argument ? " (yes or no)" : "");
                return 1;
            }
        }
    }

    const struct config_section *chosen = NULL;
    if (name != NULL) {
        chosen = config_section(config, name);
        if (chosen == NULL && plan->spec_count > 0)
            return GO_ON; /* --name only names the server of the --device list */
    } else if (plan->spec_count > 0) {
        return GO_ON; /* the --device list says which sections to serve */
    } else if (config->section_count == 1) {
        chosen = &config->sections[0];
    } else if (config->section_count > 1) {
        fprintf(stderr, "uzram: %s has %zu devices ([%s], [%s]%s); choose one with --name\n", path,
                config->section_count, config->sections[0].name, config->sections[1].name,
                config->section_count > 2 ? ", ..." : "");
        return 1;
    }
    if (chosen == NULL) {
        fprintf(stderr, "uzram: %s has no section [%s]; add one with the device's settings\n", path,
                name ? name : "NAME");
        return 1;
    }
    plan->server = chosen;
    plan->options.name = chosen->name;
    return GO_ON;
}

/* ------------------------------------------------------------------------
 * The command line
 * ---------------------------------------------------------------------- */

/* The command line: options are collected first, so that the configuration file (which
 * --config names, anywhere on the line) is applied before them and they override it. Values
 * that need no context are checked as they are applied, each with its own message; the
 * rest waits for device_settings() and socket_paths(). */
static int parse_options(int argc, char **argv, struct serve_plan *plan, struct config **loaded)
{
    struct option long_options[SERVE_OPTION_COUNT + 1];
    char short_options[3 * SERVE_OPTION_COUNT + 1];
    size_t long_count = 0, short_length = 0;
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++) {
        const struct serve_option *o = &serve_options[i];
        if (o->name == NULL)
            continue;
        long_options[long_count++] = (struct option){o->name, o->has_arg, NULL, o->code};
        if (o->code < 256) {
            short_options[short_length++] = (char)o->code;
            if (o->has_arg == required_argument)
                short_options[short_length++] = ':';
        }
    }
    long_options[long_count] = (struct option){NULL, 0, NULL, 0};
    short_options[short_length] = '\0';

    struct nbd_server_options *options = &plan->options;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *options = (struct nbd_server_options){.name = "uzram0", .socket_mode = 0600, .socket_gid = -1};
    /* Per connection: with 2 workers one can run a request while the other
     * reads the next, so one pipelining client keeps 2 cores busy. */
    options->threads = cpus < 2                        ? 2
                       : cpus > NBD_SERVER_MAX_THREADS ? NBD_SERVER_MAX_THREADS
                                                       : (unsigned)cpus;

    struct given_option server_given[argc > 0 ? argc : 1];
    size_t server_count = 0;
    plan->given = calloc((size_t)(argc > 0 ? argc : 1), sizeof *plan->given);
    plan->specs = calloc((size_t)(argc > 0 ? argc : 1), sizeof *plan->specs);
    if (plan->given == NULL || plan->specs == NULL) {
        fputs("uzram: out of memory\n", stderr);
        return 1;
    }
    const char *config_path = NULL, *name = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
        const struct serve_option *option = option_by_code(c);
        if (c == 'h') {
            serve_usage(stdout);
            return 0;
        }
        if (option == NULL) {
            fputs("Try 'uzram serve --help' for more information.\n", stderr);
            return 2;
        }
        if (c == OPT_CONFIG)
            config_path = optarg;
        else if (c == OPT_DEVICE)
            plan->specs[plan->spec_count++] = optarg;
        else if (sets_device(option))
            plan->given[plan->given_count++] = (struct given_option){option, optarg};
        else
            server_given[server_count++] = (struct given_option){option, optarg};
        if (c == 'n') {
            name = optarg;
            plan->name_given = true;
        }
    }
    if (optind < argc) {
        fprintf(stderr,
                "uzram serve: unexpected argument '%s'\n"
                "Try 'uzram serve --help' for more information.\n",
                argv[optind]);
        return 2;
    }
    if (config_path != NULL) {
        int status = load_config(plan, config_path, name, loaded);
        if (status != GO_ON)
            return status;
    }
    /* The server's settings: its section's, then the command line's. */
    int listed = plan->server != NULL ? section_devices(plan, plan->server) : 0;
    if (listed < 0)
        return 1;
    plan->listed_count = (size_t)listed;
    plan->several = plan->spec_count > 0 || listed > 0;
    if (plan->server != NULL && apply_section(plan, NULL, plan->server, SECTION_SERVER) < 0)
        return 1;
    const struct origin command_line = {NULL, 0, NULL, false};
    for (size_t i = 0; i < server_count; i++)
        if (apply_option(plan, NULL, server_given[i].option, server_given[i].arg, &command_line) <
            0)
            return 1;
    /* The client deadlines, shorter for tests that wait for them. */
    const char *timeout = getenv("UZRAM_SERVE_TIMEOUT");
    if (timeout != NULL && timeout[0] != '\0') {
        unsigned long value;
        if (parse_uint(timeout, 3600, 10, &value) < 0 || value == 0) {
            fprintf(stderr, "uzram: bad UZRAM_SERVE_TIMEOUT '%s'; use seconds from 1 to 3600\n",
                    timeout);
            return 1;
        }
        options->timeout = (unsigned)value;
    }
    return GO_ON;
}

/* ------------------------------------------------------------------------
 * The devices
 * ---------------------------------------------------------------------- */

/* The keys of a device SPEC after NAME: ":SIZE" (may be empty: the default), then
 * ":KEY=VALUE" or ":KEY" (a flag: yes) per setting. `text` is cut in place and must live
 * as long as the device's plan. */
static int apply_spec(struct serve_plan *plan, struct device_plan *device, char *text,
                      const struct origin *from)
{
    char *size = text;
    char *rest = strchr(size, ':');
    if (rest != NULL)
        *rest++ = '\0';
    if (size[0] != '\0')
        apply_option(plan, device, option_by_code('s'), size, from);
    while (rest != NULL) {
        char *key = rest;
        rest = strchr(key, ':');
        if (rest != NULL)
            *rest++ = '\0';
        char *value = strchr(key, '=');
        if (value != NULL)
            *value++ = '\0';
        const struct serve_option *option = option_by_key(key);
        if (option == NULL || !sets_device(option)) {
            char keys[512] = "";
            size_t used = 0;
            for (size_t i = 0; i < SERVE_OPTION_COUNT && used < sizeof keys; i++)
                if (serve_options[i].name != NULL && sets_device(&serve_options[i]))
                    used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s",
                                             used ? ", " : "", serve_options[i].name);
            complain(plan,
                     "%s'%s' is %s; a device takes NAME:SIZE, then KEY=VALUE with the keys %s "
                     "(separated by ':')",
                     option_label(option_by_code('s'), from, &(struct label){0})->where, key,
                     option == NULL ? "no key" : "a setting of the whole server", keys);
            return -1;
        }
        if (value == NULL && option->has_arg == required_argument) {
            complain(plan, "in '%s': %s needs a value: %s=%s", from->spec, key, key,
                     option->arg ? option->arg : "VALUE");
            return -1;
        }
        if (apply_option(plan, device, option, value, from) < 0)
            return -1;
    }
    return 0;
}

/* One device's settings, each layer over the one before: the defaults; the device options
 * of the server's section (with several devices; the one device's section otherwise); the
 * device's own section, when the file has one ([NAME]; a bare NAME must have one); the
 * device options of the command line; the keys of its SPEC (`spec`: the text after NAME,
 * NULL for none, cut in place). */
static int plan_device(struct serve_plan *plan, struct device_plan *device, const char *name,
                       char *spec, const struct origin *from)
{
    device_defaults(device, name);
    if (plan->server != NULL && apply_section(plan, device, plan->server, SECTION_DEFAULTS) < 0)
        return -1;
    if (plan->several && plan->file != NULL) {
        const struct config_section *own = config_section(plan->file, name);
        if (own == NULL && spec == NULL && from->spec != NULL) {
            complain(plan, "%s has no section [%s]; give the device a size: %s:SIZE",
                     plan->file->path, name, name);
            return -1;
        }
        if (own != NULL && own != plan->server &&
            apply_section(plan, device, own, SECTION_DEVICE) < 0)
            return -1;
    }
    const struct origin command_line = {NULL, 0, NULL, false};
    for (size_t i = 0; i < plan->given_count; i++)
        if (apply_option(plan, device, plan->given[i].option, plan->given[i].arg, &command_line) <
            0)
            return -1;
    if (spec != NULL && apply_spec(plan, device, spec, from) < 0)
        return -1;
    return 0;
}

/* Whether option `code` was set at all, among the origins `from` (a device's, the server's). */
static bool given(const struct origin *from, int code)
{
    return from[option_by_code(code) - serve_options].given;
}

/* How a later check names option `code`, as it was last given, among the origins `from` (a
 * device's, or the server's). */
static const struct label *label_of(const struct origin *from, int code, struct label *label)
{
    const struct serve_option *option = option_by_code(code);
    return option_label(option, &from[option - serve_options], label);
}

/* Size, algorithm and level, checked before the device is made so that each
 * mistake gets its own message. */
static int device_settings(const struct serve_plan *plan, struct device_plan *device)
{
    struct uzram_config *config = &device->config;
    struct label label;

    label_of(device->from, 's', &label);
    if (parse_size_option(plan, &label, device->size_text, &config->disksize) < 0)
        return 1;
    if (config->disksize == 0 || config->disksize % UZRAM_PAGE_SIZE != 0) {
        complain(plan, "%s%s '%s' must be a non-zero multiple of 4K", label.where, label.name,
                 device->size_text);
        return 1;
    }
    int min_level, max_level, default_level;
    if (uzram_algorithm_levels(config->comp_algorithm, &min_level, &max_level, &default_level) <
        0) {
        char list[256] = "";
        uzram_algorithm_list(NULL, list, sizeof list);
        list[strcspn(list, "\n")] = '\0';
        label_of(device->from, 'a', &label);
        complain(plan, "%sunknown %s '%s'; choose one of: %s", label.where, label.name,
                 config->comp_algorithm, list);
        return 1;
    }
    const char *level_text = device->level_text;
    if (level_text != NULL) {
        char *end;
        errno = 0;
        long level = strtol(level_text, &end, 10);
        if (errno || end == level_text || *end != '\0' ||
            (min_level == 0 && max_level == 0 && level != 0) ||
            (level != 0 && (level < min_level || level > max_level))) {
            label_of(device->from, 'l', &label);
            if (min_level == 0 && max_level == 0)
                complain(plan, "%salgorithm %s has no levels; drop %s", label.where,
                         config->comp_algorithm, label.name);
            else
                complain(plan, "%sbad %s '%s' for %s; use %d to %d (default %d)", label.where,
                         label.name, level_text, config->comp_algorithm, min_level, max_level,
                         default_level);
            return 1;
        }
        config->comp_level = (int)level;
    }
    /* A swap device that needs memory to store what is swapped out must not grow without
     * bound: the limit is where writes start failing instead of the machine. */
    if (plan->options.swap && config->mem_limit == 0 && plan->options.server_mem_limit == 0) {
        label_of(plan->from, OPT_SWAP, &label);
        complain(plan,
                 "%s%s needs a memory limit: add %s (e.g. a quarter of RAM) so that "
                 "swapped-out pages cannot take all memory%s%s",
                 label.where, label.name,
                 label.where[0] ? "'mem-limit = SIZE' to the section" : "--mem-limit SIZE",
                 plan->several ? "; or --server-mem-limit; device " : "",
                 plan->several ? device->name : "");
        return 1;
    }
    return GO_ON;
}

/* The devices of the command line and the configuration, planned and checked: the one, or
 * the server section's devices key's and then --device's, in that order. */
static int plan_devices(struct serve_plan *plan)
{
    size_t total = plan->several ? plan->listed_count + plan->spec_count : 1;
    plan->devices = calloc(total, sizeof *plan->devices);
    plan->spec_copies = calloc(total, sizeof *plan->spec_copies);
    if (plan->devices == NULL || plan->spec_copies == NULL) {
        fputs("uzram: out of memory\n", stderr);
        return 1;
    }
    plan->device_count = total; /* what cmd_serve() frees, also after a failure below */
    if (total > NBD_SERVER_MAX_EXPORTS) {
        fprintf(stderr, "uzram: %zu devices; one server serves at most %u\n", total,
                NBD_SERVER_MAX_EXPORTS);
        return 1;
    }
    for (size_t i = 0; i < total; i++) {
        struct device_plan *device = &plan->devices[i];
        const char *name = plan->options.name;
        char *spec = NULL;
        struct origin from = {NULL, 0, NULL, false};
        if (plan->several && i < plan->listed_count) {
            name = plan->listed[i];
            if (config_section(plan->file, name) == NULL) {
                fprintf(stderr, "uzram: %s: [%s] lists device %s, which has no section [%s]\n",
                        plan->file->path, plan->server->name, name, name);
                return 1;
            }
        } else if (plan->several) {
            const char *text = plan->specs[i - plan->listed_count];
            char *copy = plan->spec_copies[i] = strdup(text);
            if (copy == NULL) {
                fputs("uzram: out of memory\n", stderr);
                return 1;
            }
            char *colon = strchr(copy, ':');
            if (colon != NULL) {
                *colon = '\0';
                spec = colon + 1;
            }
            name = copy;
            from.spec = text;
            if (!util_valid_name(name)) {
                fprintf(stderr,
                        "uzram: bad --device '%s'; use NAME[:SIZE[:KEY=VALUE]...], NAME of 1-64 "
                        "characters from A-Z a-z 0-9 . _ -, not starting with -\n",
                        text);
                return 1;
            }
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(plan->devices[j].name, name) == 0) {
                fprintf(stderr,
                        "uzram: two devices named %s; each device needs a name of its own\n", name);
                return 1;
            }
        }
        if (plan_device(plan, device, name, spec, &from) < 0)
            return 1;
        int status = device_settings(plan, device);
        if (status != GO_ON)
            return status;
    }
    /* The server is named after its first device unless --name (or its section) says. */
    if (plan->several && plan->server == NULL && !plan->name_given)
        plan->options.name = plan->devices[0].name;
    return GO_ON;
}

/* Why nobody but this user may be able to change what is in `dir` does not hold
 * (util_private_dir), or that this user cannot write there; NULL when it is fine. A
 * control socket there cannot be taken or replaced by another user first. */
static const char *not_private(const char *dir)
{
    const char *why = util_private_dir(dir);
    if (why == NULL && access(dir, W_OK | X_OK) < 0)
        why = strerror(errno);
    return why;
}

/* The NBD socket (given, or NAME.sock in the runtime directory, which is
 * created) and the control socket NAME.ctl. The control socket changes
 * settings and can reset the disk, so it lives in the runtime directory,
 * which only this user can write; never beside a --unix socket in a shared
 * directory such as /tmp, where another user could bind NAME.ctl first. */
static int socket_paths(struct serve_plan *plan)
{
    struct nbd_server_options *options = &plan->options;
    const char *unix_path = plan->unix_path;
    bool activated = options->inherited_count > 0;
    bool no_unix = plan->no_unix || activated; /* the manager's sockets are served instead */
    if (plan->no_unix &&
        (given(plan->from, OPT_SOCKET_MODE) || given(plan->from, OPT_SOCKET_GROUP))) {
        fputs("uzram: --socket-mode and --socket-group are for the NBD Unix socket, and with "
              "--no-unix there is none; drop them\n",
              stderr);
        return 1;
    }

    if (activated && options->inherited_ctl >= 0)
        return GO_ON; /* the control socket was handed over too */
    if (plan->no_unix && unix_path != NULL) {
        fputs("uzram: --unix and --no-unix contradict each other; keep one\n", stderr);
        return 1;
    }
    if (no_unix && !activated && options->tcp == NULL) {
        fputs("uzram: --no-unix leaves nothing to listen on; add --tcp [ADDR:]PORT\n", stderr);
        return 1;
    }
    /* A relative --unix is made absolute: `uzram status` shows where the socket is, and finds
     * the server from it (status -u PATH), from any directory. */
    if (unix_path != NULL && unix_path[0] != '/') {
        char cwd[PATH_MAX];
        int n =
            getcwd(cwd, sizeof cwd) == NULL
                ? -1
                : snprintf(plan->unix_buffer, sizeof plan->unix_buffer, "%s/%s", cwd, unix_path);
        if (n < 0 || (size_t)n >= sizeof plan->unix_buffer) {
            fprintf(stderr, "uzram: cannot make --unix %s an absolute path; give one\n", unix_path);
            return 1;
        }
        unix_path = plan->unix_buffer;
    }
    char runtime_dir[PATH_MAX], socket_dir[PATH_MAX], why[256];
    const char *ctl_dir = runtime_dir;
    int n;
    if (util_runtime_dir(runtime_dir, sizeof runtime_dir) < 0) {
        fputs("uzram: $XDG_RUNTIME_DIR is too long\n", stderr);
        return 1;
    }
    int rc = util_make_dir(runtime_dir);
    const char *problem = rc < 0 ? strerror(-rc) : not_private(runtime_dir);
    if (problem != NULL)
        snprintf(why, sizeof why, "%s", problem);
    if (problem != NULL && (unix_path == NULL || no_unix)) {
        fprintf(stderr,
                "uzram: cannot create sockets in %s: %s; set XDG_RUNTIME_DIR to a directory of "
                "your own or use --unix PATH\n",
                runtime_dir, why);
        return 1;
    }
    if (problem != NULL) {
        /* A --unix socket and no usable runtime directory: the control socket
         * may go beside the NBD socket, if that directory is private. */
        const char *slash = strrchr(unix_path, '/');
        if (slash == NULL)
            snprintf(socket_dir, sizeof socket_dir, ".");
        else if (slash == unix_path)
            snprintf(socket_dir, sizeof socket_dir, "/");
        else
            snprintf(socket_dir, sizeof socket_dir, "%.*s", (int)(slash - unix_path), unix_path);
        const char *shared = not_private(socket_dir);
        if (shared != NULL) {
            fprintf(stderr,
                    "uzram: the control socket cannot go in %s (%s) nor in %s (%s); set "
                    "XDG_RUNTIME_DIR to a directory of your own\n",
                    runtime_dir, why, socket_dir, shared);
            return 1;
        }
        ctl_dir = socket_dir;
    }
    if (unix_path == NULL && !no_unix) {
        n = snprintf(plan->unix_buffer, sizeof plan->unix_buffer, "%.4000s/%s.sock", runtime_dir,
                     options->name);
        if (n < 0 || (size_t)n >= sizeof plan->unix_buffer) {
            fputs("uzram: socket path too long; use --unix PATH\n", stderr);
            return 1;
        }
        unix_path = plan->unix_buffer;
    }
    n = snprintf(plan->ctl_path, sizeof plan->ctl_path, "%.4000s/%s.ctl", ctl_dir, options->name);
    if (n < 0 || (size_t)n >= sizeof plan->ctl_path) {
        fputs("uzram: control socket path too long\n", stderr);
        return 1;
    }
    options->unix_path = activated ? NULL : unix_path;
    options->ctl_path = plan->ctl_path;
    return GO_ON;
}

/* --tls and its credentials fit together: credentials alone mean require (as qemu-nbd's
 * --tls-creds), a mode other than off needs credentials, and nothing given is ignored. The
 * files themselves are loaded when the server starts (nbd_tls_create). */
static int tls_settings(struct serve_plan *plan)
{
    struct nbd_tls_options *tls = &plan->options.tls;
    struct label mode, certificates, psk, verify;
    bool has_credentials = tls->certificates != NULL || tls->psk_file != NULL;
    label_of(plan->from, OPT_TLS, &mode);
    label_of(plan->from, OPT_TLS_CERTIFICATES, &certificates);
    label_of(plan->from, OPT_TLS_PSK, &psk);
    label_of(plan->from, OPT_TLS_VERIFY_PEER, &verify);
    if (tls->certificates != NULL && tls->psk_file != NULL) {
        fprintf(stderr, "uzram: %s%s and %s%s: choose one kind of TLS credentials\n",
                certificates.where, certificates.name, psk.where, psk.name);
        return 1;
    }
    if (!plan->tls_given && has_credentials)
        tls->mode = NBD_TLS_REQUIRE;
    if (tls->mode == NBD_TLS_OFF && has_credentials) {
        fprintf(stderr,
                "uzram: %s%s off with %s%s: the credentials would go unused; drop one of them\n",
                mode.where, mode.name, tls->psk_file ? psk.where : certificates.where,
                tls->psk_file ? psk.name : certificates.name);
        return 1;
    }
    if (tls->mode != NBD_TLS_OFF && !has_credentials) {
        fprintf(stderr,
                "uzram: %s%s needs credentials: --tls-certificates DIR (X.509) or --tls-psk "
                "FILE (pre-shared keys)\n",
                mode.where, mode.name);
        return 1;
    }
    if (tls->verify_peer && tls->certificates == NULL) {
        fprintf(stderr,
                "uzram: %s%s checks X.509 client certificates: it needs --tls-certificates DIR "
                "with ca-cert.pem\n",
                verify.where, verify.name);
        return 1;
    }
    return GO_ON;
}

/* Socket activation (uzram@.socket): a service manager listens and hands its sockets over
 * (sd_listen_fds(3)); they are served instead of sockets of our own. The one named "control"
 * (FileDescriptorName=control) is the control socket; the others serve NBD. Options that say
 * where to listen would make a second place: they are refused, not ignored. */
static int activation(struct serve_plan *plan)
{
    struct nbd_server_options *options = &plan->options;
    char error[256];
    options->inherited_ctl = -1;
    int count = systemd_init(error, sizeof error);
    if (count < 0) {
        fprintf(stderr, "uzram: %s\n", error);
        return 1;
    }
    if (count == 0)
        return GO_ON;
    static const int listening[] = {'u', 't', OPT_NO_UNIX, OPT_SOCKET_MODE, OPT_SOCKET_GROUP};
    for (size_t i = 0; i < sizeof listening / sizeof listening[0]; i++) {
        if (!given(plan->from, listening[i]))
            continue;
        struct label label;
        label_of(plan->from, listening[i], &label);
        fprintf(stderr,
                "uzram: %s%s: the service manager handed over %d socket%s to serve (socket "
                "activation, LISTEN_FDS): drop %s, the socket unit says where to listen and who "
                "may connect (ListenStream=, SocketMode=, SocketGroup=)\n",
                label.where, label.name, count, count == 1 ? "" : "s", label.name);
        return 1;
    }
    size_t handed;
    const struct systemd_socket *sockets = systemd_sockets(&handed);
    for (size_t i = 0; i < handed; i++) {
        if (strcmp(sockets[i].name, "control") != 0) {
            plan->inherited[options->inherited_count++] = sockets[i].fd;
            continue;
        }
        struct sockaddr_un address = {0};
        socklen_t length = sizeof address;
        if (sockets[i].family != AF_UNIX ||
            getsockname(sockets[i].fd, (struct sockaddr *)&address, &length) < 0 ||
            address.sun_path[0] != '/') {
            fprintf(stderr,
                    "uzram: the socket named 'control' (descriptor %d) must be a Unix "
                    "socket with a path (ListenStream=/run/uzram/NAME.ctl)\n",
                    sockets[i].fd);
            return 1;
        }
        options->inherited_ctl = sockets[i].fd;
        snprintf(plan->ctl_path, sizeof plan->ctl_path, "%s", address.sun_path);
    }
    if (options->inherited_count == 0) {
        fputs("uzram: the service manager handed over only a control socket; add a "
              "ListenStream= for NBD to the socket unit\n",
              stderr);
        return 1;
    }
    options->inherited = plan->inherited;
    return GO_ON;
}

/* --recompress algo=NAME[,level=N][,dict=PATH|auto] and --recompress-idle: the secondary
 * algorithm of priority 1 and the background thread, set through the attributes that
 * change them at run time (recomp_algorithm, algorithm_params, recompress_idle). */
static int recompression(const struct serve_plan *plan, struct uzram *dev,
                         const struct device_plan *device)
{
    if (!device->recompress && device->recompress_idle == 0)
        return 0;
    /* zstd at level 7 unless told: docs/BENCHMARKS.md measured it the best trade on build
     * output (higher levels save next to nothing more and cost more CPU). The words of
     * SPEC become the attributes' words: algo= for recomp_algorithm, the rest for
     * algorithm_params. */
    char algorithm[96] = "algo=zstd", params[PATH_MAX + 64] = "priority=1";
    const char *spec = device->recompress ? device->recompress : "";
    bool has_level = false;
    for (const char *word = spec; *word;) {
        size_t length = strcspn(word, ",");
        bool is_algo = strncmp(word, "algo=", 5) == 0 && length > 5 && length < 64;
        bool is_param = strncmp(word, "level=", 6) == 0 || strncmp(word, "dict=", 5) == 0;
        if (is_algo) {
            snprintf(algorithm, sizeof algorithm, "%.*s", (int)length, word);
        } else if (is_param && strlen(params) + length + 2 < sizeof params) {
            snprintf(params + strlen(params), sizeof params - strlen(params), " %.*s", (int)length,
                     word);
            has_level |= strncmp(word, "level=", 6) == 0;
        } else {
            complain(plan,
                     "bad --recompress '%s'; use algo=NAME[,level=N][,dict=PATH|auto], e.g. "
                     "algo=zstd,level=7,dict=auto",
                     spec);
            return -1;
        }
        word += length + (word[length] == ',');
    }
    if (!has_level && strcmp(algorithm, "algo=zstd") == 0)
        strcat(params, " level=7");
    strcat(algorithm, " priority=1");
    int rc = uzram_attr_set(dev, "recomp_algorithm", algorithm);
    if (rc == 0)
        rc = uzram_attr_set(dev, "algorithm_params", params);
    if (rc < 0) {
        complain(plan,
                 "--recompress '%s': %s; use algo=NAME[,level=N][,dict=PATH|auto] with an "
                 "algorithm, level and dictionary file this build takes (dictionaries: zstd only)",
                 spec, strerror(-rc));
        return -1;
    }
    rc = uzram_set_recompress_idle(dev, device->recompress_idle);
    if (rc < 0) {
        complain(plan, "cannot start the recompression thread: %s", strerror(-rc));
        return -1;
    }
    return 0;
}

/* --backing-file, --backing-size, --writeback-when-full, --writeback-idle, --writeback-rate:
 * the backing store and writeback, through the library calls behind the attributes that
 * change them at run time (backing_dev, writeback_when_full, writeback_idle, writeback_rate). */
static int writeback(const struct serve_plan *plan, struct uzram *dev,
                     const struct device_plan *device)
{
    struct label label;
    const char *needs = device->writeback_when_full               ? "--writeback-when-full"
                        : device->writeback_idle                  ? "--writeback-idle"
                        : device->backing_size                    ? "--backing-size"
                        : device->backing_overwrite               ? "--overwrite-backing-file"
                        : given(device->from, OPT_WRITEBACK_RATE) ? "--writeback-rate"
                                                                  : NULL;
    if (!device->backing_file) {
        if (needs)
            complain(plan, "%s needs --backing-file PATH, where pages are written back", needs);
        return needs ? -1 : 0;
    }
    label_of(device->from, OPT_BACKING_FILE, &label);
    char why[PATH_MAX + 256]; /* hot-add: from another process, so an absolute path only */
    int rc = backing_dev_open(dev, device->backing_file, device->backing_size,
                              device->backing_overwrite, plan->message != NULL, why, sizeof why);
    if (rc < 0) {
        complain(plan, "%scannot use %s '%s' to write back to: %s", label.where, label.name,
                 device->backing_file, why);
        return -1;
    }
    if (given(device->from, OPT_WRITEBACK_RATE))
        uzram_set_writeback_rate(dev, device->writeback_rate);
    rc = uzram_set_writeback_when_full(dev, device->writeback_when_full);
    if (rc == 0)
        rc = uzram_set_writeback_idle(dev, device->writeback_idle);
    if (rc < 0) {
        complain(plan, "cannot start the writeback thread: %s", strerror(-rc));
        return -1;
    }
    return 0;
}

/* Make a planned device, with its background threads. Returns 0 or -1 after a complaint. */
static int make_device(const struct serve_plan *plan, const struct device_plan *device,
                       struct nbd_new_device *out)
{
    struct uzram *dev;
    int rc = uzram_create(&device->config, &dev);
    if (rc < 0) {
        char why[200];
        util_table_figures(device->config.disksize, why, sizeof why);
        if (rc == -ENOMEM || rc == -E2BIG) /* -E2BIG: the table would pass the machine's share */
            complain(plan, "not enough memory to create a %s device: %s; use a smaller size",
                     device->size_text, why);
        else
            complain(plan, "cannot create device %s: %s; check its size, algorithm and level",
                     device->name, strerror(-rc));
        return -1;
    }
    if (recompression(plan, dev, device) < 0 || writeback(plan, dev, device) < 0) {
        uzram_destroy(dev);
        return -1;
    }
    *out = (struct nbd_new_device){.dev = dev, .read_only = device->read_only};
    snprintf(out->name, sizeof out->name, "%s", device->name);
    return 0;
}

/* hot-add, on a control request's thread: the device SPEC takes, over what the server's
 * devices take by default (its section's device keys, the command line's device options;
 * [NAME] of its configuration file if there is one), exactly as --device would. */
static int hot_add(void *context, const char *spec, struct nbd_new_device *out, char *message,
                   size_t message_size)
{
    const struct serve_plan *server = context;
    /* The server's plan is only read; complaints go to this request's own answer. */
    struct serve_plan *plan = malloc(sizeof *plan);
    struct device_plan *device = malloc(sizeof *device);
    char *copy = strdup(spec);
    int rc = -ENOMEM;
    snprintf(message, message_size, "out of memory");
    if (plan != NULL && device != NULL && copy != NULL) {
        *plan = *server;
        plan->message = message;
        plan->message_size = message_size;
        plan->several = true;
        message[0] = '\0';
        char *colon = strchr(copy, ':');
        if (colon != NULL)
            *colon = '\0';
        const struct origin from = {NULL, 0, spec, false};
        rc = -EINVAL;
        if (!util_valid_name(copy))
            complain(plan,
                     "bad device name '%s'; use 1-64 characters from A-Z a-z 0-9 . _ -, not "
                     "starting with -",
                     copy);
        else if (plan_device(plan, device, copy, colon ? colon + 1 : NULL, &from) == 0 &&
                 device_settings(plan, device) == GO_ON && make_device(plan, device, out) == 0)
            rc = 0;
    }
    free(copy);
    free(device);
    free(plan);
    return rc;
}

/* Make every device, serve them until a signal; the server destroys them. */
static int create_and_serve(struct serve_plan *plan)
{
    /* Before the devices and every thread: threads inherit the I/O flusher mark. */
    if (plan->options.swap) {
        char message[512];
        if (swap_safety_enable(message, sizeof message) < 0) {
            fprintf(stderr, "uzram: %s\n", message);
            return 1;
        }
    }
    struct nbd_new_device *made = calloc(plan->device_count, sizeof *made);
    if (made == NULL) {
        fputs("uzram: out of memory\n", stderr);
        return 1;
    }
    for (size_t i = 0; i < plan->device_count; i++) {
        if (make_device(plan, &plan->devices[i], &made[i]) < 0) {
            while (i-- > 0)
                uzram_destroy(made[i].dev);
            free(made);
            return 1;
        }
    }
    plan->options.devices = made;
    plan->options.device_count = plan->device_count;
    plan->options.make_device = hot_add;
    plan->options.make_device_context = plan;
    /* The server owns the devices from here, even when it fails. */
    struct nbd_server *server;
    int status = 1;
    if (nbd_server_create(&plan->options, &server) == 0) {
        struct control_service *control;
        int rc = control_start(nbd_server_control_fd(server), server, &control);
        if (rc < 0) {
            fprintf(stderr, "uzram: cannot serve the control socket: %s\n", strerror(-rc));
        } else {
            status = nbd_server_serve(server);
            control_stop(control);
        }
        nbd_server_destroy(server);
    }
    free(made);
    return status;
}

int cmd_serve(int argc, char **argv)
{
    struct serve_plan *plan = calloc(1, sizeof *plan);
    if (plan == NULL) {
        fputs("uzram: out of memory\n", stderr);
        return 1;
    }
    struct config *config = NULL; /* its strings stay in use until the end */
    int status = parse_options(argc, argv, plan, &config);
    if (status == GO_ON)
        status = activation(plan);
    if (status == GO_ON)
        status = plan_devices(plan);
    if (status == GO_ON)
        status = tls_settings(plan);
    if (status == GO_ON)
        status = socket_paths(plan);
    if (status == GO_ON)
        status = create_and_serve(plan);
    config_free(config);
    for (size_t i = 0; plan->spec_copies != NULL && i < plan->device_count; i++)
        free(plan->spec_copies[i]);
    free(plan->spec_copies);
    free(plan->devices);
    free(plan->given);
    free(plan->specs);
    free(plan->listed_text);
    free(plan);
    return status;
}

/* ------------------------------------------------------------------------
 * For `uzram hot-add`
 * ---------------------------------------------------------------------- */

void serve_device_options_usage(FILE *out)
{
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++) {
        const struct serve_option *o = &serve_options[i];
        if (o->name == NULL || !sets_device(o))
            continue;
        char left[64];
        snprintf(left, sizeof left, "  %c%c%c --%s%s%s", o->code < 256 ? '-' : ' ',
                 o->code < 256 ? o->code : ' ', o->code < 256 ? ',' : ' ', o->name,
                 o->arg ? " " : "", o->arg ? o->arg : "");
        const char *end = strchr(o->help, '\n');
        fprintf(out, "%-*s %.*s%s\n", HELP_COLUMN - 1, left,
                end ? (int)(end - o->help) : (int)strlen(o->help), o->help, end ? " ..." : "");
    }
}

int serve_device_spec(const char *name, const char *size, int argc, char **argv, char *spec,
                      size_t spec_size)
{
    struct option long_options[SERVE_OPTION_COUNT + 1];
    char short_options[3 * SERVE_OPTION_COUNT + 2] = "+";
    size_t long_count = 0, short_length = 1;
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++) {
        const struct serve_option *o = &serve_options[i];
        if (o->name == NULL || !sets_device(o) || o->code == 's')
            continue;
        long_options[long_count++] = (struct option){o->name, o->has_arg, NULL, o->code};
        if (o->code < 256) {
            short_options[short_length++] = (char)o->code;
            if (o->has_arg == required_argument)
                short_options[short_length++] = ':';
        }
    }
    long_options[long_count] = (struct option){NULL, 0, NULL, 0};
    short_options[short_length] = '\0';

    size_t used = (size_t)snprintf(spec, spec_size, "%s:%s", name, size ? size : "");
    int c, index;
    optind = 1;
    opterr = 1;
    while ((c = getopt_long(argc, argv, short_options, long_options, &index)) != -1) {
        const struct serve_option *option = option_by_code(c);
        if (option == NULL)
            return 2;
        if (optarg != NULL && strchr(optarg, ':') != NULL) {
            fprintf(stderr,
                    "uzram: --%s '%s': a value with ':' cannot go in a device's settings; "
                    "rename the file, or serve the device from a configuration file\n",
                    option->name, optarg);
            return 2;
        }
        used += (size_t)snprintf(spec + used, used < spec_size ? spec_size - used : 0, ":%s%s%s",
                                 option->name, optarg ? "=" : "", optarg ? optarg : "");
    }
    if (optind < argc) {
        fprintf(stderr, "uzram hot-add: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (used >= spec_size) {
        fputs("uzram hot-add: the settings are too long for one request\n", stderr);
        return 2;
    }
    return 0;
}
