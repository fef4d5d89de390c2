/* attach_detach.c - `uzram attach` and `uzram detach`, and their work for zram-generator's setup
 * too (attach_detach.h): a served device as a /dev node, and back. Picks the way (nbd-client, ublk,
 * or a FUSE file with a loop device); the server does the work. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach/attach.h"
#include "cli/commands.h"
#include "cli/attach_detach.h"
#include "cli/swap_setup.h"
#include "control/control.h"
#include "common/process.h"
#include "common/progress.h"

/* No server serves DEVICE: take away what a stopped one left (leftover_clean) in the
 * directory -u (`given`, NULL: none) names, or say that nothing serves it. `why` is
 * control_locate()'s message. Returns the exit status. */
static int clean_leftovers(const char *device, const char *given, const char *why)
{
    char report[2048], message[2 * PATH_MAX + 512];
    struct control_place place;
    if (control_place(given, &place, message, sizeof message) < 0 || place.ctl[0] != '\0') {
        fprintf(stderr, "uzram: %s\n", why);
        return 1;
    }
    int rc = leftover_clean(place.dir, device, report, sizeof report, message, sizeof message);
    if (report[0] != '\0')
        fprintf(stderr, "uzram: no server serves %s; cleaned up what a stopped one left: %s\n",
                device, report);
    if (rc < 0)
        fprintf(stderr, "uzram: %s\n", message);
    else if (report[0] == '\0')
        fprintf(stderr, "uzram: %s\n", why);
    return rc < 0 || report[0] == '\0' ? 1 : 0;
}

struct request {
    const struct control_target *target;
    const char *line;
    char **body;
    char *message;
    size_t message_size;
};

static int ask(void *context)
{
    struct request *r = context;
    return control_ask(r->target, r->line, r->body, r->message, r->message_size);
}

/* control_ask() while the server attaches or detaches (nbd-client, a loop device, the kernel
 * letting go of one): on a terminal, a line says how long it takes so far. */
static int ask_waiting(const struct control_target *target, const char *what, const char *line,
                       char **body, char *message, size_t message_size)
{
    struct request request = {target, line, body, message, message_size};
    struct progress progress;
    progress_begin(&progress, what, 0, "", false);
    return progress_run(&progress, ask, NULL, &request);
}

/* Whether the kernel has `module` (loaded, or loaded now as zramctl loads zram). */
static bool module_ready(const char *module, const char *sys_path)
{
    if (access(sys_path, F_OK) == 0)
        return true;
    const char *argv[] = {"modprobe", "-q", module, NULL};
    char output[256];
    return geteuid() == 0 && run_program(argv, 10, output, sizeof output) == 0 &&
           access(sys_path, F_OK) == 0;
}

/* The fastest path the kernel has (ublk: no socket and no FUSE hop; and the one whose requests
 * cost the server no kernel memory, see SWAP in uzram(1)); else nbd; else loop. */
static const char *default_via(void)
{
    if (module_ready("ublk_drv", "/dev/ublk-control"))
        return "ublk";
    return module_ready("nbd", "/sys/module/nbd") ? "nbd" : "loop";
}

/* The loop path's FUSE file needs /dev/fuse: on a system without udev (a container, a minimal
 * VM) the node appears only once the module is loaded. Loaded here as for the other paths;
 * the server says what is missing if it still is not there. */
static void fuse_ready(void)
{
    (void)module_ready("fuse", "/dev/fuse");
}

/* attach --swapon: mkswap and swapon on the node just attached; if either fails, the node is
 * taken away again (nothing uses it) and the exit status says so. */
static int swap_on_attached(const char *device, const char *place, const char *node, int priority)
{
    char message[2 * PATH_MAX + 512], undo[2 * PATH_MAX + 512];
    if (swap_start(node, true, priority, NULL, message, sizeof message) < 0) {
        fprintf(stderr, "uzram: %s: %s\n", node, message);
        if (detach_node(device, place, undo, sizeof undo) < 0)
            fprintf(stderr, "uzram: and it stays attached: %s\n", undo);
        return 1;
    }
    printf("%s\n", node);
    return 0;
}

