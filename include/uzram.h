/* uzram.h - public API of libuzram, a compressed, deduplicating RAM page store.
 * This header is the manual of the engine: read it top to bottom once. */
#ifndef UZRAM_H
#define UZRAM_H

/*
 * Introduction
 * ============
 * A uzram device is a virtual disk of `disksize` bytes kept in memory as 4 KiB
 * pages. Each page is kept in the cheapest form that holds it exactly:
 *
 *   empty        never written or discarded: no memory, reads as zeros
 *   same-filled  one 8-byte word repeated over the page: only the word is kept
 *   duplicate    (use_dedup on) a reference to an identical page already stored
 *   compressed   an object in the engine's size-class pool
 *   huge         the raw page, when compression would not save memory
 *
 * The engine never prints, never exits and never opens sockets: frontends
 * (the NBD server, `uzram estimate`, `uzram bench`) are built on this header.
 *
 * Conventions
 * -----------
 * - Every function that can fail returns 0 (or a non-negative count where
 *   stated) on success and a negative errno on failure. Nothing is printed.
 * - Offsets and lengths are bytes. I/O must be aligned to UZRAM_SECTOR_SIZE
 *   (512) and lie inside the disk; anything else is -EINVAL and counts in
 *   io_stat's invalid_io, and nothing stored changes. A zero length at a
 *   valid offset (the end of the disk included) succeeds and does nothing.
 * - Thread safety: all I/O functions, uzram_compact(), the stats calls and
 *   the attribute calls may be used by any number of threads at once on the
 *   same device. Locking is per page; a read racing with a write of the same
 *   page returns the old or the new page whole, never a mix. Only
 *   uzram_destroy() needs the caller to have stopped all other calls first.
 * - Statistics names follow Linux zram's sysfs attributes (mm_stat, io_stat,
 *   comp_algorithm, mem_limit, ...), so a zram user already knows them.
 *
 * Versions and linking
 * --------------------
 * UZRAM_VERSION_* say which header a program was built with;
 * uzram_version_number() says which library it runs with. The library comes
 * as libuzram.a and as libuzram.so (soname libuzram.so.MAJOR), which exports
 * exactly the functions marked UZRAM_API below. Within one MAJOR the shared
 * library keeps working for programs built against an older header:
 * - struct uzram_stats only grows at its end, and uzram_get_stats() is told
 *   the size of the caller's struct;
 * - struct uzram_config keeps its size: new settings take their room from
 *   `reserved`, and each treats 0 as its default.
 * The page-analysis functions at the end (for estimators and benchmarks)
 * make no such promise: they are declared only with UZRAM_STATIC_LINKING_ONLY
 * defined, and only libuzram.a has them, as with zstd's section of the same
 * name.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks what libuzram.so exports; the library is built with hidden
 * visibility, so anything unmarked stays inside it. */
#ifndef UZRAM_API
#if defined(__GNUC__) && __GNUC__ >= 4
#define UZRAM_API __attribute__((visibility("default")))
#else
#define UZRAM_API
#endif
#endif

#define UZRAM_VERSION_MAJOR 0
#define UZRAM_VERSION_MINOR 2
#define UZRAM_VERSION_PATCH 0
#define UZRAM_VERSION_NUMBER                                                                       \
    (UZRAM_VERSION_MAJOR * 10000 + UZRAM_VERSION_MINOR * 100 + UZRAM_VERSION_PATCH)
#define UZRAM_STRINGIFY_(x) #x
#define UZRAM_STRINGIFY(x) UZRAM_STRINGIFY_(x)
#define UZRAM_VERSION_STRING                                                                       \
    UZRAM_STRINGIFY(UZRAM_VERSION_MAJOR)                                                           \
    "." UZRAM_STRINGIFY(UZRAM_VERSION_MINOR) "." UZRAM_STRINGIFY(UZRAM_VERSION_PATCH)

/* The version of the library in use, as UZRAM_VERSION_NUMBER (MAJOR * 10000
 * + MINOR * 100 + PATCH) and as "MAJOR.MINOR.PATCH". A program built
 * against one header may run with another library: compare
 * uzram_version_number() with UZRAM_VERSION_NUMBER to tell. */
UZRAM_API unsigned uzram_version_number(void);
UZRAM_API const char *uzram_version(void);

#define UZRAM_PAGE_SIZE 4096u
#define UZRAM_SECTOR_SIZE 512u

/* Opaque device handle. */
struct uzram;

/* ------------------------------------------------------------------------
 * Creating and destroying a device
 * ---------------------------------------------------------------------- */

/* Settings of a device. Fill with uzram_config_init(), then change fields.
 * The struct keeps its size across versions of one MAJOR: a later setting
 * takes its room from `reserved`, with 0 meaning its default, so a program
 * built against an older header (whose `reserved` is zero) gets the
 * defaults of settings it does not know. */
struct uzram_config {
    uint64_t disksize;          /* bytes; a non-zero multiple of 4096 */
    const char *comp_algorithm; /* "lz4" (default), "lz4hc", "zstd", "lzo", "deflate" */
    int comp_level;             /* 0: the algorithm's default; see uzram_algorithm_levels() */
    bool same_filled;           /* store same-filled pages as one word (default true) */
    bool use_dedup;             /* store identical pages once (default false) */
    uint64_t mem_limit;         /* bytes of pool memory allowed (dictionaries of
                                   recompression come on top); 0 means no limit */
    uint64_t reserved[12];      /* must be zero (uzram_config_init() makes it so) */
};

/* Fill `config` with the defaults: disksize 0 (must be set), lz4 at its
 * default level, same_filled on, use_dedup off, no mem_limit, reserved
 * zero. */
UZRAM_API void uzram_config_init(struct uzram_config *config);

/* The page table: UZRAM_TABLE_BYTES_PER_PAGE bytes of memory per 4 KiB page
 * of the disk, mapped at creation and filled as pages are written (a client
 * writing one page in every 256 makes all of it resident). It is counted in
 * table_mem and charged to a group's limit (uzram_set_group()); a disksize
 * whose table would take more than 1/UZRAM_TABLE_MEMORY_SHARE of the
 * machine's memory is refused, as zram's allocation of its table fails. */
#define UZRAM_TABLE_BYTES_PER_PAGE 16u
#define UZRAM_TABLE_MEMORY_SHARE 4u

