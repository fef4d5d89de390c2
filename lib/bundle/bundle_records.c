/* bundle_records.c - the memory of bundle records (bundle_records.h): three regions of
 * fixed-size records mapped from the state file or anonymous memory, records taken and given
 * back (a private bitmap per region, the lowest free first so that chunks stay dense), chunks
 * with none in use given back, and the file's records claimed again at adoption. */
#include "bundle/bundle_records.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "common/fault.h"
#include "common/file_extents.h"

/* Records a region has room for: a live bundle has a live member, one page of the disk, so
 * the disk's pages; and bundles without one yet or any more (being made, or held by a split
 * or a writeback: a few a thread). */
#define BUNDLE_SPARE_RECORDS 4096u

struct record_region {
    pthread_mutex_t lock;
    uint64_t capacity; /* records: a whole number of chunks */
    uint64_t offset;   /* of the region in the mapping (and from the file's region) */
    uint64_t *used;    /* bit per record: in use */
    uint16_t *in_use;  /* records in use a chunk */
    bool *held;        /* a chunk's memory may be touched (allocated in a limited file) */
    uint64_t hint;     /* no free record in the words of `used` below this one */
};

struct bundle_records {
    int fd; /* -1: anonymous memory */
    uint64_t file_offset;
    bool limited;
    unsigned char *map;
    uint64_t map_bytes;
    struct record_region regions[BUNDLE_REGIONS];
};

static uint64_t region_capacity(uint64_t page_count)
{
    uint64_t records = page_count + BUNDLE_SPARE_RECORDS;
    return (records + BUNDLE_RECORDS_CHUNK - 1) / BUNDLE_RECORDS_CHUNK * BUNDLE_RECORDS_CHUNK;
}

uint64_t bundle_records_bytes(uint64_t page_count)
{
    uint64_t bytes = 0;
    for (unsigned r = 0; r < BUNDLE_REGIONS; r++)
        bytes += region_capacity(page_count) * bundle_record_size(r);
    return bytes;
}

uint64_t bundle_record_offset(uint64_t page_count, uint64_t id)
{
    unsigned region = (unsigned)(id >> BUNDLE_REGION_SHIFT) & 3u;
    uint64_t offset = 0;
    for (unsigned r = 0; r < region && r < BUNDLE_REGIONS; r++)
        offset += region_capacity(page_count) * bundle_record_size(r);
    return offset + (uint32_t)id * (uint64_t)bundle_record_size(region);
}

uint64_t bundle_record_file_offset(const struct uzram *dev, uint64_t id)
{
    const struct bundle_records *records = dev->bundle_records;
    return (records->fd >= 0 ? records->file_offset : 0) +
           bundle_record_offset(dev->page_count, id);
}

static uint64_t chunk_bytes(unsigned region)
{
    return (uint64_t)BUNDLE_RECORDS_CHUNK * bundle_record_size(region);
}

static void free_regions(struct bundle_records *records)
{
    for (unsigned r = 0; r < BUNDLE_REGIONS; r++) {
        free(records->regions[r].used);
        free(records->regions[r].in_use);
        free(records->regions[r].held);
        pthread_mutex_destroy(&records->regions[r].lock);
    }
    free(records);
}

int bundle_records_map(struct uzram *dev, int fd, uint64_t offset, bool limited)
{
    struct bundle_records *records = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *records);
    if (!records)
        return -ENOMEM;
    records->fd = fd;
    records->file_offset = offset;
    records->limited = limited;
    uint64_t capacity = region_capacity(dev->page_count), chunks = capacity / BUNDLE_RECORDS_CHUNK;
    bool made = true;
    for (unsigned r = 0; r < BUNDLE_REGIONS; r++) {
        struct record_region *region = &records->regions[r];
        pthread_mutex_init(&region->lock, NULL);
        region->capacity = capacity;
        region->offset = bundle_record_offset(dev->page_count, (uint64_t)r << BUNDLE_REGION_SHIFT);
        made = made && !FAULT_POINT(FAULT_ALLOC) &&
               (region->used = calloc(capacity / 64, sizeof(uint64_t))) &&
               (region->in_use = calloc(chunks, sizeof(uint16_t))) &&
               (region->held = calloc(chunks, sizeof(bool)));
    }
    records->map_bytes = bundle_records_bytes(dev->page_count);
    void *map = MAP_FAILED;
    if (made && fd >= 0)
        map = mmap(NULL, records->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd,
                   (off_t)offset);
    else if (made)
        map = mmap(NULL, records->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
        free_regions(records);
        return -ENOMEM;
    }
    records->map = map;
    for (unsigned r = 0; r < BUNDLE_REGIONS; r++)
        dev->bundle_base[r] = records->map + records->regions[r].offset;
    dev->bundle_records = records;
    return 0;
}

void bundle_records_unmap(struct uzram *dev)
{
    struct bundle_records *records = dev->bundle_records;
    if (!records)
        return;
    munmap(records->map, records->map_bytes);
    free_regions(records);
    dev->bundle_records = NULL;
}

/* The first free record from the hint, marked used; UINT64_MAX: none. */
static uint64_t take_free(struct record_region *region)
{
    for (uint64_t word = region->hint; word < region->capacity / 64; word++) {
        if (region->used[word] == UINT64_MAX)
            continue;
        region->hint = word;
        unsigned bit = (unsigned)__builtin_ctzll(~region->used[word]);
        region->used[word] |= 1ull << bit;
        return word * 64 + bit;
    }
    region->hint = region->capacity / 64;
    return UINT64_MAX;
}

