/* status.c - `uzram status`: running devices as zramctl shows zram's, as JSON, or as Prometheus
 * text. Asks each server's control socket (NAME.ctl in the runtime directory) for its stats. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "control/control.h"
#include "common/runtime_dir.h"
#include "common/text.h"
#include "uzram.h"

/* One device as the "stats" control request reports it: "key value" lines, in the server's
 * order (identity first, then every counter of its library's list). Kept as the server sent
 * them, so that counters this program does not know still show. */
#define STATUS_MAX_FIELDS 256
struct device_status {
    size_t count;
    struct {
        char key[64];
        char text[128];
        uint64_t number;
        bool is_number; /* the value is digits alone */
    } fields[STATUS_MAX_FIELDS];
};

static bool is_text_field(const char *key);

/* A "stats" reply into `st`, through the control client's one reader of replies. */
static void parse_status(const char *body, struct device_status *st)
{
    struct control_line line;
    st->count = 0;
    while (st->count < STATUS_MAX_FIELDS && control_next_line(&body, &line)) {
        if (line.key_length >= sizeof st->fields[0].key)
            continue;
        snprintf(st->fields[st->count].key, sizeof st->fields[0].key, "%.*s", (int)line.key_length,
                 line.key);
        snprintf(st->fields[st->count].text, sizeof st->fields[0].text, "%.*s",
                 (int)line.value_length, line.value);
        char *end;
        st->fields[st->count].number = strtoull(line.value, &end, 10);
        st->fields[st->count].is_number = end != line.value &&
                                          end == line.value + line.value_length &&
                                          !is_text_field(st->fields[st->count].key);
        st->count++;
    }
}

/* The field called `key`, or -1. */
static int field_index(const struct device_status *st, const char *key)
{
    for (size_t i = 0; i < st->count; i++)
        if (strcmp(st->fields[i].key, key) == 0)
            return (int)i;
    return -1;
}

static uint64_t number_of(const struct device_status *st, const char *key)
{
    int i = field_index(st, key);
    return i < 0 ? 0 : st->fields[i].number;
}

static const char *text_of(const struct device_status *st, const char *key)
{
    int i = field_index(st, key);
    return i < 0 ? "" : st->fields[i].text;
}

/* Fields that are words even when they look like numbers (a device may be called "7"); any
 * other field is a word when its value is not digits alone. Words are quoted in JSON and are
 * no Prometheus samples. */
static bool is_text_field(const char *key)
{
    return strcmp(key, "name") == 0 || strcmp(key, "server") == 0 ||
           strcmp(key, "algorithm") == 0 || strcmp(key, "socket") == 0 || strcmp(key, "tcp") == 0 ||
           strcmp(key, "uri") == 0 || strcmp(key, "attached") == 0;
}

/* DATA per byte of memory really used (pool plus dedup index). DATA counts every stored page
 * at 4096 bytes, same-filled ones too, which use no pool memory: so same-filled pages raise
 * the ratio, and a device that holds only same-filled pages has no finite one. Returns false
 * when there is no ratio (nothing stored, or no memory used). */
static bool compression_ratio(const struct device_status *st, double *ratio)
{
    uint64_t data = number_of(st, "orig_data_size");
    uint64_t used = number_of(st, "mem_used_total") + number_of(st, "meta_data_size");
    if (data == 0 || used == 0)
        return false;
    *ratio = (double)data / (double)used;
    return true;
}

/* ------------------------------------------------------------------------
 * Columns, as zramctl has them
 * ---------------------------------------------------------------------- */

enum column_kind { COLUMN_TEXT, COLUMN_SIZE, COLUMN_PAGES, COLUMN_COUNT, COLUMN_RATIO };

