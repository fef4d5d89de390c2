/* command.h - the one framework of the uzram program's commands (command.c). A command
 * declares what it takes in a struct cli_command: its synopsis, what it does, a table of
 * options (each row its long name, short letter, argument, help and what it sets), its
 * operands, and what --help says after the options. From that one declaration cli_parse()
 * builds getopt_long's tables, reads the command line, answers -h/--help, reads -u/
 * --runtime-dir and -S/--server for the commands that find a server, and says what is wrong
 * with a bad command line, the same way for every command; cli_help() prints --help in one
 * format. serve's table (server/serve_options.c) is made of the same rows: it is also the
 * keys of its configuration file and of a device SPEC. */
#ifndef UZRAM_CLI_COMMAND_H
#define UZRAM_CLI_COMMAND_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The code of an option without a short letter starts here (getopt_long's `val`). */
#define CLI_LONG_ONLY 256

/* cli_parse()'s "go on": any other value is the exit status to stop with. */
#define CLI_GO_ON (-1)

/* The column of --help where the options' descriptions start. */
#define CLI_HELP_COLUMN 26

struct cli_option;

/* What one use of a row does with its argument (NULL for an option without one): `where` is
 * the command's context plus the row's `offset`. Returns 0, or a negative value after a line
 * on stderr saying what is wrong (the command line is bad: exit status 2). */
typedef int cli_set_fn(void *where, char *arg);

/* One row of a command's table. A row without a name is a line of --help: with `arg` an
 * entry that is no option ("(no mode)": arg, then help as an option's), else a heading (help,
 * after a blank line) over the rows below it. */
struct cli_option {
    const char *name; /* the long option, --NAME */
    int code;         /* the short letter (-C), or CLI_LONG_ONLY + n */
    int has_arg;      /* no_argument, required_argument or optional_argument (--NAME=VALUE) */
    /* What --help calls the argument; "[=VALUE]" is written right after the name. A row of
     * no_argument may name what follows it on the command line (--serve NAME). */
    const char *arg;
    const char *help; /* lines after the first are indented under it; NULL: not in --help */
    unsigned tags;    /* the command's own marks (serve: the configuration keys, bench: jobs) */
    cli_set_fn *set;  /* NULL: the command's `apply` */
    size_t offset;    /* where `set` writes, in the command's context */
};

/* A row's last two fields, what it sets: CLI_TRUE(struct status_args, bytes) sets that bool,
 * CLI_FALSE clears one, CLI_TEXT keeps the argument in a `const char *`; CLI_SET(fn) calls
 * fn with the context itself; CLI_BY_COMMAND leaves the row to the command's `apply`. */
int cli_set_true(void *where, char *arg);
int cli_set_false(void *where, char *arg);
int cli_set_text(void *where, char *arg);
#define CLI_TRUE(type, member) cli_set_true, offsetof(type, member)
#define CLI_FALSE(type, member) cli_set_false, offsetof(type, member)
#define CLI_TEXT(type, member) cli_set_text, offsetof(type, member)
#define CLI_SET(fn) fn, 0
#define CLI_BY_COMMAND NULL, 0

/* A heading of --help over the rows below it, with the command's `tags`. */
#define CLI_HEADING(text, tags)                                                                    \
    {                                                                                              \
        NULL, 0, 0, NULL, text, tags, NULL, 0                                                      \
    }
/* An entry of --help that is no option: "  LEFT" and its description. */
#define CLI_ENTRY(left, help)                                                                      \
    {                                                                                              \
        NULL, 0, 0, left, help, 0, NULL, 0                                                         \
    }

/* The options that say which server a command talks to, read by cli_parse() for the
 * commands that ask for them, into struct cli_args (control/'s control_locate() and
 * control_choose_server() then find the server). */
enum {
    CLI_RUNTIME_DIR = 1, /* -u, --runtime-dir PLACE */
    CLI_SERVER = 2,      /* -S, --server SERVER */
};

