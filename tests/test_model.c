/* test_model.c - model-based random test of the engine against a plain in-memory array.
 * Random I/O, resets, compaction, memory limits, recompression and writeback to a backing file,
 * single-threaded and multi-threaded. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "store.h" /* store_test_advance_clock */
#include "test_util.h"

/* Under valgrind (make valgrind) the same runs would take minutes: use
 * fewer operations there. The header is macros only, nothing to link. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef UNDER_VALGRIND
#define UNDER_VALGRIND() 0
#endif

/*
 * Environment knobs, so a failure found once can be replayed:
 *   UZRAM_TEST_SEED    seed of the random operations (printed on failure)
 *   UZRAM_TEST_OPS     operations per single-threaded run (per thread when
 *                      threaded; concurrent tests use a quarter of it)
 *   UZRAM_TEST_FILTER  run only tests whose name contains this (or matches
 *                      it as a glob); argv[1] does the same. `make tsan`
 *                      passes "concurrent".
 */

#define PAGE UZRAM_PAGE_SIZE
#define SECTOR UZRAM_SECTOR_SIZE
#define MAX_IO (64u * 1024u)
/* A request of MAX_IO at an unaligned sector spans one more page. */
#define MAX_SPAN (MAX_IO + 2 * PAGE)
#define DEFAULT_OPS 4000
#define DEDUP_SET_SIZE 8

/* What the model knows about whether a page holds a slot in the engine.
 * UNKNOWN happens where the header leaves the engine a choice (zeroing part
 * of an empty page may or may not store a zero page) or after a failed
 * request whose effect on a page cannot be told from its content. */
enum page_state { PAGE_EMPTY = 0, PAGE_STORED = 1, PAGE_UNKNOWN = 2 };

/* Fixed page contents that dedup runs draw from, so most pages share. */
static uint8_t dedup_set[DEDUP_SET_SIZE][PAGE];

struct model {
    const char *name;
    struct uzram *dev;
    uint64_t seed;
    struct datagen_rng rng;
    /* The region of the device this model owns: [base, base + length). */
    uint64_t base;
    uint64_t length;
    uint64_t pages;
    uint8_t *data;  /* expected content of the region */
    uint8_t *state; /* enum page_state per page */
    /* Settings the device was made with. */
    bool same_filled;
    bool use_dedup;
    /* Draw page contents mostly from dedup_set. */
    bool shared_contents;
    /* Recompression: the secondary algorithms set, and whether the zstd
     * one got its dictionary (trained once a run: training takes time). */
    bool recompress;
    bool dictionary_done;
    /* Writeback: a backing file, and writes past mem_limit that make room
     * (then the library's thread writes back on its own, at any time). */
    bool backing;
    bool when_full;
    /* The model owns the whole device and runs alone: resets, memory limits
     * and exact statistics checks are allowed. */
    bool whole_device;
    /* Memory limit state (whole_device only). */
    bool limit_active;
    uint64_t limit;
    uint64_t limit_ops_left;
    bool limit_enforceable; /* mem_used_total was within the limit */
    uint64_t failed_requests;
    uint64_t compacted_pages;         /* summed over op_compact, for the summary */
    uint64_t written_back, read_back; /* bd_writes, bd_reads summed over resets */
    uint64_t resets;
    /* Progress and failure. */
    uint64_t op;
    char op_text[160];
    bool failed;
    uint8_t *buf;      /* data of the request */
    uint8_t *old_span; /* model content of the pages the request touches */
    uint8_t *new_span; /* what they must hold if the request succeeds */
    uint8_t *got_span; /* what the device returned */
};

static bool check(struct model *m, bool condition, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Record a failure with everything needed to replay it. Threads call this
 * too, so it never jumps out through cmocka; the test asserts afterwards. */
static bool check(struct model *m, bool condition, const char *format, ...)
{
    if (condition)
        return true;
    if (!m->failed) {
        va_list args;
        fprintf(stderr, "[%s] FAILED at op %llu (%s), seed %llu (UZRAM_TEST_SEED=%llu): ", m->name,
                (unsigned long long)m->op, m->op_text, (unsigned long long)m->seed,
                (unsigned long long)m->seed);
        va_start(args, format);
        vfprintf(stderr, format, args);
        va_end(args);
        fputc('\n', stderr);
    }
    m->failed = true;
    return false;
}

static uint64_t env_u64(const char *name, uint64_t fallback)
{
    const char *text = getenv(name);
    if (!text || !*text)
        return fallback;
    return strtoull(text, NULL, 0);
}

static uint64_t test_seed(uint64_t fallback)
{
    return env_u64("UZRAM_TEST_SEED", fallback);
}

static uint64_t test_ops(uint64_t fallback)
{
    if (UNDER_VALGRIND())
        fallback /= 10;
    return env_u64("UZRAM_TEST_OPS", fallback);
}

static bool page_is_same_filled(const uint8_t *page)
{
    /* A page is one 8-byte word repeated exactly when it equals itself
     * shifted by 8 bytes; an independent check, not the engine's. */
    return memcmp(page, page + 8, PAGE - 8) == 0;
}

static bool page_is_zero(const uint8_t *page)
{
    return page[0] == 0 && memcmp(page, page + 1, PAGE - 1) == 0;
}

static size_t first_difference(const uint8_t *a, const uint8_t *b, size_t length)
{
    for (size_t i = 0; i < length; i++)
        if (a[i] != b[i])
            return i;
    return length;
}

static void make_dedup_set(void)
{
    struct datagen_rng rng;
    static const enum datagen_kind kinds[DEDUP_SET_SIZE] = {
        DATAGEN_TEXT, DATAGEN_TEXT, DATAGEN_TEXT,   DATAGEN_HALF,
        DATAGEN_HALF, DATAGEN_HALF, DATAGEN_RANDOM, DATAGEN_RANDOM,
    };
    datagen_rng_seed(&rng, 0xd3d0);
    for (int i = 0; i < DEDUP_SET_SIZE; i++)
        datagen_fill(&rng, kinds[i], dedup_set[i], PAGE);
}

/* ------------------------------------------------------------------------
 * Model setup
 * ---------------------------------------------------------------------- */

struct model_options {
    const char *name;
    const char *algorithm;
    bool same_filled;
    bool use_dedup;
    bool shared_contents;
    uint64_t disksize;
    /* Secondary algorithms for recompression, priority 1 and 2 (NULL: none
     * at that priority); a zstd one may get a trained dictionary. */
    const char *recompress[2];
    /* A backing file (in memory, test_attach_backing), and
     * writeback_when_full with it. */
    bool backing;
    bool when_full;
};

static struct uzram *make_device(const struct model_options *options)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = options->disksize;
    config.comp_algorithm = options->algorithm ? options->algorithm : "lz4";
    config.same_filled = options->same_filled;
    config.use_dedup = options->use_dedup;
    struct uzram *dev = NULL;
    int rc = uzram_create(&config, &dev);
    if (rc != 0) {
        fprintf(stderr, "uzram_create(%s) failed: %d\n", options->name, rc);
        return NULL;
    }
    for (unsigned i = 0; i < 2; i++)
        if (options->recompress[i] &&
            (rc = uzram_set_recomp_algorithm(dev, i + 1, options->recompress[i], 0)) != 0) {
            fprintf(stderr, "uzram_set_recomp_algorithm(%s) failed: %d\n", options->name, rc);
            uzram_destroy(dev);
            return NULL;
        }
    if (options->backing && ((rc = test_attach_backing(dev, true)) != 0 ||
                             (rc = uzram_set_writeback_when_full(dev, options->when_full)) != 0)) {
        fprintf(stderr, "backing store for %s: %d\n", options->name, rc);
        uzram_destroy(dev);
        return NULL;
    }
    return dev;
}

static void model_buffers(struct model *m)
{
    m->buf = malloc(MAX_SPAN);
    m->old_span = malloc(MAX_SPAN);
    m->new_span = malloc(MAX_SPAN);
    m->got_span = malloc(MAX_SPAN);
    assert_non_null(m->buf);
    assert_non_null(m->old_span);
    assert_non_null(m->new_span);
    assert_non_null(m->got_span);
}

static void model_free_buffers(struct model *m)
{
    free(m->buf);
    free(m->old_span);
    free(m->new_span);
    free(m->got_span);
}

/* ------------------------------------------------------------------------
 * Content and range generators
 * ---------------------------------------------------------------------- */

static void random_page(struct model *m, uint8_t *page)
{
    if (m->shared_contents && datagen_rng_below(&m->rng, 100) < 85) {
        memcpy(page, dedup_set[datagen_rng_below(&m->rng, DEDUP_SET_SIZE)], PAGE);
        return;
    }
    uint64_t r = datagen_rng_below(&m->rng, 100);
    enum datagen_kind kind = r < 10   ? DATAGEN_ZERO
                             : r < 25 ? DATAGEN_SAME
                             : r < 55 ? DATAGEN_TEXT
                             : r < 85 ? DATAGEN_HALF
                                      : DATAGEN_RANDOM;
    datagen_fill(&m->rng, kind, page, PAGE);
}

/* A sector-aligned range inside the region: often whole pages, sometimes a
 * few sectors, sometimes up to 64 KiB at any sector. Offsets are relative
 * to the region. */
