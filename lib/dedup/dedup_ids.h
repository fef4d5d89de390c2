/* dedup_ids.h - the dedup index's entries, stripes and id space (internal), shared by the files
 * that implement it (dedup.c: lookup, insert, references; dedup_ids.c: the id space;
 * dedup_move.c: moving entries to low ids). Nothing else includes it. */
#ifndef UZRAM_DEDUP_IDS_H
#define UZRAM_DEDUP_IDS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/backoff.h"
#include "dedup/dedup_object.h"
#include "common/sums.h"

/*
 * Each unique stored object has one entry (20 bytes), in chunks (below); an
 * entry's id is its place. Buckets hold id + 1 of the first entry of a chain
 * (0: empty); the chain is linked through `next` (also id + 1).
 *
 * `size_codec` packs the object's size and codec:
 *   bits  0..11  size - 1, 0..4095 (4095: a raw page)
 *   bits 12..15  codec id
 * `state` packs the reference count, reader pins and a moving bit:
 *   bits  0..19  references: one per page slot that shares the object, plus
 *                one per writer that is comparing it as a candidate
 *   bits 20..30  pins: readers decompressing the object right now
 *   bit  31      MOVING: compaction is copying the object elsewhere
 * Readers pin only while they hold a reference; compaction sets MOVING only
 * when there are references and no pins, so an object is never moved under
 * a reader and never freed while it moves. Recompression (dedup_replace)
 * swaps the object under MOVING the same way. A change of the references
 * also holds MOVING for a moment, so that it counts dup_data_size with the
 * size the object has at that instant (entry_change_refs). The accessors
 * below are the only way into either word.
 *
 * Locks: one stripe mutex covers its buckets (their array, and the chains)
 * and is held only to walk, change or resize them, never while compressing,
 * decompressing or comparing. id_lock covers the free-id list. move_lock is
 * held from dedup_move to dedup_move_done (one move record). Order: a page
 * slot lock, then move_lock, then a stripe, then id_lock, then a pool class
 * lock; a record's spin lock (dedup_record_begin) is a leaf.
 */
struct dedup_entry {
    uint32_t handle_low;  /* pool handle bits 0..31 */
    uint16_t handle_high; /* pool handle bits 32..47 */
    _Atomic uint16_t size_codec;
    _Atomic uint32_t state;
    uint32_t next;
    uint32_t hash_tag; /* top 32 bits of the content hash; low bits pick the bucket */
};
_Static_assert(sizeof(struct dedup_entry) == 20, "dedup entries are 20 bytes");
_Static_assert(DEDUP_HANDLE_BITS == 32 + 16, "an entry keeps handles of DEDUP_HANDLE_BITS");

#define SIZE_MASK 0xfffu
#define CODEC_SHIFT 12
_Static_assert(CODEC_SHIFT + DEDUP_CODEC_BITS == 16, "size and codec fill size_codec");

#define REF_MASK 0xfffffu
#define REF_MAX REF_MASK
#define PIN_ONE (1u << 20)
#define PIN_MASK (0x7ffu << 20)
#define MOVING (1u << 31)

static inline unsigned entry_size(const struct dedup_entry *entry)
{
    return (atomic_load_explicit(&entry->size_codec, memory_order_relaxed) & SIZE_MASK) + 1u;
}
static inline uint64_t entry_handle(const struct dedup_entry *entry)
{
    return entry->handle_low | (uint64_t)entry->handle_high << 32;
}
static inline void entry_set_handle(struct dedup_entry *entry, uint64_t handle)
{
    entry->handle_low = (uint32_t)handle;
    entry->handle_high = (uint16_t)(handle >> 32);
}
static inline void entry_get_object(const struct dedup_entry *entry, struct dedup_object *object)
{
    object->handle = entry_handle(entry);
    object->size = entry_size(entry);
    object->codec =
        (unsigned)atomic_load_explicit(&entry->size_codec, memory_order_relaxed) >> CODEC_SHIFT;
}
static inline void entry_set_object(struct dedup_entry *entry, const struct dedup_object *object)
{
    entry_set_handle(entry, object->handle);
    atomic_store_explicit(&entry->size_codec,
                          (uint16_t)((object->size - 1) | object->codec << CODEC_SHIFT),
                          memory_order_relaxed);
}

static inline uint32_t state_refs(uint32_t state)
{
    return state & REF_MASK;
}
static inline bool state_pins_full(uint32_t state)
{
    return (state & PIN_MASK) == PIN_MASK;
}
static inline bool state_pinned_or_moving(uint32_t state)
{
    return (state & (PIN_MASK | MOVING)) != 0;
}
static inline bool state_moving(uint32_t state)
{
    return (state & MOVING) != 0;
}