/* How options and operands may mix on the command line. */
enum cli_order {
    CLI_PERMUTE,       /* anywhere (getopt's default) */
    CLI_OPTIONS_FIRST, /* options stop at the first operand: what follows is the command's
                          own (a VALUE starting with '-', hot-add's device options) */
    CLI_IN_ORDER,      /* each operand goes to `operand` as it comes, between the options */
};

struct cli_command {
    const char *name;    /* "hot-add": `uzram hot-add` */
    const char *summary; /* its line in `uzram --help` */
    /* What follows "Usage: uzram NAME " in --help, a line per form of the command. */
    const char *synopsis;
    const char *description; /* the lines under the synopsis */
    const struct cli_option *options;
    size_t option_count;
    unsigned common;              /* CLI_RUNTIME_DIR, CLI_SERVER */
    const char *runtime_dir_note; /* a line more under -u's help, or NULL */
    enum cli_order order;
    /* How many operands it takes after the options (not counted for CLI_IN_ORDER); a wrong
     * count is "uzram NAME: expected OPERANDS" (max 0: "unexpected argument"). */
    int min_operands, max_operands;
    const char *operands;
    /* The rows without a setter of their own, with the row: 0 or a negative value after a
     * message, as cli_set_fn. */
    int (*apply)(void *context, const struct cli_option *option, char *arg);
    /* Asked before each option is applied (NULL: none): 0, or a negative value after a line
     * saying why the option is refused here. */
    int (*check)(void *context, const struct cli_option *option);
    /* CLI_IN_ORDER: each operand, in its place among the options. */
    int (*operand)(void *context, char *arg);
    void (*more_help)(FILE *out); /* what --help says after the options (NULL: nothing) */
    const char *epilog;           /* and then, to its end (examples); NULL: nothing */
    /* The command itself: argv[0] is "uzram NAME". Returns the exit status. */
    int (*run)(int argc, char **argv);
};

/* What cli_parse() read besides the rows. */
struct cli_args {
    const char *runtime_dir; /* -u PLACE, or NULL */
    const char *server;      /* -S SERVER, or NULL */
    int first;               /* argv's index of the first operand */
    int count;               /* how many operands follow the options */
};

/* Read `command`'s command line (argv[0] is "uzram NAME": getopt names it in its messages),
 * applying each option to `context` as it comes. Returns CLI_GO_ON, or the exit status to
 * stop with: 0 after --help (on stdout), 2 after a bad command line (getopt's line or the
 * command's, then where to find help). */
int cli_parse(const struct cli_command *command, int argc, char **argv, void *context,
              struct cli_args *args);

/* "uzram NAME: WHAT", then where to find help, on stderr; returns 2, the exit status of a
 * bad command line. */
int cli_misused(const struct cli_command *command, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Only where to find help ("Try 'uzram NAME --help' ..."), after getopt's own line; 2. */
int cli_try_help(const struct cli_command *command);

/* `command`'s --help: "Usage:", its description, its options with -S, -u and -h, then
 * what more_help and the epilog say. */
void cli_help(const struct cli_command *command, FILE *out);

/* One row as --help shows it: the option (or entry, or heading) and its description from
 * CLI_HELP_COLUMN. `first_line`: only the description's first line, with " ..." when it has
 * more (hot-add's list of serve's device options). */
void cli_print_option(FILE *out, const struct cli_option *option, bool first_line);

/* getopt_long's tables for the named rows of `options` that `keep` accepts (NULL: all):
 * `long_options` holds count + 1 entries, `short_options` 3 * count + 2 bytes, and starts with
 * `prefix` ("", "+" or "-"). For hot-add, whose device options are serve's rows. */
void cli_getopt_tables(const struct cli_option *options, size_t count,
                       bool (*keep)(const struct cli_option *), const char *prefix,
                       struct option *long_options, char *short_options);

#endif
