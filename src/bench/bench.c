/* bench.c - `uzram bench`: throughput, compression ratio and memory overheads of the
 * engine, measured in-process through include/uzram.h only (no engine internals). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/util.h"
#include "common/datagen.h"
#include "uzram.h"

#define PAGE UZRAM_PAGE_SIZE
#define MAX_LIST 16
#define MAX_THREADS 64
/* MB/s means 10^6 bytes per second everywhere, as fio's bw_bytes does. */
#define MEGA 1e6

static const char *const default_algorithms[] = {"lz4", "lz4hc", "zstd", "lzo", "deflate"};
static const int default_kinds[] = {DATAGEN_SAME, DATAGEN_HALF, DATAGEN_TEXT, DATAGEN_RANDOM};

struct bench_options {
    const char *algorithms[MAX_LIST];
    int algorithm_count;
    bool algorithms_given;
    int kinds[MAX_LIST];
    int kind_count;
    unsigned threads[MAX_LIST];
    int thread_count;
    bool threads_given;
    uint64_t size;
    bool size_given;
    unsigned repeat;
    double budget; /* seconds a timed phase may last before it stops early */
    uint64_t seed;
    bool json;
    bool run_sweep;
    bool run_same_check;
    bool run_dedup;
    const char *dump_kind;
    const char *file;
    char **trees; /* --tree DIR, as often as given */
    int tree_count;
};

/* ------------------------------------------------------------------------
 * Output: an aligned table for people, or one JSON document for scripts.
 * ---------------------------------------------------------------------- */

struct output {
    bool json;
    int sections; /* JSON sections opened so far, for the commas */
    int items;    /* items in the current JSON array */
};

/* A ratio that may not exist (nothing compressed): JSON null, table "-". */
static void json_ratio(double value)
{
    if (value > 0)
        printf("%.4f", value);
    else
        printf("null");
}

static void section_begin(struct output *out, const char *name, const char *title)
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

static void section_end(struct output *out)
{
    if (out->json)
        printf("\n  ]");
    fflush(stdout);
}

/* Opens one JSON object of the current array. */
static void item_begin(struct output *out)
{
    printf("%s\n    {", out->items++ ? "," : "");
}

static double ratio_of(uint64_t numerator, uint64_t denominator)
{
    return denominator ? (double)numerator / (double)denominator : 0.0;
}

static void format_ratio(char *buf, size_t size, double value)
{
    if (value > 0)
        snprintf(buf, size, "%.3f", value);
    else
        snprintf(buf, size, "-");
}

/* ------------------------------------------------------------------------
 * Timing
 * ---------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------
 * Data sets: pages kept in memory before the clock starts, so the bench
 * measures the engine and not the generator or the disk.
 * ---------------------------------------------------------------------- */

struct bench_data {
    unsigned char *pages; /* page_count pages, or one page when identical */
    uint64_t page_count;  /* pages written to the device */
    bool identical;       /* every write stores pages[0] (static-buffer test) */
    const char *name;
};

static const unsigned char *page_at(const struct bench_data *data, uint64_t index)
{
    return data->identical ? data->pages : data->pages + index * PAGE;
}

static void data_free(struct bench_data *data)
{
    free(data->pages);
    data->pages = NULL;
}

static int data_generate(struct bench_data *data, int kind, uint64_t seed, uint64_t pages,
                         bool identical)
{
    uint64_t stored = identical ? 1 : pages;
    data->pages = aligned_alloc(64, stored * PAGE);
    if (!data->pages)
        return -ENOMEM;
    for (uint64_t i = 0; i < stored; i++)
        datagen_page(seed, (enum datagen_kind)kind, i, data->pages + i * PAGE);
    data->page_count = pages;
    data->identical = identical;
    data->name = datagen_kind_name((enum datagen_kind)kind);
    return 0;
}

/* Growable buffer of whole pages for --file and --tree. */
struct page_buffer {
    unsigned char *bytes;
    uint64_t length;   /* bytes used */
    uint64_t capacity; /* bytes allocated, a multiple of PAGE */
    uint64_t limit;    /* stop loading at this many bytes */
    uint64_t files;
    uint64_t skipped;
};

static int buffer_reserve(struct page_buffer *buf, uint64_t extra)
{
    uint64_t need = buf->length + extra;
    if (need <= buf->capacity)
        return 0;
    uint64_t capacity = buf->capacity ? buf->capacity : 64ull << 20;
    while (capacity < need)
        capacity *= 2;
    unsigned char *bytes = realloc(buf->bytes, capacity);
    if (!bytes)
        return -ENOMEM;
    buf->bytes = bytes;
    buf->capacity = capacity;
    return 0;
}

/* Append the contents of fd, then zero-fill to a page boundary: files on a
 * file system start on page boundaries, which is what lets dedup share the
 * pages of identical files. */
static int buffer_append_fd(struct page_buffer *buf, int fd)
{
    for (;;) {
        if (buf->length >= buf->limit)
            break;
        int rc = buffer_reserve(buf, 1 << 20);
        if (rc)
            return rc;
        uint64_t room = buf->limit - buf->length;
        size_t want = room < (1u << 20) ? (size_t)room : (1u << 20);
        ssize_t got = read(fd, buf->bytes + buf->length, want);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (got == 0)
            break;
        buf->length += (uint64_t)got;
    }
    uint64_t tail = buf->length % PAGE;
    if (tail) {
        int rc = buffer_reserve(buf, PAGE - tail);
        if (rc)
            return rc;
        memset(buf->bytes + buf->length, 0, PAGE - tail);
        buf->length += PAGE - tail;
    }
    return 0;
}

static struct page_buffer *tree_buffer; /* nftw gives its callback no argument */

static int tree_visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type != FTW_F || !S_ISREG(st->st_mode) || st->st_size == 0)
        return 0;
    if (tree_buffer->length >= tree_buffer->limit)
        return 1; /* stops the walk */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        tree_buffer->skipped++;
        return 0;
    }
    int rc = buffer_append_fd(tree_buffer, fd);
    close(fd);
    if (rc == -ENOMEM)
        return -1;
    if (rc)
        tree_buffer->skipped++;
    else
        tree_buffer->files++;
    return 0;
}

