/* process.c - other processes (process.h): a helper program run with a deadline, and
 * whether a process runs. */
#include "common/process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"

extern char **environ;

bool util_process_alive(pid_t pid)
{
    if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
        return false;
    char path[32], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *file = fopen(path, "re");
    size_t n = file != NULL ? fread(stat, 1, sizeof stat - 1, file) : 0;
    if (file != NULL)
        fclose(file);
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* "PID (COMM) STATE ...": COMM may hold ')' */
    return end == NULL || end[1] != ' ' || (end[2] != 'Z' && end[2] != 'X');
}

/* The last non-empty line of `text`, into `message`. */
static void last_line(char *text, char *message, size_t message_size)
{
    size_t length = strlen(text);
    while (length > 0 && (text[length - 1] == '\n' || text[length - 1] == '\r'))
        text[--length] = '\0';
    char *start = strrchr(text, '\n');
    snprintf(message, message_size, "%s", start ? start + 1 : text);
}

/* The end of what a program wrote: the last line says why it failed. */
struct output {
    char text[2048];
    size_t used;
};

/* Read what is there (waiting at most `wait_ms`); returns the bytes read, 0 at the end. */
static ssize_t take_output(int fd, struct output *output, int wait_ms)
{
    struct pollfd wait = {fd, POLLIN, 0};
    char chunk[512];
    if (poll(&wait, 1, wait_ms) <= 0)
        return 0;
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0)
        return 0;
    size_t room = sizeof output->text - 1;
    if (output->used + (size_t)n > room) {
        size_t drop = output->used + (size_t)n - room;
        drop = drop > output->used ? output->used : drop;
        memmove(output->text, output->text + drop, output->used - drop);
        output->used -= drop;
    }
    size_t take = (size_t)n < room - output->used ? (size_t)n : room - output->used;
    memcpy(output->text + output->used, chunk + ((size_t)n - take), take);
    output->used += take;
    output->text[output->used] = '\0';
    return n;
}

int run_program(const char *const argv[], int timeout_seconds, char *message, size_t message_size)
{
    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0) {
        snprintf(message, message_size, "pipe: %s", strerror(errno));
        return -errno;
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, out[1], 2);
    /* The server blocks and ignores signals for itself; the program gets the defaults. */
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGHUP);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &actions, &attr, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(out[1]);
    if (rc != 0) {
        close(out[0]);
        snprintf(message, message_size, "cannot run %s: %s", argv[0], strerror(rc));
        return -rc;
    }

    /* Its output until it exits (a daemon it leaves behind may keep the pipe open). */
    struct output output = {.used = 0};
    int status = -1;
    uint64_t deadline = util_now_ms() + (uint64_t)timeout_seconds * 1000;
    for (;;) {
        take_output(out[0], &output, 10);
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
        if (util_now_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            close(out[0]);
            snprintf(message, message_size, "%s did not finish within %d s", argv[0],
                     timeout_seconds);
            return -ETIMEDOUT;
        }
    }
    while (take_output(out[0], &output, 0) > 0)
        ;
    close(out[0]);
    last_line(output.text, message, message_size);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    snprintf(message, message_size, "%s was killed by signal %d", argv[0], WTERMSIG(status));
    return -EINTR;
}
