/* pass.h - recompression and writeback passes started from `uzram attr` (pass.c). */
#ifndef UZRAM_PASS_H
#define UZRAM_PASS_H

#include <stdbool.h>
#include <stddef.h>

#include "control/control.h"

/* Is writing attribute `name` a pass over the device's pages (recompress, writeback)? */
bool pass_attribute(const char *name);

/* Send `request` (setting `name` to `value` on `device`) and wait for the pass to end, as
 * long as a pass over the whole device may take; on a terminal, with a progress line.
 * control_ask()'s result, *body and message. */
int pass_run(const struct control_target *target, const char *device, const char *name,
             const char *value, const char *request, char **body, char *message,
             size_t message_size);

#endif
