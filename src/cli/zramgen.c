/* zramgen.c - `uzram zram-generator`: zram-generator's devices served by uzram. Prints what
 * each [zramN] section becomes, serves one (as `uzram serve` with the options it maps to),
 * sets up its swap or mount and takes it down again (--setup-device, --reset-device), and,
 * run by systemd as a generator, enables the units that do all that at boot. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach/attach.h"
#include "cli/commands.h"
#include "cli/attach_detach.h"
#include "cli/swap_setup.h"
#include "cli/zramgen.h"
#include "common/process.h"
#include "control/control.h"

/* mkfs, mkswap and mount get this long (a large ext2 writes its inode tables). */
#define SETUP_TIMEOUT 300

/* One program, its failure said with what it printed last. 0, or -1 after a message. */
static int run(const char *const argv[], const char *device)
{
    char message[512];
    int rc = run_program(argv, SETUP_TIMEOUT, message, sizeof message);
    if (rc == 0)
        return 0;
    fprintf(stderr, "uzram: %s: %s failed: %s\n", device, argv[0],
            rc < 0       ? strerror(-rc)
            : message[0] ? message
                         : "(no message)");
    return -1;
}

/* What formats the node: systemd-makefs as zram-generator uses it, else mkswap or mkfs. */
static int make_filesystem(const struct zramgen_device *device, const char *node)
{
    static const char *const makefs[] = {"/usr/lib/systemd/systemd-makefs",
                                         "/lib/systemd/systemd-makefs"};
    for (size_t i = 0; i < sizeof makefs / sizeof makefs[0]; i++) {
        if (access(makefs[i], X_OK) == 0) {
            const char *argv[] = {makefs[i], device->fs_type, node, NULL};
            return run(argv, device->name);
        }
    }
    const char *mkswap[] = {"mkswap", node, NULL};
    const char *mkfs[] = {"mkfs", "-t", device->fs_type, node, NULL};
    return run(device->swap ? mkswap : mkfs, device->name);
}

static int setup_device(const struct zramgen_device *device)
{
    char node[BLOCKDEV_PATH_MAX], message[2 * PATH_MAX + 512];
    if (!device->swap && device->mount_point == NULL) {
        fprintf(stderr, "uzram: %s has neither swap nor a mount-point: nothing to set up\n",
                device->name);
        return 0;
    }
    if (attach_node(device->name, NULL, device->swap, NULL, NULL, node, sizeof node, message,
                    sizeof message) < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return 1;
    }
    if (make_filesystem(device, node) < 0)
        return 1;
    bool options = device->options[0] != '\0';
    if (device->swap) {
        /* uzram's one swap setup: swapon with discard besides the section's options */
        if (swap_start(node, false, device->swap_priority, device->options, message,
                       sizeof message) < 0) {
            fprintf(stderr, "uzram: %s: %s\n", device->name, message);
            return 1;
        }
        printf("%s: swap on %s, priority %d\n", device->name, node, device->swap_priority);
        return 0;
    }
    if (mkdir(device->mount_point, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "uzram: %s: cannot make mount-point %s: %s\n", device->name,
                device->mount_point, strerror(errno));
        return 1;
    }
    const char *mount[] = {"mount", "-t", device->fs_type, node, device->mount_point, NULL,
                           NULL,    NULL};
    if (options) {
        mount[3] = "-o";
        mount[4] = device->options;
        mount[5] = node;
        mount[6] = device->mount_point;
    }
    if (run(mount, device->name) < 0)
        return 1;
    printf("%s: %s on %s mounted on %s\n", device->name, device->fs_type, node,
           device->mount_point);
    return 0;
}

/* Is `node` a swap area now (/proc/swaps)? */
static bool in_swaps(const char *node)
{
    char line[512], name[256];
    bool found = false;
    FILE *swaps = fopen("/proc/swaps", "re");
    while (swaps != NULL && !found && fgets(line, sizeof line, swaps) != NULL)
        found = sscanf(line, "%255s", name) == 1 && strcmp(name, node) == 0;
    if (swaps != NULL)
        fclose(swaps);
    return found;
}