/* Make chunk `chunk` touchable: in a tmpfs with a size, allocated first (state.c's
 * hold_mapped tells why). */
static int hold_chunk(struct bundle_records *records, unsigned r, uint64_t chunk)
{
    struct record_region *region = &records->regions[r];
    if (region->held[chunk])
        return 0;
    if (records->fd >= 0 && records->limited &&
        (FAULT_POINT(FAULT_ALLOC) ||
         fallocate(records->fd, 0,
                   (off_t)(records->file_offset + region->offset + chunk * chunk_bytes(r)),
                   (off_t)chunk_bytes(r)) < 0))
        return -ENOSPC;
    region->held[chunk] = true;
    return 0;
}

int bundle_record_alloc(struct uzram *dev, unsigned pieces, uint64_t *id)
{
    struct bundle_records *records = dev->bundle_records;
    unsigned r = bundle_region_of(pieces);
    struct record_region *region = &records->regions[r];
    if (FAULT_POINT(FAULT_ALLOC))
        return -ENOMEM;
    pthread_mutex_lock(&region->lock);
    uint64_t index = take_free(region);
    int rc = index == UINT64_MAX ? -ENOMEM : hold_chunk(records, r, index / BUNDLE_RECORDS_CHUNK);
    if (rc == 0)
        region->in_use[index / BUNDLE_RECORDS_CHUNK]++;
    else if (index != UINT64_MAX)
        region->used[index / 64] &= ~(1ull << (index % 64));
    pthread_mutex_unlock(&region->lock);
    if (rc < 0)
        return rc;
    *id = (uint64_t)r << BUNDLE_REGION_SHIFT | index;
    return 0;
}

void bundle_record_free(struct uzram *dev, uint64_t id)
{
    struct record_region *region = &dev->bundle_records->regions[id >> BUNDLE_REGION_SHIFT];
    uint64_t index = (uint32_t)id;
    pthread_mutex_lock(&region->lock);
    region->used[index / 64] &= ~(1ull << (index % 64));
    region->in_use[index / BUNDLE_RECORDS_CHUNK]--;
    if (index / 64 < region->hint)
        region->hint = index / 64;
    pthread_mutex_unlock(&region->lock);
}

/* Chunk `chunk` of region `r`, no record of it in use (its lock held), given back: punched
 * out of the file, or dropped. */
static bool drop_chunk(struct bundle_records *records, unsigned r, uint64_t chunk)
{
    unsigned char *at = records->map + records->regions[r].offset + chunk * chunk_bytes(r);
    if (records->fd < 0)
        return madvise(at, chunk_bytes(r), MADV_DONTNEED) == 0;
    return fallocate(records->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     (off_t)(records->file_offset + (uint64_t)(at - records->map)),
                     (off_t)chunk_bytes(r)) == 0;
}

uint64_t bundle_records_give_back(struct uzram *dev)
{
    struct bundle_records *records = dev->bundle_records;
    uint64_t given = 0;
    for (unsigned r = 0; r < BUNDLE_REGIONS; r++) {
        struct record_region *region = &records->regions[r];
        pthread_mutex_lock(&region->lock);
        for (uint64_t chunk = 0; chunk < region->capacity / BUNDLE_RECORDS_CHUNK; chunk++)
            if (region->held[chunk] && region->in_use[chunk] == 0 &&
                drop_chunk(records, r, chunk)) {
                region->held[chunk] = false;
                given++;
            }
        pthread_mutex_unlock(&region->lock);
    }
    return given;
}

/* (file_each_data) The chunks the file holds bytes of are held: the records there may be
 * read (a hole would be allocated by the read, and a limited tmpfs could be full). */
static int note_data(void *arg, uint64_t from, uint64_t to)
{
    struct bundle_records *records = arg;
    for (unsigned r = 0; r < BUNDLE_REGIONS; r++) {
        struct record_region *region = &records->regions[r];
        uint64_t start = records->file_offset + region->offset;
        uint64_t end = start + region->capacity * bundle_record_size(r);
        if (to <= start || from >= end)
            continue;
        uint64_t first = ((from > start ? from : start) - start) / chunk_bytes(r);
        uint64_t last = ((to < end ? to : end) - start + chunk_bytes(r) - 1) / chunk_bytes(r);
        for (uint64_t chunk = first; chunk < last; chunk++)
            region->held[chunk] = true;
    }
    return 0;
}

int bundle_records_adopt_start(struct uzram *dev)
{
    struct bundle_records *records = dev->bundle_records;
    return file_each_data(records->fd, records->file_offset,
                          records->file_offset + records->map_bytes, note_data, records);
}

int bundle_record_claim(struct uzram *dev, uint64_t id)
{
    struct bundle_records *records = dev->bundle_records;
    uint64_t r = id >> BUNDLE_REGION_SHIFT, index = (uint32_t)id;
    if (r >= BUNDLE_REGIONS)
        return -EINVAL;
    struct record_region *region = &records->regions[r];
    /* a record must lie in chunks the file holds (a record does not cross a chunk) */
    if (index >= region->capacity || !region->held[index / BUNDLE_RECORDS_CHUNK])
        return -EINVAL;
    if (region->used[index / 64] & (1ull << (index % 64)))
        return 0;
    region->used[index / 64] |= 1ull << (index % 64);
    region->in_use[index / BUNDLE_RECORDS_CHUNK]++;
    return 1;
}
