/* runtime_dir.h - where the sockets live and whose they can be (runtime_dir.c): the runtime
 * directory `serve`, every client and `make run` agree on, the one of the user who ran sudo,
 * and the one rule by which the server and every client decide that a directory or a socket
 * can only be this user's. */
#ifndef UZRAM_COMMON_RUNTIME_DIR_H
#define UZRAM_COMMON_RUNTIME_DIR_H

#include <stddef.h>

/* The directory that holds the sockets, the one place `serve`, `status`,
 * `attr` and `make run` agree on: $XDG_RUNTIME_DIR/uzram; without
 * XDG_RUNTIME_DIR (unset or empty), /run/uzram for root (as systemd
 * services have it), else /run/user/UID/uzram when that user directory
 * exists, else /tmp/uzram-UID (serve checks that it is this user's alone). */
int util_runtime_dir(char *buf, size_t size);
/* Root under sudo, without XDG_RUNTIME_DIR (sudo drops it): the runtime directory of the user
 * who ran sudo (/run/user/SUDO_UID/uzram), where `sudo uzram attach NAME` finds that user's
 * server. 0, or -ENOENT when this is not root under sudo. The clients trust that user's
 * sockets as their own then (util_private_dir). */
int util_sudo_runtime_dir(char *buf, size_t size);

/* Create `path` (one level) with mode 0700 if it does not exist. */
int util_make_dir(const char *path);

/* Why somebody else than this user (or root; under sudo, the user who ran it) could change
 * what is in `dir` (create, replace or remove its entries), or NULL when nobody can: it belongs
 * to one of them and is writable by neither group nor others. Sockets found there are
 * trusted only then. */
const char *util_private_dir(const char *dir);

/* Whether sockets in `dir` can only be this user's (or root's): 0 when it is private
 * (util_private_dir), else -EPERM with a line saying why not in `message`. */
int util_trusted_dir(const char *dir, char *message, size_t message_size);

/* Whether the socket `path` is one only this user (or root) can have put there: its
 * directory private (util_trusted_dir), the socket this user's or root's. 0, or -EPERM with
 * a line saying why not in `message`. */
int util_trusted_socket(const char *path, char *message, size_t message_size);

#endif
