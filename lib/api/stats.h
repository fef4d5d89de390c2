/* stats.h - the text forms of a statistics snapshot that are not public (internal).
 * The public ones (mm_stat, io_stat, JSON) are declared in uzram.h. */
#ifndef UZRAM_STATS_H
#define UZRAM_STATS_H

#include <stddef.h>

#include "uzram.h"

/* debug_stat: "version: 1", then "name: value" for each DEBUG counter of
 * UZRAM_STATS. Returns the length written, or -ERANGE. */
int stats_format_debug(const struct uzram_stats *stats, char *buf, size_t size);

/* Append to buf[*used..size) as snprintf formats; -ERANGE (and nothing more
 * appended) when it does not fit with its NUL. Returns 0 otherwise. */
int text_append(char *buf, size_t size, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
