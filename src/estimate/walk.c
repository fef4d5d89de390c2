/* walk.c - a directory as a source of `uzram estimate`: its regular files, each from a page
 * boundary (as a file system on the device would hold them), in a stable order. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/progress.h"
#include "estimate/estimate.h"

/*
 * The walk is depth first; the entries of each directory are taken in byte order of their
 * names (strcmp, not the locale's collation), so two runs over the same tree read the same
 * pages in the same order. Only what a copy of the files would hold is read: symbolic links
 * are not followed, other file systems (mount points, /proc under /) are not entered, and
 * devices, sockets and pipes are not read. Each of those, and every file or directory that
 * cannot be opened or read, is skipped and counted. Memory is one sorted name list per
 * directory level being walked, not the whole tree.
 */
struct walk_level {
    int fd; /* the directory */
    char **names;
    size_t count, next;
    size_t path_length; /* of the directory's path in walk->path */
};

struct estimate_walk {
    dev_t device; /* the file system of the top directory */
    struct walk_level *levels;
    size_t depth, capacity;
    char path[PATH_MAX]; /* of the entry being looked at, for messages */
    int file_fd;         /* the file being read, or -1 */
};

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Enter the directory open as `fd` (taken over): list and sort its names. */
static int push_level(struct estimate_walk *walk, int fd, size_t path_length)
{
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        int err = errno;
        close(fd);
        return -err;
    }
    struct walk_level level = {.fd = -1, .path_length = path_length};
    size_t capacity = 0;
    int rc = 0;
    struct dirent *entry;
    errno = 0;
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        if (level.count == capacity) {
            capacity = capacity ? capacity * 2 : 16;
            char **bigger = realloc(level.names, capacity * sizeof *bigger);
            if (bigger == NULL) {
                rc = -ENOMEM;
                break;
            }
            level.names = bigger;
        }
        if ((level.names[level.count] = strdup(entry->d_name)) == NULL) {
            rc = -ENOMEM;
            break;
        }
        level.count++;
        errno = 0;
    }
    if (rc == 0 && errno != 0)
        rc = -errno;
    if (rc == 0 && walk->depth == walk->capacity) {
        size_t more = walk->capacity ? walk->capacity * 2 : 16;
        struct walk_level *bigger = realloc(walk->levels, more * sizeof *bigger);
        if (bigger == NULL) {
            rc = -ENOMEM;
        } else {
            walk->levels = bigger;
            walk->capacity = more;
        }
    }
    if (rc < 0) {
        for (size_t i = 0; i < level.count; i++)
            free(level.names[i]);
        free(level.names);
        closedir(dir);
        return rc;
    }
    if (level.count > 0) /* an empty directory has no list at all: qsort(NULL) is undefined */
        qsort(level.names, level.count, sizeof *level.names, compare_names);
    /* The directory stream is done with; its descriptor stays for openat(). */
    level.fd = dup(dirfd(dir));
    closedir(dir);
    if (level.fd < 0) {
        rc = -errno;
        for (size_t i = 0; i < level.count; i++)
            free(level.names[i]);
        free(level.names);
        return rc;
    }
    walk->levels[walk->depth++] = level;
    return 0;
}

static void pop_level(struct estimate_walk *walk)
{
    struct walk_level *level = &walk->levels[--walk->depth];
    for (size_t i = 0; i < level->count; i++)
        free(level->names[i]);
    free(level->names);
    close(level->fd);
}

size_t estimate_pad_page(struct estimate_source *source, unsigned char *buffer, size_t got,
                         size_t page_size)
{
    size_t tail = got % page_size;
    if (tail) {
        /* a last partial page is padded with zeros, as a device would hold it */
        memset(buffer + got, 0, page_size - tail);
        source->counts.partial_bytes += tail;
        got += page_size - tail;
    }
    return got;
}

int estimate_walk_open(struct estimate_source *source, int fd, const struct stat *st)
{
    struct estimate_walk *walk = calloc(1, sizeof *walk);
    if (walk == NULL) {
        close(fd);
        return -ENOMEM;
    }
    walk->device = st->st_dev;
    walk->file_fd = -1;
    size_t length = strlen(source->name);
    while (length > 1 && source->name[length - 1] == '/')
        length--; /* "dir/" and "dir" name the same entries */
    snprintf(walk->path, sizeof walk->path, "%.*s", (int)length, source->name);
    int rc = push_level(walk, fd, strlen(walk->path));
    if (rc < 0) {
        free(walk->levels);
        free(walk);
        return rc;
    }
    source->walk = walk;
    return 0;
}

