/* comp.c - the compression backends (lzo, lz4, lz4hc, zstd, deflate) behind comp.h, as zram's
 * zcomp.c: each backend is one small vtable; contexts live per thread so the hot path takes no
 * lock. comp_api.c is their public face; codec_table.c the device's configurations of them. */
#include "codec/comp.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>
#include <lz4.h>
#include <lz4hc.h>
#include <lzo/lzo1x.h>
/* For the ZSTD_c_format / ZSTD_d_format parameter names, and for
 * ZSTD_createCDict_advanced (tables sized for one page; libzstd.so 1.5
 * exports it, like every function of its experimental part). */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zdict.h>
#include <zstd_errors.h>

#include "common/fault.h"
#include "uzram.h"

#define PAGE_SIZE UZRAM_PAGE_SIZE

/* A backend. Compression contexts may depend on the level (libdeflate
 * allocates one compressor per level); `level_bound_context` says so, and the
 * context is then remade when a thread switches level. A NULL *_context_new
 * means the backend needs no context for that direction. */
struct comp_backend {
    const char *name;
    void (*levels)(int *min, int *max, int *dflt);
    bool level_bound_context;
    /* Bytes a bounded compressor wants beyond the result before it will
     * finish (zstd and libdeflate flush whole 8-byte bit buffers and give up
     * a few bytes early). Non-zero means comp_compress compresses into a
     * scratch buffer with this much extra room, so that "fits in capacity"
     * is exact. */
    size_t output_slack;
    void *(*compress_context_new)(int level);
    void (*compress_context_free)(void *context);
    void *(*decompress_context_new)(void);
    void (*decompress_context_free)(void *context);
    /* Returns the length, 0 if it does not fit in capacity, -EIO. Never
     * writes past dst + capacity. `dict` is NULL or one of this backend's. */
    int (*compress)(void *context, int level, const struct comp_dict *dict, const void *page,
                    void *dst, size_t capacity);
    /* Returns 0 or -EIO; succeeds only if exactly `length` input bytes give
     * exactly one page. */
    int (*decompress)(void *context, const struct comp_dict *dict, const void *src, size_t length,
                      void *page);
};

static void no_levels(int *min, int *max, int *dflt)
{
    *min = 0;
    *max = 0;
    *dflt = 0;
}

/* ------------------------------------------------------------------------
 * lzo (LZO1X-1, what zram used by default for years)
 * ---------------------------------------------------------------------- */

/* lzo1x_1_compress has no output bound, so it writes into a scratch buffer
 * of the documented worst case and the result is copied out if it fits. */
#define LZO_WORST_CASE (PAGE_SIZE + PAGE_SIZE / 16 + 64 + 3)

struct lzo_context {
    unsigned char scratch[LZO_WORST_CASE];
    /* lzo wants its work memory aligned like a pointer; malloc gives more. */
    _Alignas(16) unsigned char work[LZO1X_1_MEM_COMPRESS];
};

static pthread_once_t lzo_once = PTHREAD_ONCE_INIT;
static int lzo_init_result = LZO_E_ERROR;

static void lzo_init_once(void)
{
    lzo_init_result = lzo_init();
}

static void *lzo_compress_context_new(int level)
{
    (void)level;
    pthread_once(&lzo_once, lzo_init_once);
    if (lzo_init_result != LZO_E_OK)
        return NULL;
    return malloc(sizeof(struct lzo_context));
}

static int lzo_compress_page(void *context, int level, const struct comp_dict *dict,
                             const void *page, void *dst, size_t capacity)
{
    struct lzo_context *lzo = context;
    lzo_uint length = 0;
    (void)level;
    (void)dict;
    if (lzo1x_1_compress(page, PAGE_SIZE, lzo->scratch, &length, lzo->work) != LZO_E_OK)
        return -EIO;
    if (length > capacity)
        return 0;
    memcpy(dst, lzo->scratch, length);
    return (int)length;
}

