/* settings.c - device settings that zram takes before initialisation, mem_limit, the reserve
 * (serve --swap), the group whose limit a device shares (uzram_set_group), and the snapshot of
 * the config (the statistics' is stats.c's).
 * Settings are read lock-free on the I/O path; changes are serialised by settings_lock. */
#include <errno.h>

#include "codec/comp.h"
#include "dedup/dedup.h"
#include "device/device.h"
#include "pool/group.h"
#include "pool/pool.h"
#include "pool/pool_reserve.h"
#include "state/state.h"
#include "store/store.h"
#include "store/table.h"

/* zram refuses these once the device is in use; here "in use" means a page
 * is stored. Each page records its own algorithm, so a write that races
 * with a change still reads back correctly. */
static bool device_holds_data(struct uzram *dev)
{
    return counter_get(&dev->pages_stored) != 0;
}

int uzram_set_algorithm(struct uzram *dev, const char *name, int level)
{
    int algo, resolved;
    int rc = comp_choose(name, level, &algo, &resolved);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&dev->settings_lock);
    if (device_holds_data(dev)) {
        rc = -EBUSY;
    } else {
        rc = codec_table_set(&dev->codecs,
                             &(struct codec_config){.algorithm = algo, .level = resolved});
    }
    pthread_mutex_unlock(&dev->settings_lock);
    return rc;
}

int uzram_set_same_filled(struct uzram *dev, bool on)
{
    int rc = 0;
    pthread_mutex_lock(&dev->settings_lock);
    if (device_holds_data(dev))
        rc = -EBUSY;
    else
        atomic_store(&dev->same_filled, on);
    if (rc == 0)
        state_save_setting(dev, STATE_SAME_FILLED, on);
    pthread_mutex_unlock(&dev->settings_lock);
    return rc;
}

int uzram_set_dedup(struct uzram *dev, bool on)
{
    int rc = 0;
    pthread_mutex_lock(&dev->settings_lock);
    if (device_holds_data(dev)) {
        rc = -EBUSY;
    } else {
        /* The index is published (release) before the switch and kept
         * until uzram_destroy(), so a writer that saw the switch (acquire)
         * always finds it, made. */
        if (on && !device_dedup(dev)) {
            struct dedup *dedup;
            rc = store_dedup_create(dev, false, &dedup);
            if (rc == 0 && pool_reserve_on(dev->pool))
                dedup_prefault(dedup);
            if (rc == 0)
                atomic_store_explicit(&dev->dedup, dedup, memory_order_release);
        }
        /* a successor adopts the index when the state says dedup is on: said before a page
         * names it (the device holds none now) */
        if (rc == 0)
            state_save_setting(dev, STATE_USE_DEDUP, on);
        if (rc == 0)
            atomic_store_explicit(&dev->use_dedup, on, memory_order_release);
    }
    pthread_mutex_unlock(&dev->settings_lock);
    return rc;
}

int uzram_set_mem_limit(struct uzram *dev, uint64_t bytes)
{
    atomic_store(&dev->mem_limit, bytes);
    state_save_setting(dev, STATE_MEM_LIMIT, bytes); /* kept for a successor */
    pool_set_limit(dev->pool, bytes);
    return 0;
}

int uzram_reset_mem_used_max(struct uzram *dev)
{
    pool_reset_mem_used_max(dev->pool);
    return 0;
}

int uzram_set_mem_reserve(struct uzram *dev, uint64_t bytes)
{
    int rc = pool_set_reserve(dev->pool, bytes);
    if (rc == 0 && bytes != 0) {
        table_prefault(dev); /* the page table too */
        /* and the dedup index, which uzram_set_dedup() faults in when the reserve comes
         * first (settings_lock: the index is made under it) */
        pthread_mutex_lock(&dev->settings_lock);
        if (device_dedup(dev))
            dedup_prefault(device_dedup(dev));
        pthread_mutex_unlock(&dev->settings_lock);
    }
    return rc;
}

int uzram_set_group(struct uzram *dev, struct uzram_group *group)
{
    if (!dev || !group)
        return -EINVAL;
    /* The page table, which a client can make resident, is charged as the device joins. */
    uint64_t table = table_bytes(dev);
    pthread_mutex_lock(&dev->settings_lock);
    int rc = group_reserve(group, table, 0);
    if (rc == 0 && (rc = pool_set_group(dev->pool, group, table)) < 0)
        group_release(group, table);
    pthread_mutex_unlock(&dev->settings_lock);
    return rc;
}

int uzram_get_config(struct uzram *dev, struct uzram_config *config)
{
    struct codec_config primary;
    codec_table_setting(&dev->codecs, 0, &primary);
    *config = (struct uzram_config){
        .disksize = dev->disksize,
        .comp_algorithm = comp_name(primary.algorithm),
        .comp_level = primary.level,
        .same_filled = atomic_load(&dev->same_filled),
        .use_dedup = atomic_load(&dev->use_dedup),
        .mem_limit = atomic_load(&dev->mem_limit),
    };
    return 0;
}
