/* server_options.h - the options by which a subcommand says which server it talks to (-u
 * PLACE, -S SERVER, -h): one reading of them for attr, detach, hot-add, hot-remove and
 * restart. What -u and -S then lead to is control/'s (control_locate, control_choose_server). */
#ifndef UZRAM_CLI_SERVER_OPTIONS_H
#define UZRAM_CLI_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

/* -S as --help shows it (control_choose_server() reads it). */
#define SERVER_OPTION_USAGE                                                                        \
    "  -S, --server SERVER     the server whose control socket is SERVER.ctl in the\n"             \
    "                          runtime directory (needed when several run)\n"

/* A subcommand whose only options say where its server is. */
struct server_command {
    const char *name;         /* "hot-add": its messages say "uzram hot-add" */
    void (*usage)(FILE *out); /* --help */
    const char *operands;     /* what it expects after the options, "NAME [SIZE]" */
    int min_operands, max_operands;
    bool takes_server;  /* -S, --server SERVER (the server-wide ones) */
    bool options_first; /* the options stop at the first operand (getopt's "+"): what
                           follows it is the subcommand's own (VALUE, device options) */
};

/* What the options said: NULL where one was not given. */
struct server_choice {
    const char *place;  /* -u, --runtime-dir */
    const char *server; /* -S, --server */
};

/* Read `command`'s options in argv, and count its operands; optind is then at the first
 * operand. Returns -1 to go on, or the exit status to stop with: 0 after --help (on stdout),
 * 2 after a bad option (getopt's line) or too few or too many operands
 * (server_options_misused()). */
int server_options(int argc, char **argv, const struct server_command *command,
                   struct server_choice *choice);

/* "uzram NAME: expected OPERANDS", then where to get help, on stderr; returns 2, the status
 * of a bad command line. */
int server_options_misused(const struct server_command *command);

#endif
