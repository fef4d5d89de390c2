/* bundle.c - bundles of neighbouring pages compressed as one object (bundle.h): their pieces in
 * the pool, their members and holds, reads through a per-thread cache of the last bundle
 * decompressed, the compaction of their pieces, and their counters. */
#include "bundle/bundle.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bundle/bundle_records.h"
#include "codec/comp.h"
#include "device/device.h"
#include "common/fault.h"
#include "pool/pool.h"
#include "common/sums.h"

/* A bundle's record, in a region of bundle_records.c (in the state file when the device has
 * one): 88 bytes for a bundle of up to 4 pieces, 120 up to 8, 184 up to 16, counted in
 * meta_data_size (bundle_mem) since it is memory the stored pages take beside the pool, as the
 * dedup index's entries are. Byte counts fit 32 bits (16 pages at most). lock, refs and live are
 * made again at adoption (a killed process's holds and lock are not trusted), and serial. */
struct bundle {
    _Atomic uint32_t lock; /* spin lock: pieces[] against compaction's moves */
    _Atomic uint16_t refs; /* live members + holds */
    _Atomic uint16_t live; /* bit k: place k is a live member */
    uint32_t length;       /* bytes of the frame */
    uint32_t saved;        /* what this bundle counts in bundle_saved_bytes */
    uint32_t index;        /* its record's index in its region (bundle_records.h) */
    uint16_t codec;        /* its codec id (the bundle holds one user of it) */
    uint8_t count;         /* pages in the frame */
    uint8_t piece_count;
    uint64_t serial; /* names the content for the per-thread cache, never reused */
    uint64_t first;  /* page k is page first + offsets[k] */
    uint8_t offsets[BUNDLE_MAX_PAGES];
    uint64_t pieces[]; /* piece_count pool handles: 4096 bytes each, the last the rest */
};
/* A word of pieces[]: the handle (below 2^47) and, in bits 48..63, 16 check bits over the
 * handle, the piece's place and the record (piece_word), stored in one word with it, so that
 * adoption finds a damaged one and a kill never leaves one half written. */
#define PIECE_HANDLE_MASK ((1ull << 48) - 1)
_Static_assert(POOL_HANDLE_BITS <= 48, "a handle leaves a piece's top 16 bits free");
_Static_assert(sizeof(struct bundle) == BUNDLE_RECORD_HEADER, "bundle_records.h's header size");

static _Atomic uint64_t next_serial = 1;

/* 0, or -EIO when the lock, a word of the state file, stayed held past the deadline
 * (backoff.h; counted). */
__attribute__((warn_unused_result)) static int bundle_lock(struct uzram *dev, struct bundle *bundle)
{
    struct lock_wait wait = device_lock_wait(dev);
    uint32_t expected = 0;
    while (!atomic_compare_exchange_weak_explicit(&bundle->lock, &expected, 1, memory_order_acquire,
                                                  memory_order_relaxed)) {
        expected = 0;
        if (!lock_wait(&wait))
            return device_lock_timeout(dev);
    }
    return 0;
}

static void bundle_unlock(struct bundle *bundle)
{
    atomic_store_explicit(&bundle->lock, 0, memory_order_release);
}

static unsigned piece_length(const struct bundle *bundle, unsigned piece)
{
    return piece + 1 < bundle->piece_count ? UZRAM_PAGE_SIZE
                                           : bundle->length - piece * UZRAM_PAGE_SIZE;
}

/* Its record's id (bundle_records.h). */
static uint64_t id_of(const struct bundle *bundle)
{
    return (uint64_t)bundle_region_of(bundle->piece_count) << BUNDLE_REGION_SHIFT | bundle->index;
}

static uint64_t owner_of(const struct bundle *bundle)
{
    return OWNER_BUNDLE_BIT | id_of(bundle);
}

static uint64_t piece_word(const struct bundle *bundle, unsigned piece, uint64_t handle)
{
    const uint64_t what[2] = {handle, (uint64_t)piece << 48 | id_of(bundle)};
    return handle | (uint64_t)(sums_32(what, sizeof what) & 0xffffu) << 48;
}

