/* serve_options.c - the table of `uzram serve`'s options (serve_options.h) and the lookups made
 * from it, how a message names where a setting came from, and the parsers of the values
 * several options share. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/sizes.h"
#include "server/serve_options.h"

/* Every option of `uzram serve`, once: getopt's table and the lines of --help (through the
 * command framework, cli/command.c) and the keys of the configuration file are all made from
 * this list, so an option added here is a key too. */
const struct cli_option serve_options[] = {
    CLI_HEADING("Device (with several, each --device may set these):", SETS_DEVICE),
    {"size", 's', required_argument, "SIZE", "disk size: 512M, 4G, 50% (of RAM); default 1G", 0,
     CLI_BY_COMMAND},
    {"algorithm", 'a', required_argument, "NAME", "compression algorithm (default lz4)", 0,
     CLI_BY_COMMAND},
    {"level", 'l', required_argument, "N", "compression level (default: the algorithm's)", 0,
     CLI_BY_COMMAND},
    {"no-same-filled", OPT_NO_SAME_FILLED, optional_argument, NULL,
     "do not store same-filled pages as one word", 0, CLI_BY_COMMAND},
    {"dedup", 'd', optional_argument, NULL, "store identical pages once", 0, CLI_BY_COMMAND},
    {"mem-limit", 'm', required_argument, "SIZE",
     "most memory the compressed pages may use (default none)", 0, CLI_BY_COMMAND},
    {"recompress-idle", OPT_RECOMPRESS_IDLE, required_argument, "N",
     "recompress pages unused for N seconds, in the\n"
     "background (default 0: off)",
     0, CLI_BY_COMMAND},
    {"recompress-cpu", OPT_RECOMPRESS_CPU, required_argument, "PERCENT",
     "share of one CPU the background recompression\n"
     "may use, also when the CPUs are busy (1..100;\n"
     "default 20)",
     0, CLI_BY_COMMAND},
    {"recompress", OPT_RECOMPRESS, required_argument, "SPEC",
     "the algorithm that recompresses: algo=NAME[,level=N]\n"
     "[,dict=PATH|auto][,group=N] (default algo=zstd,level=7);\n"
     "group=N packs idle neighbours N (2..16) to an object",
     0, CLI_BY_COMMAND},
    {"backing-file", OPT_BACKING_FILE, required_argument, "PATH",
     "write pages back to PATH, a new or empty file of\n"
     "yours (mode 0600, sized sparsely) or a block device;\n"
     "what it holds is as volatile as the memory part",
     0, CLI_BY_COMMAND},
    {"overwrite-backing-file", OPT_OVERWRITE_BACKING_FILE, optional_argument, NULL,
     "let --backing-file empty a file that holds data", 0, CLI_BY_COMMAND},
    {"backing-size", OPT_BACKING_SIZE, required_argument, "SIZE",
     "size of the backing file (default twice --size; a\n"
     "block device: all of it)",
     0, CLI_BY_COMMAND},
    {"writeback-when-full", OPT_WRITEBACK_WHEN_FULL, optional_argument, NULL,
     "a write past --mem-limit writes back the coldest\n"
     "pages instead of failing (needs --backing-file)",
     0, CLI_BY_COMMAND},
    {"writeback-idle", OPT_WRITEBACK_IDLE, required_argument, "N",
     "write back pages unused for N seconds, in the\n"
     "background, paced by --writeback-rate (default 0: off)",
     0, CLI_BY_COMMAND},
    {"writeback-rate", OPT_WRITEBACK_RATE, required_argument, "N",
     "pages a second the background writeback may write\n"
     "(default 4096; 0: no limit)",
     0, CLI_BY_COMMAND},
    {"read-only", 'r', optional_argument, NULL, "refuse writes", 0, CLI_BY_COMMAND},
    {"persist", OPT_PERSIST, optional_argument, "[=PATH]",
     "keep the device's state (its pages) where it outlives\n"
     "the server: in PATH, a file on tmpfs (created, or\n"
     "taken over if it holds a state), or alone, in systemd's\n"
     "file descriptor store; for uzram restart and crashes",
     0, CLI_BY_COMMAND},
    CLI_HEADING("Server:", SETS_SERVER),
    {"name", 'n', required_argument, "NAME",
     "device and export name (default uzram0); with --device\n"
     "or a devices key, the server's name (default: its first\n"
     "device's); with --config, the section to serve",
     SERVE_COMMAND_LINE_ONLY, CLI_BY_COMMAND},
    {"device", OPT_DEVICE, required_argument, "SPEC",
     "serve one more device, SPEC = NAME[:SIZE[:KEY=VALUE]...]\n"
     "with the keys of the device options above (dedup alone\n"
     "for dedup=yes); a bare NAME with --config: its section.\n"
     "Repeat it for several; the first is the default export",
     SERVE_COMMAND_LINE_ONLY, CLI_BY_COMMAND},
    {"server-mem-limit", OPT_SERVER_MEM_LIMIT, required_argument, "SIZE",
     "most memory the compressed pages of all the devices\n"
     "together may use (default none)",
     0, CLI_BY_COMMAND},
    {"swap", OPT_SWAP, optional_argument, NULL,
     "for swap: lock memory, allocate without waiting for\n"
     "I/O, no OOM kill (needs --mem-limit or\n"
     "--server-mem-limit, and root)",
     0, CLI_BY_COMMAND},
    {"swap-stall-limit", OPT_SWAP_STALL_LIMIT, required_argument, "SECONDS",
     "with --swap: once swap-outs have failed at the memory\n"
     "limit for SECONDS while tasks wait on memory, ask the\n"
     "kernel's OOM killer to end a task (default 30; 0: never)",
     0, CLI_BY_COMMAND},
    CLI_HEADING("Listening:", SETS_SERVER),
    {"unix", 'u', required_argument, "PATH",
     "NBD Unix socket (default NAME.sock in the runtime\n"
     "directory, $XDG_RUNTIME_DIR/uzram; see uzram(1))",
     0, CLI_BY_COMMAND},
    {"no-unix", OPT_NO_UNIX, optional_argument, NULL, "no Unix socket (needs --tcp)", 0,
     CLI_BY_COMMAND},
    {"tcp", 't', required_argument, "[ADDR:]PORT", "also listen on TCP (default address 127.0.0.1)",
     0, CLI_BY_COMMAND},
    {"socket-mode", OPT_SOCKET_MODE, required_argument, "OCTAL",
     "mode of the NBD Unix socket (default 0600)", 0, CLI_BY_COMMAND},
    {"socket-group", OPT_SOCKET_GROUP, required_argument, "GROUP", "group of the NBD Unix socket",
     0, CLI_BY_COMMAND},
    {"threads", OPT_THREADS, required_argument, "N",
     "most worker threads per client connection (default:\n"
     "number of CPUs, at least 2); helpers start only while\n"
     "costly requests queue up; also the FUSE threads and\n"
     "ublk queues of attach",
     0, CLI_BY_COMMAND},
    CLI_HEADING("TLS (clients use nbds:// URIs):", SETS_SERVER),
    {"tls", OPT_TLS, required_argument, "off|on|require",
     "on: offer TLS (NBD_OPT_STARTTLS); require: refuse\n"
     "clients that do not start it (default: require when\n"
     "credentials are given, else off)",
     0, CLI_BY_COMMAND},
    {"tls-certificates", OPT_TLS_CERTIFICATES, required_argument, "DIR",
     "X.509: DIR holds server-cert.pem, server-key.pem and\n"
     "ca-cert.pem (certtool makes them)",
     0, CLI_BY_COMMAND},
    {"tls-psk", OPT_TLS_PSK, required_argument, "FILE",
     "pre-shared keys, USERNAME:HEXKEY lines (psktool\n"
     "-u NAME -p FILE)",
     0, CLI_BY_COMMAND},
    {"tls-verify-peer", OPT_TLS_VERIFY_PEER, optional_argument, NULL,
     "X.509: clients must show a certificate signed by\n"
     "DIR/ca-cert.pem",
     0, CLI_BY_COMMAND},
    CLI_HEADING("Other:", SETS_SERVER),
    {"config", OPT_CONFIG, required_argument, "FILE",
     "read the options of device NAME from the [NAME] section\n"
     "of FILE; options on the command line win",
     SERVE_COMMAND_LINE_ONLY, CLI_BY_COMMAND},
    {"quiet", 'q', optional_argument, NULL, "print no banner and no per-client messages", 0,
     CLI_BY_COMMAND},
};
_Static_assert(sizeof serve_options / sizeof serve_options[0] == SERVE_OPTION_COUNT,
               "SERVE_OPTION_COUNT is the number of rows of serve_options");