/* Create a device. On success *out owns the device; free it with
 * uzram_destroy().
 * Errors: -EINVAL  config or out is NULL, disksize is 0, not a multiple of
 *                  4096, or larger than 2^44 pages; comp_level outside the
 *                  algorithm's range; `reserved` not zero (a setting of a
 *                  later version that this library does not have)
 *         -E2BIG   the page table of disksize would take more than a
 *                  quarter of the machine's memory (see above)
 *         -ENOENT  comp_algorithm names no algorithm this build has
 *         -ENOMEM  out of memory. */
UZRAM_API int uzram_create(const struct uzram_config *config, struct uzram **out);

/* Free every page and the device itself. NULL is accepted. The caller must
 * make sure no other call on this device is running or will start. */
UZRAM_API void uzram_destroy(struct uzram *dev);

/* Drop all data and zero every statistic except mem_limit, keeping the
 * settings (algorithm, level, same_filled, use_dedup, disksize, mem_limit).
 * The dedup index, once made, stays allocated until uzram_destroy().
 * First it stops the passes running (writeback and recompression, by
 * request or the library's threads: each ends after its current batch or
 * page) and waits for them, so that none begun before the reset writes or
 * counts anything after it; passes asked for meanwhile wait for it to end.
 * Like zram, a reset is meant for a device nobody is using: I/O that runs
 * at the same time is safe (nothing crashes or corrupts) but pages it writes
 * may survive the reset. Returns 0; -EIO when the lock of a page in a state file stayed held
 * past its deadline (see uzram_adopt(); that page keeps its data). Thread-safe. */
UZRAM_API int uzram_reset(struct uzram *dev);

/* ------------------------------------------------------------------------
 * I/O
 * ---------------------------------------------------------------------- */

/* Read `length` bytes at `offset` into `buf`. Never-written and discarded
 * space reads as zeros.
 * Errors: -EINVAL  misaligned or out of range (counted in invalid_io)
 *         -EIO     a stored page failed to decompress (counted in failed_reads;
 *                  this means memory corruption and should never happen), or,
 *                  for a device in a state file (uzram_create_in), a lock word
 *                  of the page in the file stayed held 10 s (another process
 *                  writes the file, or it is damaged: counted in
 *                  state_lock_timeouts too; uzram_adopt() lets go of it)
 *         -ENOMEM  no memory for a decompression context. */
UZRAM_API int uzram_read(struct uzram *dev, uint64_t offset, void *buf, size_t length);

/* Write `length` bytes from `buf` at `offset`. A partial page is read,
 * patched and written back whole. Pages are written in order; if one fails,
 * the pages before it hold the new data, that page and the ones after it keep
 * their old content, and the error is returned (counted in failed_writes).
 * Errors: -EINVAL  misaligned or out of range (counted in invalid_io)
 *         -ENOSPC  storing the page would take the pool past mem_limit
 *         -ENOMEM  the system is out of memory
 *         -EIO     an old page needed for a partial write failed to decompress,
 *                  or a lock word of the page in a state file stayed held (as
 *                  uzram_read(); the page keeps its old content). */
UZRAM_API int uzram_write(struct uzram *dev, uint64_t offset, const void *buf, size_t length);

/* Drop the data of whole pages inside the range; they read as zeros and hold
 * no memory. Partial pages at either end are zeroed in place instead (so the
 * range always reads back as zeros afterwards), which may fail like a write.
 * Errors: as uzram_write(). */
UZRAM_API int uzram_discard(struct uzram *dev, uint64_t offset, uint64_t length);

/* Make the range read as zeros. With `keep_allocated` false this is
 * uzram_discard(); with it true whole pages are stored as same-filled zero
 * pages (as a device with NBD's NO_HOLE flag must) and still use no pool
 * memory. Errors: as uzram_write(). */
UZRAM_API int uzram_write_zeroes(struct uzram *dev, uint64_t offset, uint64_t length,
                                 bool keep_allocated);

/* Allocation status of the run that starts at `offset`, for NBD's
 * BLOCK_STATUS and for sparse copies. On success *flags is a combination of
 * UZRAM_EXTENT_HOLE (no page stored) and UZRAM_EXTENT_ZERO (reads as zeros),
 * and *run_length (> 0, <= length) is how many bytes from `offset` share it.
 * Offsets need not be aligned; status is per page.
 * Errors: -EINVAL  length is 0 or the range is outside the disk (invalid_io)
 *         -EIO     a lock word of the page in a state file stayed held (as uzram_read()). */
#define UZRAM_EXTENT_HOLE 1u
#define UZRAM_EXTENT_ZERO 2u
UZRAM_API int uzram_extent(struct uzram *dev, uint64_t offset, uint64_t length,
                           uint64_t *run_length, unsigned *flags);

/* Mark stored pages idle, as zram's `idle` attribute does: every stored page
 * when `min_age` is 0 (zram's "all"), else the pages not read or written for
 * at least `min_age` seconds. A read or write of a page clears its mark;
 * idle_pages counts the marked pages, and recompression (type=idle) takes
 * them. The time of the last access is kept per page in whole seconds.
 * Stores the number of pages newly marked in *marked (if not NULL).
 * Returns 0. Thread-safe; pages written meanwhile may or may not be marked. */
UZRAM_API int uzram_mark_idle(struct uzram *dev, uint64_t min_age, uint64_t *marked);

/* Recompression, as zram's CONFIG_ZRAM_MULTI_COMP has it: pages are written
 * with the primary algorithm (comp_algorithm, priority 0), and later
 * compressed again with a secondary algorithm (priority 1..3), typically a
 * slower, stronger one, when that makes them smaller. Each stored object
 * records the configuration (algorithm, level, dictionary) that made it, so
 * reads always decode it, whatever the settings became since; a dictionary
 * stays in memory while any page needs it and counts in mem_used_total (and
 * dict_mem). Unlike zram, these settings may change at any time. */
#define UZRAM_RECOMPRESS_PRIORITY_MAX 3

/* Set the secondary algorithm of `priority` (1..3) to `name` at `level` (0:
 * its default), without a dictionary; a NULL or empty name removes it.
 * Errors: -EINVAL priority or level out of range, -ENOENT unknown name,
 * -ENOSPC the device's 16 codec configurations are all in use by stored
 * pages (recompress or rewrite those of old settings first). */
UZRAM_API int uzram_set_recomp_algorithm(struct uzram *dev, unsigned priority, const char *name,
                                         int level);