static int lzo_decompress_page(void *context, const struct comp_dict *dict, const void *src,
                               size_t length, void *page)
{
    lzo_uint out_length = PAGE_SIZE;
    (void)context;
    (void)dict;
    pthread_once(&lzo_once, lzo_init_once);
    if (lzo_init_result != LZO_E_OK)
        return -EIO;
    /* The safe decoder checks both input and output bounds; it reports
     * trailing input as LZO_E_INPUT_NOT_CONSUMED, which we reject too. */
    int rc = lzo1x_decompress_safe(src, length, page, &out_length, NULL);
    return rc == LZO_E_OK && out_length == PAGE_SIZE ? 0 : -EIO;
}

static const struct comp_backend lzo_backend = {
    .name = "lzo",
    .levels = no_levels,
    .compress_context_new = lzo_compress_context_new,
    .compress_context_free = free,
    .compress = lzo_compress_page,
    .decompress = lzo_decompress_page,
};

/* ------------------------------------------------------------------------
 * lz4 and lz4hc (one decoder, two encoders)
 * ---------------------------------------------------------------------- */

/* lz4's level is its acceleration, as in the kernel's lz4 backend: 1 (the
 * default) compresses best, larger values trade ratio for speed. The top is
 * liblz4's own limit (LZ4_ACCELERATION_MAX, not in its header). */
#define LZ4_ACCELERATION_TOP 65537

static void lz4_levels(int *min, int *max, int *dflt)
{
    *min = 1;
    *max = LZ4_ACCELERATION_TOP;
    *dflt = 1;
}

static void *lz4_compress_context_new(int level)
{
    (void)level;
    return malloc((size_t)LZ4_sizeofState());
}

static int lz4_compress_page(void *context, int level, const struct comp_dict *dict,
                             const void *page, void *dst, size_t capacity)
{
    (void)dict;
    int cap = capacity > (size_t)LZ4_compressBound(PAGE_SIZE) ? LZ4_compressBound(PAGE_SIZE)
                                                              : (int)capacity;
    /* Returns 0 when the output does not fit: exactly our contract. */
    return LZ4_compress_fast_extState(context, page, dst, PAGE_SIZE, cap, level);
}

static int lz4_decompress_page(void *context, const struct comp_dict *dict, const void *src,
                               size_t length, void *page)
{
    (void)context;
    (void)dict;
    if (length > (size_t)LZ4_compressBound(PAGE_SIZE))
        return -EIO;
    int rc = LZ4_decompress_safe(src, page, (int)length, PAGE_SIZE);
    return rc == (int)PAGE_SIZE ? 0 : -EIO;
}

static const struct comp_backend lz4_backend = {
    .name = "lz4",
    .levels = lz4_levels,
    .compress_context_new = lz4_compress_context_new,
    .compress_context_free = free,
    .compress = lz4_compress_page,
    .decompress = lz4_decompress_page,
};

static void lz4hc_levels(int *min, int *max, int *dflt)
{
    *min = LZ4HC_CLEVEL_MIN;
    *max = LZ4HC_CLEVEL_MAX;
    *dflt = LZ4HC_CLEVEL_DEFAULT;
}

static void *lz4hc_compress_context_new(int level)
{
    (void)level;
    return malloc((size_t)LZ4_sizeofStateHC());
}

static int lz4hc_compress_page(void *context, int level, const struct comp_dict *dict,
                               const void *page, void *dst, size_t capacity)
{
    (void)dict;
    int cap = capacity > (size_t)LZ4_compressBound(PAGE_SIZE) ? LZ4_compressBound(PAGE_SIZE)
                                                              : (int)capacity;
    return LZ4_compress_HC_extStateHC(context, page, dst, PAGE_SIZE, cap, level);
}

static const struct comp_backend lz4hc_backend = {
    .name = "lz4hc",
    .levels = lz4hc_levels,
    .compress_context_new = lz4hc_compress_context_new,
    .compress_context_free = free,
    .compress = lz4hc_compress_page,
    .decompress = lz4_decompress_page,
};

