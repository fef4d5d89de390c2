/* datagen.c - seeded page-content generators for `uzram bench`, the tests and the VM tools.
 * Generation is per page so any page can be made alone, in any order, by any thread. */
#include "common/datagen.h"

#include <string.h>

#define DATAGEN_PAGE_SIZE 4096u

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void datagen_rng_seed(struct datagen_rng *rng, uint64_t seed)
{
    /* xorshift must never hold 0, hence the | 1 */
    rng->state = splitmix64(seed) | 1;
}

uint64_t datagen_rng_next(struct datagen_rng *rng)
{
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545f4914f6cdd1dull;
}

uint64_t datagen_rng_below(struct datagen_rng *rng, uint64_t bound)
{
    return bound ? datagen_rng_next(rng) % bound : 0;
}

static const char *const kind_names[DATAGEN_KIND_COUNT] = {"zero", "same", "text", "half",
                                                           "random"};

const char *datagen_kind_name(enum datagen_kind kind)
{
    return (unsigned)kind < DATAGEN_KIND_COUNT ? kind_names[kind] : "?";
}

int datagen_kind_from_name(const char *name)
{
    if (strcmp(name, "same-filled") == 0)
        return DATAGEN_SAME;
    for (int kind = 0; kind < DATAGEN_KIND_COUNT; kind++)
        if (strcmp(name, kind_names[kind]) == 0)
            return kind;
    return -1;
}

void datagen_fill_compressible(struct datagen_rng *rng, unsigned percent, void *buf, size_t length)
{
    unsigned char *out = buf;
    size_t pos = 0;
    if (percent > 100)
        percent = 100;
    /* Runs of 8..31 bytes: long enough for an LZ match, short enough that
     * the mix is even at the scale of one page. */
    while (pos < length) {
        size_t run = 8 + datagen_rng_below(rng, 24);
        if (run > length - pos)
            run = length - pos;
        if (datagen_rng_below(rng, 100) < percent) {
            memset(out + pos, (int)datagen_rng_below(rng, 16), run);
            pos += run;
        } else {
            /* eight random bytes per draw keeps the generator off the profile */
            while (run > 0) {
                uint64_t word = datagen_rng_next(rng);
                size_t n = run < 8 ? run : 8;
                memcpy(out + pos, &word, n);
                pos += n;
                run -= n;
            }
        }
    }
}

static void fill_text(struct datagen_rng *rng, unsigned char *out, size_t length)
{
    static const char *const words[] = {
        "the",    "page",   "memory", "of",       "a",      "compressed", "block",
        "device", "is",     "kept",   "in",       "RAM",    "and",        "served",
        "over",   "NBD",    "to",     "clients",  "which",  "write",      "read",
        "data",   "with",   "zram",   "kernel",   "swap",   "build",      "tree",
        "object", "file",   "source", "function", "return", "int",        "struct",
        "static", "const",  "char",   "buffer",   "length", "offset",     "error",
        "lock",   "thread", "stats",  "size",     "index",  "hash",       "reference",
    };
    size_t n = sizeof words / sizeof words[0];
    size_t pos = 0;
    while (pos < length) {
        const char *word = words[datagen_rng_below(rng, n)];
        size_t len = strlen(word);
        for (size_t i = 0; i < len && pos < length; i++)
            out[pos++] = (unsigned char)word[i];
        if (pos < length)
            out[pos++] = datagen_rng_below(rng, 12) == 0 ? '\n' : ' ';
    }
}

void datagen_fill(struct datagen_rng *rng, enum datagen_kind kind, void *buf, size_t length)
{
    unsigned char *out = buf;
    switch (kind) {
    case DATAGEN_ZERO:
        memset(out, 0, length);
        return;
    case DATAGEN_SAME: {
        uint64_t word = datagen_rng_next(rng) | 1;
        for (size_t i = 0; i < length; i++)
            out[i] = (unsigned char)(word >> (8 * (i % 8)));
        return;
    }
    case DATAGEN_TEXT:
        fill_text(rng, out, length);
        return;
    case DATAGEN_HALF:
        datagen_fill_compressible(rng, DATAGEN_HALF_PERCENT, out, length);
        return;
    case DATAGEN_RANDOM:
    default:
        for (size_t i = 0; i < length; i += 8) {
            uint64_t word = datagen_rng_next(rng);
            memcpy(out + i, &word, length - i < 8 ? length - i : 8);
        }
        return;
    }
}

void datagen_page(uint64_t seed, enum datagen_kind kind, uint64_t index, void *page)
{
    unsigned char *out = page;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed ^ splitmix64(index * 8 + (uint64_t)kind));
    datagen_fill(&rng, kind, out, DATAGEN_PAGE_SIZE);
    if (kind == DATAGEN_ZERO || kind == DATAGEN_SAME)
        return;
    /* A unique stamp so that no two pages of a stream are identical, which
     * would otherwise happen now and then for text and let dedup cheat. */
    uint64_t stamp = splitmix64(seed + index);
    memcpy(out, &stamp, 8);
}
