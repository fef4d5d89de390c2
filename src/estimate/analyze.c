/* analyze.c - page analysis of `uzram estimate`: classification, dedup index, workers.
 * One reader fills big chunks; worker threads scan, hash and compress their pages in parallel. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "estimate/estimate.h"
#include "common/progress.h"
#include "uzram.h"

/* Pages handled under one hold of the index's read lock: small enough that a
 * worker wanting to grow the index never waits long, big enough that the
 * lock costs nothing per page. */
#define BATCH_PAGES 64
#define INITIAL_CAPACITY (1u << 12) /* small: growing is cheap and gets tested */

/*
 * The dedup index: open addressing over parallel arrays, 64-bit content
 * hashes as keys (0 means empty), a reference count and, per algorithm, the
 * stored length of the content. 12 + 2 * algorithms bytes per slot, kept at
 * most 70% full. Workers insert concurrently with compare-and-swap under the
 * read side of `lock`; only growing takes the write side.
 *
 * Exactness: pages are not kept, so a hash match cannot be confirmed by
 * comparing content (standard input cannot be read twice). A match of the
 * 64-bit XXH3 hash is taken as a duplicate; two different pages collide with
 * probability about 2^-64 per pair (n^2 / 2^65 for n distinct pages: 1 in
 * 500 for a whole terabyte of distinct pages).
 */
struct dedup_index {
    pthread_rwlock_t lock;
    _Atomic uint64_t *keys;
    _Atomic uint32_t *counts;
    _Atomic uint16_t *lengths; /* [capacity * algorithm_count]; 0 until known */
    uint64_t capacity;         /* power of two */
    _Atomic uint64_t used;
    unsigned algorithm_count;
};

struct chunk {
    unsigned char *data;
    size_t length;
    struct chunk *next;
};

/* The window of --group pages being filled: the pages that could join a bundle and what
 * each takes recompressed alone. */
struct bundle_window {
    const unsigned char *pages[16];
    unsigned cold[16];
    unsigned count;
    unsigned char *span;  /* the members laid end to end */
    unsigned char *frame; /* their frame */
};

struct worker {
    pthread_t thread;
    struct estimate_analyzer *analyzer;
    struct uzram_codec *codecs[ESTIMATE_MAX_ALGORITHMS];
    unsigned char *scratch;
    struct bundle_window window;
    struct estimate_counts counts; /* of the current source, merged at its end */
    bool started;
};

struct estimate_analyzer {
    struct estimate_options options;
    struct dedup_index index;
    size_t chunk_size;
    unsigned chunk_count;
    struct chunk *chunks;
    pthread_mutex_t lock;
    pthread_cond_t work_ready; /* a chunk was queued, or stopping */
    pthread_cond_t chunk_done; /* a chunk came back */
    struct chunk *queue_head, *queue_tail, *free_list;
    unsigned in_flight;
    bool stopping;
    int error;       /* first compression error of a worker */
    bool dicts_done; /* dictionaries trained (or given up) on the first chunk */
    _Atomic uint64_t bytes_done;
    struct worker *workers;
};

/* ------------------------------------------------------------------------
 * Same-filled check statistics
 * ---------------------------------------------------------------------- */

bool estimate_scan_page(const uint64_t *page, size_t words, uint64_t *word, uint64_t *forward,
                        uint64_t *backward, uint64_t *precheck)
{
    uint64_t first = page[0];
    size_t i = 1;
    while (i < words && page[i] == first)
        i++;
    bool same = i == words;
    /* Forward (zram before the last-word patch): compare words 1..n-1 with word 0,
     * stopping at the first difference. */
    *forward = same ? words - 1 : i;
    /* Backward: the same loop from word n-1 down to 1. */
    if (same) {
        *backward = words - 1;
    } else {
        size_t j = words - 1;
        while (page[j] == first)
            j--;
        *backward = words - j;
    }
    /* The last-word pre-check patch: compare the last word first, then words 1..n-2 forward. */
    if (page[words - 1] != first)
        *precheck = 1;
    else
        *precheck = same ? words - 1 : 1 + i;
    *word = first;
    return same;
}

