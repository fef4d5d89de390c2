/* test_state_tmpfs.c - a device's state on a tmpfs with a size that fills up: writes fail with
 * ENOSPC and every page stored reads back, where a fault into the full tmpfs would kill the
 * process (SIGBUS), with dedup too (its index in the file); a page table that does not fit is
 * refused at creation; packing bundles into a full one fails with ENOSPC, and the bundles made
 * with room are taken over. Each case runs in a
 * child of its own that mounts a small tmpfs in a mount namespace of its own (root only: the
 * case is skipped, and says why, without CAP_SYS_ADMIN). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "uzram.h"

#define PAGE 4096u
#define SKIP_STATUS 77

/* Page `index` of generation 1: random bytes (stored raw, 4 KiB each), so that the tmpfs
 * fills at a known pace. */
static void page_of(uint64_t index, unsigned char *page)
{
    uint64_t x = index * 0x9e3779b97f4a7c15ull + 1;
    for (unsigned i = 0; i < PAGE; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(page + i, &x, 8);
    }
}

/* The mount point, made by the parent (in $TMPDIR, else /tmp) before the child mounts a tmpfs
 * on it in a namespace of its own, and removed by the parent once the child is gone (while the
 * child's mount is there, the directory cannot be removed). */
static char mount_point[4096];

/* In the child: a mount namespace of its own with a tmpfs of `size` on mount_point, the
 * state file `state` in it opened in *fd. false: not permitted here. */
static bool small_tmpfs(const char *size, int *fd)
{
    char options[64];
    snprintf(options, sizeof options, "size=%s,mode=0700", size);
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("uzram-test", mount_point, "tmpfs", 0, options) < 0)
        return false;
    char path[sizeof mount_point + 8];
    snprintf(path, sizeof path, "%s/state", mount_point);
    *fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    return *fd >= 0;
}

