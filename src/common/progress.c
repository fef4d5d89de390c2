/* progress.c - the progress line of long work: drawn on standard error with \r when it is a
 * terminal, at most 4 times a second, after the first second; erased at the end. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/progress.h"
#include "common/clock.h"
#include "common/text.h"

#define REDRAW_MS 250

void progress_begin(struct progress *p, const char *what, uint64_t total, const char *unit,
                    bool quiet)
{
    memset(p, 0, sizeof *p);
    snprintf(p->what, sizeof p->what, "%s", what);
    p->total = total;
    p->unit = unit;
    p->on = !quiet && isatty(STDERR_FILENO);
    p->start_ms = util_now_ms();
    p->after_ms = 1000;
    const char *after = getenv("UZRAM_PROGRESS_AFTER_MS");
    if (after != NULL && after[0] != '\0')
        p->after_ms = (unsigned)strtoul(after, NULL, 10);
}

static void amount(const struct progress *p, uint64_t value, char *text, size_t size)
{
    if (p->unit == NULL)
        util_human_size(value, text, size);
    else
        snprintf(text, size, "%llu", (unsigned long long)value);
}

void progress_show(struct progress *p, uint64_t done, uint64_t position, const char *extra)
{
    uint64_t now = util_now_ms();
    if (!p->on || now - p->start_ms < p->after_ms || (p->drawn && now - p->last_ms < REDRAW_MS))
        return;
    p->last_ms = now;
    p->drawn = true;
    double elapsed = (double)(now - p->start_ms) / 1000.0;
    if (p->unit != NULL && p->unit[0] == '\0') { /* no amounts: how long it takes so far */
        fprintf(stderr, "\r\033[K%s: %d:%02d%s%s", p->what, (int)(elapsed / 60), (int)elapsed % 60,
                extra ? " " : "", extra ? extra : "");
        fflush(stderr);
        return;
    }
    char done_text[32], total_text[32], rate_text[32];
    amount(p, done, done_text, sizeof done_text);
    fprintf(stderr, "\r\033[K%s: %s", p->what, done_text);
    if (p->total) {
        amount(p, p->total, total_text, sizeof total_text);
        fprintf(stderr, " of %s%s%s", total_text, p->unit ? " " : "", p->unit ? p->unit : "");
    } else if (p->unit) {
        fprintf(stderr, " %s", p->unit);
    }
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    if (rate > 0) {
        amount(p, (uint64_t)rate, rate_text, sizeof rate_text);
        fprintf(stderr, ", %s/s", rate_text);
    }
    double position_rate = elapsed > 0 ? (double)position / elapsed : 0;
    if (p->total && position_rate > 0 && position <= p->total) {
        double left = (double)(p->total - position) / position_rate;
        fprintf(stderr, ", %d:%02d left", (int)(left / 60), (int)left % 60);
    } else {
        fprintf(stderr, ", %d:%02d", (int)(elapsed / 60), (int)elapsed % 60);
    }
    if (extra != NULL)
        fprintf(stderr, " %s", extra);
    fflush(stderr);
}

void progress_end(struct progress *p)
{
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = false;
}

struct run {
    int (*fn)(void *);
    void *arg;
    int result;
    bool done;
    pthread_mutex_t lock;
    pthread_cond_t finished;
};

static void *run_thread(void *context)
{
    struct run *run = context;
    int result = run->fn(run->arg);
    pthread_mutex_lock(&run->lock);
    run->result = result;
    run->done = true;
    pthread_cond_signal(&run->finished);
    pthread_mutex_unlock(&run->lock);
    return NULL;
}

int progress_run(struct progress *p, int (*fn)(void *), void (*tick)(void *, struct progress *),
                 void *arg)
{
    if (!p->on)
        return fn(arg);
    struct run run = {.fn = fn, .arg = arg};
    pthread_t thread;
    pthread_mutex_init(&run.lock, NULL);
    pthread_cond_init(&run.finished, NULL);
    if (pthread_create(&thread, NULL, run_thread, &run) != 0) {
        pthread_mutex_destroy(&run.lock);
        pthread_cond_destroy(&run.finished);
        return fn(arg);
    }
    pthread_mutex_lock(&run.lock);
    while (!run.done) {
        /* A tick, then a wait: the first line comes as soon as after_ms allows. */
        pthread_mutex_unlock(&run.lock);
        if (tick != NULL)
            tick(arg, p);
        else
            progress_show(p, 0, 0, NULL);
        pthread_mutex_lock(&run.lock);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += REDRAW_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (!run.done)
            pthread_cond_timedwait(&run.finished, &run.lock, &until);
    }
    pthread_mutex_unlock(&run.lock);
    pthread_join(thread, NULL);
    pthread_mutex_destroy(&run.lock);
    pthread_cond_destroy(&run.finished);
    progress_end(p);
    return run.result;
}
