/* find.c - where the clients look for a device's server: the runtime directory (or -u's), and,
 * for root under sudo, the runtime directory of the user who ran sudo, so that
 * `sudo uzram attach NAME` finds the server that user started. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
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
