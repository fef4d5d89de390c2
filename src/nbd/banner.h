/* banner.h - what `uzram serve` prints when it is ready, and the URI clients connect with
 * (banner.c). */
#ifndef UZRAM_NBD_BANNER_H
#define UZRAM_NBD_BANNER_H

#include <stddef.h>

struct nbd_server_options;

/* What the banner says besides the options (banner.c). */
struct nbd_banner {
    const char *devices; /* "NAME (SIZE bytes, ALGO)", for each device */
    size_t device_count;
    const char *unix_path, *tcp_address; /* "" when none */
    const char *tls_kind;                /* NULL without TLS */
};
/* The ready banner on stdout: what is served where, and a connect line to paste. */
void nbd_banner_print(const struct nbd_server_options *options, const struct nbd_banner *banner);
/* The URI a client on this machine connects to export `export_name` ("": the default) with,
 * percent-encoded, in libnbd's form (nbds+unix://USER@/NAME?socket=...&tls-psk-file=FILE
 * under TLS required). 0, or -ENAMETOOLONG. */
int nbd_connect_uri(const struct nbd_server_options *options, const char *unix_path,
                    const char *tcp_address, const char *export_name, char *uri, size_t size);

#endif
