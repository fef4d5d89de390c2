/* recompress_dict.c - dictionaries of the secondary algorithms: set by hand or trained from the
 * stored pages (dict=auto), and retrained as the stored data grows past what the dictionary
 * was trained on. The passes that use them are recompress.c's. */
#include "recompress/recompress_dict.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "codec/codec_table.h"
#include "codec/comp.h"
#include "device/device.h"
#include "common/fault.h"
#include "recompress/recompress_page.h"

/* Pages of sample a dictionary is trained on: ZDICT wants about a hundred
 * times the dictionary's size; 2048 pages (8 MiB) serve up to 80 KiB, and
 * take a second or two to learn from. Fewer than TRAIN_MIN_PAGES stored
 * compressed pages are too few to learn anything. */
#define TRAIN_PAGES 2048u
#define TRAIN_MIN_PAGES 16u

/*
 * Retraining (issue 27). The background thread trains a dict=auto dictionary at its first
 * pass, often while the device is still being written: from the first pages stored, which
 * may be unlike the rest (bench/recompress_gap.sh measured 6% more memory than the same
 * recompression done once the data was all there). So a setting is trained again when
 *   - the device is quiet (nothing stored or freed since the previous pass, or a pass asked
 *     for by hand) and pages_stored grew by RETRAIN_QUIET_GROWTH (a quarter) since the last
 *     training, or
 *   - pages_stored grew RETRAIN_GROWTH (4) times since it, quiet or not,
 * at most TRAININGS_SPARE times plus once for each fourfold growth of pages_stored beyond
 * TRAIN_MIN_PAGES (the first training included): the work is bounded by the logarithm of the
 * data, and a fourfold growth always finds a training left (it adds one), so the dictionary
 * is never trained on less than a quarter of what is stored - with a fixed count (4, before
 * issue 43) a disk filled slowly, as during a build, kept a dictionary of its first pages
 * for good. Each retraining's recompression of the pages made with the older dictionary is too:
 * each is tried once, and replaced when the newer one's object is smaller than the old one plus the
 * page's share of the older dictionary's memory (which goes with its last page: a handful of
 * pages kept on it would keep hundreds of KiB of dictionary); the others are marked
 * SLOT_DICT_KEPT and keep it. What moving them would have cost is counted as they are kept:
 * when, over a pass that tried them all, it is less than the older dictionary's memory, the
 * next pass moves them whatever each one costs, and the dictionary goes with the last
 * (codec_table_weigh_kept). They are all tried again, too, each time their share of it has
 * doubled as others left (codec_table_stale_dicts).
 * The older dictionary stays in memory as long as a page or bundle still uses it
 * (codec_table.h).
 */
#define RETRAIN_GROWTH 4u
#define RETRAIN_QUIET_GROWTH_NUM 5u /* 5/4 */
#define RETRAIN_QUIET_GROWTH_DEN 4u
#define TRAININGS_SPARE 4u

/* How many trainings a setting may have had with `stored` pages stored: TRAININGS_SPARE, and
 * one more for each fourfold growth past TRAIN_MIN_PAGES. */
static uint32_t trainings_allowed(uint64_t stored)
{
    uint32_t allowed = TRAININGS_SPARE;
    for (uint64_t pages = TRAIN_MIN_PAGES * RETRAIN_GROWTH; pages <= stored;
         pages *= RETRAIN_GROWTH)
        allowed++;
    return allowed;
}

/* Train a dictionary of at most `size` bytes from pages spread over the
 * whole disk; its content in `*content` (`*content_size` bytes, the caller frees it), which
 * a state file keeps. -EAGAIN: too few pages stored (or too alike) yet. */
