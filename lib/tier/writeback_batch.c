/* writeback_batch.c - a batch of pages on their way to the backing store (see
 * writeback_batch.h): up to BATCH_OBJECTS objects copied, appended and written with one
 * pwrite, then published page by page; writeback_limit checked as each page joins. */
#include "tier/writeback_batch.h"

#include <errno.h>
#include <stdlib.h>

#include "backing/backing.h"
#include "device/device.h"
#include "common/fault.h"
#include "tier/writeback_page.h"

/* Objects per batch: one pwrite of at most BACKING_BATCH_BLOCKS blocks. */
#define BATCH_OBJECTS 64u
_Static_assert(BATCH_OBJECTS + 2 <= BACKING_BATCH_BLOCKS, "a batch of pages fits the buffer");

/* Both allocations are tried (each a fault point) before either is checked. */
int batch_buffers_make(struct batch_buffers *buffers)
{
    buffers->copy = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(UZRAM_PAGE_SIZE);
    buffers->items =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(BATCH_OBJECTS, sizeof *buffers->items);
    if (buffers->copy && buffers->items)
        return 0;
    batch_buffers_free(buffers);
    return -ENOMEM;
}

void batch_buffers_free(struct batch_buffers *buffers)
{
    free(buffers->copy);
    free(buffers->items);
    *buffers = (struct batch_buffers){0};
}

/* ---- writeback_limit ----------------------------------------------------------- */

/* Whether writeback_limit lets one more page go, `pending` pages being on their way: checked
 * page by page, as zram does, so that a change of the limit counts at once. */
static bool limit_allows(struct writeback_limit *limit, uint64_t pending)
{
    return !atomic_load(&limit->enabled) || atomic_load(&limit->pages) > pending;
}

static void limit_take(struct writeback_limit *limit, uint64_t pages)
{
    if (!atomic_load(&limit->enabled))
        return;
    uint64_t left = atomic_load(&limit->pages);
    while (!atomic_compare_exchange_weak(&limit->pages, &left, left > pages ? left - pages : 0))
        ;
}

/* ---- batches ------------------------------------------------------------------ */

static unsigned item_size(const struct writeback_item *item)
{
    return item->state == SLOT_DEDUP ? item->entry.size : item->size;
}

int batch_write(struct batch *batch)
{
    int rc = backing_flush(batch->backing);
    unsigned published = 0;
    for (unsigned i = 0; i < batch->count; i++) {
        struct writeback_item *item = &batch->buffers->items[i];
        if (rc == 0 &&
            writeback_page_publish(batch->dev, item, backing_appended(batch->backing, item->offset),
                                   batch->patient)) {
            published++;
            continue;
        }
        if (rc < 0)
            writeback_page_drop(batch->dev, item);
        backing_free(batch->backing, item->offset, item_size(item));
    }
    backing_end_batch(batch->backing, rc == 0);
    if (rc == -ENOSPC)
        counter_add(&batch->dev->events->bd_nospace, 1);
    else if (rc < 0)
        counter_add(&batch->dev->events->bd_write_errors, 1);
    counter_add(&batch->dev->events->bd_writes, published);
    if (!batch->relocating)
        limit_take(batch->limit, published);
    batch->written += published;
    batch->count = 0;
    return rc;
}

/* Whether the batch already carries dedup entry `id` (its pages share one
 * object, written once). */
static bool batch_has_entry(const struct batch *batch, uint64_t id)
{
    const struct writeback_item *items = batch->buffers->items;
    for (unsigned i = 0; i < batch->count; i++)
        if (items[i].state == SLOT_DEDUP && items[i].value == id)
            return true;
    return false;
}

int batch_add(struct batch *batch, uint64_t index, const struct writeback_filter *filter,
              uint32_t now)
{
    struct uzram *dev = batch->dev;
    struct batch_buffers *buffers = batch->buffers;
    if (!batch->relocating && !limit_allows(batch->limit, batch->count))
        return -EIO;
    struct writeback_item *item = &buffers->items[batch->count];
    int size = writeback_page_take(dev, index, filter, now, batch->patient, item, buffers->copy);
    if (size <= 0)
        return 0;
    if (item->state == SLOT_DEDUP && batch_has_entry(batch, item->value)) {
        writeback_page_drop(dev, item);
        return 0;
    }
    for (;;) {
        int rc = backing_append(batch->backing, buffers->copy, (unsigned)size, batch->relocating,
                                &item->offset);
        if (rc == 0)
            break;
        if (rc == -EAGAIN && batch->count > 0) {
            /* The batch's run of blocks cannot grow: write it, go on. */
            struct writeback_item waiting = *item;
            rc = batch_write(batch);
            item = &buffers->items[0];
            *item = waiting;
            if (rc == 0)
                continue;
        } else if (rc == -ENOSPC) {
            counter_add(&dev->events->bd_nospace, 1);
        }
        writeback_page_drop(dev, item);
        return rc == -EAGAIN ? -ENOSPC : rc;
    }
    batch->count++;
    if (batch->count == BATCH_OBJECTS) {
        int rc = batch_write(batch);
        if (rc < 0)
            return rc;
    }
    return 1;
}

int batch_finish(struct batch *batch, int rc)
{
    int written = batch->count ? batch_write(batch) : 0;
    return rc < 0 ? rc : written;
}

int batch_start(struct uzram *dev, struct batch_buffers *buffers, struct writeback_limit *limit,
                bool patient, struct batch *batch)
{
    *batch = (struct batch){
        .dev = dev,
        .backing = device_backing(dev),
        .buffers = buffers,
        .limit = limit,
        .patient = patient,
    };
    return batch->backing ? 0 : -ENODEV;
}
