/* state.c - a device's state in a shareable file: its layout and header, made, opened for
 * adoption and let go; the slot-change helper (intent records); the application's area and
 * quiesce. The rebuild at adoption is state_adopt.c's. */
#include "state/state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "backing/backing.h"
#include "backing/backing_file.h"
#include "bundle/bundle_records.h"
#include "codec/comp.h"
#include "dedup/dedup.h"
#include "common/fault.h"
#include "pool/pool.h"
#include "common/sums.h"

#define STATE_MAGIC "UZRAMST"
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

static uint64_t round_up(uint64_t value, uint64_t to)
{
    return (value + to - 1) / to * to;
}

void state_layout(struct state_header *header, uint64_t disksize)
{
    memset(header, 0, sizeof *header);
    header->version = STATE_VERSION;
    header->page_size = UZRAM_PAGE_SIZE;
    header->disksize = disksize;
    header->intents = STATE_INTENTS;
    header->dir_offset = STATE_DIR_OFFSET;
    header->dir_bytes = POOL_WINDOWS * sizeof(uint32_t);
    header->dict_offset = round_up(header->dir_offset + header->dir_bytes, 4096);
    header->dict_bytes = (uint64_t)CODEC_TABLE_MAX * STATE_DICT_BYTES;
    header->table_offset = header->dict_offset + header->dict_bytes;
    header->table_bytes = round_up(disksize / UZRAM_PAGE_SIZE * sizeof(struct slot), 4096);
    header->sums_offset = header->table_offset + header->table_bytes;
    header->sums_bytes = BACKING_MAX_BYTES / BACKING_BLOCK * sizeof(uint64_t);
    header->dedup_offset = round_up(header->sums_offset + header->sums_bytes, 4096);
    header->dedup_bytes = round_up(dedup_file_bytes(disksize / UZRAM_PAGE_SIZE), 4096);
    header->bundle_offset = round_up(header->dedup_offset + header->dedup_bytes, 4096);
    header->bundle_bytes = bundle_records_bytes(disksize / UZRAM_PAGE_SIZE);
    header->pool_offset = round_up(header->bundle_offset + header->bundle_bytes, 2u << 20);
    header->pool_bytes = POOL_FILE_BYTES;
    header->file_bytes = header->pool_offset + header->pool_bytes;
}

/* Map the header, area, intents and directory of `fd`, and the private bitmap. */
static int state_map(int fd, uint64_t disksize, struct state_file **out)
{
    struct state_file *state = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *state);
    if (!state)
        return -ENOMEM;
    uint64_t table_pages =
        (disksize / UZRAM_PAGE_SIZE + STATE_SLOTS_PER_PAGE - 1) / STATE_SLOTS_PER_PAGE;
    state->written =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc((table_pages + 63) / 64, sizeof(uint64_t));
    state->fd = fd;
    state->map_bytes = STATE_DIR_OFFSET + POOL_WINDOWS * sizeof(uint32_t);
    void *map = !state->written || FAULT_POINT(FAULT_ALLOC)
                    ? MAP_FAILED
                    : mmap(NULL, state->map_bytes, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (map == MAP_FAILED) {
        free(state->written);
        free(state);
        return -ENOMEM;
    }
    state->map = map;
    state->header = map;
    state->intents = (struct state_intent *)(state->map + STATE_INTENTS_OFFSET);
    state->span_dir = (_Atomic uint32_t *)(state->map + STATE_DIR_OFFSET);
    *out = state;
    return 0;
}

static void state_unmap(struct state_file *state)
{
    munmap(state->map, state->map_bytes);
    free(state->written);
    free(state);
}

/* Shared memory, that is tmpfs (a memfd too): a file elsewhere would be written to disk. */
static bool on_tmpfs(int fd)
{
    struct statfs fs;
    return fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

/* A tmpfs mounted with a size (not a memfd's, which has none) can fill up while the device
 * lives, and a fault that finds it full kills the process (SIGBUS), a read fault too: a
 * hole of shared memory is allocated when touched. So what the device touches through its
 * mappings is allocated with fallocate() first, which fails with ENOSPC instead: here the
 * header, area, intents and the page table whole (16 bytes a page of the disk, as kernel zram
 * allocates its table whole; table.c then never gives a page of it back); pool spans as they
 * are made (pool.c), the backing store's checksum words as its blocks are taken (backing.c),
 * the dedup index's parts as they are mapped (dedup_ids.c); dictionaries are written with
 * pwrite(). */
static int hold_mapped(struct state_file *state, const struct state_header *layout)
{
    struct statfs fs;
    state->limited = fstatfs(state->fd, &fs) == 0 && fs.f_blocks != 0;
    if (!state->limited)
        return 0;
    if (FAULT_POINT(FAULT_ALLOC))
        return -ENOSPC;
    if (fallocate(state->fd, 0, 0, STATE_DIR_OFFSET) < 0 ||
        fallocate(state->fd, 0, (off_t)layout->table_offset, (off_t)layout->table_bytes) < 0)
        return -errno;
    return 0;
}

int state_make(int fd, uint64_t disksize, struct state_file **out)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode) || !on_tmpfs(fd))
        return -EOPNOTSUPP;
    int rc = file_private(&st);
    if (rc < 0)
        return rc;
    if (st.st_size != 0)
        return -EEXIST;
    struct state_header layout;
    state_layout(&layout, disksize);
    if (ftruncate(fd, (off_t)layout.file_bytes) < 0)
        return -errno;
    rc = state_map(fd, disksize, out);
    if (rc == 0 && (rc = hold_mapped(*out, &layout)) < 0)
        state_unmap(*out);
    if (rc < 0) {
        /* back to empty, as given (a failure leaves only the size; (void)! for fortify) */
        (void)!ftruncate(fd, 0);
        return rc;
    }
    memcpy((*out)->header, &layout, sizeof layout);
    return 0;
}