static uint64_t piece_handle(const struct bundle *bundle, unsigned piece)
{
    return bundle->pieces[piece] & PIECE_HANDLE_MASK;
}

static size_t record_size(unsigned piece_count)
{
    return bundle_record_size(bundle_region_of(piece_count));
}

/* Free the pieces allocated so far (the first `pieces`), then the record: a process killed
 * in between leaves a record no slot names, which adoption does not claim. */
static void free_bundle(struct uzram *dev, struct bundle *bundle, unsigned pieces)
{
    for (unsigned piece = 0; piece < pieces; piece++) {
        pool_free(dev->pool, piece_handle(bundle, piece));
        counter_sub(&dev->compr_data_size, piece_length(bundle, piece));
    }
    counter_sub(&dev->bundle_mem, record_size(bundle->piece_count));
    bundle_record_free(dev, id_of(bundle));
}

int bundle_create(struct uzram *dev, const void *object, unsigned length, unsigned codec,
                  uint64_t first, const uint8_t *offsets, unsigned count, struct bundle **out)
{
    if (count < 2 || count > BUNDLE_MAX_PAGES || length == 0 ||
        length > BUNDLE_MAX_PAGES * UZRAM_PAGE_SIZE)
        return -EINVAL;
    unsigned piece_count = (length + UZRAM_PAGE_SIZE - 1) / UZRAM_PAGE_SIZE;
    size_t size = record_size(piece_count);
    uint64_t id;
    int rc = bundle_record_alloc(dev, piece_count, &id);
    if (rc < 0)
        return rc;
    struct bundle *bundle = bundle_record_at(dev, id);
    memset(bundle, 0, size);
    bundle->index = (uint32_t)id;
    atomic_init(&bundle->refs, 1);
    bundle->length = length;
    bundle->codec = (uint16_t)codec;
    bundle->count = (uint8_t)count;
    bundle->piece_count = (uint8_t)piece_count;
    counter_add(&dev->bundle_mem, size); /* free_bundle takes it back */
    bundle->serial = atomic_fetch_add(&next_serial, 1);
    bundle->first = first;
    memcpy(bundle->offsets, offsets, count);
    for (unsigned piece = 0; piece < bundle->piece_count; piece++) {
        uint64_t handle;
        unsigned length = piece_length(bundle, piece);
        rc = pool_alloc(dev->pool, length, owner_of(bundle), &handle);
        if (rc == -ENOSPC) /* a bundle replaces its members' larger objects */
            rc = pool_alloc_over(dev->pool, length, owner_of(bundle), pool_replace_grace(dev->pool),
                                 &handle);
        if (rc < 0) {
            free_bundle(dev, bundle, piece);
            return rc;
        }
        memcpy(pool_map(dev->pool, handle), (const unsigned char *)object + piece * UZRAM_PAGE_SIZE,
               length);
        counter_add(&dev->compr_data_size, length);
        /* under the lock: compaction may move the piece as soon as it is named here */
        rc = bundle_lock(dev, bundle);
        if (rc < 0) {
            pool_free(dev->pool, handle);
            counter_sub(&dev->compr_data_size, length);
            free_bundle(dev, bundle, piece);
            return rc;
        }
        bundle->pieces[piece] = piece_word(bundle, piece, handle);
        bundle_unlock(bundle);
    }
    counter_add(&dev->bundles, 1);
    counter_add(&dev->bundle_dead_pages, count); /* members join one by one */
    *out = bundle;
    return 0;
}

double bundle_cost(unsigned length)
{
    unsigned whole = (length - 1) / UZRAM_PAGE_SIZE;
    return whole * (double)UZRAM_PAGE_SIZE + pool_object_cost(length - whole * UZRAM_PAGE_SIZE) +
           (double)record_size(whole + 1);
}

uint64_t bundle_value(const struct bundle *bundle, unsigned place)
{
    return id_of(bundle) << 4 | place;
}

void bundle_member_form(const struct bundle *bundle, unsigned place, struct page_object *form)
{
    unsigned share = (bundle->length + bundle->count - 1) / bundle->count;
    *form = (struct page_object){
        .state = SLOT_BUNDLED,
        .value = bundle_value(bundle, place),
        .codec = bundle->codec,
        .size = share >= UZRAM_PAGE_SIZE ? UZRAM_PAGE_SIZE - 1 : share,
    };
}

