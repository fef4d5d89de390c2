/* dedup_off_on.c - `uzram bench --dedup`: dedup off and on side by side on unique and
 * identical pages, the targets of issue 3, and dedup metadata per stored object. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "common/datagen.h"
#include "common/text.h"

struct dedup_cell {
    bool valid;
    struct bench_measure_result result;
};

static void print_target(struct bench_output *out, const char *name, const char *text, double value,
                         double target, bool at_least, bool *first)
{
    bool met = at_least ? value >= target : value <= target;
    if (out->json) {
        printf("%s\n    {\"check\": ", *first ? "" : ",");
        util_json_string(stdout, name);
        printf(", \"value\": %.4f, \"target\": %.4f, \"target_is\": \"%s\", \"met\": %s}", value,
               target, at_least ? "at_least" : "at_most", met ? "true" : "false");
    } else {
        printf("%-44s %8.3f  target %s %-6g %s\n", text, value, at_least ? ">=" : "<=", target,
               met ? "met" : "NOT MET");
    }
    *first = false;
}

/* [workload][thread index][dedup off/on] */
typedef struct dedup_cell dedup_cells[2][BENCH_MAX_LIST][2];
static const char *const workloads[2] = {"unique", "identical"};

/* One row of the table: a workload at one thread count, dedup off and on. */
static void print_row(const struct bench_options *opt, struct bench_output *out, int w, int t,
                      const struct dedup_cell pair[2])
{
    const struct bench_measure_result *off = &pair[0].result;
    const struct bench_measure_result *on = &pair[1].result;
    if (out->json) {
        for (int d = 0; d < 2; d++) {
            const struct bench_measure_result *r = &pair[d].result;
            bench_item_begin(out);
            printf("\"workload\": \"%s\", \"threads\": %u, \"dedup\": %s, \"pages\": %" PRIu64
                   ", \"write_MBps\": %.1f, \"write_pages_per_s\": %.0f"
                   ", \"read_MBps\": %.1f, \"read_pages_per_s\": %.0f"
                   ", \"compr_data_size\": %" PRIu64 ", \"mem_used_total\": %" PRIu64
                   ", \"dup_data_size\": %" PRIu64 ", \"meta_data_size\": %" PRIu64 "}",
                   workloads[w], opt->threads[t], d ? "true" : "false", r->pages, r->write_mbps,
                   r->write_pps, r->read_mbps, r->read_pps, r->stats.compr_data_size,
                   r->stats.mem_used_total, r->stats.dup_data_size, r->stats.meta_data_size);
        }
    } else {
        printf(
            "%-10s %3u %12.1f %12.1f %7.3f %12.1f %12.1f %7.3f\n", workloads[w], opt->threads[t],
            off->write_mbps, on->write_mbps,
            bench_ratio_of((uint64_t)(on->write_mbps * 1000), (uint64_t)(off->write_mbps * 1000)),
            off->read_mbps, on->read_mbps,
            bench_ratio_of((uint64_t)(on->read_mbps * 1000), (uint64_t)(off->read_mbps * 1000)));
    }
    fflush(stdout);
}

/* The table: every workload at every thread count, dedup off and on. Returns 0 or -errno. */
static int measure_table(const struct bench_options *opt, struct bench_output *out,
                         dedup_cells cells)
{
    const char *algorithm = opt->algorithms[0];
    int rc = 0;
    bench_section_begin(out, "dedup",
                        "dedup off vs on: half-compressible pages, all unique / all identical");
    if (!out->json)
        printf("algorithm %s; identical = every page written from one static buffer\n"
               "%-10s %3s %12s %12s %7s %12s %12s %7s\n",
               algorithm, "workload", "thr", "off write", "on write", "on/off", "off read",
               "on read", "on/off");
    for (int w = 0; w < 2 && rc == 0; w++) {
        struct bench_data data = {0};
        rc = bench_data_generate(&data, DATAGEN_HALF, opt->seed, opt->size / BENCH_PAGE, w == 1);
        if (rc) {
            fprintf(stderr, "uzram bench: no memory for %" PRIu64 " bytes of test data\n",
                    opt->size);
            break;
        }
        for (int t = 0; t < opt->thread_count && rc == 0; t++) {
            for (int d = 0; d < 2 && rc == 0; d++) {
                struct bench_measure_request req = {
                    .algorithm = algorithm,
                    .dedup = d == 1,
                    .threads = opt->threads[t],
                    .data = &data,
                    .budget = opt->budget,
                    .repeat = opt->repeat,
                };
                rc = bench_measure(&req, &cells[w][t][d].result);
                cells[w][t][d].valid = rc == 0;
            }
            if (rc)
                break;
            print_row(opt, out, w, t, cells[w][t]);
        }
        bench_data_free(&data);
    }
    bench_section_end(out);
    return rc;
}

