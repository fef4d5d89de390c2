/* recompress.c - secondary algorithms, dictionaries, recompression passes and the background
 * recompressor thread. One page's work (copy, compress, swap) is recompress_page.c's. */
#include "recompress/recompress.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/background.h"
#include "bundle/bundle.h"
#include "codec/comp.h"
#include "device/device.h"
#include "common/fault.h"
#include "pool/pool.h"
#include "pool/pool_reserve.h"
#include "recompress/recompress_bundle.h"
#include "recompress/recompress_dict.h"
#include "recompress/recompress_page.h"
#include "store/store.h"
#include "store/compact_index.h"

/* The background recompressor of a device: a thread the library starts when recompress_idle
 * is set and stops when it is 0, at reset (paused) and at destroy; and the passes by request,
 * counted so that a reset can wait for them. */
struct recompressor {
    /* Held through a start or stop (uzram_set_recompress_idle, destroy): one at a time,
     * so that a start racing a stop cannot leave a setting without its thread. */
    pthread_mutex_t control;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool running;                 /* the thread exists (under lock) */
    bool in_pass;                 /* it is working through the table (under lock) */
    unsigned requests;            /* passes by request (uzram_recompress) running (under lock) */
    _Atomic bool stop;            /* leave: recompress_idle 0 or destroy */
    _Atomic bool paused;          /* a reset is running: no pass begins, running ones end */
    uint64_t idle_seconds;        /* under lock; 0: off */
    unsigned idle_sets;           /* under lock: each set of recompress_idle wakes the thread */
    uint64_t passes;              /* passes the thread finished (under lock) */
    _Atomic uint64_t rate;        /* pages per second; 0: no limit */
    _Atomic unsigned group;       /* pages a bundle packs at most (recompress_group); 0: off */
    _Atomic unsigned cpu_percent; /* share of one CPU the thread may use (recompress_cpu) */
    /* The thread's own: the window its CPU time is held to cpu_percent in (cpu_budget_wait),
     * kept across passes so that a pass's compaction is paid for by the next one. */
    uint64_t window_ns, window_cpu_ns;
};

/* ---- settings ----------------------------------------------------------- */

int uzram_set_recomp_algorithm(struct uzram *dev, unsigned priority, const char *name, int level)
{
    if (priority < 1 || priority > UZRAM_RECOMPRESS_PRIORITY_MAX)
        return -EINVAL;
    if (!name || !*name) {
        codec_table_clear(&dev->codecs, priority);
        return 0;
    }
    int algo, resolved;
    int rc = comp_choose(name, level, &algo, &resolved);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&dev->settings_lock);
    rc = codec_table_set(
        &dev->codecs,
        &(struct codec_config){.algorithm = algo, .level = resolved, .priority = priority});
    pthread_mutex_unlock(&dev->settings_lock);
    return rc;
}

/* ---- passes --------------------------------------------------------------- */

/* Pacing of the background thread: at most `rate` pages tried a second. */
struct pace {
    uint64_t rate;
    uint64_t started_ns;
    uint64_t tried;
};

static uint64_t monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec used;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &used);
    return (uint64_t)used.tv_sec * 1000000000u + (uint64_t)used.tv_nsec;
}

static bool background_should_leave(struct uzram *dev)
{
    struct recompressor *r = dev->recompressor;
    return atomic_load_explicit(&r->stop, memory_order_relaxed) ||
           atomic_load_explicit(&r->paused, memory_order_relaxed);
}

/* Sleep in short steps until `due_ns` (CLOCK_MONOTONIC), or a stop or pause. */
static void sleep_until(struct uzram *dev, uint64_t due_ns)
{
    for (;;) {
        uint64_t now_ns = monotonic_ns();
        if (now_ns >= due_ns || background_should_leave(dev))
            return;
        uint64_t wait_ns = due_ns - now_ns;
        if (wait_ns > 50000000u)
            wait_ns = 50000000u;
        struct timespec step = {0, (long)wait_ns};
        nanosleep(&step, NULL);
    }
}

/* The CPU budget (recompress_cpu): the thread runs at an ordinary (nicer) priority, so that it
 * gets on with its work when the CPUs are busy - under memory pressure they usually are - and
 * holds itself to its share of one CPU by sleeping: its own CPU time since the window began,
 * at `percent`, is due that much wall time; it sleeps off what it is ahead. A window ends
 * after BUDGET_WINDOW_NS (once paid for), so time the thread did not get the CPU for is not
 * saved up into a long burst later. */
