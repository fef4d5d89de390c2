/* throughput.c - `uzram bench` throughput: every algorithm x data kind x thread count,
 * write then read of 4 KiB pages into a fresh device, with the compression ratio. */
#include <inttypes.h>
#include <stdio.h>

#include "bench/bench.h"
#include "common/text.h"

int bench_throughput(const struct bench_options *opt, struct bench_output *out)
{
    bench_section_begin(
        out, "throughput",
        "write then read of 4 KiB pages into a fresh device (MB/s = 10^6 B/s, best of repeats)");
    if (!out->json)
        printf("%-8s %-7s %3s %9s %10s %9s %10s %7s %8s %9s\n", "algo", "data", "thr", "write MB/s",
               "pages/s", "read MB/s", "pages/s", "ratio", "mem/compr", "pages");
    int rc = 0;
    for (int k = 0; k < opt->kind_count && rc == 0; k++) {
        struct bench_data data = {0};
        rc = bench_data_generate(&data, opt->kinds[k], opt->seed, opt->size / BENCH_PAGE, false);
        if (rc) {
            fprintf(stderr, "uzram bench: no memory for %" PRIu64 " bytes of test data\n",
                    opt->size);
            break;
        }
        for (int a = 0; a < opt->algorithm_count && rc == 0; a++) {
            for (int t = 0; t < opt->thread_count && rc == 0; t++) {
                struct bench_measure_request req = {
                    .algorithm = opt->algorithms[a],
                    .dedup = false,
                    .threads = opt->threads[t],
                    .data = &data,
                    .budget = opt->budget,
                    .repeat = opt->repeat,
                };
                struct bench_measure_result res;
                rc = bench_measure(&req, &res);
                if (rc)
                    break;
                double ratio = bench_ratio_of(res.stats.orig_data_size, res.stats.compr_data_size);
                double overhead =
                    bench_ratio_of(res.stats.mem_used_total, res.stats.compr_data_size);
                if (out->json) {
                    bench_item_begin(out);
                    printf("\"algorithm\": ");
                    util_json_string(stdout, req.algorithm);
                    printf(", \"kind\": ");
                    util_json_string(stdout, data.name);
                    printf(", \"threads\": %u, \"pages\": %" PRIu64
                           ", \"write_MBps\": %.1f, \"write_pages_per_s\": %.0f"
                           ", \"read_MBps\": %.1f, \"read_pages_per_s\": %.0f, \"ratio\": ",
                           req.threads, res.pages, res.write_mbps, res.write_pps, res.read_mbps,
                           res.read_pps);
                    bench_json_ratio(ratio);
                    printf(", \"pool_overhead\": ");
                    bench_json_ratio(overhead);
                    printf(", \"orig_data_size\": %" PRIu64 ", \"compr_data_size\": %" PRIu64
                           ", \"mem_used_total\": %" PRIu64 ", \"same_pages\": %" PRIu64
                           ", \"huge_pages\": %" PRIu64 "}",
                           res.stats.orig_data_size, res.stats.compr_data_size,
                           res.stats.mem_used_total, res.stats.same_pages, res.stats.huge_pages);
                } else {
                    char ratio_text[16], overhead_text[16];
                    bench_format_ratio(ratio_text, sizeof ratio_text, ratio);
                    bench_format_ratio(overhead_text, sizeof overhead_text, overhead);
                    printf("%-8s %-7s %3u %10.1f %10.0f %9.1f %10.0f %7s %9s %9" PRIu64 "\n",
                           req.algorithm, data.name, req.threads, res.write_mbps, res.write_pps,
                           res.read_mbps, res.read_pps, ratio_text, overhead_text, res.pages);
                }
                fflush(stdout);
            }
        }
        bench_data_free(&data);
    }
    bench_section_end(out);
    if (!out->json)
        printf("ratio = orig_data_size/compr_data_size; mem/compr = mem_used_total/compr_data_size"
               " (pool overhead; - when nothing was compressed)\n");
    return rc;
}
