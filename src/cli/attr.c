/* attr.c - `uzram attr`: read or write one attribute of a running device.
 * Sends "get NAME" or "set NAME VALUE" to the server's control socket (NAME.ctl). */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "control/control.h"
#include "common/util.h"
#include "uzram.h"

static void attr_usage(FILE *out)
{
    fprintf(out,
            "Usage: uzram attr [-u DIR] DEVICE NAME [VALUE]\n"
            "Read (or, with VALUE, write) an attribute of a served device, with zram's names.\n"
            "DEVICE is a device name (looked up in the runtime directory) or the path of\n"
            "its .ctl control socket.\n"
            "\n"
            "  -u, --runtime-dir DIR   look for NAME.ctl in DIR\n"
            "  -h, --help              show this help\n"
            "\n"
            "Attributes: %s clients\n"
            "Writable: comp_algorithm algorithm_params same_filled use_dedup mem_limit\n"
            "  mem_used_max (0) compact reset (1, only with no client connected)\n"
            "  idle (all, or seconds since the last access);\n"
            "  disksize is set when the device is served (uzram serve --size)\n",
            uzram_attr_names());
}

int cmd_attr(int argc, char **argv)
{
    static const struct option long_options[] = {
        {"runtime-dir", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char runtime_dir[PATH_MAX] = "";
    int c;

    optind = 1;
    /* "+": stop at the first operand so VALUE may start with '-'. */
    while ((c = getopt_long(argc, argv, "+u:h", long_options, NULL)) != -1) {
        switch (c) {
        case 'u':
            snprintf(runtime_dir, sizeof runtime_dir, "%s", optarg);
            break;
        case 'h':
            attr_usage(stdout);
            return 0;
        default:
            fputs("Try 'uzram attr --help' for more information.\n", stderr);
            return 2;
        }
    }
    int operands = argc - optind;
    if (operands < 2 || operands > 3) {
        fputs("uzram attr: expected DEVICE NAME [VALUE]\n"
              "Try 'uzram attr --help' for more information.\n",
              stderr);
        return 2;
    }
    const char *device = argv[optind], *name = argv[optind + 1];
    const char *value = operands == 3 ? argv[optind + 2] : NULL;
    if (runtime_dir[0] == '\0' && util_runtime_dir(runtime_dir, sizeof runtime_dir) < 0) {
        fputs("uzram: $XDG_RUNTIME_DIR is too long\n", stderr);
        return 1;
    }
    if (strpbrk(name, " \n") != NULL || (value != NULL && strchr(value, '\n') != NULL) ||
        (value != NULL && value[0] == '\0')) {
        fprintf(stderr, "uzram: bad attribute name or value\n");
        return 1;
    }

    char path[PATH_MAX], message[512], request[PATH_MAX + 64], *body;
    int rc = control_resolve(device, runtime_dir, path, sizeof path, message, sizeof message);
    if (rc < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return 1;
    }
    if (value != NULL)
        snprintf(request, sizeof request, "set %s %s", name, value);
    else if (strcmp(name, "clients") == 0)
        snprintf(request, sizeof request, "clients");
    else
        snprintf(request, sizeof request, "get %s", name);
    rc = control_request(path, request, &body, message, sizeof message);
    if (rc < 0) {
        if (value != NULL)
            fprintf(stderr, "uzram: cannot set %s: %s\n", name, message);
        else
            fprintf(stderr, "uzram: cannot read %s: %s\n", name, message);
        return 1;
    }
    if (value == NULL)
        fputs(body, stdout);
    free(body);
    return 0;
}
