/* fuzz_engine.c - libFuzzer target: a byte string decoded into engine operations on a 1 MiB
 * device, checked against a plain array; any difference or broken statistic aborts. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup/dedup.h"
#include "device/device.h"
#include "uzram.h"

/*
 * Input format (everything past the end reads as zero bytes):
 *   byte 0         device settings: bits 0..2 algorithm (mod 5), bit 3
 *                  use_dedup, bit 4 same_filled off, bit 5 force every
 *                  page into one dedup hash chain (only full comparison
 *                  tells pages apart), bit 6 start with a 256 KiB mem_limit,
 *                  bit 7 zstd as the recompression algorithm with bundles of 4
 *                  pages (recompress_group; the recompress opcode packs them)
 *   then repeated  one opcode byte, then its arguments (see run_op)
 * Ranges come in two forms chosen by a mode byte: aligned and inside the
 * disk (the common case, so that most operations do real work), or raw
 * 32-bit offset and length that are usually misaligned or out of range
 * and must give -EINVAL without changing anything.
 *
 * Options for scripts/fuzz.sh (inputs of a few hundred operations matter):
 * fuzz-options: -max_len=4096
 *
 * The model is the expected content of the whole disk. With a mem_limit a
 * write may fail with -ENOSPC part way: then the pages of the request must
 * read, in order, as new up to some page and old from there on, and the
 * model takes what the device holds.
 */

#define PAGE UZRAM_PAGE_SIZE
#define SECTOR UZRAM_SECTOR_SIZE
#define DISK (1024u * 1024u)
#define PAGES (DISK / PAGE)
#define MAX_OPS 512
#define PALETTE 4

static const char *const algorithms[] = {"lzo", "lz4", "lz4hc", "zstd", "deflate"};
static const char *const attributes[] = {
    "disksize",  "initstate",    "comp_algorithm", "algorithm_params", "same_filled", "use_dedup",
    "mem_limit", "mem_used_max", "mm_stat",        "io_stat",          "debug_stat",  "stat_json",
    "compact",   "reset",        "nonexistent",
};

static uint8_t model[DISK];
static uint8_t buffer[DISK + 2 * PAGE];
static uint8_t readback[DISK + 2 * PAGE];
static uint8_t palette[PALETTE][PAGE];
static const uint8_t zeros[PAGE];

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_engine: op %d: check failed: %s: ", op_index, #cond);            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int op_index;

struct input {
    const uint8_t *data;
    size_t size;
    size_t pos;
};

static uint8_t get8(struct input *in)
{
    return in->pos < in->size ? in->data[in->pos++] : 0;
}

static uint16_t get16(struct input *in)
{
    return (uint16_t)(get8(in) | get8(in) << 8);
}

static uint32_t get32(struct input *in)
{
    return (uint32_t)get16(in) | (uint32_t)get16(in) << 16;
}

static uint64_t get64(struct input *in)
{
    return (uint64_t)get32(in) | (uint64_t)get32(in) << 32;
}

/* Whole-buffer comparisons go through memcmp: a byte loop would make
 * libFuzzer's comparison tracing dominate the run time. */
static bool all_zero(const uint8_t *data, uint64_t length)
{
    for (uint64_t done = 0; done < length; done += PAGE) {
        uint64_t piece = length - done < PAGE ? length - done : PAGE;
        if (memcmp(data + done, zeros, piece) != 0)
            return false;
    }
    return true;
}

static bool model_empty(void)
{
    return all_zero(model, DISK);
}

struct state {
    struct uzram *dev;
    uint64_t mem_limit;
    uint64_t invalid_io;    /* expected io_stat invalid_io */
    uint64_t failed_writes; /* expected io_stat failed_writes */
    uint64_t meta_baseline; /* meta_data_size of the empty index, once made (and compacted) */
};

static bool range_valid(uint64_t offset, uint64_t length)
{
    return offset % SECTOR == 0 && length % SECTOR == 0 && offset <= DISK &&
           length <= DISK - offset;
}

/* Decode a range; valid ones are aligned and inside the disk. Lengths stay
 * below the buffer size even when invalid. */
static void get_range(struct input *in, uint64_t *offset, uint64_t *length)
{
    uint8_t mode = get8(in);
    if (mode & 0x80) {
        *offset = get32(in) % (2u * DISK);
        *length = get32(in) % (DISK + PAGE + 1);
        if (mode & 0x40) {
            *offset &= ~(uint64_t)(SECTOR - 1);
            *length &= ~(uint64_t)(SECTOR - 1);
        }
        return;
    }
    uint64_t sector = get16(in) % (DISK / SECTOR);
    uint64_t sectors = mode & 0x40 ? (uint64_t)get8(in) * 8 : (uint64_t)(mode & 0x3f);
    if (sectors > DISK / SECTOR - sector)
        sectors = DISK / SECTOR - sector;
    *offset = sector * SECTOR;
    *length = sectors * SECTOR;
}

