/* output.c - how `uzram bench` prints: an aligned table for people, or one JSON
 * document for scripts, section by section. */
#include <stdio.h>

#include "bench/bench.h"
#include "common/text.h"

void bench_json_ratio(double value)
{
    if (value > 0)
        printf("%.4f", value);
    else
        printf("null");
}

void bench_section_begin(struct bench_output *out, const char *name, const char *title)
{
    if (out->json) {
        printf("%s\n  ", out->sections ? "," : "");
        util_json_string(stdout, name);
        printf(": [");
        out->items = 0;
    } else {
        printf("\n== %s ==\n", title);
    }
    out->sections++;
}

void bench_section_end(struct bench_output *out)
{
    if (out->json)
        printf("\n  ]");
    fflush(stdout);
}

void bench_item_begin(struct bench_output *out)
{
    printf("%s\n    {", out->items++ ? "," : "");
}

double bench_ratio_of(uint64_t numerator, uint64_t denominator)
{
    return denominator ? (double)numerator / (double)denominator : 0.0;
}

void bench_format_ratio(char *buf, size_t size, double value)
{
    if (value > 0)
        snprintf(buf, size, "%.3f", value);
    else
        snprintf(buf, size, "-");
}