static int train_dictionary(struct uzram *dev, struct codec_config *config, size_t size,
                            void **content, size_t *content_size)
{
    /* The samples in a mapping of their own, given back whole after the training: from the
     * heap, a process that never trims it (serve --swap) would keep their 8 MiB for good. */
    unsigned char *samples = FAULT_POINT(FAULT_ALLOC)
                                 ? MAP_FAILED
                                 : mmap(NULL, TRAIN_PAGES * UZRAM_PAGE_SIZE, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    size_t *sizes = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(TRAIN_PAGES * sizeof *sizes);
    void *dict = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(size);
    int rc = -ENOMEM;
    if (samples == MAP_FAILED || !sizes || !dict)
        goto out;
    /* Faulted in here, before any slot is locked: a page fault while sampling would wait for
     * memory with the slot's lock held (serve --swap: on a swap-out to this very device). */
    memset(samples, 0, TRAIN_PAGES * UZRAM_PAGE_SIZE);
    uint64_t stored = counter_get(&dev->pages_stored);
    /* One page from each stretch of the disk, the first stored one in it. */
    uint64_t stride = dev->page_count / TRAIN_PAGES;
    if (stride == 0)
        stride = 1;
    unsigned count = 0;
    for (uint64_t start = 0; start < dev->page_count && count < TRAIN_PAGES; start += stride)
        for (uint64_t index = start; index < start + stride && index < dev->page_count; index++)
            if (recompress_sample_page(dev, index, samples + (size_t)count * UZRAM_PAGE_SIZE)) {
                sizes[count++] = UZRAM_PAGE_SIZE;
                break;
            }
    rc = -EAGAIN;
    if (count < TRAIN_MIN_PAGES)
        goto out;
    rc = comp_dict_train(dict, size, samples, sizes, count);
    if (rc == 0)
        rc = -EAGAIN; /* nothing learnt */
    if (rc > 0) {
        *content_size = (size_t)rc;
        rc = comp_dict_create(config->algorithm, config->level, dict, (size_t)rc, &config->dict);
    }
    if (rc == 0) {
        config->trainings++;
        config->trained_pages = stored;
        counter_add(&dev->events->dict_trainings, 1);
    }
out:
    if (samples != MAP_FAILED)
        munmap(samples, TRAIN_PAGES * UZRAM_PAGE_SIZE);
    free(sizes);
    if (rc == 0)
        *content = dict;
    else
        free(dict);
    return rc;
}

int uzram_set_algorithm_params(struct uzram *dev, unsigned priority, int level, const void *dict,
                               size_t dict_size)
{
    if (priority > UZRAM_RECOMPRESS_PRIORITY_MAX ||
        (dict_size && (dict_size < COMP_DICT_MIN || dict_size > COMP_DICT_MAX)) ||
        (dict && !dict_size))
        return -EINVAL;
    struct codec_config config;
    if (!codec_table_setting(&dev->codecs, priority, &config))
        return -ENOENT;
    int resolved = comp_resolve_level(config.algorithm, level);
    if (resolved < 0)
        return resolved;
    if (dict_size && !comp_has_dict(config.algorithm))
        return -EINVAL;
    config = (struct codec_config){
        .algorithm = config.algorithm,
        .level = resolved,
        .priority = priority,
        .dict_auto = dict == NULL && dict_size > 0,
        .dict_size = (uint32_t)dict_size,
    };
    int rc = 0;
    void *trained = NULL;
    size_t content_size = dict_size;
    if (dict)
        rc = comp_dict_create(config.algorithm, resolved, dict, dict_size, &config.dict);
    else if (config.dict_auto)
        rc = train_dictionary(dev, &config, dict_size, &trained, &content_size);
    if (rc == -EAGAIN)
        rc = 0; /* trained later, by the first pass that finds enough pages */
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&dev->settings_lock);
    if (priority == 0 && counter_get(&dev->pages_stored) != 0) {
        comp_dict_free(config.dict);
        rc = -EBUSY;
    } else {
        rc = codec_table_set_dict(&dev->codecs, &config, dict ? dict : trained, content_size);
    }
    pthread_mutex_unlock(&dev->settings_lock);
    free(trained);
    return rc;
}

/* Whether a dict=auto setting is due for a training, by the rule above. */
static bool training_due(const struct codec_config *config, uint64_t stored, bool quiet)
{
    if (!config->dict)
        return true;
    if (config->trainings >= trainings_allowed(stored))
        return false;
    uint64_t trained = config->trained_pages;
    if (stored >= RETRAIN_GROWTH * trained)
        return true;
    return quiet && stored * RETRAIN_QUIET_GROWTH_DEN >= trained * RETRAIN_QUIET_GROWTH_NUM &&
           stored > trained;
}

static bool same_setting(const struct codec_config *a, const struct codec_config *b)
{
    return a->dict_auto == b->dict_auto && a->dict == b->dict && a->algorithm == b->algorithm &&
           a->level == b->level && a->dict_size == b->dict_size && a->trainings == b->trainings;
}

void recompress_dict_train_due(struct uzram *dev, bool quiet)
{
    uint64_t stored = counter_get(&dev->pages_stored);
    for (unsigned priority = 1; priority <= UZRAM_RECOMPRESS_PRIORITY_MAX; priority++) {
        struct codec_config was;
        if (!codec_table_setting(&dev->codecs, priority, &was) || !was.dict_auto ||
            !training_due(&was, stored, quiet))
            continue;
        struct codec_config config = was;
        config.dict = NULL;
        void *content = NULL;
        size_t content_size = 0;
        if (train_dictionary(dev, &config, config.dict_size, &content, &content_size) < 0)
            continue;
        pthread_mutex_lock(&dev->settings_lock);
        struct codec_config now;
        /* unless the setting changed meanwhile; codec_table_set_dict frees config.dict if it
         * fails */
        if (codec_table_setting(&dev->codecs, priority, &now) && same_setting(&now, &was))
            codec_table_set_dict(&dev->codecs, &config, content, content_size);
        else
            comp_dict_free(config.dict);
        pthread_mutex_unlock(&dev->settings_lock);
        free(content);
    }
}