/* What `uzram attach` was asked for. */
struct attach_args {
    const char *via, *file;
    bool swap, swapon, priority_given;
    int priority;
};

static int set_via(void *where, char *arg)
{
    if (strcmp(arg, "nbd") != 0 && strcmp(arg, "loop") != 0 && strcmp(arg, "ublk") != 0) {
        fprintf(stderr, "uzram: bad --via '%s'; use nbd, ublk or loop\n", arg);
        return -1;
    }
    *(const char **)where = arg;
    return 0;
}

/* --swapon is --swap and the swap itself. */
static int set_swapon(void *where, char *arg)
{
    struct attach_args *args = where;
    (void)arg;
    args->swap = args->swapon = true;
    return 0;
}

static int set_priority(void *where, char *arg)
{
    struct attach_args *args = where;
    char *end;
    errno = 0;
    long value = strtol(arg, &end, 10);
    /* swapon's range: -1 (the kernel picks, lower than every other area) to 32767 */
    if (errno != 0 || end == arg || *end != '\0' || value < -1 || value > 32767) {
        fprintf(stderr, "uzram: bad --priority '%s'; use -1 to 32767\n", arg);
        return -1;
    }
    args->priority = (int)value;
    args->priority_given = true;
    return 0;
}

enum { OPT_VIA = CLI_LONG_ONLY, OPT_FILE, OPT_SWAP, OPT_SWAPON, OPT_PRIORITY };
static const struct cli_option attach_options[] = {
    {"via", OPT_VIA, required_argument, "nbd|ublk|loop",
     "nbd: the kernel's NBD client (nbd-client) on the server's\n"
     "Unix socket, /dev/nbdN; ublk: the kernel's ublk driver\n"
     "(ublk_drv, Linux 6.0+ where the distribution builds it),\n"
     "served by the server's queue threads over io_uring,\n"
     "/dev/ublkbN (the fastest, and what swap needs: see SWAP\n"
     "in uzram(1)); loop: the server shows the disk as a file\n"
     "through FUSE and a loop device with direct I/O sits on\n"
     "it, /dev/loopN. Default: ublk where the kernel has it,\n"
     "else nbd, else loop (modprobe is tried for each; Debian\n"
     "12's own 6.1 kernel has no ublk: nbd). KERNELS in\n"
     "uzram(1) says which path each kernel has",
     0, set_via, offsetof(struct attach_args, via)},
    {"file", OPT_FILE, required_argument, "PATH",
     "with --via loop: the file the server mounts (default\n"
     "NAME.disk beside the control socket)",
     0, CLI_TEXT(struct attach_args, file)},
    {"swap", OPT_SWAP, no_argument, NULL,
     "the device is for swap: the server must run with\n"
     "serve --swap; prints the mkswap/swapon lines. Without\n"
     "--via, refused on a kernel without ublk (swap through\n"
     "nbd or loop fails under memory pressure: SWAP and\n"
     "KERNELS in uzram(1))",
     0, CLI_TRUE(struct attach_args, swap)},
    {"swapon", OPT_SWAPON, no_argument, NULL,
     "--swap, and make the node swap: mkswap, then swapon\n"
     "--discard (the only way the device hears of freed\n"
     "swap slots: SWAP in uzram(1)); the uzram-swap@ unit\n"
     "runs this. Prints the node once it is swap",
     0, CLI_SET(set_swapon)},
    {"priority", OPT_PRIORITY, required_argument, "N",
     "swapon's priority with --swapon, -1 to 32767 (default\n"
     "100, zram-generator's)",
     0, CLI_SET(set_priority)},
};

static int attach_run(int argc, char **argv);

