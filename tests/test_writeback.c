/* test_writeback.c - unit tests of writeback: the backing store attached and detached, zram's
 * writeback modes and limit, reads of written-back pages, dedup, space given back, writeback
 * when full, and pages read, written and discarded while writeback runs (concurrent). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/store.h" /* store_test_advance_clock */
#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define MIB (1024u * 1024u)

/* ---- helpers ---------------------------------------------------------------- */

/* A folder of this test's own for backing files (several test runs may run
 * at once), removed at the end. */
static char folder[256];

static int make_folder(void **state)
{
    (void)state;
    return test_make_folder(folder, sizeof folder, "writeback");
}

static int remove_folder(void **state)
{
    (void)state;
    return rmdir(folder);
}

static void backing_name(char *path, size_t size, const char *name)
{
    snprintf(path, size, "%s/%s", folder, name);
}

/* Bytes the file system holds for `path` (its allocated blocks). */
static uint64_t allocated(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_blocks * 512;
}

struct disk {
    struct uzram *dev;
    uint64_t pages;
    unsigned char *model;
    char path[300];
};

/* A device of `pages` pages with a backing file `name`. */
static void disk_open(struct disk *disk, uint64_t pages, const char *algorithm, bool dedup,
                      const char *name)
{
    disk->pages = pages;
    disk->dev = test_device(pages * PAGE, algorithm, dedup);
    disk->model = calloc(pages, PAGE);
    assert_non_null(disk->model);
    backing_name(disk->path, sizeof disk->path, name);
    assert_int_equal(uzram_set_backing_dev(disk->dev, disk->path, 0), 0);
}

static void disk_close(struct disk *disk)
{
    uzram_destroy(disk->dev);
    free(disk->model);
    assert_int_equal(unlink(disk->path), 0);
}

static void disk_write(struct disk *disk, uint64_t index, enum datagen_kind kind, uint64_t seed)
{
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed * 7919 + index);
    unsigned char *page = disk->model + index * PAGE;
    datagen_fill(&rng, kind, page, PAGE);
    assert_int_equal(uzram_write(disk->dev, index * PAGE, page, PAGE), 0);
}

static void disk_discard(struct disk *disk, uint64_t index, uint64_t count)
{
    memset(disk->model + index * PAGE, 0, count * PAGE);
    assert_int_equal(uzram_discard(disk->dev, index * PAGE, count * PAGE), 0);
}

/* Every page reads back as the model says, in one request and page by page. */
static void disk_check(struct disk *disk)
{
    unsigned char *all = malloc(disk->pages * PAGE);
    assert_non_null(all);
    assert_int_equal(uzram_read(disk->dev, 0, all, disk->pages * PAGE), 0);
    assert_memory_equal(all, disk->model, disk->pages * PAGE);
    unsigned char part[1024];
    for (uint64_t index = 0; index < disk->pages; index += 7) {
        assert_int_equal(uzram_read(disk->dev, index * PAGE + 1536, part, sizeof part), 0);
        assert_memory_equal(part, disk->model + index * PAGE + 1536, sizeof part);
    }
    free(all);
}

static const enum datagen_kind mix[] = {DATAGEN_TEXT, DATAGEN_HALF, DATAGEN_RANDOM,
                                        DATAGEN_SAME, DATAGEN_ZERO, DATAGEN_TEXT};
#define MIX (sizeof mix / sizeof mix[0])

/* The counters of a device whose written-back pages are all shown by
 * `written` (pages in memory before, none after), add up. */
static void check_all_written_back(struct uzram_stats *before, struct uzram_stats *after,
                                   uint64_t written)
{
    assert_int_equal(after->pages_stored, before->pages_stored);
    assert_int_equal(after->same_pages, before->same_pages);
    assert_int_equal(after->huge_pages, before->huge_pages); /* raw wherever they are */
    assert_int_equal(after->compr_data_size, 0);
    assert_int_equal(after->bd_objects, written);
    assert_int_equal(after->bd_data_size, before->compr_data_size);
    assert_int_equal(after->bd_writes, before->bd_writes + written);
    /* packed: the blocks in use hold the objects, and at most one block of
     * tail */
    uint64_t blocks = (after->bd_data_size + PAGE - 1) / PAGE;
    assert_true(after->bd_count >= blocks && after->bd_count <= blocks + 1);
}

/* ---- tests -------------------------------------------------------------------- */