const struct cli_option *option_by_key(const char *key)
{
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++)
        if (serve_options[i].name != NULL && !(serve_options[i].tags & SERVE_COMMAND_LINE_ONLY) &&
            strcmp(serve_options[i].name, key) == 0)
            return &serve_options[i];
    return NULL;
}

const struct cli_option *option_by_code(int code)
{
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++)
        if (serve_options[i].name != NULL && serve_options[i].code == code)
            return &serve_options[i];
    return NULL;
}

bool option_sets_device(const struct cli_option *option)
{
    for (const struct cli_option *row = option; row >= serve_options; row--)
        if (row->name == NULL)
            return row->tags == SETS_DEVICE;
    return false;
}

const struct label *option_label(const struct cli_option *option, const struct origin *from,
                                 struct label *label)
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

bool option_given(const struct origin *from, int code)
{
    return from[option_by_code(code) - serve_options].given;
}

const struct label *option_label_of(const struct origin *from, int code, struct label *label)
{
    const struct cli_option *option = option_by_code(code);
    return option_label(option, &from[option - serve_options], label);
}

int option_note(const struct complaints *to, struct origin *origins,
                const struct cli_option *option, const char *arg, const struct origin *from,
                struct label *label, bool *flag)
{
    option_label(option, from, label);
    struct origin *where = &origins[option - serve_options];
    *where = *from;
    where->given = true;
    *flag = false;
    bool takes_value = option->has_arg == optional_argument && option->arg != NULL;
    if (takes_value && arg != NULL && !option_is_flag_word(arg)) {
        *flag = true; /* a value: the option is on, with it */
        return 0;
    }
    return option->has_arg == optional_argument ? option_parse_flag(to, label, arg, flag) : 0;
}

