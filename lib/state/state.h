/* state.h - a device's state in a shareable file (internal; state.c, state_adopt.c): the
 * file's layout and header, the slot-change helper every slot change goes through (intent
 * records), the private bitmap of the page table's pages ever written, and what the other
 * parts ask of the state (state_hooks.c). FORMAT.md, beside this file, is the whole format,
 * its order of writes and what adoption does; what each part of the metadata carries so that
 * adoption finds damage is sums.h's. */
#ifndef UZRAM_STATE_H
#define UZRAM_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/comp.h"
#include "device/device.h"

/*
 * The file, at fixed offsets recorded in its header (a later version refuses a layout it
 * does not know):
 *   0          header (struct state_header)
 *   4 KiB      the application's area (uzram_state_area(), STATE_AREA_BYTES)
 *   8 KiB      intent records (STATE_INTENTS of struct state_intent)
 *   40 KiB     the device's counters of events (struct device_events, device.h)
 *   64 KiB     span directory (POOL_WINDOWS x 4 bytes, pool.h)
 *   then       dictionaries (CODEC_TABLE_MAX x STATE_DICT_BYTES: codec entry id's dictionary
 *              at id x STATE_DICT_BYTES, version 2 on)
 *   then       page table (page_count x 16 bytes, rounded up to 4 KiB)
 *   then       the backing store's checksum words (8 bytes a 4 KiB block, for the largest
 *              store, BACKING_MAX_BYTES: 256 GiB of address, only what is used is memory)
 *   then       the dedup index (dedup_file_bytes(): its saved part and entry chunks, version 3
 *              on; only the chunks in use are memory)
 *   then       bundle records (bundle_records.h: short records then long ones, each region
 *              room for the disk's pages and a few more; only chunks in use are memory)
 *   then       pool (POOL_FILE_BYTES, from a 2 MiB boundary)
 * The file is sparse: only what was written is memory.
 */
/* 1: session 5's, without dictionaries; 2: session 8's, without the dedup index and bundle
 * records; 3: without the check bits and sums of sums.h (all refused: -EPROTONOSUPPORT). */
#define STATE_VERSION 4
#define STATE_AREA_OFFSET 4096u
#define STATE_AREA_BYTES 4096u
#define STATE_INTENTS_OFFSET 8192u
#define STATE_INTENTS 1024u
#define STATE_DIR_OFFSET 65536u
/* The device's counters of events (struct device_events), after the intent records. */
#define STATE_EVENTS_OFFSET (STATE_INTENTS_OFFSET + STATE_INTENTS * 32u)
#define STATE_DICT_BYTES COMP_DICT_MAX
/* The backing store's path in the header (a longer one: -ENAMETOOLONG). */
#define STATE_BACKING_PATH 2048u

/* A slot being changed: the slot (its index + 1; 0 for a free record) and what it held, so
 * that adoption can put it back when the change may be half done. Records are striped by
 * slot index; `lock` makes a record one change's at a time. `sum` (sums.h) covers info to
 * ac_time: set before `slot`, cleared after it. */
struct state_intent {
    _Atomic uint32_t lock;
    uint32_t info;
    _Atomic uint64_t slot;
    uint64_t value;
    uint32_t ac_time;
    uint32_t sum;
};
_Static_assert(sizeof(struct state_intent) == 32, "an intent record is 32 bytes");
#define STATE_INTENT_SUMMED_FROM offsetof(struct state_intent, info)
#define STATE_INTENT_SUMMED_BYTES (offsetof(struct state_intent, sum) - STATE_INTENT_SUMMED_FROM)

/* A codec entry by the algorithm's name: ids are this build's. Its dictionary's bytes
 * (dict_bytes of them; 0: none, or dict=auto not trained yet) are in the dictionary region. */
struct state_codec {
    _Atomic uint32_t used; /* cleared first, set last (state.c's save_codec) */
    int32_t level;
    uint32_t priority;
    char algorithm[20];
    uint32_t dict_auto; /* 1: dict=auto (trained from stored pages, or to be) */
    uint32_t dict_size; /* the setting's dict_size (dict=auto: at most that) */
    uint32_t dict_bytes;
    uint32_t trainings;     /* dict=auto: trainings so far (recompress_dict.c bounds them) */
    uint64_t trained_pages; /* dict=auto: pages stored at the last training */
    uint32_t sum;           /* of level to trained_pages (sums.h), set before `used` */
    uint32_t dict_sum;      /* of the dictionary's bytes, set with them (state_dict.c) */
};
#define STATE_CODEC_SUMMED_FROM offsetof(struct state_codec, level)
#define STATE_CODEC_SUMMED_BYTES (offsetof(struct state_codec, sum) - STATE_CODEC_SUMMED_FROM)
_Static_assert(offsetof(struct state_codec, trained_pages) + sizeof(uint64_t) ==
                   offsetof(struct state_codec, sum),
               "no padding in what a codec record's sum covers");

