/* test_stats_attr.c - unit tests of the statistics text forms and the attributes by name.
 * mm_stat/io_stat/JSON formats, every counter in every form, and dedup accounting (the
 * attributes by name and size parsing: test_attr.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define DISK_SIZE ((uint64_t)TEST_DEVICE_PAGES * PAGE) /* test_setup_device() */

static int setup_dedup_device(void **state)
{
    *state = test_device(DISK_SIZE, NULL, 1);
    return 0;
}

/* A stats struct whose every field has a distinct value, so a field in
 * the wrong place is caught. */
static struct uzram_stats distinct_stats(void)
{
    struct uzram_stats s;
    memset(&s, 0, sizeof s);
    s.orig_data_size = 1000001;
    s.compr_data_size = 1000002;
    s.mem_used_total = 1000003;
    s.mem_limit = 1000004;
    s.mem_used_max = 1000005;
    s.same_pages = 1000006;
    s.pages_compacted = 1000007;
    s.huge_pages = 1000008;
    s.huge_pages_since = 1000009;
    s.dup_data_size = 1000010;
    s.meta_data_size = UINT64_MAX; /* the widest value must print whole */
    s.failed_reads = 2000001;
    s.failed_writes = 2000002;
    s.invalid_io = 2000003;
    s.notify_free = 2000004;
    s.dedup_hash_collisions = 3000001;
    s.pages_stored = 3000002;
    s.zero_pages = 3000003;
    return s;
}

/* ------------------------------------------------------------------------
 * Text forms
 * ---------------------------------------------------------------------- */

static void test_mm_stat_format(void **state)
{
    (void)state;
    struct uzram_stats s = distinct_stats();
    char buf[256];
    int length = uzram_format_mm_stat(&s, buf, sizeof buf);
    assert_true(length > 0);
    assert_int_equal((size_t)length, strlen(buf));
    uint64_t fields[16];
    assert_int_equal(test_parse_fields(buf, fields, 16), 11);
    /* zram's nine in zram's order, then the dedup seed's two. */
    assert_int_equal(fields[0], s.orig_data_size);
    assert_int_equal(fields[1], s.compr_data_size);
    assert_int_equal(fields[2], s.mem_used_total);
    assert_int_equal(fields[3], s.mem_limit);
    assert_int_equal(fields[4], s.mem_used_max);
    assert_int_equal(fields[5], s.same_pages);
    assert_int_equal(fields[6], s.pages_compacted);
    assert_int_equal(fields[7], s.huge_pages);
    assert_int_equal(fields[8], s.huge_pages_since);
    assert_int_equal(fields[9], s.dup_data_size);
    assert_true(fields[10] == UINT64_MAX);

    /* All zeros prints eleven zeros. */
    memset(&s, 0, sizeof s);
    length = uzram_format_mm_stat(&s, buf, sizeof buf);
    assert_true(length > 0);
    assert_int_equal(test_parse_fields(buf, fields, 16), 11);
    for (int i = 0; i < 11; i++)
        assert_int_equal(fields[i], 0);
}

static void test_io_stat_format(void **state)
{
    (void)state;
    struct uzram_stats s = distinct_stats();
    char buf[256];
    int length = uzram_format_io_stat(&s, buf, sizeof buf);
    assert_true(length > 0);
    assert_int_equal((size_t)length, strlen(buf));
    uint64_t fields[8];
    assert_int_equal(test_parse_fields(buf, fields, 8), 4);
    assert_int_equal(fields[0], s.failed_reads);
    assert_int_equal(fields[1], s.failed_writes);
    assert_int_equal(fields[2], s.invalid_io);
    assert_int_equal(fields[3], s.notify_free);
}

/* A small strict JSON parser: enough to prove the text is valid JSON and to
 * pull out every "key": number pair at any depth. */
struct json {
    const char *p;
    bool ok;
    int keys;
    char names[64][48];
    uint64_t values[64];
    bool numeric[64];
};

static void json_space(struct json *j)
{
    while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
        j->p++;
}

static bool json_string(struct json *j, char *out, size_t size)
{
    if (*j->p != '"')
        return false;
    j->p++;
    size_t n = 0;
    while (*j->p && *j->p != '"') {
        if ((unsigned char)*j->p < 0x20)
            return false;
        if (*j->p == '\\') {
            j->p++;
            if (!strchr("\"\\/bfnrtu", *j->p) || !*j->p)
                return false;
        }
        if (out && n + 1 < size)
            out[n++] = *j->p;
        j->p++;
    }
    if (*j->p != '"')
        return false;
    j->p++;
    if (out)
        out[n] = '\0';
    return true;
}

