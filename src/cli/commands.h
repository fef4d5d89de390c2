/* commands.h - the commands of the uzram program, each declared for the command framework
 * (cli/command.h) in its own file; main.c lists them. zram-generator --serve runs serve's. */
#ifndef UZRAM_COMMANDS_H
#define UZRAM_COMMANDS_H

#include "cli/command.h"

extern const struct cli_command serve_command, status_command, attr_command, attach_command,
    detach_command, hot_add_command, hot_remove_command, restart_command, state_check_command,
    estimate_command, bench_command, zram_generator_command;

/* `uzram serve` with `argv` (argv[0] "uzram serve"): the exit status. */
int cmd_serve(int argc, char **argv);

#endif
