/* lifecycle.c - a device made, reset, compacted and destroyed: the one file that puts the
 * parts together (page table, pool, dedup index, codecs, store, recompression, writeback) and
 * so the one that knows them all. Each part sets itself up and tears itself down; this file
 * says in which order, and hands the store its hooks into writeback (dev->tier). A state file
 * is the state layer's to use: its calls here do the same for a device without one. */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

#include "bundle/bundle_records.h"
#include "codec/comp.h"
#include "dedup/dedup.h"
#include "device/device.h"
#include "common/disksize.h"
#include "common/fault.h"
#include "pool/pool.h"
#include "pool/pool_reserve.h"
#include "recompress/recompress.h"
#include "state/state.h"
#include "store/store.h"
#include "store/compact_index.h"
#include "store/table.h"
#include "tier/writeback.h"

void uzram_config_init(struct uzram_config *config)
{
    *config = (struct uzram_config){
        .comp_algorithm = "lz4",
        .same_filled = true,
    };
}

/* A setting of a later version sits in `reserved`: refuse it rather than
 * run without it. */
static bool config_reserved_zero(const struct uzram_config *config)
{
    for (size_t i = 0; i < sizeof config->reserved / sizeof config->reserved[0]; i++)
        if (config->reserved[i])
            return false;
    return true;
}

/* The parts that can fail to be made, in order; a failure undoes those made before it. */
static int create_parts(struct uzram *dev, bool use_dedup, bool adopted)
{
    int rc = table_map(dev);
    if (rc < 0)
        return rc;
    struct state_region records = state_region(dev, STATE_BUNDLES);
    rc = bundle_records_map(dev, records.fd, records.offset, records.limited);
    if (rc < 0)
        goto fail_records;
    rc = pool_create(&dev->pool);
    if (rc < 0)
        goto fail_pool;
    state_pool_file(dev);
    rc = recompressor_create(dev);
    if (rc < 0)
        goto fail_recompressor;
    rc = writeback_create(dev);
    if (rc < 0)
        goto fail_writeback;
    if (use_dedup) {
        struct dedup *dedup;
        rc = store_dedup_create(dev, adopted, &dedup);
        if (rc < 0)
            goto fail_dedup;
        atomic_init(&dev->dedup, dedup);
    }
    return 0;

fail_dedup:
    writeback_destroy(dev);
fail_writeback:
    recompressor_destroy(dev);
fail_recompressor:
    pool_destroy(dev->pool);
fail_pool:
    bundle_records_unmap(dev);
fail_records:
    table_unmap(dev);
    return rc;
}

/* The codec table of a new device: its primary algorithm; or, adopted, the state's table. */
static int codecs_start(struct uzram *dev, int algo, int level, bool adopted)
{
    codec_table_init(&dev->codecs);
    if (!adopted) {
        state_follow_codecs(dev);
        /* The first entry of an empty table: nothing to allocate, cannot fail. */
        return codec_table_set(&dev->codecs,
                               &(struct codec_config){.algorithm = algo, .level = level});
    }
    int rc = state_rebuild(dev);
    if (rc == 0)
        rc = writeback_adopted(dev);
    state_follow_codecs(dev);
    /* The entries no page used any more are freed: so in the file too (only after a whole
     * rebuild: a partial one has not counted every page's entry). */
    if (rc == 0)
        state_save_codecs(dev->state, &dev->codecs);
    return rc;
}

/* A device in anonymous memory (`state` NULL) or in a state file, new or `adopted`. */
static int device_build(const struct uzram_config *config, struct state_file *state, bool adopted,
                        struct uzram **out)
{
    if (!config || !out || !config_reserved_zero(config))
        return -EINVAL;
    int algo, level;
    int rc = disksize_check(config->disksize);
    if (rc == 0)
        rc = comp_choose(config->comp_algorithm ? config->comp_algorithm : "lz4",
                         config->comp_level, &algo, &level);
    if (rc < 0)
        return rc;

    struct uzram *dev = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *dev);
    if (!dev)
        return -ENOMEM;
    dev->disksize = config->disksize;
    dev->page_count = config->disksize / UZRAM_PAGE_SIZE;
    state_bind(dev, state);
    rc = create_parts(dev, config->use_dedup, adopted);
    if (rc < 0) {
        free(dev);
        return rc;
    }
    pthread_mutex_init(&dev->settings_lock, NULL);
    store_clock_start(dev);
    dev->tier = &writeback_tier;
    atomic_init(&dev->same_filled, config->same_filled);
    atomic_init(&dev->use_dedup, config->use_dedup);
    atomic_init(&dev->mem_limit, config->mem_limit);
    pool_set_limit(dev->pool, config->mem_limit);
    state_start(dev, adopted);
    rc = codecs_start(dev, algo, level, adopted);
    if (rc < 0) {
        dev->state = NULL; /* destroyed without touching the state further */
        uzram_destroy(dev);
        return rc;
    }
    *out = dev;
    return 0;
}

