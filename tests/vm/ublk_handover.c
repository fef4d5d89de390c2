/* ublk_handover.c - the VM tests' stand-in for a server whose ublk device outlives it
 * (tests/vm/ublk-recovery.sh): the engine's ublk code (src/attach/ublk.c) on a fresh device of
 * its own, so that the driver's side of a handover is tested before `serve --persist` exists.
 * The engine's pages do not survive the process here (its state is anonymous memory): what is
 * tested is the handshake, not the data.
 *
 *   ublk_handover serve MIB        make /dev/ublkbN recoverable, print N, serve it
 *   ublk_handover recover N MIB    take over N from a dead server, print N, serve it
 *   ublk_handover list             "ID SIZE QUEUES quiesced|live OWNER" of recoverable devices
 *   ublk_handover delete N         stop and delete N of a dead server
 *
 * While serving: SIGTERM stops and deletes the device (exit 0); SIGUSR1 is a planned restart:
 * ublk_leave(), then an execve of itself as `recover N MIB` (the same pid, as `uzram restart`
 * does). Exit status 0, 1 on a refusal (the message on stderr), 2 on bad usage. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"

#define LIST_MAX 64

static int usage(void)
{
    fprintf(stderr, "usage: ublk_handover serve MIB | recover N MIB | list | delete N\n");
    return 2;
}

/* Serve until SIGTERM (stop for good) or SIGUSR1 (leave and re-execute as the successor). */
static int serve_until_signal(struct uzram *dev, struct ublk_server *server, const char *self,
                              const char *mib)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    printf("%d\n", ublk_id(server));
    fflush(stdout);
    int signal = 0;
    sigwait(&set, &signal);
    if (signal == SIGTERM) {
        ublk_stop(server);
        uzram_destroy(dev);
        return 0;
    }
    char id[16];
    snprintf(id, sizeof id, "%d", ublk_id(server));
    ublk_leave(server);
    uzram_destroy(dev);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    execl(self, self, "recover", id, mib, (char *)NULL);
    fprintf(stderr, "ublk_handover: execl %s: %s\n", self, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    char message[512] = "";
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        struct ublk_recoverable list[LIST_MAX];
        int n = ublk_list_recoverable(list, LIST_MAX, message, sizeof message);
        if (n < 0) {
            fprintf(stderr, "ublk_handover: %s\n", message);
            return 1;
        }
        for (int i = 0; i < n; i++)
            printf("%d %llu %u %s %d\n", list[i].dev_id, (unsigned long long)list[i].size,
                   list[i].queues, list[i].quiesced ? "quiesced" : "live", (int)list[i].owner);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "delete") == 0) {
        if (ublk_delete(atoi(argv[2]), message, sizeof message) < 0) {
            fprintf(stderr, "ublk_handover: %s\n", message);
            return 1;
        }
        return 0;
    }
    bool serve = argc == 3 && strcmp(argv[1], "serve") == 0;
    if (!serve && !(argc == 4 && strcmp(argv[1], "recover") == 0))
        return usage();
    const char *mib = argv[argc - 1];
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = strtoull(mib, NULL, 10) << 20;
    struct uzram *dev;
    int rc = uzram_create(&config, &dev);
    if (rc < 0) {
        fprintf(stderr, "ublk_handover: uzram_create: %s\n", strerror(-rc));
        return 1;
    }
    /* Blocked before the queue threads start, so that they inherit the mask and sigwait()
     * alone takes these signals. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    struct ublk_server *server;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    rc = serve ? ublk_start(dev, config.disksize, false, cpus > 0 ? (unsigned)cpus : 1, true, false,
                            &server, message, sizeof message)
               : ublk_recover(dev, atoi(argv[2]), config.disksize, false, &server, message,
                              sizeof message);
    if (rc < 0) {
        fprintf(stderr, "ublk_handover: %s\n", message);
        uzram_destroy(dev);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    fprintf(stderr, "ublk_handover: %s %s in %lld ms\n", serve ? "started" : "took over",
            ublk_path(server),
            (long long)(end.tv_sec - start.tv_sec) * 1000 +
                (end.tv_nsec - start.tv_nsec) / 1000000);
    return serve_until_signal(dev, server, "/proc/self/exe", mib);
}
