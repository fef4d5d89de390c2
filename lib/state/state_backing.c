/* state_backing.c - a device's backing store kept with its state file (issue 29): the store's
 * file stays the user's file on disk, named by its absolute path in the state's header, and
 * its checksum words live in the state (backing.h, backing_open_kept), so that a process
 * taking the state over opens the same file again, as it is, and reads every page written
 * back to it.
 *
 * Crash consistency. The table is the map of the store: adoption counts each block's live
 * bytes from the slots that name it (state_adopt.c) and frees (punches) every other block.
 * A block the appender wrote but whose objects were not published yet is named by no slot:
 * free after adoption. A published object was written (backing_flush) and its blocks'
 * checksum words stored before its slot names it, and its bytes are freed only after the
 * slot no longer names it (slot_write()'s intent record cleared): a block a slot names
 * (or an intent record would restore) is never free, so never handed out twice. The open
 * block written again by a later batch keeps the bytes it had, which its older, shorter
 * checksum covers: a kill between that write and the new checksum leaves both right.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backing/backing.h"
#include "state/state.h"
#include "common/sums.h"

int state_backing_open(struct uzram *dev, const char *path, uint64_t size, unsigned flags,
                       struct backing **out)
{
    struct state_file *state = dev->state;
    if (!state)
        return backing_open(path, size, flags, &dev->events->bd_checksum_errors, out);
    /* Stale words of a store attached before: nothing reads them (a block's word is set
     * when it is written), but they are memory. */
    (void)fallocate(state->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    (off_t)state->header->sums_offset, (off_t)state->header->sums_bytes);
    struct backing_kept kept = {.fd = state->fd, .sums_offset = state->header->sums_offset};
    int rc = backing_open_kept(path, size, flags, &dev->events->bd_checksum_errors, &kept, out);
    if (rc < 0)
        return rc;
    /* The next process finds it by this name, whatever its working directory. */
    char *absolute = realpath(path, NULL);
    rc = !absolute                                   ? -errno
         : strlen(absolute) >= STATE_BACKING_PATH    ? -ENAMETOOLONG
         : strcmp(absolute, backing_path(*out)) != 0 ? 1
                                                     : 0;
    if (rc == 1) {
        /* Reopened under its absolute name, so that uzram_get_backing_dev() says it. */
        backing_close(*out);
        rc = backing_open_kept(absolute, size, flags | UZRAM_BACKING_OVERWRITE,
                               &dev->events->bd_checksum_errors, &kept, out);
    } else if (rc < 0) {
        backing_close_emptied(*out);
    }
    free(absolute);
    return rc;
}

/* The sum (sums.h) of the backing store's record: its size, flags and path. */
static uint32_t record_sum(const struct state_header *header, uint64_t bytes)
{
    struct {
        uint64_t bytes;
        uint32_t flags, zero;
        char path[STATE_BACKING_PATH];
    } record = {bytes, header->backing_flags, 0, {0}};
    memcpy(record.path, header->backing_path, sizeof record.path);
    return sums_32(&record, sizeof record);
}

void state_backing_record(struct uzram *dev, const struct backing *backing, unsigned flags)
{
    if (!dev->state)
        return;
    struct state_header *header = dev->state->header;
    atomic_store(&header->backing_bytes, 0); /* detached (NULL): forgotten */
    if (!backing)
        return;
    atomic_thread_fence(memory_order_seq_cst); /* the other fields only after */
    header->backing_flags = flags;
    memset(header->backing_path, 0, sizeof header->backing_path);
    strncpy(header->backing_path, backing_path(backing), sizeof header->backing_path - 1);
    header->backing_sum = record_sum(header, backing_capacity(backing));
    atomic_thread_fence(memory_order_seq_cst);
    atomic_store(&header->backing_bytes, backing_capacity(backing)); /* last: whole */
}

int state_backing_adopt(struct uzram *dev)
{
    struct state_header *header = dev->state->header;
    uint64_t size = atomic_load(&header->backing_bytes);
    if (size == 0)
        return 0;
    if (header->backing_sum != record_sum(header, size) || size > BACKING_MAX_BYTES ||
        header->backing_path[0] != '/' ||
        !memchr(header->backing_path, '\0', sizeof header->backing_path))
        return sums_damage("header: the backing store's record (its size, flags and path) does "
                           "not match its sum");
    struct backing_kept kept = {
        .fd = dev->state->fd, .sums_offset = header->sums_offset, .adopt = true};
    struct backing *backing;
    int rc = backing_open_kept(header->backing_path, size, header->backing_flags,
                               &dev->events->bd_checksum_errors, &kept, &backing);
    if (rc == 0)
        atomic_store_explicit(&dev->backing, backing, memory_order_release);
    return rc;
}
