/* attr.c - `uzram attr`: read or write one attribute of a running device, or list them all.
 * Sends "get NAME" or "set NAME VALUE" about the device to its server's control socket. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/pass.h"
#include "control/control.h"
#include "uzram.h"

/* The attributes the server adds to the library's (control/service.c): the clients of a
 * device, and the memory limit all the server's devices share. */
#define SERVER_ATTRIBUTES "clients server_mem_limit"
#define SERVER_MEM_LIMIT_USAGE                                                                     \
    "a size in bytes (K/M/G/T), 0 for none: the server's, all its devices together"

/* "  NAME  TEXT" with TEXT's words wrapped under one another from column 26. */
static void print_wrapped(FILE *out, const char *name, const char *text)
{
    enum { COLUMN = 26, WIDTH = 79 };
    int used = fprintf(out, "  %-*s", COLUMN - 3, name);
    if (used > COLUMN - 1) {
        fputc('\n', out);
        used = fprintf(out, "%*s", COLUMN - 1, "");
    }
    for (const char *word = text; *word;) {
        int length = (int)strcspn(word, " ");
        if (used + 1 + length > WIDTH && used > COLUMN - 1)
            used = fprintf(out, "\n%*s", COLUMN - 1, "") - 1;
        used += fprintf(out, " %.*s", length, word);
        word += length + (word[length] == ' ');
    }
    fputc('\n', out);
}

/* --help after the options: the attributes, and what each write takes, from the library's
 * table of attributes (uzram_attr_names, uzram_attr_usage: exactly the writable ones have a
 * usage). */
static void attributes_help(FILE *out)
{
    fprintf(out, "\nAttributes: %s " SERVER_ATTRIBUTES "\n", uzram_attr_names());
    fputs("\nWritable, and what a write takes (disksize is set when the device is served:\n"
          "uzram serve --size; reset only while no client is connected):\n",
          out);
    char names[1024];
    snprintf(names, sizeof names, "%s", uzram_attr_names());
    char *save = NULL;
    for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save))
        if (uzram_attr_usage(name) != NULL)
            print_wrapped(out, name, uzram_attr_usage(name));
    print_wrapped(out, "server_mem_limit", SERVER_MEM_LIMIT_USAGE);
}

/* Every attribute of the library's list, then clients, as "NAME  VALUE" lines: what
 * `grep . /sys/block/zram0/...` shows of a zram device. A value of several lines (debug_stat)
 * continues under the first; write-only attributes say so. */
static int list_attributes(const struct control_target *target)
{
    char names[1024], message[512], request[128], *body;
    snprintf(names, sizeof names, "%s " SERVER_ATTRIBUTES, uzram_attr_names());
    int width = 0;
    for (char *name = names; *name;) {
        int length = (int)strcspn(name, " ");
        width = length > width ? length : width;
        name += length + (name[length] == ' ');
    }
    int status = 0;
    char *save = NULL;
    for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        if (strcmp(name, "clients") == 0)
            snprintf(request, sizeof request, "clients");
        else
            snprintf(request, sizeof request, "get %s", name);
        int rc = control_ask(target, request, &body, message, sizeof message);
        if (rc == -EACCES) {
            printf("%-*s  (write-only)\n", width, name);
            continue;
        }
        if (rc < 0) {
            fprintf(stderr, "uzram: cannot read %s: %s\n", name, message);
            status = 1;
            continue;
        }
        const char *line = body;
        bool first = true;
        do {
            size_t length = strcspn(line, "\n");
            printf("%-*s  %.*s\n", width, first ? name : "", (int)length, line);
            line += length + (line[length] == '\n');
            first = false;
        } while (*line != '\0');
        free(body);
    }
    return status;
}

static int attr_run(int argc, char **argv);

const struct cli_command attr_command = {
    .name = "attr",
    .summary = "read or write an attribute of a running device",
    .synopsis = "[-u PLACE] DEVICE [NAME [VALUE]]",
    .description =
        "Read (or, with VALUE, write) an attribute of a served device, with zram's names;\n"
        "without NAME, list every attribute with its value. DEVICE is a device name\n"
        "(looked up among the servers of the runtime directory) or the path of a .ctl\n"
        "control socket (its server's first device).\n",
    .common = CLI_RUNTIME_DIR,
    .order = CLI_OPTIONS_FIRST, /* so that VALUE may start with '-' */
    .min_operands = 1,
    .max_operands = 3,
    .operands = "DEVICE [NAME [VALUE]]",
    .more_help = attributes_help,
    .run = attr_run,
};

static int attr_run(int argc, char **argv)
{
    struct cli_args args;
    int status = cli_parse(&attr_command, argc, argv, NULL, &args);
    if (status != CLI_GO_ON)
        return status;
    char **operands = argv + args.first;
    const char *device = operands[0], *name = args.count >= 2 ? operands[1] : NULL;
    const char *value = args.count == 3 ? operands[2] : NULL;
    if ((name != NULL && strpbrk(name, " \n") != NULL) ||
        (value != NULL && strchr(value, '\n') != NULL) || (value != NULL && value[0] == '\0')) {
        fprintf(stderr, "uzram: bad attribute name or value\n");
        return 1;
    }

    char message[2 * PATH_MAX + 256], request[PATH_MAX + 64], *body;
    struct control_target target;
    int rc = control_locate(args.runtime_dir, device, NULL, &target, message, sizeof message);
    if (rc < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return 1;
    }
    if (name == NULL)
        return list_attributes(&target);
    if (value != NULL)
        snprintf(request, sizeof request, "set %s %s", name, value);
    else if (strcmp(name, "clients") == 0)
        snprintf(request, sizeof request, "clients");
    else
        snprintf(request, sizeof request, "get %s", name);
    rc = value != NULL && pass_attribute(name)
             ? pass_run(&target, device, name, value, request, &body, message, sizeof message)
             : control_ask(&target, request, &body, message, sizeof message);
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
