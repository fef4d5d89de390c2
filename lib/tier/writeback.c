/* writeback.c - moving stored objects to the backing store (see writeback.h): zram's
 * writeback passes, room made under mem_limit, the background thread, compaction of the
 * backing store, attaching and detaching it, the settings. */
#include "tier/writeback.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/background.h"
#include "backing/backing.h"
#include "tier/coldest.h"
#include "device/device.h"
#include "common/fault.h"
#include "pool/pool.h"
#include "state/state.h"
#include "store/store.h"
#include "tier/writeback_batch.h"
#include "tier/writeback_page.h"

/* Lock order: `lock` before any page slot, dedup or pool lock (it is held
 * through a batch, which takes those), and passes only *try* slot locks when
 * a writer making room may hold one, so a writer holding a slot lock may
 * wait for `lock`. It is held for one batch at a time (and a bounded scan),
 * never by a thread at a low CPU priority, and passes step aside between
 * batches for writers waiting to make room. `thread_lock` is a leaf. */
struct writeback {
    pthread_mutex_t lock; /* one writer of the backing store at a time; attach and detach */
    /* Under lock: the batches' buffers, the hands of the sweeps for cold and idle pages and
     * of coldest_cutoff()'s sample, and the age that counts as cold. */
    struct batch_buffers buffers;
    uint64_t cold_hand, idle_hand;
    uint32_t cold_before; /* pages last accessed then or before are cold (store_now()) */
    bool cold_valid;      /* cold_before was sampled for this turn of the sweep */
    uint64_t sample_start;
    _Atomic uint64_t garbage_after_pass; /* the backing store's garbage after its last compaction */
    _Atomic uint64_t room_made;          /* batches written to make room: waiters retry */
    _Atomic unsigned room_waiters;       /* writers waiting for `lock` to make room */
    /* Passes other than a writer's (under thread_lock): how many run, and resets
     * waiting (uzram_reset(): writeback_pause()); passes_changed tells of either. */
    unsigned passes;
    _Atomic unsigned pauses;
    pthread_cond_t passes_changed;

    /* settings */
    _Atomic bool when_full;
    _Atomic uint64_t idle_seconds;
    _Atomic uint64_t rate;
    struct writeback_limit limit;

    /* the thread (under thread_lock) */
    pthread_mutex_t thread_lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool running;
    bool stop;
#ifdef UZRAM_TEST_HOOKS
    bool no_thread; /* writeback_test_no_thread() */
#endif
};

/* Slots one search looks at, at the most, while it holds the lock. */
#define COLD_SCAN 65536u

/* A pass between batches lets writers waiting to make room go first, for at most this
 * many steps of STEP_ASIDE_NS. */
#define STEP_ASIDE_STEPS 1000u
#define STEP_ASIDE_NS 100000

#define DEFAULT_RATE 4096u

/* The thread keeps the pool this far below mem_limit (a fraction of it,
 * at least 256 KiB), starting when it is within half of that. */
#define HEADROOM_DIVISOR 16u
#define HEADROOM_MIN (256u * 1024u)

/* The headroom of a limit: a sixteenth of it, at least HEADROOM_MIN. */
static uint64_t headroom(uint64_t limit)
{
    return limit / HEADROOM_DIVISOR > HEADROOM_MIN ? limit / HEADROOM_DIVISOR : HEADROOM_MIN;
}

/* Under lock: a batch of writeback's (batch_start()). */
static int begin_batch(struct uzram *dev, bool patient, struct batch *batch)
{
    struct writeback *writeback = dev->writeback;
    return batch_start(dev, &writeback->buffers, &writeback->limit, patient, batch);
}

int writeback_create(struct uzram *dev)
{
    struct writeback *writeback = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *writeback);
    if (!writeback)
        return -ENOMEM;
    pthread_mutex_init(&writeback->lock, NULL);
    pthread_mutex_init(&writeback->thread_lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&writeback->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_cond_init(&writeback->passes_changed, NULL);
    atomic_init(&writeback->rate, DEFAULT_RATE);
    dev->writeback = writeback;
    return 0;
}