/* ------------------------------------------------------------------------
 * Counters
 * ---------------------------------------------------------------------- */

void estimate_counts_add(struct estimate_counts *to, const struct estimate_counts *from,
                         unsigned algorithm_count)
{
    to->bytes += from->bytes;
    to->pages += from->pages;
    to->partial_bytes += from->partial_bytes;
    to->unreadable_bytes += from->unreadable_bytes;
    to->unpopulated_pages += from->unpopulated_pages;
    to->zero_pages += from->zero_pages;
    to->same_pages += from->same_pages;
    to->duplicate_pages += from->duplicate_pages;
    to->unique_pages += from->unique_pages;
    to->scan_forward += from->scan_forward;
    to->scan_backward += from->scan_backward;
    to->scan_precheck += from->scan_precheck;
    to->bundles += from->bundles;
    to->bundled_pages += from->bundled_pages;
    to->bundle_cost += from->bundle_cost;
    to->bundle_single_cost += from->bundle_single_cost;
    if (!to->lengths || !from->lengths)
        return;
    for (unsigned a = 0; a < algorithm_count; a++)
        for (unsigned length = 0; length <= ESTIMATE_RAW; length++) {
            to->lengths[a].unique[length] += from->lengths[a].unique[length];
            to->lengths[a].all[length] += from->lengths[a].all[length];
        }
}

static void counts_clear(struct estimate_counts *counts, unsigned algorithm_count)
{
    struct estimate_lengths *lengths = counts->lengths;
    memset(counts, 0, sizeof *counts);
    if (lengths)
        memset(lengths, 0, algorithm_count * sizeof *lengths);
    counts->lengths = lengths;
}

/* ------------------------------------------------------------------------
 * Dedup index
 * ---------------------------------------------------------------------- */

static int index_allocate(struct dedup_index *index, uint64_t capacity)
{
    index->keys = calloc(capacity, sizeof *index->keys);
    index->counts = calloc(capacity, sizeof *index->counts);
    index->lengths = index->algorithm_count
                         ? calloc(capacity * index->algorithm_count, sizeof *index->lengths)
                         : NULL;
    if (!index->keys || !index->counts || (index->algorithm_count && !index->lengths)) {
        free(index->keys);
        free(index->counts);
        free(index->lengths);
        return -ENOMEM;
    }
    index->capacity = capacity;
    return 0;
}

/* Find or claim the slot of `hash`; *is_new tells whether this call claimed it. */
static uint64_t index_insert(struct dedup_index *index, uint64_t hash, bool *is_new)
{
    uint64_t mask = index->capacity - 1;
    for (uint64_t slot = hash & mask;; slot = (slot + 1) & mask) {
        uint64_t key = atomic_load_explicit(&index->keys[slot], memory_order_acquire);
        if (key == 0) {
            if (atomic_compare_exchange_strong_explicit(
                    &index->keys[slot], &key, hash, memory_order_acq_rel, memory_order_acquire)) {
                atomic_fetch_add_explicit(&index->counts[slot], 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&index->used, 1, memory_order_relaxed);
                *is_new = true;
                return slot;
            }
            /* lost the race: `key` now holds the winner's hash */
        }
        if (key == hash) {
            atomic_fetch_add_explicit(&index->counts[slot], 1, memory_order_relaxed);
            *is_new = false;
            return slot;
        }
    }
}

