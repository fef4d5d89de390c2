/* bench.c - `uzram bench`: throughput, compression ratio and memory overheads of the
 * engine, measured in-process through include/uzram.h only (no engine internals).
 * This file parses the options and runs the jobs; each job has its own file. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "cli/commands.h"
#include "common/datagen.h"
#include "common/text.h"

static const char *const default_algorithms[] = {"lz4", "lz4hc", "zstd", "lzo", "deflate"};
static const int default_kinds[] = {DATAGEN_SAME, DATAGEN_HALF, DATAGEN_TEXT, DATAGEN_RANDOM};

/* Split a comma-separated list in place into at most BENCH_MAX_LIST items. */
static int split_list(char *text, char **items)
{
    int count = 0;
    for (char *save = NULL, *item = strtok_r(text, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        if (count == BENCH_MAX_LIST)
            return -E2BIG;
        items[count++] = item;
    }
    return count ? count : -EINVAL;
}

/* Copy `arg` into `storage` (strtok_r needs it writable; the items point into it) and split
 * it. Returns the item count, or -EINVAL after a message naming `what` list was bad. */
static int split_option(char *storage, size_t size, const char *arg, const char *what, char **items)
{
    snprintf(storage, size, "%s", arg);
    int n = split_list(storage, items);
    if (n < 0) {
        fprintf(stderr, "uzram bench: bad %s list '%s'\n", what, arg);
        return -EINVAL;
    }
    return n;
}

/* ---- each option's check and effect: 0, or -EINVAL after a message ---- */

static int apply_algorithms(void *context, char *arg)
{
    struct bench_options *opt = context;
    static char list[1024]; /* the names point into it */
    char *items[BENCH_MAX_LIST];
    int n = split_option(list, sizeof list, arg, "algorithm", items);
    if (n < 0)
        return n;
    for (int i = 0; i < n; i++) {
        int min, max, dflt;
        if (uzram_algorithm_levels(items[i], &min, &max, &dflt) != 0) {
            char have[256];
            if (uzram_algorithm_list(NULL, have, sizeof have) < 0)
                have[0] = '\0';
            have[strcspn(have, "\n")] = '\0';
            fprintf(stderr, "uzram bench: unknown algorithm '%s' (this build has: %s)\n", items[i],
                    have);
            return -EINVAL;
        }
        opt->algorithms[i] = items[i];
    }
    opt->algorithm_count = n;
    opt->algorithms_given = true;
    return 0;
}

static int apply_kinds(void *context, char *arg)
{
    struct bench_options *opt = context;
    static char list[1024];
    char *items[BENCH_MAX_LIST];
    int n = split_option(list, sizeof list, arg, "data kind", items);
    if (n < 0)
        return n;
    for (int i = 0; i < n; i++) {
        opt->kinds[i] = datagen_kind_from_name(items[i]);
        if (opt->kinds[i] < 0) {
            fprintf(stderr, "uzram bench: unknown data kind '%s' (zero same text half random)\n",
                    items[i]);
            return -EINVAL;
        }
    }
    opt->kind_count = n;
    return 0;
}

static int apply_threads(void *context, char *arg)
{
    struct bench_options *opt = context;
    static char list[1024];
    char *items[BENCH_MAX_LIST];
    int n = split_option(list, sizeof list, arg, "thread", items);
    if (n < 0)
        return n;
    for (int i = 0; i < n; i++) {
        char *end;
        unsigned long value = strtoul(items[i], &end, 10);
        if (*end || value < 1 || value > BENCH_MAX_THREADS) {
            fprintf(stderr, "uzram bench: thread count '%s' is not 1..%d\n", items[i],
                    BENCH_MAX_THREADS);
            return -EINVAL;
        }
        opt->threads[i] = (unsigned)value;
    }
    opt->thread_count = n;
    opt->threads_given = true;
    return 0;
}

static int apply_size(void *context, char *arg)
{
    struct bench_options *opt = context;
    if (uzram_parse_size(arg, &opt->size) != 0 || opt->size < BENCH_PAGE) {
        fprintf(stderr, "uzram bench: bad size '%s' (at least 4K, e.g. 256M)\n", arg);
        return -EINVAL;
    }
    opt->size -= opt->size % BENCH_PAGE;
    opt->size_given = true;
    return 0;
}

static int apply_disksize(void *context, char *arg)
{
    struct bench_options *opt = context;
    if (uzram_parse_size(arg, &opt->disksize) != 0 || opt->disksize < BENCH_PAGE) {
        fprintf(stderr, "uzram bench: bad disk size '%s' (at least 4K, e.g. 4G)\n", arg);
        return -EINVAL;
    }
    opt->disksize -= opt->disksize % BENCH_PAGE;
    return 0;
}

static int apply_repeat(void *context, char *arg)
{
    struct bench_options *opt = context;
    char *end;
    unsigned long value = strtoul(arg, &end, 10);
    if (*end || value < 1 || value > 1000) {
        fprintf(stderr, "uzram bench: repeat count '%s' is not 1..1000\n", arg);
        return -EINVAL;
    }
    opt->repeat = (unsigned)value;
    return 0;
}

static int apply_budget(void *context, char *arg)
{
    struct bench_options *opt = context;
    char *end;
    opt->budget = strtod(arg, &end);
    if (*end || !(opt->budget > 0) || opt->budget > 3600) {
        fprintf(stderr, "uzram bench: budget '%s' is not a number of seconds\n", arg);
        return -EINVAL;
    }
    return 0;
}

static int apply_seed(void *context, char *arg)
{
    struct bench_options *opt = context;
    char *end;
    opt->seed = strtoull(arg, &end, 0);
    if (*end || !*arg) {
        fprintf(stderr, "uzram bench: bad seed '%s'\n", arg);
        return -EINVAL;
    }
    return 0;
}

enum {
    OPT_SEED = CLI_LONG_ONLY,
    OPT_JSON,
    OPT_DEDUP,
    OPT_SAME,
    OPT_ALL,
    OPT_DUMP,
    OPT_FILE,
    OPT_TREE,
    OPT_UNIX,
    OPT_URI,
    OPT_EXPORT,
    OPT_DEPTH,
    OPT_REQUESTS,
    OPT_BLOCK_SIZE,
    OPT_RW,
    OPT_PATTERN,
    OPT_REGION,
    OPT_VERIFY,
    OPT_TIMEOUT,
    OPT_SERVER_PID,
    OPT_DISKSIZE
};

/* --all: every section. */
static int apply_all(void *context, char *arg)
{
    struct bench_options *opt = context;
    (void)arg;
    opt->run_sweep = opt->run_same_check = opt->run_dedup = true;
    return 0;
}

/* --tree DIR, as often as given. */
static int apply_tree(void *context, char *arg)
{
    struct bench_options *opt = context;
    opt->trees[opt->tree_count++] = arg;
    return 0;
}

/* Every option of `uzram bench`, once, as the command framework's rows (cli/command.h):
 * getopt's table and the lines of --help are made from this list. A row's tags say which job
 * it belongs to, the engine's (`uzram bench`) or `uzram bench nbd`, so that the other job's
 * options are refused (check_job). */
enum { ENGINE = 1, NBD = 2, BOTH = ENGINE | NBD };
static const struct cli_option bench_rows[] = {
    CLI_HEADING("Sections:", ENGINE),
    {"dedup", OPT_DEDUP, no_argument, NULL,
     "dedup off vs on side by side (unique and identical\n"
     "pages); with --file/--tree: the real data with dedup\n"
     "off and on",
     ENGINE, CLI_TRUE(struct bench_options, run_dedup)},
    {"same-check", OPT_SAME, no_argument, NULL, "only the same-filled check", ENGINE,
     CLI_TRUE(struct bench_options, run_same_check)},
    {"all", OPT_ALL, no_argument, NULL, "throughput, same-filled check and dedup", ENGINE,
     apply_all, 0},
    {"file", OPT_FILE, required_argument, "PATH",
     "store the pages of a file (- for stdin) and report\n"
     "memory",
     ENGINE, CLI_TEXT(struct bench_options, file)},
    {"tree", OPT_TREE, required_argument, "DIR",
     "store every regular file under DIR, each from a page\n"
     "boundary (may be given many times; the trees are\n"
     "stored one after another)",
     ENGINE, apply_tree, 0},
    {"dump-data", OPT_DUMP, required_argument, "KIND",
     "write --size bytes of generated pages of KIND to\n"
     "stdout; KIND 'loaded' writes the pages of --file/--tree\n"
     "as stored",
     ENGINE, CLI_TEXT(struct bench_options, dump_kind)},
    CLI_HEADING("Options:", ENGINE),
    {"algorithms", 'a', required_argument, "LIST",
     "comma-separated (default lz4,lz4hc,zstd,lzo,deflate;\n"
     "lz4 for --dedup, --file, --tree)",
     ENGINE, apply_algorithms, 0},
    {"kinds", 'k', required_argument, "LIST",
     "data kinds: same,half,text,random,zero (default\n"
     "same,half,text,random)",
     ENGINE, apply_kinds, 0},
    {"threads", 't', required_argument, "LIST", "thread counts (default 1,2; 1 for --file/--tree)",
     ENGINE, apply_threads, 0},
    {"size", 's', required_argument, "SIZE",
     "bytes of pages per measurement (default 256M; for\n"
     "--file/--tree the most to load, default all)",
     ENGINE, apply_size, 0},
    {"disksize", OPT_DISKSIZE, required_argument, "SIZE",
     "--file/--tree: the device's size (default just the\n"
     "data; larger: a disk the data fills in part, as a file\n"
     "system image)",
     ENGINE, apply_disksize, 0},
    {"repeat", 'r', required_argument, "N",
     "repetitions of each measurement, best is kept\n"
     "(default 3)",
     ENGINE, apply_repeat, 0},
    {"budget", 'b', required_argument, "SECONDS",
     "a timed phase stops early after this long (default\n"
     "0.25)",
     ENGINE, apply_budget, 0},
    CLI_HEADING("uzram bench nbd options:", NBD),
    {"unix", OPT_UNIX, required_argument, "PATH", "the server's NBD Unix socket", NBD,
     bench_nbd_apply_unix, 0},
    {"uri", OPT_URI, required_argument, "URI",
     "nbd+unix:///NAME?socket=PATH, or nbd://HOST[:PORT]/NAME\n"
     "(TCP)",
     NBD, bench_nbd_apply_uri, 0},
    {"export", OPT_EXPORT, required_argument, "NAME",
     "export name (default \"\": the first device)", NBD, bench_nbd_apply_export, 0},
    {"depth", OPT_DEPTH, required_argument, "N",
     "requests kept in flight (default 16, at most 512)", NBD, bench_nbd_apply_depth, 0},
    {"requests", OPT_REQUESTS, required_argument, "N", "requests to complete (default 200000)", NBD,
     bench_nbd_apply_requests, 0},
    {"block-size", OPT_BLOCK_SIZE, required_argument, "SIZE",
     "bytes a request, a multiple of 512 up to 1M (default\n"
     "4K)",
     NBD, bench_nbd_apply_block_size, 0},
    {"rw", OPT_RW, required_argument, "RW",
     "read, write or mix (default read; mix: 70% reads, 30%\n"
     "writes)",
     NBD, bench_nbd_apply_rw, 0},
    {"pattern", OPT_PATTERN, required_argument, "ORDER",
     "random or seq: offsets at random or one after another\n"
     "(default random)",
     NBD, bench_nbd_apply_pattern, 0},
    {"region", OPT_REGION, required_argument, "SIZE",
     "the requests fall in the first SIZE bytes (default the\n"
     "whole export)",
     NBD, bench_nbd_apply_region, 0},
    {"verify", OPT_VERIFY, no_argument, NULL,
     "check every read's bytes: a block reads as written by\n"
     "a run with the same --seed and --block-size (or zeros\n"
     "if never written)",
     NBD, CLI_TRUE(struct bench_options, nbd.verify)},
    {"timeout", OPT_TIMEOUT, required_argument, "SECONDS",
     "give up when no reply has come for this long (default\n"
     "30)",
     NBD, bench_nbd_apply_timeout, 0},
    {"server-pid", OPT_SERVER_PID, required_argument, "PID",
     "also report the CPU time of this process (the server)\n"
     "a request",
     NBD, bench_nbd_apply_server_pid, 0},
    CLI_HEADING("Options of both:", BOTH),
    {"seed", OPT_SEED, required_argument, "N", "data generator seed (default 1)", BOTH, apply_seed,
     0},
    {"json", OPT_JSON, no_argument, NULL, "one JSON document instead of tables", BOTH,
     CLI_TRUE(struct bench_options, json)},
};

/* An option of the other job is refused, saying whose it is. */
static int check_job(void *context, const struct cli_option *option)
{
    const struct bench_options *opt = context;
    if (option->tags & (opt->nbd_job ? NBD : ENGINE))
        return 0;
    fprintf(stderr, "uzram bench: --%s is %s\n", option->name,
            opt->nbd_job ? "not an option of `uzram bench nbd`"
                         : "an option of `uzram bench nbd` only");
    return -1;
}

static int bench_run(int argc, char **argv);

const struct cli_command bench_command = {
    .name = "bench",
    .summary = "measure the engine on generated data, or an NBD server (bench nbd)",
    .synopsis = "[OPTION]...\n"
                "nbd (--unix PATH | --uri URI) [OPTION]...",
    .description =
        "Measure the engine in-process through its public API. With no section option:\n"
        "throughput of every algorithm x data kind x thread count, then the same-filled\n"
        "check alone. `uzram bench nbd` loads a running NBD server from one thread with\n"
        "many requests in flight and reports requests/s and CPU time a request (its own,\n"
        "the server's).\n",
    .options = bench_rows,
    .option_count = sizeof bench_rows / sizeof bench_rows[0],
    .check = check_job,
    .run = bench_run,
};

/* The defaults that depend on what was asked: the sections, and the algorithms, kinds and
 * thread counts for them. */
static void settle_defaults(struct bench_options *opt)
{
    bool section_given = opt->run_sweep || opt->run_same_check || opt->run_dedup;
    bool real_data = opt->file || opt->tree_count;
    if (!section_given && !real_data) {
        opt->run_sweep = true;
        opt->run_same_check = true;
    }
    if (!opt->algorithms_given) {
        bool one = real_data || (opt->run_dedup && !opt->run_sweep);
        opt->algorithm_count =
            one ? 1 : (int)(sizeof default_algorithms / sizeof default_algorithms[0]);
        for (int i = 0; i < opt->algorithm_count; i++)
            opt->algorithms[i] = default_algorithms[i];
    }
    if (opt->kind_count == 0) {
        opt->kind_count = (int)(sizeof default_kinds / sizeof default_kinds[0]);
        memcpy(opt->kinds, default_kinds, sizeof default_kinds);
    }
    if (!opt->threads_given) {
        opt->thread_count = real_data ? 1 : 2;
        opt->threads[0] = 1;
        opt->threads[1] = 2;
    }
}

/* Returns CLI_GO_ON, or the exit status: 0 after --help, 2 after a message. */
static int parse_options(int argc, char **argv, struct bench_options *opt)
{
    opt->repeat = 3;
    opt->budget = 0.25;
    opt->seed = 1;
    opt->size = 256ull << 20;
    /* `uzram bench nbd`: the job's word comes first, before any option. */
    opt->nbd_job = argc > 1 && strcmp(argv[1], "nbd") == 0;
    if (opt->nbd_job) {
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    struct cli_args args;
    int status = cli_parse(&bench_command, argc, argv, opt, &args);
    if (status != CLI_GO_ON)
        return status;
    if (opt->nbd_job)
        return bench_nbd_settle(opt) < 0 ? 2 : CLI_GO_ON;
    if (opt->file && opt->tree_count) {
        fprintf(stderr, "uzram bench: --file and --tree exclude each other\n");
        return 2;
    }
    if (opt->disksize && !opt->file && !opt->tree_count) {
        fprintf(stderr, "uzram bench: --disksize is for --file or --tree\n");
        return 2;
    }
    settle_defaults(opt);
    return CLI_GO_ON;
}

static int bench_run(int argc, char **argv)
{
    struct bench_options opt;
    memset(&opt, 0, sizeof opt);
    char *trees[argc + 1]; /* never more --tree options than arguments */
    opt.trees = trees;
    int rc = parse_options(argc, argv, &opt);
    if (rc != CLI_GO_ON)
        return rc;
    if (opt.dump_kind)
        return bench_dump(&opt);
    if (opt.nbd_job)
        return bench_nbd(&opt);

    /* Timing on a busy machine is not worth much: say so next to the numbers. */
    double load[1] = {0};
    if (getloadavg(load, 1) != 1)
        load[0] = -1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    struct bench_output out = {.json = opt.json};
    if (out.json) {
        printf("{\n  \"version\": ");
        util_json_string(stdout, uzram_version());
        printf(", \"seed\": %" PRIu64 ", \"size\": %" PRIu64
               ", \"repeat\": %u, \"budget_s\": %g, \"units\": \"MB/s = 10^6 bytes/s\""
               ", \"cpus\": %ld, \"loadavg_1min\": %.2f",
               opt.seed, opt.size, opt.repeat, opt.budget, cores, load[0]);
        out.sections = 1;
    } else {
        if (opt.file || opt.tree_count)
            printf("uzram bench %s: real data, best of %u\n", uzram_version(), opt.repeat);
        else
            printf("uzram bench %s: %" PRIu64 " MiB of 4 KiB pages per measurement, best of %u, "
                   "phases capped at %gs, seed %" PRIu64 "\n",
                   uzram_version(), opt.size >> 20, opt.repeat, opt.budget, opt.seed);
        if (load[0] > 0.5)
            printf("note: load average %.2f on %ld CPUs: other work is running, numbers will be"
                   " low and noisy\n",
                   load[0], cores);
    }
    fflush(stdout);

    if (opt.file || opt.tree_count)
        rc = bench_real_data(&opt, &out);
    if (rc == 0 && opt.run_sweep)
        rc = bench_throughput(&opt, &out);
    if (rc == 0 && opt.run_sweep)
        rc = bench_codec(&opt, &out);
    if (rc == 0 && opt.run_same_check)
        rc = bench_same_check(&opt, &out);
    if (rc == 0 && opt.run_dedup && !opt.file && !opt.tree_count)
        rc = bench_dedup(&opt, &out);

    if (out.json)
        printf("\n}\n");
    fflush(stdout);
    if (rc) {
        if (rc == -ENOMEM)
            fprintf(stderr, "uzram bench: out of memory\n");
        return 1;
    }
    return 0;
}
