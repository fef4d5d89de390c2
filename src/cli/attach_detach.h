/* attach_detach.h - a served device's /dev node, for the commands that make or take one away:
 * `uzram attach`, `uzram detach` and zram-generator's device setup (attach_detach.c). */
#ifndef UZRAM_CLI_ATTACH_DETACH_H
#define UZRAM_CLI_ATTACH_DETACH_H

#include <stdbool.h>
#include <stddef.h>

/* Ask the server of DEVICE (a name, or its .ctl path) for a /dev node: via "nbd", "ublk" or
 * "loop" (NULL: ublk where the kernel has it, else nbd, else loop; for swap ublk or a
 * refusal), for swap, on `file` (loop only; NULL: NAME.disk), found where -u's `place` says (NULL:
 * the runtime directory, and for root under sudo the invoking user's; control_locate()). Fills
 * `node` ("/dev/loopN"). 0, or -errno with a message. */
int attach_node(const char *device, const char *via, bool swap, const char *file, const char *place,
                char *node, size_t node_size, char *message, size_t message_size);

/* Take the node away again (refused while it is used). 0, or -errno with a message
 * (-ENOENT: no server serves DEVICE). */
int detach_node(const char *device, const char *place, char *message, size_t message_size);

/* The node DEVICE is attached as ("" for none). 0, or -errno with a message. */
int attached_node(const char *device, char *node, size_t node_size, char *message,
                  size_t message_size);

#endif
