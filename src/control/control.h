/* control.h - the client side of a uzram control socket (NAME.ctl beside the NBD socket).
 * Used by `uzram status` and `uzram attr`; the server side lives in control.c too. */
#ifndef UZRAM_CONTROL_H
#define UZRAM_CONTROL_H

#include <stddef.h>

/* Send one request line (without '\n') to the control socket at `path`.
 * On "ok" returns 0 and sets *body to the text after the first line (malloc'd,
 * NUL-terminated). On "error NAME: message" returns -errno (from NAME) and
 * copies the message into `message`. Socket failures return -errno with a
 * message too. */
int control_request(const char *path, const char *request, char **body, char *message,
                    size_t message_size);

/* Resolve DEVICE (a name in the runtime directory, or a path to a .ctl
 * socket) to the control socket path. Returns 0 or -errno with a message. */
int control_resolve(const char *device, const char *runtime_dir, char *path, size_t size,
                    char *message, size_t message_size);

#endif