/* ------------------------------------------------------------------------
 * zstd
 * ---------------------------------------------------------------------- */

/* A dictionary as both directions use it: zstd's digested forms, each
 * holding its own copy of the content. */
struct comp_dict {
    ZSTD_CDict *zstd_cdict;
    ZSTD_DDict *zstd_ddict;
    size_t memory;
};

/* Every page is exactly 4096 bytes and the slot already knows the algorithm,
 * so the frame carries no magic number, no content size, no dictionary id
 * and no checksum: the header shrinks from 9 bytes to 2. The decoder still
 * insists on exactly one page. */
#define ZSTD_DEFAULT_LEVEL 3
/* A page needs a window of 2^12; with a dictionary the window covers the
 * dictionary too (up to COMP_DICT_MAX, 2^20). The decoder writes straight
 * into the page (stableOutBuffer), so a larger limit allocates nothing. */
#define ZSTD_WINDOWLOG_LIMIT 21

/* zstd's negative "fast" levels are left out on purpose: comp_resolve_level
 * returns a level or a negative errno, so a level of -22 would read as
 * -EINVAL; and at 4 KiB they save little (the lowest just store raw). */
static void zstd_levels(int *min, int *max, int *dflt)
{
    *min = 1;
    *max = ZSTD_maxCLevel();
    *dflt = ZSTD_DEFAULT_LEVEL;
}

static void *zstd_compress_context_new(int level)
{
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (!cctx)
        return NULL;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_format, ZSTD_f_zstd1_magicless)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_dictIDFlag, 0))) {
        ZSTD_freeCCtx(cctx);
        return NULL;
    }
    return cctx;
}

static void zstd_compress_context_free(void *context)
{
    ZSTD_freeCCtx(context);
}

/* `length` bytes of `src` into one frame: a page, or a bundle's pages (comp_compress_span). */
static int zstd_compress_bytes(void *context, int level, const struct comp_dict *dict,
                               const void *src, size_t length, void *dst, size_t capacity)
{
    /* Setting the level or the dictionary only stores a value; the frame
     * parameters stick across ZSTD_compress2 calls. A dictionary brings its
     * own level (comp_dict_create), which supersedes the context's. */
    /* A frame that failed (output too small) leaves the session open, and
     * a dictionary can only change between sessions. */
    if (ZSTD_isError(ZSTD_CCtx_reset(context, ZSTD_reset_session_only)) ||
        ZSTD_isError(ZSTD_CCtx_refCDict(context, dict ? dict->zstd_cdict : NULL)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, level)))
        return -EIO;
    size_t rc = ZSTD_compress2(context, dst, capacity, src, length);
    if (ZSTD_isError(rc)) {
        /* The context is reset for the next frame either way. */
        return ZSTD_getErrorCode(rc) == ZSTD_error_dstSize_tooSmall ? 0 : -EIO;
    }
    return (int)rc;
}

static int zstd_compress_page(void *context, int level, const struct comp_dict *dict,
                              const void *page, void *dst, size_t capacity)
{
    return zstd_compress_bytes(context, level, dict, page, PAGE_SIZE, dst, capacity);
}

static void *zstd_decompress_context_new(void)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    if (!dctx)
        return NULL;
    /* stableOutBuffer: decode straight into the page, no window buffer.
     * windowLogMax: our frames have a 4 KiB window; a corrupt header must
     * not make the decoder allocate a large one. */
    if (ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_format, ZSTD_f_zstd1_magicless)) ||
        ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_stableOutBuffer, 1)) ||
        ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, ZSTD_WINDOWLOG_LIMIT))) {
        ZSTD_freeDCtx(dctx);
        return NULL;
    }
    return dctx;
}

static void zstd_decompress_context_free(void *context)
{
    ZSTD_freeDCtx(context);
}

