/* nbd_connect.h - connect `uzram bench nbd` to an NBD server and choose its export
 * (nbd_connect.c). */
#ifndef UZRAM_BENCH_NBD_CONNECT_H
#define UZRAM_BENCH_NBD_CONNECT_H

#include <stdint.h>

#include "bench/bench.h"

struct bench_nbd_export {
    uint64_t size;
    uint16_t flags; /* transmission flags (NBD_FLAG_READ_ONLY, ...) */
};

/* Connect to the server `nbd` names and do the fixed newstyle handshake with NBD_OPT_GO for
 * nbd->export_name, within nbd->timeout seconds. Returns the connected socket (blocking, in
 * the transmission phase, simple replies), or a negative errno after a message saying why
 * (-ENOENT: no such export). */
int bench_nbd_connect(const struct bench_nbd_options *nbd, struct bench_nbd_export *export);

#endif
