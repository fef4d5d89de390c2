/* dump.c - `uzram bench --dump-data`: the generated pages on stdout, or the pages of
 * --file/--tree as stored, for tools outside the engine (fio, kernel zram). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "common/datagen.h"

/* --dump-data loaded: the pages of --file/--tree exactly as the bench
 * stores them (each file from a page boundary), for kernel zram. */
static int dump_loaded(const struct bench_options *opt)
{
    if (isatty(STDOUT_FILENO)) {
        fprintf(stderr, "uzram bench: --dump-data writes binary data; redirect stdout to a file\n");
        return 2;
    }
    struct bench_data data = {0};
    if (bench_data_load(&data, opt) != 0)
        return 1;
    int status = 0;
    if (fwrite(data.pages, BENCH_PAGE, data.page_count, stdout) != data.page_count ||
        fflush(stdout) != 0) {
        fprintf(stderr, "uzram bench: writing data: %s\n", strerror(errno));
        status = 1;
    }
    bench_data_free(&data);
    return status;
}

int bench_dump(const struct bench_options *opt)
{
    if (strcmp(opt->dump_kind, "loaded") == 0) {
        if (!opt->file && !opt->tree_count) {
            fprintf(stderr, "uzram bench: --dump-data loaded needs --file or --tree\n");
            return 2;
        }
        return dump_loaded(opt);
    }
    int kind = datagen_kind_from_name(opt->dump_kind);
    if (kind < 0) {
        fprintf(stderr, "uzram bench: unknown data kind '%s' (zero same text half random)\n",
                opt->dump_kind);
        return 2;
    }
    if (isatty(STDOUT_FILENO)) {
        fprintf(stderr, "uzram bench: --dump-data writes binary data; redirect stdout to a file\n");
        return 2;
    }
    enum { CHUNK_PAGES = 256 };
    unsigned char *chunk = malloc(CHUNK_PAGES * BENCH_PAGE);
    if (!chunk) {
        fprintf(stderr, "uzram bench: out of memory\n");
        return 1;
    }
    uint64_t pages = opt->size / BENCH_PAGE;
    int status = 0;
    for (uint64_t done = 0; done < pages;) {
        uint64_t n = pages - done < CHUNK_PAGES ? pages - done : CHUNK_PAGES;
        for (uint64_t i = 0; i < n; i++)
            datagen_page(opt->seed, (enum datagen_kind)kind, done + i, chunk + i * BENCH_PAGE);
        if (fwrite(chunk, BENCH_PAGE, n, stdout) != n) {
            fprintf(stderr, "uzram bench: writing data: %s\n", strerror(errno));
            status = 1;
            break;
        }
        done += n;
    }
    if (status == 0 && fflush(stdout) != 0) {
        fprintf(stderr, "uzram bench: writing data: %s\n", strerror(errno));
        status = 1;
    }
    free(chunk);
    return status;
}