/* One frame that must give exactly `out_length` bytes. */
static int zstd_decompress_bytes(void *context, const struct comp_dict *dict, const void *src,
                                 size_t length, void *out, size_t out_length)
{
    if (ZSTD_isError(ZSTD_DCtx_refDDict(context, dict ? dict->zstd_ddict : NULL)))
        return -EIO;
    /* The streaming call, not ZSTD_decompressDCtx: after a magicless frame
     * the one-shot decoder reads up to 3 bytes past the end of the input
     * when 1..3 bytes follow the frame (zstd 1.5.4, seen with valgrind).
     * The streaming decoder stops exactly at the end of the frame, so
     * trailing bytes are detected from in.pos. With all input present it
     * decodes blocks straight from `src`, so it costs no extra copy. */
    ZSTD_inBuffer in = {src, length, 0};
    ZSTD_outBuffer into = {out, out_length, 0};
    size_t rc = ZSTD_decompressStream(context, &into, &in);
    if (ZSTD_isError(rc) || rc != 0 || in.pos != length || into.pos != out_length) {
        ZSTD_DCtx_reset(context, ZSTD_reset_session_only);
        return -EIO;
    }
    return 0;
}

static int zstd_decompress_page(void *context, const struct comp_dict *dict, const void *src,
                                size_t length, void *page)
{
    return zstd_decompress_bytes(context, dict, src, length, page, PAGE_SIZE);
}

static const struct comp_backend zstd_backend = {
    .name = "zstd",
    .levels = zstd_levels,
    .output_slack = 32,
    .compress_context_new = zstd_compress_context_new,
    .compress_context_free = zstd_compress_context_free,
    .decompress_context_new = zstd_decompress_context_new,
    .decompress_context_free = zstd_decompress_context_free,
    .compress = zstd_compress_page,
    .decompress = zstd_decompress_page,
};

/* ------------------------------------------------------------------------
 * deflate (libdeflate, raw DEFLATE without zlib/gzip wrapper)
 * ---------------------------------------------------------------------- */

static void deflate_levels(int *min, int *max, int *dflt)
{
    *min = 1; /* libdeflate's 0 stores only; 0 means "default" to us */
    *max = 12;
    *dflt = 6;
}

static void *deflate_compress_context_new(int level)
{
    return libdeflate_alloc_compressor(level);
}

static void deflate_compress_context_free(void *context)
{
    libdeflate_free_compressor(context);
}

static int deflate_compress_page(void *context, int level, const struct comp_dict *dict,
                                 const void *page, void *dst, size_t capacity)
{
    (void)dict;
    (void)level; /* the compressor was made for this level */
    return (int)libdeflate_deflate_compress(context, page, PAGE_SIZE, dst, capacity);
}

static void *deflate_decompress_context_new(void)
{
    return libdeflate_alloc_decompressor();
}

static void deflate_decompress_context_free(void *context)
{
    libdeflate_free_decompressor(context);
}

static int deflate_decompress_page(void *context, const struct comp_dict *dict, const void *src,
                                   size_t length, void *page)
{
    (void)dict;
    size_t consumed = 0;
    /* A NULL actual_out makes any output shorter than a page an error; the
     * consumed count rejects trailing bytes and streams that only decode
     * because libdeflate pads a truncated input with zero bits. */
    enum libdeflate_result rc =
        libdeflate_deflate_decompress_ex(context, src, length, page, PAGE_SIZE, &consumed, NULL);
    return rc == LIBDEFLATE_SUCCESS && consumed == length ? 0 : -EIO;
}

static const struct comp_backend deflate_backend = {
    .name = "deflate",
    .levels = deflate_levels,
    .level_bound_context = true,
    .output_slack = 32,
    .compress_context_new = deflate_compress_context_new,
    .compress_context_free = deflate_compress_context_free,
    .decompress_context_new = deflate_decompress_context_new,
    .decompress_context_free = deflate_decompress_context_free,
    .compress = deflate_compress_page,
    .decompress = deflate_decompress_page,
};

