/* comp_api.c - the public face of the compression backends (comp.c): algorithm names and
 * level ranges, and struct uzram_codec, a compressor for estimators and benchmarks. Not a
 * device's codecs, which are codec_table.c's table of configurations. */

/* defines page-analysis helpers of uzram.h's static-linking-only part */
#define UZRAM_STATIC_LINKING_ONLY
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/comp.h"
#include "uzram.h"

/* A codec only remembers what to call: the contexts themselves are the
 * calling thread's (see comp.c), so a codec costs nothing to keep open. */
struct uzram_codec {
    int algorithm;
    int level;
    struct comp_dict *dict;
};

int uzram_algorithm_list(const char *current, char *buf, size_t size)
{
    if (!buf || size == 0)
        return -ERANGE;
    size_t used = 0;
    for (int id = 0; id < COMP_COUNT; id++) {
        const char *name = comp_name(id);
        bool selected = current && strcmp(current, name) == 0;
        int n = snprintf(buf + used, size - used, selected ? "%s[%s]" : "%s%s", id == 0 ? "" : " ",
                         name);
        if (n < 0 || (size_t)n >= size - used) {
            buf[0] = '\0';
            return -ERANGE;
        }
        used += (size_t)n;
    }
    return (int)used;
}

int uzram_algorithm_levels(const char *name, int *min, int *max, int *dflt)
{
    int id = comp_find(name);
    if (id < 0)
        return id;
    int lo, hi, def;
    comp_levels(id, &lo, &hi, &def);
    if (min)
        *min = lo;
    if (max)
        *max = hi;
    if (dflt)
        *dflt = def;
    return 0;
}

int uzram_codec_open(const char *name, int level, struct uzram_codec **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    int id, resolved;
    int rc = comp_choose(name, level, &id, &resolved);
    if (rc < 0)
        return rc;
    struct uzram_codec *codec = calloc(1, sizeof *codec);
    if (!codec)
        return -ENOMEM;
    codec->algorithm = id;
    codec->level = resolved;
    *out = codec;
    return 0;
}

int uzram_codec_open_dict(const char *name, int level, const void *dict, size_t size,
                          struct uzram_codec **out)
{
    if (!dict)
        return -EINVAL;
    int rc = uzram_codec_open(name, level, out);
    if (rc < 0)
        return rc;
    rc = comp_dict_create((*out)->algorithm, (*out)->level, dict, size, &(*out)->dict);
    if (rc < 0) {
        uzram_codec_close(*out);
        *out = NULL;
    }
    return rc;
}

size_t uzram_codec_dict_memory(const struct uzram_codec *codec)
{
    return codec ? comp_dict_memory(codec->dict) : 0;
}

int uzram_dict_train(void *dict, size_t capacity, const void *samples, const size_t *sample_sizes,
                     unsigned count)
{
    if (!dict || !samples || !sample_sizes || capacity < COMP_DICT_MIN || capacity > COMP_DICT_MAX)
        return -EINVAL;
    return comp_dict_train(dict, capacity, samples, sample_sizes, count);
}

void uzram_codec_close(struct uzram_codec *codec)
{
    if (codec)
        comp_dict_free(codec->dict);
    free(codec);
}

int uzram_codec_compress(struct uzram_codec *codec, const void *page, void *dst, size_t capacity)
{
    if (!codec || !page || (!dst && capacity))
        return -EINVAL;
    return comp_compress_dict(codec->algorithm, codec->level, codec->dict, page, dst, capacity);
}

int uzram_codec_compress_span(struct uzram_codec *codec, const void *pages, size_t count, void *dst,
                              size_t capacity)
{
    if (!codec || !pages || count == 0 || (!dst && capacity))
        return -EINVAL;
    return comp_compress_span(codec->algorithm, codec->level, codec->dict, pages,
                              count * UZRAM_PAGE_SIZE, dst, capacity);
}

int uzram_codec_decompress(struct uzram_codec *codec, const void *src, size_t length, void *page)
{
    if (!codec || !page || (!src && length))
        return -EINVAL;
    return comp_decompress_dict(codec->algorithm, codec->dict, src, length, page);
}
