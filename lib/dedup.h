/* dedup.h - content index that lets identical pages share one object (internal).
 * Hash, candidates compared in full, reference counts, lock-free readers. */
#ifndef UZRAM_DEDUP_H
#define UZRAM_DEDUP_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"

/* Make the index for a device of `page_count` pages. */
int dedup_create(uint64_t page_count, struct dedup **out);
void dedup_destroy(struct dedup *dedup);

/* Find a stored object whose content equals `page`, or store a new one.
 * On success *id names an entry on which the caller now holds one reference
 * and *huge tells whether its object is a raw page.
 * Errors: as store_compress_page(). No lock is held while it compresses,
 * decompresses or compares. */
int dedup_store(struct uzram *dev, const void *page, uint32_t *id, bool *huge);

/* Drop one reference; the last one frees the object. */
void dedup_put(struct uzram *dev, uint32_t id);

/* Read entry `id` into `page`. The caller holds a reference. */
int dedup_read(struct uzram *dev, uint32_t id, void *page);

/* True if entry `id` stores its page raw. The caller holds a reference. */
bool dedup_is_huge(struct uzram *dev, uint32_t id);

/* Memory of the index: buckets, locks and live entries. */
uint64_t dedup_meta_size(struct dedup *dedup);

/* Compaction hooks for objects owned by entries (see struct pool_owner_ops). */
bool dedup_try_lock_owner(struct uzram *dev, uint32_t id, uint64_t handle);
void dedup_relocate(struct uzram *dev, uint32_t id, uint64_t new_handle);

/* Test switch: make every page hash to the same value, so that every stored
 * object becomes a candidate and only the full comparison tells them apart. */
void dedup_force_collisions(struct dedup *dedup, bool on);

/* Bytes of index memory per unique object (entry size). */
uint64_t dedup_entry_size(void);

#endif
