/* codec_table.c - a device's table of codec configurations (see codec_table.h).
 * Entries are counted by their users; the last user frees an entry and its dictionary. */
#include "codec/codec_table.h"

#include <errno.h>
#include <string.h>

#include "uzram.h"

void codec_table_init(struct codec_table *table)
{
    memset(table, 0, sizeof *table);
    pthread_mutex_init(&table->lock, NULL);
    for (unsigned p = 0; p <= CODEC_TABLE_PRIORITY_MAX; p++)
        atomic_init(&table->setting[p], -1);
}

static void entry_free(struct codec_table *table, struct codec_entry *entry)
{
    if (entry->config.dict) {
        atomic_fetch_sub_explicit(&table->dict_mem, comp_dict_memory(entry->config.dict),
                                  memory_order_relaxed);
        comp_dict_free(entry->config.dict);
    }
    atomic_fetch_sub_explicit(&table->dict_mem, entry->dict_saved, memory_order_relaxed);
    entry->dict_saved = 0;
    memset(&entry->config, 0, sizeof entry->config);
    entry->used = false;
}

void codec_table_destroy(struct codec_table *table)
{
    for (unsigned id = 0; id < CODEC_TABLE_MAX; id++)
        if (table->entries[id].used)
            entry_free(table, &table->entries[id]);
    pthread_mutex_destroy(&table->lock);
}

/* Under the lock: the setting of `priority` now names `id` (or -1); the
 * entry it named before loses that user. */
static void setting_swap(struct codec_table *table, unsigned priority, int id)
{
    int old = atomic_exchange_explicit(&table->setting[priority], id, memory_order_acq_rel);
    if (old >= 0 &&
        atomic_fetch_sub_explicit(&table->entries[old].users, 1, memory_order_acq_rel) == 1)
        entry_free(table, &table->entries[old]);
}

/* Under the lock, with a state file: entry `id`'s dictionary bytes into the file. */
static int entry_save_dict(struct codec_table *table, unsigned id, const void *bytes, size_t size)
{
    if (!table->saved || !table->entries[id].config.dict)
        return 0;
    if (!bytes || !size)
        return -EINVAL;
    int rc = table->save_dict(table->saved_arg, id, bytes, size);
    if (rc == 0) {
        table->entries[id].dict_saved = (uint32_t)size;
        atomic_fetch_add_explicit(&table->dict_mem, size, memory_order_relaxed);
    }
    return rc;
}

int codec_table_set(struct codec_table *table, const struct codec_config *config)
{
    return codec_table_set_dict(table, config, NULL, 0);
}

int codec_table_set_dict(struct codec_table *table, const struct codec_config *config,
                         const void *bytes, size_t size)
{
    pthread_mutex_lock(&table->lock);
    int id = -1;
    for (unsigned i = 0; i < CODEC_TABLE_MAX && id < 0; i++)
        if (!table->entries[i].used)
            id = (int)i;
    if (id < 0) {
        pthread_mutex_unlock(&table->lock);
        comp_dict_free(config->dict);
        return -ENOSPC;
    }
    struct codec_entry *entry = &table->entries[id];
    entry->config = *config;
    entry->used = true;
    entry->kept_share = 0;
    entry->evict = false;
    if (config->dict)
        atomic_fetch_add_explicit(&table->dict_mem, comp_dict_memory(config->dict),
                                  memory_order_relaxed);
    int rc = entry_save_dict(table, (unsigned)id, bytes, size);
    if (rc < 0) {
        entry_free(table, entry); /* no one saw it: not in the file either */
        pthread_mutex_unlock(&table->lock);
        return rc;
    }
    /* An add, not a store: a writer that took a user on this id while it
     * was free is still to drop it (codec_table_acquire). */
    atomic_fetch_add_explicit(&entry->users, 1, memory_order_relaxed);
    /* In a state file the new entry is saved before a writer can find it through the setting
     * and publish an object naming it, and the setting after. */
    if (table->saved)
        table->saved(table->saved_arg, table);
    setting_swap(table, config->priority, id);
    if (table->saved)
        table->saved(table->saved_arg, table);
    pthread_mutex_unlock(&table->lock);
    return 0;
}

void codec_table_clear(struct codec_table *table, unsigned priority)
{
    pthread_mutex_lock(&table->lock);
    setting_swap(table, priority, -1);
    if (table->saved)
        table->saved(table->saved_arg, table);
    pthread_mutex_unlock(&table->lock);
}