static uint64_t next_random(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Fill `length` bytes of content, page-sized piece by piece, in kinds that
 * hit every form a page can take. */
static void make_content(struct input *in, uint8_t *out, uint64_t offset, uint64_t length)
{
    uint8_t kind = get8(in);
    uint64_t seed = get64(in) | 1;
    for (uint64_t done = 0; done < length;) {
        uint64_t piece = PAGE - (offset + done) % PAGE;
        if (piece > length - done)
            piece = length - done;
        uint8_t *dst = out + done;
        switch ((kind + done / PAGE) % 8) {
        case 0: /* zeros */
            memset(dst, 0, piece);
            break;
        case 1: { /* one word repeated (aligned to the page, so a whole page is same-filled) */
            uint64_t word = seed;
            for (uint64_t i = 0; i < piece; i++)
                dst[i] = (uint8_t)(word >> (((offset + done + i) % 8) * 8));
            break;
        }
        case 2: /* random: stored huge */
            for (uint64_t i = 0; i < piece; i++)
                dst[i] = (uint8_t)next_random(&seed);
            break;
        case 3: /* compressible: short runs of a few symbols */
            for (uint64_t i = 0; i < piece; i++)
                dst[i] = (uint8_t)("abcab  \n"[(seed >> (i % 61)) % 8]);
            break;
        case 4:
        case 5: /* a palette page: dedup shares these */
            memcpy(dst, palette[seed % PALETTE] + (offset + done) % PAGE, piece);
            break;
        case 6: /* a copy of what the disk holds elsewhere */
            memcpy(dst, model + (seed % (DISK - piece)), piece);
            break;
        default: { /* the input's own bytes, patched into what the disk holds there */
            uint64_t from = (offset + done) % DISK;
            memcpy(dst, model + (from <= DISK - piece ? from : DISK - piece), piece);
            for (uint64_t i = 0; i < piece && i < 16; i++)
                dst[(seed + i * 97) % piece] = get8(in);
            break;
        }
        }
        done += piece;
    }
}

static struct uzram_stats stats_of(struct state *st)
{
    struct uzram_stats s;
    CHECK(uzram_get_stats(st->dev, &s, sizeof s) == 0, "get_stats");
    return s;
}

static void check_stats(struct state *st)
{
    struct uzram_stats s = stats_of(st);
    CHECK(s.orig_data_size == s.pages_stored * PAGE, "%llu", (unsigned long long)s.pages_stored);
    CHECK(s.pages_stored <= PAGES, "%llu", (unsigned long long)s.pages_stored);
    CHECK(s.same_pages <= s.pages_stored && s.zero_pages <= s.same_pages, "same %llu zero %llu",
          (unsigned long long)s.same_pages, (unsigned long long)s.zero_pages);
    CHECK(s.huge_pages + s.same_pages <= s.pages_stored, "huge %llu",
          (unsigned long long)s.huge_pages);
    CHECK(s.huge_pages <= s.huge_pages_since, "huge %llu since %llu",
          (unsigned long long)s.huge_pages, (unsigned long long)s.huge_pages_since);
    CHECK(s.compr_data_size <= s.mem_used_total, "compr %llu mem %llu",
          (unsigned long long)s.compr_data_size, (unsigned long long)s.mem_used_total);
    CHECK((s.compr_data_size == 0) == (s.mem_used_total == 0), "compr %llu mem %llu",
          (unsigned long long)s.compr_data_size, (unsigned long long)s.mem_used_total);
    CHECK(s.mem_used_total <= s.mem_used_max, "mem %llu max %llu",
          (unsigned long long)s.mem_used_total, (unsigned long long)s.mem_used_max);
    CHECK(s.invalid_io == st->invalid_io, "invalid_io %llu expected %llu",
          (unsigned long long)s.invalid_io, (unsigned long long)st->invalid_io);
    CHECK(s.failed_writes == st->failed_writes, "failed_writes %llu expected %llu",
          (unsigned long long)s.failed_writes, (unsigned long long)st->failed_writes);
    CHECK(s.mem_limit == st->mem_limit, "mem_limit");
    CHECK(s.failed_reads == 0, "failed_reads %llu", (unsigned long long)s.failed_reads);
    if (!st->dev->dedup)
        CHECK(s.dup_data_size == 0 && s.meta_data_size == s.bundle_mem,
              "dedup counters without dedup (meta_data_size %llu: bundles' records only)",
              (unsigned long long)s.meta_data_size);
    char text[2048];
    CHECK(uzram_format_mm_stat(&s, text, sizeof text) > 0, "mm_stat");
    CHECK(uzram_format_io_stat(&s, text, sizeof text) > 0, "io_stat");
    CHECK(uzram_format_json(&s, text, sizeof text) > 0, "json");
}

/* After a write-like call on a valid range: rc 0 means the whole range is
 * new; -ENOSPC (only with a limit) means new pages up to some page, old
 * from there. `fresh` holds the new bytes of the range. */
static void settle_write(struct state *st, int rc, uint64_t offset, uint64_t length,
                         const uint8_t *fresh)
{
    if (rc == 0 || length == 0) {
        CHECK(rc == 0, "rc %d on an empty range", rc);
        memcpy(model + offset, fresh, length);
        return;
    }
    CHECK(rc == -ENOSPC && st->mem_limit != 0, "write-like call failed: %d (limit %llu)", rc,
          (unsigned long long)st->mem_limit);
    st->failed_writes++;
    uint64_t first = offset / PAGE * PAGE;
    uint64_t end = (offset + length + PAGE - 1) / PAGE * PAGE;
    CHECK(uzram_read(st->dev, first, readback, end - first) == 0, "read back");
    bool new_part = true;
    for (uint64_t page = first; page < end; page += PAGE) {
        /* The new content of this page: old bytes patched with `fresh`. */
        uint8_t expect[PAGE];
        memcpy(expect, model + page, PAGE);
        uint64_t lo = page > offset ? page : offset;
        uint64_t hi = page + PAGE < offset + length ? page + PAGE : offset + length;
        memcpy(expect + (lo - page), fresh + (lo - offset), hi - lo);
        const uint8_t *now = readback + (page - first);
        if (new_part && memcmp(now, expect, PAGE) != 0)
            new_part = false;
        if (!new_part)
            CHECK(memcmp(now, model + page, PAGE) == 0, "page %llu of a failed write is mixed",
                  (unsigned long long)(page / PAGE));
    }
    memcpy(model + first, readback, end - first);
}

static void op_write(struct state *st, struct input *in)
{
    uint64_t offset, length;
    get_range(in, &offset, &length);
    bool valid = range_valid(offset, length);
    make_content(in, buffer, offset, length);
    int rc = uzram_write(st->dev, offset, buffer, length);
    if (!valid) {
        CHECK(rc == -EINVAL, "invalid write gave %d", rc);
        st->invalid_io++;
        return;
    }
    settle_write(st, rc, offset, length, buffer);
}

static void op_zero(struct state *st, struct input *in, int how)
{
    uint64_t offset, length;
    get_range(in, &offset, &length);
    bool valid = range_valid(offset, length);
    int rc = how == 0 ? uzram_discard(st->dev, offset, length)
                      : uzram_write_zeroes(st->dev, offset, length, how == 2);
    if (!valid) {
        CHECK(rc == -EINVAL, "invalid discard gave %d", rc);
        st->invalid_io++;
        return;
    }
    memset(buffer, 0, length);
    settle_write(st, rc, offset, length, buffer);
}

static void op_read(struct state *st, struct input *in)
{
    uint64_t offset, length;
    get_range(in, &offset, &length);
    bool valid = range_valid(offset, length);
    int rc = uzram_read(st->dev, offset, readback, length);
    if (!valid) {
        CHECK(rc == -EINVAL, "invalid read gave %d", rc);
        st->invalid_io++;
        return;
    }
    CHECK(rc == 0, "read failed: %d", rc);
    CHECK(memcmp(readback, model + offset, length) == 0, "read at %llu+%llu differs",
          (unsigned long long)offset, (unsigned long long)length);
}

static void op_extent(struct state *st, struct input *in)
{
    uint64_t offset = get32(in) % (DISK + PAGE);
    uint64_t length = get32(in) % (DISK + PAGE);
    uint64_t run = 0;
    unsigned flags = 0;
    int rc = uzram_extent(st->dev, offset, length, &run, &flags);
    if (length == 0 || offset >= DISK || length > DISK - offset) {
        CHECK(rc == -EINVAL, "invalid extent gave %d", rc);
        st->invalid_io++;
        return;
    }
    CHECK(rc == 0 && run > 0 && run <= length, "extent rc %d run %llu", rc,
          (unsigned long long)run);
    CHECK((offset + run) % PAGE == 0 || run == length, "run ends inside a page");
    CHECK(!(flags & UZRAM_EXTENT_HOLE) || (flags & UZRAM_EXTENT_ZERO), "hole not zero");
    if (flags & UZRAM_EXTENT_ZERO)
        CHECK(all_zero(model + offset, run), "extent says zero at %llu+%llu, it is not",
              (unsigned long long)offset, (unsigned long long)run);
}

/* Settings zram only takes on an empty device: accepted exactly when no
 * page is stored. */
static void expect_settable(struct state *st, int rc, bool stored)
{
    if (stored) {
        CHECK(rc == -EBUSY, "setting changed on a device holding data: %d", rc);
    } else {
        CHECK(rc == 0, "setting refused on an empty device: %d", rc);
    }
    (void)st;
}

static void note_dedup(struct state *st)
{
    if (st->dev->dedup && !st->meta_baseline)
        st->meta_baseline = stats_of(st).meta_data_size;
}

static void op_setting(struct state *st, struct input *in)
{
    uint8_t which = get8(in);
    bool stored = stats_of(st).pages_stored != 0;
    if (!stored)
        CHECK(model_empty(), "no page stored but the model holds data");
    int rc;
    switch (which % 3) {
    case 0:
        rc = uzram_set_dedup(st->dev, !atomic_load(&st->dev->use_dedup));
        expect_settable(st, rc, stored);
        note_dedup(st);
        break;
    case 1:
        rc = uzram_set_same_filled(st->dev, !atomic_load(&st->dev->same_filled));
        expect_settable(st, rc, stored);
        break;
    default: {
        const char *name = algorithms[(which >> 2) % 5];
        int min, max, dflt;
        CHECK(uzram_algorithm_levels(name, &min, &max, &dflt) == 0, "levels");
        int level = (int8_t)get8(in);
        bool level_ok = level == 0 || (level >= min && level <= max);
        rc = uzram_set_algorithm(st->dev, name, level);
        if (!level_ok)
            CHECK(rc == -EINVAL, "level %d accepted for %s: %d", level, name, rc);
        else
            expect_settable(st, rc, stored);
        break;
    }
    }
}

static void op_attr(struct state *st, struct input *in)
{
    const char *name = attributes[get8(in) % (sizeof attributes / sizeof attributes[0])];
    char value[24];
    size_t n = get8(in) % sizeof value;
    for (size_t i = 0; i < n; i++)
        value[i] = (char)get8(in);
    value[n] = '\0';
    char out[2048];
    int rc = uzram_attr_get(st->dev, name, out, sizeof out);
    CHECK(rc > 0 || rc == -ENOENT || rc == -EACCES, "attr_get %s: %d", name, rc);
    if (rc > 0)
        CHECK((size_t)rc == strlen(out) && out[rc - 1] == '\n', "attr_get %s format", name);

    /* A reset drops the data; changing settings may only fail when the
     * device holds data. mem_limit and reset are followed in the model. */
    bool stored = stats_of(st).pages_stored != 0;
    rc = uzram_attr_set(st->dev, name, value);
    CHECK(rc == 0 || rc == -ENOENT || rc == -EACCES || rc == -EINVAL || rc == -ERANGE ||
              (rc == -EBUSY && stored),
          "attr_set %s=\"%s\": %d", name, value, rc);
    if (rc == 0 && strcmp(name, "reset") == 0) {
        memset(model, 0, DISK);
        st->invalid_io = 0;
        st->failed_writes = 0;
    }
    struct uzram_config config;
    uzram_get_config(st->dev, &config);
    st->mem_limit = config.mem_limit;
    note_dedup(st);
}

/* Mark everything idle (or not) and recompress: pages change form (bundles among them, with
 * bit 7 of the settings), never content. */
static void op_recompress(struct state *st, struct input *in)
{
    uint8_t how = get8(in);
    if (how & 1)
        CHECK(uzram_mark_idle(st->dev, 0, NULL) == 0, "mark_idle");
    int rc = uzram_recompress(st->dev, how & 2 ? UZRAM_RECOMPRESS_IDLE : 0, 0, 0, 0, NULL);
    CHECK(rc == 0 || rc == -ENOENT || (st->mem_limit && rc == -ENOSPC), "recompress: %d", rc);
    CHECK(uzram_read(st->dev, 0, readback, DISK) == 0, "read after recompress");
    CHECK(memcmp(readback, model, DISK) == 0, "recompression changed the disk");
}

static void run_op(struct state *st, struct input *in)
{
    uint8_t op = get8(in);
    switch (op % 14) {
    case 0:
    case 1:
    case 2:
        op_write(st, in);
        break;
    case 3:
        op_read(st, in);
        break;
    case 4:
        op_zero(st, in, 0);
        break;
    case 5:
        op_zero(st, in, 1 + (op >> 7));
        break;
    case 6: {
        uint64_t freed = ~0ull;
        CHECK(uzram_compact(st->dev, &freed) == 0 && freed != ~0ull, "compact");
        break;
    }
    case 7:
        CHECK(uzram_reset(st->dev) == 0, "reset");
        memset(model, 0, DISK);
        st->invalid_io = 0;
        st->failed_writes = 0;
        {
            struct uzram_stats s = stats_of(st);
            CHECK(s.pages_stored == 0 && s.compr_data_size == 0 && s.mem_used_total == 0 &&
                      s.dup_data_size == 0 && s.huge_pages == 0 && s.same_pages == 0,
                  "counters after reset");
        }
        break;
    case 8: {
        uint16_t pages = get16(in) % 512;
        st->mem_limit = (uint64_t)pages * PAGE;
        CHECK(uzram_set_mem_limit(st->dev, st->mem_limit) == 0, "set_mem_limit");
        break;
    }
    case 9:
        op_setting(st, in);
        break;
    case 10:
        op_extent(st, in);
        break;
    case 11:
        op_attr(st, in);
        break;
    case 12:
        check_stats(st);
        break;
    default:
        if (op & 0x80)
            op_recompress(st, in);
        else
            CHECK(uzram_reset_mem_used_max(st->dev) == 0, "reset_mem_used_max");
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, size, 0};
    uint8_t settings = get8(&in);
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK;
    config.comp_algorithm = algorithms[(settings & 7) % 5];
    config.use_dedup = settings & 0x08;
    config.same_filled = !(settings & 0x10);
    config.mem_limit = settings & 0x40 ? 256u * 1024u : 0;

    struct state st = {.mem_limit = config.mem_limit};
    op_index = -1;
    CHECK(uzram_create(&config, &st.dev) == 0, "create");
    if ((settings & 0x20) && st.dev->dedup)
        dedup_force_collisions(st.dev->dedup, true);
    if (settings & 0x80)
        CHECK(uzram_set_recomp_algorithm(st.dev, 1, "zstd", 0) == 0 &&
                  uzram_set_recompress_group(st.dev, 4) == 0,
              "recompression settings");
    note_dedup(&st);

    memset(model, 0, sizeof model);
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ settings;
    for (int p = 0; p < PALETTE; p++)
        for (size_t i = 0; i < PAGE; i++)
            palette[p][i] =
                p % 2 ? (uint8_t)("xyz \n"[next_random(&seed) % 5]) : (uint8_t)(i / 64 + p);

    for (op_index = 0; op_index < MAX_OPS && in.pos < in.size; op_index++)
        run_op(&st, &in);

    /* The whole disk must match, the counters must add up, and dropping
     * every page must give all memory back. */
    op_index = -2;
    CHECK(uzram_read(st.dev, 0, readback, DISK) == 0, "final read");
    for (size_t page = 0; page < PAGES; page++)
        CHECK(memcmp(readback + page * PAGE, model + page * PAGE, PAGE) == 0,
              "page %zu differs at the end", page);
    check_stats(&st);
    CHECK(uzram_discard(st.dev, 0, DISK) == 0, "final discard");
    /* the dedup index grows with its entries; compaction gives that back */
    CHECK(uzram_compact(st.dev, NULL) == 0, "final compact");
    struct uzram_stats s = stats_of(&st);
    CHECK(s.dedup_entries == 0, "dedup_entries %llu after discarding everything",
          (unsigned long long)s.dedup_entries);
    CHECK(s.pages_stored == 0 && s.orig_data_size == 0 && s.compr_data_size == 0 &&
              s.mem_used_total == 0 && s.dup_data_size == 0 && s.same_pages == 0 &&
              s.zero_pages == 0 && s.huge_pages == 0,
          "memory left after discarding everything: compr %llu mem %llu stored %llu",
          (unsigned long long)s.compr_data_size, (unsigned long long)s.mem_used_total,
          (unsigned long long)s.pages_stored);
    CHECK(s.meta_data_size == st.meta_baseline, "meta_data_size %llu, empty index %llu",
          (unsigned long long)s.meta_data_size, (unsigned long long)st.meta_baseline);
    uzram_destroy(st.dev);
    return 0;
}
