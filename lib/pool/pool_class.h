/* pool_class.h - the size classes of the pool (internal): for each object size, the span
 * length and objects per span, computed once and shared by every pool (pool.c). */
#ifndef UZRAM_POOL_CLASS_H
#define UZRAM_POOL_CLASS_H

#include <stddef.h>
#include <stdint.h>

#define PAGE_BYTES 4096u
#define MAX_SPAN_PAGES 16u

/* Each object starts with a header holding its owner, so that compaction
 * can ask the owner's permission to move it. */
#define HEADER_BYTES 8u
#define CLASS_GRANULE 16u
/* Footprints 16, 32, ..., 4096 (header included), then the huge class. */
#define NORMAL_CLASSES (PAGE_BYTES / CLASS_GRANULE)
#define HUGE_CLASS NORMAL_CLASSES
#define CLASS_COUNT (NORMAL_CLASSES + 1)

/* How many spans of a class are short ones (small_pages; see pool_class.c). */
#define SMALL_SPANS_PER_CLASS 2u

/* Shape of a class: shared by every pool, computed once. */
struct class_shape {
    uint32_t footprint;   /* bytes per object, header included */
    uint16_t pages;       /* span length */
    uint16_t objects;     /* objects per span */
    uint16_t small_pages; /* span length of a class's first spans */
    uint16_t small_objects;
    uint16_t header_bytes; /* 0 for the huge class */
    uint16_t home;         /* class that actually serves this footprint */
};

/* Every class's shape (CLASS_COUNT entries), computed at the first call. */
const struct class_shape *pool_class_shapes(void);
/* Class serving objects of `size` bytes (1..4096). */
unsigned pool_class_of(const struct class_shape *all, size_t size);

#endif
