/* store_internal.h - what the page store (store.c) shares with the per-page halves of
 * recompression (recompress_page.c) and writeback (writeback_page.c), and with no other file:
 * a page's object put into the pool, compressed, decoded, loaded and freed, and the form of a
 * dedup entry's object. The slot primitives are slot.h's; the store's calls for the rest of
 * the engine are store.h's. */
#ifndef UZRAM_STORE_INTERNAL_H
#define UZRAM_STORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedup/dedup.h"
#include "device/device.h"

/* Put `length` bytes of `data` (a compressed object of codec `codec`, on
 * which the caller holds a user that passes to the object, or the raw page
 * when `length` is 4096) into the pool, owned by `owner` (a slot's index + 1, or
 * OWNER_DEDUP_BIT | an entry's id), and count them in compr_data_size. `replacing`: it
 * replaces a larger object (recompression), and may go past mem_limit by the pool's holes and
 * a span, within pool_replace_grace_max(); else a write the limit refuses compacts the pool
 * and tries again when pool_compact_due() says so. */
int store_put_object(struct uzram *dev, const void *data, unsigned length, unsigned codec,
                     uint64_t owner, bool replacing, struct page_object *object);

/* Compress `page` with the codec of priority `priority` into `out` (at most `capacity`
 * bytes). Returns the length (0: it does not fit) with a user taken on *codec when the
 * length is not 0, or a negative errno (-ENOENT: no algorithm at that priority). */
int store_compress(struct uzram *dev, unsigned priority, const void *page, void *out,
                   size_t capacity, unsigned *codec);

/* A page leaving a bundle for an object of its own: `page` compressed into `out` (4096
 * bytes) with the codec of `priority` (the primary's if that setting went). Returns the
 * length with a user taken on *codec, or 4096 (a raw copy, no user), or a negative errno. */
int store_compress_alone(struct uzram *dev, unsigned priority, const void *page, void *out,
                         unsigned *codec);

/* Free a COMPRESSED, HUGE or BACKED object: its memory or its place on the backing store, its
 * count and its codec user. */
void store_free_object(struct uzram *dev, const struct page_object *object);

/* Decompress `length` bytes of codec `codec` (4096: a raw page) into `page`. */
int store_decode(struct uzram *dev, const void *data, unsigned length, unsigned codec, void *page);

/* Read the page of a locked slot into `page`, whatever its form. */
int store_load_locked(struct uzram *dev, struct slot *slot, void *page);

/* Whether a form is a raw page, in memory or written back (a dedup reference: its entry's;
 * the caller holds the reference, e.g. with the slot locked). */
bool store_object_is_huge(struct uzram *dev, const struct page_object *object);

/* A dedup_with_object() callback that copies the entry's object into `arg` (a struct
 * dedup_object). */
int store_copy_dedup_object(void *arg, const struct dedup_object *object);

#endif
