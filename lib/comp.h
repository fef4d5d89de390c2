/* comp.h - compression backends behind one small interface (internal).
 * Contexts are per thread and made on first use, so the hot path takes no lock. */
#ifndef UZRAM_COMP_H
#define UZRAM_COMP_H

#include <stddef.h>

/* Algorithm ids are stored in page slots (3 bits), so they never change
 * meaning and there are at most 8. */
enum comp_algorithm {
    COMP_LZO = 0,
    COMP_LZ4 = 1,
    COMP_LZ4HC = 2,
    COMP_ZSTD = 3,
    COMP_DEFLATE = 4,
    COMP_COUNT
};

/* Id of the algorithm called `name`, or -ENOENT. */
int comp_find(const char *name);

/* Name of algorithm `id` (a valid id). */
const char *comp_name(int id);

/* Level range; an algorithm without levels has 0, 0, 0. */
void comp_levels(int id, int *min, int *max, int *dflt);

/* The level to use for `level` (0 means the default), or -EINVAL if it is
 * outside the algorithm's range. */
int comp_resolve_level(int id, int level);

/* Algorithm `name` at `level` (0: its default) as the engine stores them:
 * *id and the resolved *resolved_level. Returns 0, -ENOENT for an unknown
 * name or -EINVAL for a level outside the algorithm's range. */
int comp_choose(const char *name, int level, int *id, int *resolved_level);

/* Compress one 4096-byte page with algorithm `id` at `level` (already
 * resolved) into dst of `capacity` bytes, using this thread's context.
 * Returns the compressed length (> 0), 0 if the result does not fit in
 * `capacity`, -ENOMEM if a context could not be made, -EIO on a library error. */
int comp_compress(int id, int level, const void *page, void *dst, size_t capacity);

/* Decompress `length` bytes of algorithm `id` into a 4096-byte page.
 * Returns 0, -EIO if the input is corrupt or does not give exactly one page,
 * -ENOMEM if a context could not be made. */
int comp_decompress(int id, const void *src, size_t length, void *page);

#endif
