/* same.h - detection and fill of same-filled pages (internal).
 * A page is same-filled when it is one 8-byte word repeated 512 times. */
#ifndef UZRAM_SAME_H
#define UZRAM_SAME_H

#include <stdbool.h>
#include <stdint.h>

/* True if the 4096-byte page is one word repeated; *word gets the word.
 * Compares the first word with the last before scanning (most pages that
 * are not same-filled fail there), then scans with the widest vector loads
 * the CPU has (chosen once at run time). */
bool same_filled_check(const void *page, uint64_t *word);

/* Fill a 4096-byte page with `word`. */
void same_filled_fill(void *page, uint64_t word);

#endif
