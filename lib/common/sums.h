/* sums.h - the check bits and sums a state file's metadata carries, so that adoption finds a
 * damaged state instead of serving wrong bytes, and the report of where the damage is
 * (internal; sums.c). What carries which (state.h has the layout):
 *  - a page slot: 7 check bits (SLOT_CHECK_MASK in its info word) over its form (state, codec,
 *    size) and value, a CRC-7: every flip of one or two bits there is found, of more 127 in 128;
 *  - an intent record, a dedup change record, the dedup move record: a 32-bit sum over what
 *    they hold, set before the record is published and cleared after it is let go;
 *  - a span directory entry: 7 check bits (CRC-7) over its class and length;
 *  - a bundle record's piece: 16 check bits in the handle's top bits, over the handle, the
 *    piece's place and the record, stored with the handle in one word;
 *  - the header: a sum over the fields fixed at creation (layout, disk size, clock base), one
 *    over each codec record (and its dictionary's bytes), one over the backing store's record.
 * Each is written with what it covers, in an order a kill at any instant leaves whole (see
 * where each is written). The pool's object bytes carry none. */
#ifndef UZRAM_SUMS_H
#define UZRAM_SUMS_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-7 (x^7 + x^3 + 1, as MMC cards use) of `length` bytes: 0 for all zero bytes. */
uint8_t sums_crc7(const uint8_t *bytes, size_t length);

/* A 32-bit sum of `length` bytes, never 0 (0 marks a record with no sum). */
uint32_t sums_32(const void *bytes, size_t length);
/* A 64-bit sum of `length` bytes. */
uint64_t sums_64(const void *bytes, size_t length);

/* The damage adoption found: the report, in this thread, formatted (printf) into the text
 * uzram_state_damage() returns; -EUCLEAN, what the caller fails with. */
int sums_damage(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* The report ("" for none), and its clearing (at the start of each adoption). */
const char *sums_damage_text(void);
void sums_damage_clear(void);

#endif
