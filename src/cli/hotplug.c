/* hotplug.c - `uzram hot-add` and `uzram hot-remove`: add a device to a running server or
 * remove one, as zram's /sys/class/zram-control/hot_add and hot_remove do. Both send one
 * request to the server's control socket; the server makes (or destroys) the device. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "control/control.h"
#include "common/text.h"
#include "server/serve_options.h"

/* Is `option` one hot-add takes after NAME [SIZE]: a device's setting other than its size? */
static bool hot_add_option(const struct cli_option *option)
{
    return option_sets_device(option) && option->code != 's';
}

/* --help after the options: serve's device options (server/serve_options.c's table), one
 * line each. */
static void device_options_help(FILE *out)
{
    fputs("\n"
          "Device options (as uzram serve takes them; the server's own defaults apply to\n"
          "what is not given):\n",
          out);
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++)
        if (serve_options[i].name != NULL && option_sets_device(&serve_options[i]))
            cli_print_option(out, &serve_options[i], true);
}

static int hot_add_run(int argc, char **argv);

const struct cli_command hot_add_command = {
    .name = "hot-add",
    .summary = "add a device to a running server (zram's hot_add)",
    .synopsis = "[-S SERVER | -u PLACE] NAME [SIZE] [DEVICE OPTION]...",
    .description =
        "Add device NAME of SIZE (default: the server's) to a running `uzram serve`, as\n"
        "zram's hot_add does: a new NBD export of that server, at once.\n",
    .common = CLI_SERVER | CLI_RUNTIME_DIR,
    /* options first: the device options after NAME are serve's, read by device_spec() */
    .order = CLI_OPTIONS_FIRST,
    .min_operands = 1,
    .max_operands = INT_MAX,
    .operands = "NAME [SIZE] [DEVICE OPTION]...",
    .more_help = device_options_help,
    .epilog = "\n"
              "Example:\n"
              "  uzram hot-add -S pool scratch 2G --algorithm zstd --dedup\n",
    .run = hot_add_run,
};

/* Make the device SPEC that serve --device and the control socket's hot-add take
 * (NAME:SIZE[:KEY=VALUE]...) from NAME, SIZE (NULL: the server's default) and serve's
 * device options in argv[1..argc-1] (--algorithm zstd, -a zstd, --dedup, --dedup=no).
 * Returns 0, or 2 after a line on stderr. */
static int device_spec(const char *name, const char *size, int argc, char **argv, char *spec,
                       size_t spec_size)
{
    struct option long_options[SERVE_OPTION_COUNT + 1];
    char short_options[3 * SERVE_OPTION_COUNT + 2];
    cli_getopt_tables(serve_options, SERVE_OPTION_COUNT, hot_add_option, "+", long_options,
                      short_options);

    size_t used = (size_t)snprintf(spec, spec_size, "%s:%s", name, size ? size : "");
    int c;
    optind = 0; /* afresh, as cli_parse() */
    opterr = 1;
    while ((c = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
        const struct cli_option *option = option_by_code(c);
        if (option == NULL)
            return cli_try_help(&hot_add_command);
        if (optarg != NULL && strchr(optarg, ':') != NULL) {
            fprintf(stderr,
                    "uzram: --%s '%s': a value with ':' cannot go in a device's settings; "
                    "rename the file, or serve the device from a configuration file\n",
                    option->name, optarg);
            return 2;
        }
        used += (size_t)snprintf(spec + used, used < spec_size ? spec_size - used : 0, ":%s%s%s",
                                 option->name, optarg ? "=" : "", optarg ? optarg : "");
    }
    if (optind < argc)
        return cli_misused(&hot_add_command, "unexpected argument '%s'", argv[optind]);
    if (used >= spec_size) {
        fputs("uzram hot-add: the settings are too long for one request\n", stderr);
        return 2;
    }
    return 0;
}

static int hot_add_run(int argc, char **argv)
{
    struct cli_args args;
    int status = cli_parse(&hot_add_command, argc, argv, NULL, &args);
    if (status != CLI_GO_ON)
        return status;
    int next = args.first;
    const char *name = argv[next++];
    if (!util_valid_name(name)) {
        fprintf(stderr,
                "uzram: bad device name '%s'; use 1-64 characters from A-Z a-z 0-9 . _ -, not "
                "starting with -\n",
                name);
        return 2;
    }
    const char *size = NULL;
    if (next < argc && argv[next][0] != '-')
        size = argv[next++];
    if (size != NULL && strchr(size, ':') != NULL) {
        fprintf(stderr, "uzram: bad size '%s'\n", size);
        return 2;
    }
    /* The device options, as serve's getopt reads them: argv[0] stays the program. */
    char spec[1024];
    argv[next - 1] = argv[0];
    status = device_spec(name, size, argc - next + 1, argv + next - 1, spec, sizeof spec);
    if (status != 0)
        return status;

    char ctl[PATH_MAX], request[1100], message[1024], *body;
    if (control_choose_server(args.runtime_dir, args.server, hot_add_command.name, ctl,
                              sizeof ctl) < 0)
        return 1;
    snprintf(request, sizeof request, "hot-add %s", spec);
    int rc = control_request(ctl, request, &body, message, sizeof message);
    if (rc < 0) {
        fprintf(stderr, "uzram: hot-add %s: %s\n", name, message);
        return 1;
    }
    printf("uzram: added %s", body);
    free(body);
    return 0;
}

static int hot_remove_run(int argc, char **argv);

const struct cli_command hot_remove_command = {
    .name = "hot-remove",
    .summary = "remove a device from its server (zram's hot_remove)",
    .synopsis = "[-u PLACE] NAME",
    .description =
        "Remove device NAME from the server that serves it, as zram's hot_remove does: its\n"
        "data is dropped. Refused while a client is connected to it; disconnect them first.\n",
    .common = CLI_RUNTIME_DIR,
    .min_operands = 1,
    .max_operands = 1,
    .operands = "NAME",
    .run = hot_remove_run,
};

static int hot_remove_run(int argc, char **argv)
{
    struct cli_args args;
    int status = cli_parse(&hot_remove_command, argc, argv, NULL, &args);
    if (status != CLI_GO_ON)
        return status;
    const char *name = argv[args.first];
    if (!util_valid_name(name)) {
        fprintf(stderr, "uzram: '%s' is not a device name\n", name);
        return 2;
    }
    char message[2 * PATH_MAX + 256], request[128], *body;
    struct control_target target;
    int rc = control_locate(args.runtime_dir, name, NULL, &target, message, sizeof message);
    if (rc < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return 1;
    }
    snprintf(request, sizeof request, "hot-remove %s", name);
    rc = control_request(target.ctl, request, &body, message, sizeof message);
    if (rc < 0) {
        fprintf(stderr, "uzram: hot-remove %s: %s\n", name, message);
        return 1;
    }
    printf("uzram: %s", body);
    free(body);
    return 0;
}