static void test_writeback_all_and_back(void **state)
{
    (void)state;
    struct disk disk;
    disk_open(&disk, 512, "lz4", false, "all");
    uint64_t in_memory = 0;
    for (uint64_t i = 0; i < disk.pages; i++) {
        enum datagen_kind kind = mix[i % MIX];
        disk_write(&disk, i, kind, 1);
        in_memory += kind != DATAGEN_SAME && kind != DATAGEN_ZERO;
    }
    struct uzram_stats before = test_stats(disk.dev);
    uint64_t written = 0;
    assert_int_equal(uzram_writeback(disk.dev, 0, 0, UINT64_MAX, &written), 0);
    assert_int_equal(written, in_memory);
    assert_int_equal(uzram_compact(disk.dev, NULL), 0);
    struct uzram_stats after = test_stats(disk.dev);
    check_all_written_back(&before, &after, written);
    assert_int_equal(after.mem_used_total, 0);
    /* the file holds the blocks in use, and no more */
    uint64_t file = allocated(disk.path);
    assert_true(file >= after.bd_count * PAGE && file <= after.bd_count * PAGE + 64 * 1024);

    disk_check(&disk);
    struct uzram_stats read = test_stats(disk.dev);
    assert_true(read.bd_reads >= written + written / 8);
    assert_int_equal(read.failed_reads, 0);
    /* nothing is left to write back */
    assert_int_equal(uzram_writeback(disk.dev, 0, 0, UINT64_MAX, &written), 0);
    assert_int_equal(written, 0);

    /* overwrite a third, discard a third (also partly), keep a third */
    for (uint64_t i = 0; i < disk.pages; i += 3) {
        disk_write(&disk, i, mix[(i + 1) % MIX], 2);
        disk_discard(&disk, i + 1, 1);
    }
    unsigned char zeros[512] = {0};
    memset(disk.model + 2 * PAGE + 512, 0, sizeof zeros);
    assert_int_equal(uzram_write(disk.dev, 2 * PAGE + 512, zeros, sizeof zeros), 0);
    disk_check(&disk);

    /* everything away: the store and the file are empty again */
    disk_discard(&disk, 0, disk.pages);
    assert_int_equal(uzram_compact(disk.dev, NULL), 0);
    struct uzram_stats empty = test_stats(disk.dev);
    assert_int_equal(empty.pages_stored, 0);
    assert_int_equal(empty.bd_objects, 0);
    assert_int_equal(empty.bd_data_size, 0);
    assert_int_equal(empty.bd_count, 0);
    assert_int_equal(empty.mem_used_total, 0);
    assert_int_equal(empty.huge_pages, 0);
    assert_int_equal(allocated(disk.path), 0);
    disk_close(&disk);
}

static void test_writeback_modes(void **state)
{
    (void)state;
    struct disk disk;
    disk_open(&disk, 64, "lz4", false, "modes");
    /* pages 0..15 text, 16..31 random (huge), 32..39 same-filled */
    for (uint64_t i = 0; i < 40; i++)
        disk_write(&disk, i, i < 16 ? DATAGEN_TEXT : i < 32 ? DATAGEN_RANDOM : DATAGEN_SAME, 3);
    uint64_t written = 0;

    /* nothing is idle yet */
    assert_int_equal(uzram_writeback(disk.dev, UZRAM_WRITEBACK_IDLE, 0, UINT64_MAX, &written), 0);
    assert_int_equal(written, 0);
    /* no page is marked incompressible */
    assert_int_equal(
        uzram_writeback(disk.dev, UZRAM_WRITEBACK_INCOMPRESSIBLE, 0, UINT64_MAX, &written), 0);
    assert_int_equal(written, 0);

    /* mark all idle, then read pages 8..23: huge_idle takes 24..31 */
    assert_int_equal(uzram_mark_idle(disk.dev, 0, NULL), 0);
    unsigned char buf[16 * PAGE];
    assert_int_equal(uzram_read(disk.dev, 8 * PAGE, buf, sizeof buf), 0);
    assert_int_equal(uzram_writeback(disk.dev, UZRAM_WRITEBACK_IDLE | UZRAM_WRITEBACK_HUGE, 0,
                                     UINT64_MAX, &written),
                     0);
    assert_int_equal(written, 8);
    /* huge takes the other raw pages, 16..23 */
    assert_int_equal(uzram_writeback(disk.dev, UZRAM_WRITEBACK_HUGE, 0, UINT64_MAX, &written), 0);
    assert_int_equal(written, 8);
    struct uzram_stats s = test_stats(disk.dev);
    assert_int_equal(s.bd_data_size, 16 * PAGE);
    assert_int_equal(s.huge_pages, 16);
    /* idle: 0..7 (8..15 were read; same-filled pages stay) */
    assert_int_equal(uzram_writeback(disk.dev, UZRAM_WRITEBACK_IDLE, 0, UINT64_MAX, &written), 0);
    assert_int_equal(written, 8);
    /* a page, and a range (zram's page_index, page_indexes) */
    assert_int_equal(uzram_writeback(disk.dev, 0, 9, 9, &written), 0);
    assert_int_equal(written, 1);
    assert_int_equal(uzram_writeback(disk.dev, 0, 12, 40, &written), 0);
    assert_int_equal(written, 4);
    s = test_stats(disk.dev);
    assert_int_equal(s.bd_objects, 29);
    assert_int_equal(s.same_pages, 8);
    /* pages written back keep their idle marks; a read clears one */
    assert_true(s.idle_pages >= 8);
    disk_check(&disk);
    assert_int_equal(test_stats(disk.dev).idle_pages, 0);

    /* bad arguments */
    assert_int_equal(uzram_writeback(disk.dev, 8, 0, UINT64_MAX, NULL), -EINVAL);
    assert_int_equal(uzram_writeback(disk.dev, 0, 64, UINT64_MAX, NULL), -EINVAL);
    assert_int_equal(uzram_writeback(disk.dev, 0, 10, 9, NULL), -EINVAL);
    disk_close(&disk);
}