int uzram_create(const struct uzram_config *config, struct uzram **out)
{
    return device_build(config, NULL, false, out);
}

int uzram_create_in(const struct uzram_config *config, int state_fd, struct uzram **out)
{
    if (!config || !out || state_fd < 0)
        return -EINVAL;
    int rc = disksize_check(config->disksize);
    if (rc < 0)
        return rc;
    struct state_file *state;
    rc = state_make(state_fd, config->disksize, &state);
    if (rc < 0)
        return rc;
    rc = device_build(config, state, false, out);
    if (rc < 0) {
        state_close(state, false);
        /* back to empty, as given (a failure leaves only the size; (void)! for fortify) */
        (void)!ftruncate(state_fd, 0);
        return rc;
    }
    state_publish(state);
    return 0;
}

int uzram_adopt(int state_fd, struct uzram **out)
{
    if (state_fd < 0 || !out)
        return -EINVAL;
    struct state_file *state;
    int rc = state_open(state_fd, &state);
    if (rc < 0)
        return rc;
    const struct state_header *header = state->header;
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = header->disksize;
    config.same_filled = header->same_filled;
    config.use_dedup = header->use_dedup != 0;
    config.mem_limit = header->mem_limit;
    rc = device_build(&config, state, true, out);
    if (rc < 0)
        state_close(state, false);
    return rc;
}

void uzram_destroy(struct uzram *dev)
{
    if (!dev)
        return;
    /* The threads first: they work on everything below. */
    recompressor_destroy(dev);
    writeback_destroy(dev);
    /* The pool and the bundle records go with their objects at once. */
    dedup_destroy(device_dedup(dev));
    pool_destroy(dev->pool);
    codec_table_destroy(&dev->codecs);
    bundle_records_unmap(dev);
    table_unmap(dev);
    state_let_go(dev); /* which keeps everything for a successor */
    pthread_mutex_destroy(&dev->settings_lock);
    free(dev);
}

int uzram_state_quiesce(struct uzram *dev)
{
    if (!dev || !dev->state)
        return -EINVAL;
    recompressor_pause(dev);
    writeback_pause(dev);
    state_mark_clean(dev->state);
    return 0;
}

int uzram_reset(struct uzram *dev)
{
    /* No pass begun before the reset goes on after it, counting or writing back pages. */
    recompressor_pause(dev);
    writeback_pause(dev);
    pthread_mutex_lock(&dev->settings_lock);
    int rc = store_discard_all(dev);
    /* The counters of events (the levels went to 0 with the pages): every field of the
     * struct is one (device.h), read and written through atomics only. */
    _Atomic uint64_t *events = (_Atomic uint64_t *)dev->events;
    for (size_t i = 0; i < sizeof *dev->events / sizeof *events; i++)
        atomic_store(&events[i], 0);
    dedup_reset_counters(device_dedup(dev));
    /* the index's memory too, but under a reserve (see uzram_compact) */
    if (!pool_reserve_on(dev->pool))
        dedup_trim(device_dedup(dev));
    writeback_reset(dev);
    pool_reset_mem_used_max(dev->pool);
    pool_reserve_reset_counts(dev->pool);
    pthread_mutex_unlock(&dev->settings_lock);
    writeback_resume(dev);
    recompressor_resume(dev);
    return rc;
}

int uzram_compact(struct uzram *dev, uint64_t *pages_freed)
{
    uint64_t freed = store_compact_pool(dev);
    /* and the backing store gives back what no page uses, and malloc what it keeps free
     * (buffers of a storm of requests, in the arenas of threads gone since) */
    writeback_trim(dev, false, true);
    /* Not under a reserve (swap): a write would fault it all in again, as the kernel waits. */
    if (!pool_reserve_on(dev->pool)) {
        table_give_back(dev);
        bundle_records_give_back(dev);
        store_compact_index(dev); /* and dedup_trim */
        dedup_trim(device_dedup(dev));
#ifdef __GLIBC__
        malloc_trim(0);
#endif
    }
    if (pages_freed)
        *pages_freed = freed;
    return 0;
}
