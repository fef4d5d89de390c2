/* pool_class.c - the pool's size classes: which span length and object count serve each
 * object size, chosen to waste the least memory (see pool_class.h). */
#include "pool/pool_class.h"

#include <pthread.h>

static struct class_shape class_shapes[CLASS_COUNT];
static pthread_once_t class_shapes_once = PTHREAD_ONCE_INIT;

/* Tail waste a span may have and still be preferred to a longer span.
 * Longer spans waste less at their end, but every class in use keeps about
 * half a span empty on average (and compaction leaves up to one span of
 * free objects per class), a fixed cost of about 3.8 MB over all classes
 * with the least-waste rule. Accepting 1% of tail waste brings that to 2.9 MB
 * for +0.15% per object: a saving below about 600 MB of stored data, about
 * even above. 0 gives the pure least-waste rule. */
#define SPAN_WASTE_TOLERANCE_PERMILLE 10u

/* Pick the shortest span whose tail waste is within the tolerance, or else
 * the one that wastes the smallest fraction of itself (on a tie the shorter
 * span, because a span can only be given back once all its objects are
 * gone). */
static void choose_span_length(uint32_t footprint, uint16_t *pages, uint16_t *objects)
{
    uint32_t best_pages = 0;
    uint32_t best_objects = 0;
    uint64_t best_waste = 0;
    for (uint32_t k = 1; k <= MAX_SPAN_PAGES; k++) {
        uint32_t bytes = k * PAGE_BYTES;
        uint32_t objects_here = bytes / footprint;
        uint64_t waste = bytes - (uint64_t)objects_here * footprint;
        /* waste / bytes < best_waste / best_bytes, without division */
        if (best_pages == 0 || waste * best_pages < best_waste * k) {
            best_pages = k;
            best_objects = objects_here;
            best_waste = waste;
        }
        if (waste * 1000 <= (uint64_t)SPAN_WASTE_TOLERANCE_PERMILLE * bytes)
            break;
    }
    *pages = (uint16_t)best_pages;
    *objects = (uint16_t)best_objects;
}

/* A class's first spans are short: a long span that stays mostly empty
 * costs more than the tail waste it saves, and most classes of a small
 * device never hold more than a span or two. Shortest span that wastes at
 * most an eighth of itself (a span holds at least one object). */
static void choose_small_span_length(const struct class_shape *shape, uint16_t *pages,
                                     uint16_t *objects)
{
    for (uint32_t k = 1; k < shape->pages; k++) {
        uint32_t bytes = k * PAGE_BYTES;
        uint32_t objects_here = bytes / shape->footprint;
        if (objects_here > 0 && (bytes - objects_here * shape->footprint) * 8 <= bytes) {
            *pages = (uint16_t)k;
            *objects = (uint16_t)objects_here;
            return;
        }
    }
    *pages = shape->pages;
    *objects = shape->objects;
}

static void init_class_shapes(void)
{
    for (uint32_t i = 0; i < NORMAL_CLASSES; i++) {
        struct class_shape *shape = &class_shapes[i];
        shape->footprint = (i + 1) * CLASS_GRANULE;
        shape->header_bytes = HEADER_BYTES;
        choose_span_length(shape->footprint, &shape->pages, &shape->objects);
        choose_small_span_length(shape, &shape->small_pages, &shape->small_objects);
        shape->home = (uint16_t)i;
    }
    struct class_shape *huge = &class_shapes[HUGE_CLASS];
    huge->footprint = PAGE_BYTES;
    huge->pages = 1;
    huge->objects = 1;
    huge->small_pages = 1;
    huge->small_objects = 1;
    huge->header_bytes = 0;
    huge->home = HUGE_CLASS;
    /* Neighbouring footprints with the same span length and object count
     * cost the same per object: serve them from the largest one so that
     * fewer half-empty spans exist (zsmalloc merges classes the same way). */
    for (int i = (int)NORMAL_CLASSES - 2; i >= 0; i--) {
        const struct class_shape *larger = &class_shapes[class_shapes[i + 1].home];
        if (larger->header_bytes == HEADER_BYTES && larger->pages == class_shapes[i].pages &&
            larger->objects == class_shapes[i].objects &&
            larger->small_pages == class_shapes[i].small_pages &&
            larger->small_objects == class_shapes[i].small_objects)
            class_shapes[i].home = class_shapes[i + 1].home;
    }
}

const struct class_shape *pool_class_shapes(void)
{
    pthread_once(&class_shapes_once, init_class_shapes);
    return class_shapes;
}

unsigned pool_class_of(const struct class_shape *all, size_t size)
{
    size_t footprint = size + HEADER_BYTES;
    if (footprint > PAGE_BYTES)
        return HUGE_CLASS;
    return all[(footprint + CLASS_GRANULE - 1) / CLASS_GRANULE - 1].home;
}