static void random_range(struct model *m, uint64_t *offset, uint64_t *length)
{
    uint64_t r = datagen_rng_below(&m->rng, 100);
    uint64_t off, len;
    if (r < 40) {
        off = datagen_rng_below(&m->rng, m->pages) * PAGE;
        len = (1 + datagen_rng_below(&m->rng, 4)) * PAGE;
    } else if (r < 60) {
        off = datagen_rng_below(&m->rng, m->length / SECTOR) * SECTOR;
        len = (1 + datagen_rng_below(&m->rng, 8)) * SECTOR;
    } else {
        off = datagen_rng_below(&m->rng, m->length / SECTOR) * SECTOR;
        len = (1 + datagen_rng_below(&m->rng, MAX_IO / SECTOR)) * SECTOR;
    }
    if (off + len > m->length)
        len = m->length - off;
    *offset = off;
    *length = len;
}

/* Fill buf with the request's data: each page it touches gets a fresh
 * content page, of which the request carries the overlapping slice. */
static void fill_request(struct model *m, uint64_t offset, uint64_t length)
{
    uint8_t page[PAGE];
    uint64_t pos = offset;
    while (pos < offset + length) {
        uint64_t in_page = pos % PAGE;
        uint64_t chunk = PAGE - in_page;
        if (chunk > offset + length - pos)
            chunk = offset + length - pos;
        random_page(m, page);
        memcpy(m->buf + (pos - offset), page + in_page, chunk);
        pos += chunk;
    }
}

/* ------------------------------------------------------------------------
 * Verification of a request against the model
 * ---------------------------------------------------------------------- */

enum request_kind { REQ_WRITE, REQ_DISCARD, REQ_ZEROES_KEEP };

/* After a request on [offset, offset+length) returned rc, read back every
 * page it touched and check it against the old and new model contents:
 *   rc == 0                 every page holds its new content;
 *   REQ_WRITE and -ENOSPC   pages hold new content up to some page and old
 *                           content from there on (pages are written in
 *                           order and the failing one keeps its old data);
 *   discard and -ENOSPC     each page holds old or new content (the header
 *                           fixes no order for discards).
 * Then adopt the result into the model and update the page states. */
static void verify_request(struct model *m, enum request_kind kind, uint64_t offset,
                           uint64_t length, int rc)
{
    uint64_t first_page = offset / PAGE;
    uint64_t last_page = (offset + length - 1) / PAGE;
    uint64_t span_pages = last_page - first_page + 1;
    uint64_t span_start = first_page * PAGE;
    size_t span = span_pages * PAGE;

    /* past mem_limit; or, with writeback when full, when room could not be
     * made in time (the store full, nothing cold enough, a slow machine) */
    bool may_fail = (m->limit_active || m->when_full) && rc == -ENOSPC;
    if (!check(m, rc == 0 || may_fail, "request returned %d (limit %s)", rc,
               m->limit_active ? "active" : "off"))
        return;
    if (rc != 0)
        m->failed_requests++;

    int read_rc = uzram_read(m->dev, m->base + span_start, m->got_span, span);
    if (!check(m, read_rc == 0, "read-back of the request's pages returned %d", read_rc))
        return;

    bool in_new_prefix = true;
    for (uint64_t i = 0; i < span_pages; i++) {
        uint64_t page_index = first_page + i;
        const uint8_t *old_page = m->old_span + i * PAGE;
        const uint8_t *new_page = m->new_span + i * PAGE;
        const uint8_t *got = m->got_span + i * PAGE;
        bool is_new = memcmp(got, new_page, PAGE) == 0;
        bool is_old = memcmp(got, old_page, PAGE) == 0;
        bool whole = page_index * PAGE >= offset && (page_index + 1) * PAGE <= offset + length;

        if (rc == 0) {
            if (!is_new) {
                size_t at = first_difference(got, new_page, PAGE);
                check(m, false,
                      "page %llu (device offset %llu) differs from the model at byte %zu: "
                      "expected 0x%02x got 0x%02x (state before: %d)",
                      (unsigned long long)page_index,
                      (unsigned long long)(m->base + page_index * PAGE), at, new_page[at], got[at],
                      m->state[page_index]);
                return;
            }
        } else if (kind == REQ_WRITE) {
            if (in_new_prefix && !is_new)
                in_new_prefix = false;
            if (!in_new_prefix && !is_old) {
                check(m, false,
                      "failed write (rc %d): page %llu (request page %llu) holds neither "
                      "its old content after an earlier page kept its old one, nor%s",
                      rc, (unsigned long long)page_index, (unsigned long long)i,
                      is_new ? " (it holds the NEW content: pages not written in order)"
                             : " its new content");
                return;
            }
        } else if (!is_new && !is_old) {
            check(m, false, "failed discard (rc %d): page %llu holds neither old nor new content",
                  rc, (unsigned long long)page_index);
            return;
        }

        /* New page state. */
        uint8_t before = m->state[page_index];
        uint8_t after;
        switch (kind) {
        case REQ_WRITE:
            after = PAGE_STORED;
            break;
        case REQ_ZEROES_KEEP:
            after = whole ? PAGE_STORED : (before == PAGE_EMPTY ? PAGE_UNKNOWN : before);
            break;
        case REQ_DISCARD:
        default:
            after = whole ? PAGE_EMPTY : (before == PAGE_EMPTY ? PAGE_UNKNOWN : before);
            break;
        }
        if (rc != 0) {
            if (is_new && !is_old)
                ; /* this page was done */
            else if (is_old && !is_new)
                after = before;
            else if (after != before)
                after = PAGE_UNKNOWN; /* content cannot tell */
        }
        m->state[page_index] = after;
    }
    memcpy(m->data + span_start, m->got_span, span);
}

/* ------------------------------------------------------------------------
 * Operations
 * ---------------------------------------------------------------------- */

static void snapshot_span(struct model *m, uint64_t offset, uint64_t length)
{
    uint64_t span_start = offset / PAGE * PAGE;
    uint64_t span_end = (offset + length + PAGE - 1) / PAGE * PAGE;
    memcpy(m->old_span, m->data + span_start, span_end - span_start);
    memcpy(m->new_span, m->data + span_start, span_end - span_start);
}

static void op_write(struct model *m)
{
    uint64_t offset, length;
    random_range(m, &offset, &length);
    snprintf(m->op_text, sizeof m->op_text, "write offset %llu length %llu",
             (unsigned long long)(m->base + offset), (unsigned long long)length);
    fill_request(m, offset, length);
    snapshot_span(m, offset, length);
    memcpy(m->new_span + offset % PAGE, m->buf, length);
    int rc = uzram_write(m->dev, m->base + offset, m->buf, length);
    verify_request(m, REQ_WRITE, offset, length, rc);
}

static void op_zero_range(struct model *m, int which)
{
    uint64_t offset, length;
    random_range(m, &offset, &length);
    const char *names[] = {"discard", "write_zeroes(keep=false)", "write_zeroes(keep=true)"};
    snprintf(m->op_text, sizeof m->op_text, "%s offset %llu length %llu", names[which],
             (unsigned long long)(m->base + offset), (unsigned long long)length);
    snapshot_span(m, offset, length);
    memset(m->new_span + offset % PAGE, 0, length);
    int rc;
    if (which == 0)
        rc = uzram_discard(m->dev, m->base + offset, length);
    else
        rc = uzram_write_zeroes(m->dev, m->base + offset, length, which == 2);
    verify_request(m, which == 2 ? REQ_ZEROES_KEEP : REQ_DISCARD, offset, length, rc);
}

static void op_read(struct model *m)
{
    uint64_t offset, length;
    random_range(m, &offset, &length);
    snprintf(m->op_text, sizeof m->op_text, "read offset %llu length %llu",
             (unsigned long long)(m->base + offset), (unsigned long long)length);
    int rc = uzram_read(m->dev, m->base + offset, m->buf, length);
    if (!check(m, rc == 0, "read returned %d", rc))
        return;
    if (memcmp(m->buf, m->data + offset, length) != 0) {
        size_t at = first_difference(m->buf, m->data + offset, length);
        check(m, false, "read differs at device offset %llu: expected 0x%02x got 0x%02x",
              (unsigned long long)(m->base + offset + at), m->data[offset + at], m->buf[at]);
    }
}

/* Read the whole region back in MAX_IO pieces. */
static void verify_all(struct model *m)
{
    snprintf(m->op_text, sizeof m->op_text, "verify whole region");
    for (uint64_t pos = 0; pos < m->length && !m->failed; pos += MAX_IO) {
        uint64_t length = m->length - pos < MAX_IO ? m->length - pos : MAX_IO;
        int rc = uzram_read(m->dev, m->base + pos, m->buf, length);
        if (!check(m, rc == 0, "read at %llu returned %d", (unsigned long long)(m->base + pos), rc))
            return;
        if (memcmp(m->buf, m->data + pos, length) != 0) {
            size_t at = first_difference(m->buf, m->data + pos, length);
            uint64_t page_index = (pos + at) / PAGE;
            check(m, false,
                  "device offset %llu differs: expected 0x%02x got 0x%02x (page %llu, state %d)",
                  (unsigned long long)(m->base + pos + at), m->data[pos + at], m->buf[at],
                  (unsigned long long)page_index, m->state[page_index]);
        }
    }
}

/* The documented invariants of the statistics, checked against what the
 * model knows. Only for a model that owns the whole device and runs alone. */