/* ------------------------------------------------------------------------
 * Registry and per-thread contexts
 * ---------------------------------------------------------------------- */

/* Indexed by enum comp_algorithm: the ids are stored in page slots. */
static const struct comp_backend *const backends[COMP_COUNT] = {
    [COMP_LZO] = &lzo_backend,   [COMP_LZ4] = &lz4_backend,         [COMP_LZ4HC] = &lz4hc_backend,
    [COMP_ZSTD] = &zstd_backend, [COMP_DEFLATE] = &deflate_backend,
};

/* This thread's contexts, made on first use. A pthread key whose value
 * points here gets its destructor called when the thread exits, which frees
 * them; the main thread's are freed by a destructor function at exit. */
/* Large enough for any backend's output plus its slack: the largest
 * worst case is lzo's (4419 bytes), the others' stay near 4101..4114. */
#define SCRATCH_SIZE (2 * PAGE_SIZE)

struct comp_thread_contexts {
    unsigned char *scratch; /* SCRATCH_SIZE bytes, for backends with output_slack */
    void *compress[COMP_COUNT];
    int compress_level[COMP_COUNT];
    void *decompress[COMP_COUNT];
    bool registered;
};

static __thread struct comp_thread_contexts thread_contexts;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static bool key_ready;

static void free_contexts(struct comp_thread_contexts *contexts)
{
    free(contexts->scratch);
    contexts->scratch = NULL;
    for (int id = 0; id < COMP_COUNT; id++) {
        if (contexts->compress[id]) {
            backends[id]->compress_context_free(contexts->compress[id]);
            contexts->compress[id] = NULL;
        }
        if (contexts->decompress[id]) {
            backends[id]->decompress_context_free(contexts->decompress[id]);
            contexts->decompress[id] = NULL;
        }
    }
}

static void thread_exit_destructor(void *value)
{
    struct comp_thread_contexts *contexts = value;
    free_contexts(contexts);
    contexts->registered = false;
}

static void key_create_once(void)
{
    key_ready = pthread_key_create(&key, thread_exit_destructor) == 0;
}

/* Arrange for this thread's contexts to be freed at thread exit. If that
 * cannot be arranged the contexts still work; they only leak at exit. */
static void register_thread(void)
{
    if (thread_contexts.registered)
        return;
    pthread_once(&key_once, key_create_once);
    if (key_ready && pthread_setspecific(key, &thread_contexts) == 0)
        thread_contexts.registered = true;
}

/* exit() runs no pthread key destructors for the thread calling it. */
__attribute__((destructor)) static void free_exiting_thread_contexts(void)
{
    free_contexts(&thread_contexts);
}

static bool valid_id(int id)
{
    return id >= 0 && id < COMP_COUNT;
}

int comp_find(const char *name)
{
    if (!name)
        return -ENOENT;
    for (int id = 0; id < COMP_COUNT; id++)
        if (strcmp(name, backends[id]->name) == 0)
            return id;
    return -ENOENT;
}

const char *comp_name(int id)
{
    return valid_id(id) ? backends[id]->name : "?";
}

void comp_levels(int id, int *min, int *max, int *dflt)
{
    if (!valid_id(id)) {
        no_levels(min, max, dflt);
        return;
    }
    backends[id]->levels(min, max, dflt);
}

int comp_resolve_level(int id, int level)
{
    if (!valid_id(id))
        return -EINVAL;
    int min, max, dflt;
    backends[id]->levels(&min, &max, &dflt);
    if (level == 0)
        return dflt;
    if (level < min || level > max)
        return -EINVAL;
    return level;
}

int comp_choose(const char *name, int level, int *id, int *resolved_level)
{
    int found = comp_find(name);
    if (found < 0)
        return found;
    int resolved = comp_resolve_level(found, level);
    if (resolved < 0)
        return resolved;
    *id = found;
    *resolved_level = resolved;
    return 0;
}

int comp_compress(int id, int level, const void *page, void *dst, size_t capacity)
{
    return comp_compress_dict(id, level, NULL, page, dst, capacity);
}