static int data_load(struct bench_data *data, const struct bench_options *opt)
{
    struct page_buffer buf = {.limit = opt->size_given ? opt->size : UINT64_MAX};
    int rc = 0;
    if (opt->tree_count) {
        tree_buffer = &buf;
        for (int i = 0; i < opt->tree_count && rc == 0; i++) {
            errno = 0;
            int walked = nftw(opt->trees[i], tree_visit, 32, FTW_PHYS);
            if (walked < 0) {
                rc = errno ? -errno : -ENOMEM;
                fprintf(stderr, "uzram bench: cannot read tree %s: %s\n", opt->trees[i],
                        strerror(-rc));
            }
        }
        tree_buffer = NULL;
    } else {
        bool use_stdin = strcmp(opt->file, "-") == 0;
        int fd = use_stdin ? STDIN_FILENO : open(opt->file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = -errno;
            fprintf(stderr, "uzram bench: cannot open %s: %s\n", opt->file, strerror(errno));
        } else {
            rc = buffer_append_fd(&buf, fd);
            if (rc)
                fprintf(stderr, "uzram bench: cannot read %s: %s\n", opt->file, strerror(-rc));
            if (!use_stdin)
                close(fd);
            buf.files = 1;
        }
    }
    if (rc == 0 && buf.length == 0) {
        fprintf(stderr, "uzram bench: %s holds no data\n",
                opt->tree_count ? opt->trees[0] : opt->file);
        rc = -ENODATA;
    }
    if (rc) {
        free(buf.bytes);
        return rc;
    }
    data->pages = buf.bytes;
    data->page_count = buf.length / PAGE;
    data->identical = false;
    data->name = opt->tree_count ? opt->trees[0] : opt->file;
    if (!opt->json && !opt->dump_kind)
        printf("loaded %" PRIu64 " pages (%.1f MiB) from %" PRIu64 " file(s)%s%s\n",
               data->page_count, (double)buf.length / (1 << 20), buf.files,
               buf.skipped ? ", some unreadable files skipped" : "",
               buf.length >= buf.limit ? ", stopped at --size" : "");
    return 0;
}

/* ------------------------------------------------------------------------
 * One measurement: a fresh device, a timed write phase, a timed read phase.
 * ---------------------------------------------------------------------- */

struct worker {
    struct uzram *dev;
    const struct bench_data *data;
    pthread_barrier_t *barrier;
    uint64_t first; /* first page of this thread's range */
    uint64_t count; /* pages to do */
    bool reading;
    uint64_t budget_ns; /* 0: no time limit */
    unsigned char *read_page;
    /* results */
    uint64_t done;
    uint64_t start_ns;
    uint64_t end_ns;
    int error;
    uint64_t error_page;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pthread_barrier_wait(w->barrier);
    w->start_ns = now_ns();
    uint64_t deadline = w->budget_ns ? w->start_ns + w->budget_ns : UINT64_MAX;
    uint64_t i;
    for (i = 0; i < w->count; i++) {
        /* reading the clock every 16 pages costs well under 1% of the work */
        if ((i & 15) == 15 && now_ns() >= deadline)
            break; /* page i is not done */
        uint64_t page = w->first + i;
        int rc = w->reading ? uzram_read(w->dev, page * PAGE, w->read_page, PAGE)
                            : uzram_write(w->dev, page * PAGE, page_at(w->data, page), PAGE);
        if (rc) {
            w->error = rc;
            w->error_page = page;
            break;
        }
    }
    w->end_ns = now_ns();
    w->done = i;
    return NULL;
}

struct phase_result {
    uint64_t pages;
    double seconds;
};

/* Runs one phase on `threads` threads. The caller has set first/count of
 * each worker; the wall time runs from the first thread's start to the last
 * thread's end. */
static int run_phase(struct worker *workers, unsigned threads, bool reading, double budget,
                     struct phase_result *result)
{
    pthread_t ids[MAX_THREADS];
    pthread_barrier_t barrier;
    if (pthread_barrier_init(&barrier, NULL, threads))
        return -ENOMEM;
    unsigned started = 0;
    int rc = 0;
    for (unsigned t = 0; t < threads; t++) {
        workers[t].barrier = &barrier;
        workers[t].reading = reading;
        workers[t].budget_ns = budget > 0 ? (uint64_t)(budget * 1e9) : 0;
        workers[t].done = 0;
        workers[t].error = 0;
    }
    for (; started < threads; started++) {
        int err = pthread_create(&ids[started], NULL, worker_main, &workers[started]);
        if (err) {
            rc = -err;
            break;
        }
    }
    if (rc) {
        /* the barrier can never open: threads already waiting would hang, so
         * this only happens before any thread exists in practice (t == 0) */
        for (unsigned t = 0; t < started; t++)
            pthread_cancel(ids[t]);
    }
    for (unsigned t = 0; t < started; t++)
        pthread_join(ids[t], NULL);
    pthread_barrier_destroy(&barrier);
    if (rc)
        return rc;

    uint64_t start = UINT64_MAX, end = 0, pages = 0;
    for (unsigned t = 0; t < threads; t++) {
        if (workers[t].error) {
            fprintf(stderr, "uzram bench: uzram_%s of page %" PRIu64 " failed: %s\n",
                    reading ? "read" : "write", workers[t].error_page, strerror(-workers[t].error));
            return workers[t].error;
        }
        if (workers[t].start_ns < start)
            start = workers[t].start_ns;
        if (workers[t].end_ns > end)
            end = workers[t].end_ns;
        pages += workers[t].done;
    }
    result->pages = pages;
    result->seconds = (double)(end - start) / 1e9;
    if (result->seconds <= 0)
        result->seconds = 1e-9;
    return 0;
}

struct measure_request {
    const char *algorithm;
    bool dedup;
    unsigned threads;
    const struct bench_data *data;
    double budget;
    unsigned repeat;
};

struct measure_result {
    double write_mbps, write_pps;
    double read_mbps, read_pps;
    uint64_t pages;           /* written in the last repetition */
    struct uzram_stats stats; /* right after the last write phase */
};

