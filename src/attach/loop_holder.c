/* loop_holder.c - the process that keeps an attached loop device open (see attach.h): with
 * LO_FLAGS_AUTOCLEAR the device goes away once its holder and whoever mounted it let go, and
 * the holder lets go when the server's pipe to it closes, which the kernel does when the
 * server exits, even by SIGKILL. Not the server itself: a process's exit closes its files in
 * no order it chooses, and a loop device closed last flushes its page cache through the FUSE
 * file, which a server half gone would never answer. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attach/attach.h"

extern char **environ;

int loop_hold(int *fd, struct loop_holder *holder, char *message, size_t message_size)
{
    int ends[2];
    *holder = (struct loop_holder){.pid = 0, .pipe = -1};
    if (pipe2(ends, O_CLOEXEC) < 0) {
        int err = errno;
        snprintf(message, message_size, "pipe: %s", strerror(err));
        close(*fd);
        *fd = -1;
        return -err;
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, ends[0], 0);
    posix_spawn_file_actions_adddup2(&actions, *fd, 3);
    /* Only the server's end of the pipe ends it: not a terminal's SIGINT or SIGHUP (the
     * server goes on after SIGHUP), not SIGTERM sent to the process group. */
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGHUP);
    sigaddset(&blocked, SIGPIPE);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &blocked);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    char *argv[] = {"uzram", "__hold-loop", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(ends[0]);
    close(*fd);
    *fd = -1;
    if (rc != 0) {
        close(ends[1]);
        snprintf(message, message_size, "cannot start the process that holds the loop device: %s",
                 strerror(rc));
        return -rc;
    }
    *holder = (struct loop_holder){.pid = pid, .pipe = ends[1]};
    return 0;
}

void loop_let_go(struct loop_holder *holder)
{
    if (holder->pipe >= 0)
        close(holder->pipe);
    while (holder->pid > 0 && waitpid(holder->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    *holder = (struct loop_holder){.pid = 0, .pipe = -1};
}

int loop_holder_main(void)
{
    char byte;
    ssize_t n;
    while ((n = read(0, &byte, 1)) != 0 && (n > 0 || errno == EINTR))
        ;
    return 0;
}
