/* nbd_client.c - `uzram attach` through the kernel's NBD client: the nbd-client command line
 * and a free /dev/nbdN (common/process.c runs it). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach/attach.h"

bool nbd_module_loaded(void)
{
    return access("/sys/module/nbd", F_OK) == 0;
}

static bool read_line(const char *path, char *buf, size_t size)
{
    FILE *file = fopen(path, "re");
    bool ok = file != NULL && fgets(buf, (int)size, file) != NULL;
    if (file != NULL)
        fclose(file);
    return ok;
}

/* A connected device has a pid (its client's) and a size. */
static bool connected(const char *name)
{
    char path[300], size[32];
    snprintf(path, sizeof path, "/sys/block/%s/pid", name);
    if (access(path, F_OK) == 0)
        return true;
    snprintf(path, sizeof path, "/sys/block/%s/size", name);
    return read_line(path, size, sizeof size) && strtoull(size, NULL, 10) != 0;
}

bool nbd_device_connected(const char *device)
{
    const char *name = strrchr(device, '/');
    return connected(name ? name + 1 : device);
}

int nbd_free_device(char device[BLOCKDEV_PATH_MAX])
{
    DIR *dir = opendir("/sys/block");
    struct dirent *entry;
    long best = -1;
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        char *end;
        if (strncmp(entry->d_name, "nbd", 3) != 0)
            continue;
        long number = strtol(entry->d_name + 3, &end, 10);
        if (end == entry->d_name + 3 || *end != '\0' || (best >= 0 && number >= best) ||
            connected(entry->d_name))
            continue;
        best = number;
    }
    if (dir != NULL)
        closedir(dir);
    if (best < 0)
        return -ENODEV;
    snprintf(device, BLOCKDEV_PATH_MAX, "/dev/nbd%ld", best);
    return 0;
}

/* nbd-client configures the device through netlink (its default since 3.17) and exits: the
 * kernel then holds the socket, and no program of the client side has to stay in memory, so
 * -swap (which only locks nbd-client itself in its older ioctl mode) is not needed. Blocks
 * of 4 KiB are the engine's pages; a request unanswered for NBD_REQUEST_TIMEOUT s fails. */
int nbd_client_argv(const struct nbd_client_plan *plan, const char *argv[NBD_CLIENT_ARGS_MAX])
{
    int n = 0;
    if (plan->socket == NULL || plan->export_name == NULL || plan->device == NULL ||
        strncmp(plan->device, "/dev/nbd", 8) != 0)
        return -EINVAL;
    argv[n++] = NBD_CLIENT_PROGRAM;
    argv[n++] = "-unix";
    argv[n++] = plan->socket;
    argv[n++] = plan->device;
    argv[n++] = "-name";
    argv[n++] = plan->export_name;
    argv[n++] = "-block-size";
    argv[n++] = "4096";
    argv[n++] = "-timeout";
    argv[n++] = NBD_REQUEST_TIMEOUT;
    if (plan->read_only)
        argv[n++] = "-readonly";
    argv[n] = NULL;
    return n;
}

int nbd_client_disconnect_argv(const char *device, const char *argv[NBD_CLIENT_ARGS_MAX])
{
    if (device == NULL || strncmp(device, "/dev/nbd", 8) != 0)
        return -EINVAL;
    argv[0] = NBD_CLIENT_PROGRAM;
    argv[1] = "-d";
    argv[2] = device;
    argv[3] = NULL;
    return 3;
}