/* The targets of issue 3 that the table answers: write on/off and the 2-thread scaling. */
static void print_write_targets(const struct bench_options *opt, struct bench_output *out,
                                dedup_cells cells, bool *first)
{
    int one = -1, two = -1;
    for (int t = 0; t < opt->thread_count; t++) {
        if (opt->threads[t] == 1)
            one = t;
        if (opt->threads[t] == 2)
            two = t;
    }
    for (int t = 0; t < opt->thread_count; t++) {
        char name[64], text[96];
        snprintf(name, sizeof name, "unique_write_on_off_%ut", opt->threads[t]);
        snprintf(text, sizeof text, "unique pages, write on/off, %u thread(s)", opt->threads[t]);
        print_target(out, name, text,
                     cells[0][t][1].result.write_mbps / cells[0][t][0].result.write_mbps, 0.9, true,
                     first);
    }
    if (one >= 0)
        print_target(out, "identical_write_on_off_1t", "identical pages, write on/off, 1 thread",
                     cells[1][one][1].result.write_mbps / cells[1][one][0].result.write_mbps, 1.0,
                     true, first);
    if (one >= 0 && two >= 0) {
        print_target(out, "identical_dedup_on_write_2t_1t",
                     "identical pages, dedup on, write 2t/1t",
                     cells[1][two][1].result.write_mbps / cells[1][one][1].result.write_mbps, 1.5,
                     true, first);
        double off_scaling =
            cells[1][two][0].result.write_mbps / cells[1][one][0].result.write_mbps;
        if (out->json)
            printf(",\n    {\"check\": \"identical_dedup_off_write_2t_1t\", \"value\": %.4f}",
                   off_scaling);
        else
            printf("%-44s %8.3f  (for reference)\n", "identical pages, dedup off, write 2t/1t",
                   off_scaling);
    }
}

/* Metadata per unique object needs a full device: the index may grow in
 * steps, so a run cut short by the time budget would flatter or wrong it.
 * One untimed store of every unique page, with dedup on. Returns 0 or -errno. */
static int print_meta_target(const struct bench_options *opt, struct bench_output *out, bool *first)
{
    struct bench_data data = {0};
    int rc = bench_data_generate(&data, DATAGEN_HALF, opt->seed, opt->size / BENCH_PAGE, false);
    if (rc) {
        fprintf(stderr, "uzram bench: no memory for %" PRIu64 " bytes of test data\n", opt->size);
        return rc;
    }
    struct bench_measure_request req = {
        .algorithm = opt->algorithms[0],
        .dedup = true,
        .threads = 1,
        .data = &data,
        .budget = 0,
        .repeat = 1,
    };
    struct bench_measure_result full;
    rc = bench_measure(&req, &full);
    bench_data_free(&data);
    if (rc)
        return rc;
    const struct uzram_stats *st = &full.stats;
    uint64_t objects = st->dedup_entries;
    if (objects) {
        double per_object = (double)st->meta_data_size / (double)objects;
        print_target(out, "dedup_meta_bytes_per_object", "dedup metadata, bytes per unique object",
                     per_object, 24, false, first);
        if (out->json)
            printf(",\n    {\"check\": \"dedup_meta_detail\", \"meta_data_size\": %" PRIu64
                   ", \"unique_objects\": %" PRIu64 ", \"entry_cost\": %zu"
                   ", \"dup_data_size\": %" PRIu64 "}",
                   st->meta_data_size, objects, uzram_dedup_entry_cost(), st->dup_data_size);
        else
            printf("  (meta_data_size %" PRIu64 " B / %" PRIu64
                   " unique objects after storing all %" PRIu64
                   " MiB; uzram_dedup_entry_cost() = %zu B; dup_data_size %" PRIu64 ")\n",
                   st->meta_data_size, objects, opt->size >> 20, uzram_dedup_entry_cost(),
                   st->dup_data_size);
    }
    return 0;
}

int bench_dedup(const struct bench_options *opt, struct bench_output *out)
{
    static dedup_cells cells;
    memset(cells, 0, sizeof cells);
    int rc = measure_table(opt, out, cells);
    if (rc)
        return rc;

    if (out->json)
        printf(",\n  \"dedup_checks\": [");
    else
        printf("\n");
    bool first = true;
    print_write_targets(opt, out, cells, &first);
    rc = print_meta_target(opt, out, &first);
    if (rc)
        return rc;
    if (out->json)
        printf("\n  ]");
    fflush(stdout);
    return 0;
}
