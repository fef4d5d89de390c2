/* serve.c - `uzram serve`: command line of the NBD server, device creation, socket paths.
 * Every bad setting ends with one line saying what to do; the server itself is in nbd/server.c. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
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
#include "nbd/server.h"
#include "attach/attach.h"
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
    OPT_WRITEBACK_WHEN_FULL,
    OPT_WRITEBACK_IDLE,
    OPT_WRITEBACK_RATE,
    OPT_SWAP,
    OPT_TLS,
    OPT_TLS_CERTIFICATES,
    OPT_TLS_PSK,
    OPT_TLS_VERIFY_PEER,
};

/* Every option of `uzram serve`, once: getopt's table, the lines of --help and the keys of
 * the configuration file are all made from this list, so an option added here is a key
 * too. A row without a name starts a group of --help. Flags (optional_argument) take
 * `=yes` or `=no` in their long form, so the command line can undo a file's setting. */
static const struct serve_option {
    const char *name; /* long option and configuration key */
    int code;         /* short option letter, or OPT_* */
    int has_arg;      /* required_argument, optional_argument (a flag), no_argument */
    const char *arg;  /* what --help calls the argument */
    const char *help; /* lines after the first are indented under it */
    bool command_line_only;
} serve_options[] = {
    {NULL, 0, 0, NULL, "Device:", false},
    {"size", 's', required_argument, "SIZE", "disk size, K/M/G/T suffixes (default 1G)", false},
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
     "write pages back to PATH, a file (created, emptied,\n"
     "sized sparsely) or a block device; what it holds is\n"
     "as volatile as the memory part",
     false},
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
     "background at the lowest CPU priority (default 0: off)",
     false},
    {"writeback-rate", OPT_WRITEBACK_RATE, required_argument, "N",
     "pages a second the background writeback may write\n"
     "(default 4096; 0: no limit)",
     false},
    {"name", 'n', required_argument, "NAME",
     "device and export name (default uzram0; with --config,\n"
     "the section to serve)",
     true},
    {"read-only", 'r', optional_argument, NULL, "refuse writes", false},
    {"swap", OPT_SWAP, optional_argument, NULL,
     "for swap: lock memory, allocate without waiting for\n"
     "I/O, no OOM kill (needs --mem-limit and root)",
     false},
    {NULL, 0, 0, NULL, "Listening:", false},
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
    {NULL, 0, 0, NULL, "TLS (clients use nbds:// URIs):", false},
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
    {NULL, 0, 0, NULL, "Other:", false},
    {"config", OPT_CONFIG, required_argument, "FILE",
     "read the options of device NAME from the [NAME] section\n"
     "of FILE; options on the command line win",
     true},
    {"quiet", 'q', optional_argument, NULL, "print no banner and no per-client messages", false},
    {"help", 'h', no_argument, NULL, "show this help", true},
};
#define SERVE_OPTION_COUNT (sizeof serve_options / sizeof serve_options[0])
#define HELP_COLUMN 26