/* zram's algorithm_params: set the level and dictionary of the algorithm of
 * `priority` (0: the primary, which like uzram_set_algorithm() only changes
 * while the device holds no data; 1..3: a secondary one), replacing both.
 * `dict` NULL with `dict_size` 0: no dictionary. `dict` with `dict_size`
 * bytes: a zstd dictionary (as `zstd --train` writes) or raw content, of
 * 256 bytes to 1 MiB. `dict` NULL with `dict_size` > 0: train a dictionary
 * of at most that many bytes (256 .. 1 MiB) from a sample of the stored
 * pages (zstd's ZDICT), now if enough are stored, else at the start of the
 * next recompression that finds enough; trained again as the stored data grows
 * (4 trainings at most: docs/uzram.1, lib/recompress/recompress_dict.c). Only zstd takes
 * dictionaries. Errors: -EINVAL bad priority, level or size, a dictionary for another algorithm,
 * content zstd cannot use; -ENOENT no algorithm at that priority; -EBUSY (priority 0 with data
 * stored); -ENOSPC as above; -ENOMEM. */
UZRAM_API int uzram_set_algorithm_params(struct uzram *dev, unsigned priority, int level,
                                         const void *dict, size_t dict_size);

/* Which pages uzram_recompress() takes (zram's type=): idle (marked by
 * uzram_mark_idle()), huge (stored raw), both (huge_idle), or 0 for every
 * stored page. */
#define UZRAM_RECOMPRESS_IDLE 1u
#define UZRAM_RECOMPRESS_HUGE 2u

struct uzram_recompress_result {
    uint64_t pages_tried;          /* compressed again with at least one algorithm */
    uint64_t pages_recompressed;   /* now stored smaller */
    uint64_t pages_incompressible; /* marked: no secondary algorithm shrinks them */
    uint64_t bytes_before;         /* compressed bytes of the recompressed objects before */
    uint64_t bytes_after;          /* ... and after */
};

/* zram's recompress: compress the pages of `type` again with the secondary
 * algorithms and keep the new form only when it takes less memory (a page
 * stored raw only when it then fits below the huge threshold). With
 * `priority` 0 the algorithms above the one a page is stored with are tried
 * in priority order until one shrinks it, and a page none shrinks is marked
 * incompressible (later passes skip it; a write clears the mark); with
 * `priority` 1..3 only that one is tried (pages already stored at that
 * priority or above are left alone). `threshold` (0: none): only objects of
 * at least that many bytes, and only if the new one is smaller than that.
 * `max_pages` (0: no limit): stop after trying that many pages. Same-filled
 * pages are never recompressed; a page shared through dedup is
 * recompressed once for all its references (a raw one stays raw). The page
 * is locked only to copy its object and to swap the new one in if the page
 * did not change meanwhile, as a write does. `result` may be NULL.
 * Errors: -EINVAL bad type or priority, -ENOENT no secondary algorithm set
 * (at `priority`), -ENOMEM / -ENOSPC (no memory for a new object; the page
 * keeps its old form and the pass stops). Recompression makes room, so it
 * runs at mem_limit too: its new objects may take the pool past the limit
 * (or the group's) by the holes the replaced objects left and one span, at
 * most about 5.7 MiB (a span of each size class and one more), until
 * compaction gives the holes back; the pool is compacted when a pass leaves
 * it over the limit. Thread-safe. */
UZRAM_API int uzram_recompress(struct uzram *dev, unsigned type, uint64_t threshold,
                               uint64_t max_pages, unsigned priority,
                               struct uzram_recompress_result *result);

/* Automatic recompression (not in zram): with `seconds` > 0 a thread of the
 * library recompresses, as uzram_recompress() with priority 0 does, the
 * pages not accessed for that many seconds (their last-access time, not the
 * idle marks), again and again; 0 stops it. The thread runs 5 nice steps
 * below its creator's priority, uses at most a share of one CPU (its own CPU
 * time, uzram_set_recompress_cpu(); default 20%), also when the CPUs are busy,
 * and tries at most `rate` pages a second (uzram_set_recompress_rate();
 * default 2048), so foreground I/O keeps most of its speed (docs/BENCHMARKS.md
 * measures how much).
 * uzram_reset() pauses it, uzram_destroy() stops it.
 * Errors: -ENOMEM / -EAGAIN the thread could not be made. */
UZRAM_API int uzram_set_recompress_idle(struct uzram *dev, uint64_t seconds);
/* Pages per second the background thread may try; 0: no limit. Returns 0. */
UZRAM_API int uzram_set_recompress_rate(struct uzram *dev, uint64_t pages_per_second);
/* Percent of one CPU (1..100) the background thread may use: it sleeps as much as it
 * needs to keep its CPU time within that share (100: no limit). Returns 0 or -EINVAL. */
UZRAM_API int uzram_set_recompress_cpu(struct uzram *dev, unsigned percent);

/* Bundles (not in zram): with `pages` 2..16, recompression passes (background and
 * uzram_recompress() without a threshold or the huge type) pack the idle pages of each
 * aligned window of `pages` neighbours that are stored compressed on their own (not raw, not
 * same-filled, not marked incompressible) into one object compressed with the last zstd
 * recompression algorithm (and its dictionary), when at least two are and it takes less
 * memory. With dedup on, a page whose content no other page shares (its dedup entry has one
 * reference) is bundled like any other and its entry leaves the index (dedup_entries falls
 * by one): a later write of the same content is stored anew, with an entry of its own. A
 * page shared through dedup (two references or more) is never bundled. A read of such a page
 * decompresses its bundle up to that page (a second read of the bundle, the rest), and a thread
 * keeps the last bundle it decompressed, so reading its neighbours next costs a copy. A write or
 * discard of a page leaves a dead member; a pass splits a bundle more than half dead back
 * into pages of their own; writeback takes its pages one by one, each compressed alone.
 * 0: off (the default). Errors: -EINVAL for 1 or more than 16. The counters bundles,
 * bundled_pages, bundle_dead_pages and bundle_saved_bytes show what they hold. */
UZRAM_API int uzram_set_recompress_group(struct uzram *dev, unsigned pages);
UZRAM_API unsigned uzram_recompress_group(struct uzram *dev);

/* ------------------------------------------------------------------------
 * Writeback: a backing store below memory
 * ---------------------------------------------------------------------- */

