/* reads.h - READ and BLOCK_STATUS (reads.c): what the engine holds, sent back as
 * simple or structured replies. */
#ifndef UZRAM_NBD_READS_H
#define UZRAM_NBD_READS_H

struct nbd_request;
struct nbd_worker;
struct uzram;

/* Each answers request `r` (checked already) on device `dev`, errors included:
 * nbd_read_simple a READ without structured replies (header, then the data);
 * nbd_read_structured a READ with them (OFFSET_DATA and OFFSET_HOLE chunks, zero runs of at
 * least NBD_SERVER_HOLE_MIN as holes); nbd_block_status the base:allocation extents. */
void nbd_read_simple(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r);
void nbd_read_structured(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r);
void nbd_block_status(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r);

#endif