#define BUDGET_WINDOW_NS 1000000000u

/* Near mem_limit (from PRESSURE_NUMERATOR / PRESSURE_DENOMINATOR of it) the budget and the
 * rate no longer hold the thread back: a page it packs is room for the next write, and the
 * alternative is the writes failing (a swap device's then push the program towards the OOM
 * killer). Swap fills the pool fastest exactly when the CPUs are busy (issue 43). */
#define PRESSURE_NUMERATOR 3u
#define PRESSURE_DENOMINATOR 4u

static bool near_limit(struct uzram *dev)
{
    uint64_t limit = atomic_load_explicit(&dev->mem_limit, memory_order_relaxed);
    return limit != 0 &&
           pool_mem_used(dev->pool) >= limit / PRESSURE_DENOMINATOR * PRESSURE_NUMERATOR;
}

static void cpu_budget_wait(struct uzram *dev)
{
    struct recompressor *r = dev->recompressor;
    unsigned percent = atomic_load_explicit(&r->cpu_percent, memory_order_relaxed);
    uint64_t now_ns = monotonic_ns();
    if (near_limit(dev)) { /* and what it uses there is not paid for later */
        r->window_ns = now_ns;
        r->window_cpu_ns = thread_cpu_ns();
        return;
    }
    if (percent < 100) {
        uint64_t used_ns = thread_cpu_ns() - r->window_cpu_ns;
        sleep_until(dev, r->window_ns + used_ns / percent * 100);
        now_ns = monotonic_ns();
    }
    if (now_ns - r->window_ns >= BUDGET_WINDOW_NS) {
        r->window_ns = now_ns;
        r->window_cpu_ns = thread_cpu_ns();
    }
}

/* A pass by request counts itself, as the thread's does (in_pass), so that a reset can wait
 * for it: none begins while a reset runs, and one running ends at its next page. */
static void request_begin(struct recompressor *r)
{
    pthread_mutex_lock(&r->lock);
    while (atomic_load(&r->paused))
        pthread_cond_wait(&r->wake, &r->lock);
    r->requests++;
    pthread_mutex_unlock(&r->lock);
}

static void request_end(struct recompressor *r)
{
    pthread_mutex_lock(&r->lock);
    r->requests--;
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
}

/* Sleep as long as the pages tried so far are ahead of the rate, in short
 * steps so that a stop or pause is seen at once. */
static void pace_wait(struct uzram *dev, struct pace *pace)
{
    if (pace->rate == 0)
        return;
    if (near_limit(dev)) { /* as the budget (cpu_budget_wait) */
        pace->started_ns = monotonic_ns();
        pace->tried = 0;
        return;
    }
    sleep_until(dev, pace->started_ns + pace->tried * 1000000000u / pace->rate);
}

/* One pass over the page table. `pace` is the background thread's (NULL
 * for a pass on request, which runs as fast as it can). */
static int run_pass(struct uzram *dev, const struct recompress_plan *plan, uint64_t max_pages,
                    struct pace *pace, struct recompress_tally *tally)
{
    uint32_t now = store_now(dev);
    int rc = 0;
    for (uint64_t index = 0; index < dev->page_count && rc == 0; index++) {
        if (max_pages && tally->tried >= max_pages)
            break;
        struct recompress_tally before = *tally;
        /* A window of neighbours is packed before its pages are taken one by one: those
         * it packed are bundled then, and the pass leaves them. */
        if (plan->group > 1 && index % plan->group == 0)
            rc = recompress_bundle_window(dev, index, plan, now, tally);
        if (rc == 0)
            rc = recompress_bundle_split(dev, index, plan, tally);
        if (rc == 0)
            rc = recompress_page(dev, index, plan, now, tally);
        /* counted as it goes: a pass over a large disk takes minutes */
        if (tally->recompressed != before.recompressed) {
            uint64_t in = tally->bytes_before - before.bytes_before;
            uint64_t out = tally->bytes_after - before.bytes_after;
            counter_add(&dev->events->recomp_pages, tally->recompressed - before.recompressed);
            counter_add(&dev->events->recomp_bytes, in);
            counter_add(&dev->events->recomp_saved_bytes, in - out);
        }
        if (pace && tally->tried != before.tried) {
            pace->tried++;
            pace_wait(dev, pace);
        }
        /* the budget after every page tried, and every 256 slots (those cost little each) */
        if (pace && (tally->tried != before.tried || index % 256 == 0))
            cpu_budget_wait(dev);
        if ((pace && background_should_leave(dev)) || atomic_load(&dev->recompressor->paused))
            break;
    }
    return rc;
}

