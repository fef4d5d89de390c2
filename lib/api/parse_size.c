/* parse_size.c - uzram_parse_size: a size as people write it (4096, 1G, 1.5 MiB) in bytes,
 * for mem_limit and the program's options. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "uzram.h"

/* Integers are parsed exactly (a double would round sizes above 2^53);
 * a fraction is allowed only where it gives a whole number of bytes. */
int uzram_parse_size(const char *text, uint64_t *bytes)
{
    if (!text || !bytes)
        return -EINVAL;
    while (*text == ' ' || *text == '\t')
        text++;
    if (!(*text >= '0' && *text <= '9'))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long whole = strtoull(text, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    uint64_t fraction_numerator = 0, fraction_denominator = 1;
    if (*end == '.') {
        end++;
        while (*end >= '0' && *end <= '9') {
            if (fraction_denominator < 1000000000000ull) {
                fraction_numerator = fraction_numerator * 10 + (uint64_t)(*end - '0');
                fraction_denominator *= 10;
            }
            end++;
        }
    }
    uint64_t multiplier = 1;
    const char *units = "KMGTPE";
    /* strchr() finds the terminator too, so a space (0x20, which the case
     * folding turns into 0) must not reach it */
    const char *unit = (*end & ~0x20) ? strchr(units, *end & ~0x20) : NULL;
    if (*end && unit) {
        for (const char *u = units; u <= unit; u++)
            multiplier *= 1024;
        end++;
        if (*end == 'i' && (end[1] == 'B' || end[1] == 'b'))
            end += 2;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (*end)
        return -EINVAL;
    if (whole > UINT64_MAX / multiplier)
        return -ERANGE;
    uint64_t value = whole * multiplier;
    if (fraction_numerator) {
        /* multiplier is a power of two up to 2^60 and the denominator a power
         * of ten up to 10^12, so split to stay inside 64 bits */
        unsigned __int128 part = (unsigned __int128)fraction_numerator * multiplier;
        if (part % fraction_denominator)
            return -EINVAL;
        uint64_t extra = (uint64_t)(part / fraction_denominator);
        if (value > UINT64_MAX - extra)
            return -ERANGE;
        value += extra;
    }
    *bytes = value;
    return 0;
}