void bundle_join(struct uzram *dev, struct bundle *bundle, unsigned place)
{
    atomic_fetch_add(&bundle->refs, 1);
    atomic_fetch_or(&bundle->live, (uint16_t)(1u << place));
    counter_add(&dev->bundled_pages, 1);
    counter_sub(&dev->bundle_dead_pages, 1);
}

void bundle_hold(struct bundle *bundle)
{
    atomic_fetch_add(&bundle->refs, 1);
}

void bundle_seal(struct uzram *dev, struct bundle *bundle, unsigned single_bytes)
{
    bundle->saved = single_bytes > bundle->length ? single_bytes - bundle->length : 0;
    counter_add(&dev->bundle_saved_bytes, bundle->saved);
    bundle_put(dev, bundle);
}

void bundle_put(struct uzram *dev, struct bundle *bundle)
{
    uint32_t refs = atomic_fetch_sub(&bundle->refs, 1u);
    if (refs != 1)
        return;
    counter_sub(&dev->bundles, 1);
    counter_sub(&dev->bundle_dead_pages, bundle->count);
    counter_sub(&dev->bundle_saved_bytes, bundle->saved);
    codec_table_release(&dev->codecs, bundle->codec);
    free_bundle(dev, bundle, bundle->piece_count);
}

void bundle_leave(struct uzram *dev, uint64_t value)
{
    struct bundle *bundle = bundle_of(dev, value);
    atomic_fetch_and(&bundle->live, (uint16_t) ~(1u << bundle_place(value)));
    counter_sub(&dev->bundled_pages, 1);
    counter_add(&dev->bundle_dead_pages, 1);
    bundle_put(dev, bundle);
}

unsigned bundle_codec(const struct bundle *bundle)
{
    return bundle->codec;
}

unsigned bundle_count(const struct bundle *bundle)
{
    return bundle->count;
}

uint32_t bundle_live(const struct bundle *bundle)
{
    return atomic_load(&bundle->live);
}

uint64_t bundle_page_index(const struct bundle *bundle, unsigned place)
{
    return bundle->first + bundle->offsets[place];
}

bool bundle_mostly_dead(const struct bundle *bundle)
{
    return 2u * (unsigned)__builtin_popcount(bundle_live(bundle)) < bundle->count;
}

/* ---- reads ------------------------------------------------------------------ */

/* The last bundle this thread decompressed: its serial (0: none), the pages decoded so far
 * (up to the block of the last one read: a random read pays for the blocks before its own,
 * about half a bundle; the next read of the bundle goes on from there, so a sequential read decodes
 * each page once), the decoder that holds the frame open, and the frame's bytes copied so
 * far. Made on first use and freed at thread exit, as comp.c's contexts. */
struct bundle_cache {
    uint64_t serial;
    unsigned copied; /* bytes of frame[] copied from the pieces */
    struct comp_span_decoder *decoder;
    unsigned char pages[BUNDLE_MAX_PAGES * UZRAM_PAGE_SIZE];
    unsigned char frame[BUNDLE_MAX_PAGES * UZRAM_PAGE_SIZE];
};

static __thread struct bundle_cache *thread_cache;
static pthread_once_t cache_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t cache_key;
static bool cache_key_ready;

static void free_cache(void *memory)
{
    struct bundle_cache *cache = memory;
    if (cache)
        comp_span_decoder_free(cache->decoder);
    free(cache);
}

static void make_cache_key(void)
{
    cache_key_ready = pthread_key_create(&cache_key, free_cache) == 0;
}

/* exit() runs no key destructor for the thread calling it. */
__attribute__((destructor)) static void free_exiting_thread_cache(void)
{
    free_cache(thread_cache);
    thread_cache = NULL;
}