static const struct column {
    const char *name; /* the header, and what --output takes */
    const char *key;  /* the field it shows */
    enum column_kind kind;
    const char *help;
} columns[] = {
    {"NAME", "name", COLUMN_TEXT, "device name"},
    {"SERVER", "server", COLUMN_TEXT, "the server serving it (its control socket is SERVER.ctl)"},
    {"ALGORITHM", "algorithm", COLUMN_TEXT, "compression algorithm"},
    {"DISKSIZE", "disksize", COLUMN_SIZE, "disk size"},
    {"DATA", "orig_data_size", COLUMN_SIZE, "data stored, uncompressed (same-filled pages too)"},
    {"COMPR", "compr_data_size", COLUMN_SIZE, "data stored, compressed"},
    {"TOTAL", "mem_used_total", COLUMN_SIZE, "memory used, fragmentation included"},
    {"MEM-LIMIT", "mem_limit", COLUMN_SIZE, "memory limit (0B: none)"},
    {"MEM-USED", "mem_used_max", COLUMN_SIZE, "peak of TOTAL"},
    {"ZERO-PAGES", "same_pages", COLUMN_COUNT, "pages stored as one repeated word"},
    {"MIGRATED", "pages_compacted", COLUMN_COUNT, "pool pages given back by compaction"},
    {"DUP", "dup_data_size", COLUMN_SIZE, "bytes deduplication did not have to store"},
    {"META", "meta_data_size", COLUMN_SIZE, "memory of the dedup index and bundle records"},
    {"DEDUP-ENTRIES", "dedup_entries", COLUMN_COUNT,
     "unique objects in the deduplication index (META / DEDUP-ENTRIES: bytes per object)"},
    {"COMP-RATIO", "orig_data_size", COLUMN_RATIO, "DATA / (TOTAL + META)"},
    {"BD-DATA", "bd_data_size", COLUMN_SIZE, "data written back to the backing store, compressed"},
    {"BD-USED", "bd_count", COLUMN_PAGES, "space it takes on the backing store (bd_count)"},
    {"CLIENTS", "clients", COLUMN_COUNT, "connected NBD clients"},
    {"SOCKET", "socket", COLUMN_TEXT, "the NBD Unix socket (what serve --unix names)"},
    {"TCP", "tcp", COLUMN_TEXT, "the TCP address it listens on"},
    {"URI", "uri", COLUMN_TEXT, "the NBD URI a client here connects with (nbdinfo URI)"},
    {"ATTACHED", "attached", COLUMN_TEXT, "the /dev node of uzram attach (-: none)"},
};
#define COLUMN_COUNT_ALL (sizeof columns / sizeof columns[0])
/* When a server serves several devices (or one not named like it), SERVER too. */
#define DEFAULT_COLUMNS_SERVERS                                                                    \
    "NAME,SERVER,ALGORITHM,DISKSIZE,DATA,COMPR,TOTAL,COMP-RATIO,CLIENTS,ATTACHED"
#define DEFAULT_COLUMNS "NAME,ALGORITHM,DISKSIZE,DATA,COMPR,TOTAL,COMP-RATIO,CLIENTS,ATTACHED"
#define MAX_COLUMNS 64

/* A column asked for: one of the table, or any field of the reply by its key (a counter
 * this program may not know), shown as a number. */
struct chosen_column {
    const struct column *named; /* NULL: `key` */
    char key[64];
    char header[64];
};

/* "data" or "orig_data_size" or "ZERO_PAGES": names compare without case, '-' as '_'. */
static int fold(char c)
{
    return c == '-' ? '_' : tolower((unsigned char)c);
}

static bool same_name(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (fold(*a) != fold(*b))
            return false;
    return *a == *b;
}

/* Parse --output LIST. A name that is neither a column nor a counter of the library is an
 * error; a counter the servers turn out not to have shows as empty. */
static int choose_columns(const char *list, struct chosen_column *chosen, size_t *count)
{
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", list);
    *count = 0;
    char *save = NULL;
    for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (*count == MAX_COLUMNS) {
            fprintf(stderr, "uzram status: at most %d columns\n", MAX_COLUMNS);
            return -1;
        }
        struct chosen_column *c = &chosen[*count];
        memset(c, 0, sizeof *c);
        for (size_t i = 0; i < COLUMN_COUNT_ALL && c->named == NULL; i++)
            if (same_name(name, columns[i].name))
                c->named = &columns[i];
        if (c->named != NULL) {
            snprintf(c->header, sizeof c->header, "%s", c->named->name);
            (*count)++;
            continue;
        }
        bool known = same_name(name, "read_only") || same_name(name, "use_dedup") ||
                     same_name(name, "disksize") || same_name(name, "clients");
        for (size_t i = 0; i < uzram_stat_count() && !known; i++)
            known = same_name(name, uzram_stat_name(i));
        if (!known || strlen(name) >= sizeof c->key) {
            fprintf(stderr,
                    "uzram status: unknown column '%s'; see 'uzram status --help' for the "
                    "columns and counters\n",
                    name);
            return -1;
        }
        /* The key as the server spells it, the header as zramctl would. */
        for (size_t i = 0; name[i]; i++) {
            c->key[i] = (char)fold(name[i]);
            c->header[i] = c->key[i] == '_' ? '-' : (char)toupper((unsigned char)c->key[i]);
        }
        (*count)++;
    }
    if (*count == 0) {
        fputs("uzram status: --output needs at least one column\n", stderr);
        return -1;
    }
    return 0;
}

