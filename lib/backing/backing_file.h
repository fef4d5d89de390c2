/* backing_file.h - choosing and opening the file or block device of a backing store (internal).
 * The rules that keep a backing store from destroying what a user owns, or being swapped by
 * another. */
#ifndef UZRAM_BACKING_FILE_H
#define UZRAM_BACKING_FILE_H

#include <stdbool.h>
#include <sys/stat.h>

#include "uzram.h"

struct backing_file {
    int fd;
    struct stat st; /* of the descriptor */
    bool regular;   /* a regular file (else a block device) */
    bool created;   /* made by backing_file_open() */
    bool direct;    /* O_DIRECT in use */
};

/* Open `path` read-write for a store; everything is decided on what was opened (fstat), never
 * on the name alone:
 *  - missing: created with O_EXCL and mode 0600 (never through a symbolic link, never a
 *    file somebody made first);
 *  - a symbolic link: followed only if its directory is this user's (or root's) and nobody
 *    else may write there; else -ELOOP;
 *  - a block device: opened O_EXCL, so the kernel refuses one mounted, swapped on, held by
 *    another device or claimed by a program (-EBUSY);
 *  - a regular file: it must belong to this user (-EPERM), give group and others no
 *    permission (-EACCES), have no other hard link (-EMLINK), not be locked by another store
 *    (-EBUSY; it is locked, flock, from then on), and be empty unless `flags` has
 *    UZRAM_BACKING_OVERWRITE (-EEXIST);
 *  - anything else: -EINVAL.
 * Returns 0 with `out` filled, or a negative errno (a file it made is removed again). */
int backing_file_open(const char *path, unsigned flags, struct backing_file *out);

/* Whether the file `st` describes is this user's alone, the rule for what holds a device's data
 * (a backing store's file, a state file): its owner this process's effective user (-EPERM), no
 * permission for group or others (-EACCES), no second name (-EMLINK). A file with no name at
 * all (a memfd, or one removed since it was opened) has its owner checked alone: nobody can
 * open it by a path. 0 when it holds. */
int file_private(const struct stat *st);

/* Close the store's descriptor after a failure, and remove the file if backing_file_open()
 * made it and `path` still names it. */
void backing_file_abandon(const char *path, struct backing_file *file);

#endif
