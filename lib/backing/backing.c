/* backing.c - the backing store (see backing.h): blocks of a file or block device, their live
 * bytes and pins, the free-space bitmap, hole punching, the appender and aligned reads checked
 * against the checksums of what was written. */
#include "backing/backing.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "backing/backing_file.h"
#include "common/fault.h"

/* Released blocks wait for their hole to be punched in batches: one
 * fallocate per run of adjacent blocks rather than one per block. */
#define PUNCH_BATCH 32u

#define PIN_ONE (1ull << 32)
#define LIVE_MASK 0xffffffffull

#define NO_BLOCK UINT64_MAX

/* A block's checksum word: how many bytes from its start were written (0..4096, 13 bits) and
 * the upper 51 bits of their XXH3 hash. */
#define SUM_COVERED_MASK 0x1fffull

struct backing {
    int fd;
    bool file;             /* a regular file (holes can be punched) */
    _Atomic bool direct;   /* O_DIRECT in use */
    _Atomic bool punching; /* holes can be punched (until fallocate says no) */
    char *path;
    uint64_t blocks; /* capacity */

    /* Per block: live bytes | pins << 32 (see backing.h); then, in the same mapping, the
     * checksum word of each block (see backing.h). */
    _Atomic uint64_t *meta;
    _Atomic uint64_t *sums;
    size_t meta_bytes;
    size_t sums_bytes; /* a mapping of their own: in a state file (backing_open_kept) */
    int sums_fd;       /* that state file, or -1 */
    uint64_t sums_offset;
    bool kept;                         /* kept in a state: the file is not emptied at close */
    _Atomic uint64_t *checksum_errors; /* the device's counter */

    /* Space: under `lock`. A set bit is a block in use, or released and
     * waiting for its hole (pending). */
    pthread_mutex_t lock;
    uint64_t *bitmap;
    size_t bitmap_bytes;
    uint64_t hint; /* where the search for a free block starts */
    uint64_t pending[PUNCH_BATCH];
    unsigned pending_count;
    uint64_t blocks_taken; /* set bits below the capacity */
    uint64_t reserve;      /* free blocks only compaction may take */
    _Atomic uint64_t blocks_used;

    /* The appender's batch (one thread at a time, see backing.h): blocks
     * first .. first + count - 1 of the store, of which `used` bytes are
     * filled; `start_used` were filled (and written) when the batch began.
     * The appender holds a pin on each of them. */
    unsigned char *buffer;
    uint64_t first;
    unsigned count;
    unsigned used;
    unsigned start_used;
};

/* Read buffers: an object lies in at most two blocks. */
static __thread unsigned char read_buffer[2 * BACKING_BLOCK]
    __attribute__((aligned(BACKING_BLOCK)));

/* ---- space ------------------------------------------------------------------ */

static bool bit_test(const uint64_t *bitmap, uint64_t block)
{
    return bitmap[block / 64] >> (block % 64) & 1;
}
static void bit_set(uint64_t *bitmap, uint64_t block)
{
    bitmap[block / 64] |= 1ull << (block % 64);
}
static void bit_clear(uint64_t *bitmap, uint64_t block)
{
    bitmap[block / 64] &= ~(1ull << (block % 64));
}

/* Under lock: the first free block at or after `from`, wrapping; NO_BLOCK
 * if none. Bits past the capacity are set, so whole words can be tested. */
static uint64_t find_free(struct backing *backing, uint64_t from)
{
    uint64_t words = (backing->blocks + 63) / 64;
    uint64_t word = from / 64;
    uint64_t bits = ~backing->bitmap[word] & (~0ull << (from % 64));
    for (uint64_t step = 0; step <= words; step++) {
        if (bits)
            return word * 64 + (uint64_t)__builtin_ctzll(bits);
        word = word + 1 == words ? 0 : word + 1;
        bits = ~backing->bitmap[word];
    }
    return NO_BLOCK;
}