/* The text of one cell. */
static void cell_text(const struct device_status *st, const struct chosen_column *c, bool bytes,
                      char *out, size_t size)
{
    const char *key = c->named ? c->named->key : c->key;
    enum column_kind kind = c->named ? c->named->kind : COLUMN_COUNT;
    double ratio;
    if (field_index(st, key) < 0 && kind != COLUMN_RATIO) {
        snprintf(out, size, "-"); /* a counter this server does not have */
        return;
    }
    switch (kind) {
    case COLUMN_TEXT:
        snprintf(out, size, "%s", text_of(st, key)[0] ? text_of(st, key) : "-");
        break;
    case COLUMN_SIZE:
    case COLUMN_PAGES: {
        uint64_t value = number_of(st, key) * (kind == COLUMN_PAGES ? 4096 : 1);
        if (bytes)
            snprintf(out, size, "%" PRIu64, value);
        else
            util_human_size(value, out, size);
        break;
    }
    case COLUMN_COUNT:
        snprintf(out, size, "%" PRIu64, number_of(st, key));
        break;
    case COLUMN_RATIO:
        if (compression_ratio(st, &ratio))
            snprintf(out, size, "%.2f", ratio);
        else
            snprintf(out, size, number_of(st, "orig_data_size") ? "inf" : "-");
        break;
    }
}

/* --raw: like libsmartcols, every byte that would break a space-separated line is \xHH. */
static void print_raw(const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p <= ' ' || *p == '\\' || *p >= 0x7f)
            printf("\\x%02x", *p);
        else
            putchar(*p);
    }
}

static void print_table(const struct device_status *rows, size_t row_count,
                        const struct chosen_column *chosen, size_t column_count, bool bytes,
                        bool raw, bool headings)
{
    int width[MAX_COLUMNS];
    char text[128];
    for (size_t c = 0; c < column_count; c++) {
        width[c] = headings ? (int)strlen(chosen[c].header) : 1;
        for (size_t r = 0; r < row_count; r++) {
            cell_text(&rows[r], &chosen[c], bytes, text, sizeof text);
            if ((int)strlen(text) > width[c])
                width[c] = (int)strlen(text);
        }
    }
    for (size_t r = headings ? 0 : 1; r <= row_count; r++) {
        for (size_t c = 0; c < column_count; c++) {
            if (r == 0)
                snprintf(text, sizeof text, "%s", chosen[c].header);
            else
                cell_text(&rows[r - 1], &chosen[c], bytes, text, sizeof text);
            bool left = chosen[c].named && chosen[c].named->kind == COLUMN_TEXT;
            bool last = c + 1 == column_count;
            if (c > 0)
                putchar(' ');
            if (raw)
                print_raw(text);
            else if (left && last)
                fputs(text, stdout); /* no trailing blanks */
            else
                printf(left ? "%-*s" : "%*s", width[c], text);
        }
        putchar('\n');
    }
}

/* ------------------------------------------------------------------------
 * JSON and Prometheus
 * ---------------------------------------------------------------------- */

