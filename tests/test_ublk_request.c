/* test_ublk_request.c - unit tests of what a ublk request does to the engine and the result the
 * driver gets back (src/attach/ublk_request.h), on a real engine of 4 GiB and more (sparse:
 * never-written pages hold nothing), with requests built as Linux 6.12's ublk_setup_iod()
 * builds them. Discards and write-zeroes of every size the advertised limits allow end with
 * 0 (issue 39: the length as an int, negative from 2 GiB, failed them); a write-zeroes with
 * UBLK_IO_F_NOUNMAP stores zero pages, one without drops them; a swap device's write at the
 * memory limit drops the dead page of its slot to make room (issue 40). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attach/ublk_request.h"
#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define GIB (1ull << 30)
/* The largest discard or write-zeroes request the kernel makes of the advertised
 * UINT32_MAX >> 9 sectors: rounded down to the 4 KiB blocks (blk-lib.c's limits). */
#define LARGEST_REQUEST 0xFFFFF000ull
/* The disk: the largest request and 8 MiB more. */
#define DISK (LARGEST_REQUEST + (8u << 20))
#define BUFFER_BYTES (128u << 10) /* ublk.c's UBLK_IO_BYTES */

static unsigned char buffer[BUFFER_BYTES];

/* A request as the driver's descriptor has it: the op and its flags in op_flags. */
static struct ublksrv_io_desc request(unsigned op_flags, uint64_t offset, uint64_t length)
{
    return (struct ublksrv_io_desc){
        .op_flags = op_flags,
        .nr_sectors = (uint32_t)(length >> 9),
        .start_sector = offset >> 9,
    };
}

static int serve(struct uzram *dev, bool read_only, unsigned op_flags, uint64_t offset,
                 uint64_t length)
{
    struct ublksrv_io_desc iod = request(op_flags, offset, length);
    return ublk_request_serve(dev, read_only, false, &iod, buffer, sizeof buffer);
}

/* Page contents of their own at each page of `pages`. */
static void write_marks(struct uzram *dev, const uint64_t *pages, size_t count)
{
    unsigned char page[PAGE];
    for (size_t i = 0; i < count; i++) {
        test_fill_kind(pages[i], DATAGEN_TEXT, page, PAGE);
        test_write_pages(dev, pages[i], page, 1);
    }
}

static void expect_marks(struct uzram *dev, const uint64_t *pages, size_t count)
{
    unsigned char page[PAGE];
    for (size_t i = 0; i < count; i++) {
        test_fill_kind(pages[i], DATAGEN_TEXT, page, PAGE);
        test_expect_pages(dev, pages[i], page, 1);
    }
}

static int setup(void **state)
{
    *state = test_device(DISK, NULL, 0);
    return 0;
}

static int teardown(void **state)
{
    uzram_destroy(*state);
    return 0;
}

/* The result for every op at lengths around 2 GiB and up to the largest request: 0 for
 * FLUSH, DISCARD and WRITE_ZEROES whatever the length, the bytes for READ and WRITE, an
 * engine's error as it is. */
static void test_result_of_each_op(void **state)
{
    (void)state;
    const uint64_t lengths[] = {PAGE,
                                BUFFER_BYTES,
                                2 * GIB - PAGE,
                                2 * GIB,
                                3 * GIB,
                                LARGEST_REQUEST,
                                (uint64_t)(UINT32_MAX >> 9) << 9};
    const unsigned ops[] = {UBLK_IO_OP_FLUSH, UBLK_IO_OP_DISCARD, UBLK_IO_OP_WRITE_ZEROES};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            assert_int_equal(ublk_request_result(ops[o], lengths[l], 0), 0);
            assert_int_equal(ublk_request_result(ops[o], lengths[l], -ENOSPC), -ENOSPC);
        }
    assert_int_equal(ublk_request_result(UBLK_IO_OP_READ, PAGE, 0), PAGE);
    assert_int_equal(ublk_request_result(UBLK_IO_OP_WRITE, BUFFER_BYTES, 0), BUFFER_BYTES);
    assert_int_equal(ublk_request_result(UBLK_IO_OP_WRITE, PAGE, -EIO), -EIO);
}

/* Discards of the largest request, of exactly 2 GiB and of the rest: each ends with 0, the
 * pages inside are gone and read as zeros, the ones after stay. */
static void test_discard_largest_requests(void **state)
{
    struct uzram *dev = *state;
    const uint64_t inside[] = {0, GIB / PAGE, 3 * GIB / PAGE, LARGEST_REQUEST / PAGE - 1};
    const uint64_t after[] = {LARGEST_REQUEST / PAGE, DISK / PAGE - 1};
    write_marks(dev, inside, 4);
    write_marks(dev, after, 2);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_DISCARD, 0, LARGEST_REQUEST), 0);
    for (size_t i = 0; i < 4; i++)
        test_expect_zero_pages(dev, inside[i], 1);
    expect_marks(dev, after, 2);
    assert_int_equal(test_stats(dev).pages_stored, 2);

    write_marks(dev, inside, 2);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_DISCARD, 0, 2 * GIB), 0);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_DISCARD, LARGEST_REQUEST, DISK - LARGEST_REQUEST),
                     0);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.pages_stored, 0);
    assert_int_equal(s.failed_writes + s.invalid_io, 0);
}

/* Write-zeroes over 3 GiB: with NOUNMAP every page of the range is stored as a zero page
 * (zero_pages counts them), without it they are dropped; both end with 0, the range reads as
 * zeros, the pages on either side stay. */