static void check_stats(struct model *m)
{
    struct uzram_stats s;
    int rc = uzram_get_stats(m->dev, &s, sizeof s);
    if (!check(m, rc == 0, "uzram_get_stats returned %d", rc))
        return;

    uint64_t stored = 0, unknown = 0, same_known = 0, same_unknown = 0;
    uint64_t zero_known = 0, zero_unknown = 0;
    for (uint64_t p = 0; p < m->pages; p++) {
        const uint8_t *page = m->data + p * PAGE;
        if (m->state[p] == PAGE_EMPTY)
            continue;
        bool same = page_is_same_filled(page);
        bool zero = same && page_is_zero(page);
        if (m->state[p] == PAGE_STORED) {
            stored++;
            same_known += same;
            zero_known += zero;
        } else {
            unknown++;
            same_unknown += same;
            zero_unknown += zero;
        }
    }

#define U(x) ((unsigned long long)(x))
    check(m, s.orig_data_size == s.pages_stored * PAGE,
          "orig_data_size %llu != pages_stored %llu * 4096", U(s.orig_data_size),
          U(s.pages_stored));
    check(m, s.pages_stored >= stored && s.pages_stored <= stored + unknown,
          "pages_stored %llu, model says %llu stored + %llu unknown", U(s.pages_stored), U(stored),
          U(unknown));
    if (m->same_filled) {
        check(m, s.same_pages >= same_known && s.same_pages <= same_known + same_unknown,
              "same_pages %llu, model says %llu same-filled stored + %llu unknown", U(s.same_pages),
              U(same_known), U(same_unknown));
        check(m, s.zero_pages >= zero_known && s.zero_pages <= zero_known + zero_unknown,
              "zero_pages %llu, model says %llu zero stored + %llu unknown", U(s.zero_pages),
              U(zero_known), U(zero_unknown));
    }
    check(m, s.same_pages <= s.pages_stored, "same_pages %llu > pages_stored %llu", U(s.same_pages),
          U(s.pages_stored));
    check(m, s.zero_pages <= s.same_pages, "zero_pages %llu > same_pages %llu", U(s.zero_pages),
          U(s.same_pages));
    check(m, s.idle_pages <= s.pages_stored, "idle_pages %llu > pages_stored %llu", U(s.idle_pages),
          U(s.pages_stored));
    check(m, s.bd_objects <= s.pages_stored - s.same_pages,
          "bd_objects %llu > pages_stored %llu - same_pages %llu", U(s.bd_objects),
          U(s.pages_stored), U(s.same_pages));
    check(m, s.bd_data_size >= s.bd_objects && s.bd_data_size <= s.bd_objects * PAGE,
          "bd_data_size %llu for %llu objects", U(s.bd_data_size), U(s.bd_objects));
    check(m, s.bd_writes >= s.bd_objects || s.bd_writes == 0,
          "bd_writes %llu < bd_objects %llu (and not just reset)", U(s.bd_writes), U(s.bd_objects));
    if (!m->backing)
        check(m, s.bd_objects + s.bd_count + s.bd_reads + s.bd_writes == 0,
              "backing store counters without a backing store");
    check(m, s.incompressible_pages <= s.pages_stored - s.same_pages,
          "incompressible_pages %llu > pages_stored %llu - same_pages %llu",
          U(s.incompressible_pages), U(s.pages_stored), U(s.same_pages));
    check(m, s.recomp_saved_bytes <= s.recomp_bytes, "recomp_saved_bytes %llu > recomp_bytes %llu",
          U(s.recomp_saved_bytes), U(s.recomp_bytes));
    check(m, s.mem_used_total >= s.dict_mem, "mem_used_total %llu < dict_mem %llu",
          U(s.mem_used_total), U(s.dict_mem));
    check(m, s.huge_pages + s.same_pages <= s.pages_stored,
          "huge_pages %llu + same_pages %llu > pages_stored %llu", U(s.huge_pages), U(s.same_pages),
          U(s.pages_stored));
    check(m, s.huge_pages <= s.huge_pages_since, "huge_pages %llu > huge_pages_since %llu",
          U(s.huge_pages), U(s.huge_pages_since));
    check(m, s.mem_used_total >= s.compr_data_size, "mem_used_total %llu < compr_data_size %llu",
          U(s.mem_used_total), U(s.compr_data_size));
    check(m, s.mem_used_max >= s.mem_used_total, "mem_used_max %llu < mem_used_total %llu",
          U(s.mem_used_max), U(s.mem_used_total));
    check(m, s.mem_limit == (m->limit_active ? m->limit : 0), "mem_limit %llu, set %llu",
          U(s.mem_limit), U(m->limit_active ? m->limit : 0));
    if (m->limit_active) {
        /* the limit is the pool's: dictionaries come on top, and recompression, which makes
         * room, may go up to 64 KiB past it (uzram.h) */
        uint64_t pool = s.mem_used_total - s.dict_mem;
        uint64_t grace = m->recompress ? 64 * 1024 : 0;
        if (!m->limit_enforceable && pool <= m->limit)
            m->limit_enforceable = true;
        else if (m->limit_enforceable)
            check(m, pool <= m->limit + grace,
                  "pool memory %llu (mem_used_total - dict_mem) past mem_limit %llu (+ %llu)",
                  U(pool), U(m->limit), U(grace));
    }
    if (!m->use_dedup) {
        check(m, s.dup_data_size == 0, "dup_data_size %llu without dedup", U(s.dup_data_size));
        /* raw pages count as huge wherever they are */
        check(m, s.compr_data_size + s.bd_data_size >= s.huge_pages * PAGE,
              "compr_data_size %llu + bd_data_size %llu < huge_pages %llu * 4096",
              U(s.compr_data_size), U(s.bd_data_size), U(s.huge_pages));
    }
    check(m, s.failed_reads == 0, "failed_reads %llu", U(s.failed_reads));
    check(m, s.invalid_io == 0, "invalid_io %llu though every request was valid", U(s.invalid_io));
    check(m,
          s.failed_writes >= m->failed_requests && (m->failed_requests > 0 || s.failed_writes == 0),
          "failed_writes %llu, %llu requests failed", U(s.failed_writes), U(m->failed_requests));
    if (stored + unknown == 0 || s.pages_stored == 0) {
        check(m,
              s.pages_stored == 0 && s.orig_data_size == 0 && s.compr_data_size == 0 &&
                  s.same_pages == 0 && s.huge_pages == 0 && s.dup_data_size == 0 &&
                  s.zero_pages == 0 && s.mem_used_total == s.dict_mem && s.idle_pages == 0 &&
                  s.incompressible_pages == 0 && s.bd_objects == 0 && s.bd_data_size == 0,
              "device holds no page but: pages_stored %llu orig %llu compr %llu same %llu "
              "huge %llu dup %llu zero %llu mem_used_total %llu",
              U(s.pages_stored), U(s.orig_data_size), U(s.compr_data_size), U(s.same_pages),
              U(s.huge_pages), U(s.dup_data_size), U(s.zero_pages), U(s.mem_used_total));
    }
#undef U
}

static void op_compact(struct model *m)
{
    snprintf(m->op_text, sizeof m->op_text, "compact");
    if (!m->whole_device) {
        /* Other threads change the counters meanwhile: only the call. */
        check(m, uzram_compact(m->dev, NULL) == 0, "uzram_compact failed");
        return;
    }
    struct uzram_stats before = test_stats(m->dev);
    uint64_t freed = UINT64_MAX;
    int rc = uzram_compact(m->dev, &freed);
    if (!check(m, rc == 0, "uzram_compact returned %d", rc))
        return;
    struct uzram_stats after = test_stats(m->dev);
    check(m, freed != UINT64_MAX, "uzram_compact did not store pages_freed");
    m->compacted_pages += freed;
    check(m, after.pages_compacted == before.pages_compacted + freed,
          "pages_compacted went from %llu to %llu, compact freed %llu",
          (unsigned long long)before.pages_compacted, (unsigned long long)after.pages_compacted,
          (unsigned long long)freed);
    check(m, after.mem_used_total <= before.mem_used_total,
          "mem_used_total grew from %llu to %llu in compaction",
          (unsigned long long)before.mem_used_total, (unsigned long long)after.mem_used_total);
}

static void op_reset(struct model *m)
{
    snprintf(m->op_text, sizeof m->op_text, "reset");
    struct uzram_stats last = test_stats(m->dev);
    m->written_back += last.bd_writes;
    m->read_back += last.bd_reads;
    int rc = uzram_reset(m->dev);
    if (!check(m, rc == 0, "uzram_reset returned %d", rc))
        return;
    memset(m->data, 0, m->length);
    memset(m->state, PAGE_EMPTY, m->pages);
    m->failed_requests = 0;
    m->resets++;
    struct uzram_stats s = test_stats(m->dev);
    check(m,
          s.orig_data_size == 0 && s.compr_data_size == 0 && s.mem_used_total == 0 &&
              s.mem_used_max == 0 && s.same_pages == 0 && s.pages_compacted == 0 &&
              s.huge_pages == 0 && s.huge_pages_since == 0 && s.dup_data_size == 0 &&
              s.failed_writes == 0 && s.pages_stored == 0,
          "after reset: orig %llu compr %llu mem_used_total %llu mem_used_max %llu same %llu "
          "compacted %llu huge %llu huge_since %llu dup %llu failed_writes %llu",
          (unsigned long long)s.orig_data_size, (unsigned long long)s.compr_data_size,
          (unsigned long long)s.mem_used_total, (unsigned long long)s.mem_used_max,
          (unsigned long long)s.same_pages, (unsigned long long)s.pages_compacted,
          (unsigned long long)s.huge_pages, (unsigned long long)s.huge_pages_since,
          (unsigned long long)s.dup_data_size, (unsigned long long)s.failed_writes);
    check(m, s.mem_limit == (m->limit_active ? m->limit : 0),
          "reset changed mem_limit to %llu (was %llu)", (unsigned long long)s.mem_limit,
          (unsigned long long)(m->limit_active ? m->limit : 0));
    check_stats(m);
}

