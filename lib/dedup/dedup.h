/* dedup.h - content index that lets identical pages share one stored object (internal).
 * It knows objects only as the store hands them over, and asks the store to load and free them. */
#ifndef UZRAM_DEDUP_H
#define UZRAM_DEDUP_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup/dedup_object.h"

/*
 * The index maps page contents to entries; an entry owns one stored object
 * and counts the references to it (one per page slot that shares it).
 *
 * The write path, as store.c drives it, runs one way:
 *     dedup_find()     an equal page is stored: take a reference, done;
 *     dedup_reserve()  else reserve the new entry's id (the pool needs the
 *                      object's owner when it allocates);
 *     (the store compresses the page and allocates its object)
 *     dedup_insert()   link the entry, which now owns the object.
 * Neither call holds an index lock while the store compresses, loads or
 * compares: a stripe lock only covers walking or changing a chain.
 *
 * Thread safety: every function may be called from any number of threads.
 * Lock order: a caller's page slot lock, then a stripe, then the id lock;
 * the ops below are called with no index lock held.
 */

struct dedup;

/* Where the index keeps its memory in a device's state file: dedup_file_bytes(page_count)
 * bytes of `fd` from `offset` (a 4 KiB boundary), the entries' chunks mapped from there (shared)
 * instead of anonymous memory. `limited`: a tmpfs with a size, where every part is allocated
 * with fallocate() before it is touched (a full tmpfs then fails a write, never faults)
 * (struct dedup_file: dedup_object.h.) */
uint64_t dedup_file_bytes(uint64_t page_count);
/* Make the index for a device of `page_count` pages: small, grown as entries are added (up
 * to one a page, plus writers in flight), its memory in `file` (NULL: anonymous memory).
 * Errors: -ENOMEM; -ENOSPC when the part made at once cannot be allocated in the file. */
int dedup_create_in(uint64_t page_count, const struct dedup_object_ops *ops,
                    const struct dedup_file *file, struct dedup **out);

/* Adoption (dedup_adopt.c) of an index made with dedup_create_in() on a file a process that
 * ended or was killed left. The entries are the file's; everything else is made again from
 * them and from the page slots that name them: dedup_adopt_begin() puts back each object
 * half changed and forgets references, pins and moves; the caller then calls
 * dedup_adopt_ref() for each slot that names an entry; dedup_adopt_finish() links the
 * entries named and frees the others (their objects were never adopted: the pool frees them).
 * Errors: -EUCLEAN a damaged change or move record (sums_damage says which), -EINVAL (the file
 * names what cannot be), -ENOMEM, -ENOSPC. */
int dedup_adopt_begin(struct dedup *dedup);
/* A slot names entry *id: a reference counted. An index move was under way: a slot that names
 * its old id names its new one (*id changes: the caller points the slot at it). Returns 1 with
 * *object filled for the entry's first reference (the caller adopts the object, the entry its
 * owner), 0 for a further one, -EINVAL for an id no entry can have. */
int dedup_adopt_ref(struct dedup *dedup, uint32_t *id, struct dedup_object *object);
/* The chains, free ids and counts made again. True with *id and *object set if a move was
 * under way whose entry is named: its object's owner in the pool is to be set to it. */
int dedup_adopt_finish(struct dedup *dedup, bool *moved, uint32_t *id, struct dedup_object *object);
void dedup_destroy(struct dedup *dedup);

/* Make the index as large as `page_count` pages can need and fault it in (under a pool
 * reserve: a swap device's server must not fault memory in while it serves a write). From
 * then on it neither grows nor gives memory back. */
void dedup_prefault(struct dedup *dedup);

/* Give back what the index holds past what its entries need (compaction, reset): the
 * entry chunks past the last id in use, and bucket arrays larger than their entries need.
 * Nothing after dedup_prefault(). */
void dedup_trim(struct dedup *dedup);

/* Index compaction (dedup_move.c; the store's table walk, compact_index.c, drives it): the
 * entries at and past dedup_compact_from() (UINT32_MAX: none, or under a reserve) are worth
 * moving down, so that dedup_trim() can give their chunks back. dedup_move() moves entry
 * `id` to a free id in a lower chunk, stored in *moved, if its references are exactly
 * `refs`, no reader decodes it and nothing moves it: the caller holds every page slot that
 * names it locked, `refs` of them, and points them at *moved before it unlocks them. The
 * object's owner follows (ops->rehome). Errors: -EBUSY (another reference: a writer, a
 * reader, recompression or writeback holds one; try later), -ENOSPC (no lower id free, or
 * no memory to map one). */
uint32_t dedup_compact_from(struct dedup *dedup);
int dedup_move(struct dedup *dedup, uint32_t id, uint32_t refs, uint32_t *moved);
/* After a dedup_move() that returned 0, once every slot names *moved: old id `id` given
 * back. Until then the move is recorded (a successor adopting the index finishes it), and no
 * other move begins. */
void dedup_move_done(struct dedup *dedup, uint32_t id);

/* Where a new entry for a page goes (its chain follows from the tag): filled by
 * dedup_find() when nothing equal is stored, carried through dedup_reserve() to
 * dedup_insert(). */
struct dedup_lookup {
    uint64_t inserts_seen; /* the stripe's insert count when the search began */
    uint32_t tag;          /* top bits of the content hash */
    uint32_t id;           /* the new entry, once reserved */
};

/* Look for a stored object equal to `page`: hash it, then compare every
 * candidate with the same hash in full. Returns true with one reference
 * taken on entry *id; false if none is equal, with `lookup` filled. */
bool dedup_find(struct dedup *dedup, const void *page, struct dedup_lookup *lookup, uint32_t *id);