struct state_header {
    char magic[8];
    uint32_t version;
    uint32_t page_size;
    uint64_t disksize;
    uint64_t dir_offset, dir_bytes;
    uint64_t dict_offset, dict_bytes;
    uint64_t table_offset, table_bytes;
    uint64_t sums_offset, sums_bytes;
    uint64_t dedup_offset, dedup_bytes;
    uint64_t bundle_offset, bundle_bytes;
    uint64_t pool_offset, pool_bytes;
    uint64_t file_bytes;
    _Atomic int32_t owner_pid; /* 0: none */
    _Atomic uint32_t clean;    /* 1: quiesced or destroyed, no change half done */
    int64_t clock_base;
    uint64_t mem_limit;
    uint32_t same_filled;
    uint32_t intents;
    uint32_t use_dedup; /* 1: dedup on, its index in the dedup region (set before it is used) */
    uint32_t unused_dedup;
    /* A sum (sums.h) of the fields fixed at creation: version to file_bytes, clock_base and
     * intents (state_publish(), before the magic). */
    uint64_t fixed_sum;
    /* The codec table (codec_table.h): every entry ever used (adoption frees those no page
     * uses), and the id each priority's setting names (-1: none). */
    struct state_codec codecs[CODEC_TABLE_MAX];
    _Atomic int32_t setting[CODEC_TABLE_PRIORITY_MAX + 1]; /* each names a used record */
    /* The backing store (state_backing.c): its size (0: none; written last), the flags it
     * was opened with (UZRAM_BACKING_*) and its absolute path; a sum of the three, written
     * before the size. */
    _Atomic uint64_t backing_bytes;
    uint32_t backing_flags;
    uint32_t backing_sum;
    char backing_path[STATE_BACKING_PATH];
};
_Static_assert(sizeof(struct state_header) <= STATE_AREA_OFFSET, "the header fits its page");

/* A device's open state file. */
struct state_file {
    int fd;
    unsigned char *map; /* header, area, intents and span directory: map_bytes */
    uint64_t map_bytes;
    struct state_header *header;
    struct state_intent *intents;
    _Atomic uint32_t *span_dir;
    /* 1 bit per 4 KiB page of the table: set once a slot in it was changed (with its lock
     * held), cleared when table_give_back() punches it. A slot in a page whose bit is clear
     * is empty, and is not read: a read of a hole of shared memory allocates a page. */
    _Atomic uint64_t *written;
    /* On a tmpfs with a size (state.c's hold_mapped): the table is allocated whole and never
     * given back (table.c). */
    bool limited;
};

#define STATE_SLOTS_PER_PAGE (4096u / sizeof(struct slot))

/* Whether slot `index` is certainly empty without reading it: its table page was never
 * written (only for a device with a state file; without, reading never-written anonymous
 * memory costs nothing). */
static inline bool state_slot_unwritten(const struct uzram *dev, uint64_t index)
{
    if (!dev->state)
        return false;
    uint64_t page = index / STATE_SLOTS_PER_PAGE;
    return !(atomic_load_explicit(&dev->state->written[page / 64], memory_order_acquire) &
             (1ull << (page % 64)));
}

/* Change a locked slot to `info` (SLOT_LOCK included), `ac_time`, `value` with an intent
 * record around the change, so that a process killed in the middle leaves it restorable.
 * The caller frees the slot's old object only after this returns 0; -EIO: the record's lock
 * stayed held past the deadline (backoff.h; counted), the slot unchanged. */
int state_slot_write(struct uzram *dev, struct slot *slot, uint32_t info, uint32_t ac_time,
                     uint64_t value);
/* A locked slot's value changed to `value` without an intent record (slot_set_moved: an index
 * move, which the dedup index's move record makes restorable). */
void state_slot_rename(struct uzram *dev, struct slot *slot, uint64_t value);

/* The layout for a disk of `disksize` bytes in a new header (magic last: state_publish()). */
void state_layout(struct state_header *header, uint64_t disksize);

