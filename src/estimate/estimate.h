/* estimate.h - internal interfaces of `uzram estimate`: sources, page analysis, report.
 * Split by job: estimate.c parses the command line and runs the passes, source.c reads files,
 * devices, stdin and processes, walk.c directories, analyze.c classifies, report.c prints. */
#ifndef UZRAM_ESTIMATE_H
#define UZRAM_ESTIMATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

/* The estimate models the engine with its page-analysis helpers (codecs,
 * pool and index costs, the huge threshold): uzram.h's static-linking-only
 * part. Every file of estimate/ includes this header first. */
#define UZRAM_STATIC_LINKING_ONLY
#include "uzram.h"

#define ESTIMATE_MAX_ALGORITHMS 12
/* The example of --recompress in the help: the secondary algorithm and level
 * docs/BENCHMARKS.md measured best for build output. */
#define ESTIMATE_RECOMPRESS_EXAMPLE "zstd:7"
#define ESTIMATE_WORD 8 /* zram's same-filled check compares unsigned longs (64-bit) */
/* Histogram buckets of reference counts: 1, 2, 3-4, 5-8, ... up to 2^32. */
#define ESTIMATE_BUCKETS 34
/* Stored length recorded for a page kept raw; real compressed lengths are
 * always below it (the engine's huge threshold is smaller than a page). */
#define ESTIMATE_RAW 4096u

/* ------------------------------------------------------------------------
 * Counters: additive, one set per source and one for the whole run
 * ---------------------------------------------------------------------- */

/* Per algorithm, how many pages compressed to each stored length (1..4095;
 * ESTIMATE_RAW for pages kept raw). Keeping the distribution instead of
 * running sums makes every derived figure (pool cost of each model) exact and
 * independent of thread timing. */
struct estimate_lengths {
    uint64_t unique[ESTIMATE_RAW + 1]; /* first copy of each content */
    uint64_t all[ESTIMATE_RAW + 1];    /* every non-same-filled page */
};

struct estimate_counts {
    uint64_t bytes;             /* input bytes analysed (without padding) */
    uint64_t pages;             /* pages analysed */
    uint64_t partial_bytes;     /* bytes of a last partial page, padded with zeros */
    uint64_t unreadable_bytes;  /* process ranges that could not be read (skipped) */
    uint64_t unpopulated_pages; /* process pages never touched: not in memory, skipped */
    uint64_t zero_pages;
    uint64_t same_pages; /* same-filled with a non-zero word */
    uint64_t duplicate_pages;
    uint64_t unique_pages;
    /* Word comparisons of three same-filled checks (zram's forward loop, a backward loop, the
     * last-word pre-check patch), summed over all pages */
    uint64_t scan_forward;
    uint64_t scan_backward;
    uint64_t scan_precheck;
    /* Bundles (-r zstd --group N): windows packed, their pages, the pool memory of the
     * bundles and of the same pages recompressed one by one */
    uint64_t bundles;
    uint64_t bundled_pages;
    double bundle_cost;
    double bundle_single_cost;
    struct estimate_lengths *lengths; /* [algorithm_count], NULL without compression */
};

/* ------------------------------------------------------------------------
 * Sources
 * ---------------------------------------------------------------------- */

enum estimate_source_kind {
    SOURCE_FILE,
    SOURCE_DEVICE,
    SOURCE_STDIN,
    SOURCE_PROCESS,
    SOURCE_DIRECTORY
};

/* What the walk of a directory passed over (walk.c), by reason. */
struct estimate_skipped {
    uint64_t devices;            /* block and character devices */
    uint64_t sockets;            /* sockets and named pipes */
    uint64_t links;              /* symbolic links: not followed */
    uint64_t other_file_systems; /* mount points below the directory: not entered */
    uint64_t unreadable;         /* files and directories that could not be opened or read */
};

struct estimate_walk;

struct estimate_mapping {
    uint64_t start, end;
};

