/* background.h - the engine's own threads (recompression, writeback, the pool's reserve): started
 * with every signal blocked and named, the recompressor nicer than its creator, the
 * reserve's thread below the threads that serve requests (internal). */
#ifndef UZRAM_BACKGROUND_H
#define UZRAM_BACKGROUND_H

#include <pthread.h>

/* pthread_create() with every signal blocked in the new thread: signals are
 * the program's (a server takes SIGTERM through a signalfd in its main
 * loop, which only works if no thread of ours lets it in). The thread is
 * named `name` (at most 15 characters: /proc/PID/task/TID/comm). Returns 0
 * or an errno value, as pthread_create() does. */
int background_start(pthread_t *thread, void *(*main)(void *), void *arg, const char *name);

/* Make the calling thread `steps` nicer than it is (at most nice 19), at the ordinary policy
 * (SCHED_OTHER, from a real-time one it inherited): it still gets the CPU when others want it
 * too, a smaller share of it. Neither needs a privilege. Returns the nice value it has now, or
 * a negative errno. */
int background_nicer(int steps);

/* Run the calling thread one real-time priority below the one it inherited from its creator
 * (from priority 1: SCHED_OTHER), so that a thread of its creator's priority preempts it at
 * once; nothing for a thread that is not real-time. Lowering needs no privilege. Returns 0 or
 * an errno value, as pthread_setschedparam() does. */
int background_below_creator(void);

#endif
