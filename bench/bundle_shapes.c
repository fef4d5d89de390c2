/* bundle_shapes.c - what the shape of a bundle's frame costs (issue 27): memory against the
 * decoding a random read of a bundled page pays. Built and run by bench/bundle-shapes.sh.
 *
 * For a file of pages (same-filled pages left out, as the engine never bundles them), with a
 * 64 KiB zstd dictionary trained on every 8th page (up to 4096) and zstd level 7 as the
 * engine's codec (lib/codec/comp.c): each page alone (its pool object's cost, pool_object_cost),
 * and for bundles of N = 4, 8, 16 pages each aligned window of N compressible pages as one frame
 * cut into blocks of B pages (comp_compress_span_blocks; the engine's B is comp_span_block's,
 * marked in the table), kept as a
 * bundle only where its pieces cost less than the same pages alone (recompress_bundle.c
 * weighs the members' objects as they are, lz4 ones in bench/bundle.sh). Raw pages stay
 * alone. A read of place k decodes the blocks up to k's: ceil((k + 1) / B) * B pages. The
 * time is the engine's own span decoder (comp_span_decode) reading every place of every
 * bundle, each read from a fresh begin, against comp_decompress_dict of every page alone, in
 * the thread's CPU time (a shared machine's load moves it less than the clock); ROUNDS
 * rounds, each timing every shape in turn, and the medians.
 *
 * Usage: bundle_shapes FILE ROUNDS   (one markdown table row a shape on stdout) */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bundle/bundle.h"
#include "codec/comp.h"
#include "pool/pool.h"
#include "uzram.h"

#define PAGE UZRAM_PAGE_SIZE
#define LEVEL 7
#define SHAPES 11
#define MAX_ROUNDS 15

static const unsigned shape_pages[SHAPES] = {4, 4, 4, 8, 8, 8, 8, 16, 16, 16, 16};
static const unsigned shape_block[SHAPES] = {1, 2, 4, 1, 2, 4, 8, 1, 2, 4, 16};