/* Double the table (write lock held: no worker is inside a batch). */
static int index_grow(struct dedup_index *index)
{
    struct dedup_index old = *index;
    uint64_t capacity = old.capacity * 2;
    if (index_allocate(index, capacity) < 0) {
        index->keys = old.keys;
        index->counts = old.counts;
        index->lengths = old.lengths;
        return -ENOMEM;
    }
    unsigned algorithms = index->algorithm_count;
    for (uint64_t slot = 0; slot < old.capacity; slot++) {
        uint64_t key = atomic_load_explicit(&old.keys[slot], memory_order_relaxed);
        if (!key)
            continue;
        uint64_t target = key & (capacity - 1);
        while (atomic_load_explicit(&index->keys[target], memory_order_relaxed))
            target = (target + 1) & (capacity - 1);
        atomic_store_explicit(&index->keys[target], key, memory_order_relaxed);
        atomic_store_explicit(&index->counts[target],
                              atomic_load_explicit(&old.counts[slot], memory_order_relaxed),
                              memory_order_relaxed);
        for (unsigned a = 0; a < algorithms; a++)
            atomic_store_explicit(
                &index->lengths[target * algorithms + a],
                atomic_load_explicit(&old.lengths[slot * algorithms + a], memory_order_relaxed),
                memory_order_relaxed);
    }
    free(old.keys);
    free(old.counts);
    free(old.lengths);
    return 0;
}

/* Make room for one batch of every worker before taking the read lock, so
 * the table can never fill up while batches run. */
static int index_reserve(struct estimate_analyzer *analyzer)
{
    struct dedup_index *index = &analyzer->index;
    uint64_t reserve = (uint64_t)analyzer->options.jobs * BATCH_PAGES;
    for (;;) {
        pthread_rwlock_rdlock(&index->lock);
        uint64_t used = atomic_load_explicit(&index->used, memory_order_relaxed);
        bool fits = (used + reserve) * 10 <= index->capacity * 7;
        if (fits)
            return 0; /* the read lock stays held for the batch */
        pthread_rwlock_unlock(&index->lock);
        pthread_rwlock_wrlock(&index->lock);
        int rc = 0;
        used = atomic_load_explicit(&index->used, memory_order_relaxed);
        if ((used + reserve) * 10 > index->capacity * 7)
            rc = index_grow(index);
        pthread_rwlock_unlock(&index->lock);
        if (rc < 0)
            return rc;
    }
}

/* ------------------------------------------------------------------------
 * Workers
 * ---------------------------------------------------------------------- */

static void set_error(struct estimate_analyzer *analyzer, int rc)
{
    pthread_mutex_lock(&analyzer->lock);
    if (!analyzer->error)
        analyzer->error = rc;
    pthread_mutex_unlock(&analyzer->lock);
}

/* Returns, for --group, what the page takes in what recompression keeps if it could join a
 * bundle (the first copy of its content, not same-filled, not raw); else 0. */
static unsigned analyze_page(struct worker *worker, const unsigned char *page)
{
    struct estimate_analyzer *analyzer = worker->analyzer;
    struct dedup_index *index = &analyzer->index;
    struct estimate_counts *counts = &worker->counts;
    size_t page_size = analyzer->options.page_size;
    unsigned algorithms = index->algorithm_count;
    uint64_t word, forward, backward, precheck;

    bool same = estimate_scan_page((const uint64_t *)page, page_size / ESTIMATE_WORD, &word,
                                   &forward, &backward, &precheck);
    if (page_size == UZRAM_PAGE_SIZE) {
        /* the engine decides what the device would do; the scan above only counts */
        same = uzram_page_same_filled(page, &word);
    }
    counts->pages++;
    counts->scan_forward += forward;
    counts->scan_backward += backward;
    counts->scan_precheck += precheck;
    if (same) {
        if (word == 0)
            counts->zero_pages++;
        else
            counts->same_pages++;
        return 0;
    }

    uint64_t hash = XXH3_64bits(page, page_size);
    if (hash == 0)
        hash = 1; /* 0 marks an empty slot */
    bool is_new;
    uint64_t slot = index_insert(index, hash, &is_new);
    if (is_new)
        counts->unique_pages++;
    else
        counts->duplicate_pages++;

    const struct estimate_algorithm *specs = analyzer->options.specs;
    for (unsigned a = 0; a < algorithms; a++) {
        _Atomic uint16_t *stored = &index->lengths[slot * algorithms + a];
        unsigned length;
        if (is_new && specs[a].from[0] >= 0) {
            /* what recompression keeps: the secondary's form only where it
             * takes less pool memory (both were stored just above) */
            unsigned kept = atomic_load_explicit(
                &index->lengths[slot * algorithms + specs[a].from[0]], memory_order_relaxed);
            unsigned again = atomic_load_explicit(
                &index->lengths[slot * algorithms + specs[a].from[1]], memory_order_relaxed);
            length = uzram_pool_object_cost(again) < uzram_pool_object_cost(kept) ? again : kept;
            atomic_store_explicit(stored, (uint16_t)length, memory_order_release);
            counts->lengths[a].unique[length]++;
        } else if (is_new) {
            /* capacity one below the engine's huge threshold: a page that
             * does not fit is stored raw, exactly as the engine decides */
            int rc = uzram_codec_compress(worker->codecs[a], page, worker->scratch,
                                          uzram_huge_threshold() - 1);
            if (rc < 0)
                set_error(analyzer, rc);
            length = rc > 0 ? (unsigned)rc : ESTIMATE_RAW;
            atomic_store_explicit(stored, (uint16_t)length, memory_order_release);
            counts->lengths[a].unique[length]++;
        } else {
            /* the first copy may still be compressing in another worker,
             * which holds the read lock too and never waits: a short spin */
            while ((length = atomic_load_explicit(stored, memory_order_acquire)) == 0)
                sched_yield();
        }
        counts->lengths[a].all[length]++;
    }
    const struct estimate_recompression *r = &analyzer->options.recompression;
    if (!r->group || !is_new ||
        atomic_load_explicit(&index->lengths[slot * algorithms + r->primary],
                             memory_order_relaxed) == ESTIMATE_RAW)
        return 0;
    return atomic_load_explicit(&index->lengths[slot * algorithms + r->recompressed_dict],
                                memory_order_relaxed);
}

