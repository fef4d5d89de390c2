/* test_backing_safety.c - unit tests of what keeps the backing store safe (issue 23): which
 * files may become a store (nothing a user owns is emptied unasked, nothing another user made
 * or can swap is used), and what is read back from it is what was written (checksums: bit
 * flips, truncation, a truncated and regrown file, another block's bytes). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define MIB (1024u * 1024u)
#define NOBODY 65534

/* A folder of this test's own (several test runs may run at once), removed at the end. */
static char folder[256];

static int make_folder(void **state)
{
    (void)state;
    return test_make_folder(folder, sizeof folder, "backing-safety");
}

static int remove_folder(void **state)
{
    (void)state;
    return rmdir(folder);
}

static void path_of(char *path, size_t size, const char *name)
{
    snprintf(path, size, "%s/%s", folder, name);
}

/* A file of `bytes` bytes of a seeded pattern, with `mode`. */
static void make_file(const char *path, size_t bytes, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    assert_true(fd >= 0);
    unsigned char block[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 23);
    for (size_t done = 0; done < bytes; done += sizeof block) {
        datagen_fill(&rng, DATAGEN_RANDOM, block, sizeof block);
        assert_int_equal(write(fd, block, sizeof block), (ssize_t)sizeof block);
    }
    assert_int_equal(fchmod(fd, mode), 0); /* whatever the umask */
    close(fd);
}

/* The file still holds what make_file() put there. */
static void assert_untouched(const char *path, size_t bytes)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, (off_t)bytes);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    unsigned char block[PAGE], expected[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 23);
    for (size_t done = 0; done < bytes; done += sizeof block) {
        datagen_fill(&rng, DATAGEN_RANDOM, expected, sizeof expected);
        assert_int_equal(read(fd, block, sizeof block), (ssize_t)sizeof block);
        assert_memory_equal(block, expected, sizeof block);
    }
    close(fd);
}

/* ---- which files may be a store --------------------------------------------------- */

static void test_file_with_data_needs_overwrite(void **state)
{
    (void)state;
    struct uzram *dev = test_device(4 * MIB, "lz4", false);
    char path[300];
    path_of(path, sizeof path, "data");
    make_file(path, MIB, 0600);
    /* a mistyped path must not empty a user's file */
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), -EEXIST);
    assert_int_equal(uzram_attr_set(dev, "backing_dev", path), -EEXIST);
    assert_untouched(path, MIB);
    /* said explicitly: emptied and sized */
    assert_int_equal(uzram_set_backing_dev_flags(dev, path, 0, UZRAM_BACKING_OVERWRITE), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 8 * MIB);
    assert_int_equal(st.st_blocks, 0);
    uzram_destroy(dev);
    /* the store empties its file when it ends: the next one takes it as it is */
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 0);
    dev = test_device(4 * MIB, "lz4", false);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    uzram_destroy(dev);
    assert_int_equal(unlink(path), 0);
}

static void test_new_file_is_private(void **state)
{
    (void)state;
    struct uzram *dev = test_device(4 * MIB, "lz4", false);
    char path[300];
    path_of(path, sizeof path, "new");
    mode_t old_mask = umask(0);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    umask(old_mask);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, geteuid());
    assert_int_equal(uzram_set_backing_dev(dev, "none", 0), 0);
    /* a store that cannot be made (too small) leaves no file behind */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(uzram_set_backing_dev(dev, path, 4096), -EINVAL);
    assert_int_equal(lstat(path, &st), -1);
    assert_int_equal(errno, ENOENT);
    uzram_destroy(dev);
}

static void test_files_others_could_use(void **state)
{
    (void)state;
    struct uzram *dev = test_device(4 * MIB, "lz4", false);
    char path[300], other[300];
    /* readable or writable by group or others: the device's data would be theirs too */
    path_of(path, sizeof path, "shared-mode");
    make_file(path, 0, 0644);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), -EACCES);
    assert_int_equal(chmod(path, 0600), 0);
    /* a second name: whoever has it reaches the data */
    path_of(other, sizeof other, "second-name");
    assert_int_equal(link(path, other), 0);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), -EMLINK);
    assert_int_equal(unlink(other), 0);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    assert_int_equal(uzram_set_backing_dev(dev, "none", 0), 0);
    assert_int_equal(unlink(path), 0);
    if (geteuid() != 0) {
        uzram_destroy(dev);
        skip(); /* the rest needs files of another user */
    }
    /* made by another user, even empty and open to all: refused */
    path_of(path, sizeof path, "nobodys");
    make_file(path, 3 * PAGE, 0666);
    assert_int_equal(chown(path, NOBODY, NOBODY), 0);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), -EPERM);
    assert_int_equal(uzram_set_backing_dev_flags(dev, path, 0, UZRAM_BACKING_OVERWRITE), -EPERM);
    assert_untouched(path, 3 * PAGE);
    assert_int_equal(unlink(path), 0);
    uzram_destroy(dev);
}

