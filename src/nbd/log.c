/* log.c - log lines about NBD clients: one line each, capped per client, silenced by --quiet. */
#include <stdarg.h>
#include <stdio.h>

#include "nbd/log.h"
#include "nbd/session.h"

/* Lines about one client past which the log says no more about it. */
#define LOG_LINES_PER_CLIENT 20

bool nbd_log_quiet;

void nbd_log(struct nbd_session *session, const char *format, ...)
{
    if (nbd_log_quiet)
        return;
    /* Only the connection's own threads log about it, but they may race on
     * the counter; an off-by-one in the cap is harmless. */
    unsigned lines = __atomic_fetch_add(&session->log_lines, 1, __ATOMIC_RELAXED);
    if (lines > LOG_LINES_PER_CLIENT)
        return;
    char message[512];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    if (lines == LOG_LINES_PER_CLIENT)
        fprintf(stderr, "uzram: client %u: %s (further messages about this client suppressed)\n",
                session->id, message);
    else
        fprintf(stderr, "uzram: client %u: %s\n", session->id, message);
}