_Static_assert(sizeof((struct recompress_plan *)0)->stale_share / sizeof(uint64_t) ==
                   CODEC_TABLE_MAX,
               "a share for each codec id");

/* A pass with the device's bundle setting: its buffers are made for it (without them, no
 * page is bundled or split by this pass; the next one tries again). */
static int run_pass_bundling(struct uzram *dev, struct recompress_plan *plan, uint64_t max_pages,
                             struct pace *pace, bool quiet, struct recompress_tally *tally)
{
    recompress_dict_train_due(dev, quiet);
    if (pace)
        cpu_budget_wait(dev); /* a training takes a second or two of CPU */
    plan->stale_dicts = codec_table_stale_dicts(&dev->codecs, plan->stale_share, &plan->retry_kept);
    /* Priorities above the last one set have nothing to try: without this every page at
     * the last one set would be decoded by every pass for nothing. */
    struct codec_config config;
    while (plan->last > plan->first && !codec_table_setting(&dev->codecs, plan->last, &config))
        plan->last--;
    plan->group = atomic_load(&dev->recompressor->group);
    plan->work = bundle_work_new();
    int rc = run_pass(dev, plan, max_pages, pace, tally);
    /* A whole pass that tried every page kept on a replaced dictionary knows what moving
     * them costs (recompress_dict.c) */
    for (unsigned id = 0; rc == 0 && max_pages == 0 && id < CODEC_TABLE_MAX; id++)
        if (plan->retry_kept >> id & 1u)
            codec_table_weigh_kept(&dev->codecs, id, tally->kept_growth[id]);
    bundle_work_free(plan->work);
    plan->work = NULL;
    return rc;
}

int uzram_set_recompress_group(struct uzram *dev, unsigned pages)
{
    if (pages == 1 || pages > BUNDLE_MAX_PAGES)
        return -EINVAL;
    atomic_store(&dev->recompressor->group, pages);
    return 0;
}

unsigned uzram_recompress_group(struct uzram *dev)
{
    return atomic_load(&dev->recompressor->group);
}

static bool any_secondary(struct uzram *dev, unsigned first, unsigned last)
{
    struct codec_config config;
    for (unsigned priority = first; priority <= last; priority++)
        if (codec_table_setting(&dev->codecs, priority, &config))
            return true;
    return false;
}

int uzram_recompress(struct uzram *dev, unsigned type, uint64_t threshold, uint64_t max_pages,
                     unsigned priority, struct uzram_recompress_result *result)
{
    if ((type & ~(UZRAM_RECOMPRESS_IDLE | UZRAM_RECOMPRESS_HUGE)) ||
        priority > UZRAM_RECOMPRESS_PRIORITY_MAX || threshold > UZRAM_PAGE_SIZE)
        return -EINVAL;
    struct recompress_plan plan = {
        .mode = (type & UZRAM_RECOMPRESS_IDLE ? RECOMPRESS_IDLE : 0) |
                (type & UZRAM_RECOMPRESS_HUGE ? RECOMPRESS_HUGE : 0),
        .threshold = (unsigned)threshold,
        .first = priority ? priority : 1,
        .last = priority ? priority : UZRAM_RECOMPRESS_PRIORITY_MAX,
        .marks_incompressible = priority == 0,
    };
    if (!any_secondary(dev, plan.first, plan.last))
        return -ENOENT;
    struct recompress_tally tally = {0};
    request_begin(dev->recompressor);
    int rc = run_pass_bundling(dev, &plan, max_pages, NULL, true, &tally);
    request_end(dev->recompressor);
    /* At mem_limit objects may have gone past it by the pool's holes and a span
     * (store_put_object): compaction gathers the holes of the ones they replaced. */
    uint64_t limit = atomic_load(&dev->mem_limit);
    if ((tally.recompressed || tally.bundled || tally.split) && limit &&
        pool_mem_used(dev->pool) > limit)
        store_compact_pool(dev);
    if (result)
        *result = (struct uzram_recompress_result){
            .pages_tried = tally.tried,
            .pages_recompressed = tally.recompressed,
            .pages_incompressible = tally.incompressible,
            .bytes_before = tally.bytes_before,
            .bytes_after = tally.bytes_after,
        };
    return rc;
}