static void test_writeback_limit(void **state)
{
    (void)state;
    struct disk disk;
    disk_open(&disk, 64, "zstd", false, "limit");
    for (uint64_t i = 0; i < 32; i++)
        disk_write(&disk, i, DATAGEN_HALF, 4);
    uint64_t written = 0;
    /* zram: enabled with no budget, nothing goes (and says -EIO) */
    assert_int_equal(uzram_set_writeback_limit_enable(disk.dev, true), 0);
    assert_int_equal(uzram_writeback(disk.dev, 0, 0, UINT64_MAX, &written), -EIO);
    assert_int_equal(written, 0);
    assert_int_equal(uzram_set_writeback_limit(disk.dev, 5), 0);
    assert_int_equal(uzram_writeback(disk.dev, 0, 0, UINT64_MAX, &written), -EIO);
    assert_int_equal(written, 5);
    struct uzram_stats s = test_stats(disk.dev);
    assert_int_equal(s.writeback_limit, 0);
    assert_int_equal(s.writeback_limit_enable, 1);
    assert_int_equal(s.bd_writes, 5);
    assert_int_equal(uzram_set_writeback_limit(disk.dev, 100), 0);
    assert_int_equal(uzram_writeback(disk.dev, 0, 0, UINT64_MAX, &written), 0);
    assert_int_equal(written, 27);
    assert_int_equal(test_stats(disk.dev).writeback_limit, 73);
    /* off: no limit; a reset sets the limit to 0 (zram) */
    assert_int_equal(uzram_set_writeback_limit_enable(disk.dev, false), 0);
    assert_int_equal(uzram_reset(disk.dev), 0);
    s = test_stats(disk.dev);
    assert_int_equal(s.writeback_limit, 0);
    assert_int_equal(s.bd_writes, 0);
    assert_int_equal(s.bd_objects, 0);
    assert_int_equal(s.bd_count, 0);
    memset(disk.model, 0, disk.pages * PAGE);
    disk_check(&disk);
    disk_close(&disk);
}

/* A deduplicated object is written once and stays shared; dedup still
 * finds it on the store. */
static void test_writeback_dedup(void **state)
{
    (void)state;
    struct disk disk;
    disk_open(&disk, 64, "lz4", true, "dedup");
    disk_write(&disk, 0, DATAGEN_TEXT, 5);
    for (uint64_t i = 1; i < 10; i++) {
        memcpy(disk.model + i * PAGE, disk.model, PAGE);
        assert_int_equal(uzram_write(disk.dev, i * PAGE, disk.model, PAGE), 0);
    }
    for (uint64_t i = 10; i < 15; i++)
        disk_write(&disk, i, DATAGEN_HALF, 6);
    struct uzram_stats before = test_stats(disk.dev);
    uint64_t written = 0;
    assert_int_equal(uzram_writeback(disk.dev, 0, 0, UINT64_MAX, &written), 0);
    assert_int_equal(written, 6);
    struct uzram_stats after = test_stats(disk.dev);
    assert_int_equal(after.dup_data_size, before.dup_data_size);
    assert_int_equal(after.compr_data_size, 0);
    assert_int_equal(after.bd_objects, 6);
    disk_check(&disk);
    /* the same page again: dedup compares it with the copy on the store */
    uint64_t reads = test_stats(disk.dev).bd_reads;
    memcpy(disk.model + 20 * PAGE, disk.model, PAGE);
    assert_int_equal(uzram_write(disk.dev, 20 * PAGE, disk.model, PAGE), 0);
    struct uzram_stats again = test_stats(disk.dev);
    assert_true(again.bd_reads > reads);
    assert_int_equal(again.bd_objects, 6);
    assert_int_equal(again.compr_data_size, 0);
    assert_true(again.dup_data_size > after.dup_data_size);
    disk_check(&disk);
    /* drop all but one reference: the shared object stays until the last */
    disk_discard(&disk, 1, 9);
    disk_discard(&disk, 20, 1);
    assert_int_equal(test_stats(disk.dev).bd_objects, 6);
    disk_check(&disk);
    disk_discard(&disk, 0, 1);
    assert_int_equal(test_stats(disk.dev).bd_objects, 5);
    disk_discard(&disk, 0, disk.pages);
    assert_int_equal(uzram_compact(disk.dev, NULL), 0);
    struct uzram_stats empty = test_stats(disk.dev);
    assert_int_equal(empty.bd_objects + empty.bd_count + empty.bd_data_size, 0);
    assert_int_equal(empty.dup_data_size, 0);
    assert_int_equal(allocated(disk.path), 0);
    disk_close(&disk);
}

