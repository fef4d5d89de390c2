/* codecs.c - a device's table of codec configurations (see codecs.h).
 * Entries are counted by their users; the last user frees an entry and its dictionary. */
#include "codecs.h"

#include <errno.h>
#include <string.h>

void codecs_init(struct codecs *codecs)
{
    memset(codecs, 0, sizeof *codecs);
    pthread_mutex_init(&codecs->lock, NULL);
    for (unsigned p = 0; p <= CODECS_PRIORITY_MAX; p++)
        atomic_init(&codecs->setting[p], -1);
}

static void entry_free(struct codecs *codecs, struct codec_entry *entry)
{
    if (entry->config.dict) {
        atomic_fetch_sub_explicit(&codecs->dict_mem, comp_dict_memory(entry->config.dict),
                                  memory_order_relaxed);
        comp_dict_free(entry->config.dict);
    }
    memset(&entry->config, 0, sizeof entry->config);
    entry->used = false;
}

void codecs_destroy(struct codecs *codecs)
{
    for (unsigned id = 0; id < CODECS_MAX; id++)
        if (codecs->entries[id].used)
            entry_free(codecs, &codecs->entries[id]);
    pthread_mutex_destroy(&codecs->lock);
}

/* Under the lock: the setting of `priority` now names `id` (or -1); the
 * entry it named before loses that user. */
static void setting_swap(struct codecs *codecs, unsigned priority, int id)
{
    int old = atomic_exchange_explicit(&codecs->setting[priority], id, memory_order_acq_rel);
    if (old >= 0 &&
        atomic_fetch_sub_explicit(&codecs->entries[old].users, 1, memory_order_acq_rel) == 1)
        entry_free(codecs, &codecs->entries[old]);
}

int codecs_set(struct codecs *codecs, const struct codec_config *config)
{
    pthread_mutex_lock(&codecs->lock);
    int id = -1;
    for (unsigned i = 0; i < CODECS_MAX && id < 0; i++)
        if (!codecs->entries[i].used)
            id = (int)i;
    if (id < 0) {
        pthread_mutex_unlock(&codecs->lock);
        comp_dict_free(config->dict);
        return -ENOSPC;
    }
    struct codec_entry *entry = &codecs->entries[id];
    entry->config = *config;
    entry->used = true;
    if (config->dict)
        atomic_fetch_add_explicit(&codecs->dict_mem, comp_dict_memory(config->dict),
                                  memory_order_relaxed);
    /* An add, not a store: a writer that took a user on this id while it
     * was free is still to drop it (codecs_acquire). */
    atomic_fetch_add_explicit(&entry->users, 1, memory_order_relaxed);
    setting_swap(codecs, config->priority, id);
    pthread_mutex_unlock(&codecs->lock);
    return 0;
}

void codecs_clear(struct codecs *codecs, unsigned priority)
{
    pthread_mutex_lock(&codecs->lock);
    setting_swap(codecs, priority, -1);
    pthread_mutex_unlock(&codecs->lock);
}

/* The count may drop to 0 and come back up when a writer takes a user on an
 * entry just replaced (codecs_acquire): the free re-checks under the lock. */
void codecs_release(struct codecs *codecs, unsigned id)
{
    struct codec_entry *entry = &codecs->entries[id];
    if (atomic_fetch_sub_explicit(&entry->users, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&codecs->lock);
    if (entry->used && atomic_load_explicit(&entry->users, memory_order_acquire) == 0)
        entry_free(codecs, entry);
    pthread_mutex_unlock(&codecs->lock);
}

int codecs_acquire(struct codecs *codecs, unsigned priority)
{
    for (;;) {
        int id = atomic_load_explicit(&codecs->setting[priority], memory_order_acquire);
        if (id < 0)
            return -ENOENT;
        atomic_fetch_add_explicit(&codecs->entries[id].users, 1, memory_order_acq_rel);
        /* Still the setting: its own user kept the entry alive meanwhile.
         * Otherwise the entry may have been replaced (even freed and made
         * again): give the user back and look again. */
        if (atomic_load_explicit(&codecs->setting[priority], memory_order_acquire) == id)
            return id;
        codecs_release(codecs, (unsigned)id);
    }
}

void codecs_hold(struct codecs *codecs, unsigned id)
{
    atomic_fetch_add_explicit(&codecs->entries[id].users, 1, memory_order_relaxed);
}

bool codecs_setting(struct codecs *codecs, unsigned priority, struct codec_config *config)
{
    pthread_mutex_lock(&codecs->lock);
    int id = atomic_load_explicit(&codecs->setting[priority], memory_order_relaxed);
    if (id >= 0)
        *config = codecs->entries[id].config;
    pthread_mutex_unlock(&codecs->lock);
    return id >= 0;
}

uint64_t codecs_dict_mem(struct codecs *codecs)
{
    return atomic_load_explicit(&codecs->dict_mem, memory_order_relaxed);
}