/* ---- the background thread --------------------------------------------------- */

/* 2048 pages (8 MiB) a second: docs/BENCHMARKS.md ("Recompression rate") measures foreground
 * randwrite beside the thread at 512 to 4096 pages/s; on a shared machine no rate there costs
 * the foreground measurably less, and this one recompresses a GiB of idle pages in about two
 * minutes when the CPU budget lets it. */
#define DEFAULT_RATE 2048u
/* A fifth of one CPU: on a machine whose CPUs are all busy the thread still gets on with its
 * work (it used to run at SCHED_IDLE, and did nothing there), and the foreground keeps at
 * least four fifths of a CPU. */
#define DEFAULT_CPU_PERCENT 20u
/* How much nicer than its creator the thread runs: nice 5 weighs about a third of nice 0, so
 * that beside one busy thread of the creator's priority on a CPU it still gets its 20%. */
#define NICER_STEPS 5

int recompressor_create(struct uzram *dev)
{
    struct recompressor *r = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    pthread_mutex_init(&r->control, NULL);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->wake, NULL);
    atomic_init(&r->rate, DEFAULT_RATE);
    atomic_init(&r->cpu_percent, DEFAULT_CPU_PERCENT);
    dev->recompressor = r;
    return 0;
}

/* How long to wait between passes: half the idle time, 1 s to 60 s. */
static uint64_t pass_interval(uint64_t idle_seconds)
{
    uint64_t interval = idle_seconds / 2;
    return interval < 1 ? 1 : interval > 60 ? 60 : interval;
}

/* What stays the same while nothing is written or discarded: the pages stored and the bytes of
 * their objects (an overwrite changes the second). A pass changes the second too, so it is
 * taken after one pass and compared before the next: the device was quiet in between. */
static bool quiet_since(struct uzram *dev, const uint64_t seen[2])
{
    return counter_get(&dev->pages_stored) == seen[0] &&
           counter_get(&dev->compr_data_size) == seen[1];
}