/* zram's writeback (CONFIG_ZRAM_WRITEBACK), with the pages kept compressed:
 * a device may have a backing store, a regular file or a block device, to
 * which pages move out of memory. Their compressed objects are packed into
 * the store's 4 KiB blocks (not a block per page, as zram's), so the store
 * takes about what the objects took in memory. A read of a written-back
 * page reads it from the store and decompresses it, without holding up
 * readers or writers of other pages; it stays on the store until it is
 * overwritten or discarded, which frees its space (in a file, holes are
 * punched: the file's allocated blocks shrink). Same-filled pages stay in
 * memory; an object shared through dedup is written once and stays shared.
 * A failed read of the store is -EIO for that read (failed_reads); a failed
 * write leaves the pages in memory (bd_write_errors, bd_nospace).
 *
 * The store is as volatile as the memory part: it is not an image of the
 * device, and it is emptied when it is attached; what a server left in it
 * is of no use to the next one. */

/* zram's backing_dev: attach the store at `path`, or detach it (`path`
 * NULL or "none"). A file that does not exist is created (O_EXCL, mode
 * 0600: never through a symbolic link, never one somebody made first). An
 * existing regular file is used only if it belongs to the calling process's
 * user, gives group and others no permission and has no other hard link, and
 * only if it is empty, unless `flags` has UZRAM_BACKING_OVERWRITE: the store
 * empties it, and a mistyped path must not destroy a user's file. A symbolic
 * link is followed only where nobody else can have made it (its directory is
 * the user's or root's, writable by nobody else). Everything is decided on
 * the opened descriptor, so nobody can swap another file in meanwhile. The
 * file is locked against a second user and sized sparsely to `size` bytes (0:
 * twice the disk size), and emptied again when the store is detached. Of a
 * block device, opened O_EXCL (the kernel refuses one that is mounted,
 * swapped on, held by another device or claimed by a program), `size` bytes
 * are used (0: all of it). Files and devices are read and written with
 * O_DIRECT where the file system allows it, so that written-back pages do
 * not come back into memory as page cache. Only while the device holds no
 * data (as zram takes backing_dev only before disksize).
 * What is read back is checked against a checksum kept in memory of what was
 * written (8 bytes per 4 KiB block of the store): bytes that changed on the
 * store make the read fail with -EIO and count in bd_checksum_errors, never
 * come back as data.
 * Errors: -EBUSY the device holds data, or the file or device is in use;
 *         -EEXIST a regular file that holds data, without
 *                 UZRAM_BACKING_OVERWRITE;
 *         -EPERM  a regular file of another user;
 *         -EACCES a regular file that group or others may use (or opening
 *                 it was denied);
 *         -EMLINK a regular file with other hard links;
 *         -ELOOP  a symbolic link in a directory others may change;
 *         -EINVAL neither a regular file nor a block device, or `size`
 *                 under 8 KiB or above 128 TiB;
 *         -ENOMEM, or the -errno of opening or sizing it. */
#define UZRAM_BACKING_OVERWRITE 1u
UZRAM_API int uzram_set_backing_dev_flags(struct uzram *dev, const char *path, uint64_t size,
                                          unsigned flags);
/* uzram_set_backing_dev_flags() with no flags: an existing file is used only if empty. */
UZRAM_API int uzram_set_backing_dev(struct uzram *dev, const char *path, uint64_t size);

/* The path of the store into buf, "none" without one, NUL-terminated.
 * Returns the length, or -ERANGE if buf is too small. */
UZRAM_API int uzram_get_backing_dev(struct uzram *dev, char *buf, size_t size);

/* Which pages uzram_writeback() takes (zram's writeback modes): idle
 * (marked by uzram_mark_idle()), huge (stored raw), both (huge_idle),
 * incompressible (marked so by recompression), or 0 for every page held in
 * memory. */
#define UZRAM_WRITEBACK_IDLE 1u
#define UZRAM_WRITEBACK_HUGE 2u
#define UZRAM_WRITEBACK_INCOMPRESSIBLE 4u

/* zram's writeback: move the pages of `type` among pages first_page ..
 * last_page (inclusive; UINT64_MAX: to the end of the disk) to the store
 * and free their memory; pages already there, same-filled and empty pages
 * are passed over. Each page is locked only to copy its object, and again
 * to swap in its place on the store if it did not change meanwhile (a page
 * written meanwhile stays in memory, and its copy is freed). Stores the
 * pages written (a shared dedup object counts once) in *written (if not
 * NULL); each takes one page of writeback_limit while
 * writeback_limit_enable is on, checked page by page (a limit lowered
 * meanwhile counts at once). Thread-safe; writebacks take turns a batch of
 * up to 64 pages at a time, and give way to writes making room
 * (uzram_set_writeback_when_full()); a uzram_reset() meanwhile ends it.
 * Errors: -ENODEV  no backing store;
 *         -EINVAL  bad type, or first_page past the end or after last_page;
 *         -EIO     writeback_limit_enable is on and writeback_limit is used
 *                  up (zram's answer), or a write to the store failed;
 *         -ENOSPC  the store is full;
 *         in each case the pages not written stay in memory, as they were. */
UZRAM_API int uzram_writeback(struct uzram *dev, unsigned type, uint64_t first_page,
                              uint64_t last_page, uint64_t *written);

/* zram's writeback_limit and writeback_limit_enable: with the limit enabled
 * (default off), writeback stops once it has written writeback_limit pages,
 * and each page written takes one from it; set it again to allow more.
 * uzram_reset() sets the limit to 0. Both apply to every writeback, by
 * request or automatic. Return 0. */
UZRAM_API int uzram_set_writeback_limit(struct uzram *dev, uint64_t pages);
UZRAM_API int uzram_set_writeback_limit_enable(struct uzram *dev, bool on);

/* Beyond zram, as zswap does with its pool: with `on`, a write that would
 * take the pool past mem_limit first writes back the pages idle the
 * longest until it fits, instead of failing with -ENOSPC: pages marked
 * idle, then the oldest sixteenth (by last access) of the pages in memory,
 * then the oldest sixteenth of the rest, and so on. It fails with -ENOSPC
 * as before only when nothing can be written back (no store, the store
 * full, writeback_limit used up, a write to the store failing, or no page
 * in memory but same-filled ones); a writeback or compaction running
 * meanwhile gives way to it after its batch. A library thread, at the
 * normal CPU priority (it holds the store while it writes, and writes must
 * not wait for a thread a busy CPU does not run), also keeps the pool a
 * little below the limit ahead of the writes, at most writeback_rate pages
 * a second. With this or writeback_idle on, a page read from the store a
 * second time since it went there comes back into memory while the pool is
 * below the point where that thread starts (half its margin below the
 * limit): read once it stays, so that a scan passing by does not push
 * the pages in use out. Returns 0, or -ENOMEM / -EAGAIN when the thread
 * cannot be made. */