/* Reads back a sample of the pages written, outside the clock: a bench of
 * an engine that loses data would be worse than no bench. */
static int verify_sample(struct uzram *dev, const struct bench_data *data,
                         const struct worker *workers, unsigned threads, unsigned char *page)
{
    for (unsigned t = 0; t < threads; t++) {
        for (uint64_t i = 0; i < workers[t].done; i += 61) {
            uint64_t index = workers[t].first + i;
            int rc = uzram_read(dev, index * PAGE, page, PAGE);
            if (rc) {
                fprintf(stderr, "uzram bench: verify read of page %" PRIu64 " failed: %s\n", index,
                        strerror(-rc));
                return rc;
            }
            if (memcmp(page, page_at(data, index), PAGE) != 0) {
                fprintf(stderr, "uzram bench: page %" PRIu64 " reads back different data\n", index);
                return -EIO;
            }
        }
    }
    return 0;
}

static int measure(const struct measure_request *req, struct measure_result *out)
{
    struct worker workers[MAX_THREADS];
    unsigned char *read_pages = aligned_alloc(64, (size_t)req->threads * PAGE);
    if (!read_pages)
        return -ENOMEM;
    memset(out, 0, sizeof *out);
    int rc = 0;

    for (unsigned rep = 0; rep < req->repeat && rc == 0; rep++) {
        struct uzram_config config;
        uzram_config_init(&config);
        config.disksize = req->data->page_count * PAGE;
        config.comp_algorithm = req->algorithm;
        config.use_dedup = req->dedup;
        struct uzram *dev = NULL;
        rc = uzram_create(&config, &dev);
        if (rc) {
            fprintf(stderr,
                    "uzram bench: uzram_create(%s, %" PRIu64 " bytes, dedup %s) failed: %s\n",
                    req->algorithm, config.disksize, req->dedup ? "on" : "off", strerror(-rc));
            break;
        }
        memset(workers, 0, sizeof workers);
        uint64_t total = req->data->page_count;
        for (unsigned t = 0; t < req->threads; t++) {
            workers[t].dev = dev;
            workers[t].data = req->data;
            workers[t].first = total * t / req->threads;
            workers[t].count = total * (t + 1) / req->threads - workers[t].first;
            workers[t].read_page = read_pages + (size_t)t * PAGE;
        }
        struct phase_result write = {0}, read = {0};
        rc = run_phase(workers, req->threads, false, req->budget, &write);
        if (rc == 0)
            rc = uzram_get_stats(dev, &out->stats, sizeof out->stats);
        if (rc == 0) {
            for (unsigned t = 0; t < req->threads; t++)
                workers[t].count = workers[t].done;
            rc = run_phase(workers, req->threads, true, req->budget, &read);
        }
        if (rc == 0 && rep + 1 == req->repeat)
            rc = verify_sample(dev, req->data, workers, req->threads, read_pages);
        uzram_destroy(dev);
        if (rc)
            break;

        /* best of the repetitions: noise on a shared machine only ever slows
         * a run down, so the fastest one is the closest to the truth */
        double write_pps = (double)write.pages / write.seconds;
        double read_pps = (double)read.pages / read.seconds;
        if (write_pps > out->write_pps)
            out->write_pps = write_pps;
        if (read_pps > out->read_pps)
            out->read_pps = read_pps;
        out->pages = write.pages;
    }
    out->write_mbps = out->write_pps * PAGE / MEGA;
    out->read_mbps = out->read_pps * PAGE / MEGA;
    free(read_pages);
    return rc;
}

/* ------------------------------------------------------------------------
 * Section 1: every algorithm x data kind x thread count
 * ---------------------------------------------------------------------- */

static int run_sweep(const struct bench_options *opt, struct output *out)
{
    section_begin(
        out, "throughput",
        "write then read of 4 KiB pages into a fresh device (MB/s = 10^6 B/s, best of repeats)");
    if (!out->json)
        printf("%-8s %-7s %3s %9s %10s %9s %10s %7s %8s %9s\n", "algo", "data", "thr", "write MB/s",
               "pages/s", "read MB/s", "pages/s", "ratio", "mem/compr", "pages");
    int rc = 0;
    for (int k = 0; k < opt->kind_count && rc == 0; k++) {
        struct bench_data data = {0};
        rc = data_generate(&data, opt->kinds[k], opt->seed, opt->size / PAGE, false);
        if (rc) {
            fprintf(stderr, "uzram bench: no memory for %" PRIu64 " bytes of test data\n",
                    opt->size);
            break;
        }
        for (int a = 0; a < opt->algorithm_count && rc == 0; a++) {
            for (int t = 0; t < opt->thread_count && rc == 0; t++) {
                struct measure_request req = {
                    .algorithm = opt->algorithms[a],
                    .dedup = false,
                    .threads = opt->threads[t],
                    .data = &data,
                    .budget = opt->budget,
                    .repeat = opt->repeat,
                };
                struct measure_result res;
                rc = measure(&req, &res);
                if (rc)
                    break;
                double ratio = ratio_of(res.stats.orig_data_size, res.stats.compr_data_size);
                double overhead = ratio_of(res.stats.mem_used_total, res.stats.compr_data_size);
                if (out->json) {
                    item_begin(out);
                    printf("\"algorithm\": ");
                    util_json_string(stdout, req.algorithm);
                    printf(", \"kind\": ");
                    util_json_string(stdout, data.name);
                    printf(", \"threads\": %u, \"pages\": %" PRIu64
                           ", \"write_MBps\": %.1f, \"write_pages_per_s\": %.0f"
                           ", \"read_MBps\": %.1f, \"read_pages_per_s\": %.0f, \"ratio\": ",
                           req.threads, res.pages, res.write_mbps, res.write_pps, res.read_mbps,
                           res.read_pps);
                    json_ratio(ratio);
                    printf(", \"pool_overhead\": ");
                    json_ratio(overhead);
                    printf(", \"orig_data_size\": %" PRIu64 ", \"compr_data_size\": %" PRIu64
                           ", \"mem_used_total\": %" PRIu64 ", \"same_pages\": %" PRIu64
                           ", \"huge_pages\": %" PRIu64 "}",
                           res.stats.orig_data_size, res.stats.compr_data_size,
                           res.stats.mem_used_total, res.stats.same_pages, res.stats.huge_pages);
                } else {
                    char ratio_text[16], overhead_text[16];
                    format_ratio(ratio_text, sizeof ratio_text, ratio);
                    format_ratio(overhead_text, sizeof overhead_text, overhead);
                    printf("%-8s %-7s %3u %10.1f %10.0f %9.1f %10.0f %7s %9s %9" PRIu64 "\n",
                           req.algorithm, data.name, req.threads, res.write_mbps, res.write_pps,
                           res.read_mbps, res.read_pps, ratio_text, overhead_text, res.pages);
                }
                fflush(stdout);
            }
        }
        data_free(&data);
    }
    section_end(out);
    if (!out->json)
        printf("ratio = orig_data_size/compr_data_size; mem/compr = mem_used_total/compr_data_size"
               " (pool overhead; - when nothing was compressed)\n");
    return rc;
}