const struct cli_command attach_command = {
    .name = "attach",
    .summary = "give a running device a /dev node (ublk, nbd-client or FUSE + loop)",
    .synopsis = "[OPTION]... DEVICE",
    .description =
        "Give a served device a /dev node and print its path (like losetup --show).\n"
        "DEVICE is a device name (looked up in the runtime directory) or the path of its\n"
        ".ctl control socket.\n",
    .options = attach_options,
    .option_count = sizeof attach_options / sizeof attach_options[0],
    .common = CLI_RUNTIME_DIR,
    .min_operands = 1,
    .max_operands = 1,
    .operands = "one DEVICE",
    .epilog = "\n"
              "uzram detach DEVICE undoes it. Example:\n"
              "  dev=$(uzram attach uzram0) && mkfs.ext4 -q $dev && mount $dev /mnt\n",
    .run = attach_run,
};

static int attach_run(int argc, char **argv)
{
    struct attach_args args = {.priority = SWAP_PRIORITY_DEFAULT};
    struct cli_args given;
    int status = cli_parse(&attach_command, argc, argv, &args, &given);
    if (status != CLI_GO_ON)
        return status;
    const char *device = argv[given.first];
    if (args.file != NULL && args.via != NULL && strcmp(args.via, "loop") != 0) {
        fputs("uzram: --file goes with --via loop\n", stderr);
        return 2;
    }
    if (args.priority_given && !args.swapon)
        return cli_misused(&attach_command, "--priority goes with --swapon");
    char node[BLOCKDEV_PATH_MAX], message[2 * PATH_MAX + 512];
    if (attach_node(device, args.via, args.swap, args.file, given.runtime_dir, node, sizeof node,
                    message, sizeof message) < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return 1;
    }
    if (args.swapon)
        return swap_on_attached(device, given.runtime_dir, node, args.priority);
    printf("%s\n", node);
    if (args.swap) {
        char line[BLOCKDEV_PATH_MAX + 128];
        swapon_line(node, SWAP_PRIORITY_DEFAULT, NULL, line, sizeof line);
        fprintf(stderr,
                "uzram: for swap: mkswap %s && %s (or attach --swapon); before stopping: "
                "swapoff %s && uzram detach %s\n",
                node, line, node, device);
    }
    return 0;
}

int attach_node(const char *device, const char *via, bool swap, const char *file, const char *place,
                char *node, size_t node_size, char *message, size_t message_size)
{
    if (swap && via == NULL && file == NULL && !module_ready("ublk_drv", "/dev/ublk-control")) {
        /* Swap over nbd or loop needs kernel memory in the server for every swap-out
         * (uzram(1), SWAP): refused rather than taken silently. */
        snprintf(message, message_size,
                 "cannot attach %s for swap: this kernel has no ublk driver (ublk_drv, "
                 "CONFIG_BLK_DEV_UBLK: Linux 6.0 and later where the distribution builds it, "
                 "e.g. Debian 12's backports kernel or Debian 13; not Debian 12's own 6.1), "
                 "and swap through nbd or loop fails under memory pressure (uzram(1), SWAP "
                 "and KERNELS); use kernel zram here, or a kernel with ublk",
                 device);
        return -EOPNOTSUPP;
    }
    if (via == NULL)
        via = file != NULL ? "loop" : default_via();
    if (strcmp(via, "loop") == 0)
        fuse_ready();
    if (swap && strcmp(via, "ublk") != 0)
        fprintf(stderr,
                "uzram: warning: swap through %s fails under memory pressure (uzram(1), SWAP "
                "and KERNELS): a swap-out needs kernel memory in the server\n",
                via);
    /* The server mounts the file: give it a path that does not depend on our directory. */
    char absolute[PATH_MAX] = "";
    if (file != NULL) {
        char cwd[PATH_MAX];
        if (file[0] != '/' && getcwd(cwd, sizeof cwd) == NULL) {
            int err = errno;
            snprintf(message, message_size, "getcwd: %s", strerror(err));
            return -err;
        }
        int n = snprintf(absolute, sizeof absolute, "%s%s%s", file[0] == '/' ? "" : cwd,
                         file[0] == '/' ? "" : "/", file);
        if (n < 0 || (size_t)n >= sizeof absolute || strchr(absolute, '\n') != NULL) {
            snprintf(message, message_size, "bad --file '%s'", file);
            return -EINVAL;
        }
    }
    char request[PATH_MAX + 64], why[PATH_MAX + 256], *body;
    struct control_target target;
    int rc = control_locate(place, device, NULL, &target, message, message_size);
    if (rc < 0)
        return rc;
    snprintf(request, sizeof request, "attach %s%s%s%s", via, swap ? " swap" : "",
             absolute[0] ? " " : "", absolute);
    char what[160];
    snprintf(what, sizeof what, "attaching %s (via %s)", device, via);
    rc = ask_waiting(&target, what, request, &body, why, sizeof why);
    if (rc < 0) {
        snprintf(message, message_size, "cannot attach %s: %s", device, why);
        return rc;
    }
    char direct_io[8] = "";
    node[0] = '\0';
    control_field(body, "device", node, node_size);
    if (control_field(body, "direct_io", direct_io, sizeof direct_io) &&
        strcmp(direct_io, "1") != 0)
        fprintf(stderr,
                "uzram: warning: the kernel did not take direct I/O for %s: its page cache sits "
                "in front of the device (slower, and memory spent twice)\n",
                node);
    free(body);
    return 0;
}

