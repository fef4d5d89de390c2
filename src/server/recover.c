/* recover.c - what the server records in each device's state (uzram_state_area): the ublk
 * device attached to it, so that the next server, after a crash or a planned restart, takes
 * that device over (ublk user recovery, attach/ublk.c) instead of leaving its I/O waiting. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach/attach.h"
#include "common/systemd.h"
#include "server/persist.h"
#include "server/recover.h"

#define AREA_MAGIC "uzramsv1"

/* At the start of a state's application area (uzram_state_area). Each field is one aligned
 * store, so a process killed while writing leaves a record the next one can read. */
struct area_record {
    char magic[8];
    _Atomic int32_t ublk_id; /* /dev/ublkbN attached to the device, or -1 */
    _Atomic int32_t owner;   /* the process that served it */
    /* "=" and the --recompress its codec settings were made from ("" none: a state of a
     * server before this field, or a spec too long): a process killed while writing it
     * leaves one that matches nothing, and the next server sets the algorithm again. */
    char recompress[1024];
};

static struct area_record *record_of(struct uzram *dev, bool create)
{
    size_t size;
    struct area_record *record = uzram_state_area(dev, &size);
    if (record == NULL || size < sizeof *record)
        return NULL;
    if (memcmp(record->magic, AREA_MAGIC, sizeof record->magic) != 0) {
        if (!create)
            return NULL;
        atomic_store(&record->ublk_id, -1);
        memcpy(record->magic, AREA_MAGIC, sizeof record->magic);
    }
    return record;
}

void recover_note_attachment(struct uzram *dev, const char *device)
{
    struct area_record *record = record_of(dev, true);
    if (record == NULL)
        return;
    int id = -1;
    if (strncmp(device, "/dev/ublkb", 10) == 0)
        id = atoi(device + 10);
    atomic_store(&record->owner, (int32_t)getpid());
    atomic_store(&record->ublk_id, id);
}

bool recover_same_recompress(struct uzram *dev, const char *spec)
{
    struct area_record *record = record_of(dev, false);
    return record != NULL && record->recompress[0] == '=' &&
           strncmp(record->recompress + 1, spec, sizeof record->recompress - 1) == 0;
}

void recover_note_recompress(struct uzram *dev, const char *spec)
{
    struct area_record *record = record_of(dev, true);
    if (record == NULL)
        return;
    record->recompress[0] = '\0';
    if (strlen(spec) + 1 < sizeof record->recompress) {
        snprintf(record->recompress + 1, sizeof record->recompress - 1, "%s", spec);
        record->recompress[0] = '='; /* last: whole before it counts */
    }
}

/* The recoverable ublk device `id` of process `owner`, as the driver lists it? */
static bool recoverable(int id, int owner)
{
    struct ublk_recoverable list[64];
    char message[256];
    int count = ublk_list_recoverable(list, 64, message, sizeof message);
    for (int i = 0; i < count; i++)
        if (list[i].dev_id == id && list[i].owner == owner)
            return true;
    return false;
}

/* Device `name`'s ublk device, if its state records one: taken over; one that cannot be is
 * deleted (its held I/O fails) rather than left waiting for ever. */
static void recover_one(struct nbd_exports *exports, const char *name)
{
    struct nbd_export *export = nbd_export_get(exports, name, false);
    if (export == NULL)
        return;
    struct area_record *record = record_of(export->dev, false);
    int id = record ? atomic_load(&record->ublk_id) : -1;
    char message[512];
    if (id >= 0 && !recoverable(id, atomic_load(&record->owner))) {
        fprintf(stderr, "uzram: %s: /dev/ublkb%d of the previous server is gone\n", name, id);
        atomic_store(&record->ublk_id, -1);
    } else if (id >= 0) {
        int rc =
            attachment_recover_ublk(nbd_export_attachment(export), id, message, sizeof message);
        if (rc == 0) {
            fprintf(stderr, "uzram: %s: took /dev/ublkb%d over from process %d\n", name, id,
                    (int)atomic_load(&record->owner));
            atomic_store(&record->owner, (int32_t)getpid());
        } else {
            fprintf(stderr, "uzram: %s: cannot take /dev/ublkb%d over: %s; deleting it\n", name, id,
                    message);
            if (ublk_delete(id, message, sizeof message) < 0)
                fprintf(stderr, "uzram: %s: cannot delete /dev/ublkb%d: %s\n", name, id, message);
            atomic_store(&record->ublk_id, -1);
        }
    }
    nbd_export_put(exports, export, false);
}

void recover_ublk_devices(struct nbd_exports *exports)
{
    static int fds[SYSTEMD_MAX_STATES];
    static char names[SYSTEMD_MAX_STATES][128];
    size_t count = persist_list(fds, names, SYSTEMD_MAX_STATES);
    for (size_t i = 0; i < count; i++)
        recover_one(exports, names[i] + strlen(SYSTEMD_STATE_PREFIX));
}