/* Pack the window's pages, as recompress_bundle.c does: at least two, compressed as one
 * frame with the dictionary codec, kept where the bundle takes less pool memory than the
 * pages alone. */
static void bundle_flush(struct worker *worker)
{
    struct bundle_window *window = &worker->window;
    unsigned count = window->count;
    window->count = 0;
    if (count < 2)
        return;
    const struct estimate_recompression *r = &worker->analyzer->options.recompression;
    double single = 0;
    for (unsigned k = 0; k < count; k++) {
        memcpy(window->span + (size_t)k * UZRAM_PAGE_SIZE, window->pages[k], UZRAM_PAGE_SIZE);
        single += uzram_pool_object_cost(window->cold[k]);
    }
    int length = uzram_codec_compress_span(worker->codecs[r->secondary_dict], window->span, count,
                                           window->frame, (size_t)count * UZRAM_PAGE_SIZE);
    if (length < 0) {
        set_error(worker->analyzer, length);
        return;
    }
    double cost = length > 0 ? uzram_bundle_cost((size_t)length) : single;
    if (cost >= single)
        return;
    worker->counts.bundles++;
    worker->counts.bundled_pages += count;
    worker->counts.bundle_cost += cost;
    worker->counts.bundle_single_cost += single;
}

/* Page `index` of a chunk (chunks start at a multiple of every power of two up to 16 pages:
 * windows of other sizes restart at each chunk) was analysed: `cold` as analyze_page says. */
static void bundle_add(struct worker *worker, size_t index, const unsigned char *page,
                       unsigned cold)
{
    unsigned group = worker->analyzer->options.recompression.group;
    if (!group)
        return;
    if (index % group == 0)
        bundle_flush(worker);
    if (cold) {
        struct bundle_window *window = &worker->window;
        window->pages[window->count] = page;
        window->cold[window->count++] = cold;
    }
}

static int analyze_chunk(struct worker *worker, struct chunk *chunk)
{
    struct estimate_analyzer *analyzer = worker->analyzer;
    size_t page_size = analyzer->options.page_size;
    size_t pages = chunk->length / page_size;
    for (size_t first = 0; first < pages; first += BATCH_PAGES) {
        size_t last = first + BATCH_PAGES < pages ? first + BATCH_PAGES : pages;
        int rc = index_reserve(analyzer);
        if (rc < 0)
            return rc;
        for (size_t i = first; i < last; i++) {
            const unsigned char *page = chunk->data + i * page_size;
            bundle_add(worker, i, page, analyze_page(worker, page));
        }
        pthread_rwlock_unlock(&analyzer->index.lock);
        atomic_fetch_add_explicit(&analyzer->bytes_done, (last - first) * page_size,
                                  memory_order_relaxed);
    }
    if (analyzer->options.recompression.group)
        bundle_flush(worker);
    return 0;
}