void option_complain(const struct complaints *to, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    if (to != NULL && to->message != NULL) {
        if (to->message[0] == '\0')
            vsnprintf(to->message, to->size, format, args);
    } else {
        fputs("uzram: ", stderr);
        vfprintf(stderr, format, args);
        fputc('\n', stderr);
    }
    va_end(args);
}

int option_parse_uint(const char *text, unsigned long max, int base, unsigned long *value)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, base);
    if (errno || end == text || *end != '\0' || v > max || text[0] == '-')
        return -1;
    *value = v;
    return 0;
}

int option_parse_size(const struct complaints *to, const struct label *label, const char *text,
                      uint64_t *bytes)
{
    int rc = sizes_parse(text, bytes); /* 512M, or 50% of RAM */
    if (rc < 0)
        option_complain(to,
                        rc == -ERANGE ? "%s%s '%s' is too large"
                        : rc != -EINVAL
                            ? "%s%s '%s': cannot read this machine's memory size"
                            : "%s%s '%s' is not a size; use a number with an optional K, "
                              "M, G or T suffix, e.g. 512M, or a share of RAM, e.g. 50%%",
                        label->where, label->name, text);
    return rc < 0 ? -1 : 0;
}

static const char *const yes[] = {"yes", "y", "true", "on", "1"};
static const char *const no[] = {"no", "n", "false", "off", "0"};

bool option_is_flag_word(const char *text)
{
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (strcasecmp(text, yes[i]) == 0 || strcasecmp(text, no[i]) == 0)
            return true;
    return false;
}

int option_parse_flag(const struct complaints *to, const struct label *label, const char *text,
                      bool *value)
{
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
    option_complain(to, "%sbad %s '%s'; use yes or no", label->where, label->name, text);
    return -1;
}
