/* exports.h - the devices one server serves (exports.c): each an NBD export by name, who
 * uses it, hot-add and hot-remove. The handshake finds exports here; the server and the
 * control service manage them. */
#ifndef UZRAM_NBD_EXPORTS_H
#define UZRAM_NBD_EXPORTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "nbd/limits.h"
#include "uzram.h"

/* What is exported: one device under one name. A server has one or several; exports.c keeps
 * them (and who uses each), the handshake finds them by name through nbd_export_get(). */
struct nbd_export {
    struct uzram *dev;
    const char *name;
    bool read_only;
    bool swap; /* serve --swap: swap safety is on */
};

/* The devices of a server. */
struct nbd_exports;

/* nbd_export_get() returns the export called `name` ("" is the default export: the server's
 * first device) held so that it cannot be removed, or NULL. A `client` hold is a session
 * that chose the export and uses it until it ends (it makes hot-remove refuse); any other
 * hold is short (a lookup, a control request) and only makes hot-remove wait. Every hold
 * ends with nbd_export_put() with the same `client`. (The handshake's fuzz target has its
 * own.) */
struct nbd_export *nbd_export_get(struct nbd_exports *exports, const char *name, bool client);
void nbd_export_put(struct nbd_exports *exports, struct nbd_export *export, bool client);

/* One line of NBD_OPT_LIST's answer. */
struct nbd_export_entry {
    char name[NBD_EXPORT_NAME_MAX + 1];
    char description[160];
};
/* The exports now, the default first, at most `max`; returns how many. */
size_t nbd_export_list(struct nbd_exports *exports, struct nbd_export_entry *entries, size_t max);

/* The /dev node of device `export`, if `uzram attach` made one (attach/attachment.c). */
struct attachment *nbd_export_attachment(const struct nbd_export *export);

/* Reset `export` (the control socket's `set reset VALUE`; the caller holds it) only if nobody
 * uses it: no NBD session, no /dev node of `uzram attach` (mounted or not), no attach or
 * detach running. The check and the reset are one step: clients that choose the export and
 * attach requests meanwhile wait until the reset is over. Returns 0, -EBUSY with one line in
 * `message` saying who uses it and what to end first, or what uzram_attr_set() returns. */
int nbd_export_reset(struct nbd_exports *exports, struct nbd_export *export, const char *value,
                     char *message, size_t size);
/* attachment_attach() and attachment_detach() on the attachment of `export` (the caller holds
 * it), as a user of the device while they run (see nbd_export_reset()). */
int nbd_export_attach(struct nbd_exports *exports, struct nbd_export *export, const char *via,
                      bool swap, const char *file, char *reply, size_t reply_size, char *message,
                      size_t message_size);
int nbd_export_detach(struct nbd_exports *exports, struct nbd_export *export, char *reply,
                      size_t reply_size, char *message, size_t message_size);

/* Sessions using `export` (held as clients). */
unsigned nbd_export_clients(struct nbd_exports *exports, const struct nbd_export *export);

/* The memory limit all the devices share (--server-mem-limit; a group with no limit when
 * none was given). */
struct uzram_group *nbd_exports_group(struct nbd_exports *exports);

/* Change that limit (the control socket's server_mem_limit): 0, or -ENOTSUP with one line in
 * `message` when a device keeps a state (serve --persist) and `bytes` is not 0: a device taken
 * over from its state is served outside the group (nbd_exports_add), so the limit would not
 * cover it, and serve refuses --persist with --server-mem-limit for that. */
int nbd_exports_set_mem_limit(struct nbd_exports *exports, uint64_t bytes, char *message,
                              size_t size);

/* A device made for the server (by cli/serve.c): the server owns it from then on. */
struct nbd_new_device {
    struct uzram *dev;
    char name[NBD_EXPORT_NAME_MAX + 1];
    bool read_only;
};

/* Makes the device a hot-add request describes: `spec` is what serve --device takes
 * (NAME[:SIZE[:KEY=VALUE]...]). Returns 0 with *out filled, or a negative errno with one
 * line in `message`. */
typedef int nbd_make_device_fn(void *context, const char *spec, struct nbd_new_device *out,
                               char *message, size_t message_size);

/* No devices yet, under a memory limit of `mem_limit` bytes (0: none); hot-add makes them
 * with `make_device` (NULL: it is refused); `quiet`: hot-add and hot-remove say nothing. */
int nbd_exports_create(uint64_t mem_limit, nbd_make_device_fn *make_device,
                       void *make_device_context, bool quiet, struct nbd_exports **out);
/* Destroys every device too. */
void nbd_exports_destroy(struct nbd_exports *exports);
/* Add a device made for the server: 0, or a negative errno with a message (the device is
 * then still the caller's); on success `message` describes it: "NAME (4G, lz4)". */
int nbd_exports_add(struct nbd_exports *exports, const struct nbd_new_device *made, char *message,
                    size_t size);

/* Hot-add and hot-remove (the control socket's requests), as zram's hot_add and
 * hot_remove: add the device `spec` describes (what serve --device takes), or remove the
 * device `name` and drop its data, refused with -EBUSY while anybody uses it (as a reset). Both
 * return 0 or a negative errno, with one line in `message` saying what was done or what to do. */
int nbd_exports_hot_add(struct nbd_exports *exports, const char *spec, char *message, size_t size);
int nbd_exports_hot_remove(struct nbd_exports *exports, const char *name, char *message,
                           size_t size);

/* What the log has said about a device's backing store (server.c's watch_device()), kept
 * with the device. */
struct nbd_device_watch {
    struct uzram_stats seen;
    bool full, write_failing, corrupt;
    time_t read_failure_said;
};
typedef void nbd_watch_fn(struct uzram *dev, const char *name, struct nbd_device_watch *watch);
/* Call `watch` for every device, with its own watch state. */
void nbd_exports_watch(struct nbd_exports *exports, nbd_watch_fn *watch);
/* The settings every device's attachment shares (unix_path, runtime_dir, threads,
 * swap; the rest is the device's): call before the first nbd_exports_add(). */
struct attach_settings;
void nbd_exports_set_attach(struct nbd_exports *exports, const struct attach_settings *settings);
/* The server stops: every device's attachment ends (attachment_destroy); with `hand_over` (a
 * planned restart) a ublk device is left to the next process first (attachment_hand_over). */
void nbd_exports_detach_all(struct nbd_exports *exports, bool hand_over);
/* The data held by all devices (orig_data_size), and how many there are. */
uint64_t nbd_exports_data(struct nbd_exports *exports, size_t *count);
/* "NAME (4294967296 bytes, lz4), NAME2 (...)" (`detailed`) or "NAME, NAME2" into `text`;
 * returns the number of devices. */
size_t nbd_exports_describe(struct nbd_exports *exports, bool detailed, char *text, size_t size);

#endif
