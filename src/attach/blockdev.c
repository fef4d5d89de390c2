/* blockdev.c - loop devices for `uzram attach`, and who is using a block device.
 * A device in use (mounted, swap, held, open) is never taken away: the message says who uses it. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/loop.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"

int attach_privileged(const char *name, char *message, size_t message_size)
{
    char line[256];
    unsigned long long effective = 0;
    FILE *status = fopen("/proc/self/status", "re");
    while (status != NULL && fgets(line, sizeof line, status) != NULL)
        if (sscanf(line, "CapEff: %llx", &effective) == 1)
            break;
    if (status != NULL)
        fclose(status);
    if (effective & (1ull << CAP_SYS_ADMIN))
        return 0;
    struct passwd *user = getpwuid(geteuid());
    snprintf(message, message_size,
             "the server of %s runs as %s (uid %u) without CAP_SYS_ADMIN, and it is the server "
             "that attaches (its FUSE file and a loop device, or nbd-client): stop it and start "
             "it as root (sudo uzram serve ...), then attach as root (sudo uzram attach %s)",
             name, user ? user->pw_name : "another user", (unsigned)geteuid(), name);
    return -EPERM;
}

/* Free loop devices can be taken by someone else between LOOP_CTL_GET_FREE and
 * LOOP_CONFIGURE: try a few. */
#define LOOP_ATTEMPTS 8

int loop_attach(const char *path, bool read_only, char device[BLOCKDEV_PATH_MAX], bool *direct_io,
                int *held_fd, char *message, size_t message_size)
{
    int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (control < 0) {
        int err = errno;
        snprintf(message, message_size, "cannot open /dev/loop-control: %s%s", strerror(err),
                 err == ENOENT ? " (no loop devices here: modprobe loop?)" : "");
        return -err;
    }
    int backing = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (backing < 0) {
        int err = errno;
        snprintf(message, message_size, "cannot open %s: %s", path, strerror(err));
        close(control);
        return -err;
    }
    int rc = -EBUSY;
    for (int attempt = 0; attempt < LOOP_ATTEMPTS && rc == -EBUSY; attempt++) {
        int number = ioctl(control, LOOP_CTL_GET_FREE);
        if (number < 0) {
            rc = -errno;
            snprintf(message, message_size, "no free loop device: %s", strerror(errno));
            break;
        }
        snprintf(device, BLOCKDEV_PATH_MAX, "/dev/loop%d", number);
        int fd = open(device, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
        if (fd < 0) {
            rc = -errno;
            snprintf(message, message_size, "cannot open %s: %s", device, strerror(errno));
            break;
        }
        /* AUTOCLEAR: the device goes away at its last close, which is its holder's (see
         * loop_hold) when nothing else uses it: a killed server leaves no loop device bound
         * for ever. */
        struct loop_config config = {
            .fd = (unsigned)backing,
            .block_size = UZRAM_PAGE_SIZE,
            .info = {.lo_flags = LO_FLAGS_DIRECT_IO | LO_FLAGS_AUTOCLEAR |
                                 (read_only ? LO_FLAGS_READ_ONLY : 0)},
        };
        snprintf((char *)config.info.lo_file_name, sizeof config.info.lo_file_name, "%s", path);
        if (ioctl(fd, LOOP_CONFIGURE, &config) == 0) {
            struct loop_info64 info;
            *direct_io =
                ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && (info.lo_flags & LO_FLAGS_DIRECT_IO);
            *held_fd = fd;
            fd = -1;
            rc = 0;
        } else {
            rc = -errno;
            if (rc != -EBUSY)
                snprintf(message, message_size, "cannot attach %s to %s: %s%s", device, path,
                         strerror(errno),
                         rc == -EINVAL || rc == -ENOTTY ? " (LOOP_CONFIGURE needs Linux 5.8)" : "");
            else
                snprintf(message, message_size, "every free loop device was taken meanwhile");
        }
        if (fd >= 0)
            close(fd);
    }
    close(backing);
    close(control);
    return rc;
}

/* ------------------------------------------------------------------------
 * Who uses a device
 * ---------------------------------------------------------------------- */

void mountinfo_unescape(char *text)
{
    char *out = text;
    for (char *in = text; *in; in++) {
        if (in[0] == '\\' && isdigit((unsigned char)in[1]) && isdigit((unsigned char)in[2]) &&
            isdigit((unsigned char)in[3])) {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 3;
        } else {
            *out++ = *in;
        }
    }
    *out = '\0';
}

/* The first mount point of device `rdev` in this process's mount namespace, into `where`. */
static bool find_mount(dev_t rdev, char *where, size_t size)
{
    FILE *mounts = fopen("/proc/self/mountinfo", "re");
    char line[8192];
    bool found = false;
    if (mounts == NULL)
        return false;
    while (!found && fgets(line, sizeof line, mounts)) {
        unsigned major_number, minor_number;
        char point[4096];
        /* ID PARENT MAJOR:MINOR ROOT MOUNTPOINT ... */
        if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &major_number, &minor_number, point) == 3 &&
            makedev(major_number, minor_number) == rdev) {
            mountinfo_unescape(point);
            snprintf(where, size, "%s", point);
            found = true;
        }
    }
    fclose(mounts);
    return found;
}

static bool is_swap(dev_t rdev)
{
    FILE *swaps = fopen("/proc/swaps", "re");
    char line[4096];
    bool found = false;
    if (swaps == NULL)
        return false;
    while (!found && fgets(line, sizeof line, swaps)) {
        char path[4096];
        struct stat st;
        if (sscanf(line, "%4095s", path) == 1 && path[0] == '/') {
            mountinfo_unescape(path);
            found = stat(path, &st) == 0 && S_ISBLK(st.st_mode) && st.st_rdev == rdev;
        }
    }
    fclose(swaps);
    return found;
}

