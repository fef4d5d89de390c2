/* test_command.c - unit tests of the command framework (src/cli/command.c) on a command of
 * its own: every kind of row sets what it says, -u and -S land in cli_args, operands are
 * counted, a flag's short letter takes no value, the three orders of options and operands,
 * --help's one format, and the lines and exit status of every kind of bad command line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/command.h"
#include "test_util.h"

/* What the demo command's options set. */
struct demo {
    bool flag, loud;
    const char *name;
    long level;
    char log[256]; /* the command's own rows and operands, in the order met */
};

static int set_level(void *where, char *arg)
{
    struct demo *demo = where;
    char *end;
    demo->level = strtol(arg, &end, 10);
    if (end == arg || *end != '\0') {
        fprintf(stderr, "bad level '%s'\n", arg);
        return -1;
    }
    return 0;
}

static int log_option(void *context, const struct cli_option *option, char *arg)
{
    struct demo *demo = context;
    size_t used = strlen(demo->log);
    snprintf(demo->log + used, sizeof demo->log - used, "%s%s%s%s,", option->name, arg ? "=" : "",
             arg ? arg : "", option->tags == 2 ? "!" : "");
    return 0;
}

static int log_operand(void *context, char *arg)
{
    struct demo *demo = context;
    size_t used = strlen(demo->log);
    snprintf(demo->log + used, sizeof demo->log - used, "op:%s,", arg);
    return 0;
}

static int refuse_tag_2(void *context, const struct cli_option *option)
{
    (void)context;
    if (option->tags != 2)
        return 0;
    fprintf(stderr, "--%s is not for now\n", option->name);
    return -1;
}

static void more(FILE *out)
{
    fputs("\nMore.\n", out);
}

static const struct cli_option demo_rows[] = {
    CLI_HEADING("Settings:", 0),
    {"flag", 'f', no_argument, NULL, "a flag", 0, CLI_TRUE(struct demo, flag)},
    {"name", 'n', required_argument, "NAME", "a name,\nover two lines", 0,
     CLI_TEXT(struct demo, name)},
    {"level", CLI_LONG_ONLY, required_argument, "N", "a number", 0, CLI_SET(set_level)},
    {"toggle", 't', optional_argument, "[=WHEN]", "a flag that may say when", 0, CLI_BY_COMMAND},
    {"quiet", 'q', no_argument, NULL, "not loud", 0, CLI_FALSE(struct demo, loud)},
    {"old-name", 'o', required_argument, NULL, NULL, 0, CLI_TEXT(struct demo, name)},
    CLI_HEADING("Other:", 0),
    CLI_ENTRY("(nothing)", "what it does without options"),
    {"a-very-long-option-name", CLI_LONG_ONLY + 1, no_argument, NULL, "later", 2, CLI_BY_COMMAND},
};

static const struct cli_command demo_command = {
    .name = "demo",
    .summary = "a command for the tests",
    .synopsis = "[OPTION]... ONE [TWO]\n--other",
    .description = "Does nothing.\n",
    .options = demo_rows,
    .option_count = sizeof demo_rows / sizeof demo_rows[0],
    .common = CLI_RUNTIME_DIR | CLI_SERVER,
    .runtime_dir_note = "(a note)",
    .min_operands = 1,
    .max_operands = 2,
    .operands = "ONE [TWO]",
    .apply = log_option,
    .check = refuse_tag_2,
    .more_help = more,
    .epilog = "\nExample:\n  uzram demo x\n",
};

static const char demo_help[] =
    "Usage: uzram demo [OPTION]... ONE [TWO]\n"
    "       uzram demo --other\n"
    "Does nothing.\n"
    "\n"
    "Settings:\n"
    "  -f, --flag              a flag\n"
    "  -n, --name NAME         a name,\n"
    "                          over two lines\n"
    "      --level N           a number\n"
    "  -t, --toggle[=WHEN]     a flag that may say when\n"
    "  -q, --quiet             not loud\n"
    "\n"
    "Other:\n"
    "  (nothing)               what it does without options\n"
    "      --a-very-long-option-name  later\n"
    "  -S, --server SERVER     the server whose control socket is SERVER.ctl in the\n"
    "                          runtime directory (needed when several run)\n"
    "  -u, --runtime-dir PLACE  where to look for servers: a directory of NAME.ctl\n"
    "                          sockets (default: the runtime directory, see uzram(1)),\n"
    "                          or one server's NBD socket (serve --unix PATH) or its\n"
    "                          control socket (NAME.ctl)\n"
    "                          (a note)\n"
    "  -h, --help              show this help\n"
    "\n"
    "More.\n"
    "\n"
    "Example:\n"
    "  uzram demo x\n";

