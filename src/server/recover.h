/* recover.h - the ublk device a device's state records (recover.c), recovered by the next
 * server. Used by control/service.c (attach, detach) and cli/serve.c (at start). */
#ifndef UZRAM_SERVER_RECOVER_H
#define UZRAM_SERVER_RECOVER_H

#include <stdbool.h>

#include "nbd/exports.h"
#include "uzram.h"

/* `device` ("/dev/ublkbN"; anything else, or "", for none) is now attached to `dev`: recorded
 * in its state (if it has one), so that the next server recovers a ublk device. */
void recover_note_attachment(struct uzram *dev, const char *device);

/* Whether `dev`'s state was made by a server with --recompress `spec` (its codec table then
 * holds that setting, a trained dictionary included: kept rather than made again, which
 * would train anew and take another of the 16 codec entries at every restart); and record
 * `spec` once it is set. Nothing for a device without a state. */
bool recover_same_recompress(struct uzram *dev, const char *spec);
void recover_note_recompress(struct uzram *dev, const char *spec);

/* At start, once the devices are served: each state's recorded ublk device, left by the
 * previous server (killed, or a planned restart), is taken over (ublk user recovery); one that
 * cannot be is deleted rather than left holding its I/O for ever. Says what it did. */
void recover_ublk_devices(struct nbd_exports *exports);

#endif
