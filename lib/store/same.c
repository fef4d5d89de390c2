/* same.c - detection and fill of same-filled pages (one 8-byte word repeated).
 * Every written page goes through this check, so it uses the widest vector loads the CPU has. */

/* defines page-analysis helpers of uzram.h's static-linking-only part */
#define UZRAM_STATIC_LINKING_ONLY
#include "store/same.h"

#include <string.h>

#include "uzram.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SAME_X86 1
#endif

#define PAGE_SIZE UZRAM_PAGE_SIZE
#define PAGE_WORDS (PAGE_SIZE / sizeof(uint64_t))

/* Pages may come from any buffer (an NBD request, a test at buf+1), so every
 * load is unaligned; memcpy compiles to one mov and keeps UBSan quiet. */
static inline uint64_t load_word(const unsigned char *bytes, size_t index)
{
    uint64_t word;
    memcpy(&word, bytes + index * sizeof word, sizeof word);
    return word;
}

/* A scan answers whether every byte of the page matches `word` repeated.
 * The pre-check has already compared the first and the last word.
 *
 * The vector scans OR together the XOR of several 32-byte blocks with the
 * broadcast word and test the result once per group: one branch per 128
 * bytes keeps the loop at load throughput, and a page that differs early is
 * still rejected after reading only a little of it. */
typedef bool (*same_scan_fn)(const unsigned char *page, uint64_t word);

/* Unused on x86, but kept compiled there so it cannot rot unnoticed. */
__attribute__((unused)) static bool scan_portable(const unsigned char *page, uint64_t word)
{
    for (size_t i = 0; i < PAGE_WORDS; i += 8) {
        uint64_t diff = 0;
        for (size_t j = 0; j < 8; j++)
            diff |= load_word(page, i + j) ^ word;
        if (diff)
            return false;
    }
    return true;
}

#ifdef SAME_X86
/* SSE2 is part of the x86-64 baseline, so this needs no run-time check. */
static bool scan_sse2(const unsigned char *page, uint64_t word)
{
    const __m128i pattern = _mm_set1_epi64x((long long)word);
    const __m128i zero = _mm_setzero_si128();
    for (size_t offset = 0; offset < PAGE_SIZE; offset += 128) {
        const __m128i *p = (const __m128i *)(page + offset);
        __m128i diff = _mm_or_si128(
            _mm_or_si128(_mm_or_si128(_mm_xor_si128(_mm_loadu_si128(p + 0), pattern),
                                      _mm_xor_si128(_mm_loadu_si128(p + 1), pattern)),
                         _mm_or_si128(_mm_xor_si128(_mm_loadu_si128(p + 2), pattern),
                                      _mm_xor_si128(_mm_loadu_si128(p + 3), pattern))),
            _mm_or_si128(_mm_or_si128(_mm_xor_si128(_mm_loadu_si128(p + 4), pattern),
                                      _mm_xor_si128(_mm_loadu_si128(p + 5), pattern)),
                         _mm_or_si128(_mm_xor_si128(_mm_loadu_si128(p + 6), pattern),
                                      _mm_xor_si128(_mm_loadu_si128(p + 7), pattern))));
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(diff, zero)) != 0xffff)
            return false;
    }
    return true;
}

__attribute__((target("avx2"))) static bool scan_avx2(const unsigned char *page, uint64_t word)
{
    const __m256i pattern = _mm256_set1_epi64x((long long)word);
    for (size_t offset = 0; offset < PAGE_SIZE; offset += 128) {
        const __m256i *p = (const __m256i *)(page + offset);
        __m256i diff =
            _mm256_or_si256(_mm256_or_si256(_mm256_xor_si256(_mm256_loadu_si256(p + 0), pattern),
                                            _mm256_xor_si256(_mm256_loadu_si256(p + 1), pattern)),
                            _mm256_or_si256(_mm256_xor_si256(_mm256_loadu_si256(p + 2), pattern),
                                            _mm256_xor_si256(_mm256_loadu_si256(p + 3), pattern)));
        if (!_mm256_testz_si256(diff, diff))
            return false;
    }
    return true;
}
#endif

static bool scan_resolve(const unsigned char *page, uint64_t word);

/* Starts at the resolver, which replaces itself with the best scan on the
 * first call. Racing first calls store the same value; the atomics only make
 * that visible to the sanitizers as the benign race it is. */
static same_scan_fn same_scan = scan_resolve;

static same_scan_fn pick_scan(void)
{
#ifdef SAME_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        return scan_avx2;
    return scan_sse2;
#else
    return scan_portable;
#endif
}

static bool scan_resolve(const unsigned char *page, uint64_t word)
{
    same_scan_fn scan = pick_scan();
    __atomic_store_n(&same_scan, scan, __ATOMIC_RELAXED);
    return scan(page, word);
}

bool same_filled_check(const void *page, uint64_t *word)
{
    const unsigned char *bytes = page;
    uint64_t first = load_word(bytes, 0);
    /* Pages that are not same-filled mostly still differ between the first
     * and the last word, even when their start is a long run of one value
     * (zram's "last element check"). */
    if (first != load_word(bytes, PAGE_WORDS - 1))
        return false;
    same_scan_fn scan = __atomic_load_n(&same_scan, __ATOMIC_RELAXED);
    if (!scan(bytes, first))
        return false;
    *word = first;
    return true;
}

void same_filled_fill(void *page, uint64_t word)
{
    unsigned char *bytes = page;
#ifdef SAME_X86
    const __m128i pattern = _mm_set1_epi64x((long long)word);
    for (size_t offset = 0; offset < PAGE_SIZE; offset += 16)
        _mm_storeu_si128((__m128i *)(bytes + offset), pattern);
#else
    for (size_t i = 0; i < PAGE_WORDS; i++)
        memcpy(bytes + i * sizeof word, &word, sizeof word);
#endif
}

bool uzram_page_same_filled(const void *page, uint64_t *word)
{
    return same_filled_check(page, word);
}
