/* threads.c - the program's threads (threads.h): a chosen stack size, detached or joinable,
 * and the stack faulted in first when `serve --swap` asks for it. */
#include "common/threads.h"

#include <alloca.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Stack bytes every thread started here touches first (util_thread_prefault_stack()). */
static size_t stack_prefault;

void util_thread_prefault_stack(size_t bytes)
{
    stack_prefault = bytes;
}

struct thread_start {
    void *(*fn)(void *);
    void *arg;
};

static void *prefaulted_start(void *start_arg)
{
    struct thread_start start = *(struct thread_start *)start_arg;
    free(start_arg);
    unsigned char *stack = alloca(stack_prefault);
    memset(stack, 0, stack_prefault);
    __asm__ volatile("" : : "r"(stack) : "memory");
    return start.fn(start.arg);
}

int util_thread_start(pthread_t *joinable, void *(*fn)(void *), void *arg, size_t stack_size)
{
    struct thread_start *start = NULL;
    if (stack_prefault > 0 && stack_prefault < stack_size / 2) {
        if ((start = malloc(sizeof *start)) == NULL)
            return -ENOMEM;
        *start = (struct thread_start){fn, arg};
        fn = prefaulted_start;
        arg = start;
    }
    pthread_attr_t attr;
    pthread_t detached;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_size);
    if (joinable == NULL)
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(joinable ? joinable : &detached, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        free(start);
    return -rc;
}
