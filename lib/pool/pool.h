/* pool.h - size-class allocator for compressed objects (internal).
 * The job zsmalloc does for zram: pack objects densely into spans of pages. */
#ifndef UZRAM_POOL_H
#define UZRAM_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Objects of 1..POOL_MAX_OBJECT bytes live in size classes; each class packs
 * its objects into spans of 1..16 contiguous 4 KiB pages, the span length
 * chosen per class to waste the least tail space. An object of exactly
 * 4096 bytes (a huge page) gets a span of one page of its own.
 *
 * Every object carries an `owner` (an opaque 64-bit value given at alloc
 * time, never 0) so that compaction can find who refers to it and ask that
 * owner to let it be moved.
 *
 * Handles are opaque non-zero values below 2^47. A handle stays valid until
 * pool_free() or until compaction moves the object (which it only does while
 * the owner is locked through the callbacks below).
 *
 * Thread safety: every function may be called from any number of threads.
 * Lock order: a class lock is taken after any page slot or dedup lock a caller
 * holds; compaction, which holds a class lock while it asks owners, only
 * ever *tries* owner locks, so it cannot deadlock.
 */

#define POOL_MAX_OBJECT 4096u
#define POOL_HANDLE_BITS 47

struct pool;

int pool_create(struct pool **out);
void pool_destroy(struct pool *pool);

/* ---- a pool in a state file (state.c) ----
 * Put the pool's memory in the file `fd` from byte `offset` (POOL_FILE_BYTES of it), and
 * keep the span directory `span_dir` (POOL_WINDOWS entries, in the file too from byte
 * `dir_offset`) up to date:
 * before any allocation. Windows of emptied spans are punched out of the file. */
#define POOL_WINDOWS ((uint64_t)1 << 26)
#define POOL_FILE_BYTES (POOL_WINDOWS * POOL_SPAN_MAX_BYTES)
void pool_set_file(struct pool *pool, int fd, uint64_t offset, _Atomic uint32_t *span_dir,
                   uint64_t dir_offset);
/* Adoption of a pool left in a state file (pool_adopt.c): each live object named once, by
 * handle, owner and size (-EINVAL, *why saying which: the directory knows no such object, or
 * the object was named already; -EUCLEAN a damaged directory entry, sums.h; -ENOMEM), then
 * pool_adopt_finish() makes the spans' free lists, the accounting and the free windows, keeps
 * the whole windows with no live object in the span cache (a reserve the last owner left) and
 * punches every other page with no live object out of the file. */
int pool_adopt_object(struct pool *pool, uint64_t handle, uint64_t owner, size_t size,
                      const char **why);
int pool_adopt_finish(struct pool *pool);

/* Allocate an object of `size` bytes (1..4096) owned by `owner` (non-zero), taking the pool
 * at most `grace` bytes past its limit (and its group's): 0, or pool_replace_grace() for an
 * object that replaces larger ones, freed right after. POOL_SPAN_MAX_BYTES, the largest span,
 * lets any object through at the limit. Errors: -ENOSPC the pool would exceed its limit by
 * more, -ENOMEM, -EINVAL. */
#define POOL_SPAN_MAX_BYTES (16u * 4096u)
int pool_alloc_over(struct pool *pool, size_t size, uint64_t owner, uint64_t grace,
                    uint64_t *handle);
static inline int pool_alloc(struct pool *pool, size_t size, uint64_t owner, uint64_t *handle)
{
    return pool_alloc_over(pool, size, owner, 0, handle);
}

/* ---- at the limit (pool_limit.c) ----
 * The bytes of the free objects in the spans of every class: the holes freed objects left,
 * which compaction gathers (all but less than a span of each class). */
uint64_t pool_hole_bytes(struct pool *pool);
/* The grace of an object that replaces larger ones (recompression, bundling), once a
 * compaction left the pool still at its limit: a span, and the holes the pool has, at most
 * pool_replace_grace_max(). Such objects thus never take the pool more than
 * pool_replace_grace_max() bytes past its limit (one span, and one span of each class: 5.7 MiB),
 * and past it only by holes and a span. */
