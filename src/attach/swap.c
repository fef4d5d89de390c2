/* swap.c - `serve --swap`: what a user-space swap target needs to make progress while the
 * kernel is short of memory. Memory locked, allocations that never wait for I/O, no OOM kill,
 * and the memory a swap-out needs faulted in ahead of need, so that serving one never waits
 * for the kernel to find a free page (it may be waiting for that swap-out to free one). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "attach/attach.h"
#include "common/util.h"

#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#define PR_GET_IO_FLUSHER 58
#endif
#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define OOM_SCORE_ADJ "/proc/self/oom_score_adj"

/* The free end of the heap kept resident, and how often that is checked. */
#define HEAP_RESERVE (16u << 20)
#define HEAP_KEEPER_MS 50
/* The pool memory each device keeps faulted in ahead of need (uzram_set_mem_reserve). */
#define POOL_RESERVE (16u << 20)
/* Stack every server thread touches when it starts: the deepest request path (lzo's work
 * memory, zstd, a page buffer) with room to spare. */
#define STACK_PREFAULT (256u << 10)

static int read_oom_score_adj(int *value)
{
    char text[32];
    int fd = open(OOM_SCORE_ADJ, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return -EIO;
    text[n] = '\0';
    *value = atoi(text);
    return 0;
}

static int write_oom_score_adj(int value)
{
    char text[32];
    int length = snprintf(text, sizeof text, "%d\n", value);
    int fd = open(OOM_SCORE_ADJ, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = write(fd, text, (size_t)length) == length ? 0 : -errno;
    close(fd);
    return rc;
}

/* Make the top of the heap, the free memory that malloc() carves new blocks from, at least
 * HEAP_RESERVE bytes and resident: the break is moved by a block that is freed at once, and
 * the pages are faulted in without writing (MADV_POPULATE_WRITE; a concurrent malloc() may
 * be using the start of the range). */
static void heap_top_up(void)
{
    struct mallinfo2 info = mallinfo2();
    if (info.arena == 0)
        return;
    if (info.keepcost < HEAP_RESERVE) {
        free(malloc(HEAP_RESERVE + info.keepcost));
        info = mallinfo2();
    }
    uintptr_t end = (uintptr_t)sbrk(0), page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (end - info.keepcost + page - 1) & ~(page - 1);
    if (info.keepcost > 0 && start < end)
        (void)madvise((void *)start, end - start, MADV_POPULATE_WRITE);
}

static void *heap_keeper(void *unused)
{
    (void)unused;
    for (;;) {
        struct timespec pause = {0, HEAP_KEEPER_MS * 1000000L};
        nanosleep(&pause, NULL);
        heap_top_up();
    }
    return NULL;
}

/* One heap for every thread (a thread's own arena would fault its memory in as it grows),
 * blocks up to 32 MiB from it rather than from mappings of their own (fresh pages each
 * time), nothing of it given back, and HEAP_RESERVE of it resident ahead of need, kept so by
 * a thread with every signal blocked. Server threads touch their stacks first. */
static int reserve_memory_ahead(void)
{
    /* (A sanitizer's allocator ignores these and reports no heap: it gets no reserve.) */
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    heap_top_up();
    util_thread_prefault_stack(STACK_PREFAULT);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = util_thread_start(NULL, heap_keeper, NULL, 4 * STACK_PREFAULT);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int swap_device_prepare(struct uzram *dev)
{
    return uzram_set_mem_reserve(dev, POOL_RESERVE);
}

int swap_safety_enable(char *message, size_t message_size)
{
    /* The allocations of a flusher never start I/O to reclaim memory (PF_MEMALLOC_NOIO): a
     * swap-out that reaches us can never wait for another swap-out to us. */
    if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) < 0) {
        int err = errno;
        snprintf(message, message_size,
                 "--swap: PR_SET_IO_FLUSHER refused: %s; it needs CAP_SYS_RESOURCE (root has it "
                 "unless a container or the service's CapabilityBoundingSet takes it away; a "
                 "unit run as a user needs AmbientCapabilities=CAP_SYS_RESOURCE CAP_IPC_LOCK)",
                 strerror(err));
        return -err;
    }
    int old_score = 0;
    read_oom_score_adj(&old_score);
    int rc = write_oom_score_adj(-1000);
    if (rc < 0) {
        prctl(PR_SET_IO_FLUSHER, 0, 0, 0, 0);
        snprintf(message, message_size,
                 "--swap: cannot set oom_score_adj to -1000: %s; it needs CAP_SYS_RESOURCE",
                 strerror(-rc));
        return rc;
    }
    /* Locked as it is touched (MCL_ONFAULT): the pool's reserved address space costs nothing
     * until used, and nothing the write path touches can be swapped out, to us or elsewhere. */
    if (mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) < 0) {
        int err = errno;
        prctl(PR_SET_IO_FLUSHER, 0, 0, 0, 0);
        write_oom_score_adj(old_score);
        snprintf(message, message_size,
                 "--swap: mlockall refused: %s; it needs CAP_IPC_LOCK or a large enough "
                 "RLIMIT_MEMLOCK (LimitMEMLOCK=infinity in the unit, ulimit -l unlimited)",
                 strerror(err));
        return -err;
    }
    rc = reserve_memory_ahead();
    if (rc < 0) {
        munlockall();
        prctl(PR_SET_IO_FLUSHER, 0, 0, 0, 0);
        write_oom_score_adj(old_score);
        snprintf(message, message_size, "--swap: cannot reserve memory ahead of need: %s",
                 strerror(-rc));
    }
    return rc;
}

void swap_safety_read(struct swap_safety *safety)
{
    memset(safety, 0, sizeof *safety);
    safety->io_flusher = prctl(PR_GET_IO_FLUSHER, 0, 0, 0, 0) == 1;
    read_oom_score_adj(&safety->oom_score_adj);
    FILE *status = fopen("/proc/self/status", "re");
    char line[256];
    while (status != NULL && fgets(line, sizeof line, status)) {
        unsigned long long kib;
        if (sscanf(line, "VmLck: %llu kB", &kib) == 1)
            safety->locked_kib = kib;
    }
    if (status != NULL)
        fclose(status);
    safety->memory_locked = safety->locked_kib > 0;
}
