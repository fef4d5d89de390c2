/* nbd_client.c - `uzram attach` through the kernel's NBD client: the nbd-client command line,
 * a free /dev/nbdN, and running a helper program with a deadline. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"
#include "common/clock.h"

extern char **environ;

bool nbd_module_loaded(void)
{
    return access("/sys/module/nbd", F_OK) == 0;
}

static bool read_line(const char *path, char *buf, size_t size)
{
    FILE *file = fopen(path, "re");
    bool ok = file != NULL && fgets(buf, (int)size, file) != NULL;
    if (file != NULL)
        fclose(file);
    return ok;
}

/* A connected device has a pid (its client's) and a size. */
static bool connected(const char *name)
{
    char path[300], size[32];
    snprintf(path, sizeof path, "/sys/block/%s/pid", name);
    if (access(path, F_OK) == 0)
        return true;
    snprintf(path, sizeof path, "/sys/block/%s/size", name);
    return read_line(path, size, sizeof size) && strtoull(size, NULL, 10) != 0;
}

bool nbd_device_connected(const char *device)
{
    const char *name = strrchr(device, '/');
    return connected(name ? name + 1 : device);
}

int nbd_free_device(char device[BLOCKDEV_PATH_MAX])
{
    DIR *dir = opendir("/sys/block");
    struct dirent *entry;
    long best = -1;
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        char *end;
        if (strncmp(entry->d_name, "nbd", 3) != 0)
            continue;
        long number = strtol(entry->d_name + 3, &end, 10);
        if (end == entry->d_name + 3 || *end != '\0' || (best >= 0 && number >= best) ||
            connected(entry->d_name))
            continue;
        best = number;
    }
    if (dir != NULL)
        closedir(dir);
    if (best < 0)
        return -ENODEV;
    snprintf(device, BLOCKDEV_PATH_MAX, "/dev/nbd%ld", best);
    return 0;
}

/* nbd-client configures the device through netlink (its default since 3.17) and exits: the
 * kernel then holds the socket, and no program of the client side has to stay in memory, so
 * -swap (which only locks nbd-client itself in its older ioctl mode) is not needed. Blocks
 * of 4 KiB are the engine's pages; a request unanswered for NBD_REQUEST_TIMEOUT s fails. */
int nbd_client_argv(const struct nbd_client_plan *plan, const char *argv[NBD_CLIENT_ARGS_MAX])
{
    int n = 0;
    if (plan->socket == NULL || plan->export_name == NULL || plan->device == NULL ||
        strncmp(plan->device, "/dev/nbd", 8) != 0)
        return -EINVAL;
    argv[n++] = NBD_CLIENT_PROGRAM;
    argv[n++] = "-unix";
    argv[n++] = plan->socket;
    argv[n++] = plan->device;
    argv[n++] = "-name";
    argv[n++] = plan->export_name;
    argv[n++] = "-block-size";
    argv[n++] = "4096";
    argv[n++] = "-timeout";
    argv[n++] = NBD_REQUEST_TIMEOUT;
    if (plan->read_only)
        argv[n++] = "-readonly";
    argv[n] = NULL;
    return n;
}

int nbd_client_disconnect_argv(const char *device, const char *argv[NBD_CLIENT_ARGS_MAX])
{
    if (device == NULL || strncmp(device, "/dev/nbd", 8) != 0)
        return -EINVAL;
    argv[0] = NBD_CLIENT_PROGRAM;
    argv[1] = "-d";
    argv[2] = device;
    argv[3] = NULL;
    return 3;
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
