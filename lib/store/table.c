/* table.c - the page table's memory: mapped lazily (uzram_create), so that a page of it is
 * memory once a slot in it was written; faulted in whole under a reserve (serve --swap); its
 * pages whose slots are all empty (the disk trimmed or reset there) given back to the system
 * by uzram_compact(), as a fresh device holds none. Nothing about a slot changes: an empty
 * slot reads as zero bytes either way. */
#include "store/table.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/fault.h"
#include "store/slot.h"
#include "state/state.h"

/* ThreadSanitizer does not see the kernel put a page of zeros, that is empty and unlocked
 * slots, in place of one whose locks this thread held (and never let go): a lock taken there
 * later must count as taken after this thread's reads of those slots. */
#if defined(__SANITIZE_THREAD__)
#define TSAN_ZAPPED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN_ZAPPED 1
#endif
#endif
#ifdef TSAN_ZAPPED
void __tsan_release(void *address);
#endif

#define TABLE_PAGE 4096u
#define SLOTS_PER_PAGE (TABLE_PAGE / sizeof(struct slot))
/* Pages of the table looked up in /proc/self/pagemap at a time. */
#define PAGEMAP_BATCH 512u
/* pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst): present, and mapped only
 * here, which a read of never-written memory (the shared zero page) is not. */
#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_EXCLUSIVE (1ull << 56)

uint64_t table_bytes(const struct uzram *dev)
{
    return dev->page_count * sizeof(struct slot);
}

/* mmap rather than calloc: the table of a large disk is only backed by memory where pages
 * have been written. */
int table_map(struct uzram *dev)
{
    void *table = MAP_FAILED;
    struct state_region region = state_region(dev, STATE_TABLE);
    if (FAULT_POINT(FAULT_ALLOC))
        ;
    else if (region.fd >= 0) /* the state file's table, shared */
        table = mmap(NULL, table_bytes(dev), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                     region.fd, (off_t)region.offset);
    else
        table = mmap(NULL, table_bytes(dev), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (table == MAP_FAILED)
        return -ENOMEM;
    dev->slots = table;
    return 0;
}

void table_unmap(struct uzram *dev)
{
    munmap(dev->slots, table_bytes(dev));
}

/* A write into a part of the disk never written before would otherwise fault the table in
 * (as kernel zram allocates its table whole): its pages are made present without writing to
 * them (MADV_POPULATE_WRITE, Linux 5.14), since writes may be running. An older kernel keeps
 * faulting it in as used. */
void table_prefault(struct uzram *dev)
{
    (void)madvise(dev->slots, table_bytes(dev), 23);
}

/* Whether every slot of the table page at `slots` looks empty (info and ac_time zero, as a
 * discard leaves them; value is read under the lock only, in give_back()). */
static bool page_empty(struct slot *slots)
{
    for (unsigned i = 0; i < SLOTS_PER_PAGE; i++)
        if (atomic_load_explicit(&slots[i].info, memory_order_relaxed) != 0 ||
            atomic_load_explicit(&slots[i].ac_time, memory_order_relaxed) != 0)
            return false;
    return true;
}

/* Give a table page back: a state file's is punched out of the file (its bit in the written
 * bitmap cleared first: a slot is changed with its lock held, which is ours), anonymous
 * memory's dropped. */
static bool drop_page(struct uzram *dev, struct slot *slots)
{
    struct state_region region = state_region(dev, STATE_TABLE);
    if (region.fd < 0)
        return madvise(slots, TABLE_PAGE, MADV_DONTNEED) == 0;
    uint64_t page = (uint64_t)(slots - dev->slots) / SLOTS_PER_PAGE;
    state_table_page_gone(dev->state, page);
    return fallocate(region.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     (off_t)(region.offset + page * TABLE_PAGE), TABLE_PAGE) == 0;
}

/* Give back the table page at `slots` if all its slots are empty: with all their locks held,
 * no one changes them, and the page the kernel maps in its place is all zero bytes: every
 * slot empty and unlocked. Else every lock taken is let go. */
static bool give_back(struct uzram *dev, struct slot *slots)
{
    unsigned locked = 0;
    while (locked < SLOTS_PER_PAGE && slot_trylock(&slots[locked]))
        locked++;
    bool empty = locked == SLOTS_PER_PAGE;
    for (unsigned i = 0; empty && i < SLOTS_PER_PAGE; i++)
        empty = atomic_load_explicit(&slots[i].info, memory_order_relaxed) == SLOT_LOCK &&
                slots[i].value == 0 &&
                atomic_load_explicit(&slots[i].ac_time, memory_order_relaxed) == 0;
#ifdef TSAN_ZAPPED
    for (unsigned i = 0; empty && i < SLOTS_PER_PAGE; i++)
        __tsan_release(&slots[i].info); /* before: another thread may lock a slot at once */
#endif
    if (empty && drop_page(dev, slots))
        return true;
    while (locked > 0)
        slot_unlock(&slots[--locked]);
    return false;
}

uint64_t table_give_back(struct uzram *dev)
{
    /* on a tmpfs with a size the table stays whole: touching a page given back could find
     * the tmpfs full (state.c's hold_mapped) */
    if (sysconf(_SC_PAGESIZE) != TABLE_PAGE || state_region(dev, STATE_TABLE).limited)
        return 0;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    uint64_t pages = dev->page_count / SLOTS_PER_PAGE, given = 0;
    uintptr_t first = (uintptr_t)dev->slots / TABLE_PAGE;
    uint64_t entries[PAGEMAP_BATCH];
    for (uint64_t page = 0; page < pages; page += PAGEMAP_BATCH) {
        uint64_t count = pages - page < PAGEMAP_BATCH ? pages - page : PAGEMAP_BATCH;
        ssize_t n = pread(fd, entries, count * sizeof entries[0],
                          (off_t)((first + page) * sizeof entries[0]));
        if (n != (ssize_t)(count * sizeof entries[0]))
            break;
        for (uint64_t i = 0; i < count; i++) {
            struct slot *slots = &dev->slots[(page + i) * SLOTS_PER_PAGE];
            if ((entries[i] & (PAGEMAP_PRESENT | PAGEMAP_EXCLUSIVE)) ==
                    (PAGEMAP_PRESENT | PAGEMAP_EXCLUSIVE) &&
                page_empty(slots) && give_back(dev, slots))
                given++;
        }
    }
    close(fd);
    return given;
}