/* The sum of the header's fields fixed at creation (the disk size, its layout, the clock base
 * and the intent records' count). */
static uint64_t fixed_sum(const struct state_header *header)
{
    _Static_assert(offsetof(struct state_header, file_bytes) ==
                       offsetof(struct state_header, dir_offset) + 14 * sizeof(uint64_t),
                   "the layout's fields one after the other");
    struct {
        uint32_t version, page_size;
        uint64_t disksize;
        uint64_t layout[15];
        int64_t clock_base;
        uint32_t intents, zero;
    } fixed = {header->version,
               header->page_size,
               header->disksize,
               {0},
               header->clock_base,
               header->intents,
               0};
    memcpy(fixed.layout, &header->dir_offset, sizeof fixed.layout);
    return sums_64(&fixed, sizeof fixed);
}

void state_publish(struct state_file *state)
{
    state->header->fixed_sum = fixed_sum(state->header);
    atomic_store(&state->header->owner_pid, (int32_t)getpid());
    atomic_thread_fence(memory_order_seq_cst);
    memcpy(state->header->magic, STATE_MAGIC, sizeof STATE_MAGIC);
}

/* Read and check the header of `fd` (not mapped: a file that is no state stays untouched):
 * file_private()'s errors first (another user's file is not read), -EINVAL not a state,
 * -EPROTONOSUPPORT another version, -EUCLEAN a damaged header (sums_damage). */
static int header_read(int fd, struct state_header *header)
{
    sums_damage_clear();
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    int rc = file_private(&st);
    if (rc < 0)
        return rc;
    if (pread(fd, header, sizeof *header, 0) != (ssize_t)sizeof *header ||
        memcmp(header->magic, STATE_MAGIC, sizeof STATE_MAGIC) != 0)
        return -EINVAL;
    if (header->version != STATE_VERSION)
        return -EPROTONOSUPPORT;
    if (header->fixed_sum != fixed_sum(header))
        return sums_damage("header (bytes 8 to %zu): the sum of its fixed fields (disk size, "
                           "layout, clock) does not match them",
                           offsetof(struct state_header, file_bytes) + sizeof(uint64_t));
    if (header->same_filled > 1 || header->use_dedup > 1)
        return sums_damage("header: same_filled %u or use_dedup %u is neither 0 nor 1",
                           header->same_filled, header->use_dedup);
    struct state_header layout;
    state_layout(&layout, header->disksize);
    if ((uint64_t)st.st_size < layout.file_bytes)
        return sums_damage("the file has %lld bytes, and its layout %llu: it was cut short",
                           (long long)st.st_size, (unsigned long long)layout.file_bytes);
    if (header->page_size != UZRAM_PAGE_SIZE || header->disksize == 0 ||
        header->disksize % UZRAM_PAGE_SIZE || header->intents != layout.intents ||
        header->dir_offset != layout.dir_offset || header->dir_bytes != layout.dir_bytes ||
        header->dict_offset != layout.dict_offset || header->dict_bytes != layout.dict_bytes ||
        header->table_offset != layout.table_offset || header->table_bytes != layout.table_bytes ||
        header->sums_offset != layout.sums_offset || header->sums_bytes != layout.sums_bytes ||
        header->dedup_offset != layout.dedup_offset || header->dedup_bytes != layout.dedup_bytes ||
        header->bundle_offset != layout.bundle_offset ||
        header->bundle_bytes != layout.bundle_bytes || header->pool_offset != layout.pool_offset ||
        header->pool_bytes != layout.pool_bytes || header->file_bytes != layout.file_bytes)
        return sums_damage("header: its layout is not the one of a disk of %llu bytes",
                           (unsigned long long)header->disksize);
    return 0;
}

