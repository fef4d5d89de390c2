/* reexec.c - planned restart of `uzram serve` in place (reexec.h). The program installed now
 * (at the path this one was started from) first reads every state's header as a child,
 * `PROGRAM state-check --fd N=NAME...`, with a deadline: a version that cannot read the
 * states refuses, and the old process keeps serving. Then, once the server has stopped (no
 * new client, the requests in flight answered, the devices quiesced and destroyed), the
 * program is executed in this process with the states and listening sockets as descriptors
 * 3... named as systemd's socket activation and descriptor store name them (LISTEN_FDS,
 * LISTEN_FDNAMES: "nbd", "control", "state-NAME"), so that one reader takes both. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/systemd.h"
#include "common/clock.h"
#include "server/persist.h"
#include "server/reexec.h"

extern char **environ;

/* Set by the process before a planned restart: how many there were, and whether the sockets
 * it hands over are its own. */
#define RESTARTED_VARIABLE "UZRAM_RESTARTED"
#define OWN_SOCKETS_VARIABLE "UZRAM_OWN_SOCKETS"

#define MAX_ARGS 256
#define MAX_DESCRIPTORS (SYSTEMD_MAX_LISTEN_FDS + SYSTEMD_MAX_STATES)

static char program[PATH_MAX];   /* "": unknown, no restart */
static char command_line[16384]; /* /proc/self/cmdline: NUL-separated */
static size_t command_line_length;
static char notify_socket[PATH_MAX];
static unsigned restarts;
static bool own_sockets;

void restart_init(void)
{
    ssize_t n = readlink("/proc/self/exe", program, sizeof program - 1);
    program[n > 0 ? n : 0] = '\0';
    if (n > 0 && strstr(program, " (deleted)") != NULL)
        program[0] = '\0'; /* replaced already: the path no longer names this program */
    FILE *file = fopen("/proc/self/cmdline", "re");
    if (file != NULL) {
        command_line_length = fread(command_line, 1, sizeof command_line - 1, file);
        if (!feof(file))
            command_line_length = 0; /* too long to run again as it was */
        fclose(file);
    }
    const char *notify = getenv("NOTIFY_SOCKET");
    snprintf(notify_socket, sizeof notify_socket, "%s", notify ? notify : "");
    const char *count = getenv(RESTARTED_VARIABLE);
    restarts = count ? (unsigned)strtoul(count, NULL, 10) : 0;
    own_sockets = count != NULL && getenv(OWN_SOCKETS_VARIABLE) != NULL;
    unsetenv(RESTARTED_VARIABLE);
    unsetenv(OWN_SOCKETS_VARIABLE);
}

unsigned restart_count(void)
{
    return restarts;
}

bool restart_sockets_owned(void)
{
    return own_sockets;
}

/* Run `PROGRAM state-check --fd N=NAME...` on every state; its output into `message`.
 * Returns 0 when it exits 0 in time, else a negative errno. */
static int state_check(char *message, size_t size)
{
    static int fds[SYSTEMD_MAX_STATES];
    static char names[SYSTEMD_MAX_STATES][128], words[SYSTEMD_MAX_STATES][160];
    char *argv[SYSTEMD_MAX_STATES * 2 + 3] = {program, "state-check"};
    size_t count = persist_list(fds, names, SYSTEMD_MAX_STATES), argc = 2;
    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0) {
        int err = errno;
        snprintf(message, size, "pipe: %s", strerror(err));
        return -err;
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
    for (size_t i = 0; i < count; i++) {
        snprintf(words[i], sizeof words[i], "%d=%s", fds[i], names[i]);
        argv[argc++] = "--fd";
        argv[argc++] = words[i];
        posix_spawn_file_actions_adddup2(&actions, fds[i], fds[i]); /* clears FD_CLOEXEC */
    }
    argv[argc] = NULL;
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, out[1], 2);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
    pid_t pid;
    int rc = -posix_spawn(&pid, program, &actions, &attributes, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    close(out[1]);
    if (rc < 0) {
        close(out[0]);
        snprintf(message, size, "cannot run %s: %s", program, strerror(-rc));
        return rc;
    }
    /* Its output, until it ends or the deadline passes. */
    char output[1024];
    size_t used = 0;
    uint64_t deadline = util_now_ms() + RESTART_CHECK_MS;
    bool late = false;
    for (;;) {
        uint64_t now = util_now_ms();
        struct pollfd wait_for = {out[0], POLLIN, 0};
        if (now >= deadline || poll(&wait_for, 1, (int)(deadline - now)) == 0) {
            late = true;
            break;
        }
        ssize_t n = read(out[0], output + used, sizeof output - 1 - used);
        if (n == 0 || (n < 0 && errno != EINTR))
            break; /* its end (or a broken pipe): it has exited or is about to */
        used += n > 0 ? (size_t)n : 0;
        if (used == sizeof output - 1)
            break;
    }
    close(out[0]);
    output[used] = '\0';
    if (late)
        kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    for (char *c = output; *c; c++)
        if (*c == '\n')
            *c = c[1] ? ' ' : '\0';
    if (late) {
        snprintf(message, size, "%s state-check did not answer within %u s", program,
                 RESTART_CHECK_MS / 1000);
        return -ETIMEDOUT;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(message, size, "%s cannot take the states over: %s", program,
                 output[0] ? output : "state-check failed");
        return -EPROTONOSUPPORT;
    }
    return 0;
}