UZRAM_API int uzram_set_writeback_when_full(struct uzram *dev, bool on);

/* Beyond zram: with `seconds` > 0 the library thread writes back, again
 * and again, the pages not accessed for that many seconds (their last
 * access, not the idle marks); 0 stops it. Returns 0, or -ENOMEM /
 * -EAGAIN when the thread cannot be made. */
UZRAM_API int uzram_set_writeback_idle(struct uzram *dev, uint64_t seconds);

/* Pages a second the library thread may write back (default 4096, 16
 * MiB/s of pages; 0: no limit). Writes that must make room themselves are
 * not held to it. Returns 0. */
UZRAM_API int uzram_set_writeback_rate(struct uzram *dev, uint64_t pages_per_second);

/* Move objects out of sparsely used pool pages and return the pages that
 * become empty to the operating system, while I/O goes on; also give back
 * the pages of the page table whose slots are all empty, what the backing
 * store no longer uses, and (glibc) malloc's free memory (malloc_trim).
 * Adds the pages freed to pages_compacted and, when `pages_freed` is not
 * NULL, stores the number there. Returns 0. Thread-safe; objects in use at
 * that instant are left where they are. */
UZRAM_API int uzram_compact(struct uzram *dev, uint64_t *pages_freed);

/* ------------------------------------------------------------------------
 * Settings
 * ---------------------------------------------------------------------- */

/* The settings below are the ones zram only accepts before initialisation:
 * each returns -EBUSY while the device holds any page (other than empty
 * ones), and is accepted again after uzram_reset() or once every page has
 * been discarded. */

/* Errors: -ENOENT unknown name, -EINVAL level out of range, -EBUSY. */
UZRAM_API int uzram_set_algorithm(struct uzram *dev, const char *name, int level);
/* Errors: -EBUSY. */
UZRAM_API int uzram_set_same_filled(struct uzram *dev, bool on);
/* Errors: -EBUSY, -ENOMEM (no memory for the index), -ENOSPC (a state file's tmpfs full). */
UZRAM_API int uzram_set_dedup(struct uzram *dev, bool on);

/* Change the pool memory limit at any time; 0 removes it. Pages already
 * stored stay; later writes that do not fit fail with -ENOSPC. Returns 0. */
UZRAM_API int uzram_set_mem_limit(struct uzram *dev, uint64_t bytes);

/* Set mem_used_max back to the current mem_used_total. Returns 0. */
UZRAM_API int uzram_reset_mem_used_max(struct uzram *dev);

/* Keep `bytes` (at most 64 MiB; 0, the default, turns it off) of pool memory faulted in
 * ahead of need by a thread of the library, and make every new span of the pool from it:
 * a write then never waits for the kernel to find a free page, as a swap device's server
 * must not (the kernel may be waiting for that very write to free one; `uzram serve --swap`
 * sets it). A write that finds it empty waits up to 2 s for the thread, then fails with
 * -ENOMEM, and so does every such write after at once until the thread has put memory in
 * (reserve_empty counts them); at mem_limit -ENOSPC (or room made by writeback_when_full) as
 * without a reserve. It is pool memory no page uses yet: within mem_limit, not in
 * mem_used_total, kept by compaction. Cached pool memory beyond `bytes` is given back (an
 * adopted device starts with its predecessor's reserve). Returns 0, -EINVAL (too large), or
 * -errno when the thread cannot start. */
UZRAM_API int uzram_set_mem_reserve(struct uzram *dev, uint64_t bytes);

/* A memory limit shared by several devices (what `uzram serve
 * --server-mem-limit` sets for every device of a server): the pool memory of
 * all the devices of a group together, and their page tables, may not pass
 * the group's limit, besides each device's own mem_limit. A write that would
 * pass either fails with -ENOSPC, the same way; what the write stored before
 * that page stays. Each device's page table (table_mem) is charged whole as
 * it joins, since a client can make all of it resident. Dictionaries and
 * the dedup index do not count. The group counts the same bytes as the sum
 * of its devices' mem_used_total minus their dict_mem, plus their table_mem.
 * A device joins a group once, before any page is stored in it, and leaves
 * it when destroyed; destroy the group after its devices. */
struct uzram_group;

struct uzram_group_stats {
    uint64_t mem_used;     /* bytes of pool memory and page tables of all the devices now */
    uint64_t mem_limit;    /* the group's limit; 0: none */
    uint64_t mem_used_max; /* peak of mem_used since the group was made */
    uint64_t devices;      /* devices in the group */
};

/* Make a group with the limit `mem_limit` (bytes; 0: none).
 * Errors: -EINVAL out is NULL, -ENOMEM. */
UZRAM_API int uzram_group_create(uint64_t mem_limit, struct uzram_group **out);
/* Free a group. NULL is accepted. Errors: -EBUSY while a device is in it. */
UZRAM_API int uzram_group_destroy(struct uzram_group *group);
/* Change the group's limit at any time; 0 removes it. Memory already held stays;
 * later writes that do not fit fail with -ENOSPC. Errors: -EINVAL. */
UZRAM_API int uzram_group_set_mem_limit(struct uzram_group *group, uint64_t bytes);
/* A snapshot of the group's figures. Errors: -EINVAL. Thread-safe. */
UZRAM_API int uzram_group_get_stats(struct uzram_group *group, struct uzram_group_stats *stats);
/* Put `dev` in `group`, charging its page table. Call it before the
 * device's first write (no other call on the device may run meanwhile).
 * Errors: -EINVAL a NULL argument, -EBUSY the device is in a group already
 * or holds pool memory, -ENOSPC its page table does not fit under the
 * group's limit. */
UZRAM_API int uzram_set_group(struct uzram *dev, struct uzram_group *group);

/* Read back the current settings into `config` (comp_algorithm points to a
 * static string). Returns 0. */
UZRAM_API int uzram_get_config(struct uzram *dev, struct uzram_config *config);

/* ------------------------------------------------------------------------
 * State in a shareable file: restart without losing a page
 * ---------------------------------------------------------------------- */

