/* backing.h - the backing store: written-back objects packed into the 4 KiB blocks of a file or
 * a block device (internal). Space, pins and the appender; writeback decides what goes there. */
#ifndef UZRAM_BACKING_H
#define UZRAM_BACKING_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Layout. The store is an array of 4 KiB blocks. Objects (compressed pages
 * of 1..4096 bytes) are appended one after the other, without headers: the
 * page slot or dedup entry that owns an object knows its offset, length and
 * codec. An object may run on from one block into the next when that block
 * is free, so one object lies in at most two blocks and a read is one pread
 * of 4 or 8 KiB. Where the next block is in use, the rest of the open block
 * stays empty (its tail) and appending goes on in the next free run.
 *
 * Per block, one word: the bytes of live objects in it (low half) and the
 * pins of readers and of the appender (high half). A block whose word
 * reaches 0 is released: in a file its hole is punched (FALLOC_FL_PUNCH_HOLE
 * | KEEP_SIZE, in batches of PUNCH_BATCH blocks or when backing_trim() is
 * called) so that the file's allocated blocks shrink, and it can be used
 * again; a block device's block is simply used again.
 *
 * Readers pin the blocks of an object before they drop the lock that keeps
 * it alive (the page slot) and unpin them after their pread: while pinned, a
 * block is neither released nor reused, so a reader racing with an
 * overwrite or a discard still reads the object it found.
 *
 * The appender fills a buffer of up to BACKING_BATCH_BLOCKS contiguous
 * blocks, the first of which may be the open block of the previous batch,
 * and writes it with one pwrite (backing_flush). The objects it appended may
 * only be published (made known to readers) after backing_flush() succeeds,
 * and must be kept until backing_end_batch(): the caller compares their
 * bytes (backing_appended()) with what the page still holds. One thread
 * appends at a time: the caller serialises (writeback's lock).
 *
 * Files are opened with O_DIRECT where the file system allows it: the point
 * of the store is to take pages out of memory, not into the page cache.
 *
 * Checksums. A disk, a file system or another process may change the store;
 * a read must never return other bytes than were written. Per block, one
 * more word in memory: how many bytes from its start the last write of the
 * block covered (the objects appended so far) and the upper 51 bits of their
 * XXH3 hash, stored after each successful backing_flush() and before any of
 * its objects is published. A read loads the words of its 1-2 blocks first,
 * then preads them, and checks the hash of each block's covered bytes, which
 * must include the object's part: a mismatch (bit flips, a truncated and
 * regrown file, another block's bytes) is -EBADMSG and counts in the
 * device's bd_checksum_errors. The open block written again by the next batch
 * keeps the bytes it had, so a read that races with that write checks the
 * older, shorter prefix and still matches. Cost: 8 bytes of memory per 4 KiB
 * block of the store's capacity, only where blocks have been written
 * (MAP_NORESERVE): at most 8 bytes per written-back page (a raw one), about
 * 8 divided by the compression ratio for a compressed one, and a hash of 4-8
 * KiB per read of the store.
 *
 * Thread safety: backing_read, backing_pin, backing_unpin, backing_free,
 * backing_trim and the counters may be called from any thread at any time;
 * the appender functions by one thread at a time. Locks: `lock` (space) is a
 * leaf; no page slot, dedup or pool lock is taken while holding it.
 */

#define BACKING_BLOCK 4096u
/* Offsets are kept in 47 bits (a dedup entry's handle marks a written-back
 * object with bit 47): 128 TiB. */
#define BACKING_MAX_BYTES (1ull << 47)
/* A batch: 64 objects of up to a page each, plus the open block. */
#define BACKING_BATCH_BLOCKS 66u

struct backing;

/* Open the store at `path` by the rules of backing_file_open() (`flags`: UZRAM_BACKING_*):
 * a file is created if missing, emptied and sized sparsely to `size` bytes; of a block
 * device `size` 0 means the whole device, else at most that many bytes. Files are locked
 * (flock) against a second server. Reads whose bytes do not match the checksums of what was
 * written count in `*checksum_errors`. Errors: those of backing_file_open(); -errno of
 * ftruncate; -EINVAL `size` of less than 2 blocks or above BACKING_MAX_BYTES (0 for a file);
 * -EBUSY the file is locked; -ENOMEM. */
int backing_open(const char *path, uint64_t size, unsigned flags, _Atomic uint64_t *checksum_errors,
                 struct backing **out);

/* A store of a device with a state file (issue 29): its checksum words live in the state
 * (`fd`, from `sums_offset`: 8 bytes a block of the capacity) instead of memory, so that they
 * outlive the process; `adopt`: the store of a state taken over, opened as it is (no
 * emptying: the size must be the one recorded, -ESTALE else; a missing file -ENOENT), its
 * live blocks then made known with backing_adopt_object() for each object a page names, and
 * the rest punched out by backing_adopt_finish(). Nothing else of the store needs keeping:
 * the live bytes of a block are what the page table names in it, and a block written but not
 * yet published holds nothing any page names. */
struct backing_kept {
    int fd;
    uint64_t sums_offset;
    bool adopt;
};
int backing_open_kept(const char *path, uint64_t size, unsigned flags,
                      _Atomic uint64_t *checksum_errors, const struct backing_kept *kept,
                      struct backing **out);
/* Whether an object of `length` bytes at `offset` lies within the store (adoption's check of
 * a slot before it counts it). */
bool backing_adopt_fits(const struct backing *backing, uint64_t offset, unsigned length);
void backing_adopt_object(struct backing *backing, uint64_t offset, unsigned length);
void backing_adopt_finish(struct backing *backing);

/* Free everything; empty the file (it holds nothing of value once no page refers to it: the
 * next server takes an empty file as it is), unless the store is kept in a state
 * (backing_open_kept): then it is the successor's. backing_close_emptied() empties it in
 * any case (a store replaced while no page is stored). */
void backing_close(struct backing *backing);
void backing_close_emptied(struct backing *backing);

const char *backing_path(const struct backing *backing);
uint64_t backing_capacity(const struct backing *backing); /* bytes */

/* Blocks in use (holding live data, or filled by the appender): bd_count. */
uint64_t backing_blocks_used(struct backing *backing);

/* ---- readers ------------------------------------------------------------ */

/* Pin / unpin the blocks of the object at `offset` of `length` bytes. Pin
 * only an object that is alive (its owner locked). */
void backing_pin(struct backing *backing, uint64_t offset, unsigned length);
void backing_unpin(struct backing *backing, uint64_t offset, unsigned length);

/* Read the object at `offset` of `length` bytes (pinned, or its owner
 * locked): *data points to it in a buffer of this thread, valid until its
 * next call. Errors: -EIO (or the -errno of pread) when the read fails or
 * comes back short; -EBADMSG (counted) when the blocks read do not hold what
 * was written there (see "Checksums" above). */
int backing_read(struct backing *backing, uint64_t offset, unsigned length, const void **data);

/* The object at `offset` of `length` bytes is no longer used: its bytes
 * stop counting as live, and a block left without live bytes or pins is
 * released. */
void backing_free(struct backing *backing, uint64_t offset, unsigned length);

/* Punch the holes of the blocks released so far (a file). */
void backing_trim(struct backing *backing);

/* ---- the appender (one thread at a time) -------------------------------- */

/* Place `length` (1..4096) bytes of `data` after the last object: returns 0
 * with their offset in *offset; -EAGAIN when they only fit after the batch
 * is written (backing_flush, backing_end_batch); -ENOSPC when no block is
 * free. The last free blocks (an eighth of the store, at most a batch) are
 * kept for compaction, which passes `reserve` to take them: it can always
 * move objects together, even in a full store. The bytes count as live
 * from now on: an object that is not published must be freed with
 * backing_free(). */
int backing_append(struct backing *backing, const void *data, unsigned length, bool reserve,
                   uint64_t *offset);

/* Compaction: whether the object at `offset` of `length` bytes lies in a
 * block (other than the appender's) whose live bytes are half a block or
 * less. Moving the objects of such blocks together empties them, so that
 * after a pass every block but the open ones is more than half full: the
 * store takes at most twice its live bytes, plus the open blocks. */
bool backing_sparse(const struct backing *backing, uint64_t offset, unsigned length);

/* Whether anything was appended since the last backing_end_batch(). */
bool backing_batch_pending(const struct backing *backing);

/* The bytes of an object appended in this batch. */
const void *backing_appended(const struct backing *backing, uint64_t offset);

/* Write the batch. Errors: the -errno of pwrite (-ENOSPC: the file system
 * is full), -EIO. On failure nothing of the batch may be published. */
int backing_flush(struct backing *backing);

/* Between batches: if the block kept open for the next batch holds no live
 * object any more, let it go (so an empty store holds no block). */
void backing_drop_dead_open(struct backing *backing);

/* Close the batch: after a successful flush keep the last block open for
 * the next one; after a failed one (`written` false) forget the batch (its
 * objects must have been freed) and go back to where it started. */
void backing_end_batch(struct backing *backing, bool written);

#endif
