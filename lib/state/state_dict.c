/* state_dict.c - codec dictionaries kept in a device's state file: each codec entry's bytes
 * at its id's place in the dictionary region, written before the entry is saved as used and
 * read back at adoption to make the dictionary again.
 *
 * Crash consistency (with state.c's save_codec() and codec_table.c):
 * - An entry's bytes are in the file before its header record says `used` with their size,
 *   and that before its setting names it, so before any writer can take it and any slot can
 *   name it: a slot naming entry `id` always finds its dictionary whole.
 * - An entry is freed only when its last user is gone, and a slot's user (its stored object)
 *   is released only after slot_write() cleared the intent record naming the slot's old
 *   form: no record that adoption could restore names a freed entry.
 * - The free is saved at once (under the table's lock: the record says unused, then the
 *   region is emptied); only then can the id be made again with other bytes. A process killed
 *   while it writes new bytes, or between a free's record and its emptying, leaves a record
 *   that says unused: adoption ignores its bytes and empties its region.
 * - A setting names only a record that says used: state_save_codecs() saves the entries
 *   made, then the settings, then the entries freed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/fault.h"
#include "state/state.h"
#include "common/sums.h"

static off_t dict_at(const struct state_file *state, unsigned id)
{
    return (off_t)(state->header->dict_offset + (uint64_t)id * STATE_DICT_BYTES);
}

int state_save_dict(void *arg, unsigned id, const void *bytes, size_t size)
{
    struct state_file *state = arg;
    if (size == 0 || size > STATE_DICT_BYTES || id >= CODEC_TABLE_MAX)
        return -EINVAL;
    if (FAULT_POINT(FAULT_ALLOC))
        return -ENOMEM; /* tmpfs full (ENOSPC) is the same failure to the caller */
    const unsigned char *from = bytes;
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(state->fd, from + done, size - done, dict_at(state, id) + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int rc = n < 0 ? -errno : -EIO;
            state_forget_dict(state, id); /* what was written of it, which nothing names */
            return rc;
        }
        done += (size_t)n;
    }
    /* the record says unused until after this (save_codec): no successor checks it before */
    state->header->codecs[id].dict_sum = sums_32(bytes, size);
    return 0;
}

int state_load_dict(struct state_file *state, unsigned id, int algorithm, int level,
                    struct comp_dict **out)
{
    *out = NULL;
    uint32_t size = state->header->codecs[id].dict_bytes;
    if (size == 0)
        return 0;
    if (size > STATE_DICT_BYTES || size < COMP_DICT_MIN)
        return sums_damage("header: codec record %u gives its dictionary %u bytes", id, size);
    void *bytes = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(size);
    if (!bytes)
        return -ENOMEM;
    int rc = pread(state->fd, bytes, size, dict_at(state, id)) == (ssize_t)size ? 0 : -EIO;
    if (rc == 0 && sums_32(bytes, size) != state->header->codecs[id].dict_sum)
        rc = sums_damage("dictionary of codec record %u (bytes %lld to %lld): its bytes do not "
                         "match their sum",
                         id, (long long)dict_at(state, id),
                         (long long)dict_at(state, id) + size - 1);
    if (rc == 0)
        rc = comp_dict_create(algorithm, level, bytes, size, out);
    free(bytes);
    return rc;
}

void state_forget_dict(struct state_file *state, unsigned id)
{
    /* Only memory is at stake: a failure leaves the bytes, which nothing names. */
    (void)fallocate(state->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, dict_at(state, id),
                    STATE_DICT_BYTES);
}
