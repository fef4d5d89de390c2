/* restart.c - `uzram restart`: a planned restart of a running `uzram serve` in place (the
 * control request "restart", server/reexec.c), waiting until the new program answers; and
 * `uzram state-check`, which the server runs with the program now installed to learn whether
 * it can take every state over before it stops (a user may run it on a state file too). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "attach/attach.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/text.h"
#include "control/control.h"
#include "uzram.h"

/* How long `uzram restart` waits for the new program to answer (it takes the states over:
 * about 2 ms a GiB of page table, include/uzram.h; the rest is starting up). */
#define RESTART_WAIT_MS 60000u
/* How long one question to the restarting server may wait: a request queued on a socket that
 * systemd holds for a server that has died would wait for the whole reply time. */
#define RESTART_ASK_MS 2000ull

/* The number in reply line `key` of the server at `ctl`, waiting `reply_ms` at most; -1 when
 * it cannot be asked. */
static long server_number(const char *ctl, const char *key, unsigned long long reply_ms)
{
    struct control_target server = {.device = ""};
    char *body, message[512], value[32];
    snprintf(server.ctl, sizeof server.ctl, "%s", ctl);
    if (control_ask_within(&server, "server", reply_ms, &body, message, sizeof message) < 0)
        return -1;
    long number = control_field(body, key, value, sizeof value) ? strtol(value, NULL, 10) : -1;
    free(body);
    return number;
}

/* A descriptor that polls readable once process `pid` has ended (a pidfd: an exec keeps it,
 * and it tells a zombie from a live process), or -1 (none, or a kernel before 5.3). */
static int watch_process(long pid)
{
#ifdef SYS_pidfd_open
    if (pid > 0)
        return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#endif
    return -1;
}

