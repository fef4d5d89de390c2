/* control.h - the client side of a uzram control socket (NAME.ctl in the runtime directory).
 * Used by `uzram status` and `uzram attr`; the server side lives in control.c too. */
#ifndef UZRAM_CONTROL_H
#define UZRAM_CONTROL_H

#include <limits.h>
#include <stdbool.h>
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

/* Where `uzram status` and `uzram attr` look for devices: the runtime directory, or what
 * their -u names, which may be anything `uzram serve` was given or made: a directory holding
 * NAME.ctl sockets; a control socket (NAME.ctl); or the NBD socket of a server (serve --unix
 * PATH, or a socket unit's), whose control socket is the one, among those of the runtime
 * directory and of that socket's own directory, whose server says it listens there. */
struct control_place {
    char dir[PATH_MAX]; /* the directory to find NAME.ctl in */
    char ctl[PATH_MAX]; /* "", or the one control socket -u led to */
};

/* Fill `place` from -u's argument (NULL: the runtime directory). Returns 0, or -errno with
 * a message saying what was looked at. */
int control_place(const char *given, struct control_place *place, char *message,
                  size_t message_size);

/* The value of `key` in a "key value" reply body (as "stats" sends), into `value`; false
 * when the body has no such line. */
bool control_field(const char *body, const char *key, char *value, size_t size);

#endif
