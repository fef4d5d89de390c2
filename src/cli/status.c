/* status.c - `uzram status`: a zramctl-like table of running devices.
 * Asks each server's control socket (NAME.ctl in the runtime directory) for its stats. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "control/control.h"
#include "common/util.h"
#include "uzram.h"

/* One device as the "stats" control request reports it: identity, then
 * every counter of the library's list. */
struct device_status {
    char name[72];
    char algorithm[32];
    uint64_t disksize, clients, read_only, use_dedup;
    struct uzram_stats stats;
};

/* The numbers of a reply by key, in the order `status --json` prints them. */
static const struct {
    const char *key;
    size_t offset;
} number_fields[] = {
#define IDENTITY(field) {#field, offsetof(struct device_status, field)},
#define COUNTER(counter, form, kind, help)                                                         \
    {#counter, offsetof(struct device_status, stats.counter)},
    IDENTITY(disksize) IDENTITY(clients) IDENTITY(read_only) IDENTITY(use_dedup)
        UZRAM_STATS(COUNTER)
#undef COUNTER
#undef IDENTITY
};

static uint64_t number_at(const struct device_status *st, size_t field)
{
    uint64_t value;
    memcpy(&value, (const char *)st + number_fields[field].offset, sizeof value);
    return value;
}

static void parse_status(char *body, struct device_status *st)
{
    char *save = NULL;
    for (char *line = strtok_r(body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *space = strchr(line, ' ');
        if (space == NULL)
            continue;
        *space = '\0';
        const char *value = space + 1;
        if (strcmp(line, "name") == 0) {
            snprintf(st->name, sizeof st->name, "%s", value);
        } else if (strcmp(line, "algorithm") == 0) {
            snprintf(st->algorithm, sizeof st->algorithm, "%s", value);
        } else {
            for (size_t i = 0; i < sizeof number_fields / sizeof number_fields[0]; i++) {
                if (strcmp(line, number_fields[i].key) == 0) {
                    uint64_t number = strtoull(value, NULL, 10);
                    memcpy((char *)st + number_fields[i].offset, &number, sizeof number);
                }
            }
        }
    }
}

/* DATA per byte of memory really used (pool plus dedup index); 0 if none. */
static double compression_ratio(const struct device_status *st)
{
    uint64_t used = st->stats.mem_used_total + st->stats.meta_data_size;
    return used ? (double)st->stats.orig_data_size / (double)used : 0.0;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void status_usage(FILE *out)
{
    fputs("Usage: uzram status [--json] [-u DIR] [NAME...]\n"
          "Show the devices served by `uzram serve`, like zramctl.\n"
          "\n"
          "  -j, --json              print a JSON array of objects with raw numbers\n"
          "  -u, --runtime-dir DIR   look for NAME.ctl sockets in DIR (default\n"
          "                          $XDG_RUNTIME_DIR/uzram or /run/uzram)\n"
          "  -h, --help              show this help\n"
          "\n"
          "Columns: NAME ALGORITHM DISKSIZE DATA (uncompressed bytes stored) COMPR (compressed)\n"
          "TOTAL (memory used, fragmentation included) MEM-LIMIT MEM-USED (peak) ZERO-PAGES\n"
          "(same-filled pages) DUP (bytes saved by dedup) META (dedup index) COMP-RATIO\n"
          "(DATA / (TOTAL + META)) CLIENTS (connected NBD clients).\n",
          out);
}

int cmd_status(int argc, char **argv)
{
    static const struct option long_options[] = {
        {"json", no_argument, NULL, 'j'},
        {"runtime-dir", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    char runtime_dir[PATH_MAX] = "";
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "ju:h", long_options, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'u':
            snprintf(runtime_dir, sizeof runtime_dir, "%s", optarg);
            break;
        case 'h':
            status_usage(stdout);
            return 0;
        default:
            fputs("Try 'uzram status --help' for more information.\n", stderr);
            return 2;
        }
    }
    if (runtime_dir[0] == '\0' && util_runtime_dir(runtime_dir, sizeof runtime_dir) < 0) {
        fputs("uzram: $XDG_RUNTIME_DIR is too long\n", stderr);
        return 1;
    }

    /* Names to show: the ones given, or every NAME.ctl in the directory. */
    char **names = NULL;
    size_t count = 0;
    bool listed = optind < argc;
    int status = 0;
    if (listed) {
        names = calloc((size_t)(argc - optind), sizeof *names);
        if (names == NULL)
            return 1;
        for (int i = optind; i < argc; i++)
            names[count++] = strdup(argv[i]);
    } else {
        DIR *dir = opendir(runtime_dir);
        size_t capacity = 0;
        struct dirent *entry;
        while (dir != NULL && (entry = readdir(dir)) != NULL) {
            size_t length = strlen(entry->d_name);
            if (length <= 4 || strcmp(entry->d_name + length - 4, ".ctl") != 0)
                continue;
            if (count == capacity) {
                capacity = capacity ? capacity * 2 : 8;
                char **bigger = realloc(names, capacity * sizeof *names);
                if (bigger == NULL)
                    break;
                names = bigger;
            }
            names[count++] = strndup(entry->d_name, length - 4);
        }
        if (dir != NULL)
            closedir(dir);
        if (count > 0)
            qsort(names, count, sizeof *names, compare_names);
    }

    struct device_status *rows = calloc(count ? count : 1, sizeof *rows);
    size_t row_count = 0;
    for (size_t i = 0; rows != NULL && i < count; i++) {
        char path[PATH_MAX], message[512], *body;
        int rc = control_resolve(names[i], runtime_dir, path, sizeof path, message, sizeof message);
        if (rc == 0)
            rc = control_request(path, "stats", &body, message, sizeof message);
        if (rc < 0) {
            /* A stale socket from a killed server is only worth a word when
             * the user asked for that device by name. */
            if (listed) {
                fprintf(stderr, "uzram: %s: %s\n", names[i], message);
                status = 1;
            }
            continue;
        }
        parse_status(body, &rows[row_count]);
        free(body);
        row_count++;
    }

    if (json) {
        printf("[");
        for (size_t i = 0; i < row_count; i++) {
            const struct device_status *st = &rows[i];
            printf("%s\n  {\"name\": ", i ? "," : "");
            util_json_string(stdout, st->name);
            printf(", \"algorithm\": ");
            util_json_string(stdout, st->algorithm);
            for (size_t f = 0; f < sizeof number_fields / sizeof number_fields[0]; f++)
                printf(", \"%s\": %llu", number_fields[f].key,
                       (unsigned long long)number_at(st, f));
            printf(", \"comp_ratio\": %.3f}", compression_ratio(st));
        }
        printf("%s]\n", row_count ? "\n" : "");
    } else if (row_count > 0) {
        printf("%-10s %-9s %8s %8s %8s %8s %9s %8s %10s %8s %8s %10s %7s\n", "NAME", "ALGORITHM",
               "DISKSIZE", "DATA", "COMPR", "TOTAL", "MEM-LIMIT", "MEM-USED", "ZERO-PAGES", "DUP",
               "META", "COMP-RATIO", "CLIENTS");
        for (size_t i = 0; i < row_count; i++) {
            const struct device_status *st = &rows[i];
            char disksize[16], data[16], compr[16], total[16], limit[16], used[16], dup[16],
                meta[16], ratio[16];
            util_human_size(st->disksize, disksize, sizeof disksize);
            util_human_size(st->stats.orig_data_size, data, sizeof data);
            util_human_size(st->stats.compr_data_size, compr, sizeof compr);
            util_human_size(st->stats.mem_used_total, total, sizeof total);
            util_human_size(st->stats.mem_limit, limit, sizeof limit);
            util_human_size(st->stats.mem_used_max, used, sizeof used);
            util_human_size(st->stats.dup_data_size, dup, sizeof dup);
            util_human_size(st->stats.meta_data_size, meta, sizeof meta);
            if (st->stats.orig_data_size && st->stats.mem_used_total + st->stats.meta_data_size)
                snprintf(ratio, sizeof ratio, "%.2f", compression_ratio(st));
            else
                snprintf(ratio, sizeof ratio, "-");
            printf("%-10s %-9s %8s %8s %8s %8s %9s %8s %10llu %8s %8s %10s %7llu\n", st->name,
                   st->algorithm, disksize, data, compr, total, limit, used,
                   (unsigned long long)st->stats.same_pages, dup, meta, ratio,
                   (unsigned long long)st->clients);
        }
    }
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
    free(rows);
    return status;
}