/* Discard the whole device: afterwards it holds nothing at all. */
static void op_discard_all(struct model *m)
{
    snprintf(m->op_text, sizeof m->op_text, "discard whole device");
    int rc = uzram_discard(m->dev, m->base, m->length);
    if (!check(m, rc == 0, "discard of the whole device returned %d", rc))
        return;
    memset(m->data, 0, m->length);
    memset(m->state, PAGE_EMPTY, m->pages);
    check_stats(m);
}

static void op_mem_limit(struct model *m)
{
    if (m->limit_active) {
        snprintf(m->op_text, sizeof m->op_text, "remove mem_limit");
        check(m, uzram_set_mem_limit(m->dev, 0) == 0, "set_mem_limit(0) failed");
        m->limit_active = false;
        m->limit = 0;
        return;
    }
    struct uzram_stats s = test_stats(m->dev);
    uint64_t r = datagen_rng_below(&m->rng, 100);
    uint64_t limit;
    if (r < 50)
        limit = s.mem_used_total + datagen_rng_below(&m->rng, 32) * PAGE;
    else if (r < 85)
        limit = s.mem_used_total + datagen_rng_below(&m->rng, 1024 * 1024);
    else
        limit = s.mem_used_total / 2;
    if (limit == 0)
        limit = PAGE;
    snprintf(m->op_text, sizeof m->op_text, "set mem_limit %llu (mem_used_total %llu)",
             (unsigned long long)limit, (unsigned long long)s.mem_used_total);
    check(m, uzram_set_mem_limit(m->dev, limit) == 0, "set_mem_limit failed");
    m->limit_active = true;
    m->limit = limit;
    m->limit_enforceable = s.mem_used_total <= limit;
    m->limit_ops_left = 100 + datagen_rng_below(&m->rng, 300);
}

static void op_reset_mem_used_max(struct model *m)
{
    snprintf(m->op_text, sizeof m->op_text, "reset mem_used_max");
    check(m, uzram_reset_mem_used_max(m->dev) == 0, "uzram_reset_mem_used_max failed");
    struct uzram_stats s = test_stats(m->dev);
    check(m, s.mem_used_max == s.mem_used_total,
          "mem_used_max %llu != mem_used_total %llu after resetting the peak",
          (unsigned long long)s.mem_used_max, (unsigned long long)s.mem_used_total);
}

/* Recompress with a random type, priority, threshold and limit; once in a
 * run, train a dictionary for a zstd secondary first. The data is checked
 * by the reads and whole-region verifications around it; alone on the
 * device, the counters must add up exactly. */
static void op_recompress(struct model *m)
{
    static const unsigned types[] = {0, UZRAM_RECOMPRESS_IDLE, UZRAM_RECOMPRESS_HUGE,
                                     UZRAM_RECOMPRESS_IDLE | UZRAM_RECOMPRESS_HUGE};
    unsigned type = types[datagen_rng_below(&m->rng, 4)];
    unsigned priority = (unsigned)datagen_rng_below(&m->rng, 3);
    uint64_t threshold =
        datagen_rng_below(&m->rng, 4) == 0 ? 1024 + datagen_rng_below(&m->rng, 2048) : 0;
    uint64_t max_pages =
        datagen_rng_below(&m->rng, 3) == 0 ? 1 + datagen_rng_below(&m->rng, 64) : 0;
    if (!m->dictionary_done && m->op > 200) {
        m->dictionary_done = true;
        snprintf(m->op_text, sizeof m->op_text, "train a dictionary for priority 1");
        int rc = uzram_set_algorithm_params(m->dev, 1, 0, NULL, 4096);
        /* EINVAL: the secondary is not zstd */
        check(m, rc == 0 || rc == -EINVAL, "algorithm_params dict=auto returned %d", rc);
    }
    snprintf(m->op_text, sizeof m->op_text,
             "recompress type %u priority %u threshold %llu max_pages %llu", type, priority,
             (unsigned long long)threshold, (unsigned long long)max_pages);
    struct uzram_stats before = test_stats(m->dev);
    struct uzram_recompress_result result;
    int rc = uzram_recompress(m->dev, type, threshold, max_pages, priority, &result);
    /* priority 2 may be unset; a memory limit may refuse the new object */
    if (!check(m, rc == 0 || rc == -ENOENT || ((m->limit_active || m->when_full) && rc == -ENOSPC),
               "uzram_recompress returned %d", rc) ||
        rc != 0 || !m->whole_device)
        return;
    struct uzram_stats after = test_stats(m->dev);
    check(m, max_pages == 0 || result.pages_tried <= max_pages, "tried %llu pages, max_pages %llu",
          (unsigned long long)result.pages_tried, (unsigned long long)max_pages);
    check(m, after.recomp_pages == before.recomp_pages + result.pages_recompressed,
          "recomp_pages %llu -> %llu, pass recompressed %llu",
          (unsigned long long)before.recomp_pages, (unsigned long long)after.recomp_pages,
          (unsigned long long)result.pages_recompressed);
    /* (the writeback thread moves objects out of memory at any time) */
    check(m,
          m->when_full || before.compr_data_size - after.compr_data_size ==
                              result.bytes_before - result.bytes_after,
          "compr_data_size %llu -> %llu, pass saved %llu",
          (unsigned long long)before.compr_data_size, (unsigned long long)after.compr_data_size,
          (unsigned long long)(result.bytes_before - result.bytes_after));
    check(m, after.pages_stored == before.pages_stored && after.same_pages == before.same_pages,
          "recompression changed pages_stored or same_pages");
    check(m, threshold == 0 || result.bytes_after < threshold * result.pages_recompressed + 1,
          "threshold %llu: %llu bytes after for %llu pages", (unsigned long long)threshold,
          (unsigned long long)result.bytes_after, (unsigned long long)result.pages_recompressed);
}

/* Write back pages of a random type from a random part of the region,
 * sometimes under a writeback_limit. The data is checked by the reads
 * around it; alone on the device (and without the library's own thread
 * moving pages too), the counters must add up exactly: objects move from
 * compr_data_size to bd_data_size, one bd_write each. */
static void op_writeback(struct model *m)
{
    static const unsigned types[] = {0, UZRAM_WRITEBACK_IDLE, UZRAM_WRITEBACK_HUGE,
                                     UZRAM_WRITEBACK_IDLE | UZRAM_WRITEBACK_HUGE,
                                     UZRAM_WRITEBACK_INCOMPRESSIBLE};
    unsigned type = types[datagen_rng_below(&m->rng, 5)];
    uint64_t first = datagen_rng_below(&m->rng, m->pages);
    uint64_t last =
        datagen_rng_below(&m->rng, 8) == 0 ? m->pages - 1 : first + datagen_rng_below(&m->rng, 64);
    if (last >= m->pages)
        last = m->pages - 1;
    uint64_t limit = datagen_rng_below(&m->rng, 8) == 0 ? datagen_rng_below(&m->rng, 16) : 0;
    uint64_t base = m->base / PAGE;
    snprintf(m->op_text, sizeof m->op_text, "writeback type %u pages %llu-%llu limit %llu", type,
             (unsigned long long)(base + first), (unsigned long long)(base + last),
             (unsigned long long)limit);
    bool exact = m->whole_device && !m->when_full;
    if (limit && m->whole_device) {
        uzram_set_writeback_limit(m->dev, limit);
        uzram_set_writeback_limit_enable(m->dev, true);
    }
    struct uzram_stats before = test_stats(m->dev);
    uint64_t written = UINT64_MAX;
    int rc = uzram_writeback(m->dev, type, base + first, base + last, &written);
    struct uzram_stats after = test_stats(m->dev);
    if (limit && m->whole_device)
        uzram_set_writeback_limit_enable(m->dev, false);
    /* -ENOSPC: the store is full; -EIO: the limit was used up */
    if (!check(m, rc == 0 || rc == -ENOSPC || (limit && m->whole_device && rc == -EIO),
               "uzram_writeback returned %d", rc) ||
        !check(m, written != UINT64_MAX, "uzram_writeback did not store `written`") || !exact)
        return;
    check(m, !limit || written <= limit, "wrote %llu pages past writeback_limit %llu",
          (unsigned long long)written, (unsigned long long)limit);
    check(m, after.bd_objects == before.bd_objects + written,
          "bd_objects %llu -> %llu, pass wrote %llu", (unsigned long long)before.bd_objects,
          (unsigned long long)after.bd_objects, (unsigned long long)written);
    check(m, after.bd_writes == before.bd_writes + written, "bd_writes %llu -> %llu, wrote %llu",
          (unsigned long long)before.bd_writes, (unsigned long long)after.bd_writes,
          (unsigned long long)written);
    check(m,
          after.compr_data_size + after.bd_data_size ==
              before.compr_data_size + before.bd_data_size,
          "compr_data_size + bd_data_size %llu + %llu -> %llu + %llu",
          (unsigned long long)before.compr_data_size, (unsigned long long)before.bd_data_size,
          (unsigned long long)after.compr_data_size, (unsigned long long)after.bd_data_size);
    check(m,
          after.pages_stored == before.pages_stored && after.same_pages == before.same_pages &&
              after.huge_pages == before.huge_pages && after.idle_pages == before.idle_pages,
          "writeback changed pages_stored, same_pages, huge_pages or idle_pages");
}