struct shape {
    unsigned char **frames; /* a window's frame, NULL where its pages stay alone */
    size_t *lengths;        /* its bytes */
    unsigned char *counts;  /* its pages */
    double memory;          /* pool bytes: bundles and the pages left alone */
    double decoded;         /* pages decoded by the random reads of bundled pages */
    uint64_t reads;         /* bundled pages */
    double us[MAX_ROUNDS];
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int same_filled(const unsigned char *page)
{
    const uint64_t *word = (const void *)page;
    for (unsigned i = 1; i < PAGE / 8; i++)
        if (word[i] != word[0])
            return 0;
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, unsigned count)
{
    qsort(values, count, sizeof *values, cmp_double);
    return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

static const void *frame_bytes(void *arg, size_t offset, size_t count)
{
    (void)count;
    return (const unsigned char *)arg + offset;
}

struct pages {
    unsigned char *bytes; /* the pages kept, in order */
    unsigned *single;     /* each one's length alone (PAGE: raw) */
    size_t count;
    unsigned char **alone; /* each one's object */
};

static int load(const char *path, struct pages *pages, struct comp_dict **dict)
{
    FILE *file = fopen(path, "rb");
    if (!file)
        return -1;
    fseek(file, 0, SEEK_END);
    size_t size = (size_t)ftell(file) / PAGE * PAGE;
    rewind(file);
    pages->bytes = malloc(size);
    if (!pages->bytes || fread(pages->bytes, 1, size, file) != size) {
        fclose(file);
        return -1;
    }
    fclose(file);
    size_t kept = 0;
    for (size_t i = 0; i < size / PAGE; i++)
        if (!same_filled(pages->bytes + i * PAGE))
            memmove(pages->bytes + kept++ * PAGE, pages->bytes + i * PAGE, PAGE);
    pages->count = kept;
    size_t samples = 0, sizes[4096];
    unsigned char *sample_bytes = malloc((size_t)4096 * PAGE);
    for (size_t i = 0; i < kept && samples < 4096; i += 8) {
        memcpy(sample_bytes + samples * PAGE, pages->bytes + i * PAGE, PAGE);
        sizes[samples++] = PAGE;
    }
    static unsigned char content[65536];
    int length = comp_dict_train(content, sizeof content, sample_bytes, sizes, samples);
    free(sample_bytes);
    if (length < 0 || comp_dict_create(COMP_ZSTD, LEVEL, content, (size_t)length, dict) < 0)
        return -1;
    pages->single = malloc(kept * sizeof *pages->single);
    pages->alone = calloc(kept, sizeof *pages->alone);
    unsigned char object[PAGE];
    for (size_t i = 0; i < kept; i++) {
        int n = comp_compress_dict(COMP_ZSTD, LEVEL, *dict, pages->bytes + i * PAGE, object, PAGE);
        pages->single[i] = n > 0 ? (unsigned)n : PAGE;
        if (n > 0) {
            pages->alone[i] = malloc((size_t)n);
            memcpy(pages->alone[i], object, (size_t)n);
        }
    }
    return 0;
}

/* What page i takes in the pool alone: its object, or a whole page if raw. */
static double cost_alone(const struct pages *pages, size_t i)
{
    return pages->single[i] < PAGE ? pool_object_cost(pages->single[i]) : PAGE;
}

static void build(struct shape *shape, unsigned n, unsigned block, const struct pages *pages,
                  const struct comp_dict *dict)
{
    size_t windows = (pages->count + n - 1) / n;
    shape->frames = calloc(windows, sizeof *shape->frames);
    shape->lengths = calloc(windows, sizeof *shape->lengths);
    shape->counts = calloc(windows, sizeof *shape->counts);
    static unsigned char frame[BUNDLE_MAX_PAGES * PAGE], members[BUNDLE_MAX_PAGES * PAGE];
    for (size_t w = 0; w < windows; w++) {
        unsigned count = 0;
        double alone = 0;
        for (size_t i = w * n; i < (w + 1) * n && i < pages->count; i++) {
            alone += cost_alone(pages, i);
            if (pages->single[i] < PAGE) /* raw pages are never bundled */
                memcpy(members + count++ * PAGE, pages->bytes + i * PAGE, PAGE);
        }
        int length =
            count < 2
                ? 0
                : comp_compress_span_blocks(COMP_ZSTD, LEVEL, dict, members, (size_t)count * PAGE,
                                            (size_t)block * PAGE, frame, sizeof frame);
        double raw = 0;
        for (size_t i = w * n; i < (w + 1) * n && i < pages->count; i++)
            raw += pages->single[i] < PAGE ? 0 : PAGE;
        if (length <= 0 || bundle_pool_cost((unsigned)length) + raw >= alone) {
            shape->memory += alone;
            continue;
        }
        shape->memory += bundle_pool_cost((unsigned)length) + raw;
        shape->frames[w] = malloc((size_t)length);
        memcpy(shape->frames[w], frame, (size_t)length);
        shape->lengths[w] = (size_t)length;
        shape->counts[w] = (unsigned char)count;
        for (unsigned k = 0; k < count; k++) {
            unsigned upto = (k / block + 1) * block;
            shape->decoded += upto < count ? upto : count;
            shape->reads++;
        }
    }
}

/* Every place of every bundle read from a fresh begin: microseconds a read. */
static double time_reads(const struct shape *shape, size_t windows, struct comp_span_decoder *dec,
                         const struct comp_dict *dict)
{
    static unsigned char out[BUNDLE_MAX_PAGES * PAGE];
    double start = now();
    for (size_t w = 0; w < windows; w++) {
        if (!shape->frames[w])
            continue;
        unsigned count = shape->counts[w];
        struct comp_span_source source = {shape->lengths[w], frame_bytes, shape->frames[w]};
        for (unsigned k = 0; k < count; k++)
            if (comp_span_begin(dec, COMP_ZSTD, dict) < 0 ||
                comp_span_decode(dec, &source, out, (size_t)count * PAGE, (size_t)(k + 1) * PAGE) <
                    0) {
                fprintf(stderr, "bundle_shapes: a frame did not decode\n");
                exit(1);
            }
    }
    return (now() - start) * 1e6 / (double)shape->reads;
}

static double time_alone(const struct pages *pages, const struct comp_dict *dict)
{
    unsigned char out[PAGE];
    double start = now();
    size_t reads = 0;
    for (size_t i = 0; i < pages->count; i++)
        if (pages->alone[i]) {
            if (comp_decompress_dict(COMP_ZSTD, dict, pages->alone[i], (size_t)pages->single[i],
                                     out) < 0) {
                fprintf(stderr, "bundle_shapes: a page did not decode\n");
                exit(1);
            }
            reads++;
        }
    return (now() - start) * 1e6 / (double)reads;
}

int main(int argc, char **argv)
{
    unsigned rounds = argc == 3 ? (unsigned)atoi(argv[2]) : 0;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bundle_shapes FILE ROUNDS (1..%d)\n", MAX_ROUNDS);
        return 2;
    }
    struct pages pages = {0};
    struct comp_dict *dict = NULL;
    if (load(argv[1], &pages, &dict) < 0) {
        fprintf(stderr, "bundle_shapes: cannot read %s or train a dictionary on it\n", argv[1]);
        return 1;
    }
    double alone_memory = 0;
    for (size_t i = 0; i < pages.count; i++)
        alone_memory += cost_alone(&pages, i);
    static struct shape shapes[SHAPES];
    for (unsigned s = 0; s < SHAPES; s++)
        build(&shapes[s], shape_pages[s], shape_block[s], &pages, dict);
    struct comp_span_decoder *dec = NULL;
    if (comp_span_decoder_new(&dec) < 0)
        return 1;
    double alone_us[MAX_ROUNDS];
    for (unsigned r = 0; r < rounds; r++) {
        alone_us[r] = time_alone(&pages, dict);
        for (unsigned s = 0; s < SHAPES; s++)
            shapes[s].us[r] = time_reads(
                &shapes[s], (pages.count + shape_pages[s] - 1) / shape_pages[s], dec, dict);
    }
    double alone = median(alone_us, rounds);
    printf("| one page an object | - | %.1f MiB | 1.000 | 1.0 | %.1f | 1.0 |\n",
           alone_memory / 1048576, alone);
    for (unsigned s = 0; s < SHAPES; s++) {
        struct shape *shape = &shapes[s];
        double us = median(shape->us, rounds);
        bool engine = comp_span_block((size_t)shape_pages[s] * PAGE) == shape_block[s] * PAGE;
        printf("| bundles of %u | %u%s | %.1f MiB | %.3f | %.1f | %.1f | %.1f |\n", shape_pages[s],
               shape_block[s], engine ? " (the engine's)" : "", shape->memory / 1048576,
               shape->memory / alone_memory, shape->decoded / (double)shape->reads, us, us / alone);
    }
    comp_span_decoder_free(dec);
    return 0;
}
