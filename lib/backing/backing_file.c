/* backing_file.c - which file or block device may become a backing store, and opening it so
 * that nobody else can swap another one in (see backing_file.h). */
#include "backing/backing_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether the directory that holds `path` may be changed by somebody else than this user (or
 * root): writable by group or others (such as /tmp or /var/tmp), or another user's. A symbolic
 * link there may be anybody's, and is not followed. */
static bool shared_dir(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
    struct stat st;
    return stat(dir, &st) != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) ||
           (st.st_uid != geteuid() && st.st_uid != 0);
}

/* A new file, made by us: O_EXCL never follows a symbolic link, nor takes a file somebody
 * made first. */
static int create(const char *path, struct backing_file *out)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    out->fd = fd;
    out->created = true;
    return fstat(fd, &out->st) < 0 ? -errno : 0;
}

int file_private(const struct stat *st)
{
    if (st->st_uid != geteuid())
        return -EPERM;
    if (st->st_nlink == 0)
        return 0;
    if (st->st_mode & (S_IRWXG | S_IRWXO))
        return -EACCES;
    return st->st_nlink != 1 ? -EMLINK : 0;
}

/* What an existing regular file must be to be emptied: ours, for us alone, with no other
 * name (file_private), not another server's store (locked), and empty unless the caller was
 * told to destroy what it holds. */
static int check_file(int fd, const struct stat *st, unsigned flags)
{
    int rc = file_private(st);
    if (rc < 0)
        return rc;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0)
        return errno == EWOULDBLOCK ? -EBUSY : -errno;
    if (st->st_size != 0 && !(flags & UZRAM_BACKING_OVERWRITE))
        return -EEXIST;
    return 0;
}

/* Open what lies at `path` now (lstat gave `seen`), and make sure it is still that. */
static int open_existing(const char *path, const struct stat *seen, struct backing_file *out)
{
    struct stat target = *seen;
    bool link = S_ISLNK(seen->st_mode);
    if (link && shared_dir(path))
        return -ELOOP;
    if (link && stat(path, &target) < 0)
        return -errno;
    if (!S_ISREG(target.st_mode) && !S_ISBLK(target.st_mode))
        return -EINVAL;
    /* A block device exclusively: the kernel refuses one that is mounted, swap, held by
     * another device (dm, md) or claimed by another program, and nobody can claim it next. */
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK | (link ? 0 : O_NOFOLLOW) |
                            (S_ISBLK(target.st_mode) ? O_EXCL : 0));
    if (fd < 0)
        return -errno;
    out->fd = fd;
    if (fstat(fd, &out->st) < 0 || out->st.st_dev != target.st_dev ||
        out->st.st_ino != target.st_ino || out->st.st_rdev != target.st_rdev) {
        close(fd);
        return -EAGAIN; /* changed between lstat and open: look again */
    }
    return 0;
}

int backing_file_open(const char *path, unsigned flags, struct backing_file *out)
{
    *out = (struct backing_file){.fd = -1};
    int rc = -EAGAIN;
    for (int attempt = 0; attempt < 4 && rc == -EAGAIN; attempt++) {
        struct stat seen;
        if (lstat(path, &seen) < 0) {
            rc = errno == ENOENT ? create(path, out) : -errno;
            if (rc == -EEXIST)
                rc = -EAGAIN; /* made by somebody else meanwhile: look at it */
        } else {
            rc = open_existing(path, &seen, out);
        }
    }
    if (rc == -EAGAIN)
        rc = -EBUSY;
    if (rc == 0 && !S_ISREG(out->st.st_mode) && !S_ISBLK(out->st.st_mode))
        rc = -EINVAL;
    if (rc == 0 && S_ISREG(out->st.st_mode))
        rc = out->created ? (flock(out->fd, LOCK_EX | LOCK_NB) < 0 ? -errno : 0)
                          : check_file(out->fd, &out->st, flags);
    if (rc < 0) {
        backing_file_abandon(path, out);
        return rc;
    }
    out->regular = S_ISREG(out->st.st_mode);
    /* O_DIRECT where the file system takes it: written-back pages must not come back into
     * memory as page cache. */
    int status = fcntl(out->fd, F_GETFL);
    out->direct = status >= 0 && fcntl(out->fd, F_SETFL, status | O_DIRECT) == 0;
    return 0;
}

void backing_file_abandon(const char *path, struct backing_file *file)
{
    struct stat now;
    /* Only the file we made, if the name still leads to it. */
    if (file->created && lstat(path, &now) == 0 && now.st_dev == file->st.st_dev &&
        now.st_ino == file->st.st_ino)
        unlink(path);
    if (file->fd >= 0)
        close(file->fd);
    file->fd = -1;
}