/* Mark pages idle (all, or by age: nothing here is older than the test).
 * Alone on the device, marking all makes every stored page idle. */
static void op_idle(struct model *m)
{
    bool all = datagen_rng_below(&m->rng, 2) == 0;
    snprintf(m->op_text, sizeof m->op_text, "idle %s", all ? "all" : "3600");
    uint64_t marked = UINT64_MAX;
    int rc = uzram_mark_idle(m->dev, all ? 0 : 3600, &marked);
    if (!check(m, rc == 0 && marked != UINT64_MAX, "uzram_mark_idle returned %d", rc))
        return;
    if (!m->whole_device)
        return;
    struct uzram_stats s = test_stats(m->dev);
    if (all)
        check(m, s.idle_pages == s.pages_stored, "idle all: idle_pages %llu, pages_stored %llu",
              (unsigned long long)s.idle_pages, (unsigned long long)s.pages_stored);
    else
        check(m, marked == 0, "idle 3600 marked %llu pages written within the test",
              (unsigned long long)marked);
}

/* Touch the statistics and text forms from any thread, for the racing tests. */
static void op_stats_racy(struct model *m)
{
    struct uzram_stats s;
    char text[2048];
    snprintf(m->op_text, sizeof m->op_text, "stats snapshot");
    check(m, uzram_get_stats(m->dev, &s, sizeof s) == 0, "uzram_get_stats failed");
    check(m, uzram_format_mm_stat(&s, text, sizeof text) > 0, "format_mm_stat failed");
    check(m, uzram_format_json(&s, text, sizeof text) > 0, "format_json failed");
}

/* One random operation. */
static void model_step(struct model *m)
{
    uint64_t r = datagen_rng_below(&m->rng, 1000);
    if (r < 420)
        op_write(m);
    else if (r < 670)
        op_read(m);
    else if (r < 760)
        op_zero_range(m, 0);
    else if (r < 800)
        op_zero_range(m, 1);
    else if (r < 850)
        op_zero_range(m, 2);
    else if (r < 870)
        op_compact(m);
    else if (r < 930) {
        if (m->whole_device) {
            snprintf(m->op_text, sizeof m->op_text, "stats check");
            check_stats(m);
        } else {
            op_stats_racy(m);
        }
    } else if (r < 940)
        verify_all(m);
    else if (r < 950)
        op_idle(m);
    else if (r < 958 && m->recompress)
        op_recompress(m);
    else if (r >= 958 && r < 966 && m->backing)
        op_writeback(m);
    else if (!m->whole_device)
        op_write(m);
    else if (r < 951)
        op_reset(m);
    else if (r < 953)
        op_discard_all(m);
    else if (r < 965)
        op_mem_limit(m);
    else if (r < 970)
        op_reset_mem_used_max(m);
    else
        op_write(m);

    if (m->limit_active && m->limit_ops_left > 0 && --m->limit_ops_left == 0) {
        snprintf(m->op_text, sizeof m->op_text, "remove mem_limit (expired)");
        check(m, uzram_set_mem_limit(m->dev, 0) == 0, "set_mem_limit(0) failed");
        m->limit_active = false;
        m->limit = 0;
    }
}

static void model_run(struct model *m, uint64_t ops)
{
    for (m->op = 0; m->op < ops && !m->failed; m->op++)
        model_step(m);
    if (!m->failed)
        verify_all(m);
}

/* ------------------------------------------------------------------------
 * Single-threaded runs
 * ---------------------------------------------------------------------- */

static void run_single(const struct model_options *options, uint64_t default_seed)
{
    struct model m;
    memset(&m, 0, sizeof m);
    m.name = options->name;
    m.dev = make_device(options);
    assert_non_null(m.dev);
    m.seed = test_seed(default_seed);
    datagen_rng_seed(&m.rng, m.seed);
    m.base = 0;
    m.length = options->disksize;
    m.pages = m.length / PAGE;
    m.data = calloc(1, m.length);
    m.state = calloc(1, m.pages);
    assert_non_null(m.data);
    assert_non_null(m.state);
    m.same_filled = options->same_filled;
    m.use_dedup = options->use_dedup;
    m.shared_contents = options->shared_contents;
    m.recompress = options->recompress[0] != NULL;
    m.backing = options->backing;
    m.when_full = options->when_full;
    m.whole_device = true;
    model_buffers(&m);

    model_run(&m, test_ops(DEFAULT_OPS));
    if (!m.failed) {
        snprintf(m.op_text, sizeof m.op_text, "final stats check");
        check_stats(&m);
        /* End empty: every counter of stored data must come back to 0. */
        if (m.limit_active)
            op_mem_limit(&m);
        op_discard_all(&m);
    }
    struct uzram_stats last = test_stats(m.dev);
    m.written_back += last.bd_writes;
    m.read_back += last.bd_reads;
    if (getenv("UZRAM_TEST_VERBOSE"))
        fprintf(stderr,
                "[%s] seed %llu: %llu failed requests since the last reset, %llu resets, "
                "%llu pages compacted, %llu pages written back and %llu read back\n",
                m.name, (unsigned long long)m.seed, (unsigned long long)m.failed_requests,
                (unsigned long long)m.resets, (unsigned long long)m.compacted_pages,
                (unsigned long long)m.written_back, (unsigned long long)m.read_back);
    bool failed = m.failed;
    uzram_destroy(m.dev);
    model_free_buffers(&m);
    free(m.data);
    free(m.state);
    assert_false(failed);
}

#define MIB (1024ull * 1024ull)

static void test_model_lz4(void **state)
{
    (void)state;
    struct model_options o = {"model_lz4",         "lz4",          true, false, false, 8 * MIB,
                              {"zstd", "deflate"}, .backing = true};
    run_single(&o, 1001);
}

static void test_model_lz4hc(void **state)
{
    (void)state;
    struct model_options o = {"model_lz4hc",       "lz4hc",         true, false, false, 8 * MIB,
                              {"deflate", "zstd"}, .backing = false};
    run_single(&o, 1002);
}

static void test_model_zstd(void **state)
{
    (void)state;
    struct model_options o = {
        "model_zstd",    "zstd",           true, false, false, 8 * MIB, {"lz4hc", "lzo"},
        .backing = true, .when_full = true};
    run_single(&o, 1003);
}

static void test_model_lzo(void **state)
{
    (void)state;
    struct model_options o = {"model_lzo",     "lzo",           true, false, false, 8 * MIB,
                              {"zstd", "lz4"}, .backing = false};
    run_single(&o, 1004);
}

static void test_model_deflate(void **state)
{
    (void)state;
    struct model_options o = {"model_deflate", "deflate",       true, false, false, 8 * MIB,
                              {"lzo", "zstd"}, .backing = false};
    run_single(&o, 1005);
}

static void test_model_no_same_filled(void **state)
{
    (void)state;
    struct model_options o = {"model_no_same_filled", "lz4",           false, false, false, 8 * MIB,
                              {"lz4hc", NULL},        .backing = false};
    run_single(&o, 1006);
}

static void test_model_dedup(void **state)
{
    (void)state;
    struct model_options o = {"model_dedup",     "lz4",          true, true, true, 8 * MIB,
                              {"zstd", "lz4hc"}, .backing = true};
    run_single(&o, 1007);
}

static void test_model_dedup_zstd_unique(void **state)
{
    (void)state;
    /* Dedup on but mostly unique pages: the index under churn. */
    struct model_options o = {
        "model_dedup_zstd_unique", "zstd",           true, true, false, 8 * MIB, {"deflate", NULL},
        .backing = true,           .when_full = true};
    run_single(&o, 1008);
}

/* ------------------------------------------------------------------------
 * Concurrent: disjoint ranges, exact verification per thread
 * ---------------------------------------------------------------------- */

#define THREADS 4

struct background {
    struct uzram *dev;
    volatile int stop; /* written by the main thread once, read with atomics */
    uint64_t compactions;
    uint64_t recompressions;
    bool backing; /* write back too */
    int error;
};

