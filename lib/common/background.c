/* background.c - the engine's own threads: started with every signal blocked and named; the
 * recompressor makes itself nicer than its creator, the reserve's thread goes below its
 * creator (see background.h). */
#include "common/background.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

int background_start(pthread_t *thread, void *(*main)(void *), void *arg, const char *name)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(thread, NULL, main, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        pthread_setname_np(*thread, name); /* best effort: a name for top -H, ps -L */
    return rc;
}

int background_nicer(int steps)
{
    /* A real-time creator (serve --swap runs its threads SCHED_FIFO) would make this thread
     * real-time too, above every ordinary one: it goes to the ordinary policy first. */
    int policy = SCHED_OTHER;
    struct sched_param param = {0};
    if (pthread_getschedparam(pthread_self(), &policy, &param) == 0 &&
        (policy == SCHED_FIFO || policy == SCHED_RR)) {
        param.sched_priority = 0;
        int rc = pthread_setschedparam(pthread_self(), SCHED_OTHER, &param);
        if (rc != 0)
            return -rc;
    }
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, tid);
    if (nice == -1 && errno != 0)
        return -errno;
    nice = nice + steps > 19 ? 19 : nice + steps;
    return setpriority(PRIO_PROCESS, tid, nice) == 0 ? nice : -errno;
}

int background_below_creator(void)
{
    int policy = SCHED_OTHER;
    struct sched_param param = {0};
    int rc = pthread_getschedparam(pthread_self(), &policy, &param);
    if (rc != 0 || (policy != SCHED_FIFO && policy != SCHED_RR))
        return rc;
    if (param.sched_priority > sched_get_priority_min(policy)) {
        param.sched_priority--;
        return pthread_setschedparam(pthread_self(), policy, &param);
    }
    param.sched_priority = 0;
    return pthread_setschedparam(pthread_self(), SCHED_OTHER, &param);
}
