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
#include "cli/server_options.h"
#include "control/control.h"
#include "common/text.h"
#include "server/serve_options.h"

/* serve's device options (server/serve_options.c's table), one line each, for --help. */
static void device_options_usage(FILE *out)
{
    for (size_t i = 0; i < SERVE_OPTION_COUNT; i++) {
        const struct serve_option *o = &serve_options[i];
        if (o->name == NULL || !option_sets_device(o))
            continue;
        char left[64];
        option_left_column(o, left, sizeof left);
        const char *end = strchr(o->help, '\n');
        fprintf(out, "%-*s %.*s%s\n", SERVE_HELP_COLUMN - 1, left,
                end ? (int)(end - o->help) : (int)strlen(o->help), o->help, end ? " ..." : "");
    }
}

/* Is `option` one hot-add takes after NAME [SIZE]: a device's setting other than its size? */
static bool hot_add_option(const struct serve_option *option)
{
    return option_sets_device(option) && option->code != 's';
}

/* Make the device SPEC that serve --device and the control socket's hot-add take
 * (NAME:SIZE[:KEY=VALUE]...) from NAME, SIZE (NULL: the server's default) and serve's
 * device options in argv[1..argc-1] (--algorithm zstd, -a zstd, --dedup, --dedup=no).
 * Returns 0, or 2 after a line on stderr. */
static int device_spec(const char *name, const char *size, int argc, char **argv, char *spec,
                       size_t spec_size)
{
    struct option long_options[SERVE_OPTION_COUNT + 1];
    char short_options[3 * SERVE_OPTION_COUNT + 2];
    option_getopt_tables(hot_add_option, "+", long_options, short_options);

    size_t used = (size_t)snprintf(spec, spec_size, "%s:%s", name, size ? size : "");
    int c, index;
    optind = 1;
    opterr = 1;
    while ((c = getopt_long(argc, argv, short_options, long_options, &index)) != -1) {
        const struct serve_option *option = option_by_code(c);
        if (option == NULL)
            return 2;
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
    if (optind < argc) {
        fprintf(stderr, "uzram hot-add: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (used >= spec_size) {
        fputs("uzram hot-add: the settings are too long for one request\n", stderr);
        return 2;
    }
    return 0;
}

static void hot_add_usage(FILE *out)
{
    fputs("Usage: uzram hot-add [-S SERVER | -u PLACE] NAME [SIZE] [DEVICE OPTION]...\n"
          "Add device NAME of SIZE (default: the server's) to a running `uzram serve`, as\n"
          "zram's hot_add does: a new NBD export of that server, at once.\n"
          "\n" SERVER_OPTION_USAGE CONTROL_PLACE_USAGE "  -h, --help              show this help\n"
          "\n"
          "Device options (as uzram serve takes them; the server's own defaults apply to\n"
          "what is not given):\n",
          out);
    device_options_usage(out);
    fputs("\n"
          "Example:\n"
          "  uzram hot-add -S pool scratch 2G --algorithm zstd --dedup\n",
          out);
}

static void hot_remove_usage(FILE *out)
{
    fputs("Usage: uzram hot-remove [-u PLACE] NAME\n"
          "Remove device NAME from the server that serves it, as zram's hot_remove does: its\n"
          "data is dropped. Refused while a client is connected to it; disconnect them first.\n"
          "\n" CONTROL_PLACE_USAGE "  -h, --help              show this help\n",
          out);
}

int cmd_hot_add(int argc, char **argv)
{
    /* options first: the device options after NAME are serve's, read by device_spec() */
    static const struct server_command command = {.name = "hot-add",
                                                  .usage = hot_add_usage,
                                                  .operands = "NAME [SIZE] [DEVICE OPTION]...",
                                                  .min_operands = 1,
                                                  .max_operands = INT_MAX,
                                                  .takes_server = true,
                                                  .options_first = true};
    struct server_choice choice;
    int status = server_options(argc, argv, &command, &choice);
    if (status >= 0)
        return status;
    const char *name = argv[optind++];
    if (!util_valid_name(name)) {
        fprintf(stderr,
                "uzram: bad device name '%s'; use 1-64 characters from A-Z a-z 0-9 . _ -, not "
                "starting with -\n",
                name);
        return 2;
    }
    const char *size = NULL;
    if (optind < argc && argv[optind][0] != '-')
        size = argv[optind++];
    if (size != NULL && strchr(size, ':') != NULL) {
        fprintf(stderr, "uzram: bad size '%s'\n", size);
        return 2;
    }
    /* The device options, as serve's getopt reads them: argv[0] stays the program. */
    char spec[1024];
    argv[optind - 1] = argv[0];
    status = device_spec(name, size, argc - optind + 1, argv + optind - 1, spec, sizeof spec);
    if (status != 0)
        return status;

    char ctl[PATH_MAX], request[1100], message[1024], *body;
    if (control_choose_server(choice.place, choice.server, command.name, ctl, sizeof ctl) < 0)
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

int cmd_hot_remove(int argc, char **argv)
{
    static const struct server_command command = {.name = "hot-remove",
                                                  .usage = hot_remove_usage,
                                                  .operands = "NAME",
                                                  .min_operands = 1,
                                                  .max_operands = 1};
    struct server_choice choice;
    int status = server_options(argc, argv, &command, &choice);
    if (status >= 0)
        return status;
    const char *name = argv[optind];
    if (!util_valid_name(name)) {
        fprintf(stderr, "uzram: '%s' is not a device name\n", name);
        return 2;
    }
    char message[2 * PATH_MAX + 256], request[128], *body;
    struct control_target target;
    int rc = control_locate(choice.place, name, NULL, &target, message, sizeof message);
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
