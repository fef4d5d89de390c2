/* bench.h - the parts of `uzram bench` shared by its jobs: options, output, data, measuring.
 * bench.c parses the options and runs the jobs, one file each (throughput.c, codec.c, ...). */
#ifndef UZRAM_BENCH_H
#define UZRAM_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bench measures the engine's page-analysis helpers (codecs, the
 * same-filled check): uzram.h's static-linking-only part. */
#define UZRAM_STATIC_LINKING_ONLY
#include "uzram.h"

#define BENCH_PAGE UZRAM_PAGE_SIZE
#define BENCH_MAX_LIST 16
#define BENCH_MAX_THREADS 64
/* MB/s means 10^6 bytes per second everywhere, as fio's bw_bytes does. */
#define BENCH_MEGA 1e6

/* `uzram bench nbd` (nbd_load.c): a light NBD client that keeps many requests in flight
 * from one thread, so that the server's own per-request cost shows. */
enum bench_nbd_rw { BENCH_NBD_READ, BENCH_NBD_WRITE, BENCH_NBD_MIX };
#define BENCH_NBD_MAX_DEPTH 512        /* two iovecs a request: one sendmsg, IOV_MAX */
#define BENCH_NBD_MAX_BLOCK (1u << 20) /* --block-size at most 1 MiB */
#define BENCH_NBD_MIX_READ_PERCENT 70  /* --rw mix: as the fio matrix's 70/30 mix */
struct bench_nbd_options {
    const char *unix_path; /* --unix, or from --uri */
    const char *host;      /* --uri nbd://HOST[:PORT]/NAME */
    const char *port;
    const char *export_name; /* --export, or from --uri; default "" */
    unsigned depth;
    uint64_t requests;
    uint32_t block_size;
    enum bench_nbd_rw rw;
    bool sequential;
    uint64_t region; /* 0: the export's size */
    bool verify;
    int timeout;     /* seconds */
    long server_pid; /* 0: not measured */
};

struct bench_options {
    bool nbd_job; /* `uzram bench nbd` */
    struct bench_nbd_options nbd;
    const char *algorithms[BENCH_MAX_LIST];
    int algorithm_count;
    bool algorithms_given;
    int kinds[BENCH_MAX_LIST];
    int kind_count;
    unsigned threads[BENCH_MAX_LIST];
    int thread_count;
    bool threads_given;
    uint64_t size;
    bool size_given;
    uint64_t disksize; /* --disksize: 0, the data's */
    unsigned repeat;
    double budget; /* seconds a timed phase may last before it stops early */
    uint64_t seed;
    bool json;
    bool run_sweep;
    bool run_same_check;
    bool run_dedup;
    const char *dump_kind;
    const char *file;
    char **trees; /* --tree DIR, as often as given */
    int tree_count;
};

/* ------------------------------------------------------------------------
 * Output (output.c): an aligned table for people, or one JSON document for
 * scripts.
 * ---------------------------------------------------------------------- */

struct bench_output {
    bool json;
    int sections; /* JSON sections opened so far, for the commas */
    int items;    /* items in the current JSON array */
};

/* A ratio that may not exist (nothing compressed): JSON null, table "-". */
void bench_json_ratio(double value);
void bench_format_ratio(char *buf, size_t size, double value);
/* numerator / denominator, 0 when the denominator is 0. */
double bench_ratio_of(uint64_t numerator, uint64_t denominator);
/* A section: a JSON array named `name`, or a table under `title`. */
void bench_section_begin(struct bench_output *out, const char *name, const char *title);
void bench_section_end(struct bench_output *out);
/* Opens one JSON object of the current array. */
void bench_item_begin(struct bench_output *out);

/* ------------------------------------------------------------------------
 * Data sets (data.c): pages kept in memory before the clock starts, so the
 * bench measures the engine and not the generator or the disk.
 * ---------------------------------------------------------------------- */