static void *recompressor_main(void *arg)
{
    struct uzram *dev = arg;
    struct recompressor *r = dev->recompressor;
    uint64_t seen[2] = {UINT64_MAX, UINT64_MAX};
    (void)background_nicer(NICER_STEPS); /* best effort: the budget holds it back anyway */
    r->window_ns = monotonic_ns();
    r->window_cpu_ns = thread_cpu_ns();
    pthread_mutex_lock(&r->lock);
    while (!atomic_load(&r->stop)) {
        uint64_t idle_seconds = r->idle_seconds;
        if (atomic_load(&r->paused) || idle_seconds == 0) {
            pthread_cond_wait(&r->wake, &r->lock);
            continue;
        }
        r->in_pass = true;
        pthread_mutex_unlock(&r->lock);
        struct recompress_plan plan = {
            .min_age = store_ticks(idle_seconds),
            .first = 1,
            .last = UZRAM_RECOMPRESS_PRIORITY_MAX,
            .marks_incompressible = true,
        };
        struct pace pace = {.rate = atomic_load(&r->rate), .started_ns = monotonic_ns()};
        struct recompress_tally tally = {0};
        cpu_budget_wait(dev); /* a new window after a wait between passes */
        if (any_secondary(dev, 1, UZRAM_RECOMPRESS_PRIORITY_MAX))
            run_pass_bundling(dev, &plan, 0, &pace, quiet_since(dev, seen),
                              &tally); /* a failed page waits */
        /* The replaced objects left holes in the pool's spans: the memory
         * only comes back once they are compacted. The pool only: compaction of the backing
         * store holds the lock that writers making room wait for, which a thread held to a
         * CPU budget must not (the writeback thread does it). */
        if (tally.recompressed || tally.bundled || tally.split) {
            store_compact_pool(dev);
            /* Bundling takes entries out of the dedup index all over it: the ones left move
             * down, and the chunks they leave go back (not under a reserve, as compact). */
            if (!pool_reserve_on(dev->pool))
                store_compact_index(dev);
        }
        seen[0] = counter_get(&dev->pages_stored);
        seen[1] = counter_get(&dev->compr_data_size);
        counter_add(&dev->events->recomp_passes, 1);
        pthread_mutex_lock(&r->lock);
        r->in_pass = false;
        r->passes++;
        pthread_cond_broadcast(&r->wake);
        if (atomic_load(&r->stop) || atomic_load(&r->paused))
            continue;
        /* The wait ends early only for a stop, a pause or a new setting: `wake` is broadcast
         * for other reasons too (the end of every pass by request, which must not start a
         * pass of this thread each time). */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += near_limit(dev) ? 1 : (time_t)pass_interval(idle_seconds);
        unsigned idle_sets = r->idle_sets;
        while (!atomic_load(&r->stop) && !atomic_load(&r->paused) && r->idle_sets == idle_sets &&
               pthread_cond_timedwait(&r->wake, &r->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

static void stop_thread(struct recompressor *r)
{
    pthread_mutex_lock(&r->lock);
    bool running = r->running;
    atomic_store(&r->stop, true);
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
    if (running)
        pthread_join(r->thread, NULL);
    pthread_mutex_lock(&r->lock);
    r->running = false;
    atomic_store(&r->stop, false);
    pthread_mutex_unlock(&r->lock);
}

static int set_recompress_idle(struct uzram *dev, uint64_t seconds);

int uzram_set_recompress_idle(struct uzram *dev, uint64_t seconds)
{
    pthread_mutex_lock(&dev->recompressor->control);
    int rc = set_recompress_idle(dev, seconds);
    pthread_mutex_unlock(&dev->recompressor->control);
    return rc;
}

static int set_recompress_idle(struct uzram *dev, uint64_t seconds)
{
    struct recompressor *r = dev->recompressor;
    if (seconds == 0) {
        pthread_mutex_lock(&r->lock);
        r->idle_seconds = 0;
        pthread_mutex_unlock(&r->lock);
        stop_thread(r);
        return 0;
    }
    pthread_mutex_lock(&r->lock);
    r->idle_seconds = seconds;
    r->idle_sets++;
    int rc = 0;
    if (!r->running) {
        rc = FAULT_POINT(FAULT_ALLOC)
                 ? EAGAIN
                 : background_start(&r->thread, recompressor_main, dev, "uzram-recomp");
        if (rc == 0)
            r->running = true;
        else
            r->idle_seconds = 0;
    }
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
    return -rc;
}

int uzram_set_recompress_rate(struct uzram *dev, uint64_t pages_per_second)
{
    atomic_store(&dev->recompressor->rate, pages_per_second);
    return 0;
}

int uzram_set_recompress_cpu(struct uzram *dev, unsigned percent)
{
    if (percent < 1 || percent > 100)
        return -EINVAL;
    atomic_store(&dev->recompressor->cpu_percent, percent);
    return 0;
}

void recompressor_pause(struct uzram *dev)
{
    struct recompressor *r = dev->recompressor;
    pthread_mutex_lock(&r->lock);
    atomic_store(&r->paused, true);
    pthread_cond_broadcast(&r->wake);
    while (r->in_pass || r->requests > 0)
        pthread_cond_wait(&r->wake, &r->lock);
    pthread_mutex_unlock(&r->lock);
}

void recompressor_resume(struct uzram *dev)
{
    struct recompressor *r = dev->recompressor;
    pthread_mutex_lock(&r->lock);
    atomic_store(&r->paused, false);
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
}

void recompressor_destroy(struct uzram *dev)
{
    struct recompressor *r = dev->recompressor;
    stop_thread(r);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->control);
    free(r);
}

#ifdef UZRAM_TEST_HOOKS
uint64_t recompressor_test_passes(struct uzram *dev)
{
    struct recompressor *r = dev->recompressor;
    pthread_mutex_lock(&r->lock);
    uint64_t passes = r->passes;
    pthread_mutex_unlock(&r->lock);
    return passes;
}
#endif

/* Settings the attributes show (attr.c). */
void recompressor_settings(struct uzram *dev, uint64_t *idle_seconds, uint64_t *rate,
                           unsigned *cpu_percent)
{
    struct recompressor *r = dev->recompressor;
    pthread_mutex_lock(&r->lock);
    *idle_seconds = r->idle_seconds;
    pthread_mutex_unlock(&r->lock);
    *rate = atomic_load(&r->rate);
    *cpu_percent = atomic_load(&r->cpu_percent);
}
