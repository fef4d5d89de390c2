/* serve.c - `uzram serve`: its command line and configuration file, and the sockets it
 * listens on. Every bad setting ends with one line saying what to do. The options are
 * server/serve_options.c's table; the devices are made by server/devices.c (which hot-add uses
 * too); the server itself is nbd/server.c. */
#include <errno.h>
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
#include "nbd/server.h"
#include "control/service.h"
#include "attach/attach.h"
#include "common/sizes.h"
#include "common/systemd.h"
#include "common/runtime_dir.h"
#include "common/text.h"
#include "server/config.h"
#include "server/devices.h"
#include "server/serve_options.h"
#include "server/persist.h"
#include "server/recover.h"
#include "server/reexec.h"

/* What `uzram serve` was asked for: the devices, and where to listen. */
struct serve_plan {
    struct nbd_server_options options;
    const char *unix_path;
    bool no_unix;
    bool tls_given;                         /* --tls was set, not defaulted */
    struct origin from[SERVE_OPTION_COUNT]; /* of the server's options */
    /* What the devices start from: the configuration, the command line's device options. */
    struct device_factory factory;
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
    /* Storage for the paths options points to when they are derived. */
    char unix_buffer[PATH_MAX], ctl_path[PATH_MAX];
    int inherited[SYSTEMD_MAX_LISTEN_FDS]; /* sockets handed over (socket activation) */
    char **spec_copies;                    /* per device: its --device text, cut by the factory */
    bool name_given;                       /* --name */
    /* The command line as collect_option() found it, before it is applied. */
    const char *config_path, *name;    /* --config, --name */
    struct given_option *server_given; /* the server's options, in order */
    size_t server_given_count;
};

/* The GO_ON-or-status steps below return GO_ON, or the exit status to stop with. */
#define GO_ON (-1)

/* At start every complaint goes to stderr (hot-add's go to its answer: server/devices.c). */
#define complain(...) option_complain(NULL, __VA_ARGS__)

/* The server options whose values are checked: a name, a mode, a group, a count, a TLS mode.
 * Returns 0, or -1 after one line that names where the bad value came from. */
static int apply_checked(struct serve_plan *plan, const struct cli_option *option, const char *arg,
                         const struct label *label)
{
    struct nbd_server_options *options = &plan->options;
    static const char *const tls_modes[] = {
        [NBD_TLS_OFF] = "off", [NBD_TLS_ON] = "on", [NBD_TLS_REQUIRE] = "require"};
    unsigned long value;
    struct group *group;
    switch (option->code) {
    case 'n':
        if (util_valid_name(arg)) {
            options->name = arg;
            return 0;
        }
        complain("%sbad %s '%s'; use 1-64 characters from A-Z a-z 0-9 . _ -, not starting "
                 "with -",
                 label->where, label->name, arg);
        return -1;
    case OPT_SOCKET_MODE:
        if (option_parse_uint(arg, 0777, 8, &value) == 0) {
            options->socket_mode = (unsigned)value;
            return 0;
        }
        complain("%sbad %s '%s'; use an octal mode like 0660", label->where, label->name, arg);
        return -1;
    case OPT_SOCKET_GROUP:
        if ((group = getgrnam(arg)) != NULL || option_parse_uint(arg, INT_MAX, 10, &value) == 0) {
            options->socket_gid = group != NULL ? (long)group->gr_gid : (long)value;
            return 0;
        }
        complain("%sunknown %s '%s'; give a group name or id", label->where, label->name, arg);
        return -1;
    case OPT_THREADS:
        if (option_parse_uint(arg, NBD_SERVER_MAX_THREADS, 10, &value) == 0 && value != 0) {
            options->threads = (unsigned)value;
            return 0;
        }
        complain("%sbad %s '%s'; use a number from 1 to %u", label->where, label->name, arg,
                 NBD_SERVER_MAX_THREADS);
        return -1;
    case OPT_TLS:
        for (size_t mode = 0; mode < sizeof tls_modes / sizeof tls_modes[0]; mode++) {
            if (strcmp(arg, tls_modes[mode]) == 0) {
                options->tls.mode = (enum nbd_tls_mode)mode;
                plan->tls_given = true;
                return 0;
            }
        }
        complain("%sbad %s '%s'; use off, on or require", label->where, label->name, arg);
        return -1;
    }
    /* A device's own setting never comes here (parse_options and the sections route them
     * to the factory); refused rather than dropped should that change. */
    complain("%s%s is a setting of one device; it cannot be set here", label->where, label->name);
    return -1;
}