/* ------------------------------------------------------------------------
 * Section 1b: the codecs alone, so the engine's own cost can be read off as
 * the gap between these and the write/read rows above.
 * ---------------------------------------------------------------------- */

static int run_codec(const struct bench_options *opt, struct output *out)
{
    enum { CODEC_PAGES = 4096 }; /* 16 MiB: bigger than the caches, small to make */
    const size_t capacity = 2 * PAGE;
    struct bench_data data = {0};
    unsigned char *compressed = malloc((size_t)CODEC_PAGES * capacity);
    int *lengths = calloc(CODEC_PAGES, sizeof *lengths);
    unsigned char *page = aligned_alloc(64, PAGE);
    int rc = compressed && lengths && page ? 0 : -ENOMEM;
    if (rc == 0)
        rc = data_generate(&data, DATAGEN_HALF, opt->seed, CODEC_PAGES, false);
    if (rc) {
        fprintf(stderr, "uzram bench: out of memory for the codec test\n");
        goto out;
    }
    double budget = opt->budget < 0.1 ? opt->budget : 0.1;
    section_begin(out, "codec",
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
                uint64_t pages = 0, start = now_ns(), end;
                uint64_t limit = start + (uint64_t)(budget * 1e9);
                do {
                    size_t i = pages % CODEC_PAGES;
                    if (phase == 0) {
                        int length = uzram_codec_compress(codec, page_at(&data, i),
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
                    end = (pages & 15) == 0 ? now_ns() : 0;
                    /* the decompress pass needs every page compressed once */
                } while (end < limit || (phase == 0 && pages < CODEC_PAGES));
                if (rc)
                    break;
                end = now_ns();
                double rate = (double)pages * PAGE / ((double)(end - start) / 1e9) / MEGA;
                if (rate > best[phase])
                    best[phase] = rate;
            }
        }
        for (size_t i = 0; i < CODEC_PAGES; i++)
            total_length += (uint64_t)lengths[i];
        uzram_codec_close(codec);
        if (rc)
            break;
        double ratio = ratio_of((uint64_t)CODEC_PAGES * PAGE, total_length);
        if (out->json) {
            item_begin(out);
            printf("\"algorithm\": ");
            util_json_string(stdout, opt->algorithms[a]);
            printf(", \"compress_MBps\": %.1f, \"decompress_MBps\": %.1f, \"ratio\": %.4f}",
                   best[0], best[1], ratio);
        } else {
            printf("%-8s %12.1f %14.1f %7.3f\n", opt->algorithms[a], best[0], best[1], ratio);
        }
        fflush(stdout);
    }
    section_end(out);
out:
    data_free(&data);
    free(page);
    free(lengths);
    free(compressed);
    return rc;
}

/* ------------------------------------------------------------------------
 * Section 2: the same-filled check alone
 * ---------------------------------------------------------------------- */

/* Calls per second of uzram_page_same_filled on one page, best of repeats.
 * The function lives in the library, so the compiler cannot drop the calls;
 * the sink keeps the results alive anyway. */
static volatile uint64_t same_check_sink;

static double same_check_rate(const void *page, double budget, unsigned repeat)
{
    double best = 0;
    for (unsigned rep = 0; rep < repeat; rep++) {
        uint64_t calls = 0, found = 0, word = 0;
        uint64_t start = now_ns(), end;
        uint64_t limit = start + (uint64_t)(budget * 1e9);
        do {
            for (int i = 0; i < 4096; i++)
                found += uzram_page_same_filled(page, &word);
            calls += 4096;
            end = now_ns();
        } while (end < limit);
        same_check_sink = found + word;
        double rate = (double)calls / ((double)(end - start) / 1e9);
        if (rate > best)
            best = rate;
    }
    return best;
}

static int run_same_check(const struct bench_options *opt, struct output *out)
{
    uint64_t *page = aligned_alloc(64, PAGE);
    if (!page)
        return -ENOMEM;
    const size_t words = PAGE / 8;
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
    section_begin(
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
        double gbps = rate * PAGE / 1e9;
        double ns = 1e9 / rate;
        if (out->json) {
            item_begin(out);
            printf("\"page\": ");
            util_json_string(stdout, cases[c].name);
            printf(", \"GBps\": %.2f, \"ns_per_call\": %.2f}", gbps, ns);
        } else {
            printf("%-32s %10.2f %10.2f\n", cases[c].name, gbps, ns);
        }
    }
    section_end(out);
    if (!out->json && rc == 0)
        printf("target: full page >= 20 GB/s\n");
    free(page);
    return rc;
}

/* ------------------------------------------------------------------------
 * Section 3: dedup off and on, side by side
 * ---------------------------------------------------------------------- */

struct dedup_cell {
    bool valid;
    struct measure_result result;
};