/* A device made with uzram_create_in() keeps everything a read needs (page table, pool,
 * codec table, span directory, the intent records of slot changes, a 4 KiB area for the
 * application) in ONE file: a memfd (memfd_create) or a file on tmpfs (/dev/shm, /run).
 * Whoever holds the descriptor keeps the data: a process started after this one ended,
 * cleanly or killed (SIGKILL, a crash), takes it over with uzram_adopt() and reads every
 * page back. A page whose write, discard, recompression or compaction was under way when
 * its process was killed reads as its old or its new contents, never anything else. The
 * file is sparse, sized once (about 4 TiB plus the table: only what is written uses
 * memory). Dedup (use_dedup) is kept: the index's entries are in the file, adoption makes
 * its chains, references and free ids again from them and the pages that name them (an entry
 * no page names is freed), so its counters come back as they were; an index compaction or
 * recompression cut short by a kill is finished or undone. Bundles are kept: their records
 * are in the file (88, 120 or 184 bytes: bundle_mem); the group setting is not: set it
 * again after adoption. A backing store (uzram_set_backing_dev) is kept: its file stays the user's
 * file, recorded by its absolute path (at most 2047 bytes, else -ENAMETOOLONG), the checksums of
 * its blocks are in the state, and uzram_destroy() leaves its contents for the successor (detaching
 * it with "none" empties it as before); adoption opens the same file again as it is and reads every
 * page written back (see uzram_adopt() for a file gone or changed). zstd dictionaries (given or
 * trained) are kept: their bytes are in the file (up to 1 MiB each, in dict_mem besides their
 * digested forms) before a page can use them; one trained for dict=auto is not trained again.
 * Format version 4 (its metadata carries check bits and sums: uzram_state_damage()); versions 1
 * to 3 are refused as another version. Counters of events
 * (UZRAM_STATS' EVENTS kind) are in the file and go on counting in the adopting process
 * (dedup_hash_collisions, reserve_empty start at 0); levels are counted from the table. A
 * group limit (uzram_set_group) cannot be joined by an adopted device holding data (-EBUSY). */

/* Make a device like uzram_create() whose state lives in `state_fd`: an EMPTY regular file
 * on tmpfs or a memfd (the library sizes it with ftruncate). The descriptor stays the
 * caller's, and must stay open while the device lives; uzram_destroy() unmaps the state and
 * leaves the file as it is, for a successor (close or truncate it to drop the data). The file
 * holds the device's data, so it must be this user's alone, as a backing store's file (checked
 * on the descriptor before anything else, by uzram_adopt() and uzram_state_info() too): owned
 * by this process's effective user (-EPERM), no permission for group or others (-EACCES), one
 * name (-EMLINK; a memfd has none, and only its owner is checked). A new file in a directory
 * others can write (/dev/shm, /tmp) is the caller's to make with O_CREAT | O_EXCL and mode 0600.
 * Errors: as uzram_create(), those, -EEXIST the file is not empty, -EOPNOTSUPP not on tmpfs,
 * -errno of ftruncate. */
UZRAM_API int uzram_create_in(const struct uzram_config *config, int state_fd, struct uzram **out);

/* Take over the state in `state_fd`, left by a process that ended (uzram_destroy, or
 * uzram_state_quiesce and exit) or was killed. Changes that process had half done are
 * undone, its locks let go, the pool's accounting and the counters made again from the page
 * table's data, without reading its holes or any pool page (bench/state-ab.sh measures the
 * time). The settings the state keeps come back (disksize, the codec table: algorithm and
 * recompression algorithms, same_filled, use_dedup, mem_limit); others (mem_reserve, idle ages,
 * recompress_idle...) are the caller's to set again. The descriptor must stay open while
 * the device lives. Errors: -EINVAL not a uzram state, -EUCLEAN a damaged one (see
 * uzram_state_damage(): nothing is punched or freed then; undone changes and unlocked slots
 * stay so), -EPERM, -EACCES, -EMLINK a file not this user's alone (see uzram_create_in()),
 * -EPROTONOSUPPORT another format version or an algorithm this build lacks
 * (nothing changed), -EBUSY its owner process is alive (and is not this process: a process
 * that re-executes itself keeps its pid and may adopt; a dead owner's pid reused by another
 * process also reads as alive: a PID namespace or systemd unit avoids that), -ENOMEM; with a
 * backing store: the errors of opening its file again (backing_dev's rules; -ENOENT it is
 * gone, -ESTALE it is not the size recorded: another file; nothing changed then). */
UZRAM_API int uzram_adopt(int state_fd, struct uzram **out);

/* What a state file holds, read without taking it. */
struct uzram_state_info {
    uint32_t version;           /* the state's format version */
    uint32_t supported_version; /* the one this library reads */
    uint64_t disksize;
    int32_t owner_pid;       /* the process that has it, 0 for none */
    bool owner_alive;        /* that process runs (uzram_adopt() would say -EBUSY, bar itself) */
    bool clean;              /* left by uzram_destroy() or uzram_state_quiesce(), not killed */
    char comp_algorithm[20]; /* the primary algorithm */
    bool use_dedup;          /* dedup on (its index kept); in padding: no field before it moved */
    uint64_t reserved[8];
};

/* Fill `info` from the state in `state_fd` without changing it: 0 when this library can
 * adopt its format (whether its owner still runs is info->owner_alive), -EPROTONOSUPPORT
 * another format version (info->version says which), -EINVAL not a uzram state, -EUCLEAN a
 * damaged header (uzram_state_damage() says what); first, without reading it, -EPERM, -EACCES
 * or -EMLINK for a file that is not this user's alone (see uzram_create_in(): an empty file is
 * checked so too). */
UZRAM_API int uzram_state_info(int state_fd, struct uzram_state_info *info);

/* After uzram_adopt() or uzram_state_info() failed with -EUCLEAN in this thread: where the
 * state is damaged, one line naming the part and its bytes in the file, e.g. "table page 12
 * slot 3 (page 3075 of the disk, bytes 285327408 to 285327423): its check bits do not match its
 * form"; "" after a call that found none. The state is refused before anything in it is
 * punched or freed: the file keeps what it held, for the user to look at or remove. What is
 * checked (see uzram_adopt()): the header's fixed fields, codec records, dictionaries and
 * backing store record, each page slot (check bits over its form and where its bytes are),
 * the intent records, the span directory's entries, the dedup index's change and move records,
 * bundle records (each piece's check bits), and that every object named is one the pool or
 * backing store holds once. Not checked: the bytes of the stored pages themselves (in the
 * pool: a flipped byte there may fail that page's read with EIO, or give wrong bytes), a
 * dedup entry's object handle beyond that rule, and marks and access times (no data). */