/* Make a new state file in the empty tmpfs file `fd` for a disk of `disksize` bytes: sized,
 * its header, intents and directory mapped, the header filled but not yet valid. */
int state_make(int fd, uint64_t disksize, struct state_file **out);
/* Open the state in `fd` for adoption: -EINVAL not a state, -EPROTONOSUPPORT another
 * version, -EBUSY a live owner; its owner becomes this process. */
int state_open(int fd, struct state_file **out);
/* The device's settings and codec table, to the header (the codec table calls it); the
 * dictionary of an entry no longer used let go (state_dict.c). */
void state_save_codecs(void *state, const struct codec_table *codecs);
/* Entry `id`'s dictionary, `size` bytes, to the state's dictionary region, before the entry
 * is saved as used (the codec table calls it; state_dict.c). 0 or a negative errno. */
int state_save_dict(void *state, unsigned id, const void *bytes, size_t size);
/* Entry `id`'s dictionary made again from the state (adoption): `*out` NULL when the entry
 * has none. -EUCLEAN its size or bytes damaged (sums_damage), -EINVAL the bytes are no
 * dictionary, -ENOMEM. */
int state_load_dict(struct state_file *state, unsigned id, int algorithm, int level,
                    struct comp_dict **out);
/* The dictionary region of entry `id` emptied (its memory given back). */
void state_forget_dict(struct state_file *state, unsigned id);
/* Mark the header valid (create), its owner this process. */
void state_publish(struct state_file *state);
/* Let the state go: owner none, clean when `clean`; unmapped, the file left as it is. */
void state_close(struct state_file *state, bool clean);
/* Bring the device adopted with state `dev->state` back: intents undone, locks cleared,
 * pool, codec table and counters made again from the page table (state_adopt.c). */
int state_rebuild(struct uzram *dev);
/* The backing store opened again as the header records it (adoption; state_backing.c). */
int state_backing_adopt(struct uzram *dev);

/* The device's counters of events in the state: they outlive the process (the file is new:
 * zeros; adopted: what the last owner counted, to the last event before a kill). */
static inline struct device_events *state_events(struct state_file *state)
{
    _Static_assert(STATE_EVENTS_OFFSET + sizeof(struct device_events) <= STATE_DIR_OFFSET,
                   "the counters fit between the intent records and the span directory");
    return (struct device_events *)(state->map + STATE_EVENTS_OFFSET);
}

/* ---- what the rest of the device asks of its state file (state_hooks.c, state_backing.c) ----
 * Each call is the same for a device without one: anonymous memory, or nothing to do. */

/* The device's state (NULL: none) and where its counters of events are (device.h). */
void state_bind(struct uzram *dev, struct state_file *state);
/* Where a part keeps its memory: in the state file `fd` from byte `offset` (`limited`: a tmpfs
 * with a size, whose pages are allocated with fallocate() before they are touched), or, fd -1,
 * anonymous memory. */
struct state_region {
    int fd;
    uint64_t offset;
    bool limited;
};
enum state_part { STATE_TABLE, STATE_DEDUP, STATE_BUNDLES };
struct state_region state_region(const struct uzram *dev, enum state_part part);
/* The pool's memory and span directory in the state file (after pool_create). */
void state_pool_file(struct uzram *dev);
/* The clock's base from the header (`adopted`), or it and the settings to a new header. */
void state_start(struct uzram *dev, bool adopted);
/* A setting changed, saved for a successor. */
enum state_setting { STATE_SAME_FILLED, STATE_USE_DEDUP, STATE_MEM_LIMIT };
void state_save_setting(struct uzram *dev, enum state_setting setting, uint64_t value);
/* From now on every change of the codec table is saved in the state (state_save_codecs). */
void state_follow_codecs(struct uzram *dev);
/* The backing store attached: opened (with a state file, with its checksum words in it), then
 * recorded in the header before any page can go there (NULL: detached, forgotten). `dev`'s
 * settings and writeback locks held, no page stored (state_backing.c). */
struct backing;
int state_backing_open(struct uzram *dev, const char *path, uint64_t size, unsigned flags,
                       struct backing **out);
void state_backing_record(struct uzram *dev, const struct backing *backing, unsigned flags);
/* Destroy: the state let go, clean, everything in it kept for a successor. */
void state_let_go(struct uzram *dev);

/* Mark the state clean (quiesce). */
void state_mark_clean(struct state_file *state);
/* After table_give_back() emptied table page `page`. */
void state_table_page_gone(struct state_file *state, uint64_t page);

#endif
