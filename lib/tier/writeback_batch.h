/* writeback_batch.h - a batch of pages on their way to the backing store (internal;
 * writeback_batch.c): each page's object copied (writeback_page.c) and appended to the
 * backing store's batch buffer, the batch written with one pwrite, and each copy put in its page's
 * place; and writeback_limit, which a batch checks page by page. The passes that fill batches,
 * under writeback's lock, are writeback.c's. */
#ifndef UZRAM_WRITEBACK_BATCH_H
#define UZRAM_WRITEBACK_BATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct uzram;
struct backing;
struct writeback_filter;
struct writeback_item;

/* What batches work in, made when a backing store is attached: an object's bytes on their
 * way, and the batch's items. */
struct batch_buffers {
    unsigned char *copy;
    struct writeback_item *items;
};
/* Make them (0 or -ENOMEM, nothing made); free them (either may be NULL). */
int batch_buffers_make(struct batch_buffers *buffers);
void batch_buffers_free(struct batch_buffers *buffers);

/* writeback_limit (zram's): while `enabled`, writeback writes at most `pages` more pages. */
struct writeback_limit {
    _Atomic uint64_t pages;
    _Atomic bool enabled;
};

/* A batch being filled, under writeback's lock. */
struct batch {
    struct uzram *dev;
    struct backing *backing;
    struct batch_buffers *buffers;
    struct writeback_limit *limit;
    bool patient;     /* wait a while for a locked slot (see writeback_page_take) */
    bool relocating;  /* compaction of the backing store: not held to writeback_limit */
    unsigned count;   /* items appended */
    uint64_t written; /* pages published so far */
};

/* A batch on the backing store, or -ENODEV without one. */
int batch_start(struct uzram *dev, struct batch_buffers *buffers, struct writeback_limit *limit,
                bool patient, struct batch *batch);

/* Add page `index` to the batch if `filter` takes it, writing the batch when
 * it is full. Returns 1 if added, 0 if passed over, or a negative errno:
 * -EIO writeback_limit used up, -ENOSPC the backing store is full, or the write's
 * error. */
int batch_add(struct batch *batch, uint64_t index, const struct writeback_filter *filter,
              uint32_t now);

/* Write the batch and put each copy in its page's place. Returns 0 or the
 * write's -errno (the pages all stay in memory). */
int batch_write(struct batch *batch);

/* Write what the batch holds (an error then is the batch's answer): `rc`, or the write's. */
int batch_finish(struct batch *batch, int rc);

/* Whether a pass has just written a batch (batch_add() returned `added`): it may let go of
 * the lock now. */
static inline bool batch_went_out(const struct batch *batch, int added)
{
    return added > 0 && batch->count == 0;
}

#endif
