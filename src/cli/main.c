/* main.c - entry point of the uzram program: picks the command. Prints the overall help and
 * version; each command reads its own command line through the framework (cli/command.c). */
#include <stdio.h>
#include <string.h>

#include "attach/attach.h"
#include "cli/commands.h"
#include "uzram.h"

/* In the order `uzram --help` lists them. */
static const struct cli_command *const commands[] = {
    &serve_command,       &status_command,   &attr_command,       &attach_command,
    &detach_command,      &hot_add_command,  &hot_remove_command, &restart_command,
    &state_check_command, &estimate_command, &bench_command,      &zram_generator_command,
};

static void usage(FILE *out)
{
    fputs("Usage: uzram COMMAND [OPTION]...\n"
          "       uzram --help | --version\n"
          "zram in user space: a compressed, deduplicating RAM disk served over NBD.\n"
          "\n"
          "Commands:\n",
          out);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, strlen(commands[i]->name) > 10 ? "  %s\n%13s%s\n" : "  %-10s %.0s%s\n",
                commands[i]->name, "", commands[i]->summary);
    fputs("\n"
          "Run 'uzram COMMAND --help' for the options of a command; see uzram(1).\n"
          "Example:\n"
          "  uzram serve -s 2G &\n"
          "  nbdinfo \"$(uzram status -n -o uri uzram0)\"\n"
          "  uzram status\n",
          out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("uzram %s\n", uzram_version());
        return 0;
    }
    /* Not a command of users: the process `uzram attach --via loop` keeps a loop device open
     * with (attach/loop_holder.c). */
    if (strcmp(name, "__hold-loop") == 0)
        return loop_holder_main();
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(name, commands[i]->name) == 0) {
            /* getopt prefixes its messages with argv[0]: make it "uzram serve". */
            char program[32];
            snprintf(program, sizeof program, "uzram %s", commands[i]->name);
            argv[1] = program;
            return commands[i]->run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "uzram: unknown command '%s'; try 'uzram --help'\n", name);
    return 2;
}