int detach_node(const char *device, const char *place, char *message, size_t message_size)
{
    char why[PATH_MAX + 256], *body;
    struct control_target target;
    int rc = control_locate(place, device, NULL, &target, message, message_size);
    if (rc < 0)
        return rc;
    char what[160];
    snprintf(what, sizeof what, "detaching %s", device);
    rc = ask_waiting(&target, what, "detach", &body, why, sizeof why);
    if (rc < 0) {
        snprintf(message, message_size, "cannot detach %s: %s", device, why);
        return rc;
    }
    free(body);
    return 0;
}

int attached_node(const char *device, char *node, size_t node_size, char *message,
                  size_t message_size)
{
    char *body;
    struct control_target target;
    int rc = control_locate(NULL, device, NULL, &target, message, message_size);
    if (rc == 0)
        rc = control_ask(&target, "stats", &body, message, message_size);
    if (rc < 0)
        return rc;
    if (!control_field(body, "attached", node, node_size) || strcmp(node, "-") == 0)
        node[0] = '\0';
    free(body);
    return 0;
}

static int detach_run(int argc, char **argv);

const struct cli_command detach_command = {
    .name = "detach",
    .summary = "take the /dev node of a running device away again",
    .synopsis = "[-u PLACE] DEVICE",
    .description =
        "Take away the /dev node `uzram attach` gave a served device: the loop device and\n"
        "the FUSE file under it, or the nbd-client connection. Refused while the node is\n"
        "mounted, used as swap, held by another device or open in a program; the message\n"
        "says what to end first. The served device and its data stay.\n",
    .common = CLI_RUNTIME_DIR,
    .min_operands = 1,
    .max_operands = 1,
    .operands = "one DEVICE",
    .run = detach_run,
};

static int detach_run(int argc, char **argv)
{
    struct cli_args args;
    int status = cli_parse(&detach_command, argc, argv, NULL, &args);
    if (status != CLI_GO_ON)
        return status;
    const char *place = args.runtime_dir;
    const char *device = argv[args.first];
    char message[2 * PATH_MAX + 512];
    int rc = detach_node(device, place, message, sizeof message);
    if (rc == -ENOENT && strchr(device, '/') == NULL)
        return clean_leftovers(device, place, message);
    if (rc < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return 1;
    }
    return 0;
}
