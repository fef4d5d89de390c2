/* nbd_load.h - one run of `uzram bench nbd` (nbd_load.c) and what it measured, for the
 * report (nbd_report.c). */
#ifndef UZRAM_BENCH_NBD_LOAD_H
#define UZRAM_BENCH_NBD_LOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "bench/bench.h"

struct bench_nbd_result {
    uint64_t export_size, region;
    uint64_t reads, writes;            /* requests answered */
    uint64_t verified, verified_zero;  /* --verify: reads that matched, reads of zeros */
    double seconds;                    /* from the first request to the last reply */
    double client_user, client_system; /* this process, seconds */
    bool server_measured;              /* --server-pid given and read */
    double server_user, server_system; /* seconds */
};

/* A process's CPU time so far (utime and stime of /proc/PID/stat), in seconds. */
struct bench_nbd_cpu {
    double user, system;
};
int bench_nbd_process_cpu(long pid, struct bench_nbd_cpu *cpu);

/* Connect, run the requests, disconnect. 0, or a negative errno after a message. */
int bench_nbd_load(const struct bench_options *opt, struct bench_nbd_result *res);

#endif
