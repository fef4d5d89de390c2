/* locked_restart.c - the VM tests' crash of a swap device's server and its new start
 * (tests/vm/ublk-restart.sh swap): SIGKILLs PID, waits until it is gone, then becomes
 * COMMAND (execvp in its own process, so the new server is the caller's child as the old one
 * was), as an I/O flusher (PR_SET_IO_FLUSHER). It locks itself in memory first: once the server is
 * dead, any page swapped out onto its device waits for a new server, and a shell that kills and
 * starts servers may have had its own pages swapped out there (the scenario hung that way). Systemd
 * or a supervisor of a swap device's server needs the same: whatever starts the successor must not
 * fault in a page from the device (uzram(1), --persist).
 *
 *   locked_restart PID COMMAND [ARG]...
 *
 * A zombie counts as gone: its parent (that shell) reaps it once it can run again. Exit
 * status 2: usage, mlockall, PR_SET_IO_FLUSHER, or PID still there after 30 s; else COMMAND's. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "common/process.h"

#define GONE_WITHIN_MS 30000

int main(int argc, char **argv)
{
    char *end = NULL;
    long pid = argc >= 3 ? strtol(argv[1], &end, 10) : 0;
    if (argc < 3 || *end != '\0' || pid <= 1) {
        fprintf(stderr, "usage: locked_restart PID COMMAND [ARG]...\n");
        return 2;
    }
    if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0) {
        fprintf(stderr, "locked_restart: mlockall: %s\n", strerror(errno));
        return 2;
    }
    if (kill((pid_t)pid, SIGKILL) < 0) {
        fprintf(stderr, "locked_restart: kill %ld: %s\n", pid, strerror(errno));
        return 2;
    }
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (int waited = 0; util_process_alive((pid_t)pid); waited += 10) {
        if (waited >= GONE_WITHIN_MS) {
            fprintf(stderr, "locked_restart: %ld still runs %d s after SIGKILL\n", pid,
                    GONE_WITHIN_MS / 1000);
            return 2;
        }
        nanosleep(&tick, NULL);
    }
    /* The new server faults in memory as it starts, before it makes itself an I/O flusher
     * (serve --swap): direct reclaim would then write to swap on the very device that waits
     * for it (the scenario hung once in bio_alloc_bioset). The flag is kept across execve. */
    if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) < 0) {
        fprintf(stderr, "locked_restart: PR_SET_IO_FLUSHER: %s\n", strerror(errno));
        return 2;
    }
    execvp(argv[2], argv + 2);
    fprintf(stderr, "locked_restart: %s: %s\n", argv[2], strerror(errno));
    return 2;
}
