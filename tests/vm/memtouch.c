/* memtouch.c - the VM tests' memory-pressure workload (tests/vm/swap.sh): fills MIB MiB of
 * anonymous memory with compressible pages, then ROUNDS-1 times reads every page back,
 * compares it byte for byte with what was written, and writes new contents; a last pass
 * compares again. More memory than the guest has pushes it into swap; every page that comes
 * back must be exact.
 *
 *   memtouch MIB [ROUNDS [SEED]]   (ROUNDS >= 1, default 2)
 *
 * A page is a pure function of (seed, index, round): one of 64 template pages (text, runs
 * with random bytes, same-filled, zero, as datagen makes them) with the index, round and seed
 * stamped in its first 24 bytes, so no two pages are equal and the mix compresses about 3:1,
 * as a desktop's anonymous memory does. Prints the seconds each pass took. Exit status 0:
 * every page verified; 1: a page differed (the first few are printed); 2: usage or mmap. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/datagen.h"

#define PAGE 4096u
#define TEMPLATES 64u
#define MAX_REPORTED 5

static unsigned char templates[TEMPLATES][PAGE];
static bool stamped[TEMPLATES];

/* A quarter zero, an eighth same-filled, a quarter text, a quarter 75% runs, an eighth
 * half-compressible (DATAGEN_HALF). */
static void make_templates(uint64_t seed)
{
    for (unsigned t = 0; t < TEMPLATES; t++) {
        struct datagen_rng rng;
        datagen_rng_seed(&rng, seed * 1000003 + t);
        unsigned slot = t % 8;
        stamped[t] = slot >= 3;
        if (slot <= 1)
            datagen_fill(&rng, DATAGEN_ZERO, templates[t], PAGE);
        else if (slot == 2)
            datagen_fill(&rng, DATAGEN_SAME, templates[t], PAGE);
        else if (slot <= 4)
            datagen_fill(&rng, DATAGEN_TEXT, templates[t], PAGE);
        else if (slot <= 6)
            datagen_fill_compressible(&rng, 75, templates[t], PAGE);
        else
            datagen_fill(&rng, DATAGEN_HALF, templates[t], PAGE);
    }
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void expected_page(uint64_t seed, uint64_t index, unsigned round, unsigned char *page)
{
    unsigned t = (unsigned)(mix(seed ^ (index << 8) ^ round) % TEMPLATES);
    memcpy(page, templates[t], PAGE);
    if (stamped[t]) {
        uint64_t stamp[3] = {index, round, seed};
        memcpy(page, stamp, sizeof stamp);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Compare every page with round `check` (none when < 0), then write round `write` (none
 * when < 0). Returns the pages that differed. */
static uint64_t pass(unsigned char *memory, uint64_t pages, uint64_t seed, int check, int write)
{
    unsigned char want[PAGE];
    uint64_t bad = 0;
    for (uint64_t i = 0; i < pages; i++) {
        unsigned char *page = memory + i * PAGE;
        if (check >= 0) {
            expected_page(seed, i, (unsigned)check, want);
            if (memcmp(page, want, PAGE) != 0 && bad++ < MAX_REPORTED) {
                size_t at = 0;
                while (page[at] == want[at])
                    at++;
                fprintf(stderr, "memtouch: page %llu of round %d differs from byte %zu on\n",
                        (unsigned long long)i, check, at);
            }
        }
        if (write >= 0) {
            expected_page(seed, i, (unsigned)write, want);
            memcpy(page, want, PAGE);
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: memtouch MIB [ROUNDS [SEED]]\n");
        return 2;
    }
    uint64_t mib = strtoull(argv[1], NULL, 10);
    int rounds = argc > 2 ? atoi(argv[2]) : 2;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
    if (mib == 0 || rounds < 1) {
        fprintf(stderr, "memtouch: MIB and ROUNDS must be at least 1\n");
        return 2;
    }
    uint64_t pages = mib * 256;
    unsigned char *memory =
        mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
        fprintf(stderr, "memtouch: mmap of %llu MiB: %s\n", (unsigned long long)mib,
                strerror(errno));
        return 2;
    }
    /* Base pages, as swap sees them at their most numerous. */
    (void)madvise(memory, pages * PAGE, MADV_NOHUGEPAGE);
    make_templates(seed);
    uint64_t bad = 0;
    double total = 0;
    for (int round = 0; round <= rounds; round++) {
        double start = now();
        int check = round - 1, write = round < rounds ? round : -1;
        bad += pass(memory, pages, seed, check, write);
        double took = now() - start;
        total += took;
        printf("memtouch: pass %d (%s%s%s) of %llu MiB: %.2f s\n", round,
               check >= 0 ? "verify" : "", check >= 0 && write >= 0 ? "+" : "",
               write >= 0 ? "write" : "", (unsigned long long)mib, took);
        fflush(stdout);
    }
    printf("memtouch: %llu MiB, %d rounds, %llu pages differed, %.2f s in total\n",
           (unsigned long long)mib, rounds, (unsigned long long)bad, total);
    return bad == 0 ? 0 : 1;
}