static int reset_device(const struct zramgen_device *device)
{
    char node[BLOCKDEV_PATH_MAX], message[2 * PATH_MAX + 512];
    if (attached_node(device->name, node, sizeof node, message, sizeof message) < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return 1;
    }
    if (node[0] != '\0' && device->swap && in_swaps(node)) {
        const char *swapoff[] = {"swapoff", node, NULL};
        if (run(swapoff, device->name) < 0)
            return 1;
    } else if (node[0] != '\0' && device->mount_point != NULL) {
        const char *umount[] = {"umount", device->mount_point, NULL};
        struct stat at, parent;
        char up[PATH_MAX + 4];
        snprintf(up, sizeof up, "%s/..", device->mount_point);
        /* Mounted: another device than its parent directory's. */
        if (stat(device->mount_point, &at) == 0 && stat(up, &parent) == 0 &&
            at.st_dev != parent.st_dev && run(umount, device->name) < 0)
            return 1;
    }
    if (node[0] != '\0' && detach_node(device->name, NULL, message, sizeof message) < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return 1;
    }
    /* As zram-generator resets the zram device: its memory goes back. */
    struct control_target target;
    char *body;
    int rc = control_locate(NULL, device->name, NULL, &target, message, sizeof message);
    if (rc == 0)
        rc = control_ask(&target, "set reset 1", &body, message, sizeof message);
    if (rc < 0) {
        fprintf(stderr, "uzram: %s: cannot empty it: %s\n", device->name, message);
        return 1;
    }
    free(body);
    return 0;
}

/* What a device becomes: its serve command line, then its swap or mount. */
static void print_device(const struct zramgen_device *device)
{
    const struct zramgen_setting *first = NULL;
    for (size_t k = 0; k < ZG_KEY_COUNT; k++)
        if (device->set[k].file != NULL && (first == NULL || device->set[k].line < first->line))
            first = &device->set[k];
    if (first != NULL)
        printf("%s (%s:%u):", device->name, first->file, first->line);
    else
        printf("%s (systemd.zram on the kernel command line):", device->name);
    if (!device->created) {
        printf(" not created: %s\n", device->why_not);
        return;
    }
    char storage[4][64], *argv[ZRAMGEN_ARGS_MAX];
    int argc = zramgen_serve_argv(device, storage, argv);
    printf("\n ");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
    if (device->mem_limit_is_size)
        printf("  mem-limit: the disk size (no zram-resident-limit): swap needs a bound\n");
    if (device->swap) {
        char line[BLOCKDEV_PATH_MAX + 512];
        swapon_line(NULL, device->swap_priority, device->options, line, sizeof line);
        printf("  swap: mkswap, %s\n", line);
    } else if (device->mount_point != NULL)
        printf("  file system: %s on %s%s%s\n", device->fs_type, device->mount_point,
               device->options[0] ? ", mount options " : "", device->options);
    else
        printf("  neither swap nor a mount-point: served, not set up (no units)\n");
}

/* zram-generator, where it is installed, sets these devices up with kernel zram. */
static bool zram_generator_installed(const char *root)
{
    static const char *const places[] = {"/usr/lib/systemd/system-generators/zram-generator",
                                         "/lib/systemd/system-generators/zram-generator"};
    char path[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
        snprintf(path, sizeof path, "%s%s", root, places[i]);
        if (access(path, F_OK) == 0)
            return true;
    }
    return false;
}

/* systemd.generator(7): enable uzram-zram-setup@NAME for each device with a swap or a mount
 * point (it binds to uzram-zram@NAME, the server). */