static void print_json(const struct device_status *rows, size_t row_count)
{
    printf("[");
    for (size_t r = 0; r < row_count; r++) {
        const struct device_status *st = &rows[r];
        printf("%s\n  {", r ? "," : "");
        for (size_t i = 0; i < st->count; i++) {
            fputs(i ? ", " : "", stdout);
            util_json_string(stdout, st->fields[i].key);
            fputs(": ", stdout);
            if (!st->fields[i].is_number)
                util_json_string(stdout, st->fields[i].text);
            else
                printf("%" PRIu64, st->fields[i].number);
        }
        double ratio;
        if (compression_ratio(st, &ratio))
            printf(", \"comp_ratio\": %.3f}", ratio);
        else
            printf(", \"comp_ratio\": null}");
    }
    printf("%s]\n", row_count ? "\n" : "");
}

/* A label value of the Prometheus text format: backslash, quote and newline escaped. */
static void print_label(const char *text)
{
    for (; *text; text++) {
        if (*text == '\\' || *text == '"')
            printf("\\%c", *text);
        else if (*text == '\n')
            fputs("\\n", stdout);
        else
            putchar(*text);
    }
}

/* A metric name from a key: [a-z_][a-z0-9_]*, as the server's keys are. */
static bool metric_name_ok(const char *key)
{
    if (!(islower((unsigned char)key[0]) || key[0] == '_'))
        return false;
    for (; *key; key++)
        if (!(islower((unsigned char)*key) || isdigit((unsigned char)*key) || *key == '_'))
            return false;
    return true;
}

/* One metric family for every device: HELP, TYPE, then a sample per device that has it. */
static void prometheus_family(const struct device_status *rows, size_t row_count, const char *key,
                              const char *help, bool events)
{
    bool any = false;
    if (!metric_name_ok(key))
        return;
    for (size_t r = 0; r < row_count && !any; r++) {
        int i = field_index(&rows[r], key);
        any = i >= 0 && rows[r].fields[i].is_number;
    }
    if (!any)
        return;
    const char *suffix = events ? "_total" : "";
    printf("# HELP uzram_%s%s %s\n", key, suffix, help);
    printf("# TYPE uzram_%s%s %s\n", key, suffix, events ? "counter" : "gauge");
    for (size_t r = 0; r < row_count; r++) {
        int i = field_index(&rows[r], key);
        if (i < 0 || !rows[r].fields[i].is_number)
            continue;
        printf("uzram_%s%s{device=\"", key, suffix);
        print_label(text_of(&rows[r], "name"));
        printf("\"} %" PRIu64 "\n", rows[r].fields[i].number);
    }
}

/* The Prometheus text exposition format (version 0.0.4), as node_exporter's textfile
 * collector reads it: every field of every device, counters by the library's own list of
 * descriptions and kinds; a counter this program does not know keeps the server's name. */
static void print_prometheus(const struct device_status *rows, size_t row_count)
{
    printf("# HELP uzram_info The settings of a device, as labels; the value is 1.\n"
           "# TYPE uzram_info gauge\n");
    for (size_t r = 0; r < row_count; r++) {
        printf("uzram_info{device=\"");
        print_label(text_of(&rows[r], "name"));
        printf("\",server=\"");
        print_label(text_of(&rows[r], "server"));
        printf("\",algorithm=\"");
        print_label(text_of(&rows[r], "algorithm"));
        printf("\"} 1\n");
    }
    static const struct {
        const char *key, *help;
    } identity[] = {
        {"disksize", "bytes of the disk"},
        {"read_only", "1 when the device is exported read-only"},
        {"use_dedup", "1 when identical pages are stored once"},
        {"clients", "NBD clients connected"},
        {"fuse_uring_requests",
         "requests the FUSE file of attach --via loop served over io_uring (0: /dev/fuse)"},
        {"swap", "1 when the server runs with serve --swap"},
        {"io_flusher", "1 when the server is an I/O flusher (PR_GET_IO_FLUSHER)"},
        {"mem_locked", "bytes of the server's memory locked (VmLck)"},
        {"mem_resident", "bytes of the server's memory resident (VmRSS)"},
        {"heap_size", "bytes of the server's heap (glibc's main arena)"},
        {"heap_used", "bytes of the server's heap in use"},
        {"heap_mapped", "bytes of the server's allocations mapped on their own"},
        {"server_mem_limit", "bytes all the devices of the server may use together (0: none)"},
        {"server_mem_used", "bytes of pool memory all the devices of the server use now"},
        {"server_mem_used_max", "peak of server_mem_used"},
    };
    for (size_t i = 0; i < sizeof identity / sizeof identity[0]; i++)
        prometheus_family(rows, row_count, identity[i].key, identity[i].help, false);
    for (size_t i = 0; i < uzram_stat_count(); i++)
        prometheus_family(rows, row_count, uzram_stat_name(i), uzram_stat_help(i),
                          uzram_stat_kind(i) == UZRAM_STAT_EVENTS);
    /* Fields of a newer server, in the order of the first device that has them. */
    for (size_t r = 0; r < row_count; r++) {
        for (size_t f = 0; f < rows[r].count; f++) {
            const char *key = rows[r].fields[f].key;
            bool shown = !rows[r].fields[f].is_number;
            for (size_t i = 0; i < sizeof identity / sizeof identity[0] && !shown; i++)
                shown = strcmp(key, identity[i].key) == 0;
            for (size_t i = 0; i < uzram_stat_count() && !shown; i++)
                shown = strcmp(key, uzram_stat_name(i)) == 0;
            for (size_t earlier = 0; earlier < r && !shown; earlier++)
                shown = field_index(&rows[earlier], key) >= 0;
            if (!shown)
                prometheus_family(rows, row_count, key, "(a field this uzram does not know)",
                                  false);
        }
    }
}

