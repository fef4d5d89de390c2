/* data.c - the data sets of `uzram bench`: generated pages, or the files of --file/--tree.
 * Kept in memory before the clock starts, so the bench measures the engine, not the disk. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench.h"
#include "common/datagen.h"

const unsigned char *bench_page_at(const struct bench_data *data, uint64_t index)
{
    return data->identical ? data->pages : data->pages + index * BENCH_PAGE;
}

void bench_data_free(struct bench_data *data)
{
    free(data->pages);
    data->pages = NULL;
}

int bench_data_generate(struct bench_data *data, int kind, uint64_t seed, uint64_t pages,
                        bool identical)
{
    uint64_t stored = identical ? 1 : pages;
    data->pages = aligned_alloc(64, stored * BENCH_PAGE);
    if (!data->pages)
        return -ENOMEM;
    for (uint64_t i = 0; i < stored; i++)
        datagen_page(seed, (enum datagen_kind)kind, i, data->pages + i * BENCH_PAGE);
    data->page_count = pages;
    data->identical = identical;
    data->name = datagen_kind_name((enum datagen_kind)kind);
    return 0;
}

/* Growable buffer of whole pages for --file and --tree. */
struct page_buffer {
    unsigned char *bytes;
    uint64_t length;   /* bytes used */
    uint64_t capacity; /* bytes allocated, a multiple of BENCH_PAGE */
    uint64_t limit;    /* stop loading at this many bytes */
    uint64_t files;
    uint64_t skipped;
};

static int buffer_reserve(struct page_buffer *buf, uint64_t extra)
{
    uint64_t need = buf->length + extra;
    if (need <= buf->capacity)
        return 0;
    uint64_t capacity = buf->capacity ? buf->capacity : 64ull << 20;
    while (capacity < need)
        capacity *= 2;
    unsigned char *bytes = realloc(buf->bytes, capacity);
    if (!bytes)
        return -ENOMEM;
    buf->bytes = bytes;
    buf->capacity = capacity;
    return 0;
}

/* Append the contents of fd, then zero-fill to a page boundary: files on a
 * file system start on page boundaries, which is what lets dedup share the
 * pages of identical files. */
static int buffer_append_fd(struct page_buffer *buf, int fd)
{
    for (;;) {
        if (buf->length >= buf->limit)
            break;
        int rc = buffer_reserve(buf, 1 << 20);
        if (rc)
            return rc;
        uint64_t room = buf->limit - buf->length;
        size_t want = room < (1u << 20) ? (size_t)room : (1u << 20);
        ssize_t got = read(fd, buf->bytes + buf->length, want);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (got == 0)
            break;
        buf->length += (uint64_t)got;
    }
    uint64_t tail = buf->length % BENCH_PAGE;
    if (tail) {
        int rc = buffer_reserve(buf, BENCH_PAGE - tail);
        if (rc)
            return rc;
        memset(buf->bytes + buf->length, 0, BENCH_PAGE - tail);
        buf->length += BENCH_PAGE - tail;
    }
    return 0;
}

static struct page_buffer *tree_buffer; /* nftw gives its callback no argument */

static int tree_visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type != FTW_F || !S_ISREG(st->st_mode) || st->st_size == 0)
        return 0;
    if (tree_buffer->length >= tree_buffer->limit)
        return 1; /* stops the walk */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        tree_buffer->skipped++;
        return 0;
    }
    int rc = buffer_append_fd(tree_buffer, fd);
    close(fd);
    if (rc == -ENOMEM)
        return -1;
    if (rc)
        tree_buffer->skipped++;
    else
        tree_buffer->files++;
    return 0;
}

int bench_data_load(struct bench_data *data, const struct bench_options *opt)
{
    struct page_buffer buf = {.limit = opt->size_given ? opt->size : UINT64_MAX};
    int rc = 0;
    if (opt->tree_count) {
        tree_buffer = &buf;
        for (int i = 0; i < opt->tree_count && rc == 0; i++) {
            errno = 0;
            int walked = nftw(opt->trees[i], tree_visit, 32, FTW_PHYS);
            if (walked < 0) {
                rc = errno ? -errno : -ENOMEM;
                fprintf(stderr, "uzram bench: cannot read tree %s: %s\n", opt->trees[i],
                        strerror(-rc));
            }
        }
        tree_buffer = NULL;
    } else {
        bool use_stdin = strcmp(opt->file, "-") == 0;
        int fd = use_stdin ? STDIN_FILENO : open(opt->file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = -errno;
            fprintf(stderr, "uzram bench: cannot open %s: %s\n", opt->file, strerror(errno));
        } else {
            rc = buffer_append_fd(&buf, fd);
            if (rc)
                fprintf(stderr, "uzram bench: cannot read %s: %s\n", opt->file, strerror(-rc));
            if (!use_stdin)
                close(fd);
            buf.files = 1;
        }
    }
    if (rc == 0 && buf.length == 0) {
        fprintf(stderr, "uzram bench: %s holds no data\n",
                opt->tree_count ? opt->trees[0] : opt->file);
        rc = -ENODATA;
    }
    if (rc) {
        free(buf.bytes);
        return rc;
    }
    data->pages = buf.bytes;
    data->page_count = buf.length / BENCH_PAGE;
    data->identical = false;
    data->name = opt->tree_count ? opt->trees[0] : opt->file;
    if (!opt->json && !opt->dump_kind)
        printf("loaded %" PRIu64 " pages (%.1f MiB) from %" PRIu64 " file(s)%s%s\n",
               data->page_count, (double)buf.length / (1 << 20), buf.files,
               buf.skipped ? ", some unreadable files skipped" : "",
               buf.length >= buf.limit ? ", stopped at --size" : "");
    return 0;
}