/* cli_parse() of `words` (argv[0] first), with what it wrote to stdout and stderr. */
struct parsed {
    int status;
    struct cli_args args;
    char *argv[32];
    char out[4096], err[4096];
};

static void slurp(FILE *file, char *text, size_t size)
{
    rewind(file);
    size_t n = fread(text, 1, size - 1, file);
    text[n] = '\0';
    fclose(file);
}

static void parse(const struct cli_command *command, void *context, struct parsed *p, ...)
{
    static char words[32][64];
    va_list list;
    va_start(list, p);
    int argc = 0;
    for (const char *word; (word = va_arg(list, const char *)) != NULL; argc++) {
        snprintf(words[argc], sizeof words[argc], "%s", word);
        p->argv[argc] = words[argc];
    }
    va_end(list);
    p->argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    FILE *out = tmpfile(), *err = tmpfile();
    assert_non_null(out);
    assert_non_null(err);
    int saved_out = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
    dup2(fileno(out), STDOUT_FILENO);
    dup2(fileno(err), STDERR_FILENO);
    p->status = cli_parse(command, argc, p->argv, context, &p->args);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    close(saved_out);
    close(saved_err);
    slurp(out, p->out, sizeof p->out);
    slurp(err, p->err, sizeof p->err);
}

static void test_rows_set_what_they_say(void **state)
{
    (void)state;
    struct demo demo = {.loud = true};
    struct parsed p;
    parse(&demo_command, &demo, &p, "uzram demo", "-f", "--name", "x", "one", "-u", "/run/x",
          "--level", "7", "-S", "srv", "--toggle=later", "-q", "two", "--toggle", NULL);
    assert_int_equal(p.status, CLI_GO_ON);
    assert_string_equal(p.err, "");
    assert_true(demo.flag);
    assert_false(demo.loud);
    assert_string_equal(demo.name, "x");
    assert_int_equal(demo.level, 7);
    assert_string_equal(demo.log, "toggle=later,toggle,");
    assert_string_equal(p.args.runtime_dir, "/run/x");
    assert_string_equal(p.args.server, "srv");
    /* The operands, moved after the options (getopt's default order). */
    assert_int_equal(p.args.count, 2);
    assert_string_equal(p.argv[p.args.first], "one");
    assert_string_equal(p.argv[p.args.first + 1], "two");

    /* A hidden alias sets the same; nothing given leaves the rest alone. */
    struct demo other = {.loud = true};
    parse(&demo_command, &other, &p, "uzram demo", "-o", "y", "one", NULL);
    assert_int_equal(p.status, CLI_GO_ON);
    assert_string_equal(other.name, "y");
    assert_false(other.flag);
    assert_true(other.loud);
    assert_null(p.args.runtime_dir);
    assert_null(p.args.server);
}

/* A flag's value goes only with its long form: -tq is -t and -q, not -t with "q". */
static void test_short_flag_takes_no_value(void **state)
{
    (void)state;
    struct demo demo = {.loud = true};
    struct parsed p;
    parse(&demo_command, &demo, &p, "uzram demo", "-tq", "one", NULL);
    assert_int_equal(p.status, CLI_GO_ON);
    assert_string_equal(demo.log, "toggle,");
    assert_false(demo.loud);
}

static void test_help_in_one_format(void **state)
{
    (void)state;
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    cli_help(&demo_command, out);
    fclose(out);
    assert_string_equal(text, demo_help);
    free(text);

    /* --help and -h print it on stdout, exit 0, and stop there: nothing after is read. */
    struct demo demo = {0};
    struct parsed p;
    parse(&demo_command, &demo, &p, "uzram demo", "--help", "-f", NULL);
    assert_int_equal(p.status, 0);
    assert_string_equal(p.out, demo_help);
    assert_string_equal(p.err, "");
    assert_false(demo.flag);
    parse(&demo_command, &demo, &p, "uzram demo", "-h", NULL);
    assert_int_equal(p.status, 0);
    assert_string_equal(p.out, demo_help);

    /* One row's first line, as hot-add lists serve's device options. */
    out = open_memstream(&text, &size);
    cli_print_option(out, &demo_rows[2], true);
    cli_print_option(out, &demo_rows[1], true);
    fclose(out);
    assert_string_equal(text, "  -n, --name NAME         a name, ...\n"
                              "  -f, --flag              a flag\n");
    free(text);
}

