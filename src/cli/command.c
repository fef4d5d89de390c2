/* command.c - the one framework of the uzram program's commands (command.h): getopt_long's
 * tables made from a command's rows, the one loop that reads every command line, -h/--help,
 * -u/--runtime-dir and -S/--server read in one place, the lines a bad command line gets, and
 * --help printed from the rows in one format. */
#include "cli/command.h"

#include <stdarg.h>
#include <string.h>

/* The rows every command has, or those that find a server ask for (struct cli_command's
 * `common`). Their help is every command's. */
static const struct cli_option server_row = {
    "server",
    'S',
    required_argument,
    "SERVER",
    "the server whose control socket is SERVER.ctl in the\n"
    "runtime directory (needed when several run)",
    0,
    CLI_BY_COMMAND};
static const struct cli_option runtime_dir_row = {
    "runtime-dir",
    'u',
    required_argument,
    "PLACE",
    "where to look for servers: a directory of NAME.ctl\n"
    "sockets (default: the runtime directory, see uzram(1)),\n"
    "or one server's NBD socket (serve --unix PATH) or its\n"
    "control socket (NAME.ctl)",
    0,
    CLI_BY_COMMAND};
static const struct cli_option help_row = {"help",           'h', no_argument,   NULL,
                                           "show this help", 0,   CLI_BY_COMMAND};

int cli_set_true(void *where, char *arg)
{
    (void)arg;
    *(bool *)where = true;
    return 0;
}

int cli_set_false(void *where, char *arg)
{
    (void)arg;
    *(bool *)where = false;
    return 0;
}

int cli_set_text(void *where, char *arg)
{
    *(const char **)where = arg;
    return 0;
}

/* ------------------------------------------------------------------------
 * The command line
 * ---------------------------------------------------------------------- */

/* getopt_long's tables as they are filled. */
struct tables {
    struct option *long_options;
    char *short_options;
    size_t long_count, short_length;
};

static void add_row(struct tables *t, const struct cli_option *o)
{
    t->long_options[t->long_count++] = (struct option){o->name, o->has_arg, NULL, o->code};
    /* A flag's value (optional_argument) goes only with its long form (--dedup=no): -dq is
     * two flags. */
    if (o->code < CLI_LONG_ONLY) {
        t->short_options[t->short_length++] = (char)o->code;
        if (o->has_arg == required_argument)
            t->short_options[t->short_length++] = ':';
    }
}

static void start_tables(struct tables *t, const char *prefix)
{
    t->long_count = 0;
    t->short_length = strlen(prefix);
    memcpy(t->short_options, prefix, t->short_length);
}

static void end_tables(struct tables *t)
{
    t->long_options[t->long_count] = (struct option){NULL, 0, NULL, 0};
    t->short_options[t->short_length] = '\0';
}

void cli_getopt_tables(const struct cli_option *options, size_t count,
                       bool (*keep)(const struct cli_option *), const char *prefix,
                       struct option *long_options, char *short_options)
{
    struct tables t = {long_options, short_options, 0, 0};
    start_tables(&t, prefix);
    for (size_t i = 0; i < count; i++)
        if (options[i].name != NULL && (keep == NULL || keep(&options[i])))
            add_row(&t, &options[i]);
    end_tables(&t);
}

/* The rows of -S, -u and -h that `command` has, into `rows` (room for 3); how many. */
static size_t common_rows(const struct cli_command *command, const struct cli_option **rows)
{
    size_t count = 0;
    if (command->common & CLI_SERVER)
        rows[count++] = &server_row;
    if (command->common & CLI_RUNTIME_DIR)
        rows[count++] = &runtime_dir_row;
    rows[count++] = &help_row;
    return count;
}

/* The row of getopt's `code`, or NULL (getopt's '?': it said what is wrong). */
static const struct cli_option *row_of(const struct cli_command *command, int code)
{
    const struct cli_option *common[3];
    size_t count = common_rows(command, common);
    for (size_t i = 0; i < count; i++)
        if (common[i]->code == code)
            return common[i];
    for (size_t i = 0; i < command->option_count; i++)
        if (command->options[i].name != NULL && command->options[i].code == code)
            return &command->options[i];
    return NULL;
}

int cli_try_help(const struct cli_command *command)
{
    fprintf(stderr, "Try 'uzram %s --help' for more information.\n", command->name);
    return 2;
}

int cli_misused(const struct cli_command *command, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "uzram %s: ", command->name);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    return cli_try_help(command);
}

/* One option met on the command line: -h, -S, -u, or a row applied to `context`. Returns
 * CLI_GO_ON or the exit status. */
static int take_option(const struct cli_command *command, const struct cli_option *row, char *arg,
                       void *context, struct cli_args *args)
{
    if (row == NULL)
        return cli_try_help(command);
    if (row == &help_row) {
        cli_help(command, stdout);
        return 0;
    }
    if (row == &server_row || row == &runtime_dir_row) {
        *(row == &server_row ? &args->server : &args->runtime_dir) = arg;
        return CLI_GO_ON;
    }
    if (command->check != NULL && command->check(context, row) != 0)
        return 2;
    int rc = row->set != NULL ? row->set((char *)context + row->offset, arg)
                              : command->apply(context, row, arg);
    return rc != 0 ? 2 : CLI_GO_ON;
}