/* This thread's compression context of algorithm `id` for `level`, made on first use; NULL:
 * no memory. */
static void *compress_context(int id, int level)
{
    const struct comp_backend *backend = backends[id];
    struct comp_thread_contexts *contexts = &thread_contexts;
    void *context = contexts->compress[id];
    if (context && backend->level_bound_context && contexts->compress_level[id] != level) {
        backend->compress_context_free(context);
        contexts->compress[id] = context = NULL;
    }
    if (!context) {
        register_thread();
        context = FAULT_POINT(FAULT_ALLOC) ? NULL : backend->compress_context_new(level);
        if (!context)
            return NULL;
        contexts->compress[id] = context;
        contexts->compress_level[id] = level;
    }
    return context;
}

int comp_compress_dict(int id, int level, const struct comp_dict *dict, const void *page, void *dst,
                       size_t capacity)
{
    if (!valid_id(id))
        return -EINVAL;
    if (capacity == 0)
        return 0;
    if (FAULT_POINT(FAULT_COMPRESS))
        return -EIO;
    const struct comp_backend *backend = backends[id];
    struct comp_thread_contexts *contexts = &thread_contexts;
    void *context = compress_context(id, level);
    if (!context)
        return -ENOMEM;
    if (backend->output_slack == 0 || capacity >= SCRATCH_SIZE)
        return backend->compress(context, level, dict, page, dst, capacity);

    /* Give the library its slack in scratch; copying a few KiB costs far
     * less than the compression itself. */
    if (!contexts->scratch) {
        contexts->scratch = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(SCRATCH_SIZE);
        if (!contexts->scratch)
            return -ENOMEM;
    }
    size_t room = capacity + backend->output_slack;
    int length = backend->compress(context, level, dict, page, contexts->scratch,
                                   room < SCRATCH_SIZE ? room : SCRATCH_SIZE);
    if (length <= 0)
        return length;
    if ((size_t)length > capacity)
        return 0;
    memcpy(dst, contexts->scratch, (size_t)length);
    return length;
}

/* This thread's decompression context of algorithm `id` (one that has them), made on first
 * use; NULL: no memory. */
static void *decompress_context(int id)
{
    void *context = thread_contexts.decompress[id];
    if (!context) {
        register_thread();
        context = FAULT_POINT(FAULT_ALLOC) ? NULL : backends[id]->decompress_context_new();
        thread_contexts.decompress[id] = context;
    }
    return context;
}

int comp_decompress_dict(int id, const struct comp_dict *dict, const void *src, size_t length,
                         void *page)
{
    if (!valid_id(id))
        return -EINVAL;
    if (length == 0)
        return -EIO;
    const struct comp_backend *backend = backends[id];
    void *context = NULL;
    if (backend->decompress_context_new && !(context = decompress_context(id)))
        return -ENOMEM;
    return backend->decompress(context, dict, src, length, page);
}

/* A span's frame is cut into blocks (ZSTD_c_maxBlockSize) so that its first pages decode
 * without the rest (comp_span_decode stops after the block of the last page wanted): a read of
 * page k of a bundle decodes the blocks up to k's instead of the whole frame. Blocks of one page
 * would decode the fewest pages, but every block pays for its own tables, in bytes and in
 * decoding: on the image of bench/bundle-shapes.sh (5ee1319), four blocks a frame (a quarter
 * of its pages, at least one) took 1.5 and 2.3 points less memory than one-page blocks in
 * bundles of 8 and 16 pages, for the same decoding time a random read (within 5%). */
#define SPAN_BLOCKS 4

size_t comp_span_block(size_t length)
{
    size_t pages = length / PAGE_SIZE / SPAN_BLOCKS;
    return (pages ? pages : 1) * PAGE_SIZE;
}

int comp_compress_span(int id, int level, const struct comp_dict *dict, const void *src,
                       size_t length, void *dst, size_t capacity)
{
    return comp_compress_span_blocks(id, level, dict, src, length, comp_span_block(length), dst,
                                     capacity);
}

