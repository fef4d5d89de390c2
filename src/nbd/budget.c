/* budget.c - what all NBD connections of the process share and take turns at: the bytes of
 * request buffers larger than a worker's own, and the helper workers. */
#include <pthread.h>
#include <stdatomic.h>

#include "nbd/budget.h"
#include "nbd/limits.h"

/* Buffers larger than a worker's own, over all connections of the process,
 * hold at most NBD_SERVER_BUFFER_BUDGET bytes: half for WRITE payloads, half
 * for READ data, so that clients that do not take their READ replies (whose
 * buffers stay until the send timeout) cannot hold up anyone's WRITEs. A
 * WRITE payload is charged for the bytes that have arrived, as they arrive,
 * never for the bytes its header announces: a client that announces 32 MiB
 * and sends one byte holds one byte, and an unfinished payload is dropped at
 * its deadline. A worker that needs more than is free waits its turn (first
 * come, first served, so many takers cannot starve one); a READ never waits
 * (read_in_pieces()). One lock and one condition for both shares. */
static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t budget_freed = PTHREAD_COND_INITIALIZER;
/* A share of the budget, waited for in turn. */
struct budget {
    uint64_t limit, used;
    uint64_t next_ticket, serving; /* first come, first served */
};
static struct budget shares[] = {
    [NBD_BUDGET_WRITE] = {.limit = NBD_SERVER_BUFFER_BUDGET / 2},
    [NBD_BUDGET_READ] = {.limit = NBD_SERVER_BUFFER_BUDGET / 2},
};

bool nbd_budget_take(enum nbd_budget_share share, uint64_t bytes)
{
    struct budget *b = &shares[share];
    bool waited = false;
    pthread_mutex_lock(&budget_lock);
    uint64_t ticket = b->next_ticket++;
    while (ticket != b->serving || b->used + bytes > b->limit) {
        pthread_cond_wait(&budget_freed, &budget_lock);
        waited = true;
    }
    b->used += bytes;
    b->serving++;
    if (waited)
        pthread_cond_broadcast(&budget_freed); /* the next ticket may fit too */
    pthread_mutex_unlock(&budget_lock);
    return waited;
}

bool nbd_budget_try_take(enum nbd_budget_share share, uint64_t bytes)
{
    struct budget *b = &shares[share];
    pthread_mutex_lock(&budget_lock);
    bool taken = b->next_ticket == b->serving && b->used + bytes <= b->limit;
    if (taken)
        b->used += bytes;
    pthread_mutex_unlock(&budget_lock);
    return taken;
}

void nbd_budget_give(enum nbd_budget_share share, uint64_t bytes)
{
    struct budget *b = &shares[share];
    if (bytes == 0)
        return;
    pthread_mutex_lock(&budget_lock);
    b->used -= bytes;
    if (b->next_ticket != b->serving)
        pthread_cond_broadcast(&budget_freed);
    pthread_mutex_unlock(&budget_lock);
}

/* Helper workers over all connections of the process. */
static atomic_uint helpers_running;

bool nbd_helper_slot_take(unsigned cap)
{
    unsigned running = atomic_load_explicit(&helpers_running, memory_order_relaxed);
    while (running < cap)
        if (atomic_compare_exchange_weak(&helpers_running, &running, running + 1))
            return true;
    return false;
}

void nbd_helper_slot_give(void)
{
    atomic_fetch_sub(&helpers_running, 1);
}