/* Take block `block` (free) for the appender: in use, pinned once. Its checksum word in a
 * state file is allocated there first: a write fault into a full tmpfs would kill the process
 * (SIGBUS); false then, and the block stays free. */
static bool claim(struct backing *backing, uint64_t block)
{
    if (backing->sums_fd >= 0 &&
        (FAULT_POINT(FAULT_ALLOC) ||
         fallocate(backing->sums_fd, 0, (off_t)(backing->sums_offset + block * sizeof(uint64_t)),
                   sizeof(uint64_t)) < 0))
        return false;
    bit_set(backing->bitmap, block);
    backing->blocks_taken++;
    backing->hint = block + 1 == backing->blocks ? 0 : block + 1;
    atomic_fetch_add_explicit(&backing->blocks_used, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&backing->meta[block], PIN_ONE, memory_order_relaxed);
    atomic_store_explicit(&backing->sums[block], 0, memory_order_relaxed); /* nothing written */
    return true;
}

/* Under lock: whether a block may be taken: the last `reserve` free ones
 * are compaction's, so that it can always move objects to make room. */
static bool may_take(struct backing *backing, bool reserve)
{
    uint64_t free = backing->blocks - backing->blocks_taken;
    return free > (reserve ? 0 : backing->reserve);
}

static void punch_pending(struct backing *backing);

static bool claim_free(struct backing *backing, uint64_t block, bool reserve)
{
    pthread_mutex_lock(&backing->lock);
    bool free = block < backing->blocks && !bit_test(backing->bitmap, block) &&
                may_take(backing, reserve) && claim(backing, block);
    pthread_mutex_unlock(&backing->lock);
    return free;
}

static uint64_t claim_any(struct backing *backing, bool reserve)
{
    pthread_mutex_lock(&backing->lock);
    /* Blocks waiting for their holes count as taken: when they are all
     * that is left, punch them now. */
    if (!may_take(backing, reserve) && backing->pending_count)
        punch_pending(backing);
    uint64_t block = may_take(backing, reserve) ? find_free(backing, backing->hint) : NO_BLOCK;
    if (block != NO_BLOCK && !claim(backing, block))
        block = NO_BLOCK;
    pthread_mutex_unlock(&backing->lock);
    return block;
}

static int punch(struct backing *backing, uint64_t first, uint64_t count)
{
    return fallocate(backing->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     (off_t)(first * BACKING_BLOCK), (off_t)(count * BACKING_BLOCK));
}