struct estimate_source {
    enum estimate_source_kind kind;
    char *name; /* as given: path, "-" or "pid N" */
    int fd;
    int pagemap_fd; /* processes: -1 when pagemap cannot be read */
    uint64_t size;  /* bytes expected (0 unknown): for progress */
    bool at_end;    /* files: end of file reached */
    /* processes */
    int pid;
    struct estimate_mapping *mappings;
    size_t mapping_count, mapping_index;
    uint64_t address; /* next address to read in mappings[mapping_index] */
    uint64_t mapped_bytes;
    uint64_t position; /* bytes consumed so far (progress) */
    /* directories */
    struct estimate_walk *walk;
    uint64_t files; /* regular files read */
    struct estimate_skipped skipped;
    struct estimate_counts counts;
};

/* Open a source. `path` is a file, a block device, a directory or "-" (standard input).
 * On failure prints one line naming the source and the reason and returns
 * a negative errno. */
int estimate_open_file(struct estimate_source *source, const char *path);
/* Read /proc/PID/maps and open /proc/PID/mem. `all_mappings` selects every
 * readable mapping, otherwise the private anonymous or private writable ones
 * (the pages a swap device would see). */
int estimate_open_process(struct estimate_source *source, const char *pid_text, bool all_mappings);
void estimate_close(struct estimate_source *source);

/* Pad the last partial page of buffer[0..got) with zeros, counting the real bytes in
 * counts.partial_bytes; returns got rounded up to a whole page. In walk.c, the file below
 * source.c, because both read files that can end mid-page. */
size_t estimate_pad_page(struct estimate_source *source, unsigned char *buffer, size_t got,
                         size_t page_size);
/* A directory (walk.c): start the walk at the directory open as `fd` (taken over), whose
 * stat is `st`; read its files as estimate_read() does; free the walk. */
int estimate_walk_open(struct estimate_source *source, int fd, const struct stat *st);
long estimate_walk_read(struct estimate_source *source, unsigned char *buffer, size_t capacity,
                        size_t page_size);
void estimate_walk_close(struct estimate_source *source);
/* The bytes of the regular files the walk of directory `path` reads (same file system, no
 * symbolic links), counted with a progress line of its own; 0 when it cannot be walked. */
uint64_t estimate_walk_total(const char *path);

/* Fill `buffer` (capacity a multiple of page_size) with the next whole pages
 * of the source. Returns the number of bytes (a multiple of page_size), 0 at
 * the end, or a negative errno for a fatal error (a message was printed).
 * Counts padding, unreadable and unpopulated ranges in source->counts. */
long estimate_read(struct estimate_source *source, unsigned char *buffer, size_t capacity,
                   size_t page_size);

/* ------------------------------------------------------------------------
 * Analysis
 * ---------------------------------------------------------------------- */

/* How an entry of estimate_options.algorithms is measured: compressed with
 * `codec` at `level` (0: its default), with a dictionary of `dict_size`
 * bytes trained on the first pages read (0: none); or, when `from[0]` is
 * not -1, derived as recompression keeps a page: the form of entry from[1]
 * where it takes less pool memory than that of from[0], else from[0]'s. */
struct estimate_algorithm {
    const char *codec;
    int level;
    size_t dict_size;
    int from[2];
    /* after the run: the dictionary's memory (0: none or not trained) */
    size_t dict_memory;
    bool dict_trained;
};

/* The recompression projection: hot pages stay in the primary algorithm's
 * form, the rest are recompressed (entries `recompressed` and
 * `recompressed_dict` of the algorithms, derived as above). */
struct estimate_recompression {
    bool on;
    unsigned primary, secondary, secondary_dict, recompressed, recompressed_dict;
    unsigned hot_percent;
    /* --group N (2..16; 0: off): also project bundles of N neighbouring pages, as
     * recompress_group packs them (zstd only): in each aligned window, the pages whose content
     * is seen there first and not kept raw, compressed as one frame with the dictionary,
     * where that takes less memory than their recompressed forms */
    unsigned group;
};

