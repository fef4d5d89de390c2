/* bundle.h - bundles (internal; bundle.c): idle neighbouring pages packed into one object
 * compressed together (zstd, with the trained dictionary when there is one), whose record a
 * page slot of state SLOT_BUNDLED names (its id, bundle_records.h) with the page's place in
 * it. Not lib/pool/group.c's
 * groups, which share a memory limit between devices. Who packs and splits them is
 * recompress_bundle.c; the store reads them and lets members go; writeback takes members one
 * by one.
 *
 * Invariants (the lifetime rule):
 *   - A bundle's object is immutable: `count` pages compressed as one frame, cut into pieces
 *     of at most 4096 bytes in the pool, each owned by OWNER_BUNDLE_BIT | the id of the
 *     bundle's record. Only compaction moves a piece, under the bundle's lock.
 *   - refs = live members + holds. A live member is a slot whose value names (bundle,
 *     place) and whose bit is set in `live`; it joined with its slot locked and leaves
 *     (bundle_leave) after its slot took another form. A hold is taken by whoever reads the
 *     bundle without a member's slot locked (a split, a writeback), with the slot locked.
 *   - At refs 0 the pieces are freed, then the record: compaction, which holds a class lock
 *     while it looks at a piece's owner, never finds a freed bundle, since a piece is freed
 *     under its class lock before the record goes.
 *   - In a state file (crash consistency): a record is whole before a slot names it (slots
 *     change with state_slot_write, which fences), and a process killed at any instant
 *     leaves each member's slot naming the bundle or holding its old form (whose object is
 *     freed only after). Adoption (bundle_adopt_member) makes refs and live again from the
 *     slots that name a record and claims its pieces; a record no slot names is free, its
 *     pieces with it. Compaction stores a moved piece's new handle in the record (one
 *     8-byte store) before the pool frees the old one: the record names the old or the new
 *     piece, both allocated, never a freed one.
 *   - A dead member (left) is never read again; its bytes stay in the object until the
 *     bundle is repacked (split) or freed.
 * Lock order: page slot -> bundle lock -> pool class lock. The bundle lock is held only to
 * copy the pieces or to move one (compaction only tries it).
 * Counters (struct uzram): bundles, bundled_pages, bundle_dead_pages, bundle_saved_bytes,
 * bundle_mem (the records' memory, in meta_data_size),
 * all changed here only. */
#ifndef UZRAM_BUNDLE_H
#define UZRAM_BUNDLE_H

#include <stdbool.h>
#include <stdint.h>

#include "bundle/bundle_records.h"

struct uzram;
struct bundle;

/* Most pages in one bundle (a place takes the low 4 bits of a slot's value). */
#define BUNDLE_MAX_PAGES 16u

/* Make a bundle of `count` (2..16) pages whose frame is `length` bytes of `object`, made by
 * codec `codec` (whose user passes to the bundle on success), page k being page
 * first + offsets[k] of the disk. Its pieces go into the pool (at mem_limit, past it within
 * pool_replace_grace() as a recompressed object; it replaces larger ones) and are counted in
 * compr_data_size. It starts with no
 * member and one hold, the caller's. -ENOMEM, -ENOSPC: nothing was kept. */
int bundle_create(struct uzram *dev, const void *object, unsigned length, unsigned codec,
                  uint64_t first, const uint8_t *offsets, unsigned count, struct bundle **out);

/* Memory a bundle of a `length`-byte frame takes: its whole-page pieces and the last as one
 * object in the pool, and its record (what packing weighs against the members' objects). */
double bundle_cost(unsigned length);

/* The slot value of place `place`, and a slot value's bundle and place. */
uint64_t bundle_value(const struct bundle *bundle, unsigned place);
static inline struct bundle *bundle_of(const struct uzram *dev, uint64_t value)
{
    return (struct bundle *)bundle_record_at(dev, value >> 4);
}
static inline unsigned bundle_place(uint64_t value)
{
    return (unsigned)(value & (BUNDLE_MAX_PAGES - 1));
}

/* The form a member's slot takes: state, value, codec and share of the bytes. */
struct page_object;
void bundle_member_form(const struct bundle *bundle, unsigned place, struct page_object *form);

/* Place `place` becomes a live member: with its slot locked, as the slot takes
 * bundle_member_form(). */
void bundle_join(struct uzram *dev, struct bundle *bundle, unsigned place);

/* The maker is done: bundle_saved_bytes takes what the members that joined saved (their
 * objects took `single_bytes` before), and the maker's hold goes (bundle_put: with no member,
 * the bundle is freed). */
void bundle_seal(struct uzram *dev, struct bundle *bundle, unsigned single_bytes);

/* Take a hold (with a member's slot locked, or holding one already); give one back, the
 * last reference freeing the bundle. */
void bundle_hold(struct bundle *bundle);
void bundle_put(struct uzram *dev, struct bundle *bundle);

/* The member named by `value` left (its slot holds another form now). */
void bundle_leave(struct uzram *dev, uint64_t value);

/* Decompress the page at the place `value` names into `page` (4096 bytes). The caller keeps
 * the bundle alive (member slot locked, or a hold). A per-thread cache keeps the last bundle
 * decompressed up to the page read, so that the next read of one of its pages goes on from
 * there or only copies. */
int bundle_read(struct uzram *dev, uint64_t value, void *page);

/* The priority of the codec setting that made the bundle (for its pages leaving it). */
unsigned bundle_priority(struct uzram *dev, const struct bundle *bundle);

/* What recompress_bundle.c and writeback need of a bundle it holds. */
unsigned bundle_codec(const struct bundle *bundle);
unsigned bundle_count(const struct bundle *bundle);
uint32_t bundle_live(const struct bundle *bundle);
uint64_t bundle_page_index(const struct bundle *bundle, unsigned place);
/* More than half of its members are dead: time to split it. */
bool bundle_mostly_dead(const struct bundle *bundle);

/* Compaction's owner callbacks for a piece (store.c's owner_try_lock dispatches here). */
bool bundle_try_lock_owner(struct uzram *dev, uint64_t owner, uint64_t handle);
bool bundle_relocate(struct uzram *dev, uint64_t owner, uint64_t old_handle, uint64_t new_handle);

/* Adoption (state_adopt.c): slot `index`, of state SLOT_BUNDLED with `value` and `codec`, is
 * a live member. Its record's pieces are claimed in the pool (each piece's check bits checked),
 * and the bundle counted, the first time a slot names it. -EINVAL, *why saying which: the
 * record is none the file holds, or no bundle that has this page; -EUCLEAN: the record is
 * damaged (sums_damage says where). */
int bundle_adopt_member(struct uzram *dev, uint64_t index, uint64_t value, unsigned codec,
                        const char **why);

#endif