/* Past mem_limit, writes make room by writing back the coldest pages. */
static void test_writeback_when_full(void **state)
{
    (void)state;
    for (int dedup = 0; dedup <= 1; dedup++) {
        struct disk disk;
        disk_open(&disk, 2048, "lz4", dedup, dedup ? "full-dedup" : "full");
        const uint64_t limit = 256 * 1024;
        assert_int_equal(uzram_set_mem_limit(disk.dev, limit), 0);
        /* without it, the pool fills and writes fail */
        int rc = 0;
        uint64_t i;
        for (i = 0; i < disk.pages && rc == 0; i++) {
            memset(disk.model + i * PAGE, 0, PAGE);
            struct datagen_rng rng;
            datagen_rng_seed(&rng, i);
            datagen_fill(&rng, DATAGEN_TEXT, disk.model + i * PAGE, PAGE);
            rc = uzram_write(disk.dev, i * PAGE, disk.model + i * PAGE, PAGE);
        }
        assert_int_equal(rc, -ENOSPC);
        memset(disk.model + (i - 1) * PAGE, 0, PAGE);
        assert_int_equal(uzram_set_writeback_when_full(disk.dev, true), 0);
        for (i = 0; i < disk.pages; i++)
            disk_write(&disk, i, i % 5 == 4 ? DATAGEN_RANDOM : DATAGEN_TEXT, 7 + i % 3);
        struct uzram_stats s = test_stats(disk.dev);
        assert_true(s.mem_used_total <= limit);
        assert_true(s.bd_objects > 0);
        assert_int_equal(s.pages_stored, disk.pages);
        disk_check(&disk);
        /* and written back pages come back over, partly too */
        for (i = 0; i < disk.pages; i += 2)
            disk_write(&disk, i, DATAGEN_HALF, 8);
        unsigned char sector[512];
        memset(sector, 0x41, sizeof sector);
        for (i = 1; i < disk.pages; i += 64) {
            memcpy(disk.model + i * PAGE + 1024, sector, sizeof sector);
            assert_int_equal(uzram_write(disk.dev, i * PAGE + 1024, sector, sizeof sector), 0);
        }
        disk_check(&disk);
        assert_int_equal(test_stats(disk.dev).failed_writes, 1);
        /* the thread may hold blocks of a batch for a moment: stop it */
        assert_int_equal(uzram_set_writeback_when_full(disk.dev, false), 0);
        disk_discard(&disk, 0, disk.pages);
        assert_int_equal(uzram_compact(disk.dev, NULL), 0);
        assert_int_equal(test_stats(disk.dev).bd_count, 0);
        assert_int_equal(allocated(disk.path), 0);
        disk_close(&disk);
    }
}

/* The same under a pool reserve (serve --swap): at mem_limit the reserve has no window to give,
 * and the write must make room by writing back rather than fail (-ENOMEM reached the kernel as
 * swap write errors in tests/vm/swap.sh --writeback). */
static void test_writeback_when_full_reserve(void **state)
{
    (void)state;
    struct disk disk;
    disk_open(&disk, 4096, "lz4", false, "full-reserve");
    const uint64_t limit = 2 * 1024 * 1024;
    assert_int_equal(uzram_set_mem_limit(disk.dev, limit), 0);
    assert_int_equal(uzram_set_mem_reserve(disk.dev, 512 * 1024), 0);
    assert_int_equal(uzram_set_writeback_when_full(disk.dev, true), 0);
    for (uint64_t i = 0; i < disk.pages; i++)
        disk_write(&disk, i, i % 5 == 4 ? DATAGEN_RANDOM : DATAGEN_TEXT, 3 + i % 3);
    struct uzram_stats s = test_stats(disk.dev);
    assert_true(s.mem_used_total <= limit);
    assert_true(s.bd_objects > 0);
    assert_int_equal(s.pages_stored, disk.pages);
    assert_int_equal(s.failed_writes, 0);
    disk_check(&disk);
    assert_int_equal(uzram_set_writeback_when_full(disk.dev, false), 0);
    assert_int_equal(uzram_set_mem_reserve(disk.dev, 0), 0);
    disk_close(&disk);
}

/* Without a store, when it is full, and with writeback_limit used up, a
 * write past mem_limit fails as before: the wait is bounded. */