static struct bundle_cache *cache_get(void)
{
    if (thread_cache)
        return thread_cache;
    struct bundle_cache *cache = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(sizeof *cache);
    if (!cache)
        return NULL;
    if (comp_span_decoder_new(&cache->decoder) < 0) {
        free(cache);
        return NULL;
    }
    cache->serial = 0;
    cache->copied = 0;
    pthread_once(&cache_key_once, make_cache_key);
    if (cache_key_ready)
        pthread_setspecific(cache_key, cache);
    thread_cache = cache;
    return cache;
}

struct frame_reader {
    struct uzram *dev;
    struct bundle *bundle;
    struct bundle_cache *cache;
};

/* (comp_span_source) The frame up to offset + count, its pieces copied as the decoder gets to
 * them, each under the lock (a compaction may move one), and decoded without it. */
static const void *frame_bytes(void *arg, size_t offset, size_t count)
{
    struct frame_reader *reader = arg;
    struct bundle *bundle = reader->bundle;
    struct bundle_cache *cache = reader->cache;
    while (cache->copied < offset + count) {
        unsigned piece = cache->copied / UZRAM_PAGE_SIZE;
        unsigned length = piece_length(bundle, piece);
        if (bundle_lock(reader->dev, bundle) < 0)
            return NULL; /* the decode fails: -EIO */
        memcpy(cache->frame + cache->copied,
               pool_map(reader->dev->pool, piece_handle(bundle, piece)), length);
        bundle_unlock(bundle);
        cache->copied += length;
    }
    return cache->frame + offset;
}

/* Decode the bundle into this thread's cache up to page `place`, going on from where the last
 * read of it stopped. */
static int decode(struct uzram *dev, struct bundle *bundle, struct bundle_cache *cache,
                  unsigned place)
{
    if (cache->serial != bundle->serial) {
        const struct codec_config *config = codec_table_get(&dev->codecs, bundle->codec);
        cache->serial = 0;
        cache->copied = 0;
        int rc = comp_span_begin(cache->decoder, config->algorithm, config->dict);
        if (rc < 0)
            return rc;
        cache->serial = bundle->serial;
    }
    struct frame_reader reader = {dev, bundle, cache};
    struct comp_span_source source = {bundle->length, frame_bytes, &reader};
    /* the last page wants the whole frame, which is then checked to its end */
    int rc = comp_span_decode(cache->decoder, &source, cache->pages,
                              (size_t)bundle->count * UZRAM_PAGE_SIZE,
                              (size_t)(place + 1) * UZRAM_PAGE_SIZE);
    if (rc < 0)
        cache->serial = 0;
    return rc;
}

int bundle_read(struct uzram *dev, uint64_t value, void *page)
{
    struct bundle *bundle = bundle_of(dev, value);
    struct bundle_cache *cache = cache_get();
    if (!cache)
        return -ENOMEM;
    unsigned place = bundle_place(value);
    if (cache->serial != bundle->serial ||
        comp_span_decoded(cache->decoder) < (size_t)(place + 1) * UZRAM_PAGE_SIZE) {
        int rc = decode(dev, bundle, cache, place);
        if (rc < 0)
            return rc;
    }
    memcpy(page, cache->pages + (size_t)place * UZRAM_PAGE_SIZE, UZRAM_PAGE_SIZE);
    return 0;
}

unsigned bundle_priority(struct uzram *dev, const struct bundle *bundle)
{
    return codec_table_get(&dev->codecs, bundle->codec)->priority;
}

/* ---- compaction --------------------------------------------------------------- */