static void *worker_main(void *argument)
{
    struct worker *worker = argument;
    struct estimate_analyzer *analyzer = worker->analyzer;
    for (;;) {
        pthread_mutex_lock(&analyzer->lock);
        while (!analyzer->queue_head && !analyzer->stopping)
            pthread_cond_wait(&analyzer->work_ready, &analyzer->lock);
        struct chunk *chunk = analyzer->queue_head;
        if (!chunk) {
            pthread_mutex_unlock(&analyzer->lock);
            return NULL;
        }
        analyzer->queue_head = chunk->next;
        if (!analyzer->queue_head)
            analyzer->queue_tail = NULL;
        pthread_mutex_unlock(&analyzer->lock);

        int rc = analyze_chunk(worker, chunk);
        if (rc < 0)
            set_error(analyzer, rc);

        pthread_mutex_lock(&analyzer->lock);
        chunk->next = analyzer->free_list;
        analyzer->free_list = chunk;
        analyzer->in_flight--;
        pthread_cond_broadcast(&analyzer->chunk_done);
        pthread_mutex_unlock(&analyzer->lock);
    }
}

/* ------------------------------------------------------------------------
 * Start and stop
 * ---------------------------------------------------------------------- */

static int worker_open(struct worker *worker, const struct estimate_options *options)
{
    worker->scratch = malloc(2 * UZRAM_PAGE_SIZE);
    if (!worker->scratch)
        return -ENOMEM;
    if (options->recompression.group) {
        size_t bytes = (size_t)options->recompression.group * UZRAM_PAGE_SIZE;
        worker->window.span = malloc(bytes);
        worker->window.frame = malloc(bytes);
        if (!worker->window.span || !worker->window.frame)
            return -ENOMEM;
    }
    if (options->algorithm_count) {
        worker->counts.lengths = calloc(options->algorithm_count, sizeof(struct estimate_lengths));
        if (!worker->counts.lengths)
            return -ENOMEM;
    }
    for (unsigned a = 0; a < options->algorithm_count; a++) {
        const struct estimate_algorithm *spec = &options->specs[a];
        /* derived entries compress nothing; dictionary ones wait for it */
        if (spec->from[0] >= 0 || spec->dict_size)
            continue;
        int rc = uzram_codec_open(spec->codec, spec->level, &worker->codecs[a]);
        if (rc < 0) {
            fprintf(stderr, "uzram estimate: cannot open a %s compressor: %s\n",
                    options->algorithms[a], strerror(-rc));
            return rc;
        }
    }
    return 0;
}

/* Pages a dictionary is trained on, as the engine's dict=auto takes them. */
#define TRAIN_PAGES 2048u
#define TRAIN_MIN_PAGES 16u

/* Train the dictionaries from the pages of `chunk` that are not same-filled
 * and open the dictionary codecs of every worker; where too few pages allow
 * no dictionary, those entries compress without one. */