static int compare_blocks(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Under lock, dropped meanwhile: punch the pending blocks' holes, a run of
 * adjacent ones at a time, then let them be used again. They stay marked in
 * use until then, so that no block is written while its hole is punched. */
static void punch_pending(struct backing *backing)
{
    uint64_t blocks[PUNCH_BATCH];
    unsigned count = backing->pending_count;
    memcpy(blocks, backing->pending, count * sizeof blocks[0]);
    backing->pending_count = 0;
    pthread_mutex_unlock(&backing->lock);
    qsort(blocks, count, sizeof blocks[0], compare_blocks);
    for (unsigned i = 0; i < count && atomic_load(&backing->punching);) {
        unsigned run = 1;
        while (i + run < count && blocks[i + run] == blocks[i] + run)
            run++;
        if (punch(backing, blocks[i], run) < 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
            atomic_store(&backing->punching, false); /* the space is reused all the same */
        i += run;
    }
    pthread_mutex_lock(&backing->lock);
    for (unsigned i = 0; i < count; i++)
        bit_clear(backing->bitmap, blocks[i]);
    backing->blocks_taken -= count;
}

/* Block `block` has no live bytes and no pins left: give it back. */
static void release(struct backing *backing, uint64_t block)
{
    atomic_fetch_sub_explicit(&backing->blocks_used, 1, memory_order_relaxed);
    pthread_mutex_lock(&backing->lock);
    if (!backing->file) {
        bit_clear(backing->bitmap, block);
        backing->blocks_taken--;
    } else {
        backing->pending[backing->pending_count++] = block;
        if (backing->pending_count == PUNCH_BATCH)
            punch_pending(backing);
    }
    pthread_mutex_unlock(&backing->lock);
}

/* Add `delta` (a signed amount of live bytes or pins) to a block's word and
 * release the block when the word comes to 0. */
static void block_change(struct backing *backing, uint64_t block, int64_t delta)
{
    uint64_t before =
        atomic_fetch_add_explicit(&backing->meta[block], (uint64_t)delta, memory_order_acq_rel);
    if (before + (uint64_t)delta == 0)
        release(backing, block);
}

void backing_trim(struct backing *backing)
{
    pthread_mutex_lock(&backing->lock);
    if (backing->pending_count)
        punch_pending(backing);
    pthread_mutex_unlock(&backing->lock);
}

/* Apply `per_byte` (+1 or -1) times the bytes of the object at `offset` to
 * each block it lies in (one or two). */
static void change_live(struct backing *backing, uint64_t offset, unsigned length, int per_byte)
{
    uint64_t block = offset / BACKING_BLOCK;
    unsigned in_first = BACKING_BLOCK - (unsigned)(offset % BACKING_BLOCK);
    if (in_first >= length) {
        block_change(backing, block, (int64_t)per_byte * length);
    } else {
        block_change(backing, block, (int64_t)per_byte * in_first);
        block_change(backing, block + 1, (int64_t)per_byte * (length - in_first));
    }
}

static void change_pins(struct backing *backing, uint64_t offset, unsigned length, int64_t delta)
{
    uint64_t first = offset / BACKING_BLOCK, last = (offset + length - 1) / BACKING_BLOCK;
    for (uint64_t block = first; block <= last; block++)
        block_change(backing, block, delta * (int64_t)PIN_ONE);
}

void backing_pin(struct backing *backing, uint64_t offset, unsigned length)
{
    change_pins(backing, offset, length, 1);
}

void backing_unpin(struct backing *backing, uint64_t offset, unsigned length)
{
    change_pins(backing, offset, length, -1);
}

void backing_free(struct backing *backing, uint64_t offset, unsigned length)
{
    change_live(backing, offset, length, -1);
}

uint64_t backing_blocks_used(struct backing *backing)
{
    return atomic_load_explicit(&backing->blocks_used, memory_order_relaxed);
}

/* ---- I/O ------------------------------------------------------------------- */

/* O_DIRECT refused for this range (a file system with larger sectors, or
 * one that takes O_DIRECT at open but not at I/O): go on through the cache. */
static bool drop_direct(struct backing *backing)
{
    if (!atomic_exchange(&backing->direct, false))
        return false;
    int flags = fcntl(backing->fd, F_GETFL);
    return flags >= 0 && fcntl(backing->fd, F_SETFL, flags & ~O_DIRECT) == 0;
}

/* pread or pwrite the whole range; -errno, or -EIO for a short transfer
 * that made no progress (the end of a device). */
static int transfer(struct backing *backing, bool write, void *buf, size_t length, uint64_t offset)
{
    size_t done = 0;
    while (done < length) {
        ssize_t n =
            write ? pwrite(backing->fd, (char *)buf + done, length - done, (off_t)(offset + done))
                  : pread(backing->fd, (char *)buf + done, length - done, (off_t)(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EINVAL && done == 0 && drop_direct(backing))
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        done += (size_t)n;
    }
    return 0;
}

static uint64_t sum_of(const unsigned char *bytes, uint64_t covered)
{
    return (XXH3_64bits(bytes, (size_t)covered) & ~SUM_COVERED_MASK) | covered;
}

/* Whether the blocks read into `buffer` from block `first` on hold what was written in them,
 * as far as the object [offset, offset + length) needs: the words were loaded (`sums`) before
 * the read, so a block written again meanwhile (the open block, its tail appended to) is
 * checked over the bytes it had then, which did not change. */
static bool sums_match(const uint64_t *sums, const unsigned char *buffer, uint64_t first,
                       unsigned blocks, uint64_t offset, unsigned length)
{
    for (unsigned i = 0; i < blocks; i++) {
        uint64_t start = (first + i) * BACKING_BLOCK;
        uint64_t end =
            offset + length < start + BACKING_BLOCK ? offset + length : start + BACKING_BLOCK;
        uint64_t covered = sums[i] & SUM_COVERED_MASK;
        if (end - start > covered || sum_of(buffer + (size_t)i * BACKING_BLOCK, covered) != sums[i])
            return false;
    }
    return true;
}

int backing_read(struct backing *backing, uint64_t offset, unsigned length, const void **data)
{
    uint64_t first = offset / BACKING_BLOCK, last = (offset + length - 1) / BACKING_BLOCK;
    unsigned blocks = (unsigned)(last - first + 1);
    uint64_t sums[2];
    for (unsigned i = 0; i < blocks; i++)
        sums[i] = atomic_load_explicit(&backing->sums[first + i], memory_order_acquire);
    if (FAULT_POINT(FAULT_IO))
        return -EIO;
    int rc = transfer(backing, false, read_buffer, (size_t)blocks * BACKING_BLOCK,
                      first * BACKING_BLOCK);
    if (rc < 0)
        return rc;
    if (!sums_match(sums, read_buffer, first, blocks, offset, length)) {
        atomic_fetch_add_explicit(backing->checksum_errors, 1, memory_order_relaxed);
        return -EBADMSG;
    }
    *data = read_buffer + offset % BACKING_BLOCK;
    return 0;
}

/* ---- the appender ----------------------------------------------------------- */

/* Unpin the batch's blocks from index `from` on, and forget them. */
static void drop_blocks(struct backing *backing, unsigned from)
{
    for (unsigned i = from; i < backing->count; i++)
        block_change(backing, backing->first + i, -(int64_t)PIN_ONE);
    backing->count = from;
    if (from == 0)
        backing->first = NO_BLOCK;
}

int backing_append(struct backing *backing, const void *data, unsigned length, bool reserve,
                   uint64_t *offset)
{
    for (;;) {
        if (backing->count == 0) {
            uint64_t block = claim_any(backing, reserve);
            if (block == NO_BLOCK)
                return -ENOSPC;
            backing->first = block;
            backing->count = 1;
            backing->used = backing->start_used = 0;
            memset(backing->buffer, 0, BACKING_BLOCK);
        }
        unsigned room = backing->count * BACKING_BLOCK - backing->used;
        if (length > room) {
            uint64_t next = backing->first + backing->count;
            if (backing->count < BACKING_BATCH_BLOCKS && claim_free(backing, next, reserve)) {
                memset(backing->buffer + backing->count * BACKING_BLOCK, 0, BACKING_BLOCK);
                backing->count++;
            } else if (backing->used > backing->start_used) {
                return -EAGAIN; /* write what is there first */
            } else {
                /* Nothing waits to be written: leave the open block's tail
                 * and go on in another free run. */
                drop_blocks(backing, 0);
                continue;
            }
        }
        *offset = backing->first * BACKING_BLOCK + backing->used;
        memcpy(backing->buffer + backing->used, data, length);
        backing->used += length;
        change_live(backing, *offset, length, 1);
        return 0;
    }
}

bool backing_batch_pending(const struct backing *backing)
{
    return backing->count > 0 && backing->used > backing->start_used;
}

const void *backing_appended(const struct backing *backing, uint64_t offset)
{
    return backing->buffer + (offset - backing->first * BACKING_BLOCK);
}

int backing_flush(struct backing *backing)
{
    if (!backing_batch_pending(backing))
        return 0;
    if (FAULT_POINT(FAULT_IO))
        return -EIO;
    int rc = transfer(backing, true, backing->buffer, (size_t)backing->count * BACKING_BLOCK,
                      backing->first * BACKING_BLOCK);
    /* Written: the checksum of what each block now holds, stored before any of its objects
     * is published (release: a reader that finds an object finds its block's word). */
    for (unsigned i = 0; rc == 0 && i < backing->count; i++) {
        unsigned start = i * BACKING_BLOCK;
        uint64_t covered = backing->used <= start                   ? 0
                           : backing->used - start >= BACKING_BLOCK ? BACKING_BLOCK
                                                                    : backing->used - start;
        atomic_store_explicit(&backing->sums[backing->first + i],
                              sum_of(backing->buffer + start, covered), memory_order_release);
    }
    return rc;
}

void backing_end_batch(struct backing *backing, bool written)
{
    if (backing->count == 0)
        return;
    if (!written) {
        /* The open block keeps what earlier batches wrote into it. */
        backing->used = backing->start_used;
        drop_blocks(backing, backing->used ? 1 : 0);
        return;
    }
    unsigned last = (backing->used - 1) / BACKING_BLOCK;
    bool last_full = backing->used % BACKING_BLOCK == 0;
    unsigned keep = last_full ? last + 1 : last; /* blocks before the one kept open */
    for (unsigned i = 0; i < keep; i++)
        block_change(backing, backing->first + i, -(int64_t)PIN_ONE);
    if (last_full) {
        backing->count = 0;
        backing->first = NO_BLOCK;
        return;
    }
    memmove(backing->buffer, backing->buffer + (size_t)last * BACKING_BLOCK, BACKING_BLOCK);
    backing->first += last;
    backing->count = 1;
    backing->used = backing->start_used = backing->used % BACKING_BLOCK;
}

/* Half a block or less of live bytes: worth moving (see backing_sparse). */
#define SPARSE_LIVE (BACKING_BLOCK / 2)

bool backing_sparse(const struct backing *backing, uint64_t offset, unsigned length)
{
    uint64_t first = offset / BACKING_BLOCK, last = (offset + length - 1) / BACKING_BLOCK;
    for (uint64_t block = first; block <= last; block++) {
        if (backing->count && block >= backing->first && block < backing->first + backing->count)
            continue; /* the appender's own */
        uint64_t live =
            atomic_load_explicit(&backing->meta[block], memory_order_relaxed) & LIVE_MASK;
        if (live <= SPARSE_LIVE)
            return true;
    }
    return false;
}

void backing_drop_dead_open(struct backing *backing)
{
    if (backing->count == 1 && !backing_batch_pending(backing) &&
        (atomic_load_explicit(&backing->meta[backing->first], memory_order_acquire) & LIVE_MASK) ==
            0)
        drop_blocks(backing, 0);
}

/* ---- open and close ------------------------------------------------------------ */

static void *map_zeroed(size_t bytes)
{
    if (FAULT_POINT(FAULT_ALLOC))
        return MAP_FAILED;
    return mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                -1, 0);
}

/* The size of a file (emptied, then sized) or a device; 0 or -errno. */
static int size_backing(int fd, const struct stat *st, uint64_t *size)
{
    if (S_ISBLK(st->st_mode)) {
        uint64_t device_bytes;
        if (ioctl(fd, BLKGETSIZE64, &device_bytes) < 0)
            return -errno;
        if (*size == 0 || *size > device_bytes)
            *size = device_bytes;
        return 0;
    }
    if (*size == 0)
        return -EINVAL;
    /* Ours to empty (backing_file_open() made sure): the store is not an image. */
    if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)*size) < 0)
        return -errno;
    return 0;
}