/* The first block device stacked on this one (/sys/dev/block/M:N/holders/NAME). */
static bool find_holder(dev_t rdev, char *name, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/holders", major(rdev), minor(rdev));
    DIR *dir = opendir(path);
    struct dirent *entry;
    bool found = false;
    while (dir != NULL && !found && (entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] == '.')
            continue;
        snprintf(name, size, "%s", entry->d_name);
        found = true;
    }
    if (dir != NULL)
        closedir(dir);
    return found;
}

static void command_of(long pid, char *command, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    FILE *comm = fopen(path, "re");
    command[0] = '\0';
    if (comm != NULL && fgets(command, (int)size, comm))
        command[strcspn(command, "\n")] = '\0';
    if (comm != NULL)
        fclose(comm);
}

static bool has_open(long pid, dev_t rdev)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd", pid);
    DIR *fds = opendir(path);
    struct dirent *fd;
    bool found = false;
    while (fds != NULL && !found && (fd = readdir(fds)) != NULL) {
        char link[320];
        struct stat st;
        if (fd->d_name[0] == '.')
            continue;
        snprintf(link, sizeof link, "/proc/%ld/fd/%s", pid, fd->d_name);
        found = stat(link, &st) == 0 && S_ISBLK(st.st_mode) && st.st_rdev == rdev;
    }
    if (fds != NULL)
        closedir(fds);
    return found;
}

/* Another process with the device open: its pid and command name. The kernel's NBD client
 * program holds its device as the device's own connection, not as a user: it is skipped. */
static bool find_opener(dev_t rdev, pid_t ours, pid_t *pid, char *command, size_t size)
{
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    bool found = false;
    pid_t self = getpid();
    while (proc != NULL && !found && (entry = readdir(proc)) != NULL) {
        char *end;
        long number = strtol(entry->d_name, &end, 10);
        if (*end != '\0' || number <= 0 || number == self || number == ours ||
            !has_open(number, rdev))
            continue;
        command_of(number, command, size);
        if (strcmp(command, NBD_CLIENT_PROGRAM) != 0) {
            *pid = (pid_t)number;
            found = true;
        }
    }
    if (proc != NULL)
        closedir(proc);
    return found;
}

int blockdev_claim(const char *device, char *message, size_t message_size)
{
    return blockdev_claim_except(device, 0, message, message_size);
}

int blockdev_claim_except(const char *device, pid_t ours, char *message, size_t message_size)
{
    struct stat st;
    if (stat(device, &st) < 0 || !S_ISBLK(st.st_mode)) {
        snprintf(message, message_size, "%s is not a block device", device);
        return -ENODEV;
    }
    char where[4096];
    if (find_mount(st.st_rdev, where, sizeof where)) {
        snprintf(message, message_size, "%s is mounted on %s; unmount it first: umount %s", device,
                 where, where);
        return -EBUSY;
    }
    if (is_swap(st.st_rdev)) {
        snprintf(message, message_size, "%s is in use as swap; first: swapoff %s", device, device);
        return -EBUSY;
    }
    if (find_holder(st.st_rdev, where, sizeof where)) {
        snprintf(message, message_size,
                 "%s is held by /dev/%s (a device-mapper, md or other device on it); remove "
                 "that first",
                 device, where);
        return -EBUSY;
    }
    /* Exclusive: from here nobody can mount it or make it swap until we close. */
    int fd = open(device, O_RDONLY | O_EXCL | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == EBUSY)
            snprintf(message, message_size,
                     "%s is in use (mounted in another mount namespace, or claimed by another "
                     "program); stop that use first",
                     device);
        else
            snprintf(message, message_size, "cannot open %s: %s", device, strerror(err));
        return -err;
    }
    /* A program that has it open without claiming it (dd, fio, a udev probe just after a
     * change) would see it vanish: wait a second for short-lived ones, then refuse. */
    pid_t pid;
    char command[64];
    for (int tries = 0; tries < 20; tries++) {
        if (!find_opener(st.st_rdev, ours, &pid, command, sizeof command))
            return fd;
        struct timespec pause = {0, 50000000};
        nanosleep(&pause, NULL);
    }
    close(fd);
    snprintf(message, message_size, "%s is open in process %ld (%s); end that first", device,
             (long)pid, command);
    return -EBUSY;
}

int loop_detach(const char *device, dev_t file_dev, ino_t file_ino, struct loop_holder *holder,
                char *message, size_t message_size)
{
    int fd = blockdev_claim_except(device, holder->pid, message, message_size);
    if (fd < 0)
        return fd;
    struct loop_info64 info;
    if (ioctl(fd, LOOP_GET_STATUS64, &info) < 0 || info.lo_device != file_dev ||
        info.lo_inode != file_ino) {
        close(fd);
        loop_let_go(holder);
        snprintf(message, message_size, "%s is no longer attached to this device's file", device);
        return -ENXIO;
    }
    int rc = ioctl(fd, LOOP_CLR_FD) == 0 ? 0 : -errno;
    close(fd);
    if (rc < 0) {
        snprintf(message, message_size, "cannot detach %s: %s", device, strerror(-rc));
        return rc;
    }
    /* The kernel lets go of the file at the last close, which is ours: wait until the device
     * no longer has it, so that the file can be unmounted. */
    loop_let_go(holder);
    for (int tries = 0; tries < 200; tries++) {
        fd = open(device, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 0;
        rc = ioctl(fd, LOOP_GET_STATUS64, &info);
        close(fd);
        if (rc < 0)
            return 0; /* ENXIO: no file any more */
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
    snprintf(message, message_size, "%s still has its file 2 s after LOOP_CLR_FD", device);
    return -EBUSY;
}
