/* model.h - the model of test_model.c: a device's region and what each of its pages must
 * hold (a plain in-memory array), random operations on both checked after every step, and the
 * device's statistics checked against the model (model.c). */
#ifndef UZRAM_TESTS_MODEL_H
#define UZRAM_TESTS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define SECTOR UZRAM_SECTOR_SIZE
#define MAX_IO (64u * 1024u)
/* A request of MAX_IO at an unaligned sector spans one more page. */
#define MAX_SPAN (MAX_IO + 2 * PAGE)
#define DEDUP_SET_SIZE 8

/* What the model knows about whether a page holds a slot in the engine.
 * UNKNOWN happens where the header leaves the engine a choice (zeroing part
 * of an empty page may or may not store a zero page) or after a failed
 * request whose effect on a page cannot be told from its content. */
enum page_state { PAGE_EMPTY = 0, PAGE_STORED = 1, PAGE_UNKNOWN = 2 };

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

/* Record a failure with everything needed to replay it (false), or nothing (true). Threads
 * call it too, so it never jumps out through cmocka; the test asserts afterwards. */
bool check(struct model *m, bool condition, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* The fixed pages dedup runs draw from: made once, before any model runs. */
void make_dedup_set(void);
/* The model's buffers for its region (m->length set), and freed. */
void model_buffers(struct model *m);
void model_free_buffers(struct model *m);
/* `ops` random operations, each checked. */
void model_run(struct model *m, uint64_t ops);
/* Every page of the region read back and compared; the statistics against the model
 * (whole_device only). */
void verify_all(struct model *m);
void check_stats(struct model *m);
/* Operations a run also makes on its own: everything discarded; a memory limit set or
 * lifted. */
void op_discard_all(struct model *m);
void op_mem_limit(struct model *m);

#endif
