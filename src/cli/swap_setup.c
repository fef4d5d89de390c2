/* swap_setup.c - the one way a uzram device becomes swap: mkswap, then swapon with discard,
 * for `uzram attach --swap --swapon` (the uzram-swap@ unit), zram-generator's swap devices and
 * the line `attach --swap` prints (swap_setup.h). */
#include <stdio.h>
#include <string.h>

#include "cli/swap_setup.h"
#include "common/process.h"

/* mkswap and swapon get this long (swapon's discard of a whole device is one request). */
#define SWAP_SETUP_TIMEOUT 60

/* Why discard: kernel zram hears of every swap slot the kernel frees (the block layer's
 * swap_slot_free_notify), and drops its page at once. A ublk, nbd or loop device hears of
 * nothing but discards: without them every page ever swapped out stays in the server until
 * its slot is written again, and dead pages fill mem_limit. `--discard` (no policy: both)
 * discards the whole device at swapon and then every 2 MiB cluster of slots once all of it is
 * free (uzram(1), SWAP). Added to whatever -o options a caller passes: util-linux ORs the
 * flags, so an explicit discard=once or discard=pages there still chooses the policy. */
static const char *const swapon_words[] = {"swapon", "--discard", "--priority"};

int swapon_argv(const char *node, int priority, const char *options, char priority_text[16],
                const char *argv[SWAPON_ARGS_MAX])
{
    int n = 0;
    for (size_t i = 0; i < sizeof swapon_words / sizeof swapon_words[0]; i++)
        argv[n++] = swapon_words[i];
    snprintf(priority_text, 16, "%d", priority);
    argv[n++] = priority_text;
    if (options != NULL && options[0] != '\0') {
        argv[n++] = "-o"; /* util-linux 2.38's swapon takes no value after --options */
        argv[n++] = options;
    }
    if (node != NULL)
        argv[n++] = node;
    argv[n] = NULL;
    return n;
}

void swapon_line(const char *node, int priority, const char *options, char *line, size_t size)
{
    const char *argv[SWAPON_ARGS_MAX];
    char priority_text[16];
    int count = swapon_argv(node, priority, options, priority_text, argv);
    size_t used = 0;
    line[0] = '\0';
    for (int i = 0; i < count && used < size; i++) {
        int n = snprintf(line + used, size - used, "%s%s", i ? " " : "", argv[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* One program; -1 with "PROGRAM failed: what it said" in `message`. */
static int run(const char *const argv[], char *message, size_t message_size)
{
    char said[512];
    int rc = run_program(argv, SWAP_SETUP_TIMEOUT, said, sizeof said);
    if (rc == 0)
        return 0;
    snprintf(message, message_size, "%s failed: %s", argv[0],
             rc < 0    ? strerror(-rc)
             : said[0] ? said
                       : "(no message)");
    return -1;
}

int swap_start(const char *node, bool mkswap, int priority, const char *options, char *message,
               size_t message_size)
{
    const char *make[] = {"mkswap", node, NULL};
    if (mkswap && run(make, message, message_size) < 0)
        return -1;
    const char *argv[SWAPON_ARGS_MAX];
    char priority_text[16];
    swapon_argv(node, priority, options, priority_text, argv);
    return run(argv, message, message_size);
}
