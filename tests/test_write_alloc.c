/* test_write_alloc.c - a swap device's requests allocate nothing once warm (uzram(1) SWAP):
 * with the settings of `uzram serve --swap` (a pool reserve, a limit) in its lz4 mode and its
 * dense mode (dedup, zstd recompression into bundles of 8), writes of new pages, overwrites
 * with other sizes, duplicates, discards, overwrites of bundled pages and reads of them make no
 * call to malloc, calloc, realloc, aligned_alloc or posix_memalign on the request's thread. A
 * swap-out's allocation waits for malloc's lock, which a low-priority thread of the server (the
 * recompressor) may hold while it waits in reclaim for that very swap-out. The allocator is
 * wrapped at link time (-Wl,--wrap, the Makefile), so that the sanitizers' allocators still
 * serve the calls. */
#include <execinfo.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define PAGES 8192u        /* 32 MiB */
#define RESERVE (4u << 20) /* serve --swap's POOL_RESERVE (src/attach/swap.c) */

/* ---- the wrapped allocator: counts the calls of the thread that set `counting` ---- */

static _Thread_local bool counting;
static atomic_ulong calls;
/* The first counted call's stack and every calling place (up to SITES) with its count,
 * printed when the test fails (addr2line -e BINARY names them). */
static void *first_stack[32];
static int first_depth;
#define SITES 16
static struct {
    void *at;
    unsigned long calls;
} sites[SITES];

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *block, size_t size);
void *__real_aligned_alloc(size_t alignment, size_t size);
int __real_posix_memalign(void **out, size_t alignment, size_t size);

static void counted(void *at)
{
    if (!counting)
        return;
    for (unsigned i = 0; i < SITES; i++)
        if (sites[i].at == at || sites[i].at == NULL) {
            sites[i].at = at;
            sites[i].calls++;
            break;
        }
    if (atomic_fetch_add(&calls, 1) == 0) {
        counting = false; /* backtrace() may itself allocate at its first call */
        first_depth = backtrace(first_stack, 32);
        counting = true;
    }
}

void *__wrap_malloc(size_t size)
{
    counted(__builtin_return_address(0));
    return __real_malloc(size);
}

void *__wrap_calloc(size_t count, size_t size)
{
    counted(__builtin_return_address(0));
    return __real_calloc(count, size);
}

void *__wrap_realloc(void *block, size_t size)
{
    counted(__builtin_return_address(0));
    return __real_realloc(block, size);
}

void *__wrap_aligned_alloc(size_t alignment, size_t size)
{
    counted(__builtin_return_address(0));
    return __real_aligned_alloc(alignment, size);
}

int __wrap_posix_memalign(void **out, size_t alignment, size_t size)
{
    counted(__builtin_return_address(0));
    return __real_posix_memalign(out, alignment, size);
}

static void start_counting(void)
{
    atomic_store(&calls, 0);
    first_depth = 0;
    memset(sites, 0, sizeof sites);
    counting = true;
}

/* Stop counting; fail, the first call's stack printed, if any call was counted. */
static void expect_no_calls(const char *what)
{
    counting = false;
    unsigned long n = atomic_load(&calls);
    if (n != 0) {
        fprintf(stderr, "%s: %lu allocations on the writer's thread; the first from:\n", what, n);
        backtrace_symbols_fd(first_stack, first_depth, 2);
        fprintf(stderr, "calling places:\n");
        for (unsigned i = 0; i < SITES && sites[i].at != NULL; i++) {
            fprintf(stderr, "%lu calls from ", sites[i].calls);
            backtrace_symbols_fd(&sites[i].at, 1, 2);
        }
    }
    assert_int_equal(n, 0);
}

/* ---- the device and its pages ---- */

/* Page `index` of generation `generation`: `percent` compressible (so that its object falls in
 * a size class of its own), different from every other page. */
static void fill(unsigned char *page, uint64_t index, uint64_t generation, unsigned percent)
{
    struct datagen_rng rng;
    datagen_rng_seed(&rng, index * 1000003 + generation);
    datagen_fill_compressible(&rng, percent, page, PAGE);
    memcpy(page, &index, sizeof index);
}

/* A device as `serve --swap` makes it (src/attach/swap.c, src/server/devices.c): the pool's
 * reserve, a limit; `dense`: dedup, zstd recompression at level 7 into bundles of 8. */
static struct uzram *swap_device(bool dense)
{
    struct uzram *dev = test_device((uint64_t)PAGES * PAGE, NULL, dense);
    assert_int_equal(uzram_set_mem_limit(dev, 320u << 20), 0);
    assert_int_equal(uzram_set_mem_reserve(dev, RESERVE), 0);
    if (dense) {
        assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 7), 0);
        assert_int_equal(uzram_set_recompress_group(dev, 8), 0);
    }
    return dev;
}