static void test_bad_command_lines(void **state)
{
    (void)state;
    struct demo demo = {0};
    struct parsed p;
    parse(&demo_command, &demo, &p, "uzram demo", "--nope", "one", NULL);
    assert_int_equal(p.status, 2);
    assert_string_equal(p.err, "uzram demo: unrecognized option '--nope'\n"
                               "Try 'uzram demo --help' for more information.\n");
    assert_string_equal(p.out, "");
    parse(&demo_command, &demo, &p, "uzram demo", "one", "-n", NULL);
    assert_int_equal(p.status, 2);
    assert_string_equal(p.err, "uzram demo: option requires an argument -- 'n'\n"
                               "Try 'uzram demo --help' for more information.\n");
    parse(&demo_command, &demo, &p, "uzram demo", "-f", NULL);
    assert_int_equal(p.status, 2);
    assert_string_equal(p.err, "uzram demo: expected ONE [TWO]\n"
                               "Try 'uzram demo --help' for more information.\n");
    parse(&demo_command, &demo, &p, "uzram demo", "a", "b", "c", NULL);
    assert_int_equal(p.status, 2);
    assert_string_equal(p.err, "uzram demo: expected ONE [TWO]\n"
                               "Try 'uzram demo --help' for more information.\n");
    /* A setter's or the check's own line says what is wrong: nothing is added. */
    parse(&demo_command, &demo, &p, "uzram demo", "--level", "x", "one", NULL);
    assert_int_equal(p.status, 2);
    assert_string_equal(p.err, "bad level 'x'\n");
    demo.log[0] = '\0';
    parse(&demo_command, &demo, &p, "uzram demo", "--a-very-long-option-name", "one", NULL);
    assert_int_equal(p.status, 2);
    assert_string_equal(p.err, "--a-very-long-option-name is not for now\n");
    assert_string_equal(demo.log, ""); /* refused before it was applied */

    /* A command without operands names the first one. */
    struct cli_command none = demo_command;
    none.max_operands = 0;
    none.min_operands = 0;
    parse(&none, &demo, &p, "uzram demo", "-f", "stray", NULL);
    assert_int_equal(p.status, 2);
    assert_string_equal(p.err, "uzram demo: unexpected argument 'stray'\n"
                               "Try 'uzram demo --help' for more information.\n");
}

/* CLI_OPTIONS_FIRST: what follows the first operand is the command's (a VALUE starting with
 * '-'); and a command read after it in the same process is read afresh, in its own order. */
static void test_options_first_then_afresh(void **state)
{
    (void)state;
    struct cli_command first = demo_command;
    first.order = CLI_OPTIONS_FIRST;
    struct demo demo = {0};
    struct parsed p;
    parse(&first, &demo, &p, "uzram demo", "-q", "one", "-f", NULL);
    assert_int_equal(p.status, CLI_GO_ON);
    assert_false(demo.flag);
    assert_int_equal(p.args.count, 2);
    assert_string_equal(p.argv[p.args.first + 1], "-f");

    parse(&demo_command, &demo, &p, "uzram demo", "one", "-f", NULL);
    assert_int_equal(p.status, CLI_GO_ON);
    assert_true(demo.flag);
    assert_int_equal(p.args.count, 1);
}

/* CLI_IN_ORDER: each operand in its place among the options, and those after "--". */
static void test_operands_in_order(void **state)
{
    (void)state;
    struct cli_command in_order = demo_command;
    in_order.order = CLI_IN_ORDER;
    in_order.operand = log_operand;
    in_order.min_operands = 0;
    struct demo demo = {0};
    struct parsed p;
    parse(&in_order, &demo, &p, "uzram demo", "a", "--toggle", "b", "--", "-c", NULL);
    assert_int_equal(p.status, CLI_GO_ON);
    assert_string_equal(demo.log, "op:a,toggle,op:b,op:-c,");
}

static void test_getopt_tables(void **state)
{
    (void)state;
    struct option long_options[sizeof demo_rows / sizeof demo_rows[0] + 1];
    char short_options[3 * (sizeof demo_rows / sizeof demo_rows[0]) + 2];
    cli_getopt_tables(demo_rows, sizeof demo_rows / sizeof demo_rows[0], NULL, "+", long_options,
                      short_options);
    assert_string_equal(short_options, "+fn:tqo:");
    assert_string_equal(long_options[0].name, "flag");
    assert_string_equal(long_options[2].name, "level");
    assert_int_equal(long_options[2].val, CLI_LONG_ONLY);
    assert_int_equal(long_options[3].has_arg, optional_argument);
    assert_string_equal(long_options[6].name, "a-very-long-option-name");
    assert_null(long_options[7].name);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_set_what_they_say),
        cmocka_unit_test(test_short_flag_takes_no_value),
        cmocka_unit_test(test_help_in_one_format),
        cmocka_unit_test(test_bad_command_lines),
        cmocka_unit_test(test_options_first_then_afresh),
        cmocka_unit_test(test_operands_in_order),
        cmocka_unit_test(test_getopt_tables),
    };
    test_apply_filter(argc, argv);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
