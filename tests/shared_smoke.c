/* shared_smoke.c - a program that links libuzram.so, not the archive, and uses it:
 * the shared library's exports are enough to create, write, read back and report. */
#include <stdio.h>
#include <string.h>

#include "uzram.h"

int main(void)
{
    if (uzram_version_number() != UZRAM_VERSION_NUMBER) {
        fprintf(stderr, "shared_smoke: library %s, header %s\n", uzram_version(),
                UZRAM_VERSION_STRING);
        return 1;
    }
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = 1 << 20;
    struct uzram *dev;
    int rc = uzram_create(&config, &dev);
    if (rc != 0) {
        fprintf(stderr, "shared_smoke: uzram_create: %d\n", rc);
        return 1;
    }
    static unsigned char page[UZRAM_PAGE_SIZE], back[UZRAM_PAGE_SIZE];
    for (size_t i = 0; i < sizeof page; i++)
        page[i] = (unsigned char)(i * 7 / 13);
    struct uzram_stats stats;
    char json[2048];
    if (uzram_write(dev, 8 * UZRAM_PAGE_SIZE, page, sizeof page) != 0 ||
        uzram_read(dev, 8 * UZRAM_PAGE_SIZE, back, sizeof back) != 0 ||
        memcmp(page, back, sizeof page) != 0 || uzram_get_stats(dev, &stats, sizeof stats) != 0 ||
        stats.orig_data_size != UZRAM_PAGE_SIZE ||
        uzram_format_json(&stats, json, sizeof json) < 0) {
        fprintf(stderr, "shared_smoke: the page did not round-trip\n");
        return 1;
    }
    uzram_destroy(dev);
    printf("shared_smoke: uzram %s through the shared library: %s", uzram_version(), json);
    return 0;
}