int comp_compress_span_blocks(int id, int level, const struct comp_dict *dict, const void *src,
                              size_t length, size_t block, void *dst, size_t capacity)
{
    if (id != COMP_ZSTD || length == 0 || block < PAGE_SIZE || block > ZSTD_BLOCKSIZE_MAX)
        return -EINVAL;
    if (capacity == 0)
        return 0;
    if (FAULT_POINT(FAULT_COMPRESS))
        return -EIO;
    void *context = compress_context(id, level);
    if (!context)
        return -ENOMEM;
    /* A frame that failed leaves the session open: parameters change between sessions. */
    if (ZSTD_isError(ZSTD_CCtx_reset(context, ZSTD_reset_session_only)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(context, ZSTD_c_maxBlockSize, (int)block)))
        return -EIO;
    int rc = zstd_compress_bytes(context, level, dict, src, length, dst, capacity);
    /* pages again: one block of the default size */
    ZSTD_CCtx_reset(context, ZSTD_reset_session_only);
    ZSTD_CCtx_setParameter(context, ZSTD_c_maxBlockSize, 0);
    return rc;
}

/* A span decoder: zstd's block-at-a-time API (ZSTD_decompressContinue) writes each block
 * straight into the caller's buffer, where the previous blocks are the window, and stops
 * after the block that completes `want`; its state stays between calls, so a later call on
 * the same frame goes on from there. The streaming decoder would need its own window buffer
 * and a copy out of it to stop short of a frame's end, and would start over each time. */
struct comp_span_decoder {
    ZSTD_DCtx *dctx;
    size_t in_pos;  /* frame bytes consumed */
    size_t out_pos; /* bytes decoded into out */
    bool open;      /* a frame begun and not failed */
};

int comp_span_decoder_new(struct comp_span_decoder **out)
{
    struct comp_span_decoder *decoder =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *decoder);
    if (!decoder)
        return -ENOMEM;
    decoder->dctx = ZSTD_createDCtx();
    if (!decoder->dctx || ZSTD_isError(ZSTD_DCtx_setParameter(decoder->dctx, ZSTD_d_format,
                                                              ZSTD_f_zstd1_magicless))) {
        comp_span_decoder_free(decoder);
        return -ENOMEM;
    }
    *out = decoder;
    return 0;
}

void comp_span_decoder_free(struct comp_span_decoder *decoder)
{
    if (decoder)
        ZSTD_freeDCtx(decoder->dctx);
    free(decoder);
}

int comp_span_begin(struct comp_span_decoder *decoder, int id, const struct comp_dict *dict)
{
    decoder->open = false;
    if (id != COMP_ZSTD)
        return -EINVAL;
    size_t rc = dict ? ZSTD_decompressBegin_usingDDict(decoder->dctx, dict->zstd_ddict)
                     : ZSTD_decompressBegin(decoder->dctx);
    if (ZSTD_isError(rc))
        return -EIO;
    decoder->in_pos = 0;
    decoder->out_pos = 0;
    decoder->open = true;
    return 0;
}

/* The frame's end: all of it decoded to exactly out_length, nothing after it. */
static bool span_complete(const struct comp_span_decoder *decoder,
                          const struct comp_span_source *source, size_t out_length)
{
    return decoder->in_pos == source->length && decoder->out_pos == out_length;
}