static int generate(const struct zramgen_config *config, const char *dir, const char *unit_dir)
{
    if (config->device_count > 0 && zram_generator_installed(config->root)) {
        fprintf(stderr, "uzram: zram-generator is installed and sets up these devices with "
                        "kernel zram; uzram leaves them to it\n");
        return 0;
    }
    char wants[PATH_MAX], link[PATH_MAX + 128], target[PATH_MAX + 64];
    snprintf(wants, sizeof wants, "%s/multi-user.target.wants", dir);
    snprintf(target, sizeof target, "%s/uzram-zram-setup@.service", unit_dir);
    for (size_t i = 0; i < config->device_count; i++) {
        const struct zramgen_device *device = &config->devices[i];
        if (!device->created || (!device->swap && device->mount_point == NULL))
            continue;
        if ((mkdir(dir, 0755) < 0 && errno != EEXIST) ||
            (mkdir(wants, 0755) < 0 && errno != EEXIST)) {
            fprintf(stderr, "uzram: cannot make %s: %s\n", wants, strerror(errno));
            return 1;
        }
        snprintf(link, sizeof link, "%s/uzram-zram-setup@%s.service", wants, device->name);
        if (symlink(target, link) < 0 && errno != EEXIST) {
            fprintf(stderr, "uzram: cannot link %s: %s\n", link, strerror(errno));
            return 1;
        }
    }
    return 0;
}

enum mode { PRINT, SERVE, SETUP, RESET, GENERATE };

/* The device a mode names, created; NULL after saying why not. */
static struct zramgen_device *created(struct zramgen_config *config, const char *name)
{
    struct zramgen_device *device = zramgen_device(config, name);
    if (device == NULL)
        fprintf(stderr, "uzram: no [%s] section in the configuration (%zu file%s read%s%s)\n", name,
                config->file_count, config->file_count == 1 ? "" : "s",
                config->file_count ? ", the first " : "",
                config->file_count ? config->files[0] : "");
    else if (!device->created)
        fprintf(stderr, "uzram: %s is not created: %s\n", name, device->why_not);
    return device != NULL && device->created ? device : NULL;
}

static int run_mode(struct zramgen_config *config, enum mode mode, int count, char **names,
                    const char *unit_dir)
{
    if (mode == GENERATE)
        return generate(config, names[0], unit_dir);
    if (mode == PRINT) {
        int status = 0;
        for (int i = 0; i < count; i++) {
            struct zramgen_device *device = zramgen_device(config, names[i]);
            if (device != NULL)
                print_device(device);
            else
                status = created(config, names[i]) ? 0 : 1;
        }
        for (size_t i = 0; count == 0 && i < config->device_count; i++)
            print_device(&config->devices[i]);
        if (count == 0 && config->device_count == 0)
            printf("no [zramN] section in %zu file%s%s\n", config->file_count,
                   config->file_count == 1 ? "" : "s", config->disabled ? " (systemd.zram=0)" : "");
        return status;
    }
    struct zramgen_device *device = created(config, names[0]);
    if (device == NULL)
        return mode == SERVE ? 1 : 0; /* as zram-generator, which sets up no such device */
    if (mode == SETUP)
        return setup_device(device);
    if (mode == RESET)
        return reset_device(device);
    char storage[4][64], *argv[ZRAMGEN_ARGS_MAX];
    int argc = zramgen_serve_argv(device, storage, argv);
    return cmd_serve(argc, argv);
}

/* What `uzram zram-generator` was asked for. */
struct zramgen_args {
    const char *path, *unit_dir;
    enum mode mode;
};

enum { OPT_SERVE = CLI_LONG_ONLY, OPT_SETUP, OPT_RESET, OPT_GENERATE, OPT_UNIT_DIR };

/* A mode's option: one at a time. */
static int set_mode(void *context, const struct cli_option *option, char *arg);