static void test_symbolic_links(void **state)
{
    (void)state;
    struct uzram *dev = test_device(4 * MIB, "lz4", false);
    char shared[300], link_path[320], target[300];
    path_of(target, sizeof target, "target");
    make_file(target, 2 * PAGE, 0600);
    /* in a directory anybody may write (as /tmp, /var/tmp): never followed */
    path_of(shared, sizeof shared, "sticky");
    assert_int_equal(mkdir(shared, 0700), 0);
    assert_int_equal(chmod(shared, 01777), 0);
    snprintf(link_path, sizeof link_path, "%s/store", shared);
    assert_int_equal(symlink(target, link_path), 0);
    if (geteuid() == 0)
        assert_int_equal(lchown(link_path, NOBODY, NOBODY), 0);
    assert_int_equal(uzram_set_backing_dev(dev, link_path, 0), -ELOOP);
    assert_int_equal(uzram_set_backing_dev_flags(dev, link_path, 0, UZRAM_BACKING_OVERWRITE),
                     -ELOOP);
    assert_untouched(target, 2 * PAGE);
    assert_int_equal(unlink(link_path), 0);
    /* a dangling one there is not a way to create a file elsewhere either */
    char nowhere[300];
    path_of(nowhere, sizeof nowhere, "nowhere");
    assert_int_equal(symlink(nowhere, link_path), 0);
    assert_int_equal(uzram_set_backing_dev(dev, link_path, 0), -ELOOP);
    assert_int_equal(access(nowhere, F_OK), -1);
    assert_int_equal(unlink(link_path), 0);
    assert_int_equal(rmdir(shared), 0);
    /* in a directory of our own (as /dev/disk/by-id is root's): followed, same rules */
    path_of(link_path, sizeof link_path, "own-link");
    assert_int_equal(symlink(target, link_path), 0);
    assert_int_equal(uzram_set_backing_dev(dev, link_path, 0), -EEXIST);
    assert_int_equal(truncate(target, 0), 0);
    assert_int_equal(uzram_set_backing_dev(dev, link_path, 0), 0);
    assert_int_equal(uzram_set_backing_dev(dev, "none", 0), 0);
    assert_int_equal(unlink(link_path), 0);
    assert_int_equal(unlink(target), 0);
    uzram_destroy(dev);
}

/* ---- what is read back is what was written ------------------------------------------ */

#define STORE_PAGES 1024u

struct stored {
    struct uzram *dev;
    char path[300];
    unsigned char *model;
};

/* A device of STORE_PAGES pages of every kind (incompressible ones too), all written back to
 * a store at a known path; with `dedup`, every eighth page repeats another. */
static void stored_open(struct stored *s, bool dedup, const char *name)
{
    s->dev = test_device(STORE_PAGES * PAGE, "lz4", dedup);
    path_of(s->path, sizeof s->path, name);
    assert_int_equal(uzram_set_backing_dev(s->dev, s->path, 0), 0);
    s->model = malloc(STORE_PAGES * PAGE);
    assert_non_null(s->model);
    static const enum datagen_kind kinds[] = {DATAGEN_TEXT, DATAGEN_RANDOM, DATAGEN_HALF};
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 2323);
    for (uint64_t i = 0; i < STORE_PAGES; i++) {
        unsigned char *page = s->model + i * PAGE;
        if (dedup && i % 8 == 7)
            memcpy(page, s->model + (i - 3) * PAGE, PAGE);
        else
            datagen_fill(&rng, kinds[i % 3], page, PAGE);
    }
    assert_int_equal(uzram_write(s->dev, 0, s->model, STORE_PAGES * PAGE), 0);
    uint64_t written = 0;
    assert_int_equal(uzram_writeback(s->dev, 0, 0, UINT64_MAX, &written), 0);
    assert_true(written >= STORE_PAGES * 7 / 8);
    assert_int_equal(test_stats(s->dev).compr_data_size, 0);
}

static void stored_close(struct stored *s)
{
    uzram_destroy(s->dev);
    free(s->model);
    assert_int_equal(unlink(s->path), 0);
}

/* Read every page: each must come back as written or fail with -EIO, never as other bytes.
 * Returns how many failed; checks that each counted in failed_reads and, when `mismatches`,
 * in bd_checksum_errors. */