static int train_dictionaries(struct estimate_analyzer *analyzer, const struct chunk *chunk)
{
    struct estimate_options *options = &analyzer->options;
    analyzer->dicts_done = true;
    size_t page_size = options->page_size;
    size_t *sizes = malloc(TRAIN_PAGES * sizeof *sizes);
    unsigned char *samples = malloc(TRAIN_PAGES * page_size);
    int rc = 0;
    unsigned count = 0;
    for (size_t offset = 0;
         sizes && samples && offset + page_size <= chunk->length && count < TRAIN_PAGES;
         offset += page_size) {
        uint64_t word;
        if (uzram_page_same_filled(chunk->data + offset, &word))
            continue;
        memcpy(samples + (size_t)count * page_size, chunk->data + offset, page_size);
        sizes[count++] = page_size;
    }
    for (unsigned a = 0; a < options->algorithm_count && rc == 0; a++) {
        struct estimate_algorithm *spec = &options->specs[a];
        if (!spec->dict_size)
            continue;
        void *dict = malloc(spec->dict_size);
        int length = !dict || !sizes || !samples ? -ENOMEM
                     : count < TRAIN_MIN_PAGES
                         ? -EAGAIN
                         : uzram_dict_train(dict, spec->dict_size, samples, sizes, count);
        spec->dict_trained = length > 0;
        for (unsigned i = 0; i < options->jobs && rc == 0; i++) {
            struct worker *worker = &analyzer->workers[i];
            rc = length > 0 ? uzram_codec_open_dict(spec->codec, spec->level, dict, (size_t)length,
                                                    &worker->codecs[a])
                            : uzram_codec_open(spec->codec, spec->level, &worker->codecs[a]);
        }
        free(dict);
        if (length == -ENOMEM)
            rc = length;
    }
    free(samples);
    free(sizes);
    if (rc < 0)
        fprintf(stderr, "uzram estimate: cannot make the dictionary compressors: %s\n",
                strerror(-rc));
    return rc;
}

/* For a file or device of known size: up to chunk_size bytes of whole pages
 * read at evenly spaced offsets (pread: the reading position stays). On
 * success `sample` describes them and the buffer to free is returned; else
 * NULL and `sample` is left as it is. */
static unsigned char *sample_spread(struct estimate_source *source, size_t page_size,
                                    size_t chunk_size, struct chunk *sample)
{
    uint64_t pages = source->size / page_size, count = chunk_size / page_size;
    if ((source->kind != SOURCE_FILE && source->kind != SOURCE_DEVICE) || pages <= count)
        return NULL;
    unsigned char *buffer = malloc(count * page_size);
    size_t length = 0;
    for (uint64_t i = 0; buffer && i < count; i++) {
        off_t offset = (off_t)(pages * i / count * page_size);
        if (pread(source->fd, buffer + length, page_size, offset) == (ssize_t)page_size)
            length += page_size;
    }
    if (length == 0) {
        free(buffer);
        return NULL;
    }
    *sample = (struct chunk){buffer, length, NULL};
    return buffer;
}

void estimate_analyzer_dicts(struct estimate_analyzer *analyzer, struct estimate_options *options)
{
    for (unsigned a = 0; a < options->algorithm_count; a++) {
        options->specs[a].dict_trained = analyzer->options.specs[a].dict_trained;
        options->specs[a].dict_memory =
            analyzer->workers ? uzram_codec_dict_memory(analyzer->workers[0].codecs[a]) : 0;
    }
}

int estimate_analyzer_start(const struct estimate_options *options, struct estimate_analyzer **out)
{
    struct estimate_analyzer *analyzer = calloc(1, sizeof *analyzer);
    if (!analyzer)
        goto no_memory;
    analyzer->options = *options;
    pthread_mutex_init(&analyzer->lock, NULL);
    pthread_cond_init(&analyzer->work_ready, NULL);
    pthread_cond_init(&analyzer->chunk_done, NULL);
    pthread_rwlock_init(&analyzer->index.lock, NULL);
    analyzer->index.algorithm_count = options->algorithm_count;
    if (index_allocate(&analyzer->index, INITIAL_CAPACITY) < 0)
        goto no_memory;

    /* 8 MiB reads keep any disk streaming; two spare chunks let the reader
     * run ahead of the workers. Past 4 workers, 4 MiB bounds the memory. */
    analyzer->chunk_size = options->jobs <= 4 ? 8u << 20 : 4u << 20;
    analyzer->chunk_size -= analyzer->chunk_size % options->page_size;
    analyzer->chunk_count = options->jobs + 2;
    analyzer->chunks = calloc(analyzer->chunk_count, sizeof *analyzer->chunks);
    if (!analyzer->chunks)
        goto no_memory;
    for (unsigned i = 0; i < analyzer->chunk_count; i++) {
        struct chunk *chunk = &analyzer->chunks[i];
        chunk->data = aligned_alloc(4096, analyzer->chunk_size);
        if (!chunk->data)
            goto no_memory;
        chunk->next = analyzer->free_list;
        analyzer->free_list = chunk;
    }

    analyzer->workers = calloc(options->jobs, sizeof *analyzer->workers);
    if (!analyzer->workers)
        goto no_memory;
    for (unsigned i = 0; i < options->jobs; i++) {
        struct worker *worker = &analyzer->workers[i];
        worker->analyzer = analyzer;
        int rc = worker_open(worker, options);
        if (rc == -ENOMEM)
            goto no_memory;
        if (rc < 0) {
            estimate_analyzer_stop(analyzer);
            return rc;
        }
    }
    for (unsigned i = 0; i < options->jobs; i++) {
        struct worker *worker = &analyzer->workers[i];
        int rc = pthread_create(&worker->thread, NULL, worker_main, worker);
        if (rc) {
            fprintf(stderr, "uzram estimate: cannot start a worker thread: %s\n", strerror(rc));
            estimate_analyzer_stop(analyzer);
            return -rc;
        }
        worker->started = true;
    }
    *out = analyzer;
    return 0;

no_memory:
    fprintf(stderr, "uzram estimate: out of memory while starting\n");
    estimate_analyzer_stop(analyzer);
    return -ENOMEM;
}