/* Write pages [first, first + count) of `generation`, sizes varying page by page. */
static void write_range(struct uzram *dev, uint64_t first, uint64_t count, uint64_t generation)
{
    static unsigned char page[PAGE];
    for (uint64_t i = first; i < first + count; i++) {
        fill(page, i, generation, (unsigned)((i * 7 + generation * 13) % 90));
        assert_int_equal(uzram_write(dev, i * PAGE, page, PAGE), 0);
    }
}

static void expect_range(struct uzram *dev, uint64_t first, uint64_t count, uint64_t generation)
{
    static unsigned char page[PAGE], expected[PAGE];
    for (uint64_t i = first; i < first + count; i++) {
        fill(expected, i, generation, (unsigned)((i * 7 + generation * 13) % 90));
        assert_int_equal(uzram_read(dev, i * PAGE, page, PAGE), 0);
        assert_memory_equal(page, expected, PAGE);
    }
}

/* The writes a swap device serves, counted after a warm-up (the codec's contexts of this
 * thread, the first spans): new pages into spans never made before, overwrites of other sizes
 * (spans emptied and made), duplicates of stored pages (dedup), zero pages, discards. */
static void writes_allocate_nothing(struct uzram *dev, bool dense)
{
    write_range(dev, 0, 256, 1); /* warm-up */
    start_counting();
    write_range(dev, 256, PAGES / 2 - 256, 1);
    write_range(dev, 0, PAGES / 4, 2);
    static unsigned char page[PAGE];
    for (uint64_t i = 0; i < 256; i++) { /* the same page again and again: dedup shares it */
        fill(page, 7, 3, 40);
        assert_int_equal(uzram_write(dev, (PAGES / 2 + i) * PAGE, page, PAGE), 0);
    }
    memset(page, 0, PAGE);
    for (uint64_t i = PAGES / 2 + 256; i < PAGES / 2 + 512; i++)
        assert_int_equal(uzram_write(dev, i * PAGE, page, PAGE), 0);
    assert_int_equal(uzram_discard(dev, (uint64_t)PAGES / 4 * PAGE, 512 * PAGE), 0);
    expect_no_calls(dense ? "dense" : "lz4");
    expect_range(dev, 0, PAGES / 4, 2);
    expect_range(dev, PAGES / 4 + 512, PAGES / 4 - 512, 1);
    test_expect_zero_pages(dev, PAGES / 4, 512);
}

static void test_lz4_writes_allocate_nothing(void **state)
{
    (void)state;
    struct uzram *dev = swap_device(false);
    writes_allocate_nothing(dev, false);
    uzram_destroy(dev);
}

static void test_dense_writes_allocate_nothing(void **state)
{
    (void)state;
    struct uzram *dev = swap_device(true);
    writes_allocate_nothing(dev, true);
    uzram_destroy(dev);
}

/* A dense device whose pages 0..1023 (generation 1) the recompressor packed into bundles. */
static struct uzram *bundled_device(void)
{
    struct uzram *dev = swap_device(true);
    write_range(dev, 0, 1024, 1);
    assert_int_equal(uzram_mark_idle(dev, 0, NULL), 0);
    struct uzram_recompress_result result;
    assert_int_equal(uzram_recompress(dev, UZRAM_RECOMPRESS_IDLE, 0, 0, 0, &result), 0);
    assert_true(test_stats(dev).bundled_pages > 512);
    return dev;
}

/* Overwrites and discards of pages the recompressor packed into bundles (their members die,
 * a bundle's last one frees it), counted; then every page read back. */
static void test_dense_bundle_overwrites_allocate_nothing(void **state)
{
    (void)state;
    struct uzram *dev = bundled_device();
    write_range(dev, 2048, 256, 1); /* warm-up */
    start_counting();
    for (uint64_t i = 0; i < 1024; i += 3)
        write_range(dev, i, 1, 2);
    assert_int_equal(uzram_discard(dev, 512 * PAGE, 64 * PAGE), 0);
    expect_no_calls("bundled");
    for (uint64_t i = 0; i < 1024; i++)
        if (i >= 512 && i < 576)
            test_expect_zero_pages(dev, i, 1);
        else
            expect_range(dev, i, 1, i % 3 == 0 ? 2 : 1);
    uzram_destroy(dev);
}

/* Reads of bundled pages (a swap-in of a page the recompressor packed), counted after one
 * read of a bundle (this thread's decoder and bundle cache): each page equal to what was
 * written. */
static void test_dense_bundle_reads_allocate_nothing(void **state)
{
    (void)state;
    struct uzram *dev = bundled_device();
    expect_range(dev, 0, 8, 1); /* warm-up */
    start_counting();
    for (uint64_t i = 0; i < 1024; i++)
        expect_range(dev, (i * 167) % 1024, 1, 1);
    expect_no_calls("bundle reads");
    uzram_destroy(dev);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lz4_writes_allocate_nothing),
        cmocka_unit_test(test_dense_writes_allocate_nothing),
        cmocka_unit_test(test_dense_bundle_overwrites_allocate_nothing),
        cmocka_unit_test(test_dense_bundle_reads_allocate_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
