/* nbd_report.c - `uzram bench nbd`'s entry and report: runs the load (nbd_load.c) and prints
 * requests/s and CPU time a request, the client's own and the server's, as text or JSON. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/nbd_load.h"
#include "common/text.h"

static const char *rw_name(enum bench_nbd_rw rw)
{
    return rw == BENCH_NBD_READ ? "read" : rw == BENCH_NBD_WRITE ? "write" : "mix";
}

static void print_json(const struct bench_options *opt, const struct bench_nbd_result *r,
                       double load)
{
    const struct bench_nbd_options *o = &opt->nbd;
    uint64_t done = r->reads + r->writes;
    printf("{\n  \"version\": ");
    util_json_string(stdout, uzram_version());
    printf(", \"job\": \"nbd\", \"loadavg_1min\": %.2f,\n  \"target\": ", load);
    util_json_string(stdout, o->unix_path ? o->unix_path : o->host);
    printf(", \"transport\": \"%s\", \"export\": ", o->unix_path ? "unix" : "tcp");
    util_json_string(stdout, o->export_name);
    printf(", \"export_size\": %" PRIu64 ", \"region\": %" PRIu64 ",\n", r->export_size, r->region);
    printf("  \"rw\": \"%s\", \"pattern\": \"%s\", \"block_size\": %" PRIu32
           ", \"depth\": %u, \"seed\": %" PRIu64 ",\n",
           rw_name(o->rw), o->sequential ? "seq" : "random", o->block_size, o->depth, opt->seed);
    printf("  \"requests\": %" PRIu64 ", \"reads\": %" PRIu64 ", \"writes\": %" PRIu64
           ", \"seconds\": %.6f, \"requests_per_s\": %.0f, \"MBps\": %.1f,\n",
           done, r->reads, r->writes, r->seconds, done / r->seconds,
           done * (double)o->block_size / r->seconds / BENCH_MEGA);
    printf("  \"client_user_s\": %.6f, \"client_system_s\": %.6f"
           ", \"client_cpu_us_per_request\": %.3f",
           r->client_user, r->client_system, (r->client_user + r->client_system) * 1e6 / done);
    if (r->server_measured)
        printf(", \"server_pid\": %ld, \"server_user_s\": %.2f, \"server_system_s\": %.2f"
               ", \"server_cpu_us_per_request\": %.3f",
               o->server_pid, r->server_user, r->server_system,
               (r->server_user + r->server_system) * 1e6 / done);
    else
        printf(", \"server_cpu_us_per_request\": null");
    if (o->verify)
        printf(",\n  \"verified_reads\": %" PRIu64 ", \"verified_zero_reads\": %" PRIu64,
               r->verified, r->verified_zero);
    printf("\n}\n");
}

static void print_text(const struct bench_options *opt, const struct bench_nbd_result *r,
                       double load)
{
    const struct bench_nbd_options *o = &opt->nbd;
    uint64_t done = r->reads + r->writes;
    char region[16];
    util_human_size(r->region, region, sizeof region);
    printf("uzram bench nbd %s: %s%s export '%s', %s %s, %" PRIu32 " bytes a request,"
           " depth %u, region %s, seed %" PRIu64 "\n",
           uzram_version(), o->unix_path ? "unix:" : "tcp:", o->unix_path ? o->unix_path : o->host,
           o->export_name, o->sequential ? "seq" : "random", rw_name(o->rw), o->block_size,
           o->depth, region, opt->seed);
    if (load > 0.5)
        printf("note: load average %.2f: other work is running, numbers will be low and noisy\n",
               load);
    printf("requests      %" PRIu64 " (%" PRIu64 " reads, %" PRIu64 " writes) in %.3f s\n", done,
           r->reads, r->writes, r->seconds);
    printf("requests/s    %.0f (%.1f MB/s)\n", done / r->seconds,
           done * (double)o->block_size / r->seconds / BENCH_MEGA);
    printf("client CPU    %.3f us a request (user %.3f s + system %.3f s)\n",
           (r->client_user + r->client_system) * 1e6 / done, r->client_user, r->client_system);
    if (r->server_measured)
        printf("server CPU    %.3f us a request (user %.2f s + system %.2f s, process %ld;"
               " %ld ticks a second)\n",
               (r->server_user + r->server_system) * 1e6 / done, r->server_user, r->server_system,
               o->server_pid, sysconf(_SC_CLK_TCK));
    else
        printf("server CPU    not measured (give --server-pid PID)\n");
    if (o->verify)
        printf("verified      %" PRIu64 " reads matched, %" PRIu64
               " read zeros (blocks never written)\n",
               r->verified, r->verified_zero);
}

int bench_nbd(const struct bench_options *opt)
{
    struct bench_nbd_result res;
    int rc = bench_nbd_load(opt, &res);
    if (rc)
        return 1;
    double load[1] = {0};
    if (getloadavg(load, 1) != 1)
        load[0] = -1;
    if (opt->json)
        print_json(opt, &res, load[0]);
    else
        print_text(opt, &res, load[0]);
    fflush(stdout);
    return 0;
}
