/* state_ab.c - a device in anonymous memory against one in a state file (issue 29), same data,
 * rounds interleaved: write and read speed through the library (one thread, 4 KiB writes,
 * 64 KiB reads), the memory the pool accounts and the memory the process and its state file
 * take; and for the state file the time uzram_adopt() takes, after a clean end and after a
 * SIGKILL. Run by bench/state-ab.sh, which builds it against build/libuzram.a.
 *
 * Usage: state_ab DISK_MIB STORED_MIB ROUNDS
 * Prints one line per measurement: "MODE ROUND KEY VALUE". */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/datagen.h"
#include "uzram.h"

#define PAGE 4096u
#define READ_BYTES (64u << 10)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* kB of a /proc/self/status field. */
static uint64_t status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    size_t length = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, length) == 0 && line[length] == ':')
            kb = strtoull(line + length + 1, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* The mix of page contents: mostly text, some half-compressible, same-filled and random. */
static void page_at(uint64_t index, unsigned char *page)
{
    static const enum datagen_kind mix[20] = {
        DATAGEN_TEXT, DATAGEN_TEXT, DATAGEN_TEXT, DATAGEN_TEXT, DATAGEN_TEXT,
        DATAGEN_TEXT, DATAGEN_TEXT, DATAGEN_TEXT, DATAGEN_TEXT, DATAGEN_TEXT,
        DATAGEN_TEXT, DATAGEN_TEXT, DATAGEN_HALF, DATAGEN_HALF, DATAGEN_HALF,
        DATAGEN_HALF, DATAGEN_HALF, DATAGEN_SAME, DATAGEN_ZERO, DATAGEN_RANDOM,
    };
    datagen_page(29, mix[(index * 7) % 20], index, page);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "state_ab: %s: %s\n", what, strerror(-rc));
    exit(1);
}

static void fill(struct uzram *dev, uint64_t pages, const char *mode, unsigned round)
{
    unsigned char page[PAGE];
    double start = now_s(), busy = 0;
    for (uint64_t i = 0; i < pages; i++) {
        page_at(i, page);
        double t = now_s();
        int rc = uzram_write(dev, i * PAGE, page, PAGE);
        busy += now_s() - t;
        if (rc)
            die("write", rc);
    }
    (void)start;
    printf("%s %u write_mib_s %.1f\n", mode, round, (double)pages * PAGE / (1 << 20) / busy);
}

static void read_back(struct uzram *dev, uint64_t pages, const char *mode, unsigned round)
{
    static unsigned char buf[READ_BYTES];
    unsigned char want[PAGE];
    double start = now_s();
    for (uint64_t at = 0; at < pages * PAGE; at += READ_BYTES) {
        int rc = uzram_read(dev, at, buf, READ_BYTES);
        if (rc)
            die("read", rc);
    }
    double took = now_s() - start;
    printf("%s %u read_mib_s %.1f\n", mode, round, (double)pages * PAGE / (1 << 20) / took);
    for (uint64_t i = 0; i < pages; i += 997) { /* a sample checked, outside the timing */
        page_at(i, want);
        if (uzram_read(dev, i * PAGE, buf, PAGE) || memcmp(buf, want, PAGE))
            die("read back differs", -EIO);
    }
}

static void memory(struct uzram *dev, int fd, uint64_t anon_before, const char *mode,
                   unsigned round)
{
    struct uzram_stats stats;
    uzram_get_stats(dev, &stats, sizeof stats);
    uint64_t file = 0;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0)
        file = (uint64_t)st.st_blocks * 512;
    uint64_t anon = (status_kb("RssAnon") - anon_before) << 10;
    printf("%s %u mem_used_mib %.1f\n", mode, round, stats.mem_used_total / 1048576.0);
    printf("%s %u memory_mib %.1f\n", mode, round, (anon + file) / 1048576.0);
}

/* Adoption, timed: of the state as uzram_destroy() left it, then after a process that
 * adopted it and wrote a page was SIGKILLed. */
static void adopt_times(int fd, unsigned round)
{
    struct uzram *dev;
    double start = now_s();
    int rc = uzram_adopt(fd, &dev);
    if (rc)
        die("adopt", rc);
    printf("state %u adopt_clean_ms %.1f\n", round, (now_s() - start) * 1e3);
    uzram_destroy(dev);
    int ready[2];
    if (pipe(ready))
        die("pipe", -errno);
    pid_t child = fork();
    if (child == 0) {
        unsigned char page[PAGE];
        memset(page, 7, sizeof page);
        if (uzram_adopt(fd, &dev) || uzram_write(dev, 0, page, PAGE) ||
            write(ready[1], "y", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char byte;
    if (read(ready[0], &byte, 1) != 1)
        die("child", -EIO);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    start = now_s();
    rc = uzram_adopt(fd, &dev);
    if (rc)
        die("adopt after kill", rc);
    printf("state %u adopt_killed_ms %.1f\n", round, (now_s() - start) * 1e3);
    uzram_destroy(dev);
}

static void one_round(bool state, bool dedup, uint64_t disk, uint64_t pages, unsigned round)
{
    const char *mode = state ? "state" : "anon";
    uint64_t anon_before = status_kb("RssAnon");
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = disk;
    config.use_dedup = dedup;
    struct uzram *dev;
    int fd = -1, rc;
    if (state) {
        fd = memfd_create("uzram-bench-state", MFD_CLOEXEC);
        rc = fd < 0 ? -errno : uzram_create_in(&config, fd, &dev);
    } else {
        rc = uzram_create(&config, &dev);
    }
    if (rc)
        die("create", rc);
    fill(dev, pages, mode, round);
    read_back(dev, pages, mode, round);
    memory(dev, fd, anon_before, mode, round);
    uzram_destroy(dev);
    if (state) {
        adopt_times(fd, round);
        close(fd);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4 && (argc != 5 || strcmp(argv[4], "dedup") != 0)) {
        fprintf(stderr, "usage: state_ab DISK_MIB STORED_MIB ROUNDS [dedup]\n");
        return 2;
    }
    bool dedup = argc == 5;
    uint64_t disk = strtoull(argv[1], NULL, 10) << 20;
    uint64_t pages = (strtoull(argv[2], NULL, 10) << 20) / PAGE;
    unsigned rounds = (unsigned)strtoul(argv[3], NULL, 10);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (unsigned round = 0; round < rounds; round++) {
        /* interleaved, and which goes first alternates */
        one_round(round % 2 == 1, dedup, disk, pages, round);
        one_round(round % 2 == 0, dedup, disk, pages, round);
    }
    return 0;
}