static void *compactor_main(void *arg)
{
    struct background *bg = arg;
    while (!__atomic_load_n(&bg->stop, __ATOMIC_ACQUIRE)) {
        uint64_t freed = 0;
        int rc = uzram_compact(bg->dev, &freed);
        if (rc != 0)
            bg->error = rc;
        struct uzram_stats s;
        if (uzram_get_stats(bg->dev, &s, sizeof s) != 0)
            bg->error = -EINVAL;
        bg->compactions++;
        /* Every device here has a secondary algorithm: mark everything idle
         * and recompress it by turns, one priority or all, while the test's
         * threads write, read, discard and reset. */
        unsigned turn = (unsigned)(bg->recompressions++ % 4);
        if ((rc = uzram_mark_idle(bg->dev, 0, NULL)) != 0)
            bg->error = rc;
        rc = uzram_recompress(bg->dev, turn == 3 ? UZRAM_RECOMPRESS_HUGE : UZRAM_RECOMPRESS_IDLE, 0,
                              0, turn % 3, NULL);
        /* (a device with a mem_limit may have no room for a new object) */
        if (rc != 0 && rc != -ENOENT && rc != -ENOSPC)
            bg->error = rc;
        /* Write back by turns: idle pages, huge ones, a range of any, all
         * (the store may fill: -ENOSPC). */
        static const unsigned writeback_types[] = {UZRAM_WRITEBACK_IDLE, UZRAM_WRITEBACK_HUGE, 0,
                                                   0};
        struct uzram_config config;
        uzram_get_config(bg->dev, &config);
        uint64_t pages = config.disksize / PAGE;
        uint64_t first = turn == 2 ? bg->compactions * 7 % pages : 0;
        if (bg->backing &&
            (rc = uzram_writeback(bg->dev, writeback_types[turn], first,
                                  turn == 2 ? first + 63 : UINT64_MAX, NULL)) != 0 &&
            rc != -ENOSPC)
            bg->error = rc;
        /* and time flies, for the library's own recompressor where the
         * test started it (pages unused for 1 s) */
        store_test_advance_clock(bg->dev, 1);
        sched_yield();
    }
    return NULL;
}

struct model_thread {
    struct model model;
    uint64_t ops;
};

static void *model_thread_main(void *arg)
{
    struct model_thread *t = arg;
    model_run(&t->model, t->ops);
    return NULL;
}

static void run_disjoint(const struct model_options *options, uint64_t default_seed)
{
    struct uzram *dev = make_device(options);
    assert_non_null(dev);
    uint64_t pages = options->disksize / PAGE;
    uint8_t *data = calloc(1, options->disksize);
    uint8_t *states = calloc(1, pages);
    assert_non_null(data);
    assert_non_null(states);
    uint64_t seed = test_seed(default_seed);
    uint64_t ops = test_ops(DEFAULT_OPS) / 4;
    if (ops == 0)
        ops = 1;

    struct model_thread threads[THREADS];
    pthread_t ids[THREADS];
    uint64_t region_pages = pages / THREADS;
    for (int i = 0; i < THREADS; i++) {
        struct model *m = &threads[i].model;
        memset(m, 0, sizeof *m);
        m->name = options->name;
        m->dev = dev;
        m->seed = seed + (uint64_t)i;
        datagen_rng_seed(&m->rng, m->seed);
        m->base = (uint64_t)i * region_pages * PAGE;
        m->length = region_pages * PAGE;
        m->pages = region_pages;
        m->data = data + m->base;
        m->state = states + (uint64_t)i * region_pages;
        m->same_filled = options->same_filled;
        m->use_dedup = options->use_dedup;
        m->shared_contents = options->shared_contents;
        m->recompress = options->recompress[0] != NULL;
        m->dictionary_done = i != 0; /* one thread trains */
        m->backing = options->backing;
        m->when_full = options->when_full;
        m->whole_device = false;
        model_buffers(m);
        threads[i].ops = ops;
    }

    struct background bg = {.dev = dev, .backing = options->backing};
    /* With writeback when full, a pool of a quarter of the disk: writes
     * make room all the time. */
    if (options->when_full)
        assert_int_equal(uzram_set_mem_limit(dev, options->disksize / 4), 0);
    pthread_t compactor;
    assert_int_equal(pthread_create(&compactor, NULL, compactor_main, &bg), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&ids[i], NULL, model_thread_main, &threads[i]), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(ids[i], NULL);
    __atomic_store_n(&bg.stop, 1, __ATOMIC_RELEASE);
    pthread_join(compactor, NULL);
    /* quiet from here: the library's writeback thread too */
    assert_int_equal(uzram_set_writeback_when_full(dev, false), 0);
    assert_int_equal(uzram_set_mem_limit(dev, 0), 0);

    bool failed = false;
    for (int i = 0; i < THREADS; i++) {
        if (threads[i].model.failed)
            fprintf(stderr, "thread %d failed (seed %llu)\n", i,
                    (unsigned long long)threads[i].model.seed);
        failed |= threads[i].model.failed;
        model_free_buffers(&threads[i].model);
    }
    if (bg.error != 0) {
        fprintf(stderr, "compactor thread saw error %d\n", bg.error);
        failed = true;
    }

    /* Quiet now: the whole device as one model, with exact stats checks. */
    if (!failed) {
        struct model whole;
        memset(&whole, 0, sizeof whole);
        whole.name = options->name;
        whole.dev = dev;
        whole.seed = seed;
        datagen_rng_seed(&whole.rng, seed);
        whole.base = 0;
        whole.length = region_pages * THREADS * PAGE;
        whole.pages = region_pages * THREADS;
        whole.data = data;
        whole.state = states;
        whole.same_filled = options->same_filled;
        whole.use_dedup = options->use_dedup;
        whole.shared_contents = options->shared_contents;
        whole.backing = options->backing;
        whole.whole_device = true;
        model_buffers(&whole);
        verify_all(&whole);
        snprintf(whole.op_text, sizeof whole.op_text, "stats check after threads");
        check_stats(&whole);
        /* The region may not cover the last pages; discard the full disk. */
        whole.length = options->disksize;
        whole.pages = pages;
        if (!whole.failed)
            op_discard_all(&whole);
        failed = whole.failed;
        model_free_buffers(&whole);
    }
    uzram_destroy(dev);
    free(data);
    free(states);
    assert_false(failed);
}

static void test_concurrent_disjoint(void **state)
{
    (void)state;
    struct model_options o = {
        "concurrent_disjoint", "lz4", true, false, false, 8 * MIB, {"zstd", NULL}, .backing = true,
        .when_full = true};
    run_disjoint(&o, 2001);
}

static void test_concurrent_disjoint_zstd(void **state)
{
    (void)state;
    struct model_options o = {
        "concurrent_disjoint_zstd", "zstd",          true, false, false, 8 * MIB,
        {"deflate", "lz4"},         .backing = false};
    run_disjoint(&o, 2002);
}

static void test_concurrent_disjoint_dedup(void **state)
{
    (void)state;
    /* Threads share objects across their regions through the dedup index. */
    struct model_options o = {"concurrent_disjoint_dedup",
                              "lz4",
                              true,
                              true,
                              true,
                              8 * MIB,
                              {"zstd", NULL},
                              .backing = true,
                              .when_full = true};
    run_disjoint(&o, 2003);
}

/* ------------------------------------------------------------------------
 * Concurrent: overlapping ranges, whole-page verification
 * ---------------------------------------------------------------------- */

/*
 * Every page a writer stores is self-describing, so any reader can tell a
 * whole page from a mix:
 *   unique page:  header {UNIQUE_MAGIC, page index, thread, sequence, kind}
 *                 and a body generated from that header (regenerated and
 *                 compared in full by the reader);
 *   template:     one of a few fixed pages {TEMPLATE_MAGIC, number, ...}
 *                 (dedup runs: many pages share each one);
 *   same-filled:  a word whose top half is SAME_MARK and whose low half
 *                 names the page (or a template number for dedup runs);
 *   zeros:        never written, discarded, or write-zeroes.
 */
#define UNIQUE_MAGIC 0x757a72616d504731ull   /* "uzramPG1" */
#define TEMPLATE_MAGIC 0x757a72616d54504cull /* "uzramTPL" */
#define SAME_MARK 0x5a5aa5a5u
#define TEMPLATES 6
#define OVERLAP_PAGES 64

static uint8_t templates[TEMPLATES][PAGE];

struct overlap {
    struct uzram *dev;
    bool use_templates;
    bool with_reset;
    uint64_t seed;
    uint64_t ops;
    int failures;
    char message[256];
    pthread_mutex_t lock; /* only guards failures/message */
};

struct overlap_thread {
    struct overlap *shared;
    int id;
    int role; /* 0 writer, 1 discarder, 2 reader */
    struct datagen_rng rng;
    uint64_t sequence;
};

