/* log.h - log lines about NBD clients (log.c), capped per client, silenced by --quiet. */
#ifndef UZRAM_NBD_LOG_H
#define UZRAM_NBD_LOG_H

#include <stdbool.h>

struct nbd_session;

/* Log one line to stderr about a client: "uzram: client N: ...". Capped per
 * client so a misbehaving client cannot flood the log. */
void nbd_log(struct nbd_session *session, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Global switch set by --quiet. */
extern bool nbd_log_quiet;

#endif
