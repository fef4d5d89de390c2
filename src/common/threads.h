/* threads.h - the program's threads: started with a stack of a chosen size, and for `serve
 * --swap` with that stack faulted in before they run (threads.c). */
#ifndef UZRAM_COMMON_THREADS_H
#define UZRAM_COMMON_THREADS_H

#include <pthread.h>
#include <stddef.h>

/* Start a thread running fn(arg) with a stack of `stack_size` bytes: joinable
 * into *joinable, or detached when `joinable` is NULL. 0 or a negative errno. */
int util_thread_start(pthread_t *joinable, void *(*fn)(void *), void *arg, size_t stack_size);
/* From now on, every thread util_thread_start() starts first touches `bytes` of its stack
 * (less than half of it), so that those pages are there, and locked under mlockall(), before
 * it does any work: `serve --swap`, whose threads must not wait for memory while they serve
 * a swap-out. Call before other threads start. */
void util_thread_prefault_stack(size_t bytes);

#endif