static bool json_value(struct json *j, uint64_t *number, bool *is_number);

static bool json_number(struct json *j, uint64_t *number)
{
    const char *start = j->p;
    if (*j->p == '-')
        j->p++;
    if (*j->p < '0' || *j->p > '9')
        return false;
    if (*j->p == '0' && j->p[1] >= '0' && j->p[1] <= '9')
        return false; /* leading zeros are not JSON */
    while (*j->p >= '0' && *j->p <= '9')
        j->p++;
    bool integer = true;
    if (*j->p == '.') {
        integer = false;
        j->p++;
        if (*j->p < '0' || *j->p > '9')
            return false;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (*j->p == 'e' || *j->p == 'E') {
        integer = false;
        j->p++;
        if (*j->p == '+' || *j->p == '-')
            j->p++;
        if (*j->p < '0' || *j->p > '9')
            return false;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    *number = integer && *start != '-' ? strtoull(start, NULL, 10) : 0;
    return true;
}

static bool json_object(struct json *j)
{
    j->p++; /* '{' */
    json_space(j);
    if (*j->p == '}') {
        j->p++;
        return true;
    }
    for (;;) {
        char key[48];
        json_space(j);
        if (!json_string(j, key, sizeof key))
            return false;
        json_space(j);
        if (*j->p != ':')
            return false;
        j->p++;
        json_space(j);
        uint64_t number = 0;
        bool is_number = false;
        if (!json_value(j, &number, &is_number))
            return false;
        if (j->keys < 64) {
            snprintf(j->names[j->keys], sizeof j->names[0], "%s", key);
            j->values[j->keys] = number;
            j->numeric[j->keys] = is_number;
            j->keys++;
        }
        json_space(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == '}') {
            j->p++;
            return true;
        }
        return false;
    }
}

static bool json_array(struct json *j)
{
    j->p++; /* '[' */
    json_space(j);
    if (*j->p == ']') {
        j->p++;
        return true;
    }
    for (;;) {
        uint64_t number;
        bool is_number;
        json_space(j);
        if (!json_value(j, &number, &is_number))
            return false;
        json_space(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == ']') {
            j->p++;
            return true;
        }
        return false;
    }
}

static bool json_value(struct json *j, uint64_t *number, bool *is_number)
{
    *is_number = false;
    switch (*j->p) {
    case '{':
        return json_object(j);
    case '[':
        return json_array(j);
    case '"':
        return json_string(j, NULL, 0);
    case 't':
        return strncmp(j->p, "true", 4) == 0 && (j->p += 4);
    case 'f':
        return strncmp(j->p, "false", 5) == 0 && (j->p += 5);
    case 'n':
        return strncmp(j->p, "null", 4) == 0 && (j->p += 4);
    default:
        *is_number = true;
        return json_number(j, number);
    }
}

static bool json_parse(struct json *j, const char *text)
{
    memset(j, 0, sizeof *j);
    j->p = text;
    json_space(j);
    if (*j->p != '{' || !json_object(j))
        return false;
    json_space(j);
    return *j->p == '\0';
}

static void expect_json_key(const struct json *j, const char *key, uint64_t value)
{
    for (int i = 0; i < j->keys; i++) {
        if (strcmp(j->names[i], key) == 0) {
            if (!j->numeric[i] || j->values[i] != value)
                fail_msg("JSON key \"%s\": %s %llu, expected %llu", key,
                         j->numeric[i] ? "value" : "not a number", (unsigned long long)j->values[i],
                         (unsigned long long)value);
            return;
        }
    }
    fail_msg("JSON has no key \"%s\"", key);
}

static void test_json_format(void **state)
{
    (void)state;
    struct uzram_stats s = distinct_stats();
    char buf[2048];
    int length = uzram_format_json(&s, buf, sizeof buf);
    assert_true(length > 0);
    assert_int_equal((size_t)length, strlen(buf));
    assert_int_equal(buf[length - 1], '\n');
    struct json j;
    if (!json_parse(&j, buf))
        fail_msg("not valid JSON near \"%.30s\": %s", j.p, buf);
#define KEY(field) expect_json_key(&j, #field, s.field)
    KEY(orig_data_size);
    KEY(compr_data_size);
    KEY(mem_used_total);
    KEY(mem_limit);
    KEY(mem_used_max);
    KEY(same_pages);
    KEY(pages_compacted);
    KEY(huge_pages);
    KEY(huge_pages_since);
    KEY(dup_data_size);
    KEY(meta_data_size);
    KEY(failed_reads);
    KEY(failed_writes);
    KEY(invalid_io);
    KEY(notify_free);
    KEY(dedup_hash_collisions);
    KEY(pages_stored);
    KEY(zero_pages);
#undef KEY
    /* The validator itself rejects broken JSON. */
    assert_false(json_parse(&j, "{\"a\": 1,}"));
    assert_false(json_parse(&j, "{\"a\" 1}"));
    assert_false(json_parse(&j, "{\"a\": 01}"));
    assert_false(json_parse(&j, "{\"a\": 1} x"));
    assert_true(json_parse(&j, "{\"a\": {\"b\": [1, 2.5, \"x\", true, null]}}\n"));
}

/* Every size up to the length needed (including its NUL) is -ERANGE, the
 * exact size fits, and a failed call never overruns `size`. */
static void expect_erange(int (*format)(const struct uzram_stats *, char *, size_t))
{
    struct uzram_stats s = distinct_stats();
    char full[2048];
    int length = format(&s, full, sizeof full);
    assert_true(length > 0);
    char *buf = malloc((size_t)length + 1);
    for (int size = 0; size <= length; size++) {
        int rc = format(&s, buf, (size_t)size);
        if (rc != -ERANGE)
            fail_msg("size %d of needed %d: returned %d, expected -ERANGE", size, length + 1, rc);
    }
    /* Exactly enough; heap-allocated so ASan sees any overrun. */
    assert_int_equal(format(&s, buf, (size_t)length + 1), length);
    assert_string_equal(buf, full);
    free(buf);
}

static void test_format_erange(void **state)
{
    (void)state;
    expect_erange(uzram_format_mm_stat);
    expect_erange(uzram_format_io_stat);
    expect_erange(uzram_format_bd_stat);
    expect_erange(uzram_format_json);
}

/* ------------------------------------------------------------------------
 * The list of counters, and every form that follows it
 * ---------------------------------------------------------------------- */

/* The list as this test was compiled against it. */
static const struct {
    const char *name;
    const char *form;
    size_t offset;
    int kind;
    const char *help;
} listed[] = {
#define LISTED(name, form, kind, help)                                                             \
    {#name, #form, offsetof(struct uzram_stats, name), UZRAM_STAT_##kind, help},
    UZRAM_STATS(LISTED)
#undef LISTED
};
#define LISTED_COUNT (sizeof listed / sizeof listed[0])

static uint64_t listed_value(const struct uzram_stats *s, size_t i)
{
    uint64_t value;
    memcpy(&value, (const char *)s + listed[i].offset, sizeof value);
    return value;
}

static void test_stat_iteration(void **state)
{
    (void)state;
    struct uzram_stats s = distinct_stats();
    assert_int_equal(uzram_stat_count(), LISTED_COUNT);
    assert_int_equal(sizeof s, LISTED_COUNT * sizeof(uint64_t));
    for (size_t i = 0; i < LISTED_COUNT; i++) {
        assert_string_equal(uzram_stat_name(i), listed[i].name);
        assert_true(uzram_stat_value(&s, sizeof s, i) == listed_value(&s, i));
        /* a smaller snapshot has no such field */
        assert_true(uzram_stat_value(&s, listed[i].offset, i) == 0);
        /* every counter is described, in one line, and is a level or a count of events */
        assert_string_equal(uzram_stat_help(i), listed[i].help);
        assert_true(strlen(listed[i].help) > 10 && strchr(listed[i].help, '\n') == NULL);
        assert_int_equal(uzram_stat_kind(i), listed[i].kind);
        assert_true(listed[i].kind == UZRAM_STAT_LEVEL || listed[i].kind == UZRAM_STAT_EVENTS);
    }
    assert_null(uzram_stat_name(LISTED_COUNT));
    assert_null(uzram_stat_help(LISTED_COUNT));
    assert_int_equal(uzram_stat_kind(LISTED_COUNT), -EINVAL);
    assert_true(uzram_stat_value(&s, sizeof s, LISTED_COUNT) == 0);
    assert_true(uzram_stat_value(NULL, sizeof s, 0) == 0);
}

/* Every counter of the list appears in JSON (by name, with its value), in
 * the attribute stat_json, in mm_stat/io_stat by position within its form,
 * and in debug_stat as "name: value". */
static void test_every_counter_in_every_form(void **state)
{
    struct uzram *dev = *state;
    uint8_t page[PAGE];
    memset(page, 0, sizeof page);
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    assert_int_equal(uzram_read(dev, 1, page, 512), -EINVAL);
    struct uzram_stats device_stats = test_stats(dev);
    const struct uzram_stats distinct = distinct_stats();
    const struct uzram_stats *const snapshots[] = {&distinct, &device_stats};

    for (size_t k = 0; k < 2; k++) {
        const struct uzram_stats *s = snapshots[k];
        char json_text[2048], mm[256], io[256], bd[256];
        char debug[1024] = "";
        assert_true(uzram_format_json(s, json_text, sizeof json_text) > 0);
        assert_true(uzram_format_mm_stat(s, mm, sizeof mm) > 0);
        assert_true(uzram_format_io_stat(s, io, sizeof io) > 0);
        assert_true(uzram_format_bd_stat(s, bd, sizeof bd) > 0);
        if (k == 1) {
            char got[2048];
            assert_true(uzram_attr_get(dev, "stat_json", got, sizeof got) > 0);
            assert_string_equal(got, json_text);
            assert_true(uzram_attr_get(dev, "debug_stat", debug, sizeof debug) > 0);
            assert_true(strncmp(debug, "version: 1\n", 11) == 0);
        }
        struct json j;
        assert_true(json_parse(&j, json_text));
        assert_int_equal(j.keys, LISTED_COUNT);
        uint64_t mm_fields[32], io_fields[32], bd_fields[32];
        int mm_count = test_parse_fields(mm, mm_fields, 32),
            io_count = test_parse_fields(io, io_fields, 32);
        int bd_count = test_parse_fields(bd, bd_fields, 32);
        int mm_index = 0, io_index = 0, bd_index = 0, debug_count = 0;
        for (size_t i = 0; i < LISTED_COUNT; i++) {
            uint64_t value = listed_value(s, i);
            assert_string_equal(j.names[i], listed[i].name); /* in list order */
            expect_json_key(&j, listed[i].name, value);
            if (strcmp(listed[i].form, "MM") == 0) {
                assert_true(mm_index < mm_count && mm_fields[mm_index] == value);
                mm_index++;
            } else if (strcmp(listed[i].form, "IO") == 0) {
                assert_true(io_index < io_count && io_fields[io_index] == value);
                io_index++;
            } else if (strcmp(listed[i].form, "BD") == 0) {
                assert_true(bd_index < bd_count && bd_fields[bd_index] == value);
                bd_index++;
            } else {
                assert_string_equal(listed[i].form, "DEBUG");
                debug_count++;
                if (k == 1) {
                    char line[128];
                    snprintf(line, sizeof line, "\n%s: %llu\n", listed[i].name,
                             (unsigned long long)value);
                    if (!strstr(debug, line))
                        fail_msg("debug_stat lacks \"%s\": %s", line + 1, debug);
                }
            }
        }
        /* nothing printed that the list does not have */
        assert_int_equal(mm_index, mm_count);
        assert_int_equal(io_index, io_count);
        assert_int_equal(bd_index, bd_count);
        assert_int_equal(bd_count, 3); /* zram's bd_stat */
        if (k == 1) {
            int lines = 0;
            for (const char *p = debug; *p; p++)
                lines += *p == '\n';
            assert_int_equal(lines, 1 + debug_count);
        }
    }
}

/* A program built against an older uzram.h, whose struct uzram_stats had
 * only the counters of mm_stat and io_stat (as a later library may add
 * counters to today's), gets exactly the fields it knows; one built
 * against a newer header gets zeros in the fields this library lacks. */
struct older_uzram_stats {
    uint64_t orig_data_size, compr_data_size, mem_used_total, mem_limit, mem_used_max, same_pages,
        pages_compacted, huge_pages, huge_pages_since, dup_data_size, meta_data_size;
    uint64_t failed_reads, failed_writes, invalid_io, notify_free;
};

struct newer_uzram_stats {
    struct uzram_stats known;
    uint64_t later_counter[3];
};

static void test_stats_of_other_struct_sizes(void **state)
{
    struct uzram *dev = *state;
    unsigned char page[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 7);
    for (uint64_t i = 0; i < 8; i++) {
        datagen_fill(&rng, i % 2 ? DATAGEN_TEXT : DATAGEN_SAME, page, PAGE);
        assert_int_equal(uzram_write(dev, i * PAGE, page, PAGE), 0);
    }
    assert_int_equal(uzram_discard(dev, 0, PAGE), 0);
    assert_int_equal(uzram_write(dev, 3, page, 1), -EINVAL);
    struct uzram_stats now = test_stats(dev);

    /* the older struct sits in a larger buffer: nothing past it is touched */
    union {
        struct older_uzram_stats stats;
        unsigned char bytes[sizeof(struct older_uzram_stats) + 64];
    } older;
    memset(&older, 0xa5, sizeof older);
    assert_int_equal(uzram_get_stats(dev, (struct uzram_stats *)&older.stats, sizeof older.stats),
                     0);
    for (size_t i = sizeof older.stats; i < sizeof older.bytes; i++)
        assert_int_equal(older.bytes[i], 0xa5);
#define SAME_FIELD(field) assert_true(older.stats.field == now.field)
    SAME_FIELD(orig_data_size);
    SAME_FIELD(compr_data_size);
    SAME_FIELD(mem_used_total);
    SAME_FIELD(mem_limit);
    SAME_FIELD(mem_used_max);
    SAME_FIELD(same_pages);
    SAME_FIELD(pages_compacted);
    SAME_FIELD(huge_pages);
    SAME_FIELD(huge_pages_since);
    SAME_FIELD(dup_data_size);
    SAME_FIELD(meta_data_size);
    SAME_FIELD(failed_reads);
    SAME_FIELD(failed_writes);
    SAME_FIELD(invalid_io);
    SAME_FIELD(notify_free);
#undef SAME_FIELD
    assert_true(older.stats.orig_data_size == 7 * PAGE);
    assert_true(older.stats.same_pages == 3);
    assert_true(older.stats.invalid_io == 1);
    assert_true(older.stats.notify_free == 1);

    struct newer_uzram_stats newer;
    memset(&newer, 0xa5, sizeof newer);
    assert_int_equal(uzram_get_stats(dev, &newer.known, sizeof newer), 0);
    assert_memory_equal(&newer.known, &now, sizeof now);
    for (size_t i = 0; i < 3; i++)
        assert_true(newer.later_counter[i] == 0);

    assert_int_equal(uzram_get_stats(dev, NULL, sizeof now), -EINVAL);
}

/* ------------------------------------------------------------------------
 * Dedup accounting
 * ---------------------------------------------------------------------- */

static void test_dedup_accounting(void **state)
{
    struct uzram *dev = *state;
    uint8_t page[PAGE], got[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 7);
    datagen_fill(&rng, DATAGEN_TEXT, page, PAGE);

    struct uzram_stats s0 = test_stats(dev);
    assert_int_equal(s0.dup_data_size, 0);
    uint64_t meta_before = s0.meta_data_size;

    assert_int_equal(uzram_write(dev, 10 * PAGE, page, PAGE), 0);
    struct uzram_stats s1 = test_stats(dev);
    uint64_t object = s1.compr_data_size;
    assert_true(object > 0 && object < PAGE);
    assert_int_equal(s1.dup_data_size, 0);
    assert_true(s1.meta_data_size >= meta_before);

    /* The same content at another offset: a reference, nothing new. */
    assert_int_equal(uzram_write(dev, 50 * PAGE, page, PAGE), 0);
    struct uzram_stats s2 = test_stats(dev);
    assert_int_equal(s2.orig_data_size, 2 * PAGE);
    assert_int_equal(s2.pages_stored, 2);
    assert_int_equal(s2.compr_data_size, object);
    assert_int_equal(s2.dup_data_size, object);
    assert_int_equal(s2.mem_used_total, s1.mem_used_total);
    assert_int_equal(s2.meta_data_size, s1.meta_data_size);

    /* A third copy. */
    assert_int_equal(uzram_write(dev, 51 * PAGE, page, PAGE), 0);
    struct uzram_stats s3 = test_stats(dev);
    assert_int_equal(s3.dup_data_size, 2 * object);
    assert_int_equal(s3.compr_data_size, object);
    assert_int_equal(s3.orig_data_size, 3 * PAGE);

    for (unsigned p = 10; p <= 51; p += 41) {
        assert_int_equal(uzram_read(dev, (uint64_t)p * PAGE, got, PAGE), 0);
        assert_memory_equal(got, page, PAGE);
    }

    /* Overwriting one copy drops only its reference. */
    uint8_t other[PAGE];
    datagen_fill(&rng, DATAGEN_HALF, other, PAGE);
    assert_int_equal(uzram_write(dev, 51 * PAGE, other, PAGE), 0);
    struct uzram_stats s4 = test_stats(dev);
    assert_int_equal(s4.dup_data_size, object);
    assert_int_equal(uzram_read(dev, 10 * PAGE, got, PAGE), 0);
    assert_memory_equal(got, page, PAGE);
    assert_int_equal(uzram_read(dev, 51 * PAGE, got, PAGE), 0);
    assert_memory_equal(got, other, PAGE);
    assert_int_equal(uzram_discard(dev, 51 * PAGE, PAGE), 0);

    /* Discard the first: the object lives on for the second. */
    assert_int_equal(uzram_discard(dev, 10 * PAGE, PAGE), 0);
    struct uzram_stats s5 = test_stats(dev);
    assert_int_equal(s5.dup_data_size, 0);
    assert_int_equal(s5.compr_data_size, object);
    assert_int_equal(s5.orig_data_size, PAGE);
    assert_int_equal(uzram_read(dev, 50 * PAGE, got, PAGE), 0);
    assert_memory_equal(got, page, PAGE);

    /* Discard the last: everything back where it started. */
    assert_int_equal(uzram_discard(dev, 50 * PAGE, PAGE), 0);
    struct uzram_stats s6 = test_stats(dev);
    assert_int_equal(s6.dup_data_size, 0);
    assert_int_equal(s6.compr_data_size, 0);
    assert_int_equal(s6.orig_data_size, 0);
    assert_int_equal(s6.mem_used_total, 0);
    assert_int_equal(s6.meta_data_size, meta_before);

    /* mm_stat carries the two dedup fields in positions 10 and 11. */
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    assert_int_equal(uzram_write(dev, PAGE, page, PAGE), 0);
    struct uzram_stats s7 = test_stats(dev);
    char buf[256];
    assert_true(uzram_attr_get(dev, "mm_stat", buf, sizeof buf) > 0);
    uint64_t fields[16];
    assert_int_equal(test_parse_fields(buf, fields, 16), 11);
    assert_int_equal(fields[9], s7.dup_data_size);
    assert_int_equal(fields[9], object);
    assert_int_equal(fields[10], s7.meta_data_size);
}

static void test_dedup_same_filled_not_indexed(void **state)
{
    /* Same-filled pages are stored as a word before dedup sees them. */
    struct uzram *dev = *state;
    uint8_t page[PAGE];
    memset(page, 0x3c, PAGE);
    struct uzram_stats s0 = test_stats(dev);
    for (unsigned p = 0; p < 4; p++)
        assert_int_equal(uzram_write(dev, (uint64_t)p * PAGE, page, PAGE), 0);
    struct uzram_stats s1 = test_stats(dev);
    assert_int_equal(s1.same_pages, 4);
    assert_int_equal(s1.dup_data_size, 0);
    assert_int_equal(s1.compr_data_size, 0);
    assert_int_equal(s1.meta_data_size, s0.meta_data_size);
}

#define DEVICE_TEST(name)                                                                          \
    cmocka_unit_test_setup_teardown(name, test_setup_device, test_teardown_device)
#define DEDUP_TEST(name)                                                                           \
    cmocka_unit_test_setup_teardown(name, setup_dedup_device, test_teardown_device)

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mm_stat_format),
        cmocka_unit_test(test_io_stat_format),
        cmocka_unit_test(test_json_format),
        cmocka_unit_test(test_format_erange),
        cmocka_unit_test(test_stat_iteration),
        DEVICE_TEST(test_every_counter_in_every_form),
        DEVICE_TEST(test_stats_of_other_struct_sizes),
        DEDUP_TEST(test_dedup_accounting),
        DEDUP_TEST(test_dedup_same_filled_not_indexed),
    };
    return cmocka_run_group_tests_name("stats_attr", tests, NULL, NULL);
}
