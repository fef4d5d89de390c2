/* bundle_records.h - the memory of bundle records (internal; bundle_records.c): fixed-size
 * records in three regions (up to 4, 8 and 16 pieces), in the state file when the
 * device has one (state.h's layout) and in anonymous memory otherwise, by the same code. A
 * record is named by an id (its region << 32 | its index), never an address: a slot's value
 * and a piece's pool owner name it so, and a successor that maps the file elsewhere finds it.
 * Which records are in use is private (a bitmap per region, made again at adoption from the
 * slots that name records); chunks of BUNDLE_RECORDS_CHUNK records with none in use are given
 * back by uzram_compact. What a record holds is bundle.c's. */
#ifndef UZRAM_BUNDLE_RECORDS_H
#define UZRAM_BUNDLE_RECORDS_H

#include <stdbool.h>
#include <stdint.h>

#include "device/device.h"

/* A record: a 56-byte header (bundle.c's struct bundle) and 8 bytes a piece. Region r takes
 * bundles of up to 4 << r pieces: 88-byte records up to 4 pieces (a frame of 16 KiB; most
 * bundles of real data), 120 up to 8, 184 up to 16. */
#define BUNDLE_RECORD_HEADER 56u
#define BUNDLE_REGIONS 3u
/* Records a chunk: a whole number of 4 KiB pages in every region (11, 15 and 23). */
#define BUNDLE_RECORDS_CHUNK 512u
/* An id: its region << BUNDLE_REGION_SHIFT | its index in the region. */
#define BUNDLE_REGION_SHIFT 32

/* The region of a bundle of `pieces` (1..16) pieces, and its records' size. */
static inline unsigned bundle_region_of(unsigned pieces)
{
    return pieces <= 4 ? 0 : pieces <= 8 ? 1 : 2;
}
static inline unsigned bundle_record_size(unsigned region)
{
    return BUNDLE_RECORD_HEADER + (32u << region);
}

/* The record named by `id` (valid ids only: a live bundle's). One load, as a pointer's. */
static inline void *bundle_record_at(const struct uzram *dev, uint64_t id)
{
    unsigned region = (unsigned)(id >> BUNDLE_REGION_SHIFT) & 3u;
    return dev->bundle_base[region] + (uint32_t)id * (uint64_t)bundle_record_size(region);
}

/* Bytes of the regions for a disk of `page_count` pages (the state layout's region). */
uint64_t bundle_records_bytes(uint64_t page_count);
/* Where record `id` is, in bytes from the start of the regions (for a disk of `page_count`
 * pages): what a damage report names, and where a test finds a record in the file. */
uint64_t bundle_record_offset(uint64_t page_count, uint64_t id);
/* The same from the start of the state file (of the mapping, without one). */
uint64_t bundle_record_file_offset(const struct uzram *dev, uint64_t id);

/* Map the regions: in the file `fd` from byte `offset` (`limited`: a tmpfs with a size, whose
 * chunks are allocated with fallocate() before they are touched), or anonymous memory
 * (`fd` -1). uzram_destroy unmaps them (safe when never mapped). */
int bundle_records_map(struct uzram *dev, int fd, uint64_t offset, bool limited);
void bundle_records_unmap(struct uzram *dev);

/* A free record for a bundle of `pieces` pieces (1..16): its id. -ENOMEM (none free or
 * fault), -ENOSPC (its chunk could not be allocated in the file). */
int bundle_record_alloc(struct uzram *dev, unsigned pieces, uint64_t *id);
void bundle_record_free(struct uzram *dev, uint64_t id);

/* Give back the chunks with no record in use (uzram_compact); how many. */
uint64_t bundle_records_give_back(struct uzram *dev);

/* Adoption: the chunks the file holds are noted (before any claim); then a record named by a
 * slot is claimed: 1 the first time, 0 after, -EINVAL no such record or not in the file. */
int bundle_records_adopt_start(struct uzram *dev);
int bundle_record_claim(struct uzram *dev, uint64_t id);

#endif
