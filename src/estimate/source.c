/* source.c - the sources of `uzram estimate`: files, block devices, stdin, processes (directories:
 * walk.c). Large sequential reads; a process is read through /proc/PID/mem, mapping by mapping. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "estimate/estimate.h"

#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_SWAPPED (1ull << 62)
#define SYSTEM_PAGE 4096u

static int fail(const char *what, const char *name, int err)
{
    fprintf(stderr, "uzram estimate: %s %s: %s\n", what, name, strerror(err));
    return -err;
}

int estimate_open_file(struct estimate_source *source, const char *path)
{
    memset(source, 0, sizeof *source);
    source->pagemap_fd = -1;
    source->name = strdup(path);
    if (!source->name)
        return fail("cannot open", path, ENOMEM);
    if (strcmp(path, "-") == 0) {
        source->kind = SOURCE_STDIN;
        source->name[0] = '-';
        source->fd = STDIN_FILENO;
        return 0;
    }
    source->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (source->fd < 0)
        return fail("cannot open", path, errno);
    struct stat st;
    if (fstat(source->fd, &st) < 0)
        return fail("cannot open", path, errno);
    if (S_ISDIR(st.st_mode)) {
        source->kind = SOURCE_DIRECTORY;
        int rc = estimate_walk_open(source, source->fd, &st);
        source->fd = -1; /* the walk has it, or closed it */
        return rc < 0 ? fail("cannot read the directory", path, -rc) : 0;
    }
    if (S_ISBLK(st.st_mode)) {
        source->kind = SOURCE_DEVICE;
        uint64_t bytes = 0;
        if (ioctl(source->fd, BLKGETSIZE64, &bytes) == 0)
            source->size = bytes;
    } else {
        source->kind = SOURCE_FILE;
        if (S_ISREG(st.st_mode))
            source->size = (uint64_t)st.st_size;
    }
    /* we read once, front to back: let the kernel read ahead and drop behind */
    posix_fadvise(source->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return 0;
}

/* The mappings a swap device would see: private anonymous memory (no file,
 * or [heap], [stack], [anon:...]) and private writable file mappings (their
 * written pages are anonymous copies). Kernel-provided areas are never
 * swapped and mostly cannot be read. */
static bool default_mapping(const char *perms, const char *path)
{
    if (perms[3] != 'p')
        return false;
    if (!*path)
        return true;
    if (path[0] == '[')
        return strcmp(path, "[heap]") == 0 || strncmp(path, "[stack", 6) == 0 ||
               strncmp(path, "[anon:", 6) == 0;
    return perms[1] == 'w';
}

int estimate_open_process(struct estimate_source *source, const char *pid_text, bool all_mappings)
{
    memset(source, 0, sizeof *source);
    source->kind = SOURCE_PROCESS;
    source->fd = -1;
    source->pagemap_fd = -1;
    char *end;
    errno = 0;
    long pid = strtol(pid_text, &end, 10);
    if (errno || end == pid_text || *end || pid <= 0 || pid > 0x3fffffff) {
        fprintf(stderr, "uzram estimate: --pid wants a process id, not '%s'\n", pid_text);
        return -EINVAL;
    }
    source->pid = (int)pid;
    if (asprintf(&source->name, "pid %ld", pid) < 0) {
        source->name = NULL;
        return fail("cannot open", "process", ENOMEM);
    }

    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/maps", pid);
    FILE *maps = fopen(path, "re");
    if (!maps) {
        int err = errno;
        if (err == ENOENT)
            fprintf(stderr, "uzram estimate: no process %ld\n", pid);
        else
            fprintf(stderr, "uzram estimate: cannot read the mappings of process %ld: %s\n", pid,
                    strerror(err));
        return -err;
    }
    char *line = NULL;
    size_t line_size = 0, capacity = 0;
    int rc = 0;
    while (getline(&line, &line_size, maps) > 0) {
        unsigned long long start, stop;
        char perms[8] = "";
        int path_offset = 0;
        if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %n", &start, &stop, perms, &path_offset) < 3)
            continue;
        char *name = path_offset ? line + path_offset : line + strlen(line);
        name[strcspn(name, "\n")] = 0;
        if (perms[0] != 'r' || stop <= start)
            continue;
        if (!all_mappings && !default_mapping(perms, name))
            continue;
        if (source->mapping_count == capacity) {
            capacity = capacity ? capacity * 2 : 64;
            struct estimate_mapping *grown =
                realloc(source->mappings, capacity * sizeof *source->mappings);
            if (!grown) {
                rc = -ENOMEM;
                break;
            }
            source->mappings = grown;
        }
        source->mappings[source->mapping_count++] = (struct estimate_mapping){start, stop};
        source->mapped_bytes += stop - start;
    }
    free(line);
    if (ferror(maps) && !rc)
        rc = -errno;
    fclose(maps);
    if (rc < 0)
        return fail("cannot read the mappings of", source->name, -rc);
    source->size = source->mapped_bytes;
    if (source->mapping_count)
        source->address = source->mappings[0].start;

    snprintf(path, sizeof path, "/proc/%ld/mem", pid);
    source->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (source->fd < 0) {
        int err = errno;
        if (err == ENOENT)
            fprintf(stderr, "uzram estimate: no process %ld\n", pid);
        else
            fprintf(stderr,
                    "uzram estimate: cannot read the memory of process %ld: %s "
                    "(it needs the right to ptrace it)\n",
                    pid, strerror(err));
        return -err;
    }
    /* without pagemap every page of a mapping is read (untouched ones read as zeros) */
    snprintf(path, sizeof path, "/proc/%ld/pagemap", pid);
    source->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC);
    return 0;
}