static uint64_t read_all(struct stored *s, bool mismatches)
{
    struct uzram_stats before = test_stats(s->dev);
    unsigned char page[PAGE];
    uint64_t failed = 0;
    for (uint64_t i = 0; i < STORE_PAGES; i++) {
        int rc = uzram_read(s->dev, i * PAGE, page, PAGE);
        if (rc == -EIO) {
            failed++;
            continue;
        }
        assert_int_equal(rc, 0);
        if (memcmp(page, s->model + i * PAGE, PAGE) != 0)
            fail_msg("page %llu read back other bytes than were written, with no error",
                     (unsigned long long)i);
    }
    struct uzram_stats after = test_stats(s->dev);
    assert_int_equal(after.failed_reads - before.failed_reads, failed);
    if (mismatches)
        assert_int_equal(after.bd_checksum_errors - before.bd_checksum_errors, failed);
    return failed;
}

static int open_store_file(const struct stored *s)
{
    int fd = open(s->path, O_RDWR);
    assert_true(fd >= 0);
    return fd;
}

static void flips(bool dedup)
{
    struct stored s;
    stored_open(&s, dedup, dedup ? "flips-dedup" : "flips");
    assert_int_equal(read_all(&s, true), 0);
    uint64_t used = test_stats(s.dev).bd_count * PAGE;
    int fd = open_store_file(&s);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 256);
    for (int flip = 0; flip < 256; flip++) {
        off_t at = (off_t)datagen_rng_below(&rng, used);
        unsigned char byte;
        assert_int_equal(pread(fd, &byte, 1, at), 1);
        byte ^= (unsigned char)(1u << datagen_rng_below(&rng, 8));
        assert_int_equal(pwrite(fd, &byte, 1, at), 1);
    }
    close(fd);
    uint64_t failed = read_all(&s, true);
    assert_true(failed > 0);
    struct uzram_stats st = test_stats(s.dev);
    assert_int_equal(st.bd_checksum_errors, failed);
    /* a page written again is good again: its new object goes elsewhere */
    assert_int_equal(uzram_write(s.dev, 0, s.model, STORE_PAGES * PAGE), 0);
    assert_int_equal(read_all(&s, true), 0);
    stored_close(&s);
}

static void test_bit_flips(void **state)
{
    (void)state;
    flips(false);
}

static void test_bit_flips_dedup(void **state)
{
    (void)state;
    flips(true);
}

static void test_truncated(void **state)
{
    (void)state;
    struct stored s;
    stored_open(&s, false, "truncated");
    assert_int_equal(truncate(s.path, 0), 0);
    /* short reads: each fails (not a checksum that differs: nothing came back) */
    assert_int_equal(read_all(&s, false), STORE_PAGES - test_stats(s.dev).same_pages);
    stored_close(&s);
}

static void test_truncated_and_grown(void **state)
{
    (void)state;
    struct stored s;
    stored_open(&s, false, "regrown");
    struct stat st;
    assert_int_equal(stat(s.path, &st), 0);
    assert_int_equal(truncate(s.path, 0), 0);
    assert_int_equal(truncate(s.path, st.st_size), 0);
    /* zeros where objects were: every page on the store fails, raw ones too */
    uint64_t on_store = STORE_PAGES - test_stats(s.dev).same_pages;
    assert_int_equal(read_all(&s, true), on_store);
    assert_int_equal(test_stats(s.dev).bd_checksum_errors, on_store);
    stored_close(&s);
}

static void test_block_of_another_object(void **state)
{
    (void)state;
    struct stored s;
    stored_open(&s, false, "moved");
    uint64_t blocks = test_stats(s.dev).bd_count;
    assert_true(blocks > 8);
    /* block 5's bytes over block 2: whole objects, well formed, in the wrong place */
    int fd = open_store_file(&s);
    unsigned char block[PAGE];
    assert_int_equal(pread(fd, block, PAGE, 5 * PAGE), PAGE);
    assert_int_equal(pwrite(fd, block, PAGE, 2 * PAGE), PAGE);
    close(fd);
    uint64_t failed = read_all(&s, true);
    /* the objects in block 2 (at least one, and those running into or out of it) */
    assert_true(failed >= 1 && failed <= 4);
    stored_close(&s);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_with_data_needs_overwrite),
        cmocka_unit_test(test_new_file_is_private),
        cmocka_unit_test(test_files_others_could_use),
        cmocka_unit_test(test_symbolic_links),
        cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_bit_flips_dedup),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_truncated_and_grown),
        cmocka_unit_test(test_block_of_another_object),
    };
    return cmocka_run_group_tests_name("backing safety", tests, make_folder, remove_folder);
}
