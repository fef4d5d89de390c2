/* test_state_locks.c - a lock word of a device's state file written behind its back (issue 39:
 * another process of the user, or damage) ends the wait on it with an error, not a hang: an
 * intent record's lock, a slot's lock bit, a dedup entry's MOVING bit and a bundle record's
 * lock set to held in the file make the reads and writes that need them fail with -EIO within
 * the deadline (a test hook shortens it to DEADLINE_MS), counted in state_lock_timeouts and
 * failed_reads / failed_writes, the pages keeping their data; cleared again, the same calls
 * work; and adoption lets go of every such word. A wait stopped for longer than the deadline
 * (SIGSTOP) does not count the stop. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/backoff.h"
#include "bundle/bundle_records.h"
#include "common/datagen.h"
#include "device/device.h"
#include "state/state.h"
#include "test_util.h"
#include "uzram.h"

#define PAGE 4096u
#define PAGES 256u
#define DEADLINE_MS 300u

static int test_memfd(void)
{
    int fd = memfd_create("uzram-test-state", MFD_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

static double now_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + now.tv_nsec / 1e9;
}

static void page_of(uint64_t index, uint32_t gen, unsigned char *page)
{
    datagen_page(gen, DATAGEN_TEXT, index, page);
}

static struct uzram *make_device(int fd, bool dedup)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = PAGES * PAGE;
    config.use_dedup = dedup;
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    return dev;
}

static void write_page(struct uzram *dev, uint64_t index, uint32_t gen)
{
    unsigned char page[PAGE];
    page_of(index, gen, page);
    assert_int_equal(uzram_write(dev, index * PAGE, page, PAGE), 0);
}

static void assert_page(struct uzram *dev, uint64_t index, uint32_t gen)
{
    unsigned char want[PAGE], got[PAGE];
    page_of(index, gen, want);
    assert_int_equal(uzram_read(dev, index * PAGE, got, PAGE), 0);
    assert_memory_equal(got, want, PAGE);
}

static struct state_header header_of(int fd)
{
    struct state_header header;
    assert_int_equal(pread(fd, &header, sizeof header, 0), (ssize_t)sizeof header);
    return header;
}

/* The 32-bit word at `offset` of the file set to `value` behind the device's back (the file is
 * its mapping's memory: the device sees it at once), or or'ed with it. */
static void poke(int fd, uint64_t offset, uint32_t value, bool or)
{
    uint32_t word = 0;
    if (or)
        assert_int_equal(pread(fd, &word, sizeof word, (off_t)offset), (ssize_t)sizeof word);
    word = or ? word | value : value;
    assert_int_equal(pwrite(fd, &word, sizeof word, (off_t)offset), (ssize_t)sizeof word);
}

static uint64_t slot_word(int fd, uint64_t index, unsigned at)
{
    uint64_t word = 0;
    unsigned size = at == 8 ? 8 : 4;
    assert_int_equal(pread(fd, &word, size, (off_t)(header_of(fd).table_offset + index * 16 + at)),
                     (ssize_t)size);
    return word;
}

/* Run `call` (a read or write) and assert it failed with -EIO within the deadline and a few
 * seconds of slack: it must not hang. */
#define ASSERT_TIMES_OUT(call)                                                                     \
    do {                                                                                           \
        double started_ = now_seconds();                                                           \
        assert_int_equal((call), -EIO);                                                            \
        double took_ = now_seconds() - started_;                                                   \
        assert_true(took_ >= DEADLINE_MS / 1000.0 && took_ < DEADLINE_MS / 1000.0 + 5);            \
    } while (0)

static int setup(void **unused)
{
    (void)unused;
    lock_wait_test_deadline(DEADLINE_MS);
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    lock_wait_test_deadline(0);
    return 0;
}

/* The case: 1 in an intent record's lock word (8 KiB on, 32 bytes apart). */
static void test_intent_lock_held(void **unused)
{
    (void)unused;
    int fd = test_memfd();
    struct uzram *dev = make_device(fd, false);
    write_page(dev, 5, 1);
    poke(fd, STATE_INTENTS_OFFSET + 5 * sizeof(struct state_intent), 1, false);
    unsigned char page[PAGE];
    page_of(5, 2, page);
    ASSERT_TIMES_OUT(uzram_write(dev, 5 * PAGE, page, PAGE));
    ASSERT_TIMES_OUT(uzram_discard(dev, 5 * PAGE, PAGE));
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.state_lock_timeouts, 2);
    assert_int_equal(stats.failed_writes, 1);
    assert_int_equal(stats.pages_stored, 1);
    assert_page(dev, 5, 1); /* kept */
    write_page(dev, 6, 3);  /* another record: works */
    assert_page(dev, 6, 3);
    /* held for good in every record: a whole-page write of any page fails, none hangs */
    for (unsigned i = 0; i < STATE_INTENTS; i++)
        poke(fd, STATE_INTENTS_OFFSET + i * sizeof(struct state_intent), 1, false);
    ASSERT_TIMES_OUT(uzram_write(dev, 9 * PAGE, page, PAGE));
    uzram_destroy(dev);
    /* adoption lets go of them */
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    write_page(dev, 5, 2);
    assert_page(dev, 5, 2);
    assert_page(dev, 6, 3);
    assert_int_equal(test_stats(dev).state_lock_timeouts, 3); /* an event counter: kept */
    uzram_destroy(dev);
    close(fd);
}

