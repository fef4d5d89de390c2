/* attr_words.h - the values of the attributes that take words, parsed into the library's
 * calls (internal; attr_words.c), for attr.c's table. Each returns 0 or a negative errno:
 * -EINVAL for a value it does not take, else what the call it makes returns. */
#ifndef UZRAM_ATTR_WORDS_H
#define UZRAM_ATTR_WORDS_H

#include <stdint.h>

struct uzram;

/* A whole unsigned decimal number, with an optional trailing newline. */
int attr_parse_count(const char *value, uint64_t *out);

/* algorithm_params: [algo=NAME|priority=N] [level=N] [dict=PATH|auto] [dict_size=BYTES]. */
int attr_store_algorithm_params(struct uzram *dev, const char *value);
/* recomp_algorithm: algo=NAME [priority=1..3] [level=N]. */
int attr_store_recomp_algorithm(struct uzram *dev, const char *value);
/* recompress: [type=idle|huge|huge_idle] [threshold=BYTES] [max_pages=N] [algo=NAME|priority=N]. */
int attr_store_recompress(struct uzram *dev, const char *value);
/* writeback: zram's modes and page ranges. */
int attr_store_writeback(struct uzram *dev, const char *value);

#endif
