/* swap.c - `serve --swap`: what a user-space swap target needs to make progress while the
 * kernel is short of memory. Memory locked, allocations that never wait for I/O, no OOM kill,
 * and the memory a swap-out needs faulted in ahead of need, so that serving one never waits
 * for the kernel to find a free page (it may be waiting for that swap-out to free one). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "attach/attach.h"
#include "common/threads.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#define PR_GET_IO_FLUSHER 58
#endif
#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif

#define OOM_SCORE_ADJ "/proc/self/oom_score_adj"

/* Heap faulted in at the start, free at its top until used (below HEAP_TRIM, the keeper
 * leaves it): what a swap server allocates before its first requests (0.5 MiB measured in
 * tests/vm/swap-memory.sh) and then in them: each request thread makes its codec contexts at
 * its first write (lz4 16 KiB, zstd up to 300 KiB, deflate levels 2-9 650 KiB: two threads
 * of it at once outrun this and the keeper's room, and the second grows the heap once). */
#define HEAP_RESERVE (1u << 20)
/* Free heap the keeper thread keeps at the top of the heap, faulted in, so that a malloc()
 * never grows the heap itself: requests allocate nothing once their thread's codec contexts
 * are made (the pool's span headers have memory of their own, lib/pool/pool_headers.c), the
 * background work does, and the keeper looks again every HEAP_KEEP_MS. Above HEAP_TRIM free
 * at the top (after a dictionary's training, say), it gives the top back down to
 * HEAP_HEADROOM. */
#define HEAP_HEADROOM (512u << 10)
#define HEAP_TRIM (4u << 20)
#define HEAP_KEEP_MS 100
/* Blocks this large get mappings of their own, unmapped when freed: a request never
 * allocates one (its largest blocks are codec contexts of at most 300 KiB), the background
 * work does (a dictionary's training: tables of 2 and 4 MiB, contexts for a bundle at a high
 * level), and from the heap they would stay. */
#define HEAP_OWN_MAPPING (1 << 20)
/* The pool memory each device keeps faulted in ahead of need (uzram_set_mem_reserve). */
#define POOL_RESERVE (4u << 20)
/* What a device with a state file keeps besides in its reserve for its successor: after a
 * crash under memory pressure, the memory the dead server freed goes to whoever asks first
 * (the processes whose swap-out waits for the device), and a successor that must fault in
 * its heap from what is left waited in reclaim for swap-out to itself (tests/vm/
 * ublk-restart.sh swap: the heap's memset below, 1.7 MiB short, 763 pages free). The state
 * file keeps these pages through the crash (noswap tmpfs: no one else can take them); the
 * successor gives them back just before it faults its heap in (swap_successor_memory()). */
#define SUCCESSOR_MEMORY (32u << 20)
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

/* The end of the heap faulted in so far (the keeper's; the heap below it is resident). */
static char *heap_populated;

/* Where the heap begins: start_brk, the 47th field of /proc/self/stat (Linux 3.5); NULL if
 * unknown. */
