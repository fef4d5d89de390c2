/* runtime_dir.c - where the sockets live and whose they can be (runtime_dir.h). */
#include "common/runtime_dir.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int util_runtime_dir(char *buf, size_t size)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    char user_dir[64];
    struct stat st;
    int n;

    snprintf(user_dir, sizeof user_dir, "/run/user/%u", (unsigned)geteuid());
    if (base != NULL && base[0] != '\0')
        n = snprintf(buf, size, "%s/uzram", base);
    else if (geteuid() == 0)
        n = snprintf(buf, size, "/run/uzram");
    else if (stat(user_dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
        n = snprintf(buf, size, "%s/uzram", user_dir);
    else
        n = snprintf(buf, size, "/tmp/uzram-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= size)
        return -ENAMETOOLONG;
    return 0;
}

/* The user who ran sudo, when this is root under sudo (SUDO_UID of another user); else -1. */
static long sudo_uid(void)
{
    const char *text = getenv("SUDO_UID");
    char *end;
    if (geteuid() != 0 || text == NULL || text[0] == '\0')
        return -1;
    errno = 0;
    unsigned long uid = strtoul(text, &end, 10);
    return errno || *end != '\0' || uid == 0 || uid > INT32_MAX ? -1 : (long)uid;
}

int util_sudo_runtime_dir(char *buf, size_t size)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    long uid = sudo_uid();
    if (uid < 0 || (base != NULL && base[0] != '\0'))
        return -ENOENT;
    int n = snprintf(buf, size, "/run/user/%ld/uzram", uid);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* Whose directories and sockets are trusted: this user's, root's, and under sudo those of
 * the user who ran it (whose servers the command is run for). */
static bool trusted_owner(uid_t uid)
{
    return uid == geteuid() || uid == 0 || (long)uid == sudo_uid();
}

int util_make_dir(const char *path)
{
    struct stat st;

    if (mkdir(path, 0700) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    if (stat(path, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

const char *util_private_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) < 0)
        return strerror(errno);
    if (!trusted_owner(st.st_uid))
        return "it belongs to another user";
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return "it is writable by other users";
    return NULL;
}

int util_trusted_dir(const char *dir, char *message, size_t message_size)
{
    const char *why = util_private_dir(dir);
    if (why == NULL)
        return 0;
    snprintf(message, message_size,
             "not trusting the sockets in %s: %s, so another user could have put them there; "
             "use a runtime directory of your own (XDG_RUNTIME_DIR, or -u DIR)",
             dir, why);
    return -EPERM;
}

int util_trusted_socket(const char *path, char *message, size_t message_size)
{
    char dir[PATH_MAX];
    struct stat st;
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == path ? 1 : slash - path) : 1,
             slash ? path : ".");
    int rc = util_trusted_dir(dir, message, message_size);
    if (rc == 0 && lstat(path, &st) == 0 && !trusted_owner(st.st_uid)) {
        snprintf(message, message_size,
                 "not trusting %s: it belongs to another user, who could answer anything", path);
        rc = -EPERM;
    }
    return rc;
}
