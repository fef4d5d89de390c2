/* serve.c - `uzram serve`: command line of the NBD server, device creation, socket paths.
 * Every bad setting ends with one line saying what to do; the server itself is in nbd/server.c. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "nbd/server.h"
#include "common/util.h"

static void serve_usage(FILE *out)
{
    fputs("Usage: uzram serve [OPTION]...\n"
          "Create a compressed RAM disk and serve it over NBD until SIGINT/SIGTERM.\n"
          "\n"
          "Device:\n"
          "  -s, --size SIZE         disk size, K/M/G/T suffixes (default 1G)\n"
          "  -a, --algorithm NAME    compression algorithm (default lz4)\n"
          "  -l, --level N           compression level (default: the algorithm's)\n"
          "      --no-same-filled    do not store same-filled pages as one word\n"
          "  -d, --dedup             store identical pages once\n"
          "  -m, --mem-limit SIZE    most memory the compressed pages may use (default none)\n"
          "  -n, --name NAME         device and export name (default uzram0)\n"
          "  -r, --read-only         refuse writes\n"
          "\n"
          "Listening:\n"
          "  -u, --unix PATH         NBD Unix socket (default $XDG_RUNTIME_DIR/uzram/NAME.sock,\n"
          "                          or /run/uzram/NAME.sock)\n"
          "      --no-unix           no Unix socket (needs --tcp)\n"
          "  -t, --tcp [ADDR:]PORT   also listen on TCP (default address 127.0.0.1)\n"
          "      --socket-mode OCTAL mode of the NBD Unix socket (default 0600)\n"
          "      --socket-group GROUP  group of the NBD Unix socket\n"
          "      --threads N         worker threads per client connection (default: number\n"
          "                          of CPUs, at least 2)\n"
          "  -q, --quiet             print no banner and no per-client messages\n"
          "  -h, --help              show this help\n"
          "\n"
          "The control socket NAME.ctl is created beside the NBD socket; see uzram status\n"
          "and uzram attr. Example:\n"
          "  uzram serve -s 4G -a zstd --dedup &\n"
          "  nbdcopy disk.img 'nbd+unix:///?socket=$XDG_RUNTIME_DIR/uzram/uzram0.sock'\n",
          out);
}

enum {
    OPT_NO_SAME_FILLED = 256,
    OPT_NO_UNIX,
    OPT_SOCKET_MODE,
    OPT_SOCKET_GROUP,
    OPT_THREADS,
};

static int parse_size_option(const char *option, const char *text, uint64_t *bytes)
{
    int rc = uzram_parse_size(text, bytes);
    if (rc == -ERANGE) {
        fprintf(stderr, "uzram: %s '%s' is too large\n", option, text);
        return -1;
    }
    if (rc < 0) {
        fprintf(stderr,
                "uzram: %s '%s' is not a size; use a number with an optional K, M, G "
                "or T suffix, e.g. 512M\n",
                option, text);
        return -1;
    }
    return 0;
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

/* What `uzram serve` was asked for: the device, and where to listen. */
struct serve_plan {
    struct uzram_config config;
    struct nbd_server_options options;
    const char *size_text, *level_text, *unix_path;
    bool no_unix;
    /* Storage for the paths options points to when they are derived. */
    char default_unix[PATH_MAX], ctl_path[PATH_MAX];
};

/* The steps below return GO_ON, or the exit status to stop with. */
#define GO_ON (-1)

/* The command line. Values that need no context are checked here, each with
 * its own message; the rest waits for device_settings() and socket_paths(). */