/* One option of the whole server, from the command line or the configuration (a device's
 * own settings are the factory's: server/devices.c). Returns 0, or -1 after one line that
 * names where the bad value came from and says what is allowed. */
static int apply_server_option(struct serve_plan *plan, const struct cli_option *option,
                               const char *arg, const struct origin *from)
{
    struct nbd_server_options *options = &plan->options;
    struct label label;
    bool flag;

    if (option_note(NULL, plan->from, option, arg, from, &label, &flag) < 0)
        return -1;
    switch (option->code) {
    case OPT_SWAP:
        options->swap = flag;
        break;
    case OPT_SWAP_STALL_LIMIT: {
        unsigned long seconds;
        if (option_parse_uint(arg, SWAP_STALL_LIMIT_MAX, 10, &seconds) < 0) {
            complain("%sbad %s '%s'; use seconds from 0 (never) to %u", label.where, label.name,
                     arg, SWAP_STALL_LIMIT_MAX);
            return -1;
        }
        options->swap_stall_limit = (long)seconds;
        break;
    }
    case OPT_SERVER_MEM_LIMIT:
        return option_parse_size(NULL, &label, arg, &options->server_mem_limit);
    case 'u':
        plan->unix_path = arg;
        break;
    case OPT_NO_UNIX:
        plan->no_unix = flag;
        break;
    case 't':
        options->tcp = arg;
        break;
    case 'q':
        options->quiet = flag;
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
    default:
        return apply_checked(plan, option, arg, &label);
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * The configuration file
 * ---------------------------------------------------------------------- */

/* The server's settings of a configuration section (its device keys are the factory's). */
static int apply_server_section(struct serve_plan *plan, const struct config_section *section)
{
    for (size_t e = 0; e < section->entry_count; e++) {
        const struct config_entry *entry = &section->entries[e];
        const struct origin from = {plan->file->path, entry->line, NULL, false};
        const struct cli_option *option = option_by_key(entry->key);
        if (strcmp(entry->key, DEVICES_KEY) == 0 || option_sets_device(option))
            continue;
        if (apply_server_option(plan, option, entry->value, &from) < 0)
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
        complain("out of memory");
        return -1;
    }
    size_t count = 0;
    char *save = NULL;
    for (char *word = strtok_r(plan->listed_text, " ,\t", &save); word;
         word = strtok_r(NULL, " ,\t", &save)) {
        if (!util_valid_name(word)) {
            complain("%s:%u: bad device name '%s' in %s; list the sections of the devices",
                     plan->file->path, entry->line, word, DEVICES_KEY);
            return -1;
        }
        if (count == NBD_SERVER_MAX_EXPORTS) {
            complain("%s:%u: more than %u devices; one server serves at most that many",
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
        if (serve_options[i].name != NULL && !(serve_options[i].tags & SERVE_COMMAND_LINE_ONLY))
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
            const struct cli_option *option = option_by_key(entry->key);
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

/* Each option as the command line gives it, into its list: --config first of all, a device's
 * own options for the factory, the server's for apply_server_option(). */
static int collect_option(void *context, const struct cli_option *option, char *arg)
{
    struct serve_plan *plan = context;
    if (option->code == OPT_CONFIG)
        plan->config_path = arg;
    else if (option->code == OPT_DEVICE)
        plan->specs[plan->spec_count++] = arg;
    else if (option_sets_device(option))
        plan->given[plan->given_count++] = (struct given_option){option, arg};
    else
        plan->server_given[plan->server_given_count++] = (struct given_option){option, arg};
    if (option->code == 'n') {
        plan->name = arg;
        plan->name_given = true;
    }
    return 0;
}

const struct cli_command serve_command = {
    .name = "serve",
    .summary = "create a compressed RAM disk and serve it over NBD",
    .synopsis = "[OPTION]...",
    .description = "Create compressed RAM disks and serve them over NBD until SIGINT/SIGTERM\n"
                   "(SIGHUP is ignored): one (uzram0), or one per --device.\n",
    .options = serve_options,
    .option_count = SERVE_OPTION_COUNT,
    .apply = collect_option,
    .epilog = "\n"
              "Flags take an optional =yes or =no in their long form (--dedup=no). The keys of a\n"
              "--config file are the long options above, one 'KEY = VALUE' a line, in a [NAME]\n"
              "section per device; a section with a 'devices = NAME...' key is a server of those\n"
              "devices, and its device keys are their defaults. With several devices the device\n"
              "options given alone apply to each (a --device's own keys win). The control socket\n"
              "NAME.ctl is created in the runtime directory (only you can write there); see uzram\n"
              "status, uzram attr, uzram hot-add and hot-remove. The disks live only in this\n"
              "process, like zram and tmpfs: they are lost when the server stops, unless\n"
              "--persist keeps their state for the next server (uzram restart). Examples:\n"
              "  uzram serve -s 4G -a zstd --dedup &\n"
              "  nbdcopy disk.img \"$(uzram status -n -o uri uzram0)\"\n"
              "  uzram serve --name pool --device db:4G:dedup --device tmp:1G:algorithm=zstd &\n"
              "  nbdinfo \"$(uzram status -n -o uri tmp)\"\n",
    .run = cmd_serve,
};

/* The command line: options are collected first, so that the configuration file (which
 * --config names, anywhere on the line) is applied before them and they override it. Values
 * that need no context are checked as they are applied, each with its own message; the
 * rest waits for the factory (device_settings()) and socket_paths(). */
static int parse_options(int argc, char **argv, struct serve_plan *plan, struct config **loaded)
{
    struct nbd_server_options *options = &plan->options;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *options = (struct nbd_server_options){
        .name = "uzram0", .socket_mode = 0600, .socket_gid = -1, .swap_stall_limit = -1};
    /* Per connection: with 2 workers one can run a request while the other
     * reads the next, so one pipelining client keeps 2 cores busy. */
    options->threads = cpus < 2                        ? 2
                       : cpus > NBD_SERVER_MAX_THREADS ? NBD_SERVER_MAX_THREADS
                                                       : (unsigned)cpus;

    size_t most = (size_t)(argc > 0 ? argc : 1); /* never more options than arguments */
    plan->given = calloc(most, sizeof *plan->given);
    plan->specs = calloc(most, sizeof *plan->specs);
    plan->server_given = calloc(most, sizeof *plan->server_given);
    if (plan->given == NULL || plan->specs == NULL || plan->server_given == NULL) {
        fputs("uzram: out of memory\n", stderr);
        return 1;
    }
    struct cli_args args;
    int status = cli_parse(&serve_command, argc, argv, plan, &args);
    if (status != CLI_GO_ON)
        return status;
    if (plan->config_path != NULL) {
        status = load_config(plan, plan->config_path, plan->name, loaded);
        if (status != GO_ON)
            return status;
    }
    /* The server's settings: its section's, then the command line's. */
    int listed = plan->server != NULL ? section_devices(plan, plan->server) : 0;
    if (listed < 0)
        return 1;
    plan->listed_count = (size_t)listed;
    plan->several = plan->spec_count > 0 || listed > 0;
    if (plan->server != NULL && apply_server_section(plan, plan->server) < 0)
        return 1;
    const struct origin command_line = {NULL, 0, NULL, false};
    for (size_t i = 0; i < plan->server_given_count; i++)
        if (apply_server_option(plan, plan->server_given[i].option, plan->server_given[i].arg,
                                &command_line) < 0)
            return 1;
    /* The client deadlines, shorter for tests that wait for them. */
    const char *timeout = getenv("UZRAM_SERVE_TIMEOUT");
    if (timeout != NULL && timeout[0] != '\0') {
        unsigned long value;
        if (option_parse_uint(timeout, 3600, 10, &value) < 0 || value == 0) {
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

/* What every device starts from (server/devices.c), once the command line and the
 * configuration are read. */
static void fill_factory(struct serve_plan *plan)
{
    plan->factory = (struct device_factory){
        .file = plan->file,
        .server = plan->server,
        .several = plan->several,
        .given = plan->given,
        .given_count = plan->given_count,
        .swap = plan->options.swap,
        .server_mem_limit = plan->options.server_mem_limit,
        .server_from = plan->from,
    };
}

/* The devices of the command line and the configuration, planned and checked by the
 * factory: the one, or the server section's devices key's and then --device's, in that
 * order. */
static int plan_devices(struct serve_plan *plan)
{
    fill_factory(plan);
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
        if (device_settings(&plan->factory, device, name, spec, &from) < 0)
            return 1;
        for (size_t j = 0; device->persist != NULL && device->persist[0] && j < i; j++) {
            const char *other = plan->devices[j].persist;
            if (other != NULL && strcmp(other, device->persist) == 0) {
                fprintf(stderr,
                        "uzram: devices %s and %s both keep their state in %s; give each its "
                        "own: --device NAME:SIZE:persist=PATH\n",
                        plan->devices[j].name, name, other);
                return 1;
            }
        }
        /* Said of the whole server (banner, stop line) when every device persists. */
        plan->options.persistent = device->persist != NULL && (i == 0 || plan->options.persistent);
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
        (option_given(plan->from, OPT_SOCKET_MODE) || option_given(plan->from, OPT_SOCKET_GROUP))) {
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
    option_label_of(plan->from, OPT_TLS, &mode);
    option_label_of(plan->from, OPT_TLS_CERTIFICATES, &certificates);
    option_label_of(plan->from, OPT_TLS_PSK, &psk);
    option_label_of(plan->from, OPT_TLS_VERIFY_PEER, &verify);
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

/* --swap-stall-limit is a setting of --swap's guard (attach/swap_guard.c): refused without it
 * rather than ignored. */
static int swap_settings(struct serve_plan *plan)
{
    struct label limit;
    if (plan->options.swap_stall_limit < 0 || plan->options.swap)
        return GO_ON;
    option_label_of(plan->from, OPT_SWAP_STALL_LIMIT, &limit);
    fprintf(stderr, "uzram: %s%s goes with %s\n", limit.where, limit.name,
            *limit.where ? "swap = yes" : "--swap");
    return 1;
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
    /* After a planned restart the sockets are the ones this command line made. */
    options->inherited_owned = restart_sockets_owned();
    static const int listening[] = {'u', 't', OPT_NO_UNIX, OPT_SOCKET_MODE, OPT_SOCKET_GROUP};
    for (size_t i = 0; i < sizeof listening / sizeof listening[0]; i++) {
        if (options->inherited_owned || !option_given(plan->from, listening[i]))
            continue;
        struct label label;
        option_label_of(plan->from, listening[i], &label);
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
        options->ctl_path = plan->ctl_path;
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

/* hot-add, on a control request's thread: the factory makes the device as --device would. */
static int hot_add(void *context, const char *spec, struct nbd_new_device *out, char *message,
                   size_t message_size)
{
    const struct serve_plan *plan = context;
    struct device_made made;
    int rc = device_hot_add(&plan->factory, spec, &made, message, message_size);
    if (rc == 0) {
        *out = (struct nbd_new_device){.dev = made.dev, .read_only = made.read_only};
        snprintf(out->name, sizeof out->name, "%s", made.name);
    }
    return rc;
}

/* Make every device, serve them until a signal; the server destroys them. */
static int create_and_serve(struct serve_plan *plan)
{
    /* Before the devices and every thread: threads inherit the I/O flusher mark. */
    if (plan->options.swap) {
        char message[512];
        if (plan->options.swap_stall_limit >= 0)
            swap_guard_set_limit((unsigned)plan->options.swap_stall_limit);
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
        struct device_made device;
        if (device_make(&plan->factory, &plan->devices[i], &device) < 0) {
            while (i-- > 0)
                uzram_destroy(made[i].dev);
            free(made);
            return 1;
        }
        made[i] = (struct nbd_new_device){.dev = device.dev, .read_only = device.read_only};
        snprintf(made[i].name, sizeof made[i].name, "%s", device.name);
    }
    /* Before the heap is faulted in: a device taken over gives back what its predecessor
     * kept for this start (swap.c's SUCCESSOR_MEMORY), for the heap to take. */
    for (size_t i = 0; plan->options.swap && i < plan->device_count; i++)
        if (swap_successor_memory(made[i].dev, false) < 0) {
            fprintf(stderr, "uzram: %s: cannot keep a memory reserve\n", made[i].name);
            for (size_t j = 0; j < plan->device_count; j++)
                uzram_destroy(made[j].dev);
            free(made);
            return 1;
        }
    if (plan->options.swap)
        swap_memory_ahead();
    persist_leftovers();
    plan->options.devices = made;
    plan->options.device_count = plan->device_count;
    plan->options.make_device = hot_add;
    plan->options.make_device_context = plan;
    /* The server owns the devices from here, even when it fails. */
    struct nbd_server *server;
    int status = 1;
    int handed_fds[SYSTEMD_MAX_LISTEN_FDS + 1];
    const char *handed_names[SYSTEMD_MAX_LISTEN_FDS + 1];
    size_t handed = 0;
    bool restarting = false;
    if (nbd_server_create(&plan->options, &server) == 0) {
        recover_ublk_devices(nbd_server_exports(server));
        /* Served again: now the memory for the next successor (faulted in by the reserve's
         * thread, which may wait for memory where this start must not). */
        for (size_t i = 0; plan->options.swap && i < plan->device_count; i++)
            (void)swap_successor_memory(made[i].dev, true);
        struct control_service *control;
        int rc = control_start(nbd_server_control_fd(server), server, &control);
        if (rc < 0) {
            fprintf(stderr, "uzram: cannot serve the control socket: %s\n", strerror(-rc));
        } else {
            status = nbd_server_serve(server);
            control_stop(control);
        }
        restarting = nbd_server_restarting(server);
        if (restarting)
            handed =
                nbd_server_hand_over(server, handed_fds, handed_names, SYSTEMD_MAX_LISTEN_FDS + 1);
        nbd_server_destroy(server); /* the states stay, quiesced */
    }
    free(made);
    if (restarting) {
        restart_exec(handed_fds, handed_names, handed,
                     plan->options.inherited_count == 0 || plan->options.inherited_owned);
        status = 1; /* exec failed: said why */
    }
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
    restart_init();
    int status = parse_options(argc, argv, plan, &config);
    if (status == GO_ON)
        status = activation(plan);
    if (status == GO_ON)
        status = plan_devices(plan);
    if (status == GO_ON)
        status = tls_settings(plan);
    if (status == GO_ON)
        status = swap_settings(plan);
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
    free(plan->server_given);
    free(plan->listed_text);
    free(plan);
    return status;
}