/*
 * Storage, sized to what is stored and grown as it fills:
 *  - entries live in chunks of 2^chunk_shift (at least 1024 entries: 20 KiB, five whole
 *    pages), mapped as ids reach them; an id is chunk number and place. The directory of
 *    chunks is sized to the disk (8 + 4 bytes a chunk, at most ~4096 chunks).
 *  - the buckets are split among the stripes by the low STRIPE_BITS of the tag: each stripe
 *    is a hash table of its own, whose bucket array doubles (under the stripe's lock alone)
 *    when its chains pass MAX_LOAD entries on average, so that no growth stops the others.
 *    A bucket costs 4 bytes for 1.5 to 3 entries.
 * Under a pool reserve (dedup_prefault) the index is made as large as the disk needs at once
 * and faulted in, and then neither grows nor gives back: a write never faults memory in.
 * dedup_trim (compaction, reset) gives back every chunk none of whose ids is handed out (past
 * the last id in use, and holes below it: bundling takes most entries out of the index, all
 * over it) and shrinks the bucket arrays of stripes that emptied. Each chunk keeps its own
 * free list, so that cutting a chunk out is one step, not a walk of every free id under
 * id_lock. A new id comes from the lowest chunk with a free one, else from a hole mapped
 * again, else from the high water mark: ids stay dense. dedup_move.c moves live entries
 * down to low ids so that the chunks they leave can be given back (dedup_move).
 */
#define STRIPE_BITS 8
#define STRIPE_COUNT (1u << STRIPE_BITS)
#define MAX_LOAD 3u
#define MIN_BUCKETS 2u
#define CHUNK_MIN_SHIFT 10
#define CHUNKS_MAX 4096u
/* What malloc adds to a block it hands out (glibc: an 8-byte header, 16-byte rounding),
 * counted with each bucket array so that meta_data_size is what the index takes. */
#define MALLOC_OVERHEAD 16u

/*
 * What a successor needs besides the entries (dedup_adopt.c), at the head of the index's memory
 * (a state file's region, or anonymous memory: one code path either way):
 *  - the chunks mapped and each stripe's bucket count, so that the adopted index holds what the
 *    old one held (meta_data_size the same);
 *  - records of entries whose object is being changed (dedup_replace, dedup_relocate): the old
 *    object, still allocated until the record is cleared, put back by adoption. An entry's
 *    handle and size are several stores: a process killed between them leaves a torn object;
 *  - the index move under way (dedup_move to dedup_move_done): its slots name `from` or `to`,
 *    and adoption points them all at `to` (its entry was whole before the record was set;
 *    `from` is given back only after the record is cleared, so no other entry takes it).
 * Each record and the move carry a sum (sums.h), stored before the id (the move) that makes
 * them one and cleared after it is let go: adoption refuses a damaged one.
 */
#define DEDUP_RECORDS 64u
struct dedup_record {
    _Atomic uint32_t lock;
    _Atomic uint32_t id; /* id + 1; 0: free */
    uint64_t object;     /* the old object: handle | size_codec << 48 */
    uint32_t sum;        /* of id and object */
    uint32_t unused;
};
#define DEDUP_RECORD_SUMMED_FROM offsetof(struct dedup_record, id)
#define DEDUP_RECORD_SUMMED_BYTES (offsetof(struct dedup_record, sum) - DEDUP_RECORD_SUMMED_FROM)
struct dedup_saved {
    _Atomic uint64_t move; /* (from + 1) | (to + 1) << 32; 0: none */
    uint64_t move_sum;     /* of `move` */
    uint64_t high_water;   /* struct dedup's */
    uint32_t masks[STRIPE_COUNT];
    _Atomic uint64_t mapped[CHUNKS_MAX / 64];
    struct dedup_record records[DEDUP_RECORDS];
};
#define DEDUP_SAVED_BYTES 4096u
_Static_assert(sizeof(struct dedup_saved) <= DEDUP_SAVED_BYTES, "the saved part fits its page");

struct dedup_stripe {
    _Alignas(64) pthread_mutex_t lock; /* one cache line a stripe */
    uint32_t *buckets;                 /* id + 1 of a chain's first entry; 0: empty */
    uint32_t bucket_mask;              /* bucket count - 1 (a power of two) */
    uint32_t entries;                  /* linked into this stripe's chains */
    /* How many entries were ever linked into this stripe, so a writer can tell whether one
     * arrived while it was compressing. */
    uint64_t inserts;
};

struct dedup {
    struct dedup_stripe stripes[STRIPE_COUNT];
    struct dedup_object_ops ops;
    uint64_t capacity;    /* ids below this may be handed out */
    unsigned chunk_shift; /* entries per chunk: 1 << chunk_shift */
    size_t chunk_count;
    _Atomic(struct dedup_entry *) *chunks; /* NULL: not mapped */

