/* recompress.h - recompression of stored pages with secondary algorithms (internal).
 * recompress.c runs the passes (by request and in the background); recompress_page.c does one
 * page. */
#ifndef UZRAM_RECOMPRESS_H
#define UZRAM_RECOMPRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct uzram;

/* The background recompressor of a device (struct uzram): a thread the
 * library starts when recompress_idle is set and stops when it is 0, at
 * reset (paused) and at destroy. */
struct recompressor {
    /* Held through a start or stop (uzram_set_recompress_idle, destroy): one at a time,
     * so that a start racing a stop cannot leave a setting without its thread. */
    pthread_mutex_t control;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool running;          /* the thread exists (under lock) */
    bool in_pass;          /* it is working through the table (under lock) */
    unsigned requests;     /* passes by request (uzram_recompress) running (under lock) */
    _Atomic bool stop;     /* leave: recompress_idle 0 or destroy */
    _Atomic bool paused;   /* a reset is running: no pass begins, running ones end */
    uint64_t idle_seconds; /* under lock; 0: off */
    _Atomic uint64_t rate; /* pages per second; 0: no limit */
    int priority_class;    /* what the thread got: 1 SCHED_IDLE, 2 nice 19, 0 none */
};

/* Set up and tear down (store.c calls these from create, reset, destroy). */
void recompressor_init(struct recompressor *recompressor);
void recompressor_destroy(struct uzram *dev);
void recompressor_pause(struct uzram *dev);
void recompressor_resume(struct uzram *dev);

/* What the attributes show: recompress_idle, recompress_rate, and how low
 * the thread's CPU priority went (1 SCHED_IDLE, 2 nice 19, 0 neither or no
 * thread yet). */
void recompressor_settings(struct uzram *dev, uint64_t *idle_seconds, uint64_t *rate,
                           int *priority_class);

#endif
