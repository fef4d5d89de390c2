/* estimate.c - `uzram estimate`: what same-filled pages, compression and dedup would save.
 * Parses the options, opens every source first (so a typo fails at once), runs, reports. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "estimate/estimate.h"
#include "uzram.h"

/* Split `list` (commas or spaces) into options->algorithms, checked against
 * the engine. `storage` keeps the strings. Returns 0, or -1 after a message. */
static int parse_algorithms(const char *list, char *storage, size_t size,
                            struct estimate_options *options)
{
    snprintf(storage, size, "%s", list);
    options->algorithm_count = 0;
    if (strcmp(storage, "none") == 0)
        return 0;
    char *save = NULL;
    for (char *name = strtok_r(storage, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
        int min, max, dflt;
        if (uzram_algorithm_levels(name, &min, &max, &dflt) < 0) {
            char known[256];
            if (uzram_algorithm_list(NULL, known, sizeof known) < 0)
                known[0] = 0;
            known[strcspn(known, "\n")] = 0;
            fprintf(stderr, "uzram estimate: unknown algorithm '%s' (this build has: %s)\n", name,
                    known);
            return -1;
        }
        bool seen = false;
        for (unsigned a = 0; a < options->algorithm_count; a++)
            seen |= strcmp(options->algorithms[a], name) == 0;
        if (seen)
            continue;
        if (options->algorithm_count == ESTIMATE_MAX_ALGORITHMS) {
            fprintf(stderr, "uzram estimate: at most %d algorithms\n", ESTIMATE_MAX_ALGORITHMS);
            return -1;
        }
        options->specs[options->algorithm_count] =
            (struct estimate_algorithm){.codec = name, .from = {-1, -1}};
        options->algorithms[options->algorithm_count++] = name;
    }
    return 0;
}

/* The recompression projection's entries, after the user's algorithms: the
 * secondary without and with a dictionary, and what recompression keeps of
 * each (the primary's form where it is no bigger). `spec` is NAME[:LEVEL].
 * Returns 0, or -1 after a message. */
static int add_recompression(struct estimate_options *options, const char *spec, size_t dict_size)
{
    static char names[4][64];
    char name[32];
    int level = 0;
    const char *colon = strchr(spec, ':');
    size_t length = colon ? (size_t)(colon - spec) : strlen(spec);
    char *end = NULL;
    if (colon)
        level = (int)strtol(colon + 1, &end, 10);
    int min, max, dflt;
    if (length == 0 || length >= sizeof name || (colon && (end == colon + 1 || *end))) {
        fprintf(stderr, "uzram estimate: bad --recompress '%s'; use NAME[:LEVEL], e.g. zstd:7\n",
                spec);
        return -1;
    }
    memcpy(name, spec, length);
    name[length] = 0;
    if (uzram_algorithm_levels(name, &min, &max, &dflt) < 0 ||
        (level && (level < min || level > max))) {
        fprintf(stderr,
                "uzram estimate: bad --recompress '%s': unknown algorithm or level out of "
                "its range (see uzram(1))\n",
                spec);
        return -1;
    }
    if (options->algorithm_count + 4 > ESTIMATE_MAX_ALGORITHMS) {
        fprintf(stderr, "uzram estimate: at most %d algorithms with --recompress\n",
                ESTIMATE_MAX_ALGORITHMS - 4);
        return -1;
    }
    struct estimate_recompression *r = &options->recompression;
    /* the primary: the engine's default algorithm if asked for, else the first */
    r->primary = 0;
    for (unsigned a = 0; a < options->algorithm_count; a++)
        if (strcmp(options->algorithms[a], "lz4") == 0)
            r->primary = a;
    const char *primary = options->algorithms[r->primary];
    int shown = level ? level : dflt;
    bool dictionaries = strcmp(name, "zstd") == 0; /* the engine trains zstd's only */
    r->secondary = options->algorithm_count;
    r->secondary_dict = dictionaries ? r->secondary + 1 : r->secondary;
    r->recompressed = r->secondary_dict + 1;
    r->recompressed_dict = dictionaries ? r->recompressed + 1 : r->recompressed;
    snprintf(names[0], sizeof names[0], "%s:%d", name, shown);
    snprintf(names[1], sizeof names[1], "%s:%d+dict", name, shown);
    snprintf(names[2], sizeof names[2], "%s>%s:%d", primary, name, shown);
    snprintf(names[3], sizeof names[3], "%s>%s:%d+dict", primary, name, shown);
    /* the codec names point into options: copy the secondary's name too */
    static char codec[32];
    snprintf(codec, sizeof codec, "%s", name);
    unsigned a = options->algorithm_count;
    options->specs[a] =
        (struct estimate_algorithm){.codec = codec, .level = level, .from = {-1, -1}};
    options->algorithms[a++] = names[0];
    if (dictionaries) {
        options->specs[a] = (struct estimate_algorithm){
            .codec = codec, .level = level, .dict_size = dict_size, .from = {-1, -1}};
        options->algorithms[a++] = names[1];
    }
    options->specs[a] =
        (struct estimate_algorithm){.codec = primary, .from = {(int)r->primary, (int)r->secondary}};
    options->algorithms[a++] = names[2];
    if (dictionaries) {
        options->specs[a] = (struct estimate_algorithm){
            .codec = primary, .from = {(int)r->primary, (int)r->secondary_dict}};
        options->algorithms[a++] = names[3];
    }
    options->algorithm_count = a;
    r->on = true;
    return 0;
}

struct source_arg {
    const char *text;
    bool is_pid;
};

/* What the command line asked for, before the algorithms are checked against the engine. */
struct estimate_command {
    struct estimate_options options;
    struct source_arg *args; /* the sources in command-line order */
    size_t arg_count;
    const char *algorithm_list; /* -a, or NULL */
    const char *recompress;     /* -r, or NULL */
    uint64_t dict_size;
};

enum {
    OPT_PAGE_SIZE = CLI_LONG_ONLY,
    OPT_ALL_MAPPINGS,
    OPT_JSON,
    OPT_HOT,
    OPT_DICT_SIZE,
    OPT_GROUP
};

/* The options that take a number: check `arg` and store it. Returns 0, or -1 after a message. */
static int parse_number_option(void *context, const struct cli_option *option, char *arg)
{
    struct estimate_command *cmd = context;
    struct estimate_options *options = &cmd->options;
    char *end;
    switch (option->code) {
    case OPT_PAGE_SIZE: {
        uint64_t size;
        if (uzram_parse_size(arg, &size) < 0 || size < 512 || size > 65536 || (size & (size - 1))) {
            fprintf(stderr,
                    "uzram estimate: --page-size wants a power of two from 512 to 64K, "
                    "not '%s'\n",
                    arg);
            return -1;
        }
        options->page_size = (size_t)size;
        return 0;
    }
    case 'j': {
        long jobs = strtol(arg, &end, 10);
        if (end == arg || *end || jobs < 1 || jobs > 256) {
            fprintf(stderr, "uzram estimate: --jobs wants 1 to 256, not '%s'\n", arg);
            return -1;
        }
        options->jobs = (unsigned)jobs;
        return 0;
    }
    case OPT_HOT: {
        long hot = strtol(arg, &end, 10);
        if (end == arg || (*end && strcmp(end, "%") != 0) || hot < 0 || hot > 100) {
            fprintf(stderr, "uzram estimate: --hot wants a percentage, 0 to 100, not '%s'\n", arg);
            return -1;
        }
        options->recompression.hot_percent = (unsigned)hot;
        return 0;
    }
    case OPT_GROUP: {
        long group = strtol(arg, &end, 10);
        if (end == arg || *end || group < 2 || group > 16) {
            fprintf(stderr, "uzram estimate: --group wants 2 to 16 pages, not '%s'\n", arg);
            return -1;
        }
        options->recompression.group = (unsigned)group;
        return 0;
    }
    default: /* OPT_DICT_SIZE */
        if (uzram_parse_size(arg, &cmd->dict_size) < 0 || cmd->dict_size < 256 ||
            cmd->dict_size > 1024 * 1024) {
            fprintf(stderr, "uzram estimate: --dict-size wants 256 bytes to 1M, not '%s'\n", arg);
            return -1;
        }
        return 0;
    }
}

/* A source, in its place on the command line (between --pid's). */
static int add_source(void *context, char *arg)
{
    struct estimate_command *cmd = context;
    cmd->args[cmd->arg_count++] = (struct source_arg){arg, false};
    return 0;
}

static int add_pid(void *where, char *arg)
{
    struct estimate_command *cmd = where;
    cmd->args[cmd->arg_count++] = (struct source_arg){arg, true};
    return 0;
}

static const struct cli_option estimate_rows[] = {
    {"pid", 'p', required_argument, "PID",
     "a live process: its private anonymous and private\n"
     "writable mappings, read through /proc/PID/mem",
     0, add_pid, 0},
    {"all-mappings", OPT_ALL_MAPPINGS, no_argument, NULL, "with --pid: every readable mapping", 0,
     CLI_TRUE(struct estimate_command, options.all_mappings)},
    {"algorithms", 'a', required_argument, "LIST",
     "comma-separated algorithms to try (default: lz4, the\n"
     "engine's default; 'all' for every one it has; 'none'\n"
     "for classes and dedup only)",
     0, CLI_TEXT(struct estimate_command, algorithm_list)},
    {"algorithm", 'a', required_argument, NULL, NULL, 0,
     CLI_TEXT(struct estimate_command, algorithm_list)},
    {"recompress", 'r', required_argument, "SPEC",
     "also project recompression (uzram serve\n"
     "--recompress-idle): the hot pages stay lz4 (or the\n"
     "first algorithm), the others are recompressed with\n"
     "SPEC = NAME[:LEVEL] (e.g. " ESTIMATE_RECOMPRESS_EXAMPLE "), with and without a\n"
     "dictionary trained on the first pages read",
     0, CLI_TEXT(struct estimate_command, recompress)},
    {"hot", OPT_HOT, required_argument, "PERCENT",
     "with -r: share of pages taken as hot (default 20)", 0, CLI_BY_COMMAND},
    {"dict-size", OPT_DICT_SIZE, required_argument, "SIZE",
     "with -r: dictionary size (default 64K)", 0, CLI_BY_COMMAND},
    {"group", OPT_GROUP, required_argument, "N",
     "with -r zstd: also bundles of N (2 to 16)\n"
     "neighbouring cold pages compressed together\n"
     "(serve's group=N)",
     0, CLI_BY_COMMAND},
    {"page-size", OPT_PAGE_SIZE, required_argument, "SIZE",
     "page size (default 4096; compression only at 4096)", 0, CLI_BY_COMMAND},
    {"jobs", 'j', required_argument, "N", "worker threads (default: number of CPUs)", 0,
     CLI_BY_COMMAND},
    {"json", OPT_JSON, no_argument, NULL, "print JSON instead of tables", 0,
     CLI_TRUE(struct estimate_command, options.json)},
    {"quiet", 'q', no_argument, NULL, "no progress line on the terminal", 0,
     CLI_FALSE(struct estimate_command, options.progress)},
};

static int estimate_run(int argc, char **argv);

const struct cli_command estimate_command = {
    .name = "estimate",
    .summary = "estimate what same-filled pages, compression and dedup save on data",
    .synopsis = "[OPTION]... SOURCE...",
    .description =
        "Estimate what zram, zram with dedup and uzram would save on your own data.\n"
        "A SOURCE is a file, a block device (read only), a directory (its files, walked\n"
        "in name order; devices, sockets, symbolic links, other file systems and\n"
        "unreadable files are skipped and counted), '-' for standard input, or\n"
        "--pid PID for the memory of a live process. Several sources are each\n"
        "reported, then totalled; a duplicate is a page seen earlier in the run.\n",
    .options = estimate_rows,
    .option_count = sizeof estimate_rows / sizeof estimate_rows[0],
    /* The sources stay in command-line order, interleaved with --pid, so the report lists
     * them as given. */
    .order = CLI_IN_ORDER,
    .apply = parse_number_option,
    .operand = add_source,
    .epilog = "\n"
              "Examples:\n"
              "  uzram estimate /var/tmp/build.img\n"
              "  uzram estimate --algorithms all ~/src\n"
              "  uzram estimate -a lz4,zstd --pid $(pidof firefox)\n"
              "  tar cf - ~/src | uzram estimate --json -\n",
    .run = estimate_run,
};

/* Read the command line into `cmd` (whose args has room for argc sources). Returns -1 to go
 * on, or the exit status: 0 after --help, 2 after a message about a bad command line. */
static int parse_command_line(int argc, char **argv, struct estimate_command *cmd)
{
    struct cli_args args;
    int status = cli_parse(&estimate_command, argc, argv, cmd, &args);
    if (status != CLI_GO_ON)
        return status;
    if (!cmd->arg_count)
        return cli_misused(&estimate_command,
                           "no source given (a file, a device, '-' or --pid PID)");
    return -1;
}

/* Settle options.algorithms (and the recompression entries) from -a, -r and --page-size, and
 * check what the sources need of them. Returns 0, or -1 after a message. */
static int choose_algorithms(struct estimate_command *cmd)
{
    static char algorithm_storage[512]; /* the names options.algorithms points into */
    struct estimate_options *options = &cmd->options;
    const char *algorithm_list = cmd->algorithm_list;
    if (options->page_size != UZRAM_PAGE_SIZE) {
        /* the engine (and its codecs and pool) only has 4 KiB pages */
        if (algorithm_list && strcmp(algorithm_list, "none") != 0) {
            fprintf(stderr,
                    "uzram estimate: compression is only estimated for %u-byte pages; "
                    "use -a none with --page-size %zu\n",
                    UZRAM_PAGE_SIZE, options->page_size);
            return -1;
        }
        algorithm_list = "none";
    }
    /* The engine's default algorithm is the default (one is fast and answers the first
     * question); "all" puts it first too: the histogram's compressed columns use the first. */
    struct uzram_config defaults;
    uzram_config_init(&defaults);
    const char *first = defaults.comp_algorithm ? defaults.comp_algorithm : "lz4";
    if (!algorithm_list) {
        if (parse_algorithms(first, algorithm_storage, sizeof algorithm_storage, options) < 0)
            return -1;
    } else if (strcmp(algorithm_list, "all") == 0) {
        char all[256];
        if (uzram_algorithm_list(NULL, all, sizeof all) < 0) {
            fputs("uzram estimate: cannot list the algorithms\n", stderr);
            return -1;
        }
        all[strcspn(all, "\n")] = 0;
        char ordered[300];
        snprintf(ordered, sizeof ordered, "%s %s", first, all);
        if (parse_algorithms(ordered, algorithm_storage, sizeof algorithm_storage, options) < 0)
            return -1;
    } else if (parse_algorithms(algorithm_list, algorithm_storage, sizeof algorithm_storage,
                                options) < 0) {
        return -1;
    }
    if (cmd->recompress && !options->algorithm_count) {
        fputs("uzram estimate: --recompress needs compression; drop -a none\n", stderr);
        return -1;
    }
    if (options->recompression.group &&
        (!cmd->recompress || strncmp(cmd->recompress, "zstd", 4) != 0 ||
         (cmd->recompress[4] != '\0' && cmd->recompress[4] != ':'))) {
        fputs("uzram estimate: --group projects bundles, which zstd makes: add -r zstd[:LEVEL]\n",
              stderr);
        return -1;
    }
    if (cmd->recompress && add_recompression(options, cmd->recompress, (size_t)cmd->dict_size) < 0)
        return -1;
    for (size_t i = 0; i < cmd->arg_count; i++)
        if (cmd->args[i].is_pid && options->page_size != 4096) {
            fputs("uzram estimate: --pid reads the system's 4096-byte pages; drop --page-size\n",
                  stderr);
            return -1;
        }
    return 0;
}

/* Open every source of the command line into sources[], stopping at the first that fails.
 * *opened counts the entries estimate_close() must see (the failed one too). Returns 0, or a
 * negative errno after a message. */
static int open_sources(const struct estimate_command *cmd, struct estimate_source *sources,
                        size_t *opened)
{
    const struct estimate_options *options = &cmd->options;
    bool stdin_seen = false;
    for (*opened = 0; *opened < cmd->arg_count;) {
        const struct source_arg *arg = &cmd->args[*opened];
        struct estimate_source *source = &sources[(*opened)++];
        int rc;
        if (arg->is_pid) {
            rc = estimate_open_process(source, arg->text, options->all_mappings);
        } else {
            if (strcmp(arg->text, "-") == 0) {
                if (stdin_seen) {
                    fputs("uzram estimate: '-' (standard input) given twice\n", stderr);
                    return -EINVAL;
                }
                stdin_seen = true;
            }
            rc = estimate_open_file(source, arg->text);
        }
        if (rc == 0 && options->algorithm_count) {
            source->counts.lengths =
                calloc(options->algorithm_count, sizeof *source->counts.lengths);
            if (!source->counts.lengths)
                rc = -ENOMEM;
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Analyse the opened sources and print the report. Returns the exit status. */
static int analyze_and_report(struct estimate_options *options, struct estimate_source *sources,
                              size_t count)
{
    struct estimate_counts total = {0};
    struct estimate_analyzer *analyzer = NULL;
    int status = 1;
    if (options->algorithm_count) {
        total.lengths = calloc(options->algorithm_count, sizeof *total.lengths);
        if (!total.lengths) {
            fputs("uzram estimate: out of memory\n", stderr);
            return 1;
        }
    }
    if (estimate_analyzer_start(options, &analyzer) < 0)
        goto out;

    bool show_progress = options->progress && isatty(STDERR_FILENO);
    for (size_t i = 0; i < count; i++) {
        if (estimate_analyze_source(analyzer, &sources[i], show_progress) < 0)
            goto out;
        estimate_counts_add(&total, &sources[i].counts, options->algorithm_count);
    }

    struct estimate_bucket buckets[ESTIMATE_BUCKETS];
    struct estimate_index_info info;
    estimate_histogram(analyzer, buckets, &info);
    estimate_analyzer_dicts(analyzer, options);
    if (options->json)
        estimate_report_json(stdout, options, sources, count, &total, buckets, &info);
    else
        estimate_report_text(stdout, options, sources, count, &total, buckets, &info);
    fflush(stdout);
    status = ferror(stdout) ? 1 : 0;
out:
    estimate_analyzer_stop(analyzer);
    free(total.lengths);
    return status;
}

static int estimate_run(int argc, char **argv)
{
    struct estimate_command cmd = {
        .options = {.page_size = UZRAM_PAGE_SIZE, .progress = true},
        .dict_size = 64 * 1024,
    };
    cmd.options.recompression.hot_percent = 20;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cmd.options.jobs = cpus < 1 ? 1 : cpus > 256 ? 256 : (unsigned)cpus;
    cmd.args = calloc((size_t)argc + 1, sizeof *cmd.args);
    if (!cmd.args) {
        fputs("uzram estimate: out of memory\n", stderr);
        return 1;
    }
    int status = parse_command_line(argc, argv, &cmd);
    if (status < 0)
        status = choose_algorithms(&cmd) < 0 ? 2 : 1;
    if (status != 1)
        goto out;

    /* Open every source before reading any: a missing file is one line and
     * exit status 1, not a failure after an hour of work on the others. */
    struct estimate_source *sources = calloc(cmd.arg_count, sizeof *sources);
    size_t opened = 0;
    if (!sources)
        goto out;
    if (open_sources(&cmd, sources, &opened) == 0)
        status = analyze_and_report(&cmd.options, sources, cmd.arg_count);
    for (size_t i = 0; i < opened; i++)
        estimate_close(&sources[i]);
    free(sources);
out:
    free(cmd.args);
    return status;
}
