/* settings.c - device settings that zram takes before initialisation, mem_limit, the reserve
 * (serve --swap), the group whose limit a device shares (uzram_set_group), and the snapshots
 * of config and stats.
 * Settings are read lock-free on the I/O path; changes are serialised by settings_lock. */
#include <errno.h>
#include <string.h>

#include "backing/backing.h"
#include "codec/comp.h"
#include "dedup/dedup.h"
#include "device/device.h"
#include "pool/group.h"
#include "pool/pool.h"
#include "pool/pool_reserve.h"
#include "state/state.h"
#include "store/store.h"
#include "store/table.h"
#include "tier/writeback.h"

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

int uzram_get_stats(struct uzram *dev, struct uzram_stats *stats, size_t size)
{
    if (!stats)
        return -EINVAL;
    uint64_t pages = counter_get(&dev->pages_stored);
    uint64_t dict_mem = codec_table_dict_mem(&dev->codecs);
    struct dedup *dedup = device_dedup(dev);
    struct backing *backing = device_backing(dev);
    struct writeback_settings writeback;
    writeback_settings(dev, &writeback);
    struct pool_reserve_counts reserve;
    pool_reserve_counts(dev->pool, &reserve);
    const struct uzram_stats all = {
        .orig_data_size = pages * UZRAM_PAGE_SIZE,
        .compr_data_size = counter_get(&dev->compr_data_size),
        .mem_used_total = pool_mem_used(dev->pool) + dict_mem,
        .mem_limit = atomic_load(&dev->mem_limit),
        .mem_used_max = pool_mem_used_max(dev->pool) + dict_mem,
        .same_pages = counter_get(&dev->same_pages),
        .pages_compacted = counter_get(&dev->events->pages_compacted),
        .huge_pages = counter_get(&dev->huge_pages),
        .huge_pages_since = counter_get(&dev->events->huge_pages_since),
        .dup_data_size = dedup_dup_data_size(dedup),
        .meta_data_size = dedup_meta_size(dedup) + counter_get(&dev->bundle_mem),
        .failed_reads = counter_get(&dev->events->failed_reads),
        .failed_writes = counter_get(&dev->events->failed_writes),
        .invalid_io = counter_get(&dev->events->invalid_io),
        .notify_free = counter_get(&dev->events->notify_free),
        .dedup_hash_collisions = dedup_hash_collisions(dedup),
        .pages_stored = pages,
        .zero_pages = counter_get(&dev->zero_pages),
        .idle_pages = counter_get(&dev->idle_pages),
        .recomp_pages = counter_get(&dev->events->recomp_pages),
        .recomp_bytes = counter_get(&dev->events->recomp_bytes),
        .recomp_saved_bytes = counter_get(&dev->events->recomp_saved_bytes),
        .incompressible_pages = counter_get(&dev->incompressible_pages),
        .dict_mem = dict_mem,
        .bd_count = backing ? backing_blocks_used(backing) : 0,
        .bd_reads = counter_get(&dev->events->bd_reads),
        .bd_writes = counter_get(&dev->events->bd_writes),
        .bd_objects = counter_get(&dev->bd_objects),
        .bd_data_size = counter_get(&dev->bd_data_size),
        .bd_write_errors = counter_get(&dev->events->bd_write_errors),
        .bd_nospace = counter_get(&dev->events->bd_nospace),
        .writeback_limit = writeback.limit,
        .writeback_limit_enable = writeback.limit_enable,
        .bd_checksum_errors = counter_get(&dev->events->bd_checksum_errors),
        .table_mem = table_bytes(dev),
        .dedup_entries = dedup_entries(dedup),
        .bundles = counter_get(&dev->bundles),
        .bundled_pages = counter_get(&dev->bundled_pages),
        .bundle_dead_pages = counter_get(&dev->bundle_dead_pages),
        .bundle_saved_bytes = counter_get(&dev->bundle_saved_bytes),
        .bundle_mem = counter_get(&dev->bundle_mem),
        .dict_trainings = counter_get(&dev->events->dict_trainings),
        .recomp_passes = counter_get(&dev->events->recomp_passes),
        .reserve_empty = reserve.empty,
        .state_lock_timeouts = counter_get(&dev->events->state_lock_timeouts),
    };
    /* Callers built against another version of the struct: an older one
     * gets the prefix it knows, a newer one zeros past what we have. */
    size_t known = size < sizeof all ? size : sizeof all;
    memcpy(stats, &all, known);
    if (size > known)
        memset((char *)stats + known, 0, size - known);
    return 0;
}
