/* measure.c - one measurement of `uzram bench`: a fresh device, a timed write phase on
 * N threads, a timed read phase, then a sample read back and compared outside the clock. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "common/clock.h"

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
    w->start_ns = util_now_ns();
    uint64_t deadline = w->budget_ns ? w->start_ns + w->budget_ns : UINT64_MAX;
    uint64_t i;
    for (i = 0; i < w->count; i++) {
        /* reading the clock every 16 pages costs well under 1% of the work */
        if ((i & 15) == 15 && util_now_ns() >= deadline)
            break; /* page i is not done */
        uint64_t page = w->first + i;
        int rc = w->reading ? uzram_read(w->dev, page * BENCH_PAGE, w->read_page, BENCH_PAGE)
                            : uzram_write(w->dev, page * BENCH_PAGE, bench_page_at(w->data, page),
                                          BENCH_PAGE);
        if (rc) {
            w->error = rc;
            w->error_page = page;
            break;
        }
    }
    w->end_ns = util_now_ns();
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
    pthread_t ids[BENCH_MAX_THREADS];
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

/* Reads back a sample of the pages written, outside the clock: a bench of
 * an engine that loses data would be worse than no bench. */
static int verify_sample(struct uzram *dev, const struct bench_data *data,
                         const struct worker *workers, unsigned threads, unsigned char *page)
{
    for (unsigned t = 0; t < threads; t++) {
        for (uint64_t i = 0; i < workers[t].done; i += 61) {
            uint64_t index = workers[t].first + i;
            int rc = uzram_read(dev, index * BENCH_PAGE, page, BENCH_PAGE);
            if (rc) {
                fprintf(stderr, "uzram bench: verify read of page %" PRIu64 " failed: %s\n", index,
                        strerror(-rc));
                return rc;
            }
            if (memcmp(page, bench_page_at(data, index), BENCH_PAGE) != 0) {
                fprintf(stderr, "uzram bench: page %" PRIu64 " reads back different data\n", index);
                return -EIO;
            }
        }
    }
    return 0;
}

int bench_measure(const struct bench_measure_request *req, struct bench_measure_result *out)
{
    struct worker workers[BENCH_MAX_THREADS];
    unsigned char *read_pages = aligned_alloc(64, (size_t)req->threads * BENCH_PAGE);
    if (!read_pages)
        return -ENOMEM;
    memset(out, 0, sizeof *out);
    int rc = 0;

    for (unsigned rep = 0; rep < req->repeat && rc == 0; rep++) {
        struct uzram_config config;
        uzram_config_init(&config);
        config.disksize = req->data->page_count * BENCH_PAGE;
        if (req->disksize > config.disksize)
            config.disksize = req->disksize;
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
            workers[t].read_page = read_pages + (size_t)t * BENCH_PAGE;
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
    out->write_mbps = out->write_pps * BENCH_PAGE / BENCH_MEGA;
    out->read_mbps = out->read_pps * BENCH_PAGE / BENCH_MEGA;
    free(read_pages);
    return rc;
}