/* Run `body` in a child; the case fails if the child is killed (SIGBUS) or fails. */
static void in_child(void (*body)(void))
{
    const char *tmp = getenv("TMPDIR");
    snprintf(mount_point, sizeof mount_point, "%s/uzram-tmpfs-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(mount_point));
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        /* cmocka's handlers would catch a SIGBUS and go on with the next case in the child */
        static const int fatal[] = {SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGABRT};
        for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
            signal(fatal[i], SIG_DFL);
        body();
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(rmdir(mount_point), 0); /* the child's namespace, and its mount, are gone */
    if (WIFSIGNALED(status))
        fail_msg("the child was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    if (WEXITSTATUS(status) == SKIP_STATUS) {
        print_message("no mount namespace or tmpfs mount here (needs CAP_SYS_ADMIN)\n");
        skip();
    }
    assert_int_equal(WEXITSTATUS(status), 0);
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                             \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#define DISK_8M (64u << 20)

/* In the child: a device of DISK_8M bytes made in a state on an 8 MiB tmpfs (its file in
 * *fd); exits SKIP_STATUS where no tmpfs can be mounted. */
static struct uzram *device_in_8m(int *fd)
{
    if (!small_tmpfs("8m", fd))
        _exit(SKIP_STATUS);
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK_8M;
    struct uzram *dev;
    CHECK(uzram_create_in(&config, *fd, &dev) == 0);
    return dev;
}

/* Pages 0 to `count` - 1 read back, those below `gone` as zero bytes, those from `count` on too. */
static void expect_pages(struct uzram *dev, void (*make)(uint64_t, unsigned char *), uint64_t gone,
                         uint64_t count)
{
    unsigned char page[PAGE], got[PAGE];
    for (uint64_t i = 0; i <= count; i++) {
        CHECK(uzram_read(dev, i * PAGE, got, PAGE) == 0);
        if (i >= gone && i < count)
            make(i, page);
        else
            memset(page, 0, PAGE);
        CHECK(memcmp(got, page, PAGE) == 0);
    }
}

/* 8 MiB of tmpfs, a disk of `disksize` (dedup on or off), pages made by `make` until a write
 * fails. It must fail with ENOSPC after at least `least` pages and before `most`; every page
 * written before reads back, the others as zero bytes; a discard makes room again; the state
 * taken over holds the same, with as many pages and dedup entries. */
static void fill(uint64_t disksize, bool dedup, void (*make)(uint64_t, unsigned char *),
                 uint64_t least, uint64_t most)
{
    int fd;
    if (!small_tmpfs("8m", &fd))
        _exit(SKIP_STATUS);
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = disksize;
    config.use_dedup = dedup;
    struct uzram *dev;
    CHECK(uzram_create_in(&config, fd, &dev) == 0);
    unsigned char page[PAGE];
    uint64_t stored = 0, pages = config.disksize / PAGE;
    int rc = 0;
    for (; stored < pages; stored++) {
        make(stored, page);
        if ((rc = uzram_write(dev, stored * PAGE, page, PAGE)) != 0)
            break;
    }
    fprintf(stderr, "first failed write: page %llu: %d\n", (unsigned long long)stored, rc);
    CHECK(rc == -ENOSPC);
    CHECK(stored >= least && stored < most);
    expect_pages(dev, make, 0, stored);
    /* a quarter discarded and compacted: writes fit again */
    CHECK(uzram_discard(dev, 0, stored / 4 * PAGE) == 0);
    CHECK(uzram_compact(dev, NULL) == 0);
    make(stored, page);
    CHECK(uzram_write(dev, stored * PAGE, page, PAGE) == 0);
    struct uzram_stats before, after;
    CHECK(uzram_get_stats(dev, &before, sizeof before) == 0);
    CHECK(uzram_state_quiesce(dev) == 0);
    uzram_destroy(dev);
    CHECK(uzram_adopt(fd, &dev) == 0);
    CHECK(uzram_get_stats(dev, &after, sizeof after) == 0);
    CHECK(after.dedup_entries == before.dedup_entries && after.pages_stored == before.pages_stored);
    expect_pages(dev, make, stored / 4, stored + 1);
    uzram_destroy(dev);
    close(fd);
}

/* Raw pages into a 64 MiB disk: the tmpfs is full after at least half of it. */
static void fill_body(void)
{
    fill(64u << 20, false, page_of, (4u << 20) / PAGE, (8u << 20) / PAGE);
}

static void test_tmpfs_fills(void **state)
{
    (void)state;
    in_child(fill_body);
}

/* Page `index` of text (words, which bundles pack well). */
static void text_of(uint64_t index, unsigned char *page)
{
    static const char *const words[] = {"state ", "bundle ", "record ", "page ", "tmpfs ",
                                        "full ",  "piece ",  "kept ",   "the ",  "of "};
    uint64_t x = index * 0x9e3779b97f4a7c15ull + 7;
    for (unsigned at = 0; at < PAGE;) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const char *word = words[x % 10];
        for (unsigned i = 0; word[i] && at < PAGE; i++)
            page[at++] = (unsigned char)word[i];
    }
}

/* Pages 0..`text` - 1 text, `text`..`stored` - 1 raw (random), the others empty. */
static void check_mixed(struct uzram *dev, uint64_t text, uint64_t stored, uint64_t pages)
{
    unsigned char page[PAGE], got[PAGE];
    for (uint64_t i = 0; i < pages; i++) {
        CHECK(uzram_read(dev, i * PAGE, got, PAGE) == 0);
        if (i < text)
            text_of(i, page);
        else if (i < stored)
            page_of(i, page);
        else
            memset(page, 0, PAGE);
        CHECK(memcmp(got, page, PAGE) == 0);
    }
}

/* 8 MiB of tmpfs, text pages then raw ones until it is full: packing them into bundles finds
 * no room for a record's chunk (nor pieces) and fails with ENOSPC instead of a SIGBUS, every
 * page as it was; with room made, bundles are made and the state taken over holds them. */
static void bundles_body(void)
{
    int fd;
    struct uzram *dev = device_in_8m(&fd);
    CHECK(uzram_set_recomp_algorithm(dev, 1, "zstd", 3) == 0);
    CHECK(uzram_set_recompress_group(dev, 8) == 0);
    unsigned char page[PAGE];
    uint64_t text = 512, stored = 0, pages = DISK_8M / PAGE;
    for (; stored < text; stored++) {
        text_of(stored, page);
        CHECK(uzram_write(dev, stored * PAGE, page, PAGE) == 0);
    }
    for (; stored < pages; stored++) {
        page_of(stored, page);
        if (uzram_write(dev, stored * PAGE, page, PAGE) != 0)
            break;
    }
    int rc = uzram_recompress(dev, 0, 0, 0, 0, NULL);
    fprintf(stderr, "recompression on a full tmpfs: %d\n", rc);
    CHECK(rc == -ENOSPC);
    check_mixed(dev, text, stored, pages);
    /* the raw pages discarded and compacted: room for bundles */
    CHECK(uzram_discard(dev, text * PAGE, (stored - text) * PAGE) == 0);
    CHECK(uzram_compact(dev, NULL) == 0);
    CHECK(uzram_recompress(dev, 0, 0, 0, 0, NULL) == 0);
    struct uzram_stats before;
    CHECK(uzram_get_stats(dev, &before, sizeof before) == 0 && before.bundles >= text / 16);
    check_mixed(dev, text, text, pages);
    CHECK(uzram_state_quiesce(dev) == 0);
    uzram_destroy(dev);
    CHECK(uzram_adopt(fd, &dev) == 0);
    struct uzram_stats after;
    CHECK(uzram_get_stats(dev, &after, sizeof after) == 0 && after.bundles == before.bundles &&
          after.bundled_pages == before.bundled_pages);
    check_mixed(dev, text, text, pages);
    uzram_destroy(dev);
    close(fd);
}

static void test_tmpfs_bundles(void **state)
{
    (void)state;
    in_child(bundles_body);
}

/* 1 MiB of tmpfs cannot hold the 4 MiB page table of a 1 GiB disk: refused at creation
 * (ENOSPC), the file left empty. */
static void table_body(void)
{
    int fd;
    if (!small_tmpfs("1m", &fd))
        _exit(SKIP_STATUS);
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = 1ull << 30;
    struct uzram *dev = NULL;
    int rc = uzram_create_in(&config, fd, &dev);
    fprintf(stderr, "uzram_create_in: %d\n", rc);
    CHECK(rc == -ENOSPC && dev == NULL);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 0 && st.st_blocks == 0);
    close(fd);
}

static void test_tmpfs_table_refused(void **state)
{
    (void)state;
    in_child(table_body);
}

/* Page `index` of the dedup case: zero bytes but a unique stamp, compressed to a few dozen
 * bytes, so that the index's 20-byte entries take a good part of the tmpfs as it fills. */
static void small_page_of(uint64_t index, unsigned char *page)
{
    memset(page, 0, PAGE);
    uint64_t stamp = index + 1;
    memcpy(page + 8 * (index % 512), &stamp, 8);
}

/* Dedup, whose index's chunks are in the file, on a 1 GiB disk (its 4 MiB table allocated
 * whole): small unique pages until a write fails with ENOSPC, not SIGBUS (the index touches a
 * chunk's pages only once fallocate() has allocated them). */
static void dedup_fill_body(void)
{
    fill(1ull << 30, true, small_page_of, 10000, 1u << 20);
}

static void test_tmpfs_fills_dedup(void **state)
{
    (void)state;
    in_child(dedup_fill_body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tmpfs_fills),
        cmocka_unit_test(test_tmpfs_table_refused),
        cmocka_unit_test(test_tmpfs_fills_dedup),
        cmocka_unit_test(test_tmpfs_bundles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