static void print_target(struct output *out, const char *name, const char *text, double value,
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

static int run_dedup(const struct bench_options *opt, struct output *out)
{
    /* [workload][thread index][dedup off/on] */
    static struct dedup_cell cells[2][MAX_LIST][2];
    memset(cells, 0, sizeof cells);
    const char *const workloads[2] = {"unique", "identical"};
    const char *algorithm = opt->algorithms[0];
    int rc = 0;

    section_begin(out, "dedup",
                  "dedup off vs on: half-compressible pages, all unique / all identical");
    if (!out->json)
        printf("algorithm %s; identical = every page written from one static buffer\n"
               "%-10s %3s %12s %12s %7s %12s %12s %7s\n",
               algorithm, "workload", "thr", "off write", "on write", "on/off", "off read",
               "on read", "on/off");
    for (int w = 0; w < 2 && rc == 0; w++) {
        struct bench_data data = {0};
        rc = data_generate(&data, DATAGEN_HALF, opt->seed, opt->size / PAGE, w == 1);
        if (rc) {
            fprintf(stderr, "uzram bench: no memory for %" PRIu64 " bytes of test data\n",
                    opt->size);
            break;
        }
        for (int t = 0; t < opt->thread_count && rc == 0; t++) {
            for (int d = 0; d < 2 && rc == 0; d++) {
                struct measure_request req = {
                    .algorithm = algorithm,
                    .dedup = d == 1,
                    .threads = opt->threads[t],
                    .data = &data,
                    .budget = opt->budget,
                    .repeat = opt->repeat,
                };
                rc = measure(&req, &cells[w][t][d].result);
                cells[w][t][d].valid = rc == 0;
            }
            if (rc)
                break;
            const struct measure_result *off = &cells[w][t][0].result;
            const struct measure_result *on = &cells[w][t][1].result;
            if (out->json) {
                for (int d = 0; d < 2; d++) {
                    const struct measure_result *r = &cells[w][t][d].result;
                    item_begin(out);
                    printf(
                        "\"workload\": \"%s\", \"threads\": %u, \"dedup\": %s, \"pages\": %" PRIu64
                        ", \"write_MBps\": %.1f, \"write_pages_per_s\": %.0f"
                        ", \"read_MBps\": %.1f, \"read_pages_per_s\": %.0f"
                        ", \"compr_data_size\": %" PRIu64 ", \"mem_used_total\": %" PRIu64
                        ", \"dup_data_size\": %" PRIu64 ", \"meta_data_size\": %" PRIu64 "}",
                        workloads[w], opt->threads[t], d ? "true" : "false", r->pages,
                        r->write_mbps, r->write_pps, r->read_mbps, r->read_pps,
                        r->stats.compr_data_size, r->stats.mem_used_total, r->stats.dup_data_size,
                        r->stats.meta_data_size);
                }
            } else {
                printf(
                    "%-10s %3u %12.1f %12.1f %7.3f %12.1f %12.1f %7.3f\n", workloads[w],
                    opt->threads[t], off->write_mbps, on->write_mbps,
                    ratio_of((uint64_t)(on->write_mbps * 1000), (uint64_t)(off->write_mbps * 1000)),
                    off->read_mbps, on->read_mbps,
                    ratio_of((uint64_t)(on->read_mbps * 1000), (uint64_t)(off->read_mbps * 1000)));
            }
            fflush(stdout);
        }
        data_free(&data);
    }
    section_end(out);
    if (rc)
        return rc;

    /* The targets of issue 3, from the table above. */
    int one = -1, two = -1;
    for (int t = 0; t < opt->thread_count; t++) {
        if (opt->threads[t] == 1)
            one = t;
        if (opt->threads[t] == 2)
            two = t;
    }
    if (out->json)
        printf(",\n  \"dedup_checks\": [");
    else
        printf("\n");
    bool first = true;
    for (int t = 0; t < opt->thread_count; t++) {
        char name[64], text[96];
        snprintf(name, sizeof name, "unique_write_on_off_%ut", opt->threads[t]);
        snprintf(text, sizeof text, "unique pages, write on/off, %u thread(s)", opt->threads[t]);
        print_target(out, name, text,
                     cells[0][t][1].result.write_mbps / cells[0][t][0].result.write_mbps, 0.9, true,
                     &first);
    }
    if (one >= 0)
        print_target(out, "identical_write_on_off_1t", "identical pages, write on/off, 1 thread",
                     cells[1][one][1].result.write_mbps / cells[1][one][0].result.write_mbps, 1.0,
                     true, &first);
    if (one >= 0 && two >= 0) {
        print_target(out, "identical_dedup_on_write_2t_1t",
                     "identical pages, dedup on, write 2t/1t",
                     cells[1][two][1].result.write_mbps / cells[1][one][1].result.write_mbps, 1.5,
                     true, &first);
        double off_scaling =
            cells[1][two][0].result.write_mbps / cells[1][one][0].result.write_mbps;
        if (out->json)
            printf(",\n    {\"check\": \"identical_dedup_off_write_2t_1t\", \"value\": %.4f}",
                   off_scaling);
        else
            printf("%-44s %8.3f  (for reference)\n", "identical pages, dedup off, write 2t/1t",
                   off_scaling);
    }
    /* Metadata per unique object needs a full device: the index may grow in
     * steps, so a run cut short by the time budget would flatter or wrong it.
     * One untimed store of every unique page, with dedup on. */
    struct bench_data data = {0};
    rc = data_generate(&data, DATAGEN_HALF, opt->seed, opt->size / PAGE, false);
    if (rc) {
        fprintf(stderr, "uzram bench: no memory for %" PRIu64 " bytes of test data\n", opt->size);
        return rc;
    }
    struct measure_request req = {
        .algorithm = algorithm,
        .dedup = true,
        .threads = 1,
        .data = &data,
        .budget = 0,
        .repeat = 1,
    };
    struct measure_result full;
    rc = measure(&req, &full);
    data_free(&data);
    if (rc)
        return rc;
    const struct uzram_stats *st = &full.stats;
    uint64_t objects = st->pages_stored - st->same_pages;
    if (objects) {
        double per_object = (double)st->meta_data_size / (double)objects;
        print_target(out, "dedup_meta_bytes_per_object", "dedup metadata, bytes per unique object",
                     per_object, 24, false, &first);
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
    if (out->json)
        printf("\n  ]");
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------------------
 * Section 4: real data from --file or --tree
 * ---------------------------------------------------------------------- */

static int run_file(const struct bench_options *opt, struct output *out)
{
    struct bench_data data = {0};
    int rc = data_load(&data, opt);
    if (rc)
        return rc;
    section_begin(out, "file", "pages of real data (whole data set, no time limit)");
    if (!out->json)
        printf("%-8s %5s %3s %10s %9s %7s %12s %12s %12s %9s %12s %10s\n", "algo", "dedup", "thr",
               "write MB/s", "read MB/s", "ratio", "orig", "compr", "mem_used", "mem/compr",
               "dup_data", "meta");
    for (int a = 0; a < opt->algorithm_count && rc == 0; a++) {
        for (int d = 0; d < (opt->run_dedup ? 2 : 1) && rc == 0; d++) {
            for (int t = 0; t < opt->thread_count && rc == 0; t++) {
                struct measure_request req = {
                    .algorithm = opt->algorithms[a],
                    .dedup = d == 1,
                    .threads = opt->threads[t],
                    .data = &data,
                    .budget = 0,
                    .repeat = opt->repeat,
                };
                struct measure_result res;
                rc = measure(&req, &res);
                if (rc)
                    break;
                const struct uzram_stats *st = &res.stats;
                double ratio = ratio_of(st->orig_data_size, st->compr_data_size);
                double overhead = ratio_of(st->mem_used_total, st->compr_data_size);
                char mm_stat[256];
                if (uzram_format_mm_stat(st, mm_stat, sizeof mm_stat) < 0)
                    mm_stat[0] = '\0';
                mm_stat[strcspn(mm_stat, "\n")] = '\0';
                if (out->json) {
                    item_begin(out);
                    printf("\"algorithm\": ");
                    util_json_string(stdout, req.algorithm);
                    printf(", \"source\": ");
                    util_json_string(stdout, data.name);
                    printf(", \"dedup\": %s, \"threads\": %u, \"pages\": %" PRIu64
                           ", \"write_MBps\": %.1f, \"write_pages_per_s\": %.0f"
                           ", \"read_MBps\": %.1f, \"read_pages_per_s\": %.0f, \"ratio\": ",
                           d ? "true" : "false", req.threads, res.pages, res.write_mbps,
                           res.write_pps, res.read_mbps, res.read_pps);
                    json_ratio(ratio);
                    printf(", \"pool_overhead\": ");
                    json_ratio(overhead);
                    printf(", \"orig_data_size\": %" PRIu64 ", \"compr_data_size\": %" PRIu64
                           ", \"mem_used_total\": %" PRIu64 ", \"same_pages\": %" PRIu64
                           ", \"huge_pages\": %" PRIu64 ", \"dup_data_size\": %" PRIu64
                           ", \"meta_data_size\": %" PRIu64 ", \"mm_stat\": ",
                           st->orig_data_size, st->compr_data_size, st->mem_used_total,
                           st->same_pages, st->huge_pages, st->dup_data_size, st->meta_data_size);
                    util_json_string(stdout, mm_stat);
                    printf("}");
                } else {
                    char ratio_text[16], overhead_text[16];
                    format_ratio(ratio_text, sizeof ratio_text, ratio);
                    format_ratio(overhead_text, sizeof overhead_text, overhead);
                    printf("%-8s %5s %3u %10.1f %9.1f %7s %12" PRIu64 " %12" PRIu64 " %12" PRIu64
                           " %9s %12" PRIu64 " %10" PRIu64 "\n",
                           req.algorithm, d ? "on" : "off", req.threads, res.write_mbps,
                           res.read_mbps, ratio_text, st->orig_data_size, st->compr_data_size,
                           st->mem_used_total, overhead_text, st->dup_data_size,
                           st->meta_data_size);
                    printf("         mm_stat: %s\n", mm_stat);
                }
                fflush(stdout);
            }
        }
    }
    section_end(out);
    if (!out->json && rc == 0)
        printf("target: mem/compr (pool overhead) <= 1.03 on real data\n");
    data_free(&data);
    return rc;
}

/* ------------------------------------------------------------------------
 * --dump-data: the generated pages on stdout, for tools outside the engine
 * (fio and kernel zram in bench/zram-compare.sh).
 * ---------------------------------------------------------------------- */

/* --dump-data loaded: the pages of --file/--tree exactly as the bench
 * stores them (each file from a page boundary), for kernel zram. */
static int dump_loaded(const struct bench_options *opt)
{
    if (isatty(STDOUT_FILENO)) {
        fprintf(stderr, "uzram bench: --dump-data writes binary data; redirect stdout to a file\n");
        return 2;
    }
    struct bench_data data = {0};
    if (data_load(&data, opt) != 0)
        return 1;
    int status = 0;
    if (fwrite(data.pages, PAGE, data.page_count, stdout) != data.page_count ||
        fflush(stdout) != 0) {
        fprintf(stderr, "uzram bench: writing data: %s\n", strerror(errno));
        status = 1;
    }
    data_free(&data);
    return status;
}

static int dump_data(const struct bench_options *opt)
{
    if (strcmp(opt->dump_kind, "loaded") == 0) {
        if (!opt->file && !opt->tree_count) {
            fprintf(stderr, "uzram bench: --dump-data loaded needs --file or --tree\n");
            return 2;
        }
        return dump_loaded(opt);
    }
    int kind = datagen_kind_from_name(opt->dump_kind);
    if (kind < 0) {
        fprintf(stderr, "uzram bench: unknown data kind '%s' (zero same text half random)\n",
                opt->dump_kind);
        return 2;
    }
    if (isatty(STDOUT_FILENO)) {
        fprintf(stderr, "uzram bench: --dump-data writes binary data; redirect stdout to a file\n");
        return 2;
    }
    enum { CHUNK_PAGES = 256 };
    unsigned char *chunk = malloc(CHUNK_PAGES * PAGE);
    if (!chunk) {
        fprintf(stderr, "uzram bench: out of memory\n");
        return 1;
    }
    uint64_t pages = opt->size / PAGE;
    int status = 0;
    for (uint64_t done = 0; done < pages;) {
        uint64_t n = pages - done < CHUNK_PAGES ? pages - done : CHUNK_PAGES;
        for (uint64_t i = 0; i < n; i++)
            datagen_page(opt->seed, (enum datagen_kind)kind, done + i, chunk + i * PAGE);
        if (fwrite(chunk, PAGE, n, stdout) != n) {
            fprintf(stderr, "uzram bench: writing data: %s\n", strerror(errno));
            status = 1;
            break;
        }
        done += n;
    }
    if (status == 0 && fflush(stdout) != 0) {
        fprintf(stderr, "uzram bench: writing data: %s\n", strerror(errno));
        status = 1;
    }
    free(chunk);
    return status;
}

/* ------------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------- */

static void usage(FILE *to)
{
    fprintf(
        to,
        "usage: uzram bench [options]\n"
        "  Measures the engine in-process through its public API.\n"
        "  With no section option: throughput of every algorithm x data kind x thread\n"
        "  count, then the same-filled check alone.\n"
        "\n"
        "sections:\n"
        "  --dedup            dedup off vs on side by side (unique and identical pages);\n"
        "                     with --file/--tree: the real data with dedup off and on\n"
        "  --same-check       only the same-filled check\n"
        "  --all              throughput, same-filled check and dedup\n"
        "  --file PATH        store the pages of a file (- for stdin) and report memory\n"
        "  --tree DIR         store every regular file under DIR, each from a page boundary\n"
        "                     (may be given many times; the trees are stored one after another)\n"
        "  --dump-data KIND   write --size bytes of generated pages of KIND to stdout;\n"
        "                     KIND 'loaded' writes the pages of --file/--tree as stored\n"
        "\n"
        "options:\n"
        "  -a, --algorithms LIST   comma-separated (default lz4,lz4hc,zstd,lzo,deflate;\n"
        "                          lz4 for --dedup, --file, --tree)\n"
        "  -k, --kinds LIST        data kinds: same,half,text,random,zero (default "
        "same,half,text,random)\n"
        "  -t, --threads LIST      thread counts (default 1,2; 1 for --file/--tree)\n"
        "  -s, --size SIZE         bytes of pages per measurement (default 256M; for "
        "--file/--tree\n"
        "                          the most to load, default all)\n"
        "  -r, --repeat N          repetitions of each measurement, best is kept (default 3)\n"
        "  -b, --budget SECONDS    a timed phase stops early after this long (default 0.25)\n"
        "      --seed N            data generator seed (default 1)\n"
        "      --json              one JSON document instead of tables\n"
        "  -h, --help\n");
}

/* Split a comma-separated list in place into at most MAX_LIST items. */
static int split_list(char *text, char **items)
{
    int count = 0;
    for (char *save = NULL, *item = strtok_r(text, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        if (count == MAX_LIST)
            return -E2BIG;
        items[count++] = item;
    }
    return count ? count : -EINVAL;
}

static int parse_options(int argc, char **argv, struct bench_options *opt)
{
    enum { OPT_SEED = 256, OPT_JSON, OPT_DEDUP, OPT_SAME, OPT_ALL, OPT_DUMP, OPT_FILE, OPT_TREE };
    static const struct option longopts[] = {
        {"algorithms", required_argument, NULL, 'a'},
        {"kinds", required_argument, NULL, 'k'},
        {"threads", required_argument, NULL, 't'},
        {"size", required_argument, NULL, 's'},
        {"repeat", required_argument, NULL, 'r'},
        {"budget", required_argument, NULL, 'b'},
        {"seed", required_argument, NULL, OPT_SEED},
        {"json", no_argument, NULL, OPT_JSON},
        {"dedup", no_argument, NULL, OPT_DEDUP},
        {"same-check", no_argument, NULL, OPT_SAME},
        {"all", no_argument, NULL, OPT_ALL},
        {"dump-data", required_argument, NULL, OPT_DUMP},
        {"file", required_argument, NULL, OPT_FILE},
        {"tree", required_argument, NULL, OPT_TREE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static char lists[3][1024]; /* strtok_r needs writable copies */
    char *items[MAX_LIST];
    bool section_given = false;
    int n;
    char *end;

    opt->repeat = 3;
    opt->budget = 0.25;
    opt->seed = 1;
    opt->size = 256ull << 20;
    optind = 0; /* full re-initialisation, in case main() used getopt too */
    for (;;) {
        int c = getopt_long(argc, argv, "a:k:t:s:r:b:h", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 'a':
            snprintf(lists[0], sizeof lists[0], "%s", optarg);
            n = split_list(lists[0], items);
            if (n < 0) {
                fprintf(stderr, "uzram bench: bad algorithm list '%s'\n", optarg);
                return -EINVAL;
            }
            for (int i = 0; i < n; i++) {
                int min, max, dflt;
                if (uzram_algorithm_levels(items[i], &min, &max, &dflt) != 0) {
                    char have[256];
                    if (uzram_algorithm_list(NULL, have, sizeof have) < 0)
                        have[0] = '\0';
                    have[strcspn(have, "\n")] = '\0';
                    fprintf(stderr, "uzram bench: unknown algorithm '%s' (this build has: %s)\n",
                            items[i], have);
                    return -EINVAL;
                }
                opt->algorithms[i] = items[i];
            }
            opt->algorithm_count = n;
            opt->algorithms_given = true;
            break;
        case 'k':
            snprintf(lists[1], sizeof lists[1], "%s", optarg);
            n = split_list(lists[1], items);
            if (n < 0) {
                fprintf(stderr, "uzram bench: bad data kind list '%s'\n", optarg);
                return -EINVAL;
            }
            for (int i = 0; i < n; i++) {
                opt->kinds[i] = datagen_kind_from_name(items[i]);
                if (opt->kinds[i] < 0) {
                    fprintf(stderr,
                            "uzram bench: unknown data kind '%s' (zero same text half random)\n",
                            items[i]);
                    return -EINVAL;
                }
            }
            opt->kind_count = n;
            break;
        case 't':
            snprintf(lists[2], sizeof lists[2], "%s", optarg);
            n = split_list(lists[2], items);
            if (n < 0) {
                fprintf(stderr, "uzram bench: bad thread list '%s'\n", optarg);
                return -EINVAL;
            }
            for (int i = 0; i < n; i++) {
                unsigned long value = strtoul(items[i], &end, 10);
                if (*end || value < 1 || value > MAX_THREADS) {
                    fprintf(stderr, "uzram bench: thread count '%s' is not 1..%d\n", items[i],
                            MAX_THREADS);
                    return -EINVAL;
                }
                opt->threads[i] = (unsigned)value;
            }
            opt->thread_count = n;
            opt->threads_given = true;
            break;
        case 's':
            if (uzram_parse_size(optarg, &opt->size) != 0 || opt->size < PAGE) {
                fprintf(stderr, "uzram bench: bad size '%s' (at least 4K, e.g. 256M)\n", optarg);
                return -EINVAL;
            }
            opt->size -= opt->size % PAGE;
            opt->size_given = true;
            break;
        case 'r': {
            unsigned long value = strtoul(optarg, &end, 10);
            if (*end || value < 1 || value > 1000) {
                fprintf(stderr, "uzram bench: repeat count '%s' is not 1..1000\n", optarg);
                return -EINVAL;
            }
            opt->repeat = (unsigned)value;
            break;
        }
        case 'b':
            opt->budget = strtod(optarg, &end);
            if (*end || !(opt->budget > 0) || opt->budget > 3600) {
                fprintf(stderr, "uzram bench: budget '%s' is not a number of seconds\n", optarg);
                return -EINVAL;
            }
            break;
        case OPT_SEED:
            opt->seed = strtoull(optarg, &end, 0);
            if (*end || !*optarg) {
                fprintf(stderr, "uzram bench: bad seed '%s'\n", optarg);
                return -EINVAL;
            }
            break;
        case OPT_JSON:
            opt->json = true;
            break;
        case OPT_DEDUP:
            opt->run_dedup = section_given = true;
            break;
        case OPT_SAME:
            opt->run_same_check = section_given = true;
            break;
        case OPT_ALL:
            opt->run_sweep = opt->run_same_check = opt->run_dedup = section_given = true;
            break;
        case OPT_DUMP:
            opt->dump_kind = optarg;
            break;
        case OPT_FILE:
            opt->file = optarg;
            break;
        case OPT_TREE:
            opt->trees[opt->tree_count++] = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "uzram bench: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -EINVAL;
    }
    if (opt->file && opt->tree_count) {
        fprintf(stderr, "uzram bench: --file and --tree exclude each other\n");
        return -EINVAL;
    }
    bool real_data = opt->file || opt->tree_count;
    if (!section_given && !real_data) {
        opt->run_sweep = true;
        opt->run_same_check = true;
    }
    if (!opt->algorithms_given) {
        bool one = real_data || (opt->run_dedup && !opt->run_sweep);
        opt->algorithm_count =
            one ? 1 : (int)(sizeof default_algorithms / sizeof default_algorithms[0]);
        for (int i = 0; i < opt->algorithm_count; i++)
            opt->algorithms[i] = default_algorithms[i];
    }
    if (opt->kind_count == 0) {
        opt->kind_count = (int)(sizeof default_kinds / sizeof default_kinds[0]);
        memcpy(opt->kinds, default_kinds, sizeof default_kinds);
    }
    if (!opt->threads_given) {
        opt->thread_count = real_data ? 1 : 2;
        opt->threads[0] = 1;
        opt->threads[1] = 2;
    }
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    /* getopt wants argv[0] to be a program name. Accept both conventions a
     * dispatcher may use: argv[0] == "bench", or argv[0] already the first
     * option. */
    char *args[argc + 2];
    int count = 0;
    if (argc == 0 || argv[0][0] == '-')
        args[count++] = (char *)"bench";
    for (int i = 0; i < argc; i++)
        args[count++] = argv[i];
    args[count] = NULL;

    struct bench_options opt;
    memset(&opt, 0, sizeof opt);
    char *trees[argc + 1]; /* never more --tree options than arguments */
    opt.trees = trees;
    int rc = parse_options(count, args, &opt);
    if (rc == 1)
        return 0; /* --help */
    if (rc)
        return 2;
    if (opt.dump_kind)
        return dump_data(&opt);

    /* Timing on a busy machine is not worth much: say so next to the numbers. */
    double load[1] = {0};
    if (getloadavg(load, 1) != 1)
        load[0] = -1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    struct output out = {.json = opt.json};
    if (out.json) {
        printf("{\n  \"version\": ");
        util_json_string(stdout, uzram_version());
        printf(", \"seed\": %" PRIu64 ", \"size\": %" PRIu64
               ", \"repeat\": %u, \"budget_s\": %g, \"units\": \"MB/s = 10^6 bytes/s\""
               ", \"cpus\": %ld, \"loadavg_1min\": %.2f",
               opt.seed, opt.size, opt.repeat, opt.budget, cores, load[0]);
        out.sections = 1;
    } else {
        if (opt.file || opt.tree_count)
            printf("uzram bench %s: real data, best of %u\n", uzram_version(), opt.repeat);
        else
            printf("uzram bench %s: %" PRIu64 " MiB of 4 KiB pages per measurement, best of %u, "
                   "phases capped at %gs, seed %" PRIu64 "\n",
                   uzram_version(), opt.size >> 20, opt.repeat, opt.budget, opt.seed);
        if (load[0] > 0.5)
            printf("note: load average %.2f on %ld CPUs: other work is running, numbers will be"
                   " low and noisy\n",
                   load[0], cores);
    }
    fflush(stdout);

    if (opt.file || opt.tree_count)
        rc = run_file(&opt, &out);
    if (rc == 0 && opt.run_sweep)
        rc = run_sweep(&opt, &out);
    if (rc == 0 && opt.run_sweep)
        rc = run_codec(&opt, &out);
    if (rc == 0 && opt.run_same_check)
        rc = run_same_check(&opt, &out);
    if (rc == 0 && opt.run_dedup && !opt.file && !opt.tree_count)
        rc = run_dedup(&opt, &out);

    if (out.json)
        printf("\n}\n");
    fflush(stdout);
    if (rc) {
        if (rc == -ENOMEM)
            fprintf(stderr, "uzram bench: out of memory\n");
        return 1;
    }
    return 0;
}