static void test_writeback_when_full_bounded(void **state)
{
    (void)state;
    struct uzram *dev = test_device(4 * MIB, "lz4", false);
    assert_int_equal(uzram_set_mem_limit(dev, 64 * 1024), 0);
    assert_int_equal(uzram_set_writeback_when_full(dev, true), 0);
    unsigned char page[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 9);
    int rc = 0;
    for (uint64_t i = 0; i < 1024 && rc == 0; i++) {
        datagen_fill(&rng, DATAGEN_RANDOM, page, PAGE);
        rc = uzram_write(dev, i * PAGE, page, PAGE);
    }
    assert_int_equal(rc, -ENOSPC);

    /* a store of 8 blocks fills too */
    char path[300];
    backing_name(path, sizeof path, "small");
    assert_int_equal(uzram_reset(dev), 0);
    assert_int_equal(uzram_set_backing_dev(dev, path, 8 * PAGE), 0);
    rc = 0;
    uint64_t i;
    for (i = 0; i < 1024 && rc == 0; i++) {
        datagen_fill(&rng, DATAGEN_RANDOM, page, PAGE);
        rc = uzram_write(dev, i * PAGE, page, PAGE);
    }
    assert_int_equal(rc, -ENOSPC);
    struct uzram_stats s = test_stats(dev);
    assert_true(s.bd_nospace > 0);
    assert_true(s.bd_objects >= 7 && s.bd_count <= 8);
    /* and writeback_limit */
    assert_int_equal(uzram_reset(dev), 0);
    assert_int_equal(uzram_set_writeback_limit_enable(dev, true), 0);
    assert_int_equal(uzram_set_writeback_limit(dev, 3), 0);
    rc = 0;
    for (i = 0; i < 1024 && rc == 0; i++) {
        datagen_fill(&rng, DATAGEN_RANDOM, page, PAGE);
        rc = uzram_write(dev, i * PAGE, page, PAGE);
    }
    assert_int_equal(rc, -ENOSPC);
    assert_int_equal(test_stats(dev).bd_writes, 3);
    uzram_destroy(dev);
    assert_int_equal(unlink(path), 0);
}

static void test_backing_dev_settings(void **state)
{
    (void)state;
    struct uzram *dev = test_device(4 * MIB, "lz4", false);
    char path[300], got[400];
    assert_int_equal(uzram_get_backing_dev(dev, got, sizeof got), 4);
    assert_string_equal(got, "none");
    assert_int_equal(uzram_writeback(dev, 0, 0, UINT64_MAX, NULL), -ENODEV);
    backing_name(path, sizeof path, "no/such/folder");
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), -ENOENT);
    assert_int_equal(uzram_set_backing_dev(dev, folder, 0), -EINVAL);
    assert_int_equal(uzram_set_backing_dev(dev, "/dev/null", 0), -EINVAL);
    backing_name(path, sizeof path, "settings");
    assert_int_equal(uzram_set_backing_dev(dev, path, 4096), -EINVAL);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    assert_int_equal(uzram_get_backing_dev(dev, got, sizeof got), (int)strlen(path));
    assert_string_equal(got, path);
    assert_int_equal(uzram_get_backing_dev(dev, got, 4), -ERANGE);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 8 * MIB); /* twice the disk, sparse */
    assert_int_equal(st.st_blocks, 0);
    /* one user at a time */
    struct uzram *other = test_device(4 * MIB, "lz4", false);
    assert_int_equal(uzram_set_backing_dev(other, path, 0), -EBUSY);
    uzram_destroy(other);
    /* only while empty */
    unsigned char page[PAGE];
    memset(page, 'x', sizeof page);
    page[100] = 'y';
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    assert_int_equal(uzram_set_backing_dev(dev, "none", 0), -EBUSY);
    assert_int_equal(uzram_discard(dev, 0, PAGE), 0);
    assert_int_equal(uzram_set_backing_dev(dev, "none", 0), 0);
    assert_int_equal(uzram_get_backing_dev(dev, got, sizeof got), 4);
    /* detached, the file is empty again: the next store takes it as it is */
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(uzram_set_backing_dev(dev, path, 64 * 1024), 0);
    assert_int_equal(uzram_set_backing_dev(dev, "none", 0), 0);
    /* a file that holds data is emptied only when the caller says so */
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, page, PAGE, 0), PAGE);
    close(fd);
    assert_int_equal(uzram_set_backing_dev(dev, path, 64 * 1024), -EEXIST);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, PAGE);
    assert_int_equal(uzram_set_backing_dev_flags(dev, path, 64 * 1024, UZRAM_BACKING_OVERWRITE), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 64 * 1024);
    assert_int_equal(st.st_blocks, 0);
    uzram_destroy(dev);
    assert_int_equal(unlink(path), 0);
}

/* The background thread: pages unused for --writeback-idle seconds go. */
static void test_writeback_idle_thread(void **state)
{
    (void)state;
    struct disk disk;
    disk_open(&disk, 256, "lz4", false, "idle-thread");
    for (uint64_t i = 0; i < disk.pages; i++)
        disk_write(&disk, i, DATAGEN_TEXT, 10);
    assert_int_equal(uzram_set_writeback_idle(disk.dev, 60), 0);
    store_test_advance_clock(disk.dev, 61);
    /* touch the last 56 pages: they are young again */
    unsigned char buf[56 * PAGE];
    assert_int_equal(uzram_read(disk.dev, 200 * PAGE, buf, sizeof buf), 0);
    for (int i = 0; i < 500 && test_stats(disk.dev).bd_objects < 200; i++)
        usleep(10000);
    struct uzram_stats s = test_stats(disk.dev);
    assert_int_equal(s.bd_objects, 200);
    assert_int_equal(uzram_set_writeback_idle(disk.dev, 0), 0);
    disk_check(&disk);
    disk_close(&disk);
}

