/* backing_dev.c - the backing store of a served device, as `serve --backing-file`, hot-add and
 * the backing_dev attribute give it: the path made absolute (or refused where it would be taken
 * from the server's directory), opened by the library's rules, and why it was refused, in one
 * line that says what to do (the rule a state file follows too: private_file_refusal). */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach/attach.h"

static void user_name(uid_t uid, char *name, size_t size)
{
    struct passwd *entry = getpwuid(uid);
    if (entry != NULL)
        snprintf(name, size, "%s", entry->pw_name);
    else
        snprintf(name, size, "%u", (unsigned)uid);
}

/* Why a block device that opening refused with EBUSY is in use (blockdev.c's checks). */
static void block_user(const char *path, char *message, size_t size)
{
    int fd = blockdev_claim(path, message, size);
    if (fd >= 0) {
        close(fd);
        snprintf(message, size, "it is in use (claimed by a program a moment ago)");
    }
}

bool private_file_refusal(const char *path, const struct stat *st, int rc, const char *what,
                          char *message, size_t size)
{
    char who[64], me[64];
    switch (-rc) {
    case EPERM:
        user_name(st ? st->st_uid : (uid_t)-1, who, sizeof who);
        user_name(geteuid(), me, sizeof me);
        snprintf(message, size,
                 "it belongs to user %s, not %s: %s must be the server's own file (its owner "
                 "could read and change the device's data); remove it or give another path",
                 who, me, what);
        return true;
    case EACCES:
        if (!st || !S_ISREG(st->st_mode) || !(st->st_mode & 077))
            return false;
        snprintf(message, size,
                 "its mode %04o lets other users in, and %s holds the device's data: chmod 600 "
                 "%s, or give another path",
                 (unsigned)(st->st_mode & 07777), what, path);
        return true;
    case EMLINK:
        snprintf(message, size,
                 "it has %lu hard links, and any other name of it reaches the device's data: "
                 "give a file with one name",
                 st ? (unsigned long)st->st_nlink : 0UL);
        return true;
    default:
        return false;
    }
}

void backing_refusal(const char *path, int rc, const char *overwrite, char *message, size_t size)
{
    struct stat st;
    bool seen = stat(path, &st) == 0;
    if (private_file_refusal(path, seen ? &st : NULL, rc, "the store", message, size))
        return;
    switch (-rc) {
    case EEXIST:
        snprintf(message, size,
                 "it holds %lld bytes of data, which the store would destroy; give a new or empty "
                 "file%s%s",
                 seen ? (long long)st.st_size : 0LL,
                 overwrite ? ", or add " : " (truncate -s 0 it first if it is scratch space)",
                 overwrite ? overwrite : "");
        break;
    case ELOOP:
        snprintf(message, size,
                 "it is a symbolic link in a directory other users can write (or that is not "
                 "yours), which is never followed: give the file itself");
        break;
    case EBUSY:
        if (seen && S_ISBLK(st.st_mode))
            block_user(path, message, size);
        else
            snprintf(message, size, "it is the backing store of another server (it is locked)");
        break;
    case EINVAL:
        snprintf(message, size,
                 "it must be a regular file or a block device, of at least 8K and at most 128T "
                 "(--backing-size)");
        break;
    default:
        snprintf(message, size, "%s", strerror(-rc));
        break;
    }
}

int backing_dev_open(struct uzram *dev, const char *given, uint64_t size, bool overwrite,
                     bool absolute_only, char *message, size_t message_size)
{
    /* Absolute, so that backing_dev and the log name it wherever they are read. */
    char path[PATH_MAX], cwd[PATH_MAX];
    if (given[0] != '/' && absolute_only) {
        snprintf(message, message_size,
                 "a relative path would be taken from the server's working directory, not "
                 "yours; give an absolute one");
        return -EINVAL;
    }
    if (given[0] == '/' || !getcwd(cwd, sizeof cwd) ||
        snprintf(path, sizeof path, "%s/%s", cwd, given) >= (int)sizeof path)
        snprintf(path, sizeof path, "%s", given);
    int rc = uzram_set_backing_dev_flags(dev, path, size, overwrite ? UZRAM_BACKING_OVERWRITE : 0);
    if (rc < 0)
        backing_refusal(path, rc,
                        "--overwrite-backing-file (overwrite-backing-file=yes in a file or spec)",
                        message, message_size);
    return rc;
}

void backing_dev_refusal(struct uzram *dev, const char *value, int rc, char *message, size_t size)
{
    struct uzram_stats stats;
    if (uzram_get_stats(dev, &stats, sizeof stats) < 0 || stats.pages_stored > 0)
        return; /* the device's data is the reason: the attribute's own message says so */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(value, "\n"), value);
    char why[PATH_MAX + 256];
    backing_refusal(path, rc, NULL, why, sizeof why);
    snprintf(message, size, "cannot use %s as backing_dev: %s", path, why);
}
