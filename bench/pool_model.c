/* pool_model.c - where uzram's pool and zsmalloc spend memory on the same pages (issue 27).
 * Built and run by bench/pool-vs-zram.sh. For each 4 KiB page of a file (same-filled pages
 * left out, as both store them without the pool) the lz4 size, then both pools laid out as a
 * sequential write fills them: zsmalloc as Linux 6.4+ builds it (classes of 16 bytes from 32,
 * an 8-byte handle in each object, zspages of up to 8 pages with the least waste in bytes,
 * classes of one shape merged, pages from huge_class_size up stored whole) and uzram's pool
 * with its real shapes (lib/pool/pool_class.c, from build/libuzram.a). Splits each pool's bytes
 * past the lz4 bytes into the objects' class rounding, the tail waste of full spans, the
 * part-empty last span of each class and the raw pages. */
#include <lz4.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "pool/pool_class.h"

#define ZS_MIN_ALLOC 32u
#define ZS_DELTA 16u
#define ZS_CLASSES ((PAGE_BYTES - ZS_MIN_ALLOC) / ZS_DELTA + 1)
#define ZS_CHAIN 8u
#define ZS_HANDLE 8u

struct zs_class {
    unsigned size, pages, objects, home;
};

/* calculate_zspage_chain_size(): the least waste in bytes, the first of equals */
static unsigned zs_chain(unsigned size)
{
    if ((size & (size - 1)) == 0)
        return 1;
    unsigned best = 1, least = UINT32_MAX;
    for (unsigned k = 1; k <= ZS_CHAIN; k++)
        if ((k * PAGE_BYTES) % size < least) {
            least = (k * PAGE_BYTES) % size;
            best = k;
        }
    return best;
}

/* zs_create_pool(): classes from the largest down; huge_class_size from the largest class
 * that is not one object in one page, less the handle's bytes but one. */
static unsigned zs_classes(struct zs_class *zs)
{
    unsigned huge_class_size = 0;
    for (int i = ZS_CLASSES - 1; i >= 0; i--) {
        struct zs_class *c = &zs[i];
        c->size = ZS_MIN_ALLOC + (unsigned)i * ZS_DELTA;
        c->pages = zs_chain(c->size);
        c->objects = c->pages * PAGE_BYTES / c->size;
        if (c->pages != 1 && c->objects != 1 && !huge_class_size)
            huge_class_size = c->size - (ZS_HANDLE - 1);
        const struct zs_class *up = i + 1 < (int)ZS_CLASSES ? &zs[zs[i + 1].home] : NULL;
        c->home =
            up && up->pages == c->pages && up->objects == c->objects ? zs[i + 1].home : (unsigned)i;
    }
    return huge_class_size;
}

struct split {
    double rounding, tail, last_span, raw, total;
};

static void print_split(const char *name, const struct split *s, uint64_t compressed)
{
    printf("%-8s %12.0f %12.0f %12.0f %12.0f %13.0f %8.4f\n", name, s->rounding, s->tail,
           s->last_span, s->raw, s->total, s->total / (double)compressed);
}

