/* dedup_object.h - what the dedup index knows of the objects its entries own, what it asks
 * of the store that holds them, and where a state file keeps it (internal; dedup.h and dedup_ids.h
 * include it). */
#ifndef UZRAM_DEDUP_OBJECT_H
#define UZRAM_DEDUP_OBJECT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* An object as the store made it: its pool handle (below 2^DEDUP_HANDLE_BITS),
 * its size (1..4096; 4096: a raw page) and the id of the codec configuration
 * that made it (below 2^DEDUP_CODEC_BITS). */
#define DEDUP_HANDLE_BITS 48
#define DEDUP_CODEC_BITS 4
struct dedup_object {
    uint64_t handle;
    unsigned size;
    unsigned codec;
};

/* What the index asks of the store that owns the objects' bytes, the way
 * the pool asks the owners of its objects (struct pool_owner_ops). */
struct dedup_object_ops {
    /* Put the page that `object` holds into `page` (4096 bytes). Returns 0
     * or a negative errno. The entry is pinned: compaction leaves it alone. */
    int (*load)(void *arg, const struct dedup_object *object, void *page);
    /* Free `object`: its entry's last reference is gone. */
    void (*free)(void *arg, const struct dedup_object *object);
    /* `object` now belongs to entry `id` (dedup_move): make its owner in the pool follow. */
    void (*rehome)(void *arg, const struct dedup_object *object, uint32_t id);
    void *arg;
};

/* Where the index keeps its memory in a state file (dedup.h's dedup_create_in). */
struct dedup_file {
    int fd;
    uint64_t offset;
    bool limited;
    bool adopt; /* what the file holds is adopted (dedup_adopt_begin), else cleared */
    /* where a wait on a word of the file that passed its deadline is counted (backoff.h) */
    _Atomic uint64_t *lock_timeouts;
};

#endif
