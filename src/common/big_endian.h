/* big_endian.h - big-endian loads and stores, the byte order of the NBD protocol (the server
 * in nbd/, the load generator of `uzram bench nbd`, the fuzzers). */
#ifndef UZRAM_COMMON_BIG_ENDIAN_H
#define UZRAM_COMMON_BIG_ENDIAN_H

#include <stdint.h>

static inline void util_put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static inline void util_put32(unsigned char *p, uint32_t v)
{
    util_put16(p, (uint16_t)(v >> 16));
    util_put16(p + 2, (uint16_t)v);
}

static inline void util_put64(unsigned char *p, uint64_t v)
{
    util_put32(p, (uint32_t)(v >> 32));
    util_put32(p + 4, (uint32_t)v);
}

static inline uint16_t util_get16(const unsigned char *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t util_get32(const unsigned char *p)
{
    return ((uint32_t)util_get16(p) << 16) | util_get16(p + 2);
}

static inline uint64_t util_get64(const unsigned char *p)
{
    return ((uint64_t)util_get32(p) << 32) | util_get32(p + 4);
}

#endif
