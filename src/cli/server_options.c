/* server_options.c - the one getopt loop of the subcommands whose only options say which
 * server they talk to (server_options.h). */
#include "cli/server_options.h"

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

static int try_help(const struct server_command *command)
{
    fprintf(stderr, "Try 'uzram %s --help' for more information.\n", command->name);
    return 2;
}

int server_options_misused(const struct server_command *command)
{
    fprintf(stderr, "uzram %s: expected %s\n", command->name, command->operands);
    return try_help(command);
}

int server_options(int argc, char **argv, const struct server_command *command,
                   struct server_choice *choice)
{
    /* --server first, so that those without -S take the table from its second row */
    static const struct option long_options[] = {
        {"server", required_argument, NULL, 'S'},
        {"runtime-dir", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char short_options[8];
    snprintf(short_options, sizeof short_options, "%s%su:h", command->options_first ? "+" : "",
             command->takes_server ? "S:" : "");
    const struct option *table = command->takes_server ? long_options : long_options + 1;
    *choice = (struct server_choice){0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, short_options, table, NULL)) != -1) {
        switch (c) {
        case 'S':
            choice->server = optarg;
            break;
        case 'u':
            choice->place = optarg;
            break;
        case 'h':
            command->usage(stdout);
            return 0;
        default:
            return try_help(command);
        }
    }
    int operands = argc - optind;
    if (operands < command->min_operands || operands > command->max_operands)
        return server_options_misused(command);
    return -1;
}
