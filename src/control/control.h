/* control.h - the client side of a uzram control socket (NAME.ctl in the runtime directory):
 * client.c and find.c. Used by every subcommand that talks to a server; the server side is
 * service.h. */
#ifndef UZRAM_CONTROL_H
#define UZRAM_CONTROL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/* The longest request line, its '\n' included: both ends hold to it. */
#define CONTROL_REQUEST_MAX 4096

/* Send one request line (without '\n') to the control socket at `path`.
 * On "ok" returns 0 and sets *body to the text after the first line (malloc'd,
 * NUL-terminated). On "error NAME: message" returns -errno (from NAME) and
 * copies the message into `message`. Socket failures return -errno with a
 * message too. */
int control_request(const char *path, const char *request, char **body, char *message,
                    size_t message_size);
/* How long control_request() waits for a whole reply, in milliseconds (a pass over a
 * device's pages waits longer: control_ask_within(), cli/pass.c). */
#define CONTROL_REPLY_MS 30000ull

/* A device on a server: the server's control socket, and the device's name on it. */
struct control_target {
    char ctl[PATH_MAX];
    char device[65]; /* "": the server's default device (its first) */
};

/* Resolve DEVICE (a device name, or a path to a .ctl socket: its server's default device)
 * to the server that serves it, looked for among the control sockets of `runtime_dir`:
 * NAME.ctl first (a device served alone), then every server's devices. Returns 0, or
 * -errno with a message (-ENOENT none, -EEXIST several servers serve that name, -EPERM
 * `runtime_dir` is not private). control_request() asks only a socket in a private
 * directory (util_trusted_socket), whoever calls it. */
int control_resolve(const char *device, const char *runtime_dir, struct control_target *target,
                    char *message, size_t message_size);

/* control_resolve() in `runtime_dir`, and when no server there serves DEVICE (a name) and
 * `also_sudo` (no -u was given), for root under sudo in the runtime directory of the user who
 * ran sudo (util_sudo_runtime_dir), whose servers it is run for (find.c). */
int control_find(const char *device, const char *runtime_dir, bool also_sudo,
                 struct control_target *target, char *message, size_t message_size);

/* control_request() about the target's device ("device NAME REQUEST"). */
int control_ask(const struct control_target *target, const char *request, char **body,
                char *message, size_t message_size);
/* control_ask() that waits `reply_ms` milliseconds for the reply, not CONTROL_REPLY_MS. */
int control_ask_within(const struct control_target *target, const char *request,
                       unsigned long long reply_ms, char **body, char *message,
                       size_t message_size);

/* The devices of the server of `ctl`, the default first, as an array of `count` strings
 * (free with control_free_names()). Returns 0 or -errno with a message. */
int control_devices(const char *ctl, char ***names, size_t *count, char *message,
                    size_t message_size);
void control_free_names(char **names, size_t count);

/* The control sockets (DIR/NAME.ctl) in `dir`, sorted: one per server. A missing
 * directory has none; one that is not private (util_private_dir) is -EPERM: another user
 * could have put sockets there. Returns 0 or -errno. Free with control_free_names(). */
int control_servers(const char *dir, char ***paths, size_t *count);

/* Where every subcommand looks for a device's server (one reading of -u for all): the runtime
 * directory, or what -u names, which may be anything `uzram serve` was given or made: a
 * directory holding NAME.ctl sockets; a control socket (NAME.ctl); or the NBD socket of a
 * server (serve --unix PATH, or a socket unit's), whose control socket is the one, among
 * those of the runtime directory and of that socket's own directory, whose server says it
 * listens there. */
struct control_place {
    char dir[PATH_MAX]; /* the directory to find NAME.ctl in ("" when -u led nowhere) */
    char ctl[PATH_MAX]; /* "", or the one control socket -u led to */
    bool sudo_too;      /* no -u: root under sudo also looks in the invoking user's */
};

/* Fill `place` from -u's argument (NULL: the runtime directory). Returns 0, or -errno with
 * a message saying what was looked at. */
int control_place(const char *given, struct control_place *place, char *message,
                  size_t message_size);

/* DEVICE's server at `place`: with one server there (place->ctl), DEVICE must be one of its
 * devices, or that control socket itself (its default device); else control_find() in
 * place->dir. Returns 0, or -errno with a message (-ENOENT: nothing serves it). */
int control_locate_in(const struct control_place *place, const char *device,
                      struct control_target *target, char *message, size_t message_size);

/* control_place() from -u's argument `given` (NULL: none), then control_locate_in(): what
 * every subcommand that acts on one device does with its -u and DEVICE. `place` may be
 * NULL. Returns 0, or -errno with a message. */
int control_locate(const char *given, const char *device, struct control_place *place,
                   struct control_target *target, char *message, size_t message_size);

/* The control socket of the server a server-wide subcommand (hot-add, restart: `command`)
 * talks to, into `ctl`: the one -u names (`given_place`), SERVER.ctl (`server`, --server), or
 * the only one of the runtime directory. Returns 0, or -1 after a line on stderr. */
int control_choose_server(const char *given_place, const char *server, const char *command,
                          char *ctl, size_t size);

/* One "key value" line of a reply body, as "stats", "server" and "attach" send them. */
struct control_line {
    const char *key, *value;
    size_t key_length, value_length;
};

/* The next "key value" line of a reply body at *cursor (the body at first), which then moves
 * past it; lines without a key and a space are passed over. False at the body's end. The one
 * reader of replies: control_field() and `uzram status` use it. */
bool control_next_line(const char **cursor, struct control_line *line);

/* The value of `key` in a "key value" reply body, into `value`; false when the body has no
 * such line. */
bool control_field(const char *body, const char *key, char *value, size_t size);

#endif
