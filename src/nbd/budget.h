/* budget.h - what all connections of the process share (budget.c): the bytes of request
 * buffers larger than a worker's own, and the helper workers. */
#ifndef UZRAM_NBD_BUDGET_H
#define UZRAM_NBD_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

/* The two halves of NBD_SERVER_BUFFER_BUDGET: WRITE payloads and READ data. */
enum nbd_budget_share { NBD_BUDGET_WRITE, NBD_BUDGET_READ };

/* Take `bytes` of `share`, waiting for them if need be; true if it had to wait. */
bool nbd_budget_take(enum nbd_budget_share share, uint64_t bytes);
/* Take `bytes` of `share` only if they are free now and nobody waits for them. */
bool nbd_budget_try_take(enum nbd_budget_share share, uint64_t bytes);
void nbd_budget_give(enum nbd_budget_share share, uint64_t bytes);

/* A helper worker may start while fewer than `cap` run over all connections: true, and the
 * slot is taken until nbd_helper_slot_give(). */
bool nbd_helper_slot_take(unsigned cap);
void nbd_helper_slot_give(void);

#endif
