/* same_check.c - `uzram bench --same-check`: uzram_page_same_filled alone, on full
 * pages and on pages that differ in the first, middle or last word. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench.h"
#include "common/clock.h"
#include "common/text.h"

/* Calls per second of uzram_page_same_filled on one page, best of repeats.
 * The function lives in the library, so the compiler cannot drop the calls;
 * the sink keeps the results alive anyway. */
static volatile uint64_t same_check_sink;

static double same_check_rate(const void *page, double budget, unsigned repeat)
{
    double best = 0;
    for (unsigned rep = 0; rep < repeat; rep++) {
        uint64_t calls = 0, found = 0, word = 0;
        uint64_t start = util_now_ns(), end;
        uint64_t limit = start + (uint64_t)(budget * 1e9);
        do {
            for (int i = 0; i < 4096; i++)
                found += uzram_page_same_filled(page, &word);
            calls += 4096;
            end = util_now_ns();
        } while (end < limit);
        same_check_sink = found + word;
        double rate = (double)calls / ((double)(end - start) / 1e9);
        if (rate > best)
            best = rate;
    }
    return best;
}

int bench_same_check(const struct bench_options *opt, struct bench_output *out)
{
    uint64_t *page = aligned_alloc(64, BENCH_PAGE);
    if (!page)
        return -ENOMEM;
    const size_t words = BENCH_PAGE / 8;
    const uint64_t fill = 0x5a5a5a5a5a5a5a5aull;
    struct {
        const char *name;
        uint64_t fill;
        long differing_word; /* -1: none */
        bool expect;
    } cases[] = {
        {"zero page (full scan)", 0, -1, true},
        {"same-filled page (full scan)", fill, -1, true},
        {"last word differs (pre-check)", fill, (long)words - 1, false},
        {"first word differs", fill, 0, false},
        {"middle word differs", fill, (long)words / 2, false},
    };
    /* shorter slices than the throughput phases: these loops are tiny and steady */
    double budget = opt->budget < 0.1 ? opt->budget : 0.1;
    bench_section_begin(
        out, "same_filled_check",
        "uzram_page_same_filled alone (GB/s = 10^9 B/s of pages checked, best of repeats)");
    if (!out->json)
        printf("%-32s %10s %10s\n", "page", "GB/s", "ns/call");
    int rc = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t i = 0; i < words; i++)
            page[i] = cases[c].fill;
        if (cases[c].differing_word >= 0)
            page[cases[c].differing_word] ^= 0x0100;
        uint64_t word = 0;
        if (uzram_page_same_filled(page, &word) != cases[c].expect ||
            (cases[c].expect && word != cases[c].fill)) {
            fprintf(stderr, "uzram bench: uzram_page_same_filled gives a wrong answer for '%s'\n",
                    cases[c].name);
            rc = -EIO;
            break;
        }
        double rate = same_check_rate(page, budget, opt->repeat);
        double gbps = rate * BENCH_PAGE / 1e9;
        double ns = 1e9 / rate;
        if (out->json) {
            bench_item_begin(out);
            printf("\"page\": ");
            util_json_string(stdout, cases[c].name);
            printf(", \"GBps\": %.2f, \"ns_per_call\": %.2f}", gbps, ns);
        } else {
            printf("%-32s %10.2f %10.2f\n", cases[c].name, gbps, ns);
        }
    }
    bench_section_end(out);
    if (!out->json && rc == 0)
        printf("target: full page >= 20 GB/s\n");
    free(page);
    return rc;
}