static int parse_options(int argc, char **argv, struct serve_plan *plan)
{
    static const struct option long_options[] = {
        {"size", required_argument, NULL, 's'},
        {"algorithm", required_argument, NULL, 'a'},
        {"level", required_argument, NULL, 'l'},
        {"no-same-filled", no_argument, NULL, OPT_NO_SAME_FILLED},
        {"dedup", no_argument, NULL, 'd'},
        {"mem-limit", required_argument, NULL, 'm'},
        {"name", required_argument, NULL, 'n'},
        {"read-only", no_argument, NULL, 'r'},
        {"unix", required_argument, NULL, 'u'},
        {"no-unix", no_argument, NULL, OPT_NO_UNIX},
        {"tcp", required_argument, NULL, 't'},
        {"socket-mode", required_argument, NULL, OPT_SOCKET_MODE},
        {"socket-group", required_argument, NULL, OPT_SOCKET_GROUP},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct uzram_config *config = &plan->config;
    struct nbd_server_options *options = &plan->options;
    unsigned long value;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int c;

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
    optind = 1;
    while ((c = getopt_long(argc, argv, "s:a:l:dm:n:ru:t:qh", long_options, NULL)) != -1) {
        switch (c) {
        case 's':
            plan->size_text = optarg;
            break;
        case 'a':
            config->comp_algorithm = optarg;
            break;
        case 'l':
            plan->level_text = optarg;
            break;
        case OPT_NO_SAME_FILLED:
            config->same_filled = false;
            break;
        case 'd':
            config->use_dedup = true;
            break;
        case 'm':
            if (parse_size_option("--mem-limit", optarg, &config->mem_limit) < 0)
                return 1;
            break;
        case 'n':
            if (!util_valid_name(optarg)) {
                fprintf(stderr,
                        "uzram: bad --name '%s'; use 1-64 characters from "
                        "A-Z a-z 0-9 . _ -\n",
                        optarg);
                return 1;
            }
            options->name = optarg;
            break;
        case 'r':
            options->read_only = true;
            break;
        case 'u':
            plan->unix_path = optarg;
            break;
        case OPT_NO_UNIX:
            plan->no_unix = true;
            break;
        case 't':
            options->tcp = optarg;
            break;
        case OPT_SOCKET_MODE:
            if (parse_uint(optarg, 0777, 8, &value) < 0) {
                fprintf(stderr, "uzram: bad --socket-mode '%s'; use an octal mode like 0660\n",
                        optarg);
                return 1;
            }
            options->socket_mode = (unsigned)value;
            break;
        case OPT_SOCKET_GROUP: {
            struct group *group = getgrnam(optarg);
            if (group != NULL)
                options->socket_gid = (long)group->gr_gid;
            else if (parse_uint(optarg, INT_MAX, 10, &value) == 0)
                options->socket_gid = (long)value;
            else {
                fprintf(stderr, "uzram: unknown --socket-group '%s'; give a group name or id\n",
                        optarg);
                return 1;
            }
            break;
        }
        case OPT_THREADS:
            if (parse_uint(optarg, NBD_SERVER_MAX_THREADS, 10, &value) < 0 || value == 0) {
                fprintf(stderr, "uzram: bad --threads '%s'; use a number from 1 to 256\n", optarg);
                return 1;
            }
            options->threads = (unsigned)value;
            break;
        case 'q':
            options->quiet = true;
            break;
        case 'h':
            serve_usage(stdout);
            return 0;
        default:
            fputs("Try 'uzram serve --help' for more information.\n", stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr,
                "uzram serve: unexpected argument '%s'\n"
                "Try 'uzram serve --help' for more information.\n",
                argv[optind]);
        return 2;
    }
    return GO_ON;
}

/* Size, algorithm and level, checked before the device is made so that each
 * mistake gets its own message. */
static int device_settings(struct serve_plan *plan)
{
    struct uzram_config *config = &plan->config;

    if (parse_size_option("--size", plan->size_text, &config->disksize) < 0)
        return 1;
    if (config->disksize == 0 || config->disksize % UZRAM_PAGE_SIZE != 0) {
        fprintf(stderr, "uzram: --size %s must be a non-zero multiple of 4K\n", plan->size_text);
        return 1;
    }
    int min_level, max_level, default_level;
    if (uzram_algorithm_levels(config->comp_algorithm, &min_level, &max_level, &default_level) <
        0) {
        char list[256] = "";
        uzram_algorithm_list(NULL, list, sizeof list);
        list[strcspn(list, "\n")] = '\0';
        fprintf(stderr, "uzram: unknown algorithm '%s'; choose one of: %s\n",
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
            if (min_level == 0 && max_level == 0)
                fprintf(stderr, "uzram: algorithm %s has no levels; drop --level\n",
                        config->comp_algorithm);
            else
                fprintf(stderr, "uzram: bad --level '%s' for %s; use %d to %d (default %d)\n",
                        level_text, config->comp_algorithm, min_level, max_level, default_level);
            return 1;
        }
        config->comp_level = (int)level;
    }
    return GO_ON;
}

/* The NBD socket (given, or NAME.sock in the runtime directory, which is
 * created) and the control socket NAME.ctl beside it. */
static int socket_paths(struct serve_plan *plan)
{
    struct nbd_server_options *options = &plan->options;
    const char *unix_path = plan->unix_path;
    bool no_unix = plan->no_unix;

    if (no_unix && unix_path != NULL) {
        fputs("uzram: --unix and --no-unix contradict each other; keep one\n", stderr);
        return 1;
    }
    if (no_unix && options->tcp == NULL) {
        fputs("uzram: --no-unix leaves nothing to listen on; add --tcp [ADDR:]PORT\n", stderr);
        return 1;
    }
    char runtime_dir[PATH_MAX], socket_dir[PATH_MAX];
    int n;
    if (unix_path == NULL || no_unix) {
        if (util_runtime_dir(runtime_dir, sizeof runtime_dir) < 0) {
            fputs("uzram: $XDG_RUNTIME_DIR is too long\n", stderr);
            return 1;
        }
        int rc = util_make_dir(runtime_dir);
        if (rc < 0) {
            fprintf(stderr, "uzram: cannot create %s: %s; set XDG_RUNTIME_DIR or use --unix PATH\n",
                    runtime_dir, strerror(-rc));
            return 1;
        }
        snprintf(socket_dir, sizeof socket_dir, "%s", runtime_dir);
        if (!no_unix) {
            n = snprintf(plan->default_unix, sizeof plan->default_unix, "%.4000s/%s.sock",
                         runtime_dir, options->name);
            if (n < 0 || (size_t)n >= sizeof plan->default_unix) {
                fputs("uzram: socket path too long; use --unix PATH\n", stderr);
                return 1;
            }
            unix_path = plan->default_unix;
        }
    } else {
        const char *slash = strrchr(unix_path, '/');
        if (slash == NULL)
            snprintf(socket_dir, sizeof socket_dir, ".");
        else if (slash == unix_path)
            snprintf(socket_dir, sizeof socket_dir, "/");
        else
            snprintf(socket_dir, sizeof socket_dir, "%.*s", (int)(slash - unix_path), unix_path);
    }
    n = snprintf(plan->ctl_path, sizeof plan->ctl_path, "%.4000s/%s.ctl", socket_dir,
                 options->name);
    if (n < 0 || (size_t)n >= sizeof plan->ctl_path) {
        fputs("uzram: control socket path too long\n", stderr);
        return 1;
    }
    options->unix_path = unix_path;
    options->ctl_path = plan->ctl_path;
    return GO_ON;
}

/* Make the device, serve it until a signal, destroy it. */
static int create_and_serve(const struct serve_plan *plan)
{
    struct uzram *dev;
    int rc = uzram_create(&plan->config, &dev);
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
    int status = nbd_server_run(dev, &plan->options);
    uzram_destroy(dev);
    return status;
}

int cmd_serve(int argc, char **argv)
{
    struct serve_plan plan = {0};
    int status = parse_options(argc, argv, &plan);
    if (status == GO_ON)
        status = device_settings(&plan);
    if (status == GO_ON)
        status = socket_paths(&plan);
    if (status == GO_ON)
        status = create_and_serve(&plan);
    return status;
}