void estimate_analyzer_stop(struct estimate_analyzer *analyzer)
{
    if (!analyzer)
        return;
    pthread_mutex_lock(&analyzer->lock);
    analyzer->stopping = true;
    pthread_cond_broadcast(&analyzer->work_ready);
    pthread_mutex_unlock(&analyzer->lock);
    if (analyzer->workers) {
        for (unsigned i = 0; i < analyzer->options.jobs; i++) {
            struct worker *worker = &analyzer->workers[i];
            if (worker->started)
                pthread_join(worker->thread, NULL);
            for (unsigned a = 0; a < ESTIMATE_MAX_ALGORITHMS; a++)
                uzram_codec_close(worker->codecs[a]);
            free(worker->scratch);
            free(worker->window.span);
            free(worker->window.frame);
            free(worker->counts.lengths);
        }
        free(analyzer->workers);
    }
    if (analyzer->chunks)
        for (unsigned i = 0; i < analyzer->chunk_count; i++)
            free(analyzer->chunks[i].data);
    free(analyzer->chunks);
    free(analyzer->index.keys);
    free(analyzer->index.counts);
    free(analyzer->index.lengths);
    pthread_rwlock_destroy(&analyzer->index.lock);
    pthread_cond_destroy(&analyzer->work_ready);
    pthread_cond_destroy(&analyzer->chunk_done);
    pthread_mutex_destroy(&analyzer->lock);
    free(analyzer);
}

/* ------------------------------------------------------------------------
 * One source
 * ---------------------------------------------------------------------- */