/* zram's attributes, and the ones beyond zram, by name. */
static void attr_is(struct uzram *dev, const char *name, const char *expected)
{
    char buf[512];
    assert_true(uzram_attr_get(dev, name, buf, sizeof buf) > 0);
    assert_string_equal(buf, expected);
}

static void test_writeback_attributes(void **state)
{
    (void)state;
    struct uzram *dev = test_device(64 * PAGE, "lz4", false);
    char path[300], line[400];
    attr_is(dev, "backing_dev", "none\n");
    attr_is(dev, "bd_stat", "0 0 0\n");
    attr_is(dev, "writeback_limit", "0\n");
    attr_is(dev, "writeback_limit_enable", "0\n");
    attr_is(dev, "writeback_when_full", "0\n");
    attr_is(dev, "writeback_idle", "0\n");
    attr_is(dev, "writeback_rate", "4096\n");
    assert_int_equal(uzram_attr_set(dev, "writeback", "idle"), -ENODEV);
    /* relative paths would be the server's working folder's: refused */
    assert_int_equal(uzram_attr_set(dev, "backing_dev", "store"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "backing_dev", "nonesuch"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "backing_dev", "none\n"), 0);
    backing_name(path, sizeof path, "attributes");
    snprintf(line, sizeof line, "%s\n", path);
    assert_int_equal(uzram_attr_set(dev, "backing_dev", line), 0);
    attr_is(dev, "backing_dev", line);

    struct datagen_rng rng;
    datagen_rng_seed(&rng, 11);
    unsigned char page[PAGE];
    for (uint64_t i = 0; i < 32; i++) {
        datagen_fill(&rng, i < 8 ? DATAGEN_RANDOM : DATAGEN_TEXT, page, PAGE);
        assert_int_equal(uzram_write(dev, i * PAGE, page, PAGE), 0);
    }
    assert_int_equal(uzram_attr_set(dev, "backing_dev", "none"), -EBUSY);
    /* every form of zram's writeback */
    static const char *const bad[] = {"",
                                      "all",
                                      "type=all",
                                      "idle huge",
                                      "page_index=",
                                      "page_indexes=5",
                                      "page_indexes=9-3",
                                      "page=x",
                                      "huge type=idle"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (uzram_attr_set(dev, "writeback", bad[i]) != -EINVAL)
            fail_msg("writeback '%s' was not refused", bad[i]);
    assert_int_equal(uzram_attr_set(dev, "writeback", "huge\n"), 0);
    attr_is(dev, "bd_stat", "8 0 8\n"); /* 8 raw pages fill 8 blocks */
    assert_int_equal(uzram_attr_set(dev, "writeback", "idle"), 0);
    attr_is(dev, "bd_stat", "8 0 8\n");
    assert_int_equal(uzram_attr_set(dev, "idle", "all"), 0);
    assert_int_equal(uzram_attr_set(dev, "writeback", "page_index=8 page_indexes=10-11 page=20"),
                     0);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.bd_writes, 12);
    assert_int_equal(uzram_attr_set(dev, "writeback_limit", "2"), 0);
    assert_int_equal(uzram_attr_set(dev, "writeback_limit_enable", "1"), 0);
    assert_int_equal(uzram_attr_set(dev, "writeback", "type=idle"), -EIO);
    attr_is(dev, "writeback_limit", "0\n");
    attr_is(dev, "writeback_limit_enable", "1\n");
    assert_int_equal(test_stats(dev).bd_writes, 14);
    assert_int_equal(uzram_attr_set(dev, "writeback_limit_enable", "0"), 0);
    assert_int_equal(uzram_attr_set(dev, "writeback", "incompressible"), 0);
    assert_int_equal(test_stats(dev).bd_writes, 14);
    assert_int_equal(uzram_attr_set(dev, "writeback", "idle"), 0);
    s = test_stats(dev);
    assert_int_equal(s.bd_writes, 32);
    char expected[64];
    snprintf(expected, sizeof expected, "%llu 0 32\n", (unsigned long long)s.bd_count);
    attr_is(dev, "bd_stat", expected);
    assert_int_equal(uzram_read(dev, 0, page, PAGE), 0);
    snprintf(expected, sizeof expected, "%llu 1 32\n", (unsigned long long)s.bd_count);
    attr_is(dev, "bd_stat", expected);

    /* the settings of the thread */
    assert_int_equal(uzram_attr_set(dev, "writeback_when_full", "1"), 0);
    assert_int_equal(uzram_attr_set(dev, "writeback_idle", "30\n"), 0);
    assert_int_equal(uzram_attr_set(dev, "writeback_rate", "100"), 0);
    attr_is(dev, "writeback_when_full", "1\n");
    attr_is(dev, "writeback_idle", "30\n");
    attr_is(dev, "writeback_rate", "100\n");
    assert_int_equal(uzram_attr_set(dev, "writeback_when_full", "2"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "writeback_idle", "-1"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "bd_stat", "1"), -EACCES);
    assert_non_null(uzram_attr_usage("writeback"));
    assert_int_equal(uzram_attr_set(dev, "writeback_idle", "0"), 0);
    assert_int_equal(uzram_attr_set(dev, "writeback_when_full", "0"), 0);
    uzram_destroy(dev);
    assert_int_equal(unlink(path), 0);
}