static void serve_usage(FILE *out)
{
    fputs("Usage: uzram serve [OPTION]...\n"
          "Create a compressed RAM disk and serve it over NBD until SIGINT/SIGTERM\n"
          "(SIGHUP is ignored).\n",
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
          "section per device. The control socket NAME.ctl is created in the runtime\n"
          "directory (only you can write there); see uzram status and uzram attr. The disk\n"
          "lives only in this process, like zram and tmpfs: it is lost when the server\n"
          "stops. Example:\n"
          "  uzram serve -s 4G -a zstd --dedup &\n"
          "  nbdcopy disk.img 'nbd+unix:///?socket=$XDG_RUNTIME_DIR/uzram/uzram0.sock'\n",
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

/* Where a setting came from: the command line (file NULL) or a line of the configuration. */
struct origin {
    const char *file;
    unsigned line;
};

/* What `uzram serve` was asked for: the device, and where to listen. */
struct serve_plan {
    struct uzram_config config;
    struct nbd_server_options options;
    const char *size_text, *level_text, *unix_path;
    const char *recompress; /* --recompress as given, checked once the device exists */
    uint64_t recompress_idle;
    /* Writeback, set once the device exists. */
    const char *backing_file;
    uint64_t backing_size, writeback_idle, writeback_rate;
    bool writeback_when_full, writeback_rate_given;
    bool no_unix;
    bool tls_given; /* --tls was set, not defaulted */
    /* Where each option was last set, for the messages of checks made later. */
    struct origin from[SERVE_OPTION_COUNT];
    /* Storage for the paths options points to when they are derived. */
    char unix_buffer[PATH_MAX], ctl_path[PATH_MAX];
    int inherited[SYSTEMD_MAX_LISTEN_FDS]; /* sockets handed over (socket activation) */
};

/* The GO_ON-or-status steps below return GO_ON, or the exit status to stop with. */
#define GO_ON (-1)

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

/* How a message names an option: "--size" on the command line; "size", after "FILE:LINE: ",
 * from a configuration file. Messages read "uzram: WHERE... NAME 'VALUE' ...". */
struct label {
    char where[PATH_MAX + 32];
    char name[64];
};

static const struct label *option_label(const struct serve_option *option,
                                        const struct origin *from, struct label *label)
{
    if (from->file == NULL) {
        label->where[0] = '\0';
        snprintf(label->name, sizeof label->name, "--%s", option->name);
    } else {
        snprintf(label->where, sizeof label->where, "%s:%u: ", from->file, from->line);
        snprintf(label->name, sizeof label->name, "%s", option->name);
    }
    return label;
}

static int parse_size_option(const struct label *label, const char *text, uint64_t *bytes)
{
    int rc = uzram_parse_size(text, bytes);
    if (rc == -ERANGE) {
        fprintf(stderr, "uzram: %s%s '%s' is too large\n", label->where, label->name, text);
        return -1;
    }
    if (rc < 0) {
        fprintf(stderr,
                "uzram: %s%s '%s' is not a size; use a number with an optional K, M, G "
                "or T suffix, e.g. 512M\n",
                label->where, label->name, text);
        return -1;
    }
    return 0;
}

/* A flag's value: none (the flag alone), or yes/no as systemd spells them. */
static int parse_flag(const struct label *label, const char *text, bool *value)
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
    fprintf(stderr, "uzram: %sbad %s '%s'; use yes or no\n", label->where, label->name, text);
    return -1;
}

/* One option, from the command line or the configuration: returns 0, or -1 after one line
 * that names where the bad value came from and says what is allowed. */
static int apply_option(struct serve_plan *plan, const struct serve_option *option, const char *arg,
                        const struct origin *from)
{
    struct uzram_config *config = &plan->config;
    struct nbd_server_options *options = &plan->options;
    struct label label;
    unsigned long value;
    bool flag = false;

    option_label(option, from, &label);
    plan->from[option - serve_options] = *from;
    if (option->has_arg == optional_argument && parse_flag(&label, arg, &flag) < 0)
        return -1;
    switch (option->code) {
    case 's':
        plan->size_text = arg;
        break;
    case 'a':
        config->comp_algorithm = arg;
        break;
    case 'l':
        plan->level_text = arg;
        break;
    case OPT_NO_SAME_FILLED:
        config->same_filled = !flag;
        break;
    case 'd':
        config->use_dedup = flag;
        break;
    case 'm':
        return parse_size_option(&label, arg, &config->mem_limit);
    case 'n':
        if (!util_valid_name(arg)) {
            fprintf(stderr,
                    "uzram: %sbad %s '%s'; use 1-64 characters from A-Z a-z 0-9 . _ -, not "
                    "starting with -\n",
                    label.where, label.name, arg);
            return -1;
        }
        options->name = arg;
        break;
    case 'r':
        options->read_only = flag;
        break;
    case OPT_SWAP:
        options->swap = flag;
        break;
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
            fprintf(stderr, "uzram: %sbad %s '%s'; use an octal mode like 0660\n", label.where,
                    label.name, arg);
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
            fprintf(stderr, "uzram: %sunknown %s '%s'; give a group name or id\n", label.where,
                    label.name, arg);
            return -1;
        }
        break;
    }
    case OPT_THREADS:
        if (parse_uint(arg, NBD_SERVER_MAX_THREADS, 10, &value) < 0 || value == 0) {
            fprintf(stderr, "uzram: %sbad %s '%s'; use a number from 1 to %u\n", label.where,
                    label.name, arg, NBD_SERVER_MAX_THREADS);
            return -1;
        }
        options->threads = (unsigned)value;
        break;
    case 'q':
        options->quiet = flag;
        break;
    case OPT_RECOMPRESS_IDLE:
        if (parse_uint(arg, UINT32_MAX, 10, &value) < 0) {
            fprintf(stderr, "uzram: %sbad %s '%s'; use a number of seconds, 0 for off\n",
                    label.where, label.name, arg);
            return -1;
        }
        plan->recompress_idle = value;
        break;
    case OPT_RECOMPRESS:
        plan->recompress = arg;
        break;
    case OPT_BACKING_FILE:
        plan->backing_file = arg;
        break;
    case OPT_BACKING_SIZE:
        return parse_size_option(&label, arg, &plan->backing_size);
    case OPT_WRITEBACK_WHEN_FULL:
        plan->writeback_when_full = flag;
        break;
    case OPT_WRITEBACK_IDLE:
    case OPT_WRITEBACK_RATE:
        if (parse_uint(arg, UINT32_MAX, 10, &value) < 0) {
            fprintf(stderr, "uzram: %sbad %s '%s'; use a number%s, 0 for %s\n", label.where,
                    label.name, arg, option->code == OPT_WRITEBACK_IDLE ? " of seconds" : "",
                    option->code == OPT_WRITEBACK_IDLE ? "off" : "no limit");
            return -1;
        }
        if (option->code == OPT_WRITEBACK_IDLE) {
            plan->writeback_idle = value;
        } else {
            plan->writeback_rate = value;
            plan->writeback_rate_given = true;
        }
        break;
    case OPT_TLS:
        if (strcmp(arg, "off") == 0) {
            options->tls.mode = NBD_TLS_OFF;
        } else if (strcmp(arg, "on") == 0) {
            options->tls.mode = NBD_TLS_ON;
        } else if (strcmp(arg, "require") == 0) {
            options->tls.mode = NBD_TLS_REQUIRE;
        } else {
            fprintf(stderr, "uzram: %sbad %s '%s'; use off, on or require\n", label.where,
                    label.name, arg);
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

/* The section of the configuration file to serve: the one named by --name, or the only one.
 * Every section's keys are checked, so a typo anywhere in the file is found at once. */
static int apply_config(struct serve_plan *plan, const char *path, const char *name,
                        struct config **loaded)
{
    char error[PATH_MAX + 512];
    if (config_load(path, loaded, error, sizeof error) < 0) {
        fprintf(stderr, "uzram: %s\n", error);
        return 1;
    }
    const struct config *config = *loaded;
    char keys[1024] = "";
    size_t used = 0;
    for (size_t i = 0; i < SERVE_OPTION_COUNT && used < sizeof keys; i++)
        if (serve_options[i].name != NULL && !serve_options[i].command_line_only)
            used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", used ? ", " : "",
                                     serve_options[i].name);
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
            if (option == NULL) {
                fprintf(stderr, "uzram: %s:%u: unknown key '%s' in [%s]; the keys are: %s\n", path,
                        entry->line, entry->key, section->name, keys);
                return 1;
            }
            if (entry->value[0] == '\0') {
                fprintf(stderr, "uzram: %s:%u: key '%s' needs a value%s\n", path, entry->line,
                        entry->key, option->has_arg == optional_argument ? " (yes or no)" : "");
                return 1;
            }
        }
    }

    const struct config_section *chosen = NULL;
    if (name != NULL) {
        chosen = config_section(config, name);
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
    plan->options.name = chosen->name;
    for (size_t e = 0; e < chosen->entry_count; e++) {
        const struct config_entry *entry = &chosen->entries[e];
        const struct origin from = {path, entry->line};
        if (apply_option(plan, option_by_key(entry->key), entry->value, &from) < 0)
            return 1;
    }
    return GO_ON;
}

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

    struct uzram_config *config = &plan->config;
    struct nbd_server_options *options = &plan->options;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uzram_config_init(config);
    config->comp_algorithm = "lz4";
    *options = (struct nbd_server_options){
        .name = "uzram0",
        .socket_mode = 0600,
        .socket_gid = -1,
    };
    plan->size_text = "1G";
    /* Per connection: with 2 workers one can run a request while the other
     * reads the next, so one pipelining client keeps 2 cores busy. */
    options->threads = cpus < 2                        ? 2
                       : cpus > NBD_SERVER_MAX_THREADS ? NBD_SERVER_MAX_THREADS
                                                       : (unsigned)cpus;

    struct {
        const struct serve_option *option;
        const char *arg;
    } given[argc > 0 ? argc : 1];
    size_t given_count = 0;
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
        if (c == OPT_CONFIG) {
            config_path = optarg;
        } else {
            given[given_count].option = option;
            given[given_count++].arg = optarg;
        }
        if (c == 'n')
            name = optarg;
    }
    if (optind < argc) {
        fprintf(stderr,
                "uzram serve: unexpected argument '%s'\n"
                "Try 'uzram serve --help' for more information.\n",
                argv[optind]);
        return 2;
    }
    if (config_path != NULL) {
        int status = apply_config(plan, config_path, name, loaded);
        if (status != GO_ON)
            return status;
    }
    const struct origin command_line = {NULL, 0};
    for (size_t i = 0; i < given_count; i++)
        if (apply_option(plan, given[i].option, given[i].arg, &command_line) < 0)
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