/* ------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------- */

/* The rows of `uzram status`, one per device, grown as servers answer. */
struct row_list {
    struct device_status *rows;
    size_t count, capacity;
};

/* Parse a "stats" reply into a new row; frees `body`. */
static int add_row(struct row_list *list, char *body, char *message, size_t message_size)
{
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 8;
        struct device_status *bigger = realloc(list->rows, capacity * sizeof *bigger);
        if (bigger == NULL) {
            free(body);
            snprintf(message, message_size, "out of memory");
            return -ENOMEM;
        }
        list->rows = bigger;
        list->capacity = capacity;
    }
    parse_status(body, &list->rows[list->count++]);
    free(body);
    return 0;
}

/* Every device of the server of `ctl`, the default export first. Failures are told only
 * when `loud` (the user named that server); returns 0 or 1. */
static int add_server_rows(struct row_list *list, const char *ctl, bool loud)
{
    char **names, message[PATH_MAX + 512], *body;
    size_t count;
    int rc = control_devices(ctl, &names, &count, message, sizeof message);
    /* A stale socket is passed over quietly; one that is not trusted never is. */
    if (rc < 0 && (loud || rc == -EPERM))
        fprintf(stderr, "uzram: %s\n", message);
    if (rc < 0)
        return loud || rc == -EPERM ? 1 : 0;
    int status = 0;
    for (size_t i = 0; i < count; i++) {
        struct control_target target;
        snprintf(target.ctl, sizeof target.ctl, "%s", ctl);
        snprintf(target.device, sizeof target.device, "%s", names[i]);
        rc = control_ask(&target, "stats", &body, message, sizeof message);
        if (rc == -ENOENT)
            continue; /* hot-removed meanwhile */
        if (rc == 0)
            rc = add_row(list, body, message, sizeof message);
        if (rc < 0 && loud) {
            fprintf(stderr, "uzram: %s: %s\n", names[i], message);
            status = 1;
        }
    }
    control_free_names(names, count);
    return status;
}

/* Does some device belong to a server of several devices, or one named otherwise? Then the
 * table shows which server each device is on. */
static bool several_servers(const struct device_status *rows, size_t row_count)
{
    for (size_t r = 0; r < row_count; r++)
        if (field_index(&rows[r], "server") >= 0 &&
            strcmp(text_of(&rows[r], "server"), text_of(&rows[r], "name")) != 0)
            return true;
    return false;
}

