/* datagen.h - seeded page-content generators for the uzram programs and tests.
 * Each page is a pure function of (seed, kind, page index), so runs and dumps repeat exactly. */
#ifndef UZRAM_DATAGEN_H
#define UZRAM_DATAGEN_H

#include <stddef.h>
#include <stdint.h>

/* xorshift64* seeded through splitmix64: fast, and distinct seeds give
 * distinct streams. Not for cryptography. */
struct datagen_rng {
    uint64_t state;
};
void datagen_rng_seed(struct datagen_rng *rng, uint64_t seed);
uint64_t datagen_rng_next(struct datagen_rng *rng);
/* Uniform in [0, bound); 0 when bound is 0. */
uint64_t datagen_rng_below(struct datagen_rng *rng, uint64_t bound);

/* Kinds of page content, from the cheapest to store to the dearest. */
enum datagen_kind {
    DATAGEN_ZERO,   /* all zero bytes */
    DATAGEN_SAME,   /* one non-zero 8-byte word repeated: a same-filled page */
    DATAGEN_TEXT,   /* English-like words: lz4 keeps about 40-50% */
    DATAGEN_HALF,   /* binary that lz4 shrinks to about 50% (DATAGEN_HALF_PERCENT) */
    DATAGEN_RANDOM, /* incompressible: stored huge */
    DATAGEN_KIND_COUNT
};

/* Knob setting of DATAGEN_HALF: with 68% of the bytes in runs, lz4 keeps
 * 50.3% of a page (measured); 50 would keep 64%, because random runs also
 * cost literal headers. */
#define DATAGEN_HALF_PERCENT 68

/* Short name ("zero", "same", "text", "half", "random"). */
const char *datagen_kind_name(enum datagen_kind kind);
/* Kind called `name` (also accepts "same-filled"), or -1. */
int datagen_kind_from_name(const char *name);

/* Fill `length` bytes with data of `kind` drawn from `rng` (any length; a
 * same-filled fill repeats one word byte by byte). */
void datagen_fill(struct datagen_rng *rng, enum datagen_kind kind, void *buf, size_t length);

/* Fill 4096-byte page number `index` of the stream (seed, kind). The first
 * eight bytes of every non-same, non-zero page hold a mix of the index, so
 * pages of one stream are all different (dedup finds nothing to share). */
void datagen_page(uint64_t seed, enum datagen_kind kind, uint64_t index, void *page);

/* Compressibility knob: fill `length` bytes so that about `percent` of them
 * are runs of a 16-symbol alphabet and the rest random bytes. lz4 keeps
 * roughly (100 - percent)% plus a little; percent is clamped to 0..100. */
void datagen_fill_compressible(struct datagen_rng *rng, unsigned percent, void *buf, size_t length);

#endif
