/* test_state_damage.c - a damaged state is refused, never served (issue 39): in a state left by
 * a child SIGKILLed after it stored its pages (text, raw, same-filled; some written twice, so
 * that intent records hold old forms; some written back to a backing store; some recompressed
 * with a zstd dictionary; with dedup on, another state, and with bundles a third), one bit or
 * byte flipped in each region of metadata - the header's fixed fields, a codec record, the
 * dictionary, the backing store's record, a free intent record, a page slot's value and its
 * form, the span directory, a dedup change record, the dedup move record, a bundle record's
 * piece - makes uzram_state_info() or uzram_adopt() refuse with -EUCLEAN and
 * uzram_state_damage() name the region and its bytes; flipped back, every page reads back as
 * it was and the counts are the child's: nothing was punched or freed by the refusals. On the
 * code before, the flips were taken over (the intent record's gave a page another page's old
 * bytes) or answered with a bare -EINVAL. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bundle/bundle_records.h"
#include "common/datagen.h"
#include "dedup/dedup_ids.h"
#include "state/state.h"
#include "test_util.h"
#include "uzram.h"

#define PAGE 4096u
#define PAGES 256u

enum kind { PLAIN, DEDUP, BUNDLES };

/* Page `index`'s content, generation `gen`: text, but every 16th raw and every 16th + 5
 * same-filled; with dedup, pages 64 on share the contents of pages 0 to 63. */
static void page_of(enum kind kind, uint64_t index, uint32_t gen, unsigned char *page)
{
    uint64_t source = kind == DEDUP && index >= 64 ? index % 64 : index;
    enum datagen_kind what = source % 16 == 15  ? DATAGEN_RANDOM
                             : source % 16 == 5 ? DATAGEN_SAME
                                                : DATAGEN_TEXT;
    datagen_page(gen, what, source, page);
}

static int memfd(void)
{
    int fd = memfd_create("uzram-test-state", MFD_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

static char folder[512], store[600];

/* In the child: the device made in `fd`, its pages stored (generation 2 over 1 for pages 0 to
 * 15), and what `kind` adds. */
static void child_stores(int fd, enum kind kind)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = PAGES * PAGE;
    config.use_dedup = kind == DEDUP;
    struct uzram *dev;
    unsigned char page[PAGE];
    if (uzram_create_in(&config, fd, &dev) != 0)
        _exit(2);
    if (kind == PLAIN && uzram_set_backing_dev(dev, store, 0) != 0)
        _exit(3);
    for (uint64_t i = 0; i < PAGES; i++)
        for (uint32_t gen = i < 16 ? 1 : 2; gen <= 2; gen++) {
            page_of(kind, i, gen, page);
            if (uzram_write(dev, i * PAGE, page, PAGE) != 0)
                _exit(4);
        }
    static unsigned char dict[PAGE];
    datagen_page(99, DATAGEN_TEXT, 7, dict);
    int rc = 0;
    if (kind == PLAIN) {
        uint64_t written;
        rc = uzram_writeback(dev, 0, 128, 191, &written);
        rc = rc ? rc : uzram_set_recomp_algorithm(dev, 1, "zstd", 0);
        rc = rc ? rc : uzram_set_algorithm_params(dev, 1, 0, dict, sizeof dict);
        rc = rc ? rc : uzram_recompress(dev, 0, 0, 64, 1, NULL);
    } else if (kind == BUNDLES) {
        rc = uzram_set_recomp_algorithm(dev, 1, "zstd", 3);
        rc = rc ? rc : uzram_set_recompress_group(dev, 16);
        rc = rc ? rc : uzram_recompress(dev, 0, 0, 0, 0, NULL);
    }
    if (rc != 0)
        _exit(5);
}

/* A state of `kind` in a new memfd, left by a child SIGKILLed once it stored its pages. */
static int killed_state(enum kind kind)
{
    int fd = memfd(), ready[2];
    assert_int_equal(pipe(ready), 0);
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        child_stores(fd, kind);
        (void)!write(ready[1], "!", 1);
        for (;;)
            pause();
    }
    close(ready[1]);
    char said;
    assert_int_equal(read(ready[0], &said, 1), 1);
    close(ready[0]);
    kill(child, SIGKILL);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    return fd;
}

static struct state_header header_of(int fd)
{
    struct state_header header;
    assert_int_equal(pread(fd, &header, sizeof header, 0), (ssize_t)sizeof header);
    return header;
}

static uint64_t word_at(int fd, uint64_t offset)
{
    uint64_t word;
    assert_int_equal(pread(fd, &word, sizeof word, (off_t)offset), (ssize_t)sizeof word);
    return word;
}

static void flip(int fd, uint64_t offset, uint8_t mask)
{
    uint8_t byte;
    assert_int_equal(pread(fd, &byte, 1, (off_t)offset), 1);
    byte ^= mask;
    assert_int_equal(pwrite(fd, &byte, 1, (off_t)offset), 1);
}