static void overlap_fail(struct overlap *o, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static void overlap_fail(struct overlap *o, const char *format, ...)
{
    va_list args;
    pthread_mutex_lock(&o->lock);
    if (__atomic_fetch_add(&o->failures, 1, __ATOMIC_RELAXED) == 0) {
        va_start(args, format);
        vsnprintf(o->message, sizeof o->message, format, args);
        va_end(args);
    }
    pthread_mutex_unlock(&o->lock);
}

static void unique_page(uint8_t *page, uint64_t page_index, uint64_t thread, uint64_t sequence,
                        uint64_t kind)
{
    uint64_t header[5] = {UNIQUE_MAGIC, page_index, thread, sequence, kind};
    struct datagen_rng rng;
    datagen_rng_seed(&rng, (page_index * 1000003u) ^ (thread << 48) ^ (sequence * 7919u));
    static const enum datagen_kind kinds[3] = {DATAGEN_TEXT, DATAGEN_HALF, DATAGEN_RANDOM};
    datagen_fill(&rng, kinds[kind % 3], page, PAGE);
    memcpy(page, header, sizeof header);
}

static void make_templates(void)
{
    for (int i = 0; i < TEMPLATES; i++) {
        unique_page(templates[i], 0, 0, (uint64_t)i, (uint64_t)i);
        uint64_t header[2] = {TEMPLATE_MAGIC, (uint64_t)i};
        memcpy(templates[i], header, sizeof header);
    }
}

/* The page a writer stores at `page_index`. */
static void overlap_content(struct overlap_thread *t, uint64_t page_index, uint8_t *page)
{
    uint64_t r = datagen_rng_below(&t->rng, 100);
    if (r < 10) {
        uint64_t low = t->shared->use_templates ? datagen_rng_below(&t->rng, 2) : page_index;
        uint64_t word = ((uint64_t)SAME_MARK << 32) | low;
        for (size_t i = 0; i < PAGE; i += 8)
            memcpy(page + i, &word, 8);
    } else if (t->shared->use_templates && r < 80) {
        memcpy(page, templates[datagen_rng_below(&t->rng, TEMPLATES)], PAGE);
    } else {
        unique_page(page, page_index, (uint64_t)t->id, t->sequence++,
                    datagen_rng_below(&t->rng, 3));
    }
}

/* True if `page` read at `page_index` is a whole page some writer stored. */
static bool overlap_page_ok(const struct overlap *o, uint64_t page_index, const uint8_t *page,
                            char *why, size_t why_size)
{
    uint64_t header[5];
    memcpy(header, page, sizeof header);
    if (page_is_same_filled(page)) {
        uint64_t word = header[0];
        if (word == 0)
            return true;
        uint64_t low = word & 0xffffffffu;
        bool ok = (word >> 32) == SAME_MARK && (o->use_templates ? low < 2 : low == page_index);
        if (!ok)
            snprintf(why, why_size, "same-filled page of unknown word 0x%016llx",
                     (unsigned long long)word);
        return ok;
    }
    if (header[0] == TEMPLATE_MAGIC && header[1] < TEMPLATES) {
        if (memcmp(page, templates[header[1]], PAGE) == 0)
            return true;
        snprintf(why, why_size, "template %llu differs at byte %zu", (unsigned long long)header[1],
                 first_difference(page, templates[header[1]], PAGE));
        return false;
    }
    if (header[0] == UNIQUE_MAGIC && header[1] == page_index) {
        uint8_t expected[PAGE];
        unique_page(expected, header[1], header[2], header[3], header[4]);
        if (memcmp(page, expected, PAGE) == 0)
            return true;
        snprintf(why, why_size, "page of thread %llu seq %llu differs at byte %zu (a mix)",
                 (unsigned long long)header[2], (unsigned long long)header[3],
                 first_difference(page, expected, PAGE));
        return false;
    }
    snprintf(why, why_size, "unrecognised header 0x%016llx 0x%016llx (a mix or wrong page)",
             (unsigned long long)header[0], (unsigned long long)header[1]);
    return false;
}

static void overlap_read_check(struct overlap_thread *t, uint64_t first, uint64_t count,
                               uint8_t *buf)
{
    struct overlap *o = t->shared;
    int rc = uzram_read(o->dev, first * PAGE, buf, count * PAGE);
    if (rc != 0) {
        overlap_fail(o, "thread %d: read of pages %llu+%llu returned %d", t->id,
                     (unsigned long long)first, (unsigned long long)count, rc);
        return;
    }
    for (uint64_t i = 0; i < count; i++) {
        char why[160];
        if (!overlap_page_ok(o, first + i, buf + i * PAGE, why, sizeof why)) {
            overlap_fail(o, "thread %d: page %llu is not whole: %s", t->id,
                         (unsigned long long)(first + i), why);
            return;
        }
    }
}

static void *overlap_thread_main(void *arg)
{
    struct overlap_thread *t = arg;
    struct overlap *o = t->shared;
    uint8_t *buf = malloc(8 * PAGE);
    if (!buf) {
        overlap_fail(o, "out of memory");
        return NULL;
    }
    for (uint64_t op = 0; op < o->ops && __atomic_load_n(&o->failures, __ATOMIC_RELAXED) == 0;
         op++) {
        uint64_t count = 1 + datagen_rng_below(&t->rng, 4);
        uint64_t first = datagen_rng_below(&t->rng, OVERLAP_PAGES - count + 1);
        int rc = 0;
        const char *what = "";
        switch (t->role) {
        case 0: /* writer, reading now and then */
            if (datagen_rng_below(&t->rng, 4) == 0) {
                overlap_read_check(t, first, count, buf);
                break;
            }
            for (uint64_t i = 0; i < count; i++)
                overlap_content(t, first + i, buf + i * PAGE);
            rc = uzram_write(o->dev, first * PAGE, buf, count * PAGE);
            what = "write";
            break;
        case 1: { /* discarder */
            uint64_t r = datagen_rng_below(&t->rng, 1000);
            if (o->with_reset && r < 5) {
                rc = uzram_reset(o->dev);
                what = "reset";
            } else if (r < 400) {
                rc = uzram_discard(o->dev, first * PAGE, count * PAGE);
                what = "discard";
            } else if (r < 600) {
                rc = uzram_write_zeroes(o->dev, first * PAGE, count * PAGE, false);
                what = "write_zeroes";
            } else if (r < 800) {
                rc = uzram_write_zeroes(o->dev, first * PAGE, count * PAGE, true);
                what = "write_zeroes keep";
            } else {
                overlap_read_check(t, first, count, buf);
            }
            break;
        }
        default: /* reader */
            overlap_read_check(t, first, count, buf);
            break;
        }
        if (rc != 0)
            overlap_fail(o, "thread %d: %s of pages %llu+%llu returned %d", t->id, what,
                         (unsigned long long)first, (unsigned long long)count, rc);
    }
    free(buf);
    return NULL;
}

static void run_overlap(const char *name, bool use_dedup, bool with_reset, uint64_t default_seed)
{
    struct model_options options = {name,
                                    "lz4",
                                    true,
                                    use_dedup,
                                    use_dedup,
                                    OVERLAP_PAGES * PAGE,
                                    {"zstd", "deflate"},
                                    .backing = true};
    struct overlap o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.lock, NULL);
    o.dev = make_device(&options);
    assert_non_null(o.dev);
    o.use_templates = use_dedup;
    o.with_reset = with_reset;
    o.seed = test_seed(default_seed);
    o.ops = test_ops(DEFAULT_OPS) / 2;
    if (o.ops == 0)
        o.ops = 1;

    /* Two writers, a discarder and a reader, plus the compactor. */
    enum { N = 4 };
    static const int roles[N] = {0, 0, 1, 2};
    struct overlap_thread threads[N];
    pthread_t ids[N];
    struct background bg = {.dev = o.dev, .backing = true};
    /* the background recompressor too, as fast as it goes */
    assert_int_equal(uzram_set_recompress_rate(o.dev, 0), 0);
    assert_int_equal(uzram_set_recompress_idle(o.dev, 1), 0);
    pthread_t compactor;
    assert_int_equal(pthread_create(&compactor, NULL, compactor_main, &bg), 0);
    for (int i = 0; i < N; i++) {
        threads[i].shared = &o;
        threads[i].id = i + 1;
        threads[i].role = roles[i];
        threads[i].sequence = 0;
        datagen_rng_seed(&threads[i].rng, o.seed * 31 + (uint64_t)i);
        assert_int_equal(pthread_create(&ids[i], NULL, overlap_thread_main, &threads[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(ids[i], NULL);
    __atomic_store_n(&bg.stop, 1, __ATOMIC_RELEASE);
    pthread_join(compactor, NULL);
    if (bg.error != 0)
        overlap_fail(&o, "compactor saw error %d", bg.error);
    /* and the library's recompressor, whose pass keeps a dedup entry it works on alive */
    assert_int_equal(uzram_set_recompress_idle(o.dev, 0), 0);

    /* Quiet: every page whole, stats consistent, and a full discard brings
     * every stored-data counter back to zero. */
    if (o.failures == 0) {
        struct overlap_thread checker = {.shared = &o, .id = 0};
        uint8_t *buf = malloc(8 * PAGE);
        assert_non_null(buf);
        for (uint64_t p = 0; p < OVERLAP_PAGES; p += 8)
            overlap_read_check(&checker, p, 8, buf);
        free(buf);
        struct uzram_stats s = test_stats(o.dev);
        if (s.orig_data_size != s.pages_stored * PAGE || s.pages_stored > OVERLAP_PAGES ||
            s.same_pages > s.pages_stored || s.huge_pages + s.same_pages > s.pages_stored ||
            s.mem_used_total < s.compr_data_size || (!use_dedup && s.dup_data_size != 0))
            overlap_fail(&o,
                         "stats after the threads: pages_stored %llu orig %llu same %llu huge %llu "
                         "compr %llu mem_used_total %llu dup %llu",
                         (unsigned long long)s.pages_stored, (unsigned long long)s.orig_data_size,
                         (unsigned long long)s.same_pages, (unsigned long long)s.huge_pages,
                         (unsigned long long)s.compr_data_size,
                         (unsigned long long)s.mem_used_total, (unsigned long long)s.dup_data_size);
        int rc = uzram_discard(o.dev, 0, OVERLAP_PAGES * PAGE);
        s = test_stats(o.dev);
        if (rc != 0 || s.pages_stored != 0 || s.orig_data_size != 0 || s.compr_data_size != 0 ||
            s.same_pages != 0 || s.huge_pages != 0 || s.dup_data_size != 0 || s.mem_used_total != 0)
            overlap_fail(&o,
                         "after discarding everything (rc %d): pages_stored %llu orig %llu compr "
                         "%llu same %llu huge %llu dup %llu mem_used_total %llu",
                         rc, (unsigned long long)s.pages_stored,
                         (unsigned long long)s.orig_data_size,
                         (unsigned long long)s.compr_data_size, (unsigned long long)s.same_pages,
                         (unsigned long long)s.huge_pages, (unsigned long long)s.dup_data_size,
                         (unsigned long long)s.mem_used_total);
    }
    int failures = __atomic_load_n(&o.failures, __ATOMIC_RELAXED);
    if (failures != 0)
        fprintf(stderr, "[%s] FAILED, seed %llu (UZRAM_TEST_SEED=%llu): %s\n", name,
                (unsigned long long)o.seed, (unsigned long long)o.seed, o.message);
    uzram_destroy(o.dev);
    pthread_mutex_destroy(&o.lock);
    assert_int_equal(failures, 0);
}

static void test_concurrent_overlap(void **state)
{
    (void)state;
    run_overlap("concurrent_overlap", false, false, 3001);
}

static void test_concurrent_overlap_dedup(void **state)
{
    (void)state;
    run_overlap("concurrent_overlap_dedup", true, false, 3002);
}

static void test_concurrent_overlap_reset(void **state)
{
    (void)state;
    /* Reset racing with I/O is allowed (header): nothing may break. */
    run_overlap("concurrent_overlap_reset", true, true, 3003);
}

/* ------------------------------------------------------------------------
 * Concurrent: partial writes to shared pages
 * ---------------------------------------------------------------------- */

/*
 * Threads share every page but each owns some sectors of it: thread t owns
 * sectors t and t + SECTOR_OWNERS. Each writes only its own sectors, so the
 * engine's read-patch-write of a partial page must never lose another
 * thread's sector; each thread checks its sectors exactly, the main thread
 * checks everything at the end.
 */
#define SECTOR_OWNERS 4
#define SHARED_PAGES 16
#define SECTORS_PER_PAGE (PAGE / SECTOR)

struct sector_thread {
    struct uzram *dev;
    int id;
    uint64_t ops;
    uint64_t seed;
    uint8_t *model; /* the whole range; this thread touches only its sectors */
    int failures;
    char message[200];
};

static void *sector_thread_main(void *arg)
{
    struct sector_thread *t = arg;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, t->seed);
    uint8_t data[SECTOR];
    for (uint64_t op = 0; op < t->ops && t->failures == 0; op++) {
        uint64_t page = datagen_rng_below(&rng, SHARED_PAGES);
        uint64_t sector = (uint64_t)t->id + SECTOR_OWNERS * datagen_rng_below(&rng, 2);
        uint64_t offset = page * PAGE + sector * SECTOR;
        uint64_t r = datagen_rng_below(&rng, 10);
        if (r < 6) {
            enum datagen_kind kind = (enum datagen_kind)datagen_rng_below(&rng, DATAGEN_KIND_COUNT);
            datagen_fill(&rng, kind, data, SECTOR);
            int rc = uzram_write(t->dev, offset, data, SECTOR);
            if (rc != 0) {
                t->failures++;
                snprintf(t->message, sizeof t->message, "write at %llu returned %d",
                         (unsigned long long)offset, rc);
                break;
            }
            memcpy(t->model + offset, data, SECTOR);
        } else if (r < 7) {
            /* Zeroing one sector is a partial discard: read-patch-write too. */
            int rc = uzram_discard(t->dev, offset, SECTOR);
            if (rc != 0) {
                t->failures++;
                snprintf(t->message, sizeof t->message, "discard at %llu returned %d",
                         (unsigned long long)offset, rc);
                break;
            }
            memset(t->model + offset, 0, SECTOR);
        } else {
            int rc = uzram_read(t->dev, offset, data, SECTOR);
            if (rc != 0 || memcmp(data, t->model + offset, SECTOR) != 0) {
                t->failures++;
                snprintf(t->message, sizeof t->message,
                         "thread %d: sector at %llu (page %llu sector %llu) lost its data "
                         "(rc %d) at op %llu",
                         t->id, (unsigned long long)offset, (unsigned long long)page,
                         (unsigned long long)sector, rc, (unsigned long long)op);
                break;
            }
        }
    }
    return NULL;
}

static void run_shared_sectors(const char *name, bool use_dedup, uint64_t default_seed)
{
    struct model_options options = {
        name, "lz4", true, use_dedup, false, SHARED_PAGES * PAGE, {"zstd", NULL}, .backing = true};
    struct uzram *dev = make_device(&options);
    assert_non_null(dev);
    uint8_t *model = calloc(SHARED_PAGES, PAGE);
    assert_non_null(model);
    uint64_t seed = test_seed(default_seed);
    struct sector_thread threads[SECTOR_OWNERS];
    pthread_t ids[SECTOR_OWNERS];
    struct background bg = {.dev = dev, .backing = true};
    pthread_t compactor;
    assert_int_equal(pthread_create(&compactor, NULL, compactor_main, &bg), 0);
    for (int i = 0; i < SECTOR_OWNERS; i++) {
        threads[i] = (struct sector_thread){.dev = dev,
                                            .id = i,
                                            .seed = seed * 17 + (uint64_t)i,
                                            .ops = test_ops(DEFAULT_OPS),
                                            .model = model};
        assert_int_equal(pthread_create(&ids[i], NULL, sector_thread_main, &threads[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < SECTOR_OWNERS; i++) {
        pthread_join(ids[i], NULL);
        if (threads[i].failures) {
            fprintf(stderr, "[%s] FAILED, seed %llu (UZRAM_TEST_SEED=%llu): %s\n", name,
                    (unsigned long long)seed, (unsigned long long)seed, threads[i].message);
            failures++;
        }
    }
    __atomic_store_n(&bg.stop, 1, __ATOMIC_RELEASE);
    pthread_join(compactor, NULL);
    if (failures == 0) {
        uint8_t *got = malloc((size_t)SHARED_PAGES * PAGE);
        assert_non_null(got);
        assert_int_equal(uzram_read(dev, 0, got, (size_t)SHARED_PAGES * PAGE), 0);
        size_t at = first_difference(got, model, (size_t)SHARED_PAGES * PAGE);
        if (at != (size_t)SHARED_PAGES * PAGE) {
            fprintf(stderr, "[%s] FAILED, seed %llu: byte %zu (page %zu sector %zu) differs\n",
                    name, (unsigned long long)seed, at, at / PAGE, at % PAGE / SECTOR);
            failures++;
        }
        free(got);
    }
    assert_int_equal(bg.error, 0);
    uzram_destroy(dev);
    free(model);
    assert_int_equal(failures, 0);
}

static void test_concurrent_shared_sectors(void **state)
{
    (void)state;
    run_shared_sectors("concurrent_shared_sectors", false, 4001);
}

static void test_concurrent_shared_sectors_dedup(void **state)
{
    (void)state;
    run_shared_sectors("concurrent_shared_sectors_dedup", true, 4002);
}

/* The whole-page checker must itself tell a mix from a whole page, or the
 * overlapping tests above would prove nothing. */
static void test_overlap_checker(void **state)
{
    (void)state;
    struct overlap o;
    memset(&o, 0, sizeof o);
    uint8_t a[PAGE], b[PAGE], mix[PAGE];
    char why[160];
    unique_page(a, 7, 1, 10, 0);
    unique_page(b, 7, 2, 11, 2);
    assert_true(overlap_page_ok(&o, 7, a, why, sizeof why));
    assert_true(overlap_page_ok(&o, 7, b, why, sizeof why));
    assert_false(overlap_page_ok(&o, 8, a, why, sizeof why)); /* wrong page */
    for (size_t cut = 512; cut < PAGE; cut += 512) {
        memcpy(mix, a, cut);
        memcpy(mix + cut, b + cut, PAGE - cut);
        assert_false(overlap_page_ok(&o, 7, mix, why, sizeof why));
        memset(mix + cut, 0, PAGE - cut);
        assert_false(overlap_page_ok(&o, 7, mix, why, sizeof why));
    }
    memset(mix, 0, PAGE);
    assert_true(overlap_page_ok(&o, 7, mix, why, sizeof why));
    o.use_templates = true;
    assert_true(overlap_page_ok(&o, 3, templates[2], why, sizeof why));
    memcpy(mix, templates[2], PAGE);
    mix[PAGE - 1] ^= 1;
    assert_false(overlap_page_ok(&o, 3, mix, why, sizeof why));
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    make_dedup_set();
    make_templates();
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_lz4),
        cmocka_unit_test(test_model_lz4hc),
        cmocka_unit_test(test_model_zstd),
        cmocka_unit_test(test_model_lzo),
        cmocka_unit_test(test_model_deflate),
        cmocka_unit_test(test_model_no_same_filled),
        cmocka_unit_test(test_model_dedup),
        cmocka_unit_test(test_model_dedup_zstd_unique),
        cmocka_unit_test(test_overlap_checker),
        cmocka_unit_test(test_concurrent_disjoint),
        cmocka_unit_test(test_concurrent_disjoint_zstd),
        cmocka_unit_test(test_concurrent_disjoint_dedup),
        cmocka_unit_test(test_concurrent_overlap),
        cmocka_unit_test(test_concurrent_overlap_dedup),
        cmocka_unit_test(test_concurrent_overlap_reset),
        cmocka_unit_test(test_concurrent_shared_sectors),
        cmocka_unit_test(test_concurrent_shared_sectors_dedup),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