/* The store's metadata: live bytes and pins in memory; checksum words after them, or shared
 * from a state file at `kept->sums_offset`. */
static int map_meta(struct backing *backing, const struct backing_kept *kept)
{
    uint64_t words = (backing->blocks + 63) / 64;
    size_t sums = backing->blocks * sizeof *backing->sums;
    backing->meta_bytes = backing->blocks * sizeof *backing->meta + (kept ? 0 : sums);
    backing->bitmap_bytes = words * sizeof *backing->bitmap;
    backing->meta = map_zeroed(backing->meta_bytes);
    backing->sums = backing->meta == MAP_FAILED ? NULL : backing->meta + backing->blocks;
    if (kept && backing->meta != MAP_FAILED) {
        void *map = FAULT_POINT(FAULT_ALLOC)
                        ? MAP_FAILED
                        : mmap(NULL, sums, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                               kept->fd, (off_t)kept->sums_offset);
        backing->sums = map == MAP_FAILED ? NULL : map;
        backing->sums_bytes = map == MAP_FAILED ? 0 : sums;
        backing->sums_fd = kept->fd;
        backing->sums_offset = kept->sums_offset;
    }
    backing->bitmap = map_zeroed(backing->bitmap_bytes);
    backing->buffer = NULL;
    if (FAULT_POINT(FAULT_ALLOC) ||
        posix_memalign((void **)&backing->buffer, BACKING_BLOCK,
                       (size_t)BACKING_BATCH_BLOCKS * BACKING_BLOCK) != 0)
        backing->buffer = NULL;
    if (backing->meta == MAP_FAILED || !backing->sums || backing->bitmap == MAP_FAILED ||
        !backing->buffer)
        return -ENOMEM;
    /* Blocks past the capacity look used, so the search can take whole words. */
    for (uint64_t block = backing->blocks; block < words * 64; block++)
        bit_set(backing->bitmap, block);
    return 0;
}