void codec_table_restore(struct codec_table *table, unsigned id, const struct codec_config *config,
                         uint32_t dict_saved)
{
    table->entries[id].config = *config;
    table->entries[id].used = true;
    table->entries[id].kept_share = 0;
    table->entries[id].evict = false;
    table->entries[id].dict_saved = dict_saved;
    atomic_fetch_add(&table->dict_mem,
                     dict_saved + (config->dict ? comp_dict_memory(config->dict) : 0));
}

void codec_table_restore_setting(struct codec_table *table, unsigned priority, unsigned id)
{
    atomic_store(&table->setting[priority], (int)id);
    atomic_fetch_add(&table->entries[id].users, 1);
}

void codec_table_restore_done(struct codec_table *table)
{
    pthread_mutex_lock(&table->lock);
    for (unsigned id = 0; id < CODEC_TABLE_MAX; id++)
        if (table->entries[id].used && atomic_load(&table->entries[id].users) == 0)
            entry_free(table, &table->entries[id]);
    pthread_mutex_unlock(&table->lock);
}

/* The count may drop to 0 and come back up when a writer takes a user on an
 * entry just replaced (codec_table_acquire): the free re-checks under the lock. */
void codec_table_release(struct codec_table *table, unsigned id)
{
    struct codec_entry *entry = &table->entries[id];
    if (atomic_fetch_sub_explicit(&entry->users, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&table->lock);
    if (entry->used && atomic_load_explicit(&entry->users, memory_order_acquire) == 0) {
        entry_free(table, entry);
        if (table->saved) /* before the id can be made again (state_dict.c) */
            table->saved(table->saved_arg, table);
    }
    pthread_mutex_unlock(&table->lock);
}

int codec_table_acquire(struct codec_table *table, unsigned priority)
{
    for (;;) {
        int id = atomic_load_explicit(&table->setting[priority], memory_order_acquire);
        if (id < 0)
            return -ENOENT;
        atomic_fetch_add_explicit(&table->entries[id].users, 1, memory_order_acq_rel);
        /* Still the setting: its own user kept the entry alive meanwhile.
         * Otherwise the entry may have been replaced (even freed and made
         * again): give the user back and look again. */
        if (atomic_load_explicit(&table->setting[priority], memory_order_acquire) == id)
            return id;
        codec_table_release(table, (unsigned)id);
    }
}

void codec_table_hold(struct codec_table *table, unsigned id)
{
    atomic_fetch_add_explicit(&table->entries[id].users, 1, memory_order_relaxed);
}

bool codec_table_setting(struct codec_table *table, unsigned priority, struct codec_config *config)
{
    pthread_mutex_lock(&table->lock);
    int id = atomic_load_explicit(&table->setting[priority], memory_order_relaxed);
    if (id >= 0)
        *config = table->entries[id].config;
    pthread_mutex_unlock(&table->lock);
    return id >= 0;
}

uint32_t codec_table_stale_dicts(struct codec_table *table, uint64_t share[CODEC_TABLE_MAX],
                                 uint32_t *retry)
{
    uint32_t stale = 0;
    *retry = 0;
    pthread_mutex_lock(&table->lock);
    for (unsigned id = 0; id < CODEC_TABLE_MAX; id++) {
        const struct codec_config *old = &table->entries[id].config;
        if (!table->entries[id].used || !old->dict_auto || !old->dict)
            continue;
        int now = atomic_load_explicit(&table->setting[old->priority], memory_order_relaxed);
        if (now < 0 || (unsigned)now == id)
            continue;
        const struct codec_config *newer = &table->entries[now].config;
        uint64_t users = atomic_load_explicit(&table->entries[id].users, memory_order_relaxed);
        if (newer->dict_auto && newer->dict && newer->algorithm == old->algorithm &&
            newer->trainings > old->trainings && users > 0) {
            stale |= 1u << id;
            share[id] = comp_dict_memory(old->dict) / users;
            if (table->entries[id].evict)
                share[id] = UZRAM_PAGE_SIZE; /* whatever a page's newer object costs */
            if (share[id] >= 2 * table->entries[id].kept_share) {
                *retry |= 1u << id;
                table->entries[id].kept_share = share[id];
            }
        }
    }
    pthread_mutex_unlock(&table->lock);
    return stale;
}

void codec_table_weigh_kept(struct codec_table *table, unsigned id, uint64_t growth)
{
    pthread_mutex_lock(&table->lock);
    struct codec_entry *entry = &table->entries[id];
    if (entry->used && entry->config.dict && growth < comp_dict_memory(entry->config.dict))
        entry->evict = true;
    pthread_mutex_unlock(&table->lock);
}

uint64_t codec_table_dict_mem(struct codec_table *table)
{
    return atomic_load_explicit(&table->dict_mem, memory_order_relaxed);
}
