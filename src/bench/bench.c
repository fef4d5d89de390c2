/* bench.c - `uzram bench`: throughput, compression ratio and memory overheads of the
 * engine, measured in-process through include/uzram.h only (no engine internals).
 * This file parses the options and runs the jobs; each job has its own file. */
#include <errno.h>
#include <getopt.h>
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

static int apply_algorithms(struct bench_options *opt, char *arg)
{
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

static int apply_kinds(struct bench_options *opt, char *arg)
{
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

static int apply_threads(struct bench_options *opt, char *arg)
{
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

static int apply_size(struct bench_options *opt, char *arg)
{
    if (uzram_parse_size(arg, &opt->size) != 0 || opt->size < BENCH_PAGE) {
        fprintf(stderr, "uzram bench: bad size '%s' (at least 4K, e.g. 256M)\n", arg);
        return -EINVAL;
    }
    opt->size -= opt->size % BENCH_PAGE;
    opt->size_given = true;
    return 0;
}

static int apply_disksize(struct bench_options *opt, char *arg)
{
    if (uzram_parse_size(arg, &opt->disksize) != 0 || opt->disksize < BENCH_PAGE) {
        fprintf(stderr, "uzram bench: bad disk size '%s' (at least 4K, e.g. 4G)\n", arg);
        return -EINVAL;
    }
    opt->disksize -= opt->disksize % BENCH_PAGE;
    return 0;
}

static int apply_repeat(struct bench_options *opt, char *arg)
{
    char *end;
    unsigned long value = strtoul(arg, &end, 10);
    if (*end || value < 1 || value > 1000) {
        fprintf(stderr, "uzram bench: repeat count '%s' is not 1..1000\n", arg);
        return -EINVAL;
    }
    opt->repeat = (unsigned)value;
    return 0;
}

static int apply_budget(struct bench_options *opt, char *arg)
{
    char *end;
    opt->budget = strtod(arg, &end);
    if (*end || !(opt->budget > 0) || opt->budget > 3600) {
        fprintf(stderr, "uzram bench: budget '%s' is not a number of seconds\n", arg);
        return -EINVAL;
    }
    return 0;
}

static int apply_seed(struct bench_options *opt, char *arg)
{
    char *end;
    opt->seed = strtoull(arg, &end, 0);
    if (*end || !*arg) {
        fprintf(stderr, "uzram bench: bad seed '%s'\n", arg);
        return -EINVAL;
    }
    return 0;
}

enum {
    OPT_SEED = 256,
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

/* The options that only set a flag, a section or a path: nothing to check. */
static void apply_setting(struct bench_options *opt, int code, char *arg)
{
    switch (code) {
    case OPT_JSON:
        opt->json = true;
        break;
    case OPT_DEDUP:
        opt->run_dedup = true;
        break;
    case OPT_SAME:
        opt->run_same_check = true;
        break;
    case OPT_ALL:
        opt->run_sweep = opt->run_same_check = opt->run_dedup = true;
        break;
    case OPT_DUMP:
        opt->dump_kind = arg;
        break;
    case OPT_FILE:
        opt->file = arg;
        break;
    case OPT_TREE:
        opt->trees[opt->tree_count++] = arg;
        break;
    case OPT_VERIFY:
        opt->nbd.verify = true;
        break;
    }
}

/* Every option of `uzram bench`, once: getopt's table and the lines of --help are made from
 * this list (as `uzram serve` does). A row without a name starts a group of --help, its code
 * the width of the group's option column; the rows after it are that group's options. The
 * options' column leaves room for a short option, the sections' (which have none) does not. */
enum { SECTIONS_COLUMN = 21, OPTIONS_COLUMN = 26 };
/* Which job an option belongs to: the engine's (`uzram bench`) or `uzram bench nbd`. */
enum { ENGINE = 1, NBD = 2, BOTH = ENGINE | NBD };
static const struct bench_option {
    const char *name; /* long option */
    int code;         /* short option letter, or OPT_*; a group's column */
    int has_arg;      /* required_argument or no_argument */
    const char *arg;  /* what --help calls the argument */
    const char *help; /* lines after the first are indented under it */
    int (*apply)(struct bench_options *opt, char *arg); /* NULL: apply_setting() */
    int jobs;                                           /* ENGINE, NBD or BOTH */
} bench_option_table[] = {
    {NULL, SECTIONS_COLUMN, 0, NULL, "sections:", NULL, ENGINE},
    {"dedup", OPT_DEDUP, no_argument, NULL,
     "dedup off vs on side by side (unique and identical pages);\n"
     "with --file/--tree: the real data with dedup off and on",
     NULL, ENGINE},
    {"same-check", OPT_SAME, no_argument, NULL, "only the same-filled check", NULL, ENGINE},
    {"all", OPT_ALL, no_argument, NULL, "throughput, same-filled check and dedup", NULL, ENGINE},
    {"file", OPT_FILE, required_argument, "PATH",
     "store the pages of a file (- for stdin) and report memory", NULL, ENGINE},
    {"tree", OPT_TREE, required_argument, "DIR",
     "store every regular file under DIR, each from a page boundary\n"
     "(may be given many times; the trees are stored one after another)",
     NULL, ENGINE},
    {"dump-data", OPT_DUMP, required_argument, "KIND",
     "write --size bytes of generated pages of KIND to stdout;\n"
     "KIND 'loaded' writes the pages of --file/--tree as stored",
     NULL, ENGINE},
    {NULL, OPTIONS_COLUMN, 0, NULL, "options:", NULL, ENGINE},
    {"algorithms", 'a', required_argument, "LIST",
     "comma-separated (default lz4,lz4hc,zstd,lzo,deflate;\n"
     "lz4 for --dedup, --file, --tree)",
     apply_algorithms, ENGINE},
    {"kinds", 'k', required_argument, "LIST",
     "data kinds: same,half,text,random,zero (default same,half,text,random)", apply_kinds, ENGINE},
    {"threads", 't', required_argument, "LIST", "thread counts (default 1,2; 1 for --file/--tree)",
     apply_threads, ENGINE},
    {"size", 's', required_argument, "SIZE",
     "bytes of pages per measurement (default 256M; for --file/--tree\n"
     "the most to load, default all)",
     apply_size, ENGINE},
    {"disksize", OPT_DISKSIZE, required_argument, "SIZE",
     "--file/--tree: the device's size (default just the data; larger:\n"
     "a disk the data fills in part, as a file system image)",
     apply_disksize, ENGINE},
    {"repeat", 'r', required_argument, "N",
     "repetitions of each measurement, best is kept (default 3)", apply_repeat, ENGINE},
    {"budget", 'b', required_argument, "SECONDS",
     "a timed phase stops early after this long (default 0.25)", apply_budget, ENGINE},
    {"seed", OPT_SEED, required_argument, "N", "data generator seed (default 1)", apply_seed, BOTH},
    {"json", OPT_JSON, no_argument, NULL, "one JSON document instead of tables", NULL, BOTH},
    {"help", 'h', no_argument, NULL, NULL, NULL, BOTH},
    {NULL, OPTIONS_COLUMN, 0, NULL, "uzram bench nbd options:", NULL, NBD},
    {"unix", OPT_UNIX, required_argument, "PATH", "the server's NBD Unix socket",
     bench_nbd_apply_unix, NBD},
    {"uri", OPT_URI, required_argument, "URI",
     "nbd+unix:///NAME?socket=PATH, or nbd://HOST[:PORT]/NAME (TCP)", bench_nbd_apply_uri, NBD},
    {"export", OPT_EXPORT, required_argument, "NAME",
     "export name (default \"\": the first device)", bench_nbd_apply_export, NBD},
    {"depth", OPT_DEPTH, required_argument, "N",
     "requests kept in flight (default 16, at most 512)", bench_nbd_apply_depth, NBD},
    {"requests", OPT_REQUESTS, required_argument, "N", "requests to complete (default 200000)",
     bench_nbd_apply_requests, NBD},
    {"block-size", OPT_BLOCK_SIZE, required_argument, "SIZE",
     "bytes a request, a multiple of 512 up to 1M (default 4K)", bench_nbd_apply_block_size, NBD},
    {"rw", OPT_RW, required_argument, "RW",
     "read, write or mix (default read; mix: 70% reads, 30% writes)", bench_nbd_apply_rw, NBD},
    {"pattern", OPT_PATTERN, required_argument, "ORDER",
     "random or seq: offsets at random or one after another (default random)",
     bench_nbd_apply_pattern, NBD},
    {"region", OPT_REGION, required_argument, "SIZE",
     "the requests fall in the first SIZE bytes (default the whole export)", bench_nbd_apply_region,
     NBD},
    {"verify", OPT_VERIFY, no_argument, NULL,
     "check every read's bytes: a block reads as written by a run\n"
     "with the same --seed and --block-size (or zeros if never written)",
     NULL, NBD},
    {"timeout", OPT_TIMEOUT, required_argument, "SECONDS",
     "give up when no reply has come for this long (default 30)", bench_nbd_apply_timeout, NBD},
    {"server-pid", OPT_SERVER_PID, required_argument, "PID",
     "also report the CPU time of this process (the server) a request", bench_nbd_apply_server_pid,
     NBD},
};
#define BENCH_OPTION_COUNT (sizeof bench_option_table / sizeof bench_option_table[0])

static void usage(FILE *to)
{
    fputs("usage: uzram bench [options]\n"
          "       uzram bench nbd (--unix PATH | --uri URI) [options]\n"
          "  Measures the engine in-process through its public API.\n"
          "  With no section option: throughput of every algorithm x data kind x thread\n"
          "  count, then the same-filled check alone.\n"
          "  `uzram bench nbd` loads a running NBD server from one thread with many requests\n"
          "  in flight and reports requests/s and CPU time a request (its own, the server's).\n",
          to);
    int column = 0;
    for (size_t i = 0; i < BENCH_OPTION_COUNT; i++) {
        const struct bench_option *o = &bench_option_table[i];
        if (o->name == NULL) {
            fprintf(to, "\n%s\n", o->help);
            column = o->code;
            continue;
        }
        char left[64];
        if (o->code < 256)
            snprintf(left, sizeof left, "  -%c, --%s%s%s", o->code, o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        else if (column == OPTIONS_COLUMN)
            snprintf(left, sizeof left, "      --%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        else
            snprintf(left, sizeof left, "  --%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        if (o->help == NULL) {
            fprintf(to, "%s\n", left);
            continue;
        }
        fprintf(to, "%-*s", column, left);
        for (const char *line = o->help; line != NULL;) {
            const char *end = strchr(line, '\n');
            fprintf(to, "%.*s\n", end ? (int)(end - line) : (int)strlen(line), line);
            line = end ? end + 1 : NULL;
            if (line != NULL)
                fprintf(to, "%*s", column, "");
        }
    }
}

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

/* Returns 0, 1 after --help, or -EINVAL after a message. */
static int parse_options(int argc, char **argv, struct bench_options *opt)
{
    struct option longopts[BENCH_OPTION_COUNT + 1];
    char shortopts[2 * BENCH_OPTION_COUNT + 1];
    size_t long_count = 0, short_length = 0;
    for (size_t i = 0; i < BENCH_OPTION_COUNT; i++) {
        const struct bench_option *o = &bench_option_table[i];
        if (o->name == NULL)
            continue;
        longopts[long_count++] = (struct option){o->name, o->has_arg, NULL, o->code};
        if (o->code < 256) {
            shortopts[short_length++] = (char)o->code;
            if (o->has_arg == required_argument)
                shortopts[short_length++] = ':';
        }
    }
    longopts[long_count] = (struct option){NULL, 0, NULL, 0};
    shortopts[short_length] = '\0';

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
    optind = 0; /* full re-initialisation, in case main() used getopt too */
    int c;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const struct bench_option *option = NULL;
        for (size_t i = 0; i < BENCH_OPTION_COUNT && !option; i++)
            if (bench_option_table[i].name && bench_option_table[i].code == c)
                option = &bench_option_table[i];
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if (!option) {
            usage(stderr);
            return -EINVAL;
        }
        if (!(option->jobs & (opt->nbd_job ? NBD : ENGINE))) {
            fprintf(stderr, "uzram bench: --%s is %s\n", option->name,
                    opt->nbd_job ? "not an option of `uzram bench nbd`"
                                 : "an option of `uzram bench nbd` only");
            return -EINVAL;
        }
        if (!option->apply)
            apply_setting(opt, c, optarg);
        else if (option->apply(opt, optarg) < 0)
            return -EINVAL;
    }
    if (optind < argc) {
        fprintf(stderr, "uzram bench: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -EINVAL;
    }
    if (opt->nbd_job)
        return bench_nbd_settle(opt);
    if (opt->file && opt->tree_count) {
        fprintf(stderr, "uzram bench: --file and --tree exclude each other\n");
        return -EINVAL;
    }
    if (opt->disksize && !opt->file && !opt->tree_count) {
        fprintf(stderr, "uzram bench: --disksize is for --file or --tree\n");
        return -EINVAL;
    }
    settle_defaults(opt);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    /* getopt wants argv[0] to be a program name. Accept both conventions a
     * dispatcher may use: argv[0] == "bench", or argv[0] already the first
     * option. */
    char *args[argc + 2];
    int count = 0;
    if (argc == 0 || argv[0][0] == '-')
        args[count++] = (char *)"bench";
    for (int i = 0; i < argc; i++)
        args[count++] = argv[i];
    args[count] = NULL;

    struct bench_options opt;
    memset(&opt, 0, sizeof opt);
    char *trees[argc + 1]; /* never more --tree options than arguments */
    opt.trees = trees;
    int rc = parse_options(count, args, &opt);
    if (rc == 1)
        return 0; /* --help */
    if (rc)
        return 2;
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