UZRAM_API const char *uzram_state_damage(void);

/* The application's area in the state (4 KiB, in *size; zero in a new state), kept across
 * adoptions, e.g. a server's export name and ublk device ids. NULL (and 0) for a device
 * without a state file. Writes to it are the application's to order and make whole. */
UZRAM_API void *uzram_state_area(struct uzram *dev, size_t *size);

/* Before a planned handover: stops the background work (recompression and writeback
 * passes), marks the state clean. The caller first ends its own calls on the device and
 * starts none after; the device may then only be destroyed (uzram_destroy() leaves the file
 * as it is) or the process end. -EINVAL for a device without a state file. */
UZRAM_API int uzram_state_quiesce(struct uzram *dev);

/* ------------------------------------------------------------------------
 * Statistics
 * ---------------------------------------------------------------------- */

/* UZRAM_STATS(X), the list of every counter, is in uzram_stats.h (installed
 * beside this header). */
#include "uzram_stats.h"

/* One snapshot of all counters: a uint64_t field per counter of
 * UZRAM_STATS, in its order. */
struct uzram_stats {
#define UZRAM_STATS_FIELD_(name, form, kind, help) uint64_t name;
    UZRAM_STATS(UZRAM_STATS_FIELD_)
#undef UZRAM_STATS_FIELD_
};

/* Fill `stats` with a snapshot. `size` is the size of the caller's struct,
 * normally sizeof *stats: a program built against an older, smaller struct
 * gets the fields it knows (min(size, sizeof(struct uzram_stats)) bytes are
 * copied), and one built against a newer, larger struct gets zeros in the
 * fields this library does not have. Counters are read one by one without
 * stopping I/O, so under load they may be a few operations apart from each
 * other. Errors: -EINVAL if stats is NULL. */
UZRAM_API int uzram_get_stats(struct uzram *dev, struct uzram_stats *stats, size_t size);

/* The counters by name, for programs that show every counter without
 * naming each one: index 0 .. uzram_stat_count() - 1, in UZRAM_STATS
 * order. uzram_stat_name() returns the name ("orig_data_size") or NULL past
 * the end. uzram_stat_value() returns the counter from a snapshot of `size`
 * bytes (as given to uzram_get_stats()), or 0 when `index` is past the end
 * or outside `size`. */
UZRAM_API size_t uzram_stat_count(void);
UZRAM_API const char *uzram_stat_name(size_t index);
UZRAM_API uint64_t uzram_stat_value(const struct uzram_stats *stats, size_t size, size_t index);

/* What counter `index` counts, in one line with its unit (the `help` of
 * UZRAM_STATS), or NULL past the end: for programs that describe every
 * counter, such as a Prometheus exporter's HELP lines. */
UZRAM_API const char *uzram_stat_help(size_t index);

/* The `kind` of counter `index`: UZRAM_STAT_LEVEL for an amount held now
 * (a gauge), UZRAM_STAT_EVENTS for a count that only grows until the
 * device is reset (a counter), or -EINVAL past the end. */
#define UZRAM_STAT_LEVEL 0
#define UZRAM_STAT_EVENTS 1
UZRAM_API int uzram_stat_kind(size_t index);

/* Text forms of a snapshot. Each writes a NUL-terminated line ending in '\n'
 * into buf and returns the length written (without the NUL), or -ERANGE if
 * `size` is too small (256 bytes is always enough for mm_stat and io_stat,
 * 2048 for JSON).
 *   mm_stat: the MM counters of UZRAM_STATS, space separated (11 fields)
 *   io_stat: the IO counters, space separated (4 fields)
 *   bd_stat: the BD counters, space separated (3 fields)
 *   json:    one object with every counter by name, in UZRAM_STATS order */
UZRAM_API int uzram_format_mm_stat(const struct uzram_stats *stats, char *buf, size_t size);
UZRAM_API int uzram_format_io_stat(const struct uzram_stats *stats, char *buf, size_t size);
UZRAM_API int uzram_format_bd_stat(const struct uzram_stats *stats, char *buf, size_t size);
UZRAM_API int uzram_format_json(const struct uzram_stats *stats, char *buf, size_t size);

/* ------------------------------------------------------------------------
 * Attributes by name, as zram's sysfs has them
 * ---------------------------------------------------------------------- */

/* Read attribute `name` as text (one line, '\n'-terminated) into buf.
 * Names: disksize initstate comp_algorithm algorithm_params same_filled
 *        use_dedup mem_limit mem_used_max mm_stat io_stat debug_stat
 *        stat_json recomp_algorithm recompress_idle recompress_rate
 *        recompress_cpu backing_dev (a path or "none") bd_stat writeback_limit
 *        writeback_limit_enable writeback_when_full writeback_idle
 *        writeback_rate
 * algorithm_params shows "algo=NAME level=N" for the primary algorithm,
 * then a line "priority=P algo=NAME level=N [dict=...]" per secondary one;
 * recomp_algorithm shows zram's "#P: lzo [zstd] ..." lines.
 * Returns the length written, -ENOENT for an unknown name, -EACCES for a
 * write-only attribute (compact, reset, idle, recompress, writeback), -ERANGE if buf
 * is too small. */
UZRAM_API int uzram_attr_get(struct uzram *dev, const char *name, char *buf, size_t size);

