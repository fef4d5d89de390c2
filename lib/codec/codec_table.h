/* codec_table.h - a device's table of codec configurations: algorithm, level, dictionary
 * (internal). A compressed object records the id of the configuration that made it, so that a read
 * always decompresses it correctly, whatever the settings became since. */
#ifndef UZRAM_CODEC_TABLE_H
#define UZRAM_CODEC_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/comp.h"

/*
 * A configuration never changes once made; a new setting makes a new one.
 * Each entry counts its users: every stored object made with it, every
 * writer compressing with it right now, and one for each setting that names
 * it (the primary algorithm, priority 0, and up to CODEC_TABLE_PRIORITY_MAX
 * secondary algorithms for recompression). The last user frees the entry,
 * its dictionary with it, and its id can be reused. So a dictionary stays in
 * memory exactly as long as a page needs it.
 *
 * Ids are what a page slot and a dedup entry hold: CODEC_TABLE_MAX of them (the
 * slot has 4 bits for it). A setting that needs a new entry while all are in
 * use by stored pages fails with -ENOSPC.
 *
 * Thread safety: codec_table_acquire(), codec_table_get() and codec_table_release() take no
 * lock (one atomic each on the entry's count); changes of the settings are
 * serialised by the table's lock.
 */

#define CODEC_TABLE_MAX 16
#define CODEC_TABLE_PRIORITY_MAX 3

struct codec_config {
    int algorithm;          /* enum comp_algorithm */
    int level;              /* resolved */
    unsigned priority;      /* the setting it was made for: 0 primary, 1..3 secondary */
    struct comp_dict *dict; /* NULL: none */
    bool dict_auto;         /* dict=auto: trained from stored pages (or to be) */
    uint32_t dict_size;     /* bytes of dictionary content (0: none) */
    /* dict=auto: the how-manyth training of the setting made `dict` (1 the first; 0 not yet
     * trained), and pages_stored when it was trained (recompress_dict.c's retraining rule). */
    uint32_t trainings;
    uint64_t trained_pages;
};

struct codec_table {
    pthread_mutex_t lock;
    struct codec_entry {
        _Atomic uint64_t users;
        struct codec_config config; /* written under lock while the entry is unused */
        bool used;                  /* under lock */
        uint32_t dict_saved;        /* bytes of its dictionary in the state file (0: none) */
        uint64_t kept_share;        /* under lock: a user's share of its dictionary when its
                                       pages kept on it were last tried (stale_dicts) */
        bool evict;                 /* under lock: moving them all costs less than it */
    } __attribute__((aligned(64))) entries[CODEC_TABLE_MAX];
    /* The id each priority's setting names, -1 for none. */
    _Atomic int setting[CODEC_TABLE_PRIORITY_MAX + 1];
    /* Memory of the dictionaries held now (with a state file, their bytes there too). */
    _Atomic uint64_t dict_mem;
    /* A device with a state file (state.h): called with the lock held when the settings
     * change, first with a new entry made but not yet named by its setting (so it is in the
     * file before any object can name it), then with the setting; and when an entry is
     * freed, before its id can be made again. save_dict() puts a new entry's dictionary
     * bytes in the file before the first of those (state_dict.c says why). */
    void (*saved)(void *arg, const struct codec_table *table);
    int (*save_dict)(void *arg, unsigned id, const void *bytes, size_t size);
    void *saved_arg;
};

void codec_table_init(struct codec_table *table);
/* Free every entry; no object may refer to one any more. */
void codec_table_destroy(struct codec_table *table);

/* Make `config` (its dict owned by the table from now on, also on failure)
 * the setting of config->priority; the entry the setting named before loses
 * that user. Errors: -ENOSPC every id is in use; with a state file, what save_dict()
 * says. codec_table_set_dict() also gives the dictionary's content (`size` bytes), which a
 * state file keeps: with a state file, a config with a dict needs it (-EINVAL without). */
int codec_table_set(struct codec_table *table, const struct codec_config *config);
int codec_table_set_dict(struct codec_table *table, const struct codec_config *config,
                         const void *bytes, size_t size);

/* Adoption of a state (state_adopt.c): entry `id` made again (its dictionary, if any, owned
 * by the table; `dict_saved` bytes of it in the state file), with no user yet; the setting
 * of `priority` naming it again (one user); then, once every stored object took its user
 * (codec_table_hold()), the entries no one uses freed by codec_table_restore_done(). */
void codec_table_restore(struct codec_table *table, unsigned id, const struct codec_config *config,
                         uint32_t dict_saved);
void codec_table_restore_setting(struct codec_table *table, unsigned priority, unsigned id);
void codec_table_restore_done(struct codec_table *table);

/* Drop the setting of `priority` (a secondary algorithm). */
void codec_table_clear(struct codec_table *table, unsigned priority);

/* Take a user on the entry the setting of `priority` names: its id, or
 * -ENOENT when that priority has no setting. */
int codec_table_acquire(struct codec_table *table, unsigned priority);

/* Take another user on entry `id`, which the caller already holds one on. */
void codec_table_hold(struct codec_table *table, unsigned id);

/* Drop a user of entry `id`; the last one frees it. */
void codec_table_release(struct codec_table *table, unsigned id);

/* The configuration of entry `id`, on which the caller holds a user (or
 * which an object the caller has locked was made with). */
static inline const struct codec_config *codec_table_get(struct codec_table *table, unsigned id)
{
    return &table->entries[id].config;
}

/* A copy of the setting of `priority`; false when there is none. */
bool codec_table_setting(struct codec_table *table, unsigned priority, struct codec_config *config);

/* The entries a retraining made obsolete: a bit per id whose dict=auto dictionary is older than
 * the one its priority's setting has now (same algorithm, a later training). Objects made with
 * them are recompressed with the newer one when that saves memory (recompress_page.c): in
 * share[id], each user's share of that older dictionary's memory now. In *retry, the bits of
 * those whose share has doubled since their pages kept on it (SLOT_DICT_KEPT) were last tried:
 * as pages leave, the ones left carry more of it, until moving them too pays and the older
 * dictionary goes (at most log2(users) retries). */
uint32_t codec_table_stale_dicts(struct codec_table *table, uint64_t share[CODEC_TABLE_MAX],
                                 uint32_t *retry);

/* After a pass that tried every page on stale entry `id` (a retry): moving the ones it kept on
 * it would cost the pool `growth` bytes. If that is less than its dictionary takes, its pages
 * all move at the next pass (their share counted as a whole page), and it goes: one
 * dictionary stays where two would cost more. */
void codec_table_weigh_kept(struct codec_table *table, unsigned id, uint64_t growth);

/* Bytes the dictionaries in use take. */
uint64_t codec_table_dict_mem(struct codec_table *table);

#endif
