/* persist.h - `serve --persist[=PATH]`: the state of a device (its pages, table and codecs:
 * include/uzram.h, uzram_create_in) kept where it outlives the server process, found again at
 * start, and listed for a planned restart. Used by server/devices.c (making a device),
 * cli/serve.c (at start), control/service.c (hot-remove) and server/reexec.c (handing on). */
#ifndef UZRAM_SERVER_PERSIST_H
#define UZRAM_SERVER_PERSIST_H

#include <stdbool.h>
#include <stddef.h>

#include "server/serve_options.h"
#include "uzram.h"

/* Check --persist's value `persist` ("" for systemd's descriptor store, else a PATH) for
 * device `name` before anything is made: a PATH is absolute; the store needs a service
 * manager (NOTIFY_SOCKET) unless the state was handed back; a hot-added device (`hot_add`)
 * cannot persist; `conflict` (NULL: none) names a setting whose data a state cannot keep;
 * a swap device (`swap_bytes`, what its state may grow to; 0 for any other device) needs PATH
 * on a file system that never swaps (ramfs, tmpfs with noswap) with room for it.
 * Returns 0, or -1 after one line saying what to write. */
int persist_check(const struct complaints *to, const struct label *label, const char *name,
                  const char *persist, bool hot_add, const char *conflict, uint64_t swap_bytes);

/* Make device `name` in its state: the one handed over as "state-NAME" (descriptor store or
 * planned restart), else PATH (created 0600 on tmpfs, taken over if it holds a state; locked,
 * so a second server is refused), else a new memfd put in the descriptor store. A state is
 * taken over (uzram_adopt) only when it was made with the same size and algorithm as
 * `config`; an empty one is made from `config` (uzram_create_in). Returns 0 with *dev, or -1
 * after one line saying why and what to do. */
int persist_make(const struct complaints *to, const struct label *label, const char *name,
                 const char *persist, const struct uzram_config *config, struct uzram **dev);

/* Device `name` is gone: close its state; one in the descriptor store leaves it (its data is
 * dropped, as hot-remove says), a file stays (the user's: remove it to drop the data), unless
 * `undo` (making the device failed after persist_make()) and this process created it. */
void persist_forget(const char *name, bool undo);

/* After the devices are made: states handed over for no device of this server are left
 * alone (said once each) and closed here. */
void persist_leftovers(void);

/* Does device `name` have a state? */
bool persist_has(const char *name);

/* The states now, for a planned restart: up to `max` descriptors and names ("state-NAME"),
 * in `fds` and `names` (each names[i] holds 128 bytes). Returns how many. */
size_t persist_list(int *fds, char (*names)[128], size_t max);

#endif