static int64_t monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static struct timespec timespec_at(int64_t ns)
{
    return (struct timespec){.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
}

/* ---- passes and resets ----------------------------------------------------------- */

/* A pass other than a writer's own (uzram_writeback, the thread's, compaction asked for)
 * counts itself, so that uzram_reset() can stop it and wait for it: while a reset runs
 * (pauses > 0) none begins and those running end after their batch. Returns whether it
 * may run: with `wait`, after the reset, else not during one. */
static bool pass_begin(struct writeback *writeback, bool wait)
{
    pthread_mutex_lock(&writeback->thread_lock);
    while (wait && atomic_load(&writeback->pauses) > 0)
        pthread_cond_wait(&writeback->passes_changed, &writeback->thread_lock);
    bool go = atomic_load(&writeback->pauses) == 0;
    writeback->passes += go;
    pthread_mutex_unlock(&writeback->thread_lock);
    return go;
}

static void pass_end(struct writeback *writeback)
{
    pthread_mutex_lock(&writeback->thread_lock);
    writeback->passes--;
    pthread_cond_broadcast(&writeback->passes_changed);
    pthread_mutex_unlock(&writeback->thread_lock);
}

/* A reset is waiting: the pass ends after its batch. */
static bool pass_cut(struct writeback *writeback)
{
    return atomic_load_explicit(&writeback->pauses, memory_order_relaxed) > 0;
}

void writeback_pause(struct uzram *dev)
{
    struct writeback *writeback = dev->writeback;
    pthread_mutex_lock(&writeback->thread_lock);
    atomic_fetch_add(&writeback->pauses, 1);
    while (writeback->passes > 0)
        pthread_cond_wait(&writeback->passes_changed, &writeback->thread_lock);
    pthread_mutex_unlock(&writeback->thread_lock);
}

void writeback_resume(struct uzram *dev)
{
    struct writeback *writeback = dev->writeback;
    pthread_mutex_lock(&writeback->thread_lock);
    atomic_fetch_sub(&writeback->pauses, 1);
    pthread_cond_broadcast(&writeback->passes_changed);
    pthread_cond_signal(&writeback->wake);
    pthread_mutex_unlock(&writeback->thread_lock);
}

/* Without the lock, between two batches of a pass: writers waiting to make room take the
 * lock first (a mutex is not fair: unlocked and locked again at once, it would go to the
 * pass again). Bounded, so that a stream of writers cannot hold a pass up for ever. */
static void step_aside(struct writeback *writeback)
{
    const struct timespec step = {0, STEP_ASIDE_NS};
    for (unsigned i = 0; i < STEP_ASIDE_STEPS && atomic_load(&writeback->room_waiters) > 0; i++)
        nanosleep(&step, NULL);
}

/* ---- compaction of the backing store -------------------------------------------- */

/* Bytes of the backing store's blocks in use that hold no live object. */
static uint64_t backing_garbage(struct uzram *dev, struct backing *backing)
{
    uint64_t used = backing_blocks_used(backing) * BACKING_BLOCK;
    uint64_t live = counter_get(&dev->bd_data_size);
    return used > live ? used - live : 0;
}

/* Who asks for a compaction pass of the backing store. */
enum compaction_need { NEED_FULL, NEED_ASKED, NEED_BACKGROUND };

/* Whether a compaction pass is worth its scan of the page table: the backing store
 * is full and something died since the last pass; or compaction was asked
 * for (uzram_compact) and a quarter of it is garbage; or, for the
 * thread, that garbage is also at least 1 MiB and grew by an eighth of the
 * store since the last pass. */
static bool backing_fragmented(struct uzram *dev, enum compaction_need need)
{
    struct writeback *writeback = dev->writeback;
    struct backing *backing = device_backing(dev);
    if (!backing)
        return false;
    uint64_t used = backing_blocks_used(backing) * BACKING_BLOCK;
    uint64_t garbage = backing_garbage(dev, backing);
    if (garbage <= writeback->garbage_after_pass)
        return false;
    if (need == NEED_FULL)
        return true;
    if (garbage < used / 4)
        return false;
    return need == NEED_ASKED ||
           (garbage >= (1u << 20) && garbage >= writeback->garbage_after_pass + used / 8);
}

/* Under lock: move the objects of the backing store's sparse blocks (half full or
 * less) together, so that those blocks empty and are given back. Pages
 * move one at a time, locked only to copy and to swap, as in writeback.
 * A pass other than a writer's own (`pass`) lets go of the lock after each
 * batch for writers waiting to make room, and ends early for a reset.
 * Returns the objects moved, or a negative errno. */
static int compact_backing(struct uzram *dev, bool pass)
{
    struct writeback *writeback = dev->writeback;
    const struct writeback_filter filter = {.relocate = true};
    uint64_t moved = 0;
    int rc = 0;
    for (uint64_t index = 0; rc == 0 && index < dev->page_count;) {
        struct batch batch;
        rc = begin_batch(dev, true, &batch);
        if (rc < 0)
            return rc; /* detached meanwhile: the device was emptied */
        batch.relocating = true;
        uint32_t now = store_now(dev);
        for (unsigned scanned = 0; rc == 0 && index < dev->page_count && scanned < COLD_SCAN;
             scanned++) {
            int added = batch_add(&batch, index++, &filter, now);
            if (added < 0)
                rc = added;
            else if (pass && batch_went_out(&batch, added))
                break;
        }
        rc = batch_finish(&batch, rc);
        moved += batch.written;
        if (pass && rc == 0 && index < dev->page_count) {
            if (pass_cut(writeback))
                break;
            pthread_mutex_unlock(&writeback->lock);
            step_aside(writeback);
            pthread_mutex_lock(&writeback->lock);
        }
    }
    struct backing *backing = device_backing(dev);
    if (backing) {
        backing_trim(backing);
        writeback->garbage_after_pass = backing_garbage(dev, backing);
    }
    return rc < 0 ? rc : moved > INT32_MAX ? INT32_MAX : (int)moved;
}

/* Under lock: after a writeback found the backing store full (rc -ENOSPC), compact
 * it if that may give room: 0 to try again, else rc. */
static int after_full(struct uzram *dev, int rc, bool pass)
{
    if (rc == -ENOSPC && backing_fragmented(dev, NEED_FULL) && compact_backing(dev, pass) > 0)
        return 0;
    return rc;
}

/* ---- passes -------------------------------------------------------------------- */

int uzram_writeback(struct uzram *dev, unsigned type, uint64_t first_page, uint64_t last_page,
                    uint64_t *written)
{
    const unsigned types =
        UZRAM_WRITEBACK_IDLE | UZRAM_WRITEBACK_HUGE | UZRAM_WRITEBACK_INCOMPRESSIBLE;
    if (written)
        *written = 0;
    if (type & ~types)
        return -EINVAL;
    if (last_page >= dev->page_count)
        last_page = dev->page_count - 1;
    if (first_page > last_page)
        return -EINVAL;
    struct writeback *writeback = dev->writeback;
    const struct writeback_filter filter = {.type = type};
    uint64_t total = 0;
    int rc = 0;
    pass_begin(writeback, true);
    /* A batch at a time under the lock; a reset meanwhile ends the pass (the pages it was
     * to write are gone). */
    for (uint64_t index = first_page; rc == 0 && index <= last_page && !pass_cut(writeback);) {
        pthread_mutex_lock(&writeback->lock);
        struct batch batch;
        rc = begin_batch(dev, true, &batch);
        uint32_t now = store_now(dev);
        for (unsigned scanned = 0; rc == 0 && index <= last_page && scanned < COLD_SCAN;) {
            int added = batch_add(&batch, index, &filter, now);
            if (added < 0) {
                /* The batch goes out first: compaction makes batches of its own, and lets
                 * writers in between them. Then this page again. */
                int wrote = batch.count ? batch_write(&batch) : 0;
                rc = wrote < 0 ? wrote : after_full(dev, added, true);
                continue;
            }
            index++;
            scanned++;
            if (batch_went_out(&batch, added))
                break;
        }
        if (rc != -ENODEV)
            rc = batch_finish(&batch, rc);
        total += batch.written;
        pthread_mutex_unlock(&writeback->lock);
        step_aside(writeback);
    }
    pass_end(writeback);
    if (written)
        *written = total;
    return rc < 0 ? rc : 0;
}

/* ---- the coldest pages ----------------------------------------------------------- */

/* Whether a slot holds its page in memory (a form writeback takes; a dedup reference to a
 * written-back entry is one it passes over). */
static bool in_memory(uint32_t info)
{
    enum slot_state state = slot_info_state(info);
    return state == SLOT_COMPRESSED || state == SLOT_HUGE || state == SLOT_DEDUP;
}

/* Under lock: write back a batch of the coldest pages in memory: pages marked idle, and
 * pages last accessed at or before cold_before, which the sample of coldest_cutoff() sets
 * again whenever the sweep (from cold_hand, in table order) comes round or finds nothing
 * for COLD_SCAN slots. So the oldest sixteenth of the pages goes first, then the oldest
 * sixteenth of what is left, and so on, while pages read or written meanwhile stay. The
 * thread (`patient`) gives way to writers waiting to make room. Returns the pages written
 * (even if an error stopped it after some), or a negative errno. */
static int write_back_coldest(struct uzram *dev, bool patient)
{
    struct writeback *writeback = dev->writeback;
    struct batch batch;
    int rc = begin_batch(dev, patient, &batch);
    if (rc < 0)
        return rc;
    const struct writeback_filter any = {0};
    uint32_t now = store_now(dev);
    if (!writeback->cold_valid)
        writeback->cold_before = coldest_cutoff(dev, &writeback->sample_start, now);
    writeback->cold_valid = true;
    uint64_t index = writeback->cold_hand % dev->page_count;
    /* At most one turn: a page taken is not seen again before its batch is written. */
    uint64_t scan = dev->page_count < COLD_SCAN ? dev->page_count : COLD_SCAN, scanned = 0;
    for (; scanned < scan && rc == 0; scanned++) {
        if (patient && atomic_load_explicit(&writeback->room_waiters, memory_order_relaxed))
            break;
        struct slot *slot = &dev->slots[index];
        uint32_t info = atomic_load_explicit(&slot->info, memory_order_relaxed);
        uint32_t ac_time = atomic_load_explicit(&slot->ac_time, memory_order_relaxed);
        int added = 0;
        if (in_memory(info) && ((info & SLOT_IDLE) || ac_time <= writeback->cold_before)) {
            added = batch_add(&batch, index, &any, now);
            if (added < 0)
                rc = added;
        }
        if (++index == dev->page_count) {
            index = 0;
            writeback->cold_before =
                coldest_cutoff(dev, &writeback->sample_start, now); /* a new turn */
        }
        if (batch_went_out(&batch, added))
            break;
    }
    writeback->cold_hand = index;
    if (scanned == scan && batch.count == 0 && batch.written == 0)
        writeback->cold_valid = false; /* nothing that cold left: sample again */
    rc = batch_finish(&batch, rc);
    return batch.written > 0 ? (int)batch.written : rc;
}

/* Under lock: one batch of pages not accessed for idle_seconds, found by a
 * sweep from idle_hand that stops at the end of the table. Returns the
 * pages written, or a negative errno; *wrapped is set when the sweep came
 * to the end. */
static int write_back_idle(struct uzram *dev, uint64_t idle_seconds, bool *wrapped)
{
    struct writeback *writeback = dev->writeback;
    struct batch batch;
    int rc = begin_batch(dev, true, &batch);
    if (rc < 0)
        return rc;
    const struct writeback_filter filter = {.min_age = store_ticks(idle_seconds)};
    uint32_t now = store_now(dev);
    uint64_t index = writeback->idle_hand % dev->page_count;
    for (unsigned scanned = 0; scanned < COLD_SCAN && rc == 0; scanned++) {
        int added = batch_add(&batch, index, &filter, now);
        if (added < 0)
            rc = added;
        bool out = batch_went_out(&batch, added);
        if (++index == dev->page_count) {
            index = 0;
            *wrapped = true;
            break;
        }
        if (out)
            break;
    }
    writeback->idle_hand = index;
    rc = batch_finish(&batch, rc);
    return rc < 0 ? rc : (int)batch.written;
}

/* ---- making room ----------------------------------------------------------------- */

/* Searches in a row by this thread's write that found nothing to write back. */
static __thread uint64_t make_room_fruitless;

/* store_tier's make_room: with writeback_when_full, write back cold pages (or wait for another
 * writer doing so) and return true to try again; false when nothing more can be done: the
 * backing store is full, writeback_limit is used up, a write failed, or searches over the
 * whole table found no page to write back. */
static bool make_room(struct uzram *dev, unsigned attempt)
{
    struct writeback *writeback = dev->writeback;
    if (!atomic_load_explicit(&writeback->when_full, memory_order_relaxed) || !device_backing(dev))
        return false;
    if (attempt == 0)
        make_room_fruitless = 0;
    /* Someone may be making room already: wait for that batch, then try. Passes hold the
     * lock a batch at a time and step aside for waiting writers; no one holds it at a low
     * CPU priority (the thread runs at the normal one), so the wait is short. */
    uint64_t seen = atomic_load(&writeback->room_made);
    atomic_fetch_add(&writeback->room_waiters, 1);
    pthread_mutex_lock(&writeback->lock);
    atomic_fetch_sub(&writeback->room_waiters, 1);
    int written = 1;
    if (atomic_load(&writeback->room_made) == seen) {
        written = write_back_coldest(dev, false);
        if (written < 0)
            written = after_full(dev, written, false);
        if (written > 0)
            atomic_fetch_add(&writeback->room_made, 1);
    }
    pthread_mutex_unlock(&writeback->lock);
    if (written < 0)
        return false; /* the backing store is full, writeback_limit used up, or a write failed */
    make_room_fruitless = written > 0 ? 0 : make_room_fruitless + 1;
    /* Freed objects leave holes in the pool's spans: now and then gather
     * them, so that whole pages come free. */
    if (attempt % 8 == 7)
        store_compact_pool(dev);
    /* A search that found nothing cold moved its hand on: go on until searches have looked
     * at the whole table (and sampled it again) without finding a page to write back. */
    return make_room_fruitless <= dev->page_count / COLD_SCAN + 2;
}

/* store_tier's room_to_promote: the device moves pages between the tiers itself
 * (writeback_when_full or writeback_idle), and the pool stays below the mark where the thread
 * starts writing back with it (half the headroom below mem_limit), so that bringing one page
 * back does not send another out. */
static bool room_to_promote(struct uzram *dev, unsigned size)
{
    struct writeback *writeback = dev->writeback;
    if (!atomic_load_explicit(&writeback->when_full, memory_order_relaxed) &&
        !atomic_load_explicit(&writeback->idle_seconds, memory_order_relaxed))
        return false;
    uint64_t limit = atomic_load(&dev->mem_limit);
    return limit == 0 || pool_mem_used(dev->pool) + size + headroom(limit) / 2 <= limit;
}

const struct store_tier writeback_tier = {
    .make_room = make_room,
    .room_to_promote = room_to_promote,
};

/* ---- the thread ------------------------------------------------------------------- */

/* Sleep until `ns` (monotonic) or until woken; under thread_lock. */
static void sleep_until(struct writeback *writeback, int64_t ns)
{
    struct timespec until = timespec_at(ns);
    if (!writeback->stop)
        pthread_cond_timedwait(&writeback->wake, &writeback->thread_lock, &until);
}

/* Pages a batch of `pages` costs in time at the rate: nanoseconds. */
static int64_t rate_cost(struct writeback *writeback, int pages)
{
    uint64_t rate = atomic_load(&writeback->rate);
    return rate && pages > 0 ? (int64_t)((uint64_t)pages * 1000000000ull / rate) : 0;
}

/* The pool is over the thread's mark: within half the headroom of
 * mem_limit (`half` 1; to go down to the full headroom, 2). */
static bool pool_over(struct uzram *dev, uint64_t half)
{
    uint64_t limit = atomic_load(&dev->mem_limit);
    return limit != 0 && pool_mem_used(dev->pool) + headroom(limit) * half / 2 > limit;
}

/* One round of the thread's work, as a pass (none during a reset). Returns the pages it
 * wrote or moved; *more: there is more to do at once. */
static int thread_round(struct uzram *dev, bool *filling, int64_t *idle_next, bool *more)
{
    struct writeback *writeback = dev->writeback;
    int written = 0;
    *more = false;
    if (!pass_begin(writeback, false))
        return 0;
    if (device_backing(dev) && atomic_load(&writeback->when_full) &&
        pool_over(dev, *filling ? 2 : 1)) {
        pthread_mutex_lock(&writeback->lock);
        written = write_back_coldest(dev, true);
        if (written < 0)
            written = after_full(dev, written, true);
        pthread_mutex_unlock(&writeback->lock);
        *filling = written > 0;
        *more = *filling;
    } else {
        *filling = false;
    }
    uint64_t idle = atomic_load(&writeback->idle_seconds);
    int64_t now = monotonic_ns();
    if (!*more && idle && device_backing(dev) && now >= *idle_next) {
        bool wrapped = false;
        pthread_mutex_lock(&writeback->lock);
        int n = write_back_idle(dev, idle, &wrapped);
        pthread_mutex_unlock(&writeback->lock);
        written += n > 0 ? n : 0;
        /* A whole turn over the table: rest a second before the next. */
        *idle_next = wrapped || n < 0 ? now + 1000000000 : 0;
        *more = *idle_next == 0;
    }
    if (backing_fragmented(dev, NEED_BACKGROUND)) {
        pthread_mutex_lock(&writeback->lock);
        int moved = compact_backing(dev, true);
        pthread_mutex_unlock(&writeback->lock);
        written += moved > 0 ? moved : 0;
    }
    pass_end(writeback);
    writeback_trim(dev, true, false);
    step_aside(writeback);
    return written;
}

/* The thread runs at the normal CPU priority, not SCHED_IDLE as the recompressor: it holds
 * the lock that writers making room wait for, and a thread at the lowest priority that a
 * busy CPU does not run would hold them up as long (priority inversion). Its work is mostly
 * I/O, and writeback_rate paces it. */
static void *writeback_thread(void *arg)
{
    struct uzram *dev = arg;
    struct writeback *writeback = dev->writeback;
    bool filling = false; /* bringing the pool down to the full headroom */
    int64_t idle_next = 0;
    pthread_mutex_lock(&writeback->thread_lock);
    while (!writeback->stop) {
        pthread_mutex_unlock(&writeback->thread_lock);
        bool more;
        int written = thread_round(dev, &filling, &idle_next, &more);
        pthread_mutex_lock(&writeback->thread_lock);
        int64_t pause = rate_cost(writeback, written);
        if (!more)
            pause = pause > 1000000000 ? pause : 1000000000 / 4;
        if (pause)
            sleep_until(writeback, monotonic_ns() + pause);
    }
    pthread_mutex_unlock(&writeback->thread_lock);
    return NULL;
}

/* Start the thread when a setting needs it, stop it when none does. */
static int thread_follow_settings(struct uzram *dev)
{
    struct writeback *writeback = dev->writeback;
    bool wanted = atomic_load(&writeback->when_full) || atomic_load(&writeback->idle_seconds);
#ifdef UZRAM_TEST_HOOKS
    wanted = wanted && !writeback->no_thread;
#endif
    int rc = 0;
    pthread_mutex_lock(&writeback->thread_lock);
    if (wanted && !writeback->running) {
        writeback->stop = false;
        rc = FAULT_POINT(FAULT_ALLOC)
                 ? EAGAIN
                 : background_start(&writeback->thread, writeback_thread, dev, "uzram-writeback");
        writeback->running = rc == 0;
        rc = -rc;
    } else if (!wanted && writeback->running) {
        writeback->stop = true;
        pthread_cond_signal(&writeback->wake);
        pthread_mutex_unlock(&writeback->thread_lock);
        pthread_join(writeback->thread, NULL);
        pthread_mutex_lock(&writeback->thread_lock);
        writeback->running = false;
    } else if (wanted) {
        pthread_cond_signal(&writeback->wake);
    }
    pthread_mutex_unlock(&writeback->thread_lock);
    return rc;
}

#ifdef UZRAM_TEST_HOOKS
void writeback_test_no_thread(struct uzram *dev)
{
    dev->writeback->no_thread = true;
}
#endif

/* ---- settings --------------------------------------------------------------------- */

/* The settings that start and stop the thread are changed one at a time,
 * under the settings lock (which the thread never takes). */
int uzram_set_writeback_when_full(struct uzram *dev, bool on)
{
    pthread_mutex_lock(&dev->settings_lock);
    bool was = atomic_exchange(&dev->writeback->when_full, on);
    int rc = thread_follow_settings(dev);
    if (rc < 0)
        atomic_store(&dev->writeback->when_full, was);
    pthread_mutex_unlock(&dev->settings_lock);
    return rc;
}

int uzram_set_writeback_idle(struct uzram *dev, uint64_t seconds)
{
    pthread_mutex_lock(&dev->settings_lock);
    uint64_t was = atomic_exchange(&dev->writeback->idle_seconds, seconds);
    int rc = thread_follow_settings(dev);
    if (rc < 0)
        atomic_store(&dev->writeback->idle_seconds, was);
    pthread_mutex_unlock(&dev->settings_lock);
    return rc;
}

int uzram_set_writeback_rate(struct uzram *dev, uint64_t pages_per_second)
{
    atomic_store(&dev->writeback->rate, pages_per_second);
    return 0;
}

int uzram_set_writeback_limit(struct uzram *dev, uint64_t pages)
{
    atomic_store(&dev->writeback->limit.pages, pages);
    return 0;
}

int uzram_set_writeback_limit_enable(struct uzram *dev, bool on)
{
    atomic_store(&dev->writeback->limit.enabled, on);
    return 0;
}

void writeback_settings(struct uzram *dev, struct writeback_settings *settings)
{
    *settings = (struct writeback_settings){
        .when_full = atomic_load(&dev->writeback->when_full),
        .idle_seconds = atomic_load(&dev->writeback->idle_seconds),
        .rate = atomic_load(&dev->writeback->rate),
        .limit = atomic_load(&dev->writeback->limit.pages),
        .limit_enable = atomic_load(&dev->writeback->limit.enabled),
    };
}

/* ---- the backing store: attach, detach -------------------------------------------- */

void writeback_trim(struct uzram *dev, bool wait, bool compact)
{
    struct writeback *writeback = dev->writeback;
    /* Compaction is a pass: none while a reset runs. */
    compact = compact && pass_begin(writeback, false);
    if (wait) {
        pthread_mutex_lock(&writeback->lock);
    } else if (pthread_mutex_trylock(&writeback->lock) != 0) {
        if (compact)
            pass_end(writeback);
        return;
    }
    if (compact && backing_fragmented(dev, NEED_ASKED))
        compact_backing(dev, true);
    struct backing *backing = device_backing(dev);
    if (backing) {
        backing_drop_dead_open(backing);
        backing_trim(backing);
    }
    pthread_mutex_unlock(&writeback->lock);
    if (compact)
        pass_end(writeback);
}

int uzram_set_backing_dev(struct uzram *dev, const char *path, uint64_t size)
{
    return uzram_set_backing_dev_flags(dev, path, size, 0);
}

int uzram_set_backing_dev_flags(struct uzram *dev, const char *path, uint64_t size, unsigned flags)
{
    struct writeback *writeback = dev->writeback;
    bool detach = !path || !*path || strcmp(path, "none") == 0;
    if (!detach && size == 0) {
        size = dev->disksize > BACKING_MAX_BYTES / 2 ? BACKING_MAX_BYTES : 2 * dev->disksize;
        /* a block device is used whole (size 0) */
    }
    struct backing *opened = NULL;
    struct batch_buffers buffers = {0};
    int rc = 0;
    /* Writeback's lock: no pass runs meanwhile; the settings lock: the
     * device stays empty meanwhile, as for the other settings. */
    pthread_mutex_lock(&writeback->lock);
    pthread_mutex_lock(&dev->settings_lock);
    if (counter_get(&dev->pages_stored) != 0) {
        rc = -EBUSY;
    } else if (!detach) {
        rc = batch_buffers_make(&buffers);
        if (rc == 0)
            rc = state_backing_open(dev, path, size, flags, &opened);
    }
    if (rc == 0) {
        struct backing *old = device_backing(dev);
        /* In the state before any page can go there (state_backing.c) */
        state_backing_record(dev, opened, flags);
        atomic_store_explicit(&dev->backing, opened, memory_order_release);
        backing_close_emptied(old);
        batch_buffers_free(&writeback->buffers);
        writeback->buffers = buffers; /* none to detach */
        buffers = (struct batch_buffers){0};
        writeback->cold_hand = writeback->idle_hand = 0;
        writeback->cold_valid = false;
    }
    pthread_mutex_unlock(&dev->settings_lock);
    pthread_mutex_unlock(&writeback->lock);
    batch_buffers_free(&buffers);
    return rc;
}

int writeback_adopted(struct uzram *dev)
{
    return device_backing(dev) ? batch_buffers_make(&dev->writeback->buffers) : 0;
}

int uzram_get_backing_dev(struct uzram *dev, char *buf, size_t size)
{
    pthread_mutex_lock(&dev->writeback->lock);
    struct backing *backing = device_backing(dev);
    const char *path = backing ? backing_path(backing) : "none";
    size_t length = strlen(path);
    int rc = length < size ? (int)length : -ERANGE;
    if (rc >= 0)
        memcpy(buf, path, length + 1);
    pthread_mutex_unlock(&dev->writeback->lock);
    return rc;
}

void writeback_reset(struct uzram *dev)
{
    struct writeback *writeback = dev->writeback;
    /* zram: "The writeback_limit count will reset whenever you reset zram" */
    atomic_store(&writeback->limit.pages, 0);
    writeback_trim(dev, false, false);
}

void writeback_destroy(struct uzram *dev)
{
    struct writeback *writeback = dev->writeback;
    atomic_store(&writeback->when_full, false);
    atomic_store(&writeback->idle_seconds, 0);
    thread_follow_settings(dev);
    backing_close(device_backing(dev));
    batch_buffers_free(&writeback->buffers);
    pthread_mutex_destroy(&writeback->lock);
    pthread_mutex_destroy(&writeback->thread_lock);
    pthread_cond_destroy(&writeback->wake);
    pthread_cond_destroy(&writeback->passes_changed);
    free(writeback);
}