struct bench_data {
    unsigned char *pages; /* page_count pages, or one page when identical */
    uint64_t page_count;  /* pages written to the device */
    bool identical;       /* every write stores pages[0] (static-buffer test) */
    const char *name;
};

const unsigned char *bench_page_at(const struct bench_data *data, uint64_t index);
/* `pages` generated pages of datagen kind `kind`; with `identical` one page
 * stands for all of them (every write stores pages[0]). 0 or -ENOMEM. */
int bench_data_generate(struct bench_data *data, int kind, uint64_t seed, uint64_t pages,
                        bool identical);
/* The pages of --file or --tree (each file from a page boundary), at most
 * --size bytes. Prints what went wrong; returns 0 or a negative errno. */
int bench_data_load(struct bench_data *data, const struct bench_options *opt);
void bench_data_free(struct bench_data *data);

/* ------------------------------------------------------------------------
 * Measuring (measure.c): a fresh device, a timed write phase, a timed read
 * phase, a sample read back and compared.
 * ---------------------------------------------------------------------- */

struct bench_measure_request {
    const char *algorithm;
    bool dedup;
    unsigned threads;
    const struct bench_data *data;
    double budget;
    unsigned repeat;
    uint64_t disksize; /* 0: just the data */
};

struct bench_measure_result {
    double write_mbps, write_pps;
    double read_mbps, read_pps;
    uint64_t pages;           /* written in the last repetition */
    struct uzram_stats stats; /* right after the last write phase */
};

/* Best of req->repeat runs. Prints what went wrong; 0 or a negative errno. */
int bench_measure(const struct bench_measure_request *req, struct bench_measure_result *out);

/* ------------------------------------------------------------------------
 * The jobs, one file each. Each prints its section and returns 0 or a
 * negative errno (after printing why).
 * ---------------------------------------------------------------------- */

/* throughput.c: every algorithm x data kind x thread count. */
int bench_throughput(const struct bench_options *opt, struct bench_output *out);
/* codec.c: the codecs alone, so the engine's own cost shows as the gap. */
int bench_codec(const struct bench_options *opt, struct bench_output *out);
/* same_check.c: the same-filled check alone. */
int bench_same_check(const struct bench_options *opt, struct bench_output *out);
/* dedup_off_on.c: dedup off and on, side by side, with the targets of issue 3. */
int bench_dedup(const struct bench_options *opt, struct bench_output *out);
/* real_data.c: the pages of --file or --tree, memory and speed. */
int bench_real_data(const struct bench_options *opt, struct bench_output *out);
/* nbd_options.c: the checks and effects of `uzram bench nbd`'s options, for bench.c's
 * option table (setters of the command framework, cli/command.h; `context` is the
 * struct bench_options): 0, or -EINVAL after a message. */
int bench_nbd_apply_unix(void *context, char *arg);
int bench_nbd_apply_uri(void *context, char *arg);
int bench_nbd_apply_export(void *context, char *arg);
int bench_nbd_apply_depth(void *context, char *arg);
int bench_nbd_apply_requests(void *context, char *arg);
int bench_nbd_apply_block_size(void *context, char *arg);
int bench_nbd_apply_rw(void *context, char *arg);
int bench_nbd_apply_pattern(void *context, char *arg);
int bench_nbd_apply_region(void *context, char *arg);
int bench_nbd_apply_timeout(void *context, char *arg);
int bench_nbd_apply_server_pid(void *context, char *arg);
/* The defaults and the checks between options, after parsing: 0 or -EINVAL. */
int bench_nbd_settle(struct bench_options *opt);

/* nbd_load.c: `uzram bench nbd`, load on a running NBD server. Returns the exit status. */
int bench_nbd(const struct bench_options *opt);
/* dump.c: --dump-data, generated or loaded pages on stdout. Returns the exit
 * status. */
int bench_dump(const struct bench_options *opt);

#endif
