/* stats.c - the text forms of a statistics snapshot: mm_stat, io_stat, JSON.
 * The positional lines keep zram's layout; JSON names every field. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "uzram.h"

static int format(char *buf, size_t size, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    int length = vsnprintf(buf, size, fmt, args);
    va_end(args);
    if (length < 0 || (size_t)length >= size)
        return -ERANGE;
    return length;
}

int uzram_format_mm_stat(const struct uzram_stats *s, char *buf, size_t size)
{
    return format(buf, size, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n",
                  (unsigned long long)s->orig_data_size, (unsigned long long)s->compr_data_size,
                  (unsigned long long)s->mem_used_total, (unsigned long long)s->mem_limit,
                  (unsigned long long)s->mem_used_max, (unsigned long long)s->same_pages,
                  (unsigned long long)s->pages_compacted, (unsigned long long)s->huge_pages,
                  (unsigned long long)s->huge_pages_since, (unsigned long long)s->dup_data_size,
                  (unsigned long long)s->meta_data_size);
}

int uzram_format_io_stat(const struct uzram_stats *s, char *buf, size_t size)
{
    return format(buf, size, "%llu %llu %llu %llu\n", (unsigned long long)s->failed_reads,
                  (unsigned long long)s->failed_writes, (unsigned long long)s->invalid_io,
                  (unsigned long long)s->notify_free);
}

int uzram_format_json(const struct uzram_stats *s, char *buf, size_t size)
{
    const struct {
        const char *name;
        uint64_t value;
    } fields[] = {
        {"orig_data_size", s->orig_data_size},
        {"compr_data_size", s->compr_data_size},
        {"mem_used_total", s->mem_used_total},
        {"mem_limit", s->mem_limit},
        {"mem_used_max", s->mem_used_max},
        {"same_pages", s->same_pages},
        {"pages_compacted", s->pages_compacted},
        {"huge_pages", s->huge_pages},
        {"huge_pages_since", s->huge_pages_since},
        {"dup_data_size", s->dup_data_size},
        {"meta_data_size", s->meta_data_size},
        {"failed_reads", s->failed_reads},
        {"failed_writes", s->failed_writes},
        {"invalid_io", s->invalid_io},
        {"notify_free", s->notify_free},
        {"dedup_hash_collisions", s->dedup_hash_collisions},
        {"pages_stored", s->pages_stored},
        {"zero_pages", s->zero_pages},
    };
    size_t used = 0;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int length = format(buf + used, size - used, "%s\"%s\": %llu", i ? ", " : "{",
                            fields[i].name, (unsigned long long)fields[i].value);
        if (length < 0)
            return length;
        used += (size_t)length;
    }
    int length = format(buf + used, size - used, "}\n");
    return length < 0 ? length : (int)used + length;
}
