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
#include "common/util.h"

static const char *const default_algorithms[] = {"lz4", "lz4hc", "zstd", "lzo", "deflate"};
static const int default_kinds[] = {DATAGEN_SAME, DATAGEN_HALF, DATAGEN_TEXT, DATAGEN_RANDOM};

static void usage(FILE *to)
{
    fprintf(
        to,
        "usage: uzram bench [options]\n"
        "  Measures the engine in-process through its public API.\n"
        "  With no section option: throughput of every algorithm x data kind x thread\n"
        "  count, then the same-filled check alone.\n"
        "\n"
        "sections:\n"
        "  --dedup            dedup off vs on side by side (unique and identical pages);\n"
        "                     with --file/--tree: the real data with dedup off and on\n"
        "  --same-check       only the same-filled check\n"
        "  --all              throughput, same-filled check and dedup\n"
        "  --file PATH        store the pages of a file (- for stdin) and report memory\n"
        "  --tree DIR         store every regular file under DIR, each from a page boundary\n"
        "                     (may be given many times; the trees are stored one after another)\n"
        "  --dump-data KIND   write --size bytes of generated pages of KIND to stdout;\n"
        "                     KIND 'loaded' writes the pages of --file/--tree as stored\n"
        "\n"
        "options:\n"
        "  -a, --algorithms LIST   comma-separated (default lz4,lz4hc,zstd,lzo,deflate;\n"
        "                          lz4 for --dedup, --file, --tree)\n"
        "  -k, --kinds LIST        data kinds: same,half,text,random,zero (default "
        "same,half,text,random)\n"
        "  -t, --threads LIST      thread counts (default 1,2; 1 for --file/--tree)\n"
        "  -s, --size SIZE         bytes of pages per measurement (default 256M; for "
        "--file/--tree\n"
        "                          the most to load, default all)\n"
        "  -r, --repeat N          repetitions of each measurement, best is kept (default 3)\n"
        "  -b, --budget SECONDS    a timed phase stops early after this long (default 0.25)\n"
        "      --seed N            data generator seed (default 1)\n"
        "      --json              one JSON document instead of tables\n"
        "  -h, --help\n");
}

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

static int parse_options(int argc, char **argv, struct bench_options *opt)
{
    enum { OPT_SEED = 256, OPT_JSON, OPT_DEDUP, OPT_SAME, OPT_ALL, OPT_DUMP, OPT_FILE, OPT_TREE };
    static const struct option longopts[] = {
        {"algorithms", required_argument, NULL, 'a'},
        {"kinds", required_argument, NULL, 'k'},
        {"threads", required_argument, NULL, 't'},
        {"size", required_argument, NULL, 's'},
        {"repeat", required_argument, NULL, 'r'},
        {"budget", required_argument, NULL, 'b'},
        {"seed", required_argument, NULL, OPT_SEED},
        {"json", no_argument, NULL, OPT_JSON},
        {"dedup", no_argument, NULL, OPT_DEDUP},
        {"same-check", no_argument, NULL, OPT_SAME},
        {"all", no_argument, NULL, OPT_ALL},
        {"dump-data", required_argument, NULL, OPT_DUMP},
        {"file", required_argument, NULL, OPT_FILE},
        {"tree", required_argument, NULL, OPT_TREE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static char lists[3][1024]; /* strtok_r needs writable copies */
    char *items[BENCH_MAX_LIST];
    bool section_given = false;
    int n;
    char *end;

    opt->repeat = 3;
    opt->budget = 0.25;
    opt->seed = 1;
    opt->size = 256ull << 20;
    optind = 0; /* full re-initialisation, in case main() used getopt too */
    for (;;) {
        int c = getopt_long(argc, argv, "a:k:t:s:r:b:h", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 'a':
            snprintf(lists[0], sizeof lists[0], "%s", optarg);
            n = split_list(lists[0], items);
            if (n < 0) {
                fprintf(stderr, "uzram bench: bad algorithm list '%s'\n", optarg);
                return -EINVAL;
            }
            for (int i = 0; i < n; i++) {
                int min, max, dflt;
                if (uzram_algorithm_levels(items[i], &min, &max, &dflt) != 0) {
                    char have[256];
                    if (uzram_algorithm_list(NULL, have, sizeof have) < 0)
                        have[0] = '\0';
                    have[strcspn(have, "\n")] = '\0';
                    fprintf(stderr, "uzram bench: unknown algorithm '%s' (this build has: %s)\n",
                            items[i], have);
                    return -EINVAL;
                }
                opt->algorithms[i] = items[i];
            }
            opt->algorithm_count = n;
            opt->algorithms_given = true;
            break;
        case 'k':
            snprintf(lists[1], sizeof lists[1], "%s", optarg);
            n = split_list(lists[1], items);
            if (n < 0) {
                fprintf(stderr, "uzram bench: bad data kind list '%s'\n", optarg);
                return -EINVAL;
            }
            for (int i = 0; i < n; i++) {
                opt->kinds[i] = datagen_kind_from_name(items[i]);
                if (opt->kinds[i] < 0) {
                    fprintf(stderr,
                            "uzram bench: unknown data kind '%s' (zero same text half random)\n",
                            items[i]);
                    return -EINVAL;
                }
            }
            opt->kind_count = n;
            break;
        case 't':
            snprintf(lists[2], sizeof lists[2], "%s", optarg);
            n = split_list(lists[2], items);
            if (n < 0) {
                fprintf(stderr, "uzram bench: bad thread list '%s'\n", optarg);
                return -EINVAL;
            }
            for (int i = 0; i < n; i++) {
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
            break;
        case 's':
            if (uzram_parse_size(optarg, &opt->size) != 0 || opt->size < BENCH_PAGE) {
                fprintf(stderr, "uzram bench: bad size '%s' (at least 4K, e.g. 256M)\n", optarg);
                return -EINVAL;
            }
            opt->size -= opt->size % BENCH_PAGE;
            opt->size_given = true;
            break;
        case 'r': {
            unsigned long value = strtoul(optarg, &end, 10);
            if (*end || value < 1 || value > 1000) {
                fprintf(stderr, "uzram bench: repeat count '%s' is not 1..1000\n", optarg);
                return -EINVAL;
            }
            opt->repeat = (unsigned)value;
            break;
        }
        case 'b':
            opt->budget = strtod(optarg, &end);
            if (*end || !(opt->budget > 0) || opt->budget > 3600) {
                fprintf(stderr, "uzram bench: budget '%s' is not a number of seconds\n", optarg);
                return -EINVAL;
            }
            break;
        case OPT_SEED:
            opt->seed = strtoull(optarg, &end, 0);
            if (*end || !*optarg) {
                fprintf(stderr, "uzram bench: bad seed '%s'\n", optarg);
                return -EINVAL;
            }
            break;
        case OPT_JSON:
            opt->json = true;
            break;
        case OPT_DEDUP:
            opt->run_dedup = section_given = true;
            break;
        case OPT_SAME:
            opt->run_same_check = section_given = true;
            break;
        case OPT_ALL:
            opt->run_sweep = opt->run_same_check = opt->run_dedup = section_given = true;
            break;
        case OPT_DUMP:
            opt->dump_kind = optarg;
            break;
        case OPT_FILE:
            opt->file = optarg;
            break;
        case OPT_TREE:
            opt->trees[opt->tree_count++] = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "uzram bench: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -EINVAL;
    }
    if (opt->file && opt->tree_count) {
        fprintf(stderr, "uzram bench: --file and --tree exclude each other\n");
        return -EINVAL;
    }
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