static char *heap_start(void)
{
    char text[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return NULL;
    text[n] = '\0';
    char *field = strrchr(text, ')'); /* the end of field 2, the command's name */
    for (int at = 2; field != NULL && at < 47; at++)
        field = strchr(field + 1, ' ');
    return field != NULL ? (char *)(uintptr_t)strtoull(field + 1, NULL, 10) : NULL;
}

/* Fault in the heap from heap_populated to its end (MADV_POPULATE_WRITE, Linux 5.14: the
 * pages' contents stay as they are, so a block another thread has just been given is safe;
 * without it, mlock() faults them in, which locks them as mlockall already does). The first
 * call takes the whole heap: blocks calloc() got from fresh memory are in use but were never
 * written, and so are the pages past the last block that brk() added with it. */
static void heap_populate(void)
{
    char *end = sbrk(0);
    if (end == (char *)-1)
        return;
    if (heap_populated == NULL) /* the first call: the whole heap */
        heap_populated = heap_start();
    if (heap_populated == NULL || end < heap_populated) { /* unknown, or trimmed */
        heap_populated = end;
        return;
    }
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    char *from = (char *)((uintptr_t)heap_populated & ~(page - 1));
    if (end > from && madvise(from, (size_t)(end - from), MADV_POPULATE_WRITE) < 0 &&
        errno == EINVAL)
        (void)mlock(from, (size_t)(end - from));
    heap_populated = end;
}

/* The heap's keeper: HEAP_HEADROOM free at its top, faulted in, at every HEAP_KEEP_MS, so
 * that the heap grows (brk, which waits for the address space's lock, and page faults, which
 * wait for memory) here and not in a request; and what a burst of the background work left
 * free at the top beyond HEAP_TRIM given back (malloc_trim). At real-time priority 1, below
 * the request threads, as the pool reserve's thread (lib/pool/pool_reserve.c says why). It
 * also runs the guard on a stall at the memory limit (swap_guard.c), a look once a second. */
static void *heap_keeper_main(void *arg)
{
    (void)arg;
    struct sched_param below = {.sched_priority = 1};
    pthread_setschedparam(pthread_self(), SCHED_FIFO, &below);
    pthread_setname_np(pthread_self(), "uzram-heap");
    for (;;) {
        struct mallinfo2 heap = mallinfo2();
        if (heap.keepcost > HEAP_TRIM)
            malloc_trim(HEAP_HEADROOM);
        else if (heap.keepcost < HEAP_HEADROOM) {
            /* The top grows by what it lacks (glibc takes a block this large from the top
             * unless a free one elsewhere has room, which is room as good). */
            void *grow = malloc(HEAP_HEADROOM);
            free(grow);
        }
        heap_populate();
        swap_guard_tick();
        struct timespec pause = {0, HEAP_KEEP_MS * 1000000L};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* One heap for every thread (a thread's own arena would fault its memory in as it grows),
 * blocks below HEAP_OWN_MAPPING from it, never trimmed by free() (brk in a request: it waits
 * for the address space's lock),
 * HEAP_RESERVE of it faulted in now, before the server's own threads start, and its keeper
 * started, which keeps room at its top: the heap must not grow while a swap-out waits, since
 * glibc faults the new memory in with its lock held, which every other malloc() then waits
 * for. (A sanitizer's allocator ignores these settings.) */
void swap_memory_ahead(void)
{
    /* In blocks below HEAP_OWN_MAPPING, so that they come from the heap, and all held at
     * once, so that the heap grows by all of them. */
    enum { BLOCK = HEAP_OWN_MAPPING / 2, BLOCKS = HEAP_RESERVE / BLOCK };
    unsigned char *heap[BLOCKS];
    for (size_t i = 0; i < BLOCKS; i++)
        if ((heap[i] = malloc(BLOCK)) != NULL) {
            /* Not zero: the compiler would make malloc + memset 0 a calloc(), which fresh
             * memory from the kernel lets glibc skip. */
            memset(heap[i], 0x5a, BLOCK);
            __asm__ volatile("" : : "r"(heap[i]) : "memory");
        }
    for (size_t i = 0; i < BLOCKS; i++)
        free(heap[i]);
    heap_populate();
    /* Every signal blocked in it: the server takes its signals through a signalfd. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    (void)util_thread_start(NULL, heap_keeper_main, NULL, 256u << 10);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int swap_device_prepare(struct uzram *dev)
{
    return uzram_set_mem_reserve(dev, POOL_RESERVE);
}

int swap_successor_memory(struct uzram *dev, bool keep)
{
    size_t size;
    bool state = uzram_state_area(dev, &size) != NULL;
    return uzram_set_mem_reserve(dev, POOL_RESERVE + (state && keep ? SUCCESSOR_MEMORY : 0));
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
    /* A real-time thread may take pages below the min watermark, down to half of it
     * (ALLOC_MIN_RESERVE): so may the server's threads (they inherit the policy) while the
     * page it stores is what lets the kernel get back above it. Priority 2: the pool's
     * reserve thread runs at 1, below the threads that serve requests (lib/pool/pool_reserve.c). */
    struct sched_param realtime = {.sched_priority = 2};
    rc = sched_setscheduler(0, SCHED_FIFO, &realtime) < 0 ? -errno : 0;
    if (rc < 0) {
        prctl(PR_SET_IO_FLUSHER, 0, 0, 0, 0);
        write_oom_score_adj(old_score);
        snprintf(message, message_size,
                 "--swap: SCHED_FIFO refused: %s; it needs CAP_SYS_NICE or RLIMIT_RTPRIO "
                 "(LimitRTPRIO=2 in the unit)",
                 strerror(-rc));
        return rc;
    }
    /* Locked as it is touched (MCL_ONFAULT): the pool's reserved address space costs nothing
     * until used, and nothing the write path touches can be swapped out, to us or elsewhere. */
    if (mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) < 0) {
        int err = errno;
        struct sched_param normal = {.sched_priority = 0};
        sched_setscheduler(0, SCHED_OTHER, &normal);
        prctl(PR_SET_IO_FLUSHER, 0, 0, 0, 0);
        write_oom_score_adj(old_score);
        snprintf(message, message_size,
                 "--swap: mlockall refused: %s; it needs CAP_IPC_LOCK or a large enough "
                 "RLIMIT_MEMLOCK (LimitMEMLOCK=infinity in the unit, ulimit -l unlimited)",
                 strerror(err));
        return -err;
    }
    util_thread_prefault_stack(STACK_PREFAULT);
    /* The heap's settings (swap_memory_ahead() says why) before the devices are made: the
     * threads they start (the reserve's, the recompressor) would otherwise get arenas of
     * their own, which nothing trims (a recompressor's held 17 MiB after a dictionary's
     * training, measured). */
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, HEAP_OWN_MAPPING);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    return 0;
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
        else if (sscanf(line, "VmRSS: %llu kB", &kib) == 1)
            safety->resident_kib = kib;
    }
    if (status != NULL)
        fclose(status);
    safety->memory_locked = safety->locked_kib > 0;
    struct mallinfo2 heap = mallinfo2();
    safety->heap_bytes = heap.arena;
    safety->heap_used = heap.uordblks;
    safety->heap_mapped = heap.hblkhd;
}