/* Reserve lookup->id for a new entry, so that its object can be allocated
 * with the entry as owner. Errors: -ENOMEM (no id left, no memory to map it), -ENOSPC (a
 * state file's tmpfs is full). */
int dedup_reserve(struct dedup *dedup, struct dedup_lookup *lookup);

/* Give back a reserved id whose object could not be made. */
void dedup_cancel(struct dedup *dedup, const struct dedup_lookup *lookup);

/* Make the reserved entry own `object`, made from `page`, and link it.
 * If another writer linked an equal page meanwhile, its entry is used and
 * `object` is freed (through ops->free) instead of keeping two copies.
 * Returns the id of the entry on which the caller now holds a reference. */
uint32_t dedup_insert(struct dedup *dedup, const void *page, const struct dedup_lookup *lookup,
                      const struct dedup_object *object);

/* Drop one reference; the last one unlinks the entry and frees its object. (In a state file,
 * a word held past its deadline leaves the reference or the object where it is: memory, not
 * data, lost until the next adoption.) */
void dedup_put(struct dedup *dedup, uint32_t id);

/* Bundling (recompress_bundle.c): true if the caller's reference (a locked page slot's) is
 * entry `id`'s only one, at this instant. */
bool dedup_sole(struct dedup *dedup, uint32_t id);

/* Take entry `id` from the index's other users if the caller's reference (a locked page
 * slot's, which names it) is its only one, no reader is decoding it, and accept(arg, object)
 * agrees (it runs with the object held still: compare it there). True: the entry is held
 * (MOVING) with its object whole until dedup_drop_taken(), which the caller calls once its
 * slot names the page's new place; a process killed in between leaves the slot naming a whole
 * entry, or naming the new place with the entry named by no slot (adoption drops it). False
 * (nothing changed) if another reference, a reader, a move or `accept` stands in the way. A
 * shared entry is never taken. */
bool dedup_take_sole(struct dedup *dedup, uint32_t id,
                     bool (*accept)(void *arg, const struct dedup_object *object), void *arg);
/* The entry dedup_take_sole() took, its slot naming something else now (its lock still held):
 * unlinked, its object freed (through ops->free) and its id given back; a later write of the
 * same content makes a new entry. */
void dedup_drop_taken(struct dedup *dedup, uint32_t id);
/* The entry dedup_take_sole() took given back as it was, its slot still naming it (the slot
 * could not be changed). */
void dedup_untake(struct dedup *dedup, uint32_t id);

/* Read entry `id` into `page` (through ops->load). The caller holds a
 * reference. */
int dedup_read(struct dedup *dedup, uint32_t id, void *page);

/* dedup_read(), also telling which object was read (its handle may change
 * as soon as this returns: compaction). */
int dedup_read_object(struct dedup *dedup, uint32_t id, void *page, struct dedup_object *object);

/* Take another reference on entry `id`, on which the caller holds one
 * (e.g. through a locked page slot). False if the count is full. */
bool dedup_get(struct dedup *dedup, uint32_t id);

/* Call fn(arg, object) with entry `id`'s object pinned (compaction and
 * replacement wait meanwhile), and return what it returns; -EIO without
 * calling it when the entry's state, a word of a state file, stayed held past
 * its deadline (backoff.h), as dedup_read() then. The caller holds a
 * reference. */
int dedup_with_object(struct dedup *dedup, uint32_t id,
                      int (*fn)(void *arg, const struct dedup_object *object), void *arg);

/* Recompression and writeback: make entry `id` (the caller holds a
 * reference) own `object` instead of its current one, if that still has the
 * size and codec of `expected` (another recompression may have come first;
 * compaction may have moved it). Waits for readers decoding it to finish.
 * On success the old object is stored in *old for the caller to free,
 * dup_data_size follows the new size, and true is returned; else `object`
 * is the caller's to free. The content is the same, so dedup keeps finding
 * the entry by its hash. False too (nothing changed) when a word of the state
 * file stayed held past its deadline. */
bool dedup_replace(struct dedup *dedup, uint32_t id, const struct dedup_object *expected,
                   const struct dedup_object *object, struct dedup_object *old);

/* True if entry `id` stores its page raw. The caller holds a reference. */
bool dedup_is_huge(struct dedup *dedup, uint32_t id);

/* The index's counters (see struct uzram_stats): bytes that references
 * past the first did not have to store, hash matches whose content
 * differed, the memory the index holds (everything it allocated: entry
 * chunks, buckets, locks, the chunk directory), and its entries (unique
 * objects). */
uint64_t dedup_dup_data_size(struct dedup *dedup);
uint64_t dedup_hash_collisions(struct dedup *dedup);
uint64_t dedup_meta_size(struct dedup *dedup);
uint64_t dedup_entries(struct dedup *dedup);
/* Zero the cumulative counter (hash collisions), as uzram_reset() does. */
void dedup_reset_counters(struct dedup *dedup);

/* Compaction hooks for objects owned by entries (see struct pool_owner_ops). */
bool dedup_try_lock_owner(struct dedup *dedup, uint32_t id, uint64_t handle);
bool dedup_relocate(struct dedup *dedup, uint32_t id, uint64_t new_handle);

#ifdef UZRAM_TEST_HOOKS
/* Test switch (test archive only): make every page hash to the same value,
 * so that every stored object becomes a candidate and only the full
 * comparison tells them apart. */
void dedup_force_collisions(struct dedup *dedup, bool on);
#endif

/* What a unique object costs the index on average (its entry and its share of a bucket),
 * for the estimators. */
uint64_t dedup_entry_cost(void);
#ifdef UZRAM_TEST_HOOKS
/* Bytes of one entry (test archive only). */
uint64_t dedup_entry_size(void);
#endif

#endif