/* ---- concurrent ------------------------------------------------------------------- */

/* Pages are self-describing (page number, writer, sequence, and a body
 * generated from them), so a reader can tell a whole page from a mix. */
#define SHARED_PAGES 96u
#define THREADS 5

struct race {
    struct uzram *dev;
    uint64_t ops;
    _Atomic int failures;
    _Atomic bool stop;
    char message[256];
    pthread_mutex_t lock;
};

static void race_fail(struct race *race, const char *format, ...)
{
    va_list args;
    pthread_mutex_lock(&race->lock);
    if (atomic_fetch_add(&race->failures, 1) == 0) {
        va_start(args, format);
        vsnprintf(race->message, sizeof race->message, format, args);
        va_end(args);
    }
    pthread_mutex_unlock(&race->lock);
}

/* Page `index` as `writer` writes it the `sequence`th time: one of 4
 * shared contents every fourth time (header {0, 0, n}: dedup shares them),
 * else a page of its own (header {index + 1, writer, sequence}). */
static void race_page(unsigned char *page, uint64_t index, uint64_t writer, uint64_t sequence)
{
    bool shared = sequence % 4 == 0;
    uint64_t header[3] = {shared ? 0 : index + 1, shared ? 0 : writer,
                          shared ? sequence % 16 : sequence};
    struct datagen_rng rng;
    datagen_rng_seed(&rng, header[0] * 1000003 + header[1] * 7 + header[2] * 131);
    datagen_fill(&rng, header[2] % 3 == 0 ? DATAGEN_HALF : DATAGEN_TEXT, page, PAGE);
    memcpy(page, header, sizeof header);
}

static bool race_page_ok(const unsigned char *page, uint64_t index)
{
    static const unsigned char zeros[PAGE];
    if (memcmp(page, zeros, PAGE) == 0)
        return true;
    uint64_t header[3];
    memcpy(header, page, sizeof header);
    if (header[0] != 0 && header[0] != index + 1)
        return false;
    bool shared = header[0] == 0;
    if (shared ? header[1] != 0 || header[2] % 4 != 0 || header[2] >= 16 : header[2] % 4 == 0)
        return false;
    unsigned char expected[PAGE];
    race_page(expected, index, header[1], header[2]);
    return memcmp(expected, page, PAGE) == 0;
}

struct racer {
    struct race *race;
    int id;
};

static void *racer_main(void *arg)
{
    struct racer *racer = arg;
    struct race *race = racer->race;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 77 + (uint64_t)racer->id);
    unsigned char *buf = malloc(4 * PAGE);
    uint64_t sequence = 0;
    for (uint64_t op = 0; op < race->ops && !atomic_load(&race->failures); op++) {
        uint64_t count = 1 + datagen_rng_below(&rng, 4);
        uint64_t first = datagen_rng_below(&rng, SHARED_PAGES - count + 1);
        uint64_t r = datagen_rng_below(&rng, 100);
        int rc = 0;
        if (r < 45) {
            for (uint64_t i = 0; i < count; i++)
                race_page(buf + i * PAGE, first + i, (uint64_t)racer->id, ++sequence);
            rc = uzram_write(race->dev, first * PAGE, buf, count * PAGE);
        } else if (r < 55) {
            rc = uzram_discard(race->dev, first * PAGE, count * PAGE);
        } else if (r < 60) {
            rc = uzram_write_zeroes(race->dev, first * PAGE, PAGE, r % 2);
        } else {
            rc = uzram_read(race->dev, first * PAGE, buf, count * PAGE);
            for (uint64_t i = 0; rc == 0 && i < count; i++)
                if (!race_page_ok(buf + i * PAGE, first + i))
                    race_fail(race, "thread %d: page %llu is not whole", racer->id,
                              (unsigned long long)(first + i));
        }
        if (rc != 0)
            race_fail(race, "thread %d: op %llu returned %d", racer->id, (unsigned long long)op,
                      rc);
    }
    free(buf);
    return NULL;
}

/* Writeback by request, marks, compaction and the reading of stats, over
 * and over, beside the racers (and the library's own thread). */