/* How a later check names an option: as it was last given. */
static const struct label *label_of(const struct serve_plan *plan, int code, struct label *label)
{
    const struct serve_option *option = option_by_code(code);
    return option_label(option, &plan->from[option - serve_options], label);
}

/* Size, algorithm and level, checked before the device is made so that each
 * mistake gets its own message. */
static int device_settings(struct serve_plan *plan)
{
    struct uzram_config *config = &plan->config;
    struct label label;

    label_of(plan, 's', &label);
    if (parse_size_option(&label, plan->size_text, &config->disksize) < 0)
        return 1;
    if (config->disksize == 0 || config->disksize % UZRAM_PAGE_SIZE != 0) {
        fprintf(stderr, "uzram: %s%s '%s' must be a non-zero multiple of 4K\n", label.where,
                label.name, plan->size_text);
        return 1;
    }
    int min_level, max_level, default_level;
    if (uzram_algorithm_levels(config->comp_algorithm, &min_level, &max_level, &default_level) <
        0) {
        char list[256] = "";
        uzram_algorithm_list(NULL, list, sizeof list);
        list[strcspn(list, "\n")] = '\0';
        label_of(plan, 'a', &label);
        fprintf(stderr, "uzram: %sunknown %s '%s'; choose one of: %s\n", label.where, label.name,
                config->comp_algorithm, list);
        return 1;
    }
    const char *level_text = plan->level_text;
    if (level_text != NULL) {
        char *end;
        errno = 0;
        long level = strtol(level_text, &end, 10);
        if (errno || end == level_text || *end != '\0' ||
            (min_level == 0 && max_level == 0 && level != 0) ||
            (level != 0 && (level < min_level || level > max_level))) {
            label_of(plan, 'l', &label);
            if (min_level == 0 && max_level == 0)
                fprintf(stderr, "uzram: %salgorithm %s has no levels; drop %s\n", label.where,
                        config->comp_algorithm, label.name);
            else
                fprintf(stderr, "uzram: %sbad %s '%s' for %s; use %d to %d (default %d)\n",
                        label.where, label.name, level_text, config->comp_algorithm, min_level,
                        max_level, default_level);
            return 1;
        }
        config->comp_level = (int)level;
    }
    /* A swap device that needs memory to store what is swapped out must not grow without
     * bound: the limit is where writes start failing instead of the machine. */
    if (plan->options.swap && config->mem_limit == 0) {
        label_of(plan, OPT_SWAP, &label);
        fprintf(stderr,
                "uzram: %s%s needs a memory limit: add %s (e.g. a quarter of RAM) so that "
                "swapped-out pages cannot take all memory\n",
                label.where, label.name,
                label.where[0] ? "'mem-limit = SIZE' to the section" : "--mem-limit SIZE");
        return 1;
    }
    return GO_ON;
}

