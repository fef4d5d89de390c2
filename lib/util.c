/* util.c - small public helpers: size parsing, version, cost figures for estimators.
 * Kept apart from the engine so frontends can use them without a device. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "device.h"
#include "pool.h"

const char *uzram_version(void)
{
    return "0.1.0";
}

int uzram_parse_size(const char *text, uint64_t *bytes)
{
    if (!text || !bytes)
        return -EINVAL;
    while (*text == ' ' || *text == '\t')
        text++;
    if (!(*text >= '0' && *text <= '9') && *text != '.')
        return -EINVAL;
    char *end;
    errno = 0;
    double number = strtod(text, &end);
    if (end == text || errno == ERANGE || number < 0)
        return errno == ERANGE ? -ERANGE : -EINVAL;
    double multiplier = 1;
    const char *units = "KMGTPE";
    const char *unit = *end ? strchr(units, *end & ~0x20) : NULL;
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
    double value = number * multiplier;
    if (value >= 18446744073709551616.0)
        return -ERANGE;
    if (value != floor(value))
        return -EINVAL;
    *bytes = (uint64_t)value;
    return 0;
}

double uzram_pool_object_cost(size_t length)
{
    if (length == 0 || length > HUGE_THRESHOLD)
        return UZRAM_PAGE_SIZE;
    return pool_object_cost(length);
}

size_t uzram_huge_threshold(void)
{
    return HUGE_THRESHOLD + 1;
}

size_t uzram_dedup_entry_cost(void)
{
    /* one entry, plus one bucket (4 bytes) per four pages of disk */
    return dedup_entry_size() + 1;
}
