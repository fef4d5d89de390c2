/* leftovers.c - what a server killed while a device was attached leaves behind, and taking it
 * away: its FUSE file's dead mount (every access: "Transport endpoint is not connected"), the
 * file under it, a loop device still bound to it, its sockets. A restarted server's attach and
 * `uzram detach` with no server use this; nothing but uzram's own leftovers is touched. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "attach/attach.h"
#include "common/process.h"

/* Whether /proc/self/mountinfo has a mount of type `type` on `path`. */
static bool mounted_as(const char *path, const char *type)
{
    FILE *mounts = fopen("/proc/self/mountinfo", "re");
    char line[8192];
    bool found = false;
    while (mounts != NULL && !found && fgets(line, sizeof line, mounts)) {
        char point[4096], fstype[256];
        const char *dash = strstr(line, " - ");
        /* ID PARENT MAJOR:MINOR ROOT MOUNTPOINT ... - FSTYPE SOURCE OPTIONS */
        if (dash == NULL || sscanf(line, "%*u %*u %*s %*s %4095s", point) != 1 ||
            sscanf(dash + 3, "%255s", fstype) != 1)
            continue;
        mountinfo_unescape(point);
        found = strcmp(point, path) == 0 && strcmp(fstype, type) == 0;
    }
    if (mounts != NULL)
        fclose(mounts);
    return found;
}

bool leftover_dead_mount(const char *path)
{
    struct stat st;
    return stat(path, &st) < 0 && errno == ENOTCONN && mounted_as(path, "fuse.uzram");
}

int leftover_unmount(const char *path, char *message, size_t message_size)
{
    int rc = 0;
    if (geteuid() == 0) {
        rc = umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 ? 0 : -errno;
    } else {
        const char *argv[] = {"fusermount3", "-u", "-z", path, NULL};
        char output[256];
        rc = run_program(argv, 10, output, sizeof output);
        if (rc > 0)
            rc = -EPERM;
    }
    if (rc < 0)
        snprintf(message, message_size, "cannot unmount the dead FUSE mount on %s: %s", path,
                 strerror(-rc));
    return rc;
}

/* Append `text` to the report, "; "-separated. */
static void say(char *report, size_t size, const char *text)
{
    size_t used = strlen(report);
    if (used + 1 < size)
        snprintf(report + used, size - used, "%s%s", used ? "; " : "", text);
}

/* The loop devices whose backing file is `path` (the name they were given, which a killed
 * server's leaves as it was): detach those nothing uses. 0, or -EBUSY with what to do. */
static int clear_loops(const char *path, char *report, size_t report_size, char *message,
                       size_t message_size)
{
    DIR *sys = opendir("/sys/block");
    struct dirent *entry;
    int rc = 0;
    while (sys != NULL && (entry = readdir(sys)) != NULL) {
        char file[320], bound[4096 + 16], device[BLOCKDEV_PATH_MAX], done[BLOCKDEV_PATH_MAX + 16];
        if (strncmp(entry->d_name, "loop", 4) != 0)
            continue;
        snprintf(file, sizeof file, "/sys/block/%s/loop/backing_file", entry->d_name);
        FILE *in = fopen(file, "re");
        bool ours = in != NULL && fgets(bound, sizeof bound, in) != NULL;
        if (in != NULL)
            fclose(in);
        bound[strcspn(bound, "\n")] = '\0';
        size_t length = strlen(path);
        if (!ours || strncmp(bound, path, length) != 0 ||
            (bound[length] != '\0' && strcmp(bound + length, " (deleted)") != 0))
            continue;
        snprintf(device, sizeof device, "/dev/%.50s", entry->d_name);
        int fd = blockdev_claim(device, message, message_size);
        if (fd < 0) {
            size_t used = strlen(message);
            snprintf(message + used, message_size - used,
                     " (its data went with the server; once unused it goes away by itself, or "
                     "run uzram detach again)");
            rc = -EBUSY;
            continue;
        }
        int cleared = ioctl(fd, LOOP_CLR_FD);
        close(fd);
        snprintf(done, sizeof done, "%s %s", device, cleared == 0 ? "detached" : "left");
        say(report, report_size, done);
    }
    if (sys != NULL)
        closedir(sys);
    return rc;
}

/* Remove the sockets of `dir` nobody listens on any more (a killed server's). */
static void clear_sockets(const char *dir, char *report, size_t report_size)
{
    DIR *listing = opendir(dir);
    struct dirent *entry;
    while (listing != NULL && (entry = readdir(listing)) != NULL) {
        size_t length = strlen(entry->d_name);
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        struct stat st;
        bool ctl = length > 4 && strcmp(entry->d_name + length - 4, ".ctl") == 0;
        if (!ctl && (length <= 5 || strcmp(entry->d_name + length - 5, ".sock") != 0))
            continue;
        int n = snprintf(address.sun_path, sizeof address.sun_path, "%s/%s", dir, entry->d_name);
        if (n < 0 || (size_t)n >= sizeof address.sun_path || lstat(address.sun_path, &st) < 0 ||
            !S_ISSOCK(st.st_mode) || st.st_uid != geteuid())
            continue;
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool stale = probe >= 0 &&
                     connect(probe, (struct sockaddr *)&address, sizeof address) < 0 &&
                     errno == ECONNREFUSED;
        if (probe >= 0)
            close(probe);
        if (stale && unlink(address.sun_path) == 0) {
            char done[300];
            snprintf(done, sizeof done, "stale socket %s removed", entry->d_name);
            say(report, report_size, done);
        }
    }
    if (listing != NULL)
        closedir(listing);
}

int leftover_clean(const char *dir, const char *name, char *report, size_t report_size,
                   char *message, size_t message_size)
{
    char path[4096], done[4200];
    struct stat st;
    report[0] = message[0] = '\0';
    int n = snprintf(path, sizeof path, "%s/%s.disk", dir, name);
    if (n < 0 || (size_t)n >= sizeof path) {
        snprintf(message, message_size, "path too long");
        return -ENAMETOOLONG;
    }
    int rc = clear_loops(path, report, report_size, message, message_size);
    if (rc == 0 && leftover_dead_mount(path)) {
        rc = leftover_unmount(path, message, message_size);
        snprintf(done, sizeof done, "the dead FUSE mount on %s unmounted", path);
        if (rc == 0)
            say(report, report_size, done);
    }
    /* The file the mount was on: the killed server's (empty, ours); never anything else. */
    if (rc == 0 && lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0 &&
        st.st_uid == geteuid() && !mounted_as(path, "fuse.uzram") && unlink(path) == 0) {
        snprintf(done, sizeof done, "%s removed", path);
        say(report, report_size, done);
    }
    clear_sockets(dir, report, report_size);
    return rc;
}