/* --help after the options: the columns, and the counters that are columns too. */
static void status_columns_help(FILE *out)
{
    fputs("\nColumns:\n", out);
    for (size_t i = 0; i < COLUMN_COUNT_ALL; i++)
        fprintf(out, "  %-11s %s\n", columns[i].name, columns[i].help);
    fputs("Any counter (see 'uzram attr NAME stat_json') is a column too, by its name:\n"
          "  ",
          out);
    size_t line = 2;
    for (size_t i = 0; i < uzram_stat_count(); i++) {
        const char *name = uzram_stat_name(i);
        if (line + strlen(name) + 2 > 80) {
            fputs("\n  ", out);
            line = 2;
        }
        line += (size_t)fprintf(out, "%s%s", name, i + 1 < uzram_stat_count() ? ", " : "\n");
    }
    fputs("COMP-RATIO counts every stored page at 4 KiB, same-filled ones too, though they\n"
          "use no memory: 'inf' when only such pages are stored, '-' when nothing is.\n",
          out);
}

/* Rows for every device of every server (one NAME.ctl each) in `dir`. 0, or 1 after saying
 * why (a directory another user could write, one that cannot be read). */
static int add_directory_rows(struct row_list *list, const char *dir)
{
    char **servers;
    size_t count;
    int rc = control_servers(dir, &servers, &count), status = 0;
    char why[PATH_MAX + 256];
    if (rc == -EPERM && util_trusted_dir(dir, why, sizeof why) < 0) {
        fprintf(stderr, "uzram: %s\n", why);
        return 1;
    } else if (rc < 0) {
        /* No directory: no device has run. Any other failure is not "none". */
        fprintf(stderr,
                "uzram: cannot list the devices in %s: %s (another user's runtime "
                "directory? -u DIR names another, -u SOCKET a server)\n",
                dir, strerror(-rc));
        return 1;
    }
    /* A stale socket from a killed server is only worth a word when the user asked for it. */
    for (size_t i = 0; i < count; i++)
        if (add_server_rows(list, servers[i], false) != 0)
            status = 1;
    control_free_names(servers, count);
    return status;
}

enum { OPT_OUTPUT_ALL = CLI_LONG_ONLY, OPT_RAW, OPT_PROMETHEUS };

/* What `uzram status` was asked for: its options, then the NAMEs. */
struct status_args {
    bool json, prometheus, bytes, no_headings, raw;
    const char *output;
    char all[512]; /* --output-all's column list */
    struct chosen_column chosen[MAX_COLUMNS];
    size_t column_count;
};

/* --output-all: every column of the table. */
static int output_all(void *where, char *arg)
{
    struct status_args *args = where;
    (void)arg;
    args->all[0] = '\0';
    for (size_t i = 0; i < COLUMN_COUNT_ALL; i++)
        snprintf(args->all + strlen(args->all), sizeof args->all - strlen(args->all), "%s%s",
                 i ? "," : "", columns[i].name);
    args->output = args->all;
    return 0;
}

static const struct cli_option status_options[] = {
    {"output", 'o', required_argument, "LIST",
     "columns to show, comma-separated (default\n" DEFAULT_COLUMNS ")", 0,
     CLI_TEXT(struct status_args, output)},
    {"output-all", OPT_OUTPUT_ALL, no_argument, NULL, "every column of the table below", 0,
     output_all, 0},
    {"bytes", 'b', no_argument, NULL, "sizes in bytes, not in K, M, G", 0,
     CLI_TRUE(struct status_args, bytes)},
    {"noheadings", 'n', no_argument, NULL, "no header line", 0,
     CLI_TRUE(struct status_args, no_headings)},
    {"raw", OPT_RAW, no_argument, NULL, "no alignment: one space between values", 0,
     CLI_TRUE(struct status_args, raw)},
    {"json", 'j', no_argument, NULL, "a JSON array of objects with every field, raw numbers", 0,
     CLI_TRUE(struct status_args, json)},
    {"prometheus", OPT_PROMETHEUS, no_argument, NULL,
     "Prometheus text format with every counter (for\n"
     "node_exporter's textfile collector)",
     0, CLI_TRUE(struct status_args, prometheus)},
};

static int status_run(int argc, char **argv);

const struct cli_command status_command = {
    .name = "status",
    .summary = "show running devices and their statistics, like zramctl",
    .synopsis = "[OPTION]... [NAME]...",
    .description =
        "Show the devices served by `uzram serve`, like zramctl shows zram's: every device\n"
        "of every server, or the NAMEs (wherever they are served).\n",
    .options = status_options,
    .option_count = sizeof status_options / sizeof status_options[0],
    .common = CLI_RUNTIME_DIR,
    .runtime_dir_note = "(-u SOCKET: that server's devices alone)",
    .max_operands = INT_MAX,
    .more_help = status_columns_help,
    .run = status_run,
};