/* A slot's lock bit (bit 0 of its info word in the page table). */
static void test_slot_lock_held(void **unused)
{
    (void)unused;
    int fd = test_memfd();
    struct uzram *dev = make_device(fd, false);
    write_page(dev, 7, 1);
    uint64_t info_at = header_of(fd).table_offset + 7 * 16;
    poke(fd, info_at, 1, true);
    unsigned char page[PAGE];
    page_of(7, 2, page);
    ASSERT_TIMES_OUT(uzram_read(dev, 7 * PAGE, page, PAGE));
    ASSERT_TIMES_OUT(uzram_write(dev, 7 * PAGE, page, PAGE));
    ASSERT_TIMES_OUT(uzram_write(dev, 7 * PAGE + 512, page, 512)); /* a partial write */
    ASSERT_TIMES_OUT(uzram_discard(dev, 7 * PAGE, PAGE));
    uint64_t run;
    unsigned flags;
    ASSERT_TIMES_OUT(uzram_extent(dev, 7 * PAGE, PAGE, &run, &flags));
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.state_lock_timeouts, 5);
    assert_int_equal(stats.failed_reads, 1);
    assert_int_equal(stats.failed_writes, 2);
    write_page(dev, 8, 3);
    assert_page(dev, 8, 3);
    /* let go: the page is as it was */
    poke(fd, info_at, (uint32_t)slot_word(fd, 7, 0) & ~1u, false);
    assert_page(dev, 7, 1);
    /* held again, then taken over: adoption unlocks it */
    poke(fd, info_at, 1, true);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    assert_page(dev, 7, 1);
    assert_page(dev, 8, 3);
    uzram_destroy(dev);
    close(fd);
}

/* A dedup entry's MOVING bit (bit 31 of its state word, in the index's first chunk). */
static void test_dedup_entry_held(void **unused)
{
    (void)unused;
    int fd = test_memfd();
    struct uzram *dev = make_device(fd, true);
    write_page(dev, 3, 1);
    uint64_t id = slot_word(fd, 3, 8);
    uint64_t state_at = header_of(fd).dedup_offset + 4096 + id * 20 + 8;
    poke(fd, state_at, 1u << 31, true);
    unsigned char page[PAGE];
    ASSERT_TIMES_OUT(uzram_read(dev, 3 * PAGE, page, PAGE));
    /* a write over it stores the new page; the old entry's reference is left where it is
     * (memory, counted, not data) */
    write_page(dev, 3, 2);
    assert_page(dev, 3, 2);
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.state_lock_timeouts, 2);
    assert_int_equal(stats.failed_reads, 1);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    assert_page(dev, 3, 2);
    assert_int_equal(test_stats(dev).dedup_entries, 1); /* the lost one is gone */
    uzram_destroy(dev);
    close(fd);
}

/* A bundle record's lock (its first word). */
static void test_bundle_lock_held(void **unused)
{
    (void)unused;
    int fd = test_memfd();
    struct uzram *dev = make_device(fd, false);
    for (uint64_t i = 0; i < 16; i++)
        write_page(dev, i, 1);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 3), 0);
    assert_int_equal(uzram_set_recompress_group(dev, 16), 0);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), 0);
    assert_int_equal(test_stats(dev).bundled_pages, 16);
    uzram_destroy(dev); /* a reader's cache of the bundle goes with the process's serials */
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    uint64_t record = slot_word(fd, 0, 8) >> 4;
    uint64_t lock_at =
        header_of(fd).bundle_offset + bundle_record_offset(PAGES, record); /* its first word */
    poke(fd, lock_at, 1, false);
    unsigned char page[PAGE];
    ASSERT_TIMES_OUT(uzram_read(dev, 0, page, PAGE));
    assert_int_equal(test_stats(dev).state_lock_timeouts, 1);
    poke(fd, lock_at, 0, false);
    for (uint64_t i = 0; i < 16; i++)
        assert_page(dev, i, 1);
    uzram_destroy(dev);
    close(fd);
}

/* A process stopped while it waits (SIGSTOP, a debugger) has not waited meanwhile: a gap
 * between two readings of the clock counts LOCK_WAIT_STEP_NS at most; the wait then still
 * ends once the rest of the deadline went by while it ran. */
static void test_wait_after_a_stop(void **unused)
{
    (void)unused;
    const unsigned deadline_ms = 2 * LOCK_WAIT_STEP_NS / 1000000;
    lock_wait_test_deadline(deadline_ms);
    struct lock_wait wait = {.bounded = true};
    while (wait.last == 0)
        assert_true(lock_wait(&wait));    /* the first reading of the clock */
    usleep(3 * LOCK_WAIT_STEP_NS / 1000); /* "stopped" three steps, 1.5 deadlines long */
    assert_true(lock_wait_in_time(&wait));
    assert_true(wait.waited <= LOCK_WAIT_STEP_NS);
    double started = now_seconds();
    while (lock_wait(&wait))
        ;
    double took = now_seconds() - started;
    lock_wait_test_deadline(DEADLINE_MS);
    /* the rest: the deadline less the step the stop counted */
    assert_true(took >= (deadline_ms - LOCK_WAIT_STEP_NS / 1e6) / 1000.0 - 0.05 &&
                took < deadline_ms / 1000.0 + 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_after_a_stop), cmocka_unit_test(test_intent_lock_held),
        cmocka_unit_test(test_slot_lock_held),    cmocka_unit_test(test_dedup_entry_held),
        cmocka_unit_test(test_bundle_lock_held),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