static void *writer_back_main(void *arg)
{
    struct race *race = arg;
    uint64_t turn = 0;
    while (!atomic_load(&race->stop)) {
        int rc = 0;
        switch (turn++ % 5) {
        case 0:
            rc = uzram_writeback(race->dev, 0, 0, UINT64_MAX, NULL);
            break;
        case 1:
            rc = uzram_mark_idle(race->dev, 0, NULL);
            if (rc == 0)
                rc = uzram_writeback(race->dev, UZRAM_WRITEBACK_IDLE, 0, UINT64_MAX, NULL);
            break;
        case 2:
            rc = uzram_writeback(race->dev, UZRAM_WRITEBACK_HUGE, 10, 40, NULL);
            break;
        case 3:
            rc = uzram_compact(race->dev, NULL);
            break;
        default:
            store_test_advance_clock(race->dev, 1);
            (void)test_stats(race->dev);
            break;
        }
        if (rc != 0 && rc != -ENOSPC)
            race_fail(race, "writeback thread: turn %llu returned %d", (unsigned long long)turn,
                      rc);
        sched_yield();
    }
    return NULL;
}

static void run_race(bool dedup, const char *name)
{
    struct race race = {.ops = 3000};
    pthread_mutex_init(&race.lock, NULL);
    char path[300];
    backing_name(path, sizeof path, name);
    race.dev = test_device(SHARED_PAGES * PAGE, "lz4", dedup);
    assert_int_equal(uzram_set_backing_dev(race.dev, path, 0), 0);
    /* a pool of 256 KiB: writes make room all the time */
    assert_int_equal(uzram_set_mem_limit(race.dev, 256 * 1024), 0);
    assert_int_equal(uzram_set_writeback_when_full(race.dev, true), 0);
    assert_int_equal(uzram_set_writeback_idle(race.dev, 1), 0);
    struct racer racers[THREADS];
    pthread_t ids[THREADS], back;
    assert_int_equal(pthread_create(&back, NULL, writer_back_main, &race), 0);
    for (int i = 0; i < THREADS; i++) {
        racers[i] = (struct racer){&race, i + 1};
        assert_int_equal(pthread_create(&ids[i], NULL, racer_main, &racers[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(ids[i], NULL);
    atomic_store(&race.stop, true);
    pthread_join(back, NULL);
    if (race.failures)
        fprintf(stderr, "[%s] %s\n", name, race.message);
    assert_int_equal(race.failures, 0);

    /* quiet: every page whole, and all of it away leaves nothing */
    unsigned char *all = malloc(SHARED_PAGES * PAGE);
    assert_int_equal(uzram_read(race.dev, 0, all, SHARED_PAGES * PAGE), 0);
    for (uint64_t i = 0; i < SHARED_PAGES; i++)
        assert_true(race_page_ok(all + i * PAGE, i));
    free(all);
    struct uzram_stats s = test_stats(race.dev);
    assert_int_equal(s.failed_reads, 0);
    assert_int_equal(s.bd_checksum_errors, 0); /* the open block rewritten under readers */
    assert_true(s.bd_writes > 0);
    assert_int_equal(uzram_set_writeback_idle(race.dev, 0), 0);
    assert_int_equal(uzram_set_writeback_when_full(race.dev, false), 0);
    assert_int_equal(uzram_discard(race.dev, 0, SHARED_PAGES * PAGE), 0);
    assert_int_equal(uzram_compact(race.dev, NULL), 0);
    s = test_stats(race.dev);
    assert_int_equal(s.pages_stored + s.bd_objects + s.bd_data_size + s.bd_count, 0);
    assert_int_equal(s.compr_data_size + s.mem_used_total + s.dup_data_size, 0);
    assert_int_equal(allocated(path), 0);
    uzram_destroy(race.dev);
    pthread_mutex_destroy(&race.lock);
    assert_int_equal(unlink(path), 0);
}

static void test_concurrent_writeback(void **state)
{
    (void)state;
    run_race(false, "race");
}

static void test_concurrent_writeback_dedup(void **state)
{
    (void)state;
    run_race(true, "race-dedup");
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backing_dev_settings),
        cmocka_unit_test(test_writeback_all_and_back),
        cmocka_unit_test(test_writeback_modes),
        cmocka_unit_test(test_writeback_limit),
        cmocka_unit_test(test_writeback_dedup),
        cmocka_unit_test(test_writeback_when_full),
        cmocka_unit_test(test_writeback_when_full_bounded),
        cmocka_unit_test(test_writeback_when_full_reserve),
        cmocka_unit_test(test_writeback_idle_thread),
        cmocka_unit_test(test_writeback_attributes),
        cmocka_unit_test(test_concurrent_writeback),
        cmocka_unit_test(test_concurrent_writeback_dedup),
    };
    return cmocka_run_group_tests_name("writeback", tests, make_folder, remove_folder);
}