/* Every page as the child left it, and the counts of its pages. */
static void assert_whole(int fd, enum kind kind)
{
    struct uzram *dev;
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    assert_string_equal(uzram_state_damage(), "");
    unsigned char want[PAGE], got[PAGE];
    for (uint64_t i = 0; i < PAGES; i++) {
        page_of(kind, i, 2, want);
        assert_int_equal(uzram_read(dev, i * PAGE, got, PAGE), 0);
        assert_memory_equal(got, want, PAGE);
    }
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.pages_stored, PAGES);
    assert_int_equal(stats.same_pages, PAGES / 16);
    assert_int_equal(stats.bd_checksum_errors, 0);
    if (kind == PLAIN)
        assert_true(stats.bd_objects > 0);
    if (kind == DEDUP)
        assert_int_equal(stats.dedup_entries, 64 - 4);
    if (kind == BUNDLES)
        assert_true(stats.bundled_pages > PAGES / 2);
    uzram_destroy(dev);
}

/* The byte at `offset` flipped by `mask` makes the state refused with a report that holds
 * `where`; flipped back, it is whole. `info`: uzram_state_info() refuses it too (the header). */
static void assert_refused(int fd, enum kind kind, uint64_t offset, uint8_t mask, const char *where,
                           bool info)
{
    flip(fd, offset, mask);
    struct uzram *dev = NULL;
    struct uzram_state_info state_info;
    assert_int_equal(uzram_state_info(fd, &state_info), info ? -EUCLEAN : 0);
    int rc = uzram_adopt(fd, &dev);
    if (rc == 0)
        uzram_destroy(dev);
    assert_int_equal(rc, -EUCLEAN);
    print_message("byte %llu ^ 0x%02x: %s\n", (unsigned long long)offset, mask,
                  uzram_state_damage());
    assert_non_null(strstr(uzram_state_damage(), where));
    flip(fd, offset, mask);
    assert_whole(fd, kind);
}

static void test_damage_plain(void **unused)
{
    (void)unused;
    assert_int_equal(test_make_folder(folder, sizeof folder, "state-damage"), 0);
    snprintf(store, sizeof store, "%s/store", folder);
    int fd = killed_state(PLAIN);
    struct state_header header = header_of(fd);
    assert_false(header.clean); /* killed */
    assert_refused(fd, PLAIN, offsetof(struct state_header, disksize) + 2, 0x01,
                   "header (bytes 8 to", true);
    assert_refused(fd, PLAIN, offsetof(struct state_header, pool_offset), 0x10,
                   "header (bytes 8 to", true);
    int id = header.setting[1];
    assert_true(id > 0 && header.codecs[id].dict_bytes > 0);
    assert_refused(fd, PLAIN, offsetof(struct state_header, codecs[id].level), 0x04,
                   "header: codec record", false);
    assert_refused(fd, PLAIN, header.dict_offset + (uint64_t)id * STATE_DICT_BYTES + 100, 0x20,
                   "dictionary of codec record", false);
    assert_refused(fd, PLAIN, offsetof(struct state_header, backing_path) + 3, 0x01,
                   "header: the backing store's record", false);
    /* a free intent record's slot number: page 9's last change used record 9, whose old form
     * (page 9's first generation, its object freed since) would go to page 0 */
    assert_refused(fd, PLAIN, STATE_INTENTS_OFFSET + 9 * sizeof(struct state_intent) + 8, 0x01,
                   "intent record 9 (bytes 8480 to 8511)", false);
    /* page 7's slot: its value (a pool handle), then its size */
    uint64_t slot7 = header.table_offset + 7 * 16;
    assert_refused(fd, PLAIN, slot7 + 8, 0x01, "table page 0 slot 7 (page 7 of the disk, bytes",
                   false);
    assert_refused(fd, PLAIN, slot7 + 2, 0x02, "table page 0 slot 7", false);
    /* the span directory's entry of page 7's span */
    uint64_t window = (word_at(fd, slot7 + 8) >> 12) - 1;
    char entry[64];
    snprintf(entry, sizeof entry, "span directory entry of pool window %llu",
             (unsigned long long)window);
    assert_refused(fd, PLAIN, header.dir_offset + window * 4, 0x01, entry, false);
    close(fd);
    unlink(store);
    rmdir(folder);
}

static void test_damage_dedup(void **unused)
{
    (void)unused;
    int fd = killed_state(DEDUP);
    struct state_header header = header_of(fd);
    assert_refused(fd, DEDUP,
                   header.dedup_offset + offsetof(struct dedup_saved, records[5]) +
                       offsetof(struct dedup_record, id),
                   0x01, "dedup change record 5", false);
    assert_refused(fd, DEDUP, header.dedup_offset + offsetof(struct dedup_saved, move) + 4, 0x01,
                   "dedup move record", false);
    assert_refused(fd, DEDUP, header.table_offset + 70 * 16 + 8, 0x02, "table page 0 slot 70",
                   false);
    close(fd);
}

static void test_damage_bundles(void **unused)
{
    (void)unused;
    int fd = killed_state(BUNDLES);
    struct state_header header = header_of(fd);
    uint64_t value = word_at(fd, header.table_offset + 8);
    uint64_t record = header.bundle_offset + bundle_record_offset(PAGES, value >> 4);
    assert_refused(fd, BUNDLES, record + BUNDLE_RECORD_HEADER + 1, 0x01,
                   "a piece does not match its check bits", false);
    assert_refused(fd, BUNDLES, header.table_offset + 8, 0x10, "table page 0 slot 0", false);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_damage_plain),
        cmocka_unit_test(test_damage_dedup),
        cmocka_unit_test(test_damage_bundles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
