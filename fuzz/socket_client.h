/* socket_client.h - the client side of the NBD fuzz targets' socketpairs.
 * A thread writes the fuzz input and collects every reply until end of file. */
#ifndef UZRAM_FUZZ_SOCKET_CLIENT_H
#define UZRAM_FUZZ_SOCKET_CLIENT_H

#include <stddef.h>
#include <stdint.h>

struct fuzz_client {
    int fd;
    const uint8_t *input;
    size_t input_size;
    uint8_t *output; /* replies, malloc'ed; the caller frees it */
    size_t output_size, output_capacity;
};

/* Thread body: sends input (then shuts down writing) while reading replies,
 * so neither side can block the other; returns when the server closes. */
void *fuzz_client_main(void *arg);

#endif