/* The options, and how they go together. Returns CLI_GO_ON, or the exit status to stop with. */
static int status_options_read(int argc, char **argv, struct status_args *args,
                               struct cli_args *given)
{
    int status = cli_parse(&status_command, argc, argv, args, given);
    if (status != CLI_GO_ON)
        return status;
    /* JSON and Prometheus carry every field as a raw number: table options do not apply. */
    if ((args->json || args->prometheus) &&
        (args->json == args->prometheus || args->output || args->raw || args->no_headings)) {
        fputs("uzram status: --json and --prometheus show every field, in bytes, without a "
              "table: drop --output, --raw, --noheadings (or one of the two)\n",
              stderr);
        return 2;
    }
    if (!args->json && !args->prometheus &&
        choose_columns(args->output ? args->output : DEFAULT_COLUMNS, args->chosen,
                       &args->column_count) < 0)
        return 2;
    return CLI_GO_ON;
}

/* The rows: every device of the server -u led to, the devices named (argv[first]...), or
 * every device of every server (one NAME.ctl per server) of the runtime directory. Returns
 * the exit status so far. */
static int collect_rows(const struct status_args *args, const struct control_place *place,
                        int first, int argc, char **argv, struct row_list *list)
{
    int status = 0;
    if (place->ctl[0])
        return add_server_rows(list, place->ctl, true);
    if (first < argc) {
        for (int i = first; i < argc; i++) {
            struct control_target target;
            char message[PATH_MAX + 512], *body;
            int rc = control_locate_in(place, argv[i], &target, message, sizeof message);
            if (rc == 0)
                rc = control_ask(&target, "stats", &body, message, sizeof message);
            if (rc == 0)
                rc = add_row(list, body, message, sizeof message);
            if (rc < 0) {
                fprintf(stderr, "uzram: %s: %s\n", argv[i], message);
                status = 1;
            }
        }
        return status;
    }
    /* Root under sudo also lists the servers of the user who ran it. */
    char user_dir[PATH_MAX];
    bool sudo = place->sudo_too && util_sudo_runtime_dir(user_dir, sizeof user_dir) == 0;
    status = add_directory_rows(list, place->dir);
    if (sudo && add_directory_rows(list, user_dir) != 0)
        status = 1;
    /* Like zramctl, no device is no error; but say where nothing was found. */
    if (status == 0 && list->count == 0 && !args->json && !args->prometheus)
        fprintf(stderr, "uzram: no device is running (no server in %s%s%s)\n", place->dir,
                sudo ? " nor in " : "", sudo ? user_dir : "");
    return status;
}

static int status_run(int argc, char **argv)
{
    struct status_args args = {0};
    struct cli_args given;
    int status = status_options_read(argc, argv, &args, &given);
    if (status != CLI_GO_ON)
        return status;
    struct control_place place;
    char place_message[PATH_MAX + 256];
    if (control_place(given.runtime_dir, &place, place_message, sizeof place_message) < 0) {
        fprintf(stderr, "uzram: %s\n", place_message);
        return 1;
    }
    if (place.ctl[0] && given.count > 0) {
        fprintf(stderr, "uzram status: -u %s names one server; drop the NAMEs\n",
                given.runtime_dir);
        return 2;
    }
    struct row_list list = {0};
    status = collect_rows(&args, &place, given.first, argc, argv, &list);
    struct device_status *rows = list.rows;
    size_t row_count = list.count;
    if (!args.json && !args.prometheus && args.output == NULL && several_servers(rows, row_count) &&
        choose_columns(DEFAULT_COLUMNS_SERVERS, args.chosen, &args.column_count) < 0)
        return 2;

    if (args.json)
        print_json(rows, row_count);
    else if (args.prometheus)
        print_prometheus(rows, row_count);
    else if (row_count > 0)
        print_table(rows, row_count, args.chosen, args.column_count, args.bytes, args.raw,
                    !args.no_headings);
    free(rows);
    return status;
}