static bool process_ended(int pidfd, long pid)
{
    if (pidfd >= 0) {
        struct pollfd ended = {pidfd, POLLIN, 0};
        return poll(&ended, 1, 0) > 0;
    }
    return pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Wait until the server at `ctl` (process `pid`, -1 unknown) answers with more restarts than
 * `before`: 0, or 1 having said why not (it ended, or did not answer in time). */
static int wait_restarted(const char *ctl, long before, long pid, int pidfd)
{
    /* The control socket is handed over: a request waits in its backlog until the new
     * program answers; the old one answers with the old count until it stops. */
    uint64_t deadline = util_now_ms() + RESTART_WAIT_MS;
    while (util_now_ms() < deadline) {
        if (server_number(ctl, "restarts", RESTART_ASK_MS) > before)
            return 0;
        if (process_ended(pidfd, pid)) {
            fprintf(stderr,
                    "uzram: the server (pid %ld) ended during its restart, before the new "
                    "program answered; see its log (journalctl -u uzram@NAME)\n",
                    pid);
            return 1;
        }
        usleep(50 * 1000);
    }
    fprintf(stderr,
            "uzram: the server did not answer within %u s of its restart; see its log "
            "(journalctl -u uzram@NAME)\n",
            RESTART_WAIT_MS / 1000);
    return 1;
}

static int restart_run(int argc, char **argv);

const struct cli_command restart_command = {
    .name = "restart",
    .summary = "restart a server in place (an upgrade) without losing a page",
    .synopsis = "[-S SERVER | -u PLACE] [DEVICE]",
    .description =
        "Restart a running `uzram serve` in place, with the uzram program installed now (an\n"
        "upgrade), without losing a page: its devices must keep their state (serve\n"
        "--persist). The program first checks that it can read every state; if it cannot,\n"
        "nothing happens and the server keeps serving. Else the server stops accepting,\n"
        "answers the requests in flight, and runs the program again in the same process\n"
        "with the states and the listening sockets: NBD clients reconnect (nbd-client\n"
        "-persist, qemu's reconnect-delay), ublk devices recover, FUSE attachments end.\n"
        "Waits until the new program answers. `systemctl reload uzram@NAME` runs this.\n"
        "DEVICE names the server that serves it.\n",
    .common = CLI_SERVER | CLI_RUNTIME_DIR,
    .max_operands = 1,
    .operands = "one DEVICE, or -S SERVER",
    .run = restart_run,
};

static int restart_run(int argc, char **argv)
{
    struct cli_args args;
    int status = cli_parse(&restart_command, argc, argv, NULL, &args);
    if (status != CLI_GO_ON)
        return status;
    if (args.count > 0 && args.server != NULL)
        return cli_misused(&restart_command, "expected %s", restart_command.operands);
    char ctl[PATH_MAX], message[2048], value[32], *body;
    struct control_target target;
    if (args.count > 0) {
        if (control_locate(args.runtime_dir, argv[args.first], NULL, &target, message,
                           sizeof message) < 0) {
            fprintf(stderr, "uzram: %s\n", message);
            return 1;
        }
        snprintf(ctl, sizeof ctl, "%s", target.ctl);
    } else if (control_choose_server(args.runtime_dir, args.server, restart_command.name, ctl,
                                     sizeof ctl) < 0) {
        return 1;
    }
    /* Its process, watched so that its end does not go unseen for the whole wait. */
    long pid = server_number(ctl, "pid", CONTROL_REPLY_MS);
    int pidfd = watch_process(pid);
    int rc = control_request(ctl, "restart", &body, message, sizeof message);
    if (rc < 0) {
        fprintf(stderr, "uzram: restart refused: %s\n", message);
        if (pidfd >= 0)
            close(pidfd);
        return 1;
    }
    long before =
        control_field(body, "restarts", value, sizeof value) ? strtol(value, NULL, 10) : -1;
    free(body);
    status = wait_restarted(ctl, before, pid, pidfd);
    if (pidfd >= 0)
        close(pidfd);
    if (status == 0)
        printf("uzram: restarted %s (pid %ld)\n", ctl, server_number(ctl, "pid", CONTROL_REPLY_MS));
    return status;
}

/* One state: "NAME: ..." on stdout, 0 when this program can take it over. */
static int check_one(int fd, const char *name)
{
    struct uzram_state_info info;
    int rc = uzram_state_info(fd, &info);
    char size[16];
    if (rc == -EPROTONOSUPPORT) {
        printf("%s: state format version %u; this uzram reads version %u\n", name, info.version,
               info.supported_version);
        return 1;
    }
    char why[PATH_MAX + 256];
    struct stat st;
    if (rc == -EUCLEAN) {
        printf("%s: a damaged state: %s\n", name, uzram_state_damage());
        return 1;
    }
    if (rc < 0 && fstat(fd, &st) == 0 &&
        private_file_refusal(name, &st, rc, "the state", why, sizeof why)) {
        printf("%s: refused: %s\n", name, why);
        return 1;
    }
    if (rc < 0) {
        printf("%s: not a uzram state (%s)\n", name, strerror(-rc));
        return 1;
    }
    util_human_size(info.disksize, size, sizeof size);
    printf("%s: state format version %u, %s, %s%s; this uzram can take it over\n", name,
           info.version, size, info.comp_algorithm,
           info.clean ? ", left cleanly" : ", left by a process that was killed");
    return 0;
}

/* What `uzram state-check` found so far. */
struct state_check {
    int failed, checked;
};

/* --fd N[=NAME]: the state open on descriptor N (a restarting server's). */
static int check_fd(void *where, char *arg)
{
    struct state_check *check = where;
    char *end;
    long fd = strtol(arg, &end, 10);
    if (end == arg || fd < 0 || fd > INT_MAX || (*end != '\0' && *end != '=')) {
        fprintf(stderr, "uzram state-check: bad --fd '%s'; use N or N=NAME\n", arg);
        return -1;
    }
    check->failed |= check_one((int)fd, *end == '=' ? end + 1 : arg);
    check->checked++;
    return 0;
}

static const struct cli_option state_check_options[] = {
    {"fd", CLI_LONG_ONLY, required_argument, "N[=NAME]",
     "the state open on descriptor N, named NAME in the\n"
     "report (what a restarting server gives it)",
     0, check_fd, 0},
};

static int state_check_run(int argc, char **argv);

const struct cli_command state_check_command = {
    .name = "state-check",
    .summary = "say whether this uzram can take over a device's state",
    .synopsis = "[--fd N[=NAME]]... [PATH]...",
    .description = "Say whether this uzram can take over each device state (serve --persist):\n"
                   "its format version, size and algorithm. Exit status 0 when it can take\n"
                   "every one. `uzram restart` runs it first, with the program installed now.\n",
    .options = state_check_options,
    .option_count = sizeof state_check_options / sizeof state_check_options[0],
    .max_operands = INT_MAX,
    .run = state_check_run,
};

static int state_check_run(int argc, char **argv)
{
    struct state_check check = {0};
    struct cli_args args;
    int status = cli_parse(&state_check_command, argc, argv, &check, &args);
    if (status != CLI_GO_ON)
        return status;
    for (int i = args.first; i < argc; i++, check.checked++) {
        int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            printf("%s: %s\n", argv[i], strerror(errno));
            check.failed = 1;
            continue;
        }
        check.failed |= check_one(fd, argv[i]);
        close(fd);
    }
    if (check.checked == 0)
        return cli_misused(&state_check_command, "expected a state: --fd N or PATH");
    return check.failed;
}