void estimate_walk_close(struct estimate_source *source)
{
    struct estimate_walk *walk = source->walk;
    if (walk == NULL)
        return;
    while (walk->depth > 0)
        pop_level(walk);
    if (walk->file_fd >= 0)
        close(walk->file_fd);
    free(walk->levels);
    free(walk);
    source->walk = NULL;
}

/* Open the next regular file of the walk into walk->file_fd; false at the end. */
static bool next_file(struct estimate_source *source)
{
    struct estimate_walk *walk = source->walk;
    struct estimate_skipped *skipped = &source->skipped;
    while (walk->depth > 0) {
        struct walk_level *level = &walk->levels[walk->depth - 1];
        if (level->next == level->count) {
            pop_level(walk);
            continue;
        }
        const char *name = level->names[level->next++];
        int n = snprintf(walk->path + level->path_length, sizeof walk->path - level->path_length,
                         "/%s", name);
        if (n < 0 || (size_t)n >= sizeof walk->path - level->path_length) {
            skipped->unreadable++; /* a path longer than PATH_MAX */
            continue;
        }
        struct stat st;
        if (fstatat(level->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            skipped->unreadable++; /* vanished since the listing, or no permission */
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            skipped->links++;
            continue;
        }
        if (S_ISBLK(st.st_mode) || S_ISCHR(st.st_mode)) {
            skipped->devices++;
            continue;
        }
        if (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode)) {
            skipped->sockets++;
            continue;
        }
        if (st.st_dev != walk->device) {
            skipped->other_file_systems++;
            continue;
        }
        bool is_dir = S_ISDIR(st.st_mode);
        if (!is_dir && !S_ISREG(st.st_mode)) {
            skipped->unreadable++; /* no other kind exists today; never read what is unknown */
            continue;
        }
        int fd = openat(level->fd, name,
                        O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | (is_dir ? O_DIRECTORY : 0));
        if (fd < 0) {
            skipped->unreadable++;
            continue;
        }
        if (is_dir) {
            if (push_level(walk, fd, level->path_length + (size_t)n) < 0)
                skipped->unreadable++;
            continue;
        }
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        walk->file_fd = fd;
        source->files++;
        return true;
    }
    return false;
}

long estimate_walk_read(struct estimate_source *source, unsigned char *buffer, size_t capacity,
                        size_t page_size)
{
    struct estimate_walk *walk = source->walk;
    size_t got = 0;
    while (got < capacity) {
        if (walk->file_fd < 0 && !next_file(source))
            break;
        ssize_t n = read(walk->file_fd, buffer + got, capacity - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n > 0) {
            got += (size_t)n;
            source->counts.bytes += (uint64_t)n;
            source->position += (uint64_t)n;
            continue;
        }
        if (n < 0)
            source->skipped.unreadable++; /* what was read of it stays counted */
        close(walk->file_fd);
        walk->file_fd = -1;
        /* The next file starts at a page boundary. */
        got = estimate_pad_page(source, buffer, got, page_size);
    }
    /* A full buffer can end inside a file: that is whole pages, since capacity is. */
    return (long)got;
}

/* nftw() has no context argument: the count in progress, for the one walk at a time. */
static struct {
    uint64_t bytes, files;
    struct progress progress;
} total_walk;

static int count_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (type == FTW_F && S_ISREG(st->st_mode)) {
        total_walk.bytes += (uint64_t)st->st_size;
        total_walk.files++;
        progress_show(&total_walk.progress, total_walk.files, 0, NULL);
    }
    return 0;
}

uint64_t estimate_walk_total(const char *path)
{
    char what[PATH_MAX + 16];
    snprintf(what, sizeof what, "counting %s", path);
    total_walk.bytes = total_walk.files = 0;
    progress_begin(&total_walk.progress, what, 0, "files", false);
    /* The walk's rules: no symbolic links followed, no other file system entered. */
    int rc = nftw(path, count_file, 32, FTW_PHYS | FTW_MOUNT);
    progress_end(&total_walk.progress);
    return rc == 0 ? total_walk.bytes : 0;
}
