/* find.c - where the clients look for a device's server, the same way for every subcommand:
 * -u's place (control_place(), client.c) or the runtime directory, and, for root under sudo,
 * the runtime directory of the user who ran sudo, so that `sudo uzram attach NAME` finds the
 * server that user started; and the server a server-wide subcommand (hot-add, restart) asks. */
#include <errno.h>
#include <stdlib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/runtime_dir.h"
#include "common/text.h"
#include "control/control.h"

int control_find(const char *device, const char *runtime_dir, bool also_sudo,
                 struct control_target *target, char *message, size_t message_size)
{
    int rc = control_resolve(device, runtime_dir, target, message, message_size);
    char user_dir[PATH_MAX];
    if (rc != -ENOENT || !also_sudo || strchr(device, '/') != NULL ||
        util_sudo_runtime_dir(user_dir, sizeof user_dir) < 0)
        return rc;
    char first[PATH_MAX + 512];
    snprintf(first, sizeof first, "%s", message);
    rc = control_resolve(device, user_dir, target, message, message_size);
    if (rc == -ENOENT)
        snprintf(message, message_size,
                 "%s; nor does any server in %s (the runtime directory of the user who ran "
                 "sudo)",
                 first, user_dir);
    return rc;
}

/* -u named one server (by its NBD or control socket): DEVICE must be one of its devices, or
 * the same control socket (its default device). */
static int served_by(const char *ctl, const char *device, struct control_target *target,
                     char *message, size_t message_size)
{
    snprintf(target->ctl, sizeof target->ctl, "%s", ctl);
    target->device[0] = '\0';
    if (strcmp(device, ctl) == 0)
        return 0;
    char **names;
    size_t count;
    int rc = control_devices(ctl, &names, &count, message, message_size);
    if (rc < 0)
        return rc;
    bool found = false;
    for (size_t i = 0; i < count && !found; i++)
        found = strcmp(names[i], device) == 0;
    if (!found)
        snprintf(message, message_size,
                 "-u leads to the server of %s, which serves %s%s%s, not '%s'", ctl,
                 count ? names[0] : "no device", count > 1 ? ", " : "", count > 1 ? names[1] : "",
                 device);
    control_free_names(names, count);
    if (!found)
        return -ENOENT;
    snprintf(target->device, sizeof target->device, "%s", device);
    return 0;
}

int control_locate_in(const struct control_place *place, const char *device,
                      struct control_target *target, char *message, size_t message_size)
{
    if (place->ctl[0] != '\0')
        return served_by(place->ctl, device, target, message, message_size);
    return control_find(device, place->dir, place->sudo_too, target, message, message_size);
}

int control_locate(const char *given, const char *device, struct control_place *place,
                   struct control_target *target, char *message, size_t message_size)
{
    struct control_place own;
    if (place == NULL)
        place = &own;
    int rc = control_place(given, place, message, message_size);
    return rc < 0 ? rc : control_locate_in(place, device, target, message, message_size);
}

int control_choose_server(const char *given_place, const char *server, const char *command,
                          char *ctl, size_t size)
{
    char message[PATH_MAX + 512];
    struct control_place place;
    if (control_place(given_place, &place, message, sizeof message) < 0) {
        fprintf(stderr, "uzram: %s\n", message);
        return -1;
    }
    if (place.ctl[0]) {
        if (server != NULL) {
            fprintf(stderr, "uzram %s: -u names a server already; drop --server\n", command);
            return -1;
        }
        snprintf(ctl, size, "%s", place.ctl);
        return 0;
    }
    if (server != NULL) {
        if (!util_valid_name(server)) {
            fprintf(stderr, "uzram: '%s' is not a server name\n", server);
            return -1;
        }
        int n = snprintf(ctl, size, "%.*s/%s.ctl", PATH_MAX - 80, place.dir, server);
        if (n < 0 || (size_t)n >= size) {
            fprintf(stderr, "uzram: %s: path too long\n", place.dir);
            return -1;
        }
        return 0;
    }
    char **servers;
    size_t count;
    int rc = control_servers(place.dir, &servers, &count);
    if (rc < 0) {
        fprintf(stderr, "uzram: cannot list the servers in %s: %s\n", place.dir, strerror(-rc));
        return -1;
    }
    if (count == 1)
        snprintf(ctl, size, "%s", servers[0]);
    else if (count == 0)
        fprintf(stderr,
                "uzram: no server is running in %s; start one with: uzram serve --device "
                "NAME:SIZE\n",
                place.dir);
    else
        fprintf(stderr,
                "uzram: %zu servers run in %s (%s, %s%s); say which with --server NAME (its "
                "control socket NAME.ctl)\n",
                count, place.dir, servers[0], servers[1], count > 2 ? ", ..." : "");
    control_free_names(servers, count);
    return count == 1 ? 0 : -1;
}
