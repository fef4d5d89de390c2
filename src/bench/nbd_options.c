/* nbd_options.c - the options of `uzram bench nbd`: each one's check and effect (bench.c's
 * option table points here), the defaults, and the checks between options. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "nbd/protocol.h"

/* The port IANA gave NBD, which nbd:// URIs without one mean. */
#define NBD_DEFAULT_PORT "10809"

/* A whole decimal number in [min, max] into *value, or -EINVAL after a message. */
static int number(const char *what, const char *arg, unsigned long long min, unsigned long long max,
                  unsigned long long *value)
{
    char *end;
    errno = 0;
    *value = strtoull(arg, &end, 10);
    if (errno || end == arg || *end || arg[0] == '-' || *value < min || *value > max) {
        fprintf(stderr, "uzram bench nbd: --%s '%s' is not a number in %llu..%llu\n", what, arg,
                min, max);
        return -EINVAL;
    }
    return 0;
}

int bench_nbd_apply_unix(void *context, char *arg)
{
    struct bench_options *opt = context;
    if (!*arg) {
        fprintf(stderr, "uzram bench nbd: --unix needs a socket path\n");
        return -EINVAL;
    }
    opt->nbd.unix_path = arg;
    opt->nbd.host = NULL;
    return 0;
}

/* nbd+unix:///NAME?socket=PATH (the export name may be empty), or nbd://HOST[:PORT]/NAME:
 * the two forms `uzram status -o uri` and nbdinfo use. */
int bench_nbd_apply_uri(void *context, char *arg)
{
    struct bench_options *opt = context;
    static const char unix_scheme[] = "nbd+unix://", tcp_scheme[] = "nbd://";
    char *rest;
    if (strncmp(arg, unix_scheme, strlen(unix_scheme)) == 0) {
        rest = arg + strlen(unix_scheme);
        char *query = strchr(rest, '?');
        if (rest[0] != '/' || !query || strncmp(query, "?socket=", 8) != 0 || !query[8])
            goto bad;
        *query = '\0';
        opt->nbd.export_name = rest + 1;
        opt->nbd.unix_path = query + 8;
        opt->nbd.host = NULL;
        return 0;
    }
    if (strncmp(arg, tcp_scheme, strlen(tcp_scheme)) == 0) {
        rest = arg + strlen(tcp_scheme);
        char *slash = strchr(rest, '/');
        if (slash) {
            *slash = '\0';
            opt->nbd.export_name = slash + 1;
        }
        char *colon = strrchr(rest, ':');
        if (colon && !strchr(colon, ']')) {
            *colon = '\0';
            opt->nbd.port = colon + 1;
        } else {
            opt->nbd.port = NBD_DEFAULT_PORT;
        }
        if (rest[0] == '[' && rest[strlen(rest) - 1] == ']') { /* [::1] */
            rest[strlen(rest) - 1] = '\0';
            rest++;
        }
        if (!*rest || !*opt->nbd.port)
            goto bad;
        opt->nbd.host = rest;
        opt->nbd.unix_path = NULL;
        return 0;
    }
bad:
    fprintf(stderr,
            "uzram bench nbd: bad URI (nbd+unix:///NAME?socket=PATH or nbd://HOST[:PORT]/NAME)\n");
    return -EINVAL;
}

int bench_nbd_apply_export(void *context, char *arg)
{
    struct bench_options *opt = context;
    if (strlen(arg) > NBD_MAX_STRING) {
        fprintf(stderr, "uzram bench nbd: export name longer than %d bytes\n", NBD_MAX_STRING);
        return -EINVAL;
    }
    opt->nbd.export_name = arg;
    return 0;
}

int bench_nbd_apply_depth(void *context, char *arg)
{
    struct bench_options *opt = context;
    unsigned long long value;
    if (number("depth", arg, 1, BENCH_NBD_MAX_DEPTH, &value))
        return -EINVAL;
    opt->nbd.depth = (unsigned)value;
    return 0;
}

int bench_nbd_apply_requests(void *context, char *arg)
{
    struct bench_options *opt = context;
    unsigned long long value;
    if (number("requests", arg, 1, UINT32_MAX, &value))
        return -EINVAL;
    opt->nbd.requests = value;
    return 0;
}

int bench_nbd_apply_block_size(void *context, char *arg)
{
    struct bench_options *opt = context;
    uint64_t value;
    if (uzram_parse_size(arg, &value) != 0 || value < 512 || value > BENCH_NBD_MAX_BLOCK ||
        value % 512) {
        fprintf(stderr, "uzram bench nbd: --block-size '%s' is not a multiple of 512 up to 1M\n",
                arg);
        return -EINVAL;
    }
    opt->nbd.block_size = (uint32_t)value;
    return 0;
}

int bench_nbd_apply_rw(void *context, char *arg)
{
    struct bench_options *opt = context;
    if (strcmp(arg, "read") == 0)
        opt->nbd.rw = BENCH_NBD_READ;
    else if (strcmp(arg, "write") == 0)
        opt->nbd.rw = BENCH_NBD_WRITE;
    else if (strcmp(arg, "mix") == 0)
        opt->nbd.rw = BENCH_NBD_MIX;
    else {
        fprintf(stderr, "uzram bench nbd: --rw '%s' is not read, write or mix\n", arg);
        return -EINVAL;
    }
    return 0;
}

int bench_nbd_apply_pattern(void *context, char *arg)
{
    struct bench_options *opt = context;
    if (strcmp(arg, "random") == 0 || strcmp(arg, "rand") == 0)
        opt->nbd.sequential = false;
    else if (strcmp(arg, "seq") == 0 || strcmp(arg, "sequential") == 0)
        opt->nbd.sequential = true;
    else {
        fprintf(stderr, "uzram bench nbd: --pattern '%s' is not random or seq\n", arg);
        return -EINVAL;
    }
    return 0;
}

int bench_nbd_apply_region(void *context, char *arg)
{
    struct bench_options *opt = context;
    if (uzram_parse_size(arg, &opt->nbd.region) != 0 || opt->nbd.region == 0) {
        fprintf(stderr, "uzram bench nbd: bad --region '%s' (e.g. 256M)\n", arg);
        return -EINVAL;
    }
    return 0;
}

int bench_nbd_apply_timeout(void *context, char *arg)
{
    struct bench_options *opt = context;
    unsigned long long value;
    if (number("timeout", arg, 1, 3600, &value))
        return -EINVAL;
    opt->nbd.timeout = (int)value;
    return 0;
}

int bench_nbd_apply_server_pid(void *context, char *arg)
{
    struct bench_options *opt = context;
    unsigned long long value;
    if (number("server-pid", arg, 1, INT_MAX, &value))
        return -EINVAL;
    opt->nbd.server_pid = (long)value;
    return 0;
}

int bench_nbd_settle(struct bench_options *opt)
{
    struct bench_nbd_options *nbd = &opt->nbd;
    if (!nbd->unix_path && !nbd->host) {
        fprintf(stderr, "uzram bench nbd: say which server: --unix PATH or --uri URI\n");
        return -EINVAL;
    }
    if (!nbd->export_name)
        nbd->export_name = "";
    if (!nbd->depth)
        nbd->depth = 16;
    if (!nbd->requests)
        nbd->requests = 200000;
    if (!nbd->block_size)
        nbd->block_size = BENCH_PAGE;
    if (!nbd->timeout)
        nbd->timeout = 30;
    if (nbd->region && nbd->region < nbd->block_size) {
        fprintf(stderr, "uzram bench nbd: --region is smaller than one block\n");
        return -EINVAL;
    }
    return 0;
}
