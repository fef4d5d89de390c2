/* real_data.c - `uzram bench --file/--tree`: real data stored whole, with and without
 * dedup: speed, ratio, pool overhead and the mm_stat line. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "common/text.h"

int bench_real_data(const struct bench_options *opt, struct bench_output *out)
{
    struct bench_data data = {0};
    int rc = bench_data_load(&data, opt);
    if (rc)
        return rc;
    bench_section_begin(out, "file", "pages of real data (whole data set, no time limit)");
    if (!out->json)
        printf("%-8s %5s %3s %10s %9s %7s %12s %12s %12s %9s %12s %10s\n", "algo", "dedup", "thr",
               "write MB/s", "read MB/s", "ratio", "orig", "compr", "mem_used", "mem/compr",
               "dup_data", "meta");
    for (int a = 0; a < opt->algorithm_count && rc == 0; a++) {
        for (int d = 0; d < (opt->run_dedup ? 2 : 1) && rc == 0; d++) {
            for (int t = 0; t < opt->thread_count && rc == 0; t++) {
                struct bench_measure_request req = {
                    .algorithm = opt->algorithms[a],
                    .dedup = d == 1,
                    .threads = opt->threads[t],
                    .data = &data,
                    .budget = 0,
                    .repeat = opt->repeat,
                    .disksize = opt->disksize,
                };
                struct bench_measure_result res;
                rc = bench_measure(&req, &res);
                if (rc)
                    break;
                const struct uzram_stats *st = &res.stats;
                double ratio = bench_ratio_of(st->orig_data_size, st->compr_data_size);
                double overhead = bench_ratio_of(st->mem_used_total, st->compr_data_size);
                char mm_stat[256];
                if (uzram_format_mm_stat(st, mm_stat, sizeof mm_stat) < 0)
                    mm_stat[0] = '\0';
                mm_stat[strcspn(mm_stat, "\n")] = '\0';
                if (out->json) {
                    bench_item_begin(out);
                    printf("\"algorithm\": ");
                    util_json_string(stdout, req.algorithm);
                    printf(", \"source\": ");
                    util_json_string(stdout, data.name);
                    printf(", \"dedup\": %s, \"threads\": %u, \"pages\": %" PRIu64
                           ", \"write_MBps\": %.1f, \"write_pages_per_s\": %.0f"
                           ", \"read_MBps\": %.1f, \"read_pages_per_s\": %.0f, \"ratio\": ",
                           d ? "true" : "false", req.threads, res.pages, res.write_mbps,
                           res.write_pps, res.read_mbps, res.read_pps);
                    bench_json_ratio(ratio);
                    printf(", \"pool_overhead\": ");
                    bench_json_ratio(overhead);
                    printf(", \"orig_data_size\": %" PRIu64 ", \"compr_data_size\": %" PRIu64
                           ", \"mem_used_total\": %" PRIu64 ", \"same_pages\": %" PRIu64
                           ", \"huge_pages\": %" PRIu64 ", \"dup_data_size\": %" PRIu64
                           ", \"meta_data_size\": %" PRIu64 ", \"dedup_entries\": %" PRIu64
                           ", \"mm_stat\": ",
                           st->orig_data_size, st->compr_data_size, st->mem_used_total,
                           st->same_pages, st->huge_pages, st->dup_data_size, st->meta_data_size,
                           st->dedup_entries);
                    util_json_string(stdout, mm_stat);
                    printf("}");
                } else {
                    char ratio_text[16], overhead_text[16];
                    bench_format_ratio(ratio_text, sizeof ratio_text, ratio);
                    bench_format_ratio(overhead_text, sizeof overhead_text, overhead);
                    printf("%-8s %5s %3u %10.1f %9.1f %7s %12" PRIu64 " %12" PRIu64 " %12" PRIu64
                           " %9s %12" PRIu64 " %10" PRIu64 "\n",
                           req.algorithm, d ? "on" : "off", req.threads, res.write_mbps,
                           res.read_mbps, ratio_text, st->orig_data_size, st->compr_data_size,
                           st->mem_used_total, overhead_text, st->dup_data_size,
                           st->meta_data_size);
                    printf("         mm_stat: %s\n", mm_stat);
                    if (st->dedup_entries)
                        printf("         dedup index: %" PRIu64 " B for %" PRIu64
                               " unique objects, %.2f B each\n",
                               st->meta_data_size, st->dedup_entries,
                               (double)st->meta_data_size / (double)st->dedup_entries);
                }
                fflush(stdout);
            }
        }
    }
    bench_section_end(out);
    if (!out->json && rc == 0)
        printf("target: mem/compr (pool overhead) <= 1.03 on real data\n");
    bench_data_free(&data);
    return rc;
}