static const struct cli_option zramgen_options[] = {
    CLI_ENTRY("(no mode)", "print what each device becomes: its uzram serve command\n"
                           "line and its swap or mount, or why it is not created"),
    {"serve", OPT_SERVE, no_argument, "NAME", "serve the device (uzram serve with those options)",
     0, CLI_BY_COMMAND},
    {"setup-device", OPT_SETUP, no_argument, "NAME",
     "attach the served device, make the swap (mkswap,\n"
     "swapon --discard with its swap-priority and options)\n"
     "or the file system (fs-type, mounted on mount-point\n"
     "with options)",
     0, CLI_BY_COMMAND},
    {"reset-device", OPT_RESET, no_argument, "NAME",
     "swapoff or umount, detach, and empty the device", 0, CLI_BY_COMMAND},
    {"generate", OPT_GENERATE, no_argument, "DIR...",
     "as a systemd generator: enable uzram-zram-setup@NAME\n"
     "(which pulls in uzram-zram@NAME, the server) for each\n"
     "device with a swap or a mount point",
     0, CLI_BY_COMMAND},
    {"unit-dir", OPT_UNIT_DIR, required_argument, "DIR",
     "where the uzram-zram-setup@.service template is", 0, CLI_TEXT(struct zramgen_args, unit_dir)},
    {"config", 'c', required_argument, "FILE", "read FILE (and FILE.d/*.conf) instead", 0,
     CLI_TEXT(struct zramgen_args, path)},
};

static int zramgen_run(int argc, char **argv);

const struct cli_command zram_generator_command = {
    .name = "zram-generator",
    .summary = "serve and set up zram-generator.conf's devices (swap, mounts)",
    .synopsis = "[--config FILE] [NAME]...\n"
                "[--config FILE] --serve NAME\n"
                "[--config FILE] --setup-device NAME | --reset-device NAME\n"
                "--generate [--unit-dir DIR] NORMAL_DIR [EARLY LATE]",
    .description = "zram-generator's devices, served by uzram: the [zramN] sections of\n"
                   "/etc/systemd/zram-generator.conf and its zram-generator.conf.d/ drop-ins (the\n"
                   "places and precedence of zram-generator.conf(5)), or of FILE and FILE.d/.\n",
    .options = zramgen_options,
    .option_count = sizeof zramgen_options / sizeof zramgen_options[0],
    .max_operands = INT_MAX,
    .apply = set_mode,
    .epilog = "\n"
              "ZRAM_GENERATOR_ROOT reads the files, /proc/meminfo and /proc/cmdline under another\n"
              "root, as zram-generator does. Sizes are zram-generator's (MB, expressions of ram);\n"
              "see uzram(1), ZRAM-GENERATOR, for what maps to what.\n",
    .run = zramgen_run,
};

static int set_mode(void *context, const struct cli_option *option, char *arg)
{
    struct zramgen_args *args = context;
    (void)arg;
    if (args->mode != PRINT)
        return cli_misused(&zram_generator_command, "one mode at a time");
    args->mode = option->code == OPT_SERVE   ? SERVE
                 : option->code == OPT_SETUP ? SETUP
                 : option->code == OPT_RESET ? RESET
                                             : GENERATE;
    return 0;
}

static int zramgen_run(int argc, char **argv)
{
    struct zramgen_args args = {.unit_dir = "/usr/lib/systemd/system", .mode = PRINT};
    struct cli_args given;
    int status = cli_parse(&zram_generator_command, argc, argv, &args, &given);
    if (status != CLI_GO_ON)
        return status;
    enum mode mode = args.mode;
    int count = given.count;
    if (mode == GENERATE && (count < 1 || count > 3 || args.path))
        return cli_misused(&zram_generator_command,
                           "--generate takes 1 to 3 directories and reads zram-generator's own "
                           "places");
    if (mode != GENERATE && mode != PRINT && count != 1)
        return cli_misused(&zram_generator_command, "expected one NAME");
    struct zramgen_config *config;
    char error[PATH_MAX + 512];
    if (zramgen_load(args.path, &config, error, sizeof error) < 0) {
        fprintf(stderr, "uzram: %s\n", error);
        return 1;
    }
    if (config->disabled && mode != PRINT)
        fprintf(stderr, "uzram: systemd.zram=0 on the kernel command line: no devices\n");
    status = run_mode(config, mode, count, argv + given.first, args.unit_dir);
    /* serve's strings point into the configuration until it returns */
    zramgen_free(config);
    return status;
}