/* A store taken over (`adopt`): its file as it is, which must be the size recorded. */
static int size_kept(const struct backing_file *file, uint64_t *size)
{
    if (file->created)
        return -ENOENT; /* gone, and with it the pages written back */
    if (!S_ISBLK(file->st.st_mode))
        return (uint64_t)file->st.st_size == *size ? 0 : -ESTALE;
    uint64_t device_bytes;
    if (ioctl(file->fd, BLKGETSIZE64, &device_bytes) < 0)
        return -errno;
    return device_bytes >= *size ? 0 : -ESTALE;
}

int backing_open(const char *path, uint64_t size, unsigned flags, _Atomic uint64_t *checksum_errors,
                 struct backing **out)
{
    return backing_open_kept(path, size, flags, checksum_errors, NULL, out);
}

int backing_open_kept(const char *path, uint64_t size, unsigned flags,
                      _Atomic uint64_t *checksum_errors, const struct backing_kept *kept,
                      struct backing **out)
{
    bool adopt = kept && kept->adopt;
    struct backing_file file;
    int rc = backing_file_open(path, adopt ? flags | UZRAM_BACKING_OVERWRITE : flags, &file);
    if (rc < 0)
        return rc;
    rc = adopt ? size_kept(&file, &size) : size_backing(file.fd, &file.st, &size);
    size -= size % BACKING_BLOCK;
    if (rc == 0 && (size < 2 * BACKING_BLOCK || size > BACKING_MAX_BYTES))
        rc = -EINVAL;
    struct backing *backing = NULL;
    if (rc == 0) {
        backing = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *backing);
        rc = backing ? 0 : -ENOMEM;
    }
    if (rc < 0) {
        backing_file_abandon(path, &file);
        return rc;
    }
    backing->fd = file.fd;
    backing->file = file.regular;
    backing->kept = kept != NULL;
    backing->sums_fd = -1; /* map_meta: the state's, when kept */
    atomic_init(&backing->direct, file.direct);
    atomic_init(&backing->punching, backing->file);
    backing->checksum_errors = checksum_errors;
    backing->blocks = size / BACKING_BLOCK;
    backing->first = NO_BLOCK;
    pthread_mutex_init(&backing->lock, NULL);
    backing->path = FAULT_POINT(FAULT_ALLOC) ? NULL : strdup(path);
    if (map_meta(backing, kept) < 0 || !backing->path) {
        backing->fd = -1; /* the file is closed (and removed if made here) below */
        backing_close(backing);
        backing_file_abandon(path, &file);
        return -ENOMEM;
    }
    /* Room for compaction to write a batch, or an eighth of a small store. */
    backing->reserve =
        backing->blocks / 8 < BACKING_BATCH_BLOCKS ? backing->blocks / 8 : BACKING_BATCH_BLOCKS;
    *out = backing;
    return 0;
}

