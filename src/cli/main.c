/* main.c - entry point of the uzram program: picks the subcommand.
 * Prints the overall help and version; each subcommand parses its own options. */
#include <stdio.h>
#include <string.h>

#include "attach/attach.h"
#include "cli/commands.h"
#include "uzram.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"serve", cmd_serve, "create a compressed RAM disk and serve it over NBD"},
    {"status", cmd_status, "show running devices and their statistics, like zramctl"},
    {"attr", cmd_attr, "read or write an attribute of a running device"},
    {"attach", cmd_attach, "give a running device a /dev node (ublk, nbd-client or FUSE + loop)"},
    {"detach", cmd_detach, "take the /dev node of a running device away again"},
    {"hot-add", cmd_hot_add, "add a device to a running server (zram's hot_add)"},
    {"hot-remove", cmd_hot_remove, "remove a device from its server (zram's hot_remove)"},
    {"restart", cmd_restart, "restart a server in place (an upgrade) without losing a page"},
    {"state-check", cmd_state_check, "say whether this uzram can take over a device's state"},
    {"estimate", cmd_estimate,
     "estimate what same-filled pages, compression and dedup save on data"},
    {"bench", cmd_bench, "measure the engine on generated data, or an NBD server (bench nbd)"},
    {"zram-generator", cmd_zram_generator,
     "serve and set up zram-generator.conf's devices (swap, mounts)"},
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
        fprintf(out, strlen(commands[i].name) > 10 ? "  %s\n%13s%s\n" : "  %-10s %.0s%s\n",
                commands[i].name, "", commands[i].summary);
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
        if (strcmp(name, commands[i].name) == 0) {
            /* getopt prefixes its messages with argv[0]: make it "uzram serve". */
            char program[32];
            snprintf(program, sizeof program, "uzram %s", commands[i].name);
            argv[1] = program;
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "uzram: unknown command '%s'; try 'uzram --help'\n", name);
    return 2;
}