void estimate_close(struct estimate_source *source)
{
    estimate_walk_close(source);
    if (source->fd > STDIN_FILENO)
        close(source->fd);
    if (source->pagemap_fd >= 0)
        close(source->pagemap_fd);
    source->fd = source->pagemap_fd = -1;
    free(source->mappings);
    source->mappings = NULL;
    free(source->name);
    source->name = NULL;
    free(source->counts.lengths);
    source->counts.lengths = NULL;
}

/* ------------------------------------------------------------------------
 * Reading
 * ---------------------------------------------------------------------- */

static long read_stream(struct estimate_source *source, unsigned char *buffer, size_t capacity,
                        size_t page_size)
{
    size_t got = 0;
    while (!source->at_end && got < capacity) {
        ssize_t n = read(source->fd, buffer + got, capacity - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fail("cannot read", source->name, errno);
        if (n == 0)
            source->at_end = true;
        got += (size_t)n;
    }
    source->counts.bytes += got;
    source->position += got;
    return (long)estimate_pad_page(source, buffer, got, page_size);
}

/* Read one populated run of the process; ranges that fail are skipped page
 * by page and counted, never fatal (guard pages, [vvar], vanished mappings). */
static size_t read_process_run(struct estimate_source *source, unsigned char *buffer,
                               uint64_t address, size_t length)
{
    size_t kept = 0, done = 0;
    while (done < length) {
        ssize_t n = pread(source->fd, buffer + kept, length - done, (off_t)(address + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n > 0) {
            n -= n % SYSTEM_PAGE;
            if (n == 0)
                n = -1;
        }
        if (n <= 0) {
            /* skip one page and try again after it */
            source->counts.unreadable_bytes += SYSTEM_PAGE;
            done += SYSTEM_PAGE;
            continue;
        }
        kept += (size_t)n;
        done += (size_t)n;
    }
    return kept;
}

static long read_process(struct estimate_source *source, unsigned char *buffer, size_t capacity)
{
    size_t got = 0;
    uint64_t entries[512]; /* pagemap of 2 MiB at a time */
    while (got < capacity && source->mapping_index < source->mapping_count) {
        struct estimate_mapping *mapping = &source->mappings[source->mapping_index];
        if (source->address >= mapping->end) {
            if (++source->mapping_index < source->mapping_count)
                source->address = source->mappings[source->mapping_index].start;
            continue;
        }
        uint64_t pages = (mapping->end - source->address) / SYSTEM_PAGE;
        uint64_t room = (capacity - got) / SYSTEM_PAGE;
        if (pages > room)
            pages = room;
        if (pages > 512)
            pages = 512;
        size_t known = 0;
        if (source->pagemap_fd >= 0) {
            ssize_t n = pread(source->pagemap_fd, entries, pages * sizeof entries[0],
                              (off_t)(source->address / SYSTEM_PAGE * sizeof entries[0]));
            known = n > 0 ? (size_t)n / sizeof entries[0] : 0;
        }
        /* runs of populated pages are read in one call each */
        uint64_t i = 0;
        while (i < pages) {
            bool populated = i >= known || (entries[i] & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED));
            uint64_t j = i + 1;
            while (j < pages &&
                   (j >= known || (entries[j] & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED))) == populated)
                j++;
            if (populated) {
                size_t kept = read_process_run(
                    source, buffer + got, source->address + i * SYSTEM_PAGE, (j - i) * SYSTEM_PAGE);
                got += kept;
                source->counts.bytes += kept;
            } else {
                source->counts.unpopulated_pages += j - i;
            }
            i = j;
        }
        source->address += pages * SYSTEM_PAGE;
        source->position += pages * SYSTEM_PAGE;
    }
    return (long)got;
}

long estimate_read(struct estimate_source *source, unsigned char *buffer, size_t capacity,
                   size_t page_size)
{
    if (source->kind == SOURCE_PROCESS)
        return read_process(source, buffer, capacity);
    if (source->kind == SOURCE_DIRECTORY)
        return estimate_walk_read(source, buffer, capacity, page_size);
    return read_stream(source, buffer, capacity, page_size);
}
