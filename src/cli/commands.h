/* commands.h - the subcommands of the uzram program.
 * Each takes the arguments after its name and returns the exit status. */
#ifndef UZRAM_COMMANDS_H
#define UZRAM_COMMANDS_H

int cmd_serve(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_attr(int argc, char **argv);
int cmd_attach(int argc, char **argv);
int cmd_detach(int argc, char **argv);
int cmd_hot_add(int argc, char **argv);
int cmd_hot_remove(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_estimate(int argc, char **argv);
int cmd_zram_generator(int argc, char **argv);
int cmd_restart(int argc, char **argv);
int cmd_state_check(int argc, char **argv);

#endif