bool bundle_try_lock_owner(struct uzram *dev, uint64_t owner, uint64_t handle)
{
    struct bundle *bundle = bundle_record_at(dev, owner & ~OWNER_BUNDLE_BIT);
    uint32_t expected = 0;
    if (!atomic_compare_exchange_strong_explicit(&bundle->lock, &expected, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        return false;
    for (unsigned piece = 0; piece < bundle->piece_count; piece++)
        if (piece_handle(bundle, piece) == handle)
            return true;
    bundle_unlock(bundle);
    return false;
}

bool bundle_relocate(struct uzram *dev, uint64_t owner, uint64_t old_handle, uint64_t new_handle)
{
    struct bundle *bundle = bundle_record_at(dev, owner & ~OWNER_BUNDLE_BIT);
    for (unsigned piece = 0; piece < bundle->piece_count; piece++)
        if (piece_handle(bundle, piece) == old_handle)
            bundle->pieces[piece] = piece_word(bundle, piece, new_handle);
    bundle_unlock(bundle);
    return true;
}

/* ---- adoption ------------------------------------------------------------------ */

/* A damaged record `id`, first named by page `index`: where it is, and `why` (sums.h). */
static int record_damage(struct uzram *dev, uint64_t id, uint64_t index, const char *why)
{
    uint64_t at = bundle_record_file_offset(dev, id);
    return sums_damage("bundle record %u of region %u (bytes %llu to %llu), named by page %llu "
                       "of the disk: %s",
                       (unsigned)id, (unsigned)(id >> BUNDLE_REGION_SHIFT), (unsigned long long)at,
                       (unsigned long long)(at + bundle_record_size(id >> BUNDLE_REGION_SHIFT) - 1),
                       (unsigned long long)index, why);
}

/* A record first named by a slot (page `index`) at adoption: checked, its pieces claimed in
 * the pool, its holds and lock (a killed process's) dropped, a new serial, and the bundle
 * counted with all its members dead (bundle_adopt_member makes them live). -EUCLEAN: a
 * damaged record (sums_damage says where). */
static int adopt_record(struct uzram *dev, struct bundle *bundle, uint64_t id, uint64_t index)
{
    unsigned pieces = (bundle->length + UZRAM_PAGE_SIZE - 1) / UZRAM_PAGE_SIZE;
    if (bundle->count < 2 || bundle->count > BUNDLE_MAX_PAGES || bundle->length == 0 ||
        bundle->length > BUNDLE_MAX_PAGES * UZRAM_PAGE_SIZE || bundle->piece_count != pieces ||
        id_of(bundle) != id || bundle->codec >= CODEC_TABLE_MAX ||
        !dev->codecs.entries[bundle->codec].used ||
        bundle->saved > bundle->length * (uint64_t)BUNDLE_MAX_PAGES)
        return record_damage(dev, id, index, "it holds sizes, a codec or a place no bundle has");
    for (unsigned piece = 0; piece < pieces; piece++) {
        const char *why = "a piece does not match its check bits";
        int rc = bundle->pieces[piece] != piece_word(bundle, piece, piece_handle(bundle, piece))
                     ? -EINVAL
                     : pool_adopt_object(dev->pool, piece_handle(bundle, piece), owner_of(bundle),
                                         piece_length(bundle, piece), &why);
        if (rc == -EINVAL)
            rc = record_damage(dev, id, index, why);
        if (rc < 0)
            return rc;
    }
    codec_table_hold(&dev->codecs, bundle->codec);
    atomic_store(&bundle->lock, 0);
    atomic_store(&bundle->refs, 0);
    atomic_store(&bundle->live, 0);
    bundle->serial = atomic_fetch_add(&next_serial, 1);
    counter_add(&dev->bundles, 1);
    counter_add(&dev->bundle_dead_pages, bundle->count);
    counter_add(&dev->compr_data_size, bundle->length);
    counter_add(&dev->bundle_mem, record_size(pieces));
    counter_add(&dev->bundle_saved_bytes, bundle->saved);
    return 0;
}

int bundle_adopt_member(struct uzram *dev, uint64_t index, uint64_t value, unsigned codec,
                        const char **why)
{
    uint64_t id = value >> 4;
    int claimed = bundle_record_claim(dev, id);
    *why = "it names a bundle record the file does not hold";
    if (claimed < 0)
        return claimed;
    struct bundle *bundle = bundle_record_at(dev, id);
    if (claimed) {
        int rc = adopt_record(dev, bundle, id, index);
        if (rc < 0)
            return rc;
    }
    unsigned place = bundle_place(value);
    *why = "its bundle record does not hold this page at the place it names (or another page "
           "names that place too)";
    if (place >= bundle->count || (atomic_load(&bundle->live) & (1u << place)) ||
        bundle->first + bundle->offsets[place] != index || codec != bundle->codec)
        return -EINVAL;
    bundle_join(dev, bundle, place);
    return 0;
}
