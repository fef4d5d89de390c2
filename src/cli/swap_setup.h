/* swap_setup.h - the one way a uzram device becomes swap (swap_setup.c): the swapon command
 * line of `uzram attach --swap --swapon`, of the uzram-swap@ unit (which runs that) and of
 * zram-generator's swap devices, and the line `attach --swap` prints for doing it by hand. */
#ifndef UZRAM_SWAP_SETUP_H
#define UZRAM_SWAP_SETUP_H

#include <stdbool.h>
#include <stddef.h>

/* zram-generator's swap-priority default, and the unit's. */
#define SWAP_PRIORITY_DEFAULT 100

/* The most words swapon_argv() fills, its NULL included. */
#define SWAPON_ARGS_MAX 8

/* swapon's argv for `node` (NULL: none, for printing): always with discard (see swap_setup.c for
 * why), the priority, and `options` (swapon -o, e.g. zram-generator's; NULL or "": none).
 * `priority_text` holds the priority's digits (16 bytes). Returns the number of words before the
 * NULL. */
int swapon_argv(const char *node, int priority, const char *options, char priority_text[16],
                const char *argv[SWAPON_ARGS_MAX]);

/* The same command as one line for people to read or paste ("swapon --discard ... NODE";
 * `node` NULL: without it). */
void swapon_line(const char *node, int priority, const char *options, char *line, size_t size);

/* Make `node` swap: mkswap (when `mkswap`), then swapon_argv()'s command. 0, or -1 with what
 * failed and what it said in `message`. */
int swap_start(const char *node, bool mkswap, int priority, const char *options, char *message,
               size_t message_size);

#endif