static void test_write_zeroes_nounmap(void **state)
{
    struct uzram *dev = *state;
    const uint64_t first = 1, pages = 3 * GIB / PAGE;
    const uint64_t inside[] = {first, first + pages / 2, first + pages - 1};
    const uint64_t outside[] = {0, first + pages};
    write_marks(dev, inside, 3);
    write_marks(dev, outside, 2);
    unsigned op = UBLK_IO_OP_WRITE_ZEROES | UBLK_IO_F_NOUNMAP;
    assert_int_equal(serve(dev, false, op, first * PAGE, pages * PAGE), 0);
    for (size_t i = 0; i < 3; i++)
        test_expect_zero_pages(dev, inside[i], 1);
    expect_marks(dev, outside, 2);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.zero_pages, pages);
    assert_int_equal(s.pages_stored, pages + 2);

    assert_int_equal(serve(dev, false, UBLK_IO_OP_WRITE_ZEROES, first * PAGE, pages * PAGE), 0);
    for (size_t i = 0; i < 3; i++)
        test_expect_zero_pages(dev, inside[i], 1);
    expect_marks(dev, outside, 2);
    s = test_stats(dev);
    assert_int_equal(s.zero_pages, 0);
    assert_int_equal(s.pages_stored, 2);
}

/* Reads and writes give their bytes; a read larger than the buffer, an op the engine does
 * not know and a discard past the end are errors, not bytes. */
static void test_reads_and_writes(void **state)
{
    struct uzram *dev = *state;
    unsigned char data[BUFFER_BYTES];
    test_fill_kind(7, DATAGEN_HALF, data, sizeof data);
    memcpy(buffer, data, sizeof data);
    uint64_t at = 2 * GIB + 5 * PAGE;
    assert_int_equal(serve(dev, false, UBLK_IO_OP_WRITE, at, sizeof data), (int)sizeof data);
    memset(buffer, 0, sizeof buffer);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_READ, at, sizeof data), (int)sizeof data);
    assert_memory_equal(buffer, data, sizeof data);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_READ, at, sizeof data + PAGE), -EINVAL);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_WRITE, at, sizeof data + PAGE), -EINVAL);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_FLUSH, 0, 0), 0);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_WRITE_SAME, at, PAGE), -EOPNOTSUPP);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_DISCARD, DISK - PAGE, 2 * PAGE), -EINVAL);
    assert_int_equal(serve(dev, false, UBLK_IO_OP_WRITE_ZEROES, DISK, PAGE), -EINVAL);
    assert_int_equal(test_stats(dev).pages_stored, sizeof data / PAGE);
}

/* A read-only device refuses every write with EROFS and keeps its pages; reads and flushes
 * work. */
static void test_read_only(void **state)
{
    struct uzram *dev = *state;
    const uint64_t marks[] = {3, LARGEST_REQUEST / PAGE};
    write_marks(dev, marks, 2);
    assert_int_equal(serve(dev, true, UBLK_IO_OP_WRITE, 0, PAGE), -EROFS);
    assert_int_equal(serve(dev, true, UBLK_IO_OP_DISCARD, 0, LARGEST_REQUEST), -EROFS);
    unsigned op = UBLK_IO_OP_WRITE_ZEROES | UBLK_IO_F_NOUNMAP;
    assert_int_equal(serve(dev, true, op, 0, LARGEST_REQUEST), -EROFS);
    assert_int_equal(serve(dev, true, UBLK_IO_OP_WRITE_ZEROES, 0, 2 * GIB), -EROFS);
    assert_int_equal(serve(dev, true, UBLK_IO_OP_FLUSH, 0, 0), 0);
    assert_int_equal(serve(dev, true, UBLK_IO_OP_READ, 3 * PAGE, PAGE), PAGE);
    expect_marks(dev, marks, 2);
    assert_int_equal(test_stats(dev).pages_stored, 2);
}

/* At the memory limit, a write over a slot whose page fills it: a swap device's (the slot's
 * page is dead: the kernel writes only slots it holds the page of) succeeds in its room, with
 * the new data read back; any other device's fails with ENOSPC and keeps the old page. */
static void test_swap_write_at_limit(void **state)
{
    struct uzram *dev = *state;
    unsigned char old_pages[4 * PAGE], new_pages[4 * PAGE];
    test_fill_kind(11, DATAGEN_RANDOM, old_pages, sizeof old_pages);
    test_fill_kind(12, DATAGEN_RANDOM, new_pages, sizeof new_pages);
    test_write_pages(dev, 100, old_pages, 4);
    assert_int_equal(uzram_set_mem_limit(dev, test_stats(dev).mem_used_total), 0);
    struct ublksrv_io_desc iod = request(UBLK_IO_OP_WRITE, 100 * PAGE, sizeof new_pages);
    memcpy(buffer, new_pages, sizeof new_pages);
    assert_int_equal(ublk_request_serve(dev, false, false, &iod, buffer, sizeof buffer), -ENOSPC);
    test_expect_pages(dev, 100, old_pages, 4);
    /* and one more page elsewhere fails for either: no dead page to drop there */
    struct ublksrv_io_desc elsewhere = request(UBLK_IO_OP_WRITE, 200 * PAGE, PAGE);
    assert_int_equal(ublk_request_serve(dev, false, true, &elsewhere, buffer, sizeof buffer),
                     -ENOSPC);
    assert_int_equal(ublk_request_serve(dev, false, true, &iod, buffer, sizeof buffer),
                     (int)sizeof new_pages);
    test_expect_pages(dev, 100, new_pages, 4);
    assert_true(test_stats(dev).mem_used_total <= test_stats(dev).mem_limit);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_result_of_each_op),
        cmocka_unit_test_setup_teardown(test_discard_largest_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_zeroes_nounmap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_and_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_swap_write_at_limit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