    pthread_mutex_t id_lock;
    uint32_t *chunk_used; /* ids handed out in each chunk */
    uint32_t *chunk_free; /* each chunk's free ids: id + 1 of the first, linked through next */
    size_t free_low;      /* no chunk below this one has a free id on its list */
    uint64_t high_water;  /* ids below this have been handed out */
    uint64_t holes;       /* chunks below the last one in use that dedup_trim unmapped */

    struct dedup_saved *saved;
    struct dedup_file file;    /* fd -1: anonymous memory */
    pthread_mutex_t move_lock; /* one index move at a time: one move record */

    _Atomic bool reserved; /* made full size and faulted in: no growth, no giveback */
    _Atomic uint64_t mem_bytes;
    _Atomic uint64_t live_entries;
    _Atomic uint64_t dup_data_size;
    _Atomic uint64_t hash_collisions;
#ifdef UZRAM_TEST_HOOKS
    _Atomic bool force_collisions;
#endif
};

static inline size_t chunk_bytes(const struct dedup *dedup)
{
    return sizeof(struct dedup_entry) << dedup->chunk_shift;
}

static inline struct dedup_entry *entry_at(struct dedup *dedup, uint32_t id)
{
    struct dedup_entry *chunk =
        atomic_load_explicit(&dedup->chunks[id >> dedup->chunk_shift], memory_order_acquire);
    return &chunk[id & ((1u << dedup->chunk_shift) - 1)];
}

/* A wait on a word of the index (an entry's state, a record's lock): with a deadline when the
 * index is in a state file (backoff.h); one that passed it counted there. */
static inline struct lock_wait dedup_lock_wait(const struct dedup *dedup)
{
    return (struct lock_wait){.bounded = dedup->file.fd >= 0};
}
static inline void dedup_lock_timeout(struct dedup *dedup)
{
    if (dedup->file.lock_timeouts)
        atomic_fetch_add_explicit(dedup->file.lock_timeouts, 1, memory_order_relaxed);
}

static inline uint32_t tag_bucket(const struct dedup_stripe *stripe, uint32_t tag)
{
    return (tag >> STRIPE_BITS) & stripe->bucket_mask;
}

static inline struct dedup_stripe *tag_stripe(struct dedup *dedup, uint32_t tag)
{
    return &dedup->stripes[tag & (STRIPE_COUNT - 1)];
}

/* ---- the id space (dedup_ids.c); id_lock held by the caller where said ---------------- */

/* Map chunk `c` if it is not (in the file: allocated first when it is limited). id_lock held
 * (or the index not yet shared). -ENOMEM, -ENOSPC. */
int dedup_chunk_map(struct dedup *dedup, size_t c);
/* Give chunk `c` back, none of whose ids is handed out (in the file: punched out). id_lock
 * held. */
void dedup_chunk_unmap(struct dedup *dedup, size_t c);
/* The saved part mapped (dedup_create_in); and it and every chunk unmapped, the file left as it
 * is for a successor (dedup_destroy). */
int dedup_saved_map(struct dedup *dedup);
void dedup_ids_unmap(struct dedup *dedup);
/* Adoption (dedup_adopt.c): map the chunks the saved part names; then, once the entries named
 * have their references, hand out the others: free lists, counts and holes, what the file
 * holds outside the chunks mapped punched out. */
int dedup_ids_adopt_map(struct dedup *dedup);
void dedup_ids_adopt_free(struct dedup *dedup);
/* Hand out a free id in a chunk below `below` (chunk_count: anywhere): the lowest chunk with
 * a free id, else a hole mapped again, else (below == chunk_count) the high water mark.
 * UINT32_MAX if none, *rc then -ENOMEM (none left, or no memory to map a chunk) or -ENOSPC
 * (a state file's tmpfs is full). Takes id_lock. */
uint32_t dedup_id_alloc(struct dedup *dedup, size_t below, int *rc);
/* Give back id `id`. Takes id_lock. */
void dedup_id_free(struct dedup *dedup, uint32_t id);
/* Resize a stripe's buckets (dedup.c). Stripe locked. */
bool dedup_stripe_resize(struct dedup *dedup, struct dedup_stripe *stripe, uint32_t mask);
/* Begin and end a change of entry `id`'s object (its old one in the record `*record`). NULL:
 * the record's lock, a word of the state file, stayed held past the deadline (counted). */
struct dedup_record *dedup_record_begin(struct dedup *dedup, uint32_t id);
void dedup_record_end(struct dedup_record *record);
/* Map every hole again, its ids free (dedup_prefault). id_lock held. */
void dedup_holes_fill(struct dedup *dedup);
/* Unmap every chunk none of whose ids is handed out, but the first (dedup_trim): past the
 * last one in use, and below it. Steps bounded by the chunk count, not by the free ids.
 * id_lock held. */
void dedup_ids_trim(struct dedup *dedup);

#endif
