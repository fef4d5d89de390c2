/* fault.c - the countdown behind FAULT_POINT (see fault.h): a test hook, built only into the
 * test archive. Only does anything with -DUZRAM_FAULT_INJECTION; otherwise every call is a no-op.
 */
#include "common/fault.h"

#ifndef UZRAM_TEST_HOOKS
#error "fault.c belongs to the test archive only (built with -DUZRAM_TEST_HOOKS)"
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#ifdef UZRAM_FAULT_INJECTION

/* 0 means disarmed: no call can bring the countdown from 1 to 0 again
 * until the next arm, so a failure is injected exactly once. */
static _Atomic uint64_t countdown;
static _Atomic unsigned armed_kinds;
static _Atomic bool paused_now;
static _Atomic uint64_t calls;
static _Atomic uint64_t hits;
static _Atomic(const char *) last_site;

/* Distinct sites that failed, for the sweep's report. Sites are string
 * literals, so comparing pointers is enough (one literal per point). */
#define MAX_SITES 128
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *sites[MAX_SITES];
static unsigned site_count;

static void remember_site(const char *site)
{
    pthread_mutex_lock(&sites_lock);
    unsigned i = 0;
    while (i < site_count && sites[i] != site)
        i++;
    if (i == site_count && site_count < MAX_SITES)
        sites[site_count++] = site;
    pthread_mutex_unlock(&sites_lock);
}

bool fault_enabled(void)
{
    return true;
}

void fault_arm_kinds(uint64_t nth, unsigned kinds)
{
    atomic_store(&armed_kinds, 0);
    atomic_store(&calls, 0);
    atomic_store(&hits, 0);
    atomic_store(&last_site, NULL);
    atomic_store(&countdown, nth);
    atomic_store(&armed_kinds, nth ? kinds : 0);
}

void fault_arm(uint64_t nth)
{
    fault_arm_kinds(nth, FAULT_ANY);
}

void fault_disarm(void)
{
    atomic_store(&armed_kinds, 0);
    atomic_store(&countdown, 0);
}

void fault_pause(bool paused)
{
    atomic_store(&paused_now, paused);
}

uint64_t fault_hits(void)
{
    return atomic_load(&hits);
}

uint64_t fault_calls(void)
{
    return atomic_load(&calls);
}

const char *fault_last_site(void)
{
    return atomic_load(&last_site);
}

unsigned fault_site_count(void)
{
    pthread_mutex_lock(&sites_lock);
    unsigned count = site_count;
    pthread_mutex_unlock(&sites_lock);
    return count;
}

const char *fault_site_name(unsigned index)
{
    pthread_mutex_lock(&sites_lock);
    const char *name = index < site_count ? sites[index] : NULL;
    pthread_mutex_unlock(&sites_lock);
    return name;
}

bool fault_fire(unsigned kind, const char *site)
{
    if (!(atomic_load_explicit(&armed_kinds, memory_order_relaxed) & kind) ||
        atomic_load_explicit(&paused_now, memory_order_relaxed))
        return false;
    atomic_fetch_add(&calls, 1);
    uint64_t left = atomic_load(&countdown);
    while (left != 0) {
        if (atomic_compare_exchange_weak(&countdown, &left, left - 1)) {
            if (left != 1)
                return false;
            atomic_fetch_add(&hits, 1);
            atomic_store(&last_site, site);
            remember_site(site);
            return true;
        }
    }
    return false;
}

#else /* !UZRAM_FAULT_INJECTION */

bool fault_enabled(void)
{
    return false;
}

void fault_arm_kinds(uint64_t nth, unsigned kinds)
{
    (void)nth;
    (void)kinds;
}

void fault_arm(uint64_t nth)
{
    (void)nth;
}

void fault_disarm(void)
{
}

void fault_pause(bool paused)
{
    (void)paused;
}

uint64_t fault_hits(void)
{
    return 0;
}

uint64_t fault_calls(void)
{
    return 0;
}

const char *fault_last_site(void)
{
    return NULL;
}

unsigned fault_site_count(void)
{
    return 0;
}

const char *fault_site_name(unsigned index)
{
    (void)index;
    return NULL;
}

bool fault_fire(unsigned kind, const char *site)
{
    (void)kind;
    (void)site;
    return false;
}

#endif