void backing_adopt_object(struct backing *backing, uint64_t offset, unsigned length)
{
    uint64_t first = offset / BACKING_BLOCK, last = (offset + length - 1) / BACKING_BLOCK;
    for (uint64_t block = first; block <= last; block++)
        if (!bit_test(backing->bitmap, block)) {
            bit_set(backing->bitmap, block);
            backing->blocks_taken++;
            atomic_fetch_add_explicit(&backing->blocks_used, 1, memory_order_relaxed);
        }
    uint64_t block = first;
    unsigned in_first = BACKING_BLOCK - (unsigned)(offset % BACKING_BLOCK);
    atomic_fetch_add(&backing->meta[block], in_first >= length ? length : in_first);
    if (in_first < length)
        atomic_fetch_add(&backing->meta[block + 1], length - in_first);
}

bool backing_adopt_fits(const struct backing *backing, uint64_t offset, unsigned length)
{
    return length >= 1 && length <= BACKING_BLOCK &&
           offset + length <= backing->blocks * BACKING_BLOCK;
}

/* The first block at or after `from` whose bit is `used`, by whole words where it can;
 * `backing->blocks` if none (bits past the capacity are set). */
static uint64_t next_with_bit(const struct backing *backing, uint64_t from, bool used)
{
    while (from < backing->blocks) {
        uint64_t word = backing->bitmap[from / 64] ^ (used ? 0 : ~0ull);
        word &= ~0ull << (from % 64);
        if (word)
            return from / 64 * 64 + (uint64_t)__builtin_ctzll(word);
        from = (from / 64 + 1) * 64;
    }
    return backing->blocks;
}

