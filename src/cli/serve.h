/* serve.h - what `uzram hot-add` takes from `uzram serve`: the device options of its table,
 * so that a device added at run time is described exactly as --device describes one. */
#ifndef UZRAM_CLI_SERVE_H
#define UZRAM_CLI_SERVE_H

#include <stddef.h>
#include <stdio.h>

/* Make the device SPEC that serve --device and the control socket's hot-add take
 * (NAME:SIZE[:KEY=VALUE]...) from NAME, SIZE (NULL: the server's default) and serve's
 * device options in argv[1..argc-1] (--algorithm zstd, -a zstd, --dedup, --dedup=no).
 * Returns 0, or 2 after a line on stderr. */
int serve_device_spec(const char *name, const char *size, int argc, char **argv, char *spec,
                      size_t spec_size);

/* The device options, one line each, for `uzram hot-add --help`. */
void serve_device_options_usage(FILE *out);

#endif