int cli_parse(const struct cli_command *command, int argc, char **argv, void *context,
              struct cli_args *args)
{
    size_t rows = command->option_count + 3;
    struct option long_options[rows + 1];
    char short_options[3 * rows + 2];
    struct tables t = {long_options, short_options, 0, 0};
    static const char *const prefixes[] = {
        [CLI_PERMUTE] = "", [CLI_OPTIONS_FIRST] = "+", [CLI_IN_ORDER] = "-"};
    start_tables(&t, prefixes[command->order]);
    for (size_t i = 0; i < command->option_count; i++)
        if (command->options[i].name != NULL)
            add_row(&t, &command->options[i]);
    const struct cli_option *common[3];
    size_t common_count = common_rows(command, common);
    for (size_t i = 0; i < common_count; i++)
        add_row(&t, common[i]);
    end_tables(&t);

    *args = (struct cli_args){0};
    /* 0, not 1: getopt starts afresh, its ordering ('+', '-') read again, even when this
     * process has parsed a command line before (zram-generator --serve runs serve's). */
    optind = 0;
    opterr = 1;
    int code, status;
    while ((code = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
        if (code == 1) { /* CLI_IN_ORDER: an operand, in its place */
            if (command->operand(context, optarg) != 0)
                return 2;
            continue;
        }
        status = take_option(command, row_of(command, code), optarg, context, args);
        if (status != CLI_GO_ON)
            return status;
    }
    if (command->order == CLI_IN_ORDER) { /* what follows "--" */
        for (; optind < argc; optind++)
            if (command->operand(context, argv[optind]) != 0)
                return 2;
        args->first = optind;
        return CLI_GO_ON;
    }
    args->first = optind;
    args->count = argc - optind;
    if (command->max_operands == 0 && args->count > 0)
        return cli_misused(command, "unexpected argument '%s'", argv[optind]);
    if (args->count < command->min_operands || args->count > command->max_operands)
        return cli_misused(command, "expected %s", command->operands);
    return CLI_GO_ON;
}

/* ------------------------------------------------------------------------
 * --help
 * ---------------------------------------------------------------------- */

void cli_print_option(FILE *out, const struct cli_option *o, bool first_line)
{
    if (o->name == NULL && o->arg == NULL) {
        fprintf(out, "\n%s\n", o->help);
        return;
    }
    char left[128];
    bool letter = o->code < CLI_LONG_ONLY;
    if (o->name == NULL)
        snprintf(left, sizeof left, "  %s", o->arg);
    else
        snprintf(left, sizeof left, "  %c%c%c --%s%s%s", letter ? '-' : ' ', letter ? o->code : ' ',
                 letter ? ',' : ' ', o->name, o->arg && strncmp(o->arg, "[=", 2) != 0 ? " " : "",
                 o->arg ? o->arg : "");
    /* The description from CLI_HELP_COLUMN, or two blanks after a longer option. */
    fprintf(out, "%-*s%s", CLI_HELP_COLUMN - 1, left,
            strlen(left) >= CLI_HELP_COLUMN - 1 ? " " : "");
    for (const char *line = o->help; line != NULL;) {
        const char *end = strchr(line, '\n');
        fprintf(out, " %.*s", end ? (int)(end - line) : (int)strlen(line), line);
        line = end ? end + 1 : NULL;
        if (first_line) {
            fputs(line != NULL ? " ...\n" : "\n", out);
            return;
        }
        fputc('\n', out);
        if (line != NULL)
            fprintf(out, "%*s", CLI_HELP_COLUMN - 1, "");
    }
}

void cli_help(const struct cli_command *command, FILE *out)
{
    bool first = true;
    for (const char *form = command->synopsis; *form != '\0'; first = false) {
        size_t length = strcspn(form, "\n");
        fprintf(out, "%s uzram %s %.*s\n", first ? "Usage:" : "      ", command->name, (int)length,
                form);
        form += length + (form[length] == '\n');
    }
    fputs(command->description, out);
    const struct cli_option *o = command->options;
    if (command->option_count == 0 || o[0].name != NULL || o[0].arg != NULL)
        fputc('\n', out); /* a heading brings its own blank line */
    for (size_t i = 0; i < command->option_count; i++)
        if (o[i].help != NULL)
            cli_print_option(out, &o[i], false);
    const struct cli_option *common[3];
    size_t count = common_rows(command, common);
    for (size_t i = 0; i < count; i++) {
        cli_print_option(out, common[i], false);
        if (common[i] == &runtime_dir_row && command->runtime_dir_note != NULL)
            fprintf(out, "%*s%s\n", CLI_HELP_COLUMN, "", command->runtime_dir_note);
    }
    if (command->more_help != NULL)
        command->more_help(out);
    if (command->epilog != NULL)
        fputs(command->epilog, out);
}
