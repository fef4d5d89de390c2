/* codec.c - `uzram bench` codec section: the compressors alone (uzram_codec_*), so the
 * engine's own cost can be read off as the gap to the throughput rows. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "common/datagen.h"
#include "common/clock.h"
#include "common/text.h"

int bench_codec(const struct bench_options *opt, struct bench_output *out)
{
    enum { CODEC_PAGES = 4096 }; /* 16 MiB: bigger than the caches, small to make */
    const size_t capacity = 2 * BENCH_PAGE;
    struct bench_data data = {0};
    unsigned char *compressed = malloc((size_t)CODEC_PAGES * capacity);
    int *lengths = calloc(CODEC_PAGES, sizeof *lengths);
    unsigned char *page = aligned_alloc(64, BENCH_PAGE);
    int rc = compressed && lengths && page ? 0 : -ENOMEM;
    if (rc == 0)
        rc = bench_data_generate(&data, DATAGEN_HALF, opt->seed, CODEC_PAGES, false);
    if (rc) {
        fprintf(stderr, "uzram bench: out of memory for the codec test\n");
        goto out;
    }
    double budget = opt->budget < 0.1 ? opt->budget : 0.1;
    bench_section_begin(out, "codec",
                        "codecs alone on 'half' pages, 1 thread, uzram_codec_* (MB/s of pages)");
    if (!out->json)
        printf("%-8s %12s %14s %7s\n", "algo", "compress MB/s", "decompress MB/s", "ratio");
    for (int a = 0; a < opt->algorithm_count && rc == 0; a++) {
        struct uzram_codec *codec = NULL;
        rc = uzram_codec_open(opt->algorithms[a], 0, &codec);
        if (rc) {
            fprintf(stderr, "uzram bench: uzram_codec_open(%s) failed: %s\n", opt->algorithms[a],
                    strerror(-rc));
            break;
        }
        double best[2] = {0, 0};
        uint64_t total_length = 0;
        for (unsigned rep = 0; rep < opt->repeat && rc == 0; rep++) {
            for (int phase = 0; phase < 2 && rc == 0; phase++) {
                uint64_t pages = 0, start = util_now_ns(), end;
                uint64_t limit = start + (uint64_t)(budget * 1e9);
                do {
                    size_t i = pages % CODEC_PAGES;
                    if (phase == 0) {
                        int length = uzram_codec_compress(codec, bench_page_at(&data, i),
                                                          compressed + i * capacity, capacity);
                        if (length <= 0) {
                            fprintf(stderr, "uzram bench: %s compress failed: %d\n",
                                    opt->algorithms[a], length);
                            rc = -EIO;
                            break;
                        }
                        lengths[i] = length;
                    } else {
                        rc = uzram_codec_decompress(codec, compressed + i * capacity,
                                                    (size_t)lengths[i], page);
                        if (rc) {
                            fprintf(stderr, "uzram bench: %s decompress failed: %s\n",
                                    opt->algorithms[a], strerror(-rc));
                            break;
                        }
                    }
                    pages++;
                    end = (pages & 15) == 0 ? util_now_ns() : 0;
                    /* the decompress pass needs every page compressed once */
                } while (end < limit || (phase == 0 && pages < CODEC_PAGES));
                if (rc)
                    break;
                end = util_now_ns();
                double rate =
                    (double)pages * BENCH_PAGE / ((double)(end - start) / 1e9) / BENCH_MEGA;
                if (rate > best[phase])
                    best[phase] = rate;
            }
        }
        for (size_t i = 0; i < CODEC_PAGES; i++)
            total_length += (uint64_t)lengths[i];
        uzram_codec_close(codec);
        if (rc)
            break;
        double ratio = bench_ratio_of((uint64_t)CODEC_PAGES * BENCH_PAGE, total_length);
        if (out->json) {
            bench_item_begin(out);
            printf("\"algorithm\": ");
            util_json_string(stdout, opt->algorithms[a]);
            printf(", \"compress_MBps\": %.1f, \"decompress_MBps\": %.1f, \"ratio\": %.4f}",
                   best[0], best[1], ratio);
        } else {
            printf("%-8s %12.1f %14.1f %7.3f\n", opt->algorithms[a], best[0], best[1], ratio);
        }
        fflush(stdout);
    }
    bench_section_end(out);
out:
    bench_data_free(&data);
    free(page);
    free(lengths);
    free(compressed);
    return rc;
}