/* Write attribute `name` from text. disksize is fixed at creation (a zram
 * device is initialised once too). Writable: comp_algorithm
 * algorithm_params ("[algo=NAME|priority=N] [level=N] [dict=PATH|auto]
 * [dict_size=BYTES]": uzram_set_algorithm_params(); "algo=NAME level=N"
 * with an algorithm not set at any priority still chooses the primary one)
 * same_filled use_dedup (0/1) mem_limit (bytes, K/M/G/T suffixes)
 * mem_used_max (only "0": reset the peak) compact (any value) reset (1)
 * idle ("all" or seconds: uzram_mark_idle()) recomp_algorithm ("algo=NAME
 * [priority=1..3] [level=N]") recompress ("[type=idle|huge|huge_idle]
 * [threshold=BYTES] [max_pages=N] [algo=NAME|priority=N]") recompress_idle
 * (seconds, 0 off) recompress_rate (pages per second, 0 no limit)
 * recompress_cpu (percent of one CPU, 1..100)
 * backing_dev (a path, or "none": uzram_set_backing_dev() with size 0)
 * writeback (zram's "idle|huge|huge_idle|incompressible", also as type=,
 * and/or "page_index=N" / "page=N" / "page_indexes=FIRST-LAST", several:
 * uzram_writeback() per range) writeback_limit (pages) writeback_limit_enable
 * writeback_when_full (0/1) writeback_idle (seconds, 0 off) writeback_rate
 * (pages per second, 0 no limit).
 * uzram_attr_usage() says what each writable one takes.
 * Errors: -ENOENT unknown name, -EACCES read-only attribute, -EINVAL bad
 * value, and whatever the setting's own function returns (-EBUSY ...). */
UZRAM_API int uzram_attr_set(struct uzram *dev, const char *name, const char *value);

/* What a write of attribute `name` takes, in words, for the error message
 * that refuses a bad value ("all, or a number of seconds ..."); NULL for an
 * unknown or read-only attribute. A static string. */
UZRAM_API const char *uzram_attr_usage(const char *name);

/* The names of all attributes, space separated, in a static string. */
UZRAM_API const char *uzram_attr_names(void);

/* ------------------------------------------------------------------------
 * Algorithms and helpers
 * ---------------------------------------------------------------------- */

/* Write the names of the algorithms this build has, space separated, with
 * `current` in brackets as zram's comp_algorithm shows it ("lzo [lz4] zstd").
 * `current` may be NULL. Returns the length written or -ERANGE. */
UZRAM_API int uzram_algorithm_list(const char *current, char *buf, size_t size);

/* Level range of an algorithm: *min..*max and the default. An algorithm
 * without levels (lzo) reports 0, 0, 0. lz4's level is its acceleration, as
 * in the kernel's lz4 backend: 1 (the default, the best ratio) to 65537. Errors: -ENOENT unknown
 * name. */
UZRAM_API int uzram_algorithm_levels(const char *name, int *min, int *max, int *dflt);

/* Parse a size such as "4096", "512K", "1.5G" or "2T" (binary multiples,
 * optional trailing "iB"/"B"). Errors: -EINVAL not a size, -ERANGE too big. */
UZRAM_API int uzram_parse_size(const char *text, uint64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif /* UZRAM_H */

/* ------------------------------------------------------------------------
 * Page analysis, for estimators (`uzram estimate`) and benchmarks
 * ---------------------------------------------------------------------- */

/* These expose the engine's inner figures (its size classes, its huge
 * threshold, its index entry), which change with the engine: they are only
 * declared for programs that define UZRAM_STATIC_LINKING_ONLY before
 * including this header, and only libuzram.a has them. Outside the include
 * guard, so that a second include with the macro defined still sees them. */
#if defined(UZRAM_STATIC_LINKING_ONLY) && !defined(UZRAM_H_STATIC_LINKING_ONLY)
#define UZRAM_H_STATIC_LINKING_ONLY

#ifdef __cplusplus
extern "C" {
#endif

/* If the 4096-byte `page` is one 8-byte word repeated, store the word in
 * *word and return true. Checks the last word before scanning. */
bool uzram_page_same_filled(const void *page, uint64_t *word);

/* A compressor for one thread. */
struct uzram_codec;

/* Errors: -ENOENT unknown algorithm, -EINVAL bad level, -ENOMEM. */
int uzram_codec_open(const char *name, int level, struct uzram_codec **out);
void uzram_codec_close(struct uzram_codec *codec);

/* A compressor with a zstd dictionary (`dict`, `size` bytes: ZDICT's format
 * or raw content, 256 bytes to 1 MiB), as recompression uses one.
 * Errors: as uzram_codec_open(), and -EINVAL for an algorithm without
 * dictionaries or content zstd cannot use. */
int uzram_codec_open_dict(const char *name, int level, const void *dict, size_t size,
                          struct uzram_codec **out);

/* Memory the codec's dictionary takes (0: none), as dict_mem counts it. */
size_t uzram_codec_dict_memory(const struct uzram_codec *codec);

/* Train a zstd dictionary of at most `capacity` bytes from `count` samples
 * laid end to end in `samples` (sizes in `sample_sizes`), as dict=auto does.
 * Returns its size, -EAGAIN when the samples are too few or too alike. */
int uzram_dict_train(void *dict, size_t capacity, const void *samples, const size_t *sample_sizes,
                     unsigned count);

/* Compress one page (4096 bytes) into dst (capacity `capacity`). Returns the
 * compressed length, 0 when it does not fit in `capacity`, or -EIO. */
int uzram_codec_compress(struct uzram_codec *codec, const void *page, void *dst, size_t capacity);

/* Compress `count` pages laid end to end into one frame, as a bundle is (zstd only; see
 * uzram_set_recompress_group). Returns the length, 0 when it does not fit in `capacity`,
 * -EINVAL for another algorithm, or -EIO. */
int uzram_codec_compress_span(struct uzram_codec *codec, const void *pages, size_t count, void *dst,
                              size_t capacity);

/* Decompress `length` bytes from src into a 4096-byte page. Returns 0, or
 * -EIO when the data is corrupt or does not decompress to exactly a page. */
int uzram_codec_decompress(struct uzram_codec *codec, const void *src, size_t length, void *page);

/* Memory the pool would hold for one object of `length` compressed bytes,
 * averaged over a full pool page group (size-class rounding, object header
 * and tail waste included); 4096 for a page stored huge. */
double uzram_pool_object_cost(size_t length);

/* Memory a bundle whose frame is `length` bytes takes: its pieces in the pool, whole pages and
 * the rest (as uzram_pool_object_cost counts one object), and its record (meta_data_size). */
double uzram_bundle_cost(size_t length);

/* The compressed length from which a page is stored raw (huge): a page
 * whose compressed form is shorter is kept compressed. */
size_t uzram_huge_threshold(void);

/* Memory the dedup index uses per unique stored object, on average (its entry and its share
 * of a bucket; the index grows with what is stored). */
size_t uzram_dedup_entry_cost(void);

#ifdef __cplusplus
}
#endif
#endif /* UZRAM_STATIC_LINKING_ONLY */
