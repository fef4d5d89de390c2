/* text.c - names, sizes, errno names and JSON strings as the program writes and reads them
 * (text.h). */
#include "common/text.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "uzram.h"

bool util_valid_name(const char *name)
{
    size_t length = strlen(name);

    /* A leading '-' would read as an option to the commands that take the
     * name ("uzram attr -rf ..."), and to rm or ls in a script. */
    if (length == 0 || length > UTIL_NAME_MAX || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0 || name[0] == '-')
        return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

void util_human_size(uint64_t bytes, char *buf, size_t size)
{
    static const char units[] = "BKMGTPE";
    int exponent = 0;

    while (exponent < 6 && bytes >= (UINT64_C(1) << (10 * (exponent + 1))))
        exponent++;
    if (exponent == 0) {
        snprintf(buf, size, "%lluB", (unsigned long long)bytes);
        return;
    }
    uint64_t unit = UINT64_C(1) << (10 * exponent);
    uint64_t whole = bytes / unit;
    /* One decimal, rounded, as zramctl does; "2.0" is shown as "2". */
    uint64_t tenths = ((bytes % unit) * 10 + unit / 2) / unit;
    if (tenths >= 10) {
        whole++;
        tenths = 0;
    }
    if (tenths == 0)
        snprintf(buf, size, "%llu%c", (unsigned long long)whole, units[exponent]);
    else
        snprintf(buf, size, "%llu.%llu%c", (unsigned long long)whole, (unsigned long long)tenths,
                 units[exponent]);
}

static const struct {
    int value;
    const char *name;
} errno_names[] = {
    {EPERM, "EPERM"},
    {ENOENT, "ENOENT"},
    {EIO, "EIO"},
    {ENOMEM, "ENOMEM"},
    {EACCES, "EACCES"},
    {EBUSY, "EBUSY"},
    {EEXIST, "EEXIST"},
    {EINVAL, "EINVAL"},
    {ENOSPC, "ENOSPC"},
    {ERANGE, "ERANGE"},
    {ENOTSUP, "ENOTSUP"},
    {EPROTO, "EPROTO"},
    {ENAMETOOLONG, "ENAMETOOLONG"},
    {EOVERFLOW, "EOVERFLOW"},
    {ENODEV, "ENODEV"},
    {ENXIO, "ENXIO"},
    {ETIMEDOUT, "ETIMEDOUT"},
    {ESHUTDOWN, "ESHUTDOWN"},
};

const char *util_errno_name(int err, char *buf, size_t size)
{
    for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
        if (errno_names[i].value == err)
            return errno_names[i].name;
    snprintf(buf, size, "E%d", err);
    return buf;
}

int util_errno_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
        if (strcmp(errno_names[i].name, name) == 0)
            return errno_names[i].value;
    return 0;
}

void util_json_string(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void util_table_figures(uint64_t disksize, char *text, size_t size)
{
    char table[16], memory[16];
    util_human_size(disksize / UZRAM_PAGE_SIZE * UZRAM_TABLE_BYTES_PER_PAGE, table, sizeof table);
    util_human_size((uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE), memory,
                    sizeof memory);
    snprintf(text, size,
             "its page table takes %s (%u bytes per 4 KiB page), and at most 1/%u of this "
             "machine's %s may go to one",
             table, UZRAM_TABLE_BYTES_PER_PAGE, UZRAM_TABLE_MEMORY_SHARE, memory);
}