int estimate_analyze_source(struct estimate_analyzer *analyzer, struct estimate_source *source,
                            bool show_progress)
{
    /* A directory's total, for the progress line's "of" and time left (a walk of stat calls,
     * as du makes, first). */
    if (show_progress && source->kind == SOURCE_DIRECTORY)
        source->size = estimate_walk_total(source->name);
    struct progress progress;
    progress_begin(&progress, source->name, source->size, NULL, !show_progress);
    int status = 0;
    atomic_store_explicit(&analyzer->bytes_done, 0, memory_order_relaxed);

    for (;;) {
        pthread_mutex_lock(&analyzer->lock);
        while (!analyzer->free_list)
            pthread_cond_wait(&analyzer->chunk_done, &analyzer->lock);
        struct chunk *chunk = analyzer->free_list;
        analyzer->free_list = chunk->next;
        int error = analyzer->error;
        pthread_mutex_unlock(&analyzer->lock);

        /* a worker failed: stop reading, the error is reported below */
        long got = error ? 0
                         : estimate_read(source, chunk->data, analyzer->chunk_size,
                                         analyzer->options.page_size);
        /* Before any page is compressed: nothing is in flight yet. A stream
         * gives its first pages to learn from; a file or device, pages spread
         * over all of it, as dict=auto samples the disk (the first pages of a
         * filesystem image are its metadata, a poor dictionary for the rest). */
        if (got > 0 && !analyzer->dicts_done && analyzer->options.recompression.on) {
            struct chunk sample = {chunk->data, (size_t)got, NULL};
            unsigned char *spread =
                sample_spread(source, analyzer->options.page_size, analyzer->chunk_size, &sample);
            if (train_dictionaries(analyzer, &sample) < 0)
                got = -ENOMEM;
            free(spread);
        }
        pthread_mutex_lock(&analyzer->lock);
        if (got <= 0) {
            chunk->next = analyzer->free_list;
            analyzer->free_list = chunk;
        } else {
            chunk->length = (size_t)got;
            chunk->next = NULL;
            if (analyzer->queue_tail)
                analyzer->queue_tail->next = chunk;
            else
                analyzer->queue_head = chunk;
            analyzer->queue_tail = chunk;
            analyzer->in_flight++;
            pthread_cond_signal(&analyzer->work_ready);
        }
        pthread_mutex_unlock(&analyzer->lock);
        if (got < 0)
            status = (int)got;
        if (got <= 0)
            break;

        /* Bytes analyzed; the time left goes by what was read of the size (a process's
         * unpopulated ranges are skipped, a directory's files padded to pages). */
        uint64_t done = atomic_load_explicit(&analyzer->bytes_done, memory_order_relaxed);
        progress_show(&progress, done, source->position, NULL);
    }

    /* Wait for every chunk of this source: duplicates are "of a page seen
     * earlier in the run", so the next source must not overlap this one. */
    pthread_mutex_lock(&analyzer->lock);
    while (analyzer->in_flight)
        pthread_cond_wait(&analyzer->chunk_done, &analyzer->lock);
    int worker_error = analyzer->error;
    pthread_mutex_unlock(&analyzer->lock);
    progress_end(&progress);

    for (unsigned i = 0; i < analyzer->options.jobs; i++) {
        struct worker *worker = &analyzer->workers[i];
        estimate_counts_add(&source->counts, &worker->counts, analyzer->options.algorithm_count);
        counts_clear(&worker->counts, analyzer->options.algorithm_count);
    }
    if (worker_error == -ENOMEM)
        fprintf(stderr, "uzram estimate: out of memory for the dedup index\n");
    else if (worker_error)
        fprintf(stderr, "uzram estimate: compression failed: %s\n", strerror(-worker_error));
    return status ? status : worker_error;
}

/* ------------------------------------------------------------------------
 * Histogram
 * ---------------------------------------------------------------------- */

void estimate_histogram(struct estimate_analyzer *analyzer, struct estimate_bucket *buckets,
                        struct estimate_index_info *info)
{
    struct dedup_index *index = &analyzer->index;
    unsigned algorithms = index->algorithm_count;
    memset(buckets, 0, ESTIMATE_BUCKETS * sizeof *buckets);
    for (uint64_t slot = 0; slot < index->capacity; slot++) {
        if (!atomic_load_explicit(&index->keys[slot], memory_order_relaxed))
            continue;
        uint64_t count = atomic_load_explicit(&index->counts[slot], memory_order_relaxed);
        unsigned bucket = count <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(count - 1);
        if (bucket >= ESTIMATE_BUCKETS)
            bucket = ESTIMATE_BUCKETS - 1;
        buckets[bucket].contents++;
        buckets[bucket].pages += count;
        if (algorithms) {
            unsigned length =
                atomic_load_explicit(&index->lengths[slot * algorithms], memory_order_relaxed);
            buckets[bucket].compressed_bytes += length;
            buckets[bucket].referenced_compressed_bytes += count * length;
            buckets[bucket].pool_bytes += uzram_pool_object_cost(length);
        }
    }
    info->entries = atomic_load_explicit(&index->used, memory_order_relaxed);
    info->capacity = index->capacity;
    info->memory_bytes =
        index->capacity * (sizeof(uint64_t) + sizeof(uint32_t) + algorithms * sizeof(uint16_t));
}