uint64_t pool_replace_grace(struct pool *pool);
uint64_t pool_replace_grace_max(void);
/* Whether a write the limit refused should compact the pool and try again: at most one
 * writer of the pool every 100 ms (it claims the turn: the others do not wait), and only when
 * holes are an eighth of the pool's memory or more. */
bool pool_compact_due(struct pool *pool);

/* Free an object. The caller must be the only one still using the handle. */
void pool_free(struct pool *pool, uint64_t handle);

/* Name `owner` (non-zero) as the owner of object `handle` from now on (its owner changed
 * name: dedup_move). Under the object's class lock, so that no compaction still asks the old
 * owner once it returns. Errors: -EINVAL (no such object). */
int pool_set_owner(struct pool *pool, uint64_t handle, uint64_t owner);

/* Address of the object's bytes. Valid until the object is freed or moved. */
void *pool_map(struct pool *pool, uint64_t handle);

/* Span cache: a span that becomes empty in pool_free() keeps its pages
 * resident, up to POOL_SPAN_CACHE_BYTES per pool (with a reserve, up to the
 * reserve's size: pool_reserve.h), and the next span made
 * takes them, so a device that is written, trimmed and written again does
 * not fault its memory in again (1.1-1.6 us a page). The cache is NOT in
 * pool_mem_used() (which counts spans holding objects, as zsmalloc's pages
 * do) but in pool_span_cache_bytes(); it never takes pool memory, cache
 * included, above the limit (near it the cache is emptied first), and
 * pool_compact() empties it. */
#define POOL_SPAN_CACHE_BYTES (16u << 20)
uint64_t pool_span_cache_bytes(struct pool *pool); /* cached_mem of debug_stat */
/* The most the reserve (pool_reserve.h) keeps in the span cache besides. */
#define POOL_RESERVE_MAX (64ull << 20)

/* Memory limit in bytes of pool pages (0: none); checked when a new span is
 * needed. */
void pool_set_limit(struct pool *pool, uint64_t bytes);

/* Charge the pool's memory to `group` too, whose limit then applies as well; once, while
 * the pool holds no memory (else -EBUSY). `fixed` bytes the caller charged already (the
 * device's page table) go back with the pool's: pool_destroy() gives the group its memory
 * back and leaves it. */
struct uzram_group;
int pool_set_group(struct pool *pool, struct uzram_group *group, uint64_t fixed);

/* Bytes of pages the pool holds now, the peak, and (test archive only) pages given back by
 * compaction since create. */
uint64_t pool_mem_used(struct pool *pool);
uint64_t pool_mem_used_max(struct pool *pool);
void pool_reset_mem_used_max(struct pool *pool);
#ifdef UZRAM_TEST_HOOKS
uint64_t pool_pages_compacted(struct pool *pool);
#endif

/* Compaction callbacks. try_lock_owner() is called with a class lock held:
 * it must not block; it returns true only if it locked `owner` AND the owner
 * still refers to `handle`. relocate() is then called with the object already
 * copied to `new_handle`: it makes the owner refer to new_handle and unlocks
 * the owner. Compaction picks the destination before it locks an owner, so
 * a locked owner is moved unless relocate() returns false (a lock word of a
 * state file stayed held: the owner unlocked, still naming `old_handle`; the
 * copy is freed). */
struct pool_owner_ops {
    bool (*try_lock_owner)(void *arg, uint64_t owner, uint64_t handle);
    bool (*relocate)(void *arg, uint64_t owner, uint64_t old_handle, uint64_t new_handle);
    void *arg;
};

/* Move objects out of the sparsest spans of each class into the fullest
 * ones and give the pages of spans that become empty back to the OS.
 * Works in bounded steps (the class lock is dropped between source spans)
 * so writers are not stalled. Returns the number of pages freed. */
uint64_t pool_compact(struct pool *pool, const struct pool_owner_ops *ops);

/* Memory held per object of `size` bytes in a full span of its class
 * (class rounding, header and tail waste included). */
double pool_object_cost(size_t size);

#endif