/* A zombie is gone: a server SIGKILLed under memory pressure may stay one for as long as its
 * parent cannot run, e.g. a shell whose pages were swapped out onto the very device the dead
 * server served (its successor must not wait for that). The program has the same check for
 * the other processes it waits on (src/common/util.c's util_process_alive; the engine cannot
 * call the program): change both together. */
static bool process_alive(int32_t pid)
{
    if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
        return false;
    char path[32], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, stat, sizeof stat - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return true;
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* "PID (COMM) STATE ...": COMM may hold ')' */
    return end == NULL || (end[1] != ' ' || (end[2] != 'Z' && end[2] != 'X'));
}

int state_open(int fd, struct state_file **out)
{
    struct state_header header;
    int rc = header_read(fd, &header);
    if (rc < 0)
        return rc;
    int32_t self = (int32_t)getpid(), owner = header.owner_pid;
    if (owner != self && process_alive(owner))
        return -EBUSY;
    rc = state_map(fd, header.disksize, out);
    if (rc == 0 && (rc = hold_mapped(*out, &header)) < 0)
        state_unmap(*out);
    if (rc < 0)
        return rc;
    /* Two successors may race: one takes it. */
    if (!atomic_compare_exchange_strong(&(*out)->header->owner_pid, &owner, self)) {
        state_unmap(*out);
        return -EBUSY;
    }
    atomic_store(&(*out)->header->clean, 0);
    return 0;
}

void state_close(struct state_file *state, bool clean)
{
    atomic_store(&state->header->clean, clean ? 1 : 0);
    atomic_store(&state->header->owner_pid, 0);
    state_unmap(state);
}

/* A process killed while an entry's record is written must not leave it half made and
 * marked used: `used` is cleared first when an entry goes, set last when one comes. An entry
 * used in both never changes (every free is saved before its id can be made again). `made`:
 * this pass writes the records of entries made since the last save, else of those freed. */
static void save_codec(struct state_file *state, unsigned id, const struct codec_entry *entry,
                       bool made)
{
    struct state_codec *saved = &state->header->codecs[id];
    bool was_used = atomic_load_explicit(&saved->used, memory_order_relaxed) != 0;
    if (entry->used != made || was_used == entry->used)
        return;
    bool had_dict = saved->dict_bytes != 0;
    struct state_codec next = {
        .level = entry->config.level,
        .priority = entry->config.priority,
        .dict_auto = entry->config.dict_auto,
        .dict_size = entry->config.dict_size,
        .dict_bytes = entry->dict_saved,
        .trainings = entry->config.trainings,
        .trained_pages = entry->config.trained_pages,
    };
    if (entry->used)
        strncpy(next.algorithm, comp_name(entry->config.algorithm), sizeof next.algorithm - 1);
    atomic_store_explicit(&saved->used, 0, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst); /* no field's store before that */
    /* the other fields one by one (`used` is atomic: no struct copy over it) */
    saved->level = next.level;
    saved->priority = next.priority;
    memcpy(saved->algorithm, next.algorithm, sizeof saved->algorithm);
    saved->dict_auto = next.dict_auto;
    saved->dict_size = next.dict_size;
    saved->dict_bytes = next.dict_bytes;
    saved->trainings = next.trainings;
    saved->trained_pages = next.trained_pages;
    saved->sum = sums_32((const char *)saved + STATE_CODEC_SUMMED_FROM, STATE_CODEC_SUMMED_BYTES);
    atomic_thread_fence(memory_order_seq_cst);
    atomic_store_explicit(&saved->used, entry->used ? 1 : 0, memory_order_seq_cst);
    if (!entry->used && had_dict)
        state_forget_dict(state, id); /* after the header no longer names it */
}

/* In three passes, so that at every instant a setting names a record that says used: the
 * entries made are saved first, then the settings (which may name them now), and only then
 * the entries freed (which a setting may have named until the pass before). Saving a freed
 * entry before the setting that named it moved on leaves, to a process killed in between, a
 * setting naming an unused record: a state adoption refuses (-EINVAL). */
void state_save_codecs(void *arg, const struct codec_table *codecs)
{
    struct state_file *state = arg;
    for (unsigned id = 0; id < CODEC_TABLE_MAX; id++)
        save_codec(state, id, &codecs->entries[id], true);
    for (unsigned p = 0; p <= CODEC_TABLE_PRIORITY_MAX; p++)
        atomic_store_explicit(&state->header->setting[p], atomic_load(&codecs->setting[p]),
                              memory_order_seq_cst);
    for (unsigned id = 0; id < CODEC_TABLE_MAX; id++)
        save_codec(state, id, &codecs->entries[id], false);
}

