/* model.c - the model of test_model.c (model.h): random operations on a device's region and
 * on a plain array beside it, each checked, and the device's statistics against the array. */
#include "model.h"
#include "pool/pool.h" /* pool_replace_grace_max */

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model_util.h"

/* Fixed page contents that dedup runs draw from, so most pages share. */
static uint8_t dedup_set[DEDUP_SET_SIZE][PAGE];

/* Record a failure with everything needed to replay it. Threads call this
 * too, so it never jumps out through cmocka; the test asserts afterwards. */
bool check(struct model *m, bool condition, const char *format, ...)
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

static bool page_is_zero(const uint8_t *page)
{
    return page[0] == 0 && memcmp(page, page + 1, PAGE - 1) == 0;
}

void make_dedup_set(void)
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

void model_buffers(struct model *m)
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

void model_free_buffers(struct model *m)
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
void verify_all(struct model *m)
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
void check_stats(struct model *m)
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
         * room, may go past it by the pool's holes and a span (uzram.h), at most
         * pool_replace_grace_max() */
        uint64_t pool = s.mem_used_total - s.dict_mem;
        uint64_t grace = m->recompress ? pool_replace_grace_max() : 0;
        if (!m->limit_enforceable && pool <= m->limit)
            m->limit_enforceable = true;
        else if (m->limit_enforceable) {
            check(m, pool <= m->limit + grace,
                  "pool memory %llu (mem_used_total - dict_mem) past mem_limit %llu (+ %llu)",
                  U(pool), U(m->limit), U(grace));
            /* ... and past it only by holes: the objects themselves stay within a span of it */
            check(m, s.compr_data_size <= m->limit + (m->recompress ? POOL_SPAN_MAX_BYTES : 0),
                  "compr_data_size %llu past mem_limit %llu (+ a span)", U(s.compr_data_size),
                  U(m->limit));
        }
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
void op_discard_all(struct model *m)
{
    snprintf(m->op_text, sizeof m->op_text, "discard whole device");
    int rc = uzram_discard(m->dev, m->base, m->length);
    if (!check(m, rc == 0, "discard of the whole device returned %d", rc))
        return;
    memset(m->data, 0, m->length);
    memset(m->state, PAGE_EMPTY, m->pages);
    check_stats(m);
}

void op_mem_limit(struct model *m)
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

void model_run(struct model *m, uint64_t ops)
{
    for (m->op = 0; m->op < ops && !m->failed; m->op++)
        model_step(m);
    if (!m->failed)
        verify_all(m);
}
