/* progress.h - one progress line on a terminal for work that takes a while (estimate of large
 * inputs, recompression and writeback passes, attach): what, how far of how much, the rate and
 * the time left; nothing at all when standard error is not a terminal. */
#ifndef UZRAM_PROGRESS_H
#define UZRAM_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct progress {
    char what[160];
    const char *unit;  /* NULL: amounts are bytes (shown as sizes); "pages", ...; "": none */
    uint64_t total;    /* 0: unknown */
    bool on;           /* standard error is a terminal, and not --quiet */
    bool drawn;        /* a line is on the screen */
    uint64_t start_ms; /* CLOCK_MONOTONIC */
    uint64_t last_ms;
    unsigned after_ms; /* the first line comes after this long (default 1 s) */
};

/* Start: `what` heads the line; `total` (0 unknown) in bytes, or in `unit`s. `quiet`
 * switches it off. The first line is drawn after UZRAM_PROGRESS_AFTER_MS (default 1000). */
void progress_begin(struct progress *p, const char *what, uint64_t total, const char *unit,
                    bool quiet);

/* `done` so far (shown, and the rate), `position` (of total) for the time left (usually
 * done); `extra` text after it, or NULL. Redraws at most 4 times a second. */
void progress_show(struct progress *p, uint64_t done, uint64_t position, const char *extra);

/* Take the line away (the next output starts on a clean line). */
void progress_end(struct progress *p);

/* Run fn(arg) on a thread of its own and wait for it; meanwhile, on a terminal, every 250 ms
 * tick(arg, p) says how far it is (NULL: the time it takes so far). Returns fn's result. */
int progress_run(struct progress *p, int (*fn)(void *), void (*tick)(void *, struct progress *),
                 void *arg);

#endif