/* Why nobody but this user may be able to change what is in `dir` does not
 * hold, or NULL when it holds: owned by this user or root, not writable by
 * group or others, and writable and searchable by this user. A control
 * socket there cannot be taken or replaced by another user first. */
static const char *not_private(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) < 0)
        return strerror(errno);
    if (st.st_uid != geteuid() && st.st_uid != 0)
        return "it belongs to another user";
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return "it is writable by other users";
    if (access(dir, W_OK | X_OK) < 0)
        return strerror(errno);
    return NULL;
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
    label_of(plan, OPT_TLS, &mode);
    label_of(plan, OPT_TLS_CERTIFICATES, &certificates);
    label_of(plan, OPT_TLS_PSK, &psk);
    label_of(plan, OPT_TLS_VERIFY_PEER, &verify);
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
    static const int listening[] = {'u', 't', OPT_NO_UNIX};
    bool given[] = {plan->unix_path != NULL, options->tcp != NULL, plan->no_unix};
    for (size_t i = 0; i < sizeof listening / sizeof listening[0]; i++) {
        if (!given[i])
            continue;
        struct label label;
        label_of(plan, listening[i], &label);
        fprintf(stderr,
                "uzram: %s%s: the service manager handed over %d socket%s to serve (socket "
                "activation, LISTEN_FDS): drop %s, the socket unit says where to listen\n",
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
static int recompression(struct uzram *dev, const struct serve_plan *plan)
{
    if (!plan->recompress && plan->recompress_idle == 0)
        return 0;
    /* zstd at level 7 unless told: docs/BENCHMARKS.md measured it the best trade on build
     * output (higher levels save next to nothing more and cost more CPU). The words of
     * SPEC become the attributes' words: algo= for recomp_algorithm, the rest for
     * algorithm_params. */
    char algorithm[96] = "algo=zstd", params[PATH_MAX + 64] = "priority=1";
    const char *spec = plan->recompress ? plan->recompress : "";
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
            fprintf(stderr,
                    "uzram: bad --recompress '%s'; use algo=NAME[,level=N][,dict=PATH|auto], "
                    "e.g. algo=zstd,level=7,dict=auto\n",
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
        fprintf(stderr,
                "uzram: --recompress '%s': %s; use algo=NAME[,level=N][,dict=PATH|auto] "
                "with an algorithm, level and dictionary file this build takes "
                "(dictionaries: zstd only)\n",
                spec, strerror(-rc));
        return -1;
    }
    rc = uzram_set_recompress_idle(dev, plan->recompress_idle);
    if (rc < 0) {
        fprintf(stderr, "uzram: cannot start the recompression thread: %s\n", strerror(-rc));
        return -1;
    }
    return 0;
}

/* --backing-file, --backing-size, --writeback-when-full, --writeback-idle, --writeback-rate:
 * the backing store and writeback, through the library calls behind the attributes that
 * change them at run time (backing_dev, writeback_when_full, writeback_idle, writeback_rate). */
static int writeback(struct uzram *dev, const struct serve_plan *plan)
{
    struct label label;
    const char *needs = plan->writeback_when_full ? "--writeback-when-full"
                        : plan->writeback_idle    ? "--writeback-idle"
                        : plan->backing_size      ? "--backing-size"
                                                  : NULL;
    if (!plan->backing_file) {
        if (needs) {
            fprintf(stderr, "uzram: %s needs --backing-file PATH, where pages are written back\n",
                    needs);
            return -1;
        }
        return 0;
    }
    label_of(plan, OPT_BACKING_FILE, &label);
    /* Absolute, so that backing_dev and the log name it wherever they are read. */
    char path[PATH_MAX], cwd[PATH_MAX];
    if (plan->backing_file[0] == '/' || !getcwd(cwd, sizeof cwd) ||
        snprintf(path, sizeof path, "%s/%s", cwd, plan->backing_file) >= (int)sizeof path)
        snprintf(path, sizeof path, "%s", plan->backing_file);
    int rc = uzram_set_backing_dev(dev, path, plan->backing_size);
    if (rc < 0) {
        const char *why = rc == -EBUSY    ? "it is in use (another server's, or a mounted device)"
                          : rc == -EINVAL ? "it must be a regular file or a block device, of at "
                                            "least 8K and at most 128T (--backing-size)"
                                          : strerror(-rc);
        fprintf(stderr, "uzram: %scannot use %s '%s' to write back to: %s\n", label.where,
                label.name, plan->backing_file, why);
        return -1;
    }
    if (plan->writeback_rate_given)
        uzram_set_writeback_rate(dev, plan->writeback_rate);
    rc = uzram_set_writeback_when_full(dev, plan->writeback_when_full);
    if (rc == 0)
        rc = uzram_set_writeback_idle(dev, plan->writeback_idle);
    if (rc < 0) {
        fprintf(stderr, "uzram: cannot start the writeback thread: %s\n", strerror(-rc));
        return -1;
    }
    return 0;
}

/* Make the device, serve it until a signal, destroy it. */
static int create_and_serve(const struct serve_plan *plan)
{
    struct uzram *dev;
    int rc;
    /* Before the device and every thread: threads inherit the I/O flusher mark. */
    if (plan->options.swap) {
        char message[512];
        if (swap_safety_enable(message, sizeof message) < 0) {
            fprintf(stderr, "uzram: %s\n", message);
            return 1;
        }
    }
    rc = uzram_create(&plan->config, &dev);
    if (rc < 0) {
        if (rc == -ENOMEM)
            fprintf(stderr,
                    "uzram: not enough memory to create a %s device; use a smaller --size\n",
                    plan->size_text);
        else
            fprintf(stderr,
                    "uzram: cannot create the device: %s; check --size, --algorithm "
                    "and --level\n",
                    strerror(-rc));
        return 1;
    }
    if (recompression(dev, plan) < 0 || writeback(dev, plan) < 0) {
        uzram_destroy(dev);
        return 1;
    }
    int status = nbd_server_run(dev, &plan->options);
    uzram_destroy(dev);
    return status;
}

int cmd_serve(int argc, char **argv)
{
    struct serve_plan plan = {0};
    struct config *config = NULL; /* the strings of its section stay in use until the end */
    int status = parse_options(argc, argv, &plan, &config);
    if (status == GO_ON)
        status = activation(&plan);
    if (status == GO_ON)
        status = device_settings(&plan);
    if (status == GO_ON)
        status = tls_settings(&plan);
    if (status == GO_ON)
        status = socket_paths(&plan);
    if (status == GO_ON)
        status = create_and_serve(&plan);
    config_free(config);
    return status;
}