int restart_check(const char *const *names, size_t count, char *message, size_t size)
{
    if (program[0] == '\0' || command_line_length == 0) {
        snprintf(message, size,
                 "this server cannot tell which program to run again (its file was replaced "
                 "before it started, or its command line is too long); stop and start it");
        return -ENOEXEC;
    }
    for (size_t i = 0; i < count; i++) {
        if (!persist_has(names[i])) {
            snprintf(message, size,
                     "device %s has no state (served without --persist, or hot-added): a restart "
                     "would lose its data; hot-remove it, or serve it with --persist",
                     names[i]);
            return -EBUSY;
        }
    }
    return state_check(message, size);
}

/* The environment to execute with: this one without what describes this process's
 * descriptors, and new ones for the next; NULL when there is no room. */
static char **next_environment(const char *names, size_t count, bool owned)
{
    static char listen_pid[32], listen_fds[32], restarted[48], notify[PATH_MAX + 16];
    static char listen_names[MAX_DESCRIPTORS * 130 + 32];
    static const char *const dropped[] = {
        "LISTEN_PID=",    "LISTEN_FDS=",          "LISTEN_FDNAMES=",
        "NOTIFY_SOCKET=", RESTARTED_VARIABLE "=", OWN_SOCKETS_VARIABLE "="};
    size_t size = 8;
    for (char **e = environ; *e; e++)
        size++;
    char **next = calloc(size, sizeof *next);
    if (next == NULL)
        return NULL;
    size_t n = 0;
    for (char **e = environ; *e; e++) {
        bool drop = false;
        for (size_t d = 0; d < sizeof dropped / sizeof dropped[0]; d++)
            drop |= strncmp(*e, dropped[d], strlen(dropped[d])) == 0;
        if (!drop)
            next[n++] = *e;
    }
    snprintf(listen_pid, sizeof listen_pid, "LISTEN_PID=%d", (int)getpid());
    snprintf(listen_fds, sizeof listen_fds, "LISTEN_FDS=%zu", count);
    snprintf(listen_names, sizeof listen_names, "LISTEN_FDNAMES=%s", names);
    snprintf(restarted, sizeof restarted, RESTARTED_VARIABLE "=%u", restarts + 1);
    next[n++] = listen_pid;
    next[n++] = listen_fds;
    next[n++] = listen_names;
    next[n++] = restarted;
    if (owned)
        next[n++] = OWN_SOCKETS_VARIABLE "=1";
    if (notify_socket[0]) {
        snprintf(notify, sizeof notify, "NOTIFY_SOCKET=%s", notify_socket);
        next[n++] = notify;
    }
    next[n] = NULL;
    return next;
}

void restart_exec(const int *socket_fds, const char *const *socket_names, size_t count, bool owned)
{
    static int fds[MAX_DESCRIPTORS];
    static char names[MAX_DESCRIPTORS][128], joined[MAX_DESCRIPTORS * 130];
    static char *argv[MAX_ARGS + 1];
    size_t total = 0, argc = 0, used = 0;
    for (size_t i = 0; i < count && total < SYSTEMD_MAX_LISTEN_FDS; i++, total++) {
        fds[total] = socket_fds[i];
        snprintf(names[total], sizeof names[total], "%s", socket_names[i]);
    }
    total += persist_list(fds + total, names + total, MAX_DESCRIPTORS - total);
    for (size_t i = 0; i < total; i++)
        used +=
            (size_t)snprintf(joined + used, sizeof joined - used, "%s%s", i ? ":" : "", names[i]);
    for (size_t at = 0; at < command_line_length && argc < MAX_ARGS;
         at += strlen(command_line + at) + 1)
        argv[argc++] = command_line + at;
    argv[argc] = NULL;
    /* Descriptors 3... in order: first out of the way (above every one of them), then down. */
    int moved[MAX_DESCRIPTORS];
    for (size_t i = 0; i < total; i++)
        moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, SYSTEMD_LISTEN_FDS_START + (int)total + 64);
    for (size_t i = 0; i < total; i++)
        if (moved[i] < 0 || dup2(moved[i], SYSTEMD_LISTEN_FDS_START + (int)i) < 0) {
            fprintf(stderr, "uzram: cannot hand descriptor %d on: %s\n", fds[i], strerror(errno));
            return;
        }
    char **environment = next_environment(joined, total, owned);
    if (environment == NULL) {
        fputs("uzram: out of memory\n", stderr);
        return;
    }
    fflush(NULL);
    execve(program, argv, environment);
    fprintf(stderr,
            "uzram: cannot run %s again: %s; the states are kept (their files, or the "
            "descriptor store): start the server again to take them over\n",
            program, strerror(errno));
    free(environment);
}
