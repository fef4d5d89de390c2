/* comp.h - compression backends behind one small interface (internal).
 * Contexts are per thread and made on first use, so the hot path takes no lock. */
#ifndef UZRAM_COMP_H
#define UZRAM_COMP_H

#include <stdbool.h>
#include <stddef.h>

struct comp_dict;

/* Algorithm ids name the backends in a device's codec configurations
 * (codec_table.h), which page slots and dedup entries refer to. */
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

/* comp_compress() with a dictionary (`dict` NULL: none). */
int comp_compress_dict(int id, int level, const struct comp_dict *dict, const void *page, void *dst,
                       size_t capacity);
/* Decompress `length` bytes of algorithm `id` into a 4096-byte page, with the dictionary the
 * page was compressed with (`dict` NULL: none). Returns 0, -EIO if the input is corrupt or
 * does not give exactly one page, -ENOMEM if a context could not be made. */
int comp_decompress_dict(int id, const struct comp_dict *dict, const void *src, size_t length,
                         void *page);

/* Several pages in one frame (a bundle's, bundle.h): `length` bytes of `src` compressed
 * into dst of `capacity` bytes (0: it does not fit), in blocks of comp_span_block(length)
 * bytes (whole pages). zstd only (-EINVAL for another algorithm); errors as above. */
int comp_compress_span(int id, int level, const struct comp_dict *dict, const void *src,
                       size_t length, void *dst, size_t capacity);
size_t comp_span_block(size_t length);
/* The same in blocks of `block` bytes (4096 to 128 KiB, else -EINVAL): for
 * bench/bundle_shapes.c, which weighs the engine's cut against others. */
int comp_compress_span_blocks(int id, int level, const struct comp_dict *dict, const void *src,
                              size_t length, size_t block, void *dst, size_t capacity);

/* Such a frame decoded a block at a time, straight into the caller's buffer: a read stops
 * after the block that completes the bytes it wants, and the next read of the same frame goes
 * on from there (comp_span_decoded bytes are in place). One decoder per thread: it holds a
 * zstd context between calls. */
struct comp_span_decoder;
/* The frame's bytes, as the decoder asks for them in order: bytes(arg, offset, count) returns
 * where bytes offset..offset + count - 1 of the `length`-byte frame are, contiguous (they
 * need not stay after the call), or NULL when it cannot get them (the decode fails, -EIO). */
struct comp_span_source {
    size_t length;
    const void *(*bytes)(void *arg, size_t offset, size_t count);
    void *arg;
};
int comp_span_decoder_new(struct comp_span_decoder **out); /* -ENOMEM */
void comp_span_decoder_free(struct comp_span_decoder *decoder);
/* Start a frame made by algorithm `id` (zstd, else -EINVAL) with `dict` (NULL: none); -EIO. */
int comp_span_begin(struct comp_span_decoder *decoder, int id, const struct comp_dict *dict);
/* Decode on until the first `want` bytes of `out` (out_length bytes, the same buffer at every
 * call for one frame) are the frame's; want == out_length: all of it, which must give exactly
 * out_length bytes from exactly source->length. -EIO: corrupt (comp_span_begin again),
 * -EINVAL: no frame begun or want out of range. Past `want` when short of the whole, the frame
 * is not checked. */
int comp_span_decode(struct comp_span_decoder *decoder, const struct comp_span_source *source,
                     void *out, size_t out_length, size_t want);
/* Bytes of out decoded so far (0 with no frame begun, or after -EIO). */
size_t comp_span_decoded(const struct comp_span_decoder *decoder);

/* Dictionaries: only zstd has them. Content is a zstd dictionary (ZDICT's
 * format, as `zstd --train` writes) or raw bytes to refer back to, of
 * COMP_DICT_MIN..COMP_DICT_MAX bytes. */
#define COMP_DICT_MIN 256
#define COMP_DICT_MAX (1u << 20)
bool comp_has_dict(int id);

/* Digest `content` for algorithm `id` at `level` (resolved); the dictionary
 * keeps its own copy. Errors: -EINVAL the algorithm has no dictionaries, the
 * size is out of range or zstd cannot use the content; -ENOMEM. */
int comp_dict_create(int id, int level, const void *content, size_t size, struct comp_dict **out);
void comp_dict_free(struct comp_dict *dict);

/* Memory the dictionary holds, both directions' forms included. */
size_t comp_dict_memory(const struct comp_dict *dict);

/* Train a zstd dictionary of at most `capacity` bytes from `count` samples
 * laid end to end in `samples`. Returns its size, -EAGAIN when the samples
 * are too few or too uniform to learn from, -EIO (an injected fault). */
int comp_dict_train(void *dict, size_t capacity, const void *samples, const size_t *sample_sizes,
                    unsigned count);

#endif