struct estimate_options {
    size_t page_size;
    unsigned jobs;
    unsigned algorithm_count;
    const char *algorithms[ESTIMATE_MAX_ALGORITHMS]; /* display names */
    struct estimate_algorithm specs[ESTIMATE_MAX_ALGORITHMS];
    struct estimate_recompression recompression;
    bool json;
    bool progress;
    bool all_mappings;
};

struct estimate_analyzer;

/* Start `options->jobs` workers (and open their codecs). Errors print a line. */
int estimate_analyzer_start(const struct estimate_options *options, struct estimate_analyzer **out);
/* Read the whole source, spreading the pages over the workers, and fill
 * source->counts. `show_progress` draws a progress line on stderr. */
int estimate_analyze_source(struct estimate_analyzer *analyzer, struct estimate_source *source,
                            bool show_progress);
void estimate_analyzer_stop(struct estimate_analyzer *analyzer);
/* After the run: fill each algorithm's dict_memory and dict_trained. */
void estimate_analyzer_dicts(struct estimate_analyzer *analyzer, struct estimate_options *options);

/* Duplicate-reference histogram of the run (like zdb -S), after every source. */
struct estimate_bucket {
    uint64_t contents;                    /* distinct contents referenced this many times */
    uint64_t pages;                       /* pages referring to them */
    uint64_t compressed_bytes;            /* stored length of each content once (first algorithm) */
    uint64_t referenced_compressed_bytes; /* the same, once per referring page */
    double pool_bytes;                    /* pool cost of each content once (first algorithm) */
};
struct estimate_index_info {
    uint64_t entries;
    uint64_t capacity;
    uint64_t memory_bytes;
};
void estimate_histogram(struct estimate_analyzer *analyzer, struct estimate_bucket *buckets,
                        struct estimate_index_info *info);

/* Add every counter of `from` into `to` (lengths too, when both have them). */
void estimate_counts_add(struct estimate_counts *to, const struct estimate_counts *from,
                         unsigned algorithm_count);

/* Word comparisons of the three same-filled checks on one page of `words`
 * 8-byte words; returns true if the page is one word repeated (*word set). */
bool estimate_scan_page(const uint64_t *page, size_t words, uint64_t *word, uint64_t *forward,
                        uint64_t *backward, uint64_t *precheck);

/* ------------------------------------------------------------------------
 * Report
 * ---------------------------------------------------------------------- */

/* Memory the models would use for the pages counted in `counts`. */
struct estimate_projection {
    double kernel_zram;         /* pool, no dedup */
    double dedup_patch_pool;    /* pool, each content once */
    double dedup_patch_meta;    /* the dedup patch's zram_entry per stored object */
    double uzram;               /* pool, no dedup */
    double uzram_dedup_pool;    /* pool, each content once */
    double uzram_dedup_meta;    /* uzram_dedup_entry_cost per stored object */
    uint64_t compressed_unique; /* compr_data_size with dedup: each content once */
    uint64_t compressed_all;    /* compr_data_size without dedup */
    uint64_t huge_unique, huge_all;
};
void estimate_project(const struct estimate_counts *counts, unsigned algorithm,
                      struct estimate_projection *projection);

/* The zram_entry of the zram dedup patch set ("zram: implement deduplication in zram" v4,
 * 2017): rb_node (3 words) + len + checksum + refcount + handle. */
#define ESTIMATE_DEDUP_PATCH_ENTRY_BYTES 48u

void estimate_report_text(FILE *out, const struct estimate_options *options,
                          struct estimate_source *sources, size_t source_count,
                          const struct estimate_counts *total,
                          const struct estimate_bucket *buckets,
                          const struct estimate_index_info *info);
void estimate_report_json(FILE *out, const struct estimate_options *options,
                          struct estimate_source *sources, size_t source_count,
                          const struct estimate_counts *total,
                          const struct estimate_bucket *buckets,
                          const struct estimate_index_info *info);

#endif