int main(int argc, char **argv)
{
    FILE *file = argc == 2 ? fopen(argv[1], "rb") : NULL;
    if (!file) {
        fprintf(stderr, "usage: pool_model FILE\n");
        return 2;
    }
    static struct zs_class zs[ZS_CLASSES];
    unsigned huge_class_size = zs_classes(zs);
    const struct class_shape *shapes = pool_class_shapes();
    static uint64_t zs_count[ZS_CLASSES], uz_count[CLASS_COUNT];
    uint64_t pages = 0, same = 0, compressed = 0, z_raw = 0, u_raw = 0;
    struct split z = {0}, u = {0};
    static unsigned char page[PAGE_BYTES], out[LZ4_COMPRESSBOUND(PAGE_BYTES)];
    while (fread(page, 1, PAGE_BYTES, file) == PAGE_BYTES) {
        pages++;
        uint64_t first, word;
        memcpy(&first, page, sizeof first);
        unsigned at = 8;
        for (; at < PAGE_BYTES; at += 8) {
            memcpy(&word, page + at, sizeof word);
            if (word != first)
                break;
        }
        if (at == PAGE_BYTES) {
            same++;
            continue;
        }
        int length = LZ4_compress_default((char *)page, (char *)out, PAGE_BYTES, sizeof out);
        unsigned len = length > 0 && length < (int)PAGE_BYTES ? (unsigned)length : PAGE_BYTES;
        compressed += len;
        if (len >= huge_class_size) {
            z_raw++;
            z.raw += PAGE_BYTES - len;
        } else {
            unsigned size = len + ZS_HANDLE;
            unsigned index =
                size <= ZS_MIN_ALLOC ? 0 : (size - ZS_MIN_ALLOC + ZS_DELTA - 1) / ZS_DELTA;
            struct zs_class *c = &zs[zs[index].home];
            zs_count[c - zs]++;
            z.rounding += c->size - len;
            z.tail += (double)c->pages * PAGE_BYTES / c->objects - c->size;
        }
        if (len >= HUGE_THRESHOLD) {
            u_raw++;
            u.raw += PAGE_BYTES - len;
        } else {
            unsigned index = pool_class_of(shapes, len);
            const struct class_shape *c = &shapes[index];
            uz_count[index]++;
            u.rounding += c->footprint - len;
            u.tail += (double)c->pages * PAGE_BYTES / c->objects - c->footprint;
        }
    }
    fclose(file);
    /* the last span of each class, part empty (uzram: its first spans short ones) */
    double z_pages = (double)z_raw * PAGE_BYTES, u_pages = (double)u_raw * PAGE_BYTES;
    for (unsigned i = 0; i < ZS_CLASSES; i++)
        if (zs_count[i])
            z_pages += (double)((zs_count[i] + zs[i].objects - 1) / zs[i].objects) * zs[i].pages *
                       PAGE_BYTES;
    for (unsigned i = 0; i < CLASS_COUNT; i++) {
        const struct class_shape *c = &shapes[i];
        uint64_t left = uz_count[i];
        for (unsigned k = 0; k < SMALL_SPANS_PER_CLASS && left; k++) {
            u_pages += (double)c->small_pages * PAGE_BYTES;
            left = left > c->small_objects ? left - c->small_objects : 0;
        }
        u_pages += (double)((left + c->objects - 1) / c->objects) * c->pages * PAGE_BYTES;
    }
    /* the lz4 bytes, and what each part adds to them, make up the pool */
    z.total = z_pages;
    u.total = u_pages;
    z.last_span = z.total - (double)compressed - z.rounding - z.tail - z.raw;
    u.last_span = u.total - (double)compressed - u.rounding - u.tail - u.raw;
    printf("pages %llu, same-filled %llu, lz4 bytes %llu; zsmalloc huge_class_size %u, "
           "uzram HUGE_THRESHOLD %u\n",
           (unsigned long long)pages, (unsigned long long)same, (unsigned long long)compressed,
           huge_class_size, HUGE_THRESHOLD);
    printf("bytes past the lz4 bytes, by cause (rounding: of each object to its class, handle\n"
           "or header included; tail: the end of a full span no object fits in; last span:\n"
           "the part-empty last span of each class; raw: pages stored whole):\n");
    printf("%-8s %12s %12s %12s %12s %13s %8s\n", "pool", "rounding", "tail", "last span", "raw",
           "pool bytes", "/lz4");
    print_split("zsmalloc", &z, compressed);
    print_split("uzram", &u, compressed);
    printf("uzram / zsmalloc: %.4f; pages zsmalloc packs and uzram stores raw: %llu\n",
           u.total / z.total, (unsigned long long)(u_raw - z_raw));
    return 0;
}
