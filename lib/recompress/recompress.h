/* recompress.h - recompression of stored pages with secondary algorithms (internal;
 * recompress.c): the device's background recompressor as create, reset, destroy and the
 * attributes see it. recompress.c runs the passes (by request and in the background);
 * recompress_page.c does one page. */
#ifndef UZRAM_RECOMPRESS_H
#define UZRAM_RECOMPRESS_H

#include <stdint.h>

struct uzram;

/* Create: make dev->recompressor, with no thread yet (0 or -ENOMEM). Destroy: stop the
 * thread and free it. */
int recompressor_create(struct uzram *dev);
void recompressor_destroy(struct uzram *dev);
/* Reset, before and after: no pass begins and the running ones end (waited for); passes may
 * run again. */
void recompressor_pause(struct uzram *dev);
void recompressor_resume(struct uzram *dev);

/* What the attributes show: recompress_idle, recompress_rate, recompress_cpu. */
void recompressor_settings(struct uzram *dev, uint64_t *idle_seconds, uint64_t *rate,
                           unsigned *cpu_percent);

#ifdef UZRAM_TEST_HOOKS
/* Passes the background thread has finished. */
uint64_t recompressor_test_passes(struct uzram *dev);
#endif

#endif