int comp_span_decode(struct comp_span_decoder *decoder, const struct comp_span_source *source,
                     void *out, size_t out_length, size_t want)
{
    if (!decoder->open || want == 0 || want > out_length)
        return -EINVAL;
    /* Each step consumes at least one byte of the frame, so this ends. */
    while (decoder->out_pos < want || (want == out_length && decoder->in_pos < source->length)) {
        size_t count = ZSTD_nextSrcSizeToDecompress(decoder->dctx);
        if (count == 0 || count > source->length - decoder->in_pos)
            break; /* the frame ended, or it claims more than there is */
        const void *bytes = source->bytes(source->arg, decoder->in_pos, count);
        if (!bytes)
            break; /* the source failed */
        size_t made = ZSTD_decompressContinue(decoder->dctx, (char *)out + decoder->out_pos,
                                              out_length - decoder->out_pos, bytes, count);
        if (ZSTD_isError(made))
            break;
        decoder->in_pos += count;
        decoder->out_pos += made;
    }
    bool done = want < out_length ? decoder->out_pos >= want
                                  : ZSTD_nextSrcSizeToDecompress(decoder->dctx) == 0 &&
                                        span_complete(decoder, source, out_length);
    if (!done)
        decoder->open = false; /* corrupt: begin again */
    return done ? 0 : -EIO;
}

size_t comp_span_decoded(const struct comp_span_decoder *decoder)
{
    return decoder->open ? decoder->out_pos : 0;
}

/* ------------------------------------------------------------------------
 * Dictionaries (zstd)
 * ---------------------------------------------------------------------- */

bool comp_has_dict(int id)
{
    return id == COMP_ZSTD;
}

int comp_dict_create(int id, int level, const void *content, size_t size, struct comp_dict **out)
{
    if (!comp_has_dict(id) || size < COMP_DICT_MIN || size > COMP_DICT_MAX)
        return -EINVAL;
    struct comp_dict *dict = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *dict);
    if (!dict)
        return -ENOMEM;
    /* Tables sized for one page of input, not for the unknown size that
     * ZSTD_createCDict() assumes: a fraction of the memory, same output. */
    ZSTD_compressionParameters params = ZSTD_getCParams(level, PAGE_SIZE, size);
    /* The tables index positions of the dictionary: more slots than it has
     * bytes find nothing more, and at higher levels zstd would make them
     * eight times that (1 MiB for a 64 KiB dictionary). */
    unsigned log = 1;
    while ((1ull << log) < size)
        log++;
    if (params.hashLog > log)
        params.hashLog = log;
    if (params.chainLog > log)
        params.chainLog = log;
    /* zstd returns NULL both when out of memory and for content it cannot
     * use; only a faulted allocation tells them apart here. */
    bool out_of_memory = FAULT_POINT(FAULT_ALLOC);
    if (!out_of_memory)
        dict->zstd_cdict = ZSTD_createCDict_advanced(content, size, ZSTD_dlm_byCopy, ZSTD_dct_auto,
                                                     params, ZSTD_defaultCMem);
    out_of_memory = out_of_memory || FAULT_POINT(FAULT_ALLOC);
    if (!out_of_memory && dict->zstd_cdict)
        dict->zstd_ddict = ZSTD_createDDict(content, size);
    if (!dict->zstd_cdict || !dict->zstd_ddict) {
        comp_dict_free(dict);
        return out_of_memory ? -ENOMEM : -EINVAL;
    }
    dict->memory =
        sizeof *dict + ZSTD_sizeof_CDict(dict->zstd_cdict) + ZSTD_sizeof_DDict(dict->zstd_ddict);
    *out = dict;
    return 0;
}

void comp_dict_free(struct comp_dict *dict)
{
    if (!dict)
        return;
    ZSTD_freeCDict(dict->zstd_cdict);
    ZSTD_freeDDict(dict->zstd_ddict);
    free(dict);
}

size_t comp_dict_memory(const struct comp_dict *dict)
{
    return dict ? dict->memory : 0;
}

int comp_dict_train(void *dict, size_t capacity, const void *samples, const size_t *sample_sizes,
                    unsigned count)
{
    if (FAULT_POINT(FAULT_COMPRESS))
        return -EIO;
    size_t size = ZDICT_trainFromBuffer(dict, capacity, samples, sample_sizes, count);
    /* ZDICT fails when the samples are too few or too alike to learn from. */
    return ZDICT_isError(size) ? -EAGAIN : (int)size;
}