void state_table_page_gone(struct state_file *state, uint64_t page)
{
    atomic_fetch_and_explicit(&state->written[page / 64], ~(1ull << (page % 64)),
                              memory_order_release);
}

/*
 * The one way a slot changes in a device with a state file. Crash consistency: the record
 * {slot, old info, old ac_time, old value} is written and made visible (a full fence: not
 * even the compiler may move the slot's stores before it) before the slot is touched, and
 * cleared (release) only after the slot holds its new form; the caller frees the old object
 * after that. A process killed at any instant so leaves each slot either whole, or with a
 * record from which adoption restores its old form, whose object is still allocated. The
 * record's sum is stored before its slot number, the slot's check bits with its info word
 * (sums.h): adoption then finds a damaged record or slot, never a half-written one.
 */
int state_slot_write(struct uzram *dev, struct slot *slot, uint32_t info, uint32_t ac_time,
                     uint64_t value)
{
    struct state_file *state = dev->state;
    uint64_t index = (uint64_t)(slot - dev->slots);
    uint64_t page = index / STATE_SLOTS_PER_PAGE;
    if (!(atomic_load_explicit(&state->written[page / 64], memory_order_relaxed) &
          (1ull << (page % 64))))
        atomic_fetch_or_explicit(&state->written[page / 64], 1ull << (page % 64),
                                 memory_order_release);
    struct state_intent *intent = &state->intents[index % STATE_INTENTS];
    struct lock_wait wait = device_lock_wait(dev);
    for (uint32_t free_lock = 0; !atomic_compare_exchange_weak_explicit(
             &intent->lock, &free_lock, 1, memory_order_acquire, memory_order_relaxed);
         free_lock = 0)
        if (!lock_wait(&wait))
            return device_lock_timeout(dev);
    struct state_intent old = {
        .info = atomic_load_explicit(&slot->info, memory_order_relaxed) & ~SLOT_LOCK,
        .slot = index + 1,
        .value = slot->value,
        .ac_time = atomic_load_explicit(&slot->ac_time, memory_order_relaxed),
    };
    intent->info = old.info;
    intent->ac_time = old.ac_time;
    intent->value = old.value;
    intent->sum = sums_32((const char *)&old + STATE_INTENT_SUMMED_FROM, STATE_INTENT_SUMMED_BYTES);
    /* release: the old form's fields before the slot number that makes them a record */
    atomic_store_explicit(&intent->slot, index + 1, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    slot->value = value;
    atomic_store_explicit(&slot->ac_time, ac_time, memory_order_relaxed);
    atomic_store_explicit(&slot->info, (info & ~SLOT_CHECK_MASK) | slot_check(info, value),
                          memory_order_relaxed);
    atomic_store_explicit(&intent->slot, 0, memory_order_release);
    intent->sum = 0;
    atomic_store_explicit(&intent->lock, 0, memory_order_release);
    return 0;
}

/* An index move's: the info word (its check bits for the new value) first, then the value. A
 * process killed between the two leaves a slot naming the move's old id with the check bits
 * of its new one, which adoption takes, as it points the slot at the new id (state_adopt.c). */
void state_slot_rename(struct uzram *dev, struct slot *slot, uint64_t value)
{
    (void)dev;
    uint32_t info = atomic_load_explicit(&slot->info, memory_order_relaxed);
    atomic_store_explicit(&slot->info, (info & ~SLOT_CHECK_MASK) | slot_check(info, value),
                          memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* in this order for whoever reads it after a kill */
    slot->value = value;
}

int uzram_state_info(int state_fd, struct uzram_state_info *info)
{
    if (state_fd < 0 || !info)
        return -EINVAL;
    struct state_header header;
    memset(info, 0, sizeof *info);
    info->supported_version = STATE_VERSION;
    int rc = header_read(state_fd, &header);
    if (rc == -EPROTONOSUPPORT)
        info->version = header.version;
    if (rc < 0)
        return rc;
    info->version = header.version;
    info->disksize = header.disksize;
    info->owner_pid = header.owner_pid;
    info->owner_alive = process_alive(header.owner_pid);
    info->clean = header.clean != 0;
    info->use_dedup = header.use_dedup != 0;
    int primary = header.setting[0];
    if (primary >= 0 && primary < CODEC_TABLE_MAX)
        memcpy(info->comp_algorithm, header.codecs[primary].algorithm,
               sizeof info->comp_algorithm - 1);
    return 0;
}

const char *uzram_state_damage(void)
{
    return sums_damage_text();
}

void *uzram_state_area(struct uzram *dev, size_t *size)
{
    if (size)
        *size = dev && dev->state ? STATE_AREA_BYTES : 0;
    return dev && dev->state ? dev->state->map + STATE_AREA_OFFSET : NULL;
}

void state_mark_clean(struct state_file *state)
{
    atomic_store(&state->header->clean, 1);
}