void backing_adopt_finish(struct backing *backing)
{
    /* What no page names (written by a process killed before it published it, or released
     * and not yet punched) is free: its hole punched, as a release would have. */
    for (uint64_t block = next_with_bit(backing, 0, false);
         block < backing->blocks && atomic_load(&backing->punching);) {
        uint64_t end = next_with_bit(backing, block, true);
        if (end > backing->blocks)
            end = backing->blocks;
        /* As on the release path: a file system that cannot punch stops the punching; any
         * other error leaves that run's space allocated, and the blocks free in the map all
         * the same (nothing stored is at stake, only disk space). */
        if (punch(backing, block, end - block) < 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
            atomic_store(&backing->punching, false);
        block = next_with_bit(backing, end, false);
    }
}

void backing_close(struct backing *backing)
{
    if (!backing)
        return;
    /* Nothing of value is left: an empty file, which the next server takes as it is. A store
     * kept in a state is the successor's (backing_close_kept). */
    if (backing->fd >= 0 && backing->file && !backing->kept && ftruncate(backing->fd, 0) < 0 &&
        atomic_load(&backing->punching))
        punch(backing, 0, backing->blocks);
    if (backing->fd >= 0)
        close(backing->fd);
    if (backing->meta && backing->meta != MAP_FAILED)
        munmap(backing->meta, backing->meta_bytes);
    if (backing->sums_bytes)
        munmap((void *)backing->sums, backing->sums_bytes);
    if (backing->bitmap && backing->bitmap != MAP_FAILED)
        munmap(backing->bitmap, backing->bitmap_bytes);
    pthread_mutex_destroy(&backing->lock);
    free(backing->buffer);
    free(backing->path);
    free(backing);
}

void backing_close_emptied(struct backing *backing)
{
    if (backing)
        backing->kept = false;
    backing_close(backing);
}

const char *backing_path(const struct backing *backing)
{
    return backing->path;
}

uint64_t backing_capacity(const struct backing *backing)
{
    return backing->blocks * BACKING_BLOCK;
}
