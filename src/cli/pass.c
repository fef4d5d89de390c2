/* pass.c - a recompression or writeback pass started from the command line (`uzram attr NAME
 * recompress type=idle`, `... writeback idle`): the server runs it while the request waits,
 * as long as a pass over the whole device may take; on a terminal a line shows the pages done
 * of those the pass may take, read from the device's counters on a second connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/pass.h"
#include "common/progress.h"
#include "control/control.h"

/* The slowest a pass is taken to go (zstd at its highest level on a slow machine), for the
 * request's deadline: a pass over the whole device has this long, and CONTROL_REPLY_MS more. */
#define PASS_SLOWEST_PAGES_PER_SECOND 500u

bool pass_attribute(const char *name)
{
    return strcmp(name, "recompress") == 0 || strcmp(name, "writeback") == 0;
}

/* A counter of the device, from a "stats" reply; 0 when it is not there. */
static uint64_t counter(const char *body, const char *key)
{
    char value[32];
    return control_field(body, key, value, sizeof value) ? strtoull(value, NULL, 10) : 0;
}

struct pass {
    const struct control_target *target;
    const char *request;
    bool writeback;
    uint64_t start;              /* the counter of pages done, before the pass */
    unsigned long long reply_ms; /* how long the pass's request waits for its reply */
    char **body;
    char *message;
    size_t message_size;
};

/* Pages done so far: written back, or recompressed plus found incompressible. */
static uint64_t pages_done(const struct pass *pass, const char *body)
{
    return pass->writeback ? counter(body, "bd_writes")
                           : counter(body, "recomp_pages") + counter(body, "incompressible_pages");
}

static int ask(void *context)
{
    struct pass *pass = context;
    return control_ask_within(pass->target, pass->request, pass->reply_ms, pass->body,
                              pass->message, pass->message_size);
}

static void tick(void *context, struct progress *progress)
{
    struct pass *pass = context;
    char *body, message[256];
    if (control_ask(pass->target, "stats", &body, message, sizeof message) < 0)
        return;
    uint64_t done = pages_done(pass, body) - pass->start;
    free(body);
    progress_show(progress, done, done, NULL);
}

/* The pages the pass may take: idle, huge or all stored pages, at most max_pages. */
static uint64_t pages_to_do(const char *value, bool writeback, const char *stats)
{
    bool idle = strstr(value, "idle") != NULL, huge = strstr(value, "huge") != NULL;
    uint64_t total = idle   ? counter(stats, "idle_pages")
                     : huge ? counter(stats, "huge_pages")
                            : counter(stats, "pages_stored");
    const char *max = strstr(value, "max_pages=");
    if (!writeback && max != NULL && strtoull(max + 10, NULL, 10) < total)
        total = strtoull(max + 10, NULL, 10);
    return total;
}

int pass_run(const struct control_target *target, const char *device, const char *name,
             const char *value, const char *request, char **body, char *message,
             size_t message_size)
{
    struct pass pass = {.target = target,
                        .request = request,
                        .writeback = strcmp(name, "writeback") == 0,
                        .reply_ms = CONTROL_REPLY_MS,
                        .body = body,
                        .message = message,
                        .message_size = message_size};
    char *stats, why[256];
    uint64_t total = 0;
    if (control_ask(target, "stats", &stats, why, sizeof why) == 0) {
        pass.start = pages_done(&pass, stats);
        total = pages_to_do(value, pass.writeback, stats);
        pass.reply_ms += counter(stats, "disksize") / 4096 / PASS_SLOWEST_PAGES_PER_SECOND * 1000;
        free(stats);
    }
    char what[160];
    snprintf(what, sizeof what, "%s %s (%s)", pass.writeback ? "writing back" : "recompressing",
             device, value);
    struct progress progress;
    progress_begin(&progress, what, total, "pages", false);
    return progress_run(&progress, ask, tick, &pass);
}
