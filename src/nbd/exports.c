/* exports.c - the devices one `uzram serve` serves: each an NBD export by name, with who
 * uses it; hot-add and hot-remove (zram's hot_add / hot_remove); their shared memory limit. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd/exports.h"
#include "attach/attach.h"
#include "common/text.h"

/* A device the server serves: its export and who uses it. */
struct device {
    struct nbd_export export; /* first: an export handed out leads back to its device */
    char name[NBD_EXPORT_NAME_MAX + 1];
    unsigned clients;   /* sessions that chose it (client holds) */
    unsigned holds;     /* short holds: lookups, control requests */
    unsigned attaching; /* attach or detach requests running (nbd_export_attach()) */
    bool dropping;      /* a reset runs: new clients and attaches wait (nbd_export_reset()) */
    struct nbd_device_watch watch;
    struct attachment *attachment; /* its /dev node (uzram attach), NULL when detached all */
    struct device *next;
};

/* Lock order: a connection's or control request's own locks are never held while this
 * lock is taken, and nothing else is taken under it but the engine's read-only calls
 * (uzram_get_config), an attachment's state lock (a leaf) and the log. A device is destroyed
 * outside it, after the last short hold ended; a device with a client is never removed. */
struct nbd_exports {
    pthread_mutex_t lock;
    pthread_cond_t released; /* a short hold ended, or a reset or an attach request */
    struct device *devices;  /* in the order they were added */
    size_t count;
    /* What "" selects: the first device at start, for ever; once removed, "" finds nothing
     * (a client reconnecting with "" must not get another device's data), even when a device
     * of that name is added again: default_name is then "" and default_chosen stays. */
    char default_name[NBD_EXPORT_NAME_MAX + 1];
    bool default_chosen;
    struct uzram_group *group; /* every device is in it: --server-mem-limit */
    /* What every device's attachment shares (nbd_exports_set_attach()). */
    struct attach_settings attach;
    char unix_path[PATH_MAX], runtime_dir[PATH_MAX];
    nbd_make_device_fn *make_device;
    void *make_device_context;
    bool quiet;
};

int nbd_exports_create(uint64_t mem_limit, nbd_make_device_fn *make_device,
                       void *make_device_context, bool quiet, struct nbd_exports **out)
{
    struct nbd_exports *exports = calloc(1, sizeof *exports);
    if (exports == NULL)
        return -ENOMEM;
    int rc = uzram_group_create(mem_limit, &exports->group);
    if (rc < 0) {
        free(exports);
        return rc;
    }
    pthread_mutex_init(&exports->lock, NULL);
    pthread_cond_init(&exports->released, NULL);
    exports->make_device = make_device;
    exports->make_device_context = make_device_context;
    exports->quiet = quiet;
    *out = exports;
    return 0;
}

void nbd_exports_destroy(struct nbd_exports *exports)
{
    if (exports == NULL)
        return;
    for (struct device *d = exports->devices, *next; d != NULL; d = next) {
        next = d->next;
        attachment_destroy(d->attachment);
        uzram_destroy(d->export.dev);
        free(d);
    }
    uzram_group_destroy(exports->group);
    pthread_mutex_destroy(&exports->lock);
    pthread_cond_destroy(&exports->released);
    free(exports);
}

static struct device *device_of(struct nbd_export *export)
{
    return (struct device *)export;
}

void nbd_exports_set_attach(struct nbd_exports *exports, const struct attach_settings *settings)
{
    exports->attach = *settings;
    if (settings->unix_path != NULL) {
        snprintf(exports->unix_path, sizeof exports->unix_path, "%s", settings->unix_path);
        exports->attach.unix_path = exports->unix_path;
    }
    snprintf(exports->runtime_dir, sizeof exports->runtime_dir, "%s",
             settings->runtime_dir ? settings->runtime_dir : ".");
    exports->attach.runtime_dir = exports->runtime_dir;
}

void nbd_exports_detach_all(struct nbd_exports *exports, bool hand_over)
{
    pthread_mutex_lock(&exports->lock);
    for (struct device *d = exports->devices; d != NULL; d = d->next) {
        if (hand_over)
            attachment_hand_over(d->attachment);
        attachment_destroy(d->attachment);
        d->attachment = NULL;
    }
    pthread_mutex_unlock(&exports->lock);
}

struct attachment *nbd_export_attachment(const struct nbd_export *export)
{
    return device_of((struct nbd_export *)export)->attachment;
}

/* Under the lock. */
static struct device *find(struct nbd_exports *exports, const char *name)
{
    for (struct device *d = exports->devices; d != NULL; d = d->next)
        if (strcmp(d->name, name) == 0)
            return d;
    return NULL;
}

/* "4G, lz4" (+ ", read-only"): how a device is described in lists and log lines. */
static void describe(const struct device *d, char *text, size_t size)
{
    struct uzram_config config;
    char human[16];
    uzram_get_config(d->export.dev, &config);
    util_human_size(config.disksize, human, sizeof human);
    snprintf(text, size, "%s, %s%s", human, config.comp_algorithm,
             d->export.read_only ? ", read-only" : "");
}

/* Why a device could not join the server's memory limit: its page table (charged whole as
 * it joins: a client can make all of it resident) does not fit, with the figures. */
static void group_refusal(struct nbd_exports *exports, struct uzram *dev, const char *name, int rc,
                          char *message, size_t size)
{
    struct uzram_stats st = {0};
    struct uzram_group_stats group = {0};
    char table[16], limit[16], used[16];
    uzram_get_stats(dev, &st, sizeof st);
    uzram_group_get_stats(exports->group, &group);
    util_human_size(st.table_mem, table, sizeof table);
    util_human_size(group.mem_limit, limit, sizeof limit);
    util_human_size(group.mem_used, used, sizeof used);
    if (rc == -ENOSPC)
        snprintf(message, size,
                 "the page table of %s takes %s (16 bytes per 4 KiB page) and does not fit "
                 "under the server's memory limit (%s, %s in use); give it a smaller size or "
                 "raise server_mem_limit",
                 name, table, limit, used);
    else
        snprintf(message, size, "cannot put %s under the server's memory limit: %s", name,
                 strerror(-rc));
}

/* Put `dev` in the server's group. A device taken over from its state (serve --persist)
 * holds data already, and the library lets only an empty device join a group (include/
 * uzram.h, uzram_adopt): with no server memory limit to keep, it is served outside the group
 * (server_mem_used does not count it), said once; under a limit that is refused (serve refuses
 * --persist with --server-mem-limit before this). */
static int join_group(struct nbd_exports *exports, struct uzram *dev, const char *name)
{
    int rc = uzram_set_group(dev, exports->group);
    struct uzram_group_stats group = {0};
    size_t area;
    uzram_group_get_stats(exports->group, &group);
    if (rc == -EBUSY && group.mem_limit == 0 && uzram_state_area(dev, &area) != NULL) {
        fprintf(stderr,
                "uzram: %s: taken over with its data: served outside the server's memory group "
                "(server_mem_used does not count it)\n",
                name);
        rc = 0;
    }
    return rc;
}

int nbd_exports_set_mem_limit(struct nbd_exports *exports, uint64_t bytes, char *message,
                              size_t size)
{
    int rc = 0;
    size_t area;
    pthread_mutex_lock(&exports->lock);
    for (const struct device *d = exports->devices; d != NULL && bytes != 0; d = d->next) {
        if (uzram_state_area(d->export.dev, &area) == NULL)
            continue;
        struct uzram_group_stats group = {0};
        uzram_group_get_stats(exports->group, &group);
        snprintf(message, size,
                 "device %s keeps its state (--persist), and --persist cannot keep a device in "
                 "a --server-mem-limit group yet (serve refuses the two together): "
                 "server_mem_limit stays %llu",
                 d->name, (unsigned long long)group.mem_limit);
        rc = -ENOTSUP;
        break;
    }
    if (rc == 0)
        uzram_group_set_mem_limit(exports->group, bytes);
    pthread_mutex_unlock(&exports->lock);
    return rc;
}

/* Put a device made for the server in the list (and in the group, before anything is
 * stored in it). On failure the device is not taken: the caller destroys it. */
int nbd_exports_add(struct nbd_exports *exports, const struct nbd_new_device *made, char *message,
                    size_t size)
{
    struct device *d = calloc(1, sizeof *d);
    if (d == NULL) {
        snprintf(message, size, "out of memory");
        return -ENOMEM;
    }
    snprintf(d->name, sizeof d->name, "%s", made->name);
    d->export = (struct nbd_export){made->dev, d->name, made->read_only, exports->attach.swap};
    struct attach_settings attach = exports->attach;
    attach.dev = made->dev;
    attach.name = d->name;
    attach.read_only = made->read_only;
    size_t area;
    attach.persistent = uzram_state_area(made->dev, &area) != NULL; /* a successor recovers it */
    if (attachment_create(&attach, &d->attachment) < 0) {
        free(d);
        snprintf(message, size, "out of memory");
        return -ENOMEM;
    }
    uzram_get_stats(made->dev, &d->watch.seen, sizeof d->watch.seen);
    int rc = 0;
    pthread_mutex_lock(&exports->lock);
    if (find(exports, d->name) != NULL) {
        snprintf(message, size, "this server has a device named %s already; choose another name",
                 d->name);
        rc = -EEXIST;
    } else if (exports->count >= NBD_SERVER_MAX_EXPORTS) {
        snprintf(message, size, "this server serves %u devices already, the most it can",
                 NBD_SERVER_MAX_EXPORTS);
        rc = -ENOSPC;
    } else if ((rc = join_group(exports, made->dev, d->name)) < 0) {
        group_refusal(exports, made->dev, d->name, rc, message, size);
    }
    if (rc < 0) {
        pthread_mutex_unlock(&exports->lock);
        attachment_destroy(d->attachment);
        free(d);
        return rc;
    }
    struct device **tail = &exports->devices;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = d;
    if (exports->count++ == 0 && !exports->default_chosen) {
        snprintf(exports->default_name, sizeof exports->default_name, "%s", d->name);
        exports->default_chosen = true;
    }
    char text[64];
    describe(d, text, sizeof text);
    snprintf(message, size, "%s (%s)", d->name, text);
    pthread_mutex_unlock(&exports->lock);
    return 0;
}

void nbd_exports_watch(struct nbd_exports *exports, nbd_watch_fn *watch)
{
    pthread_mutex_lock(&exports->lock);
    for (struct device *d = exports->devices; d != NULL; d = d->next)
        watch(d->export.dev, d->name, &d->watch);
    pthread_mutex_unlock(&exports->lock);
}

struct uzram_group *nbd_exports_group(struct nbd_exports *exports)
{
    return exports->group;
}

struct nbd_export *nbd_export_get(struct nbd_exports *exports, const char *name, bool client)
{
    pthread_mutex_lock(&exports->lock);
    struct device *d = find(exports, name[0] ? name : exports->default_name);
    /* A client comes in after a reset, never during one: it would see its writes vanish. */
    while (d != NULL && client && d->dropping) {
        pthread_cond_wait(&exports->released, &exports->lock);
        d = find(exports, name[0] ? name : exports->default_name);
    }
    if (d != NULL && client)
        d->clients++;
    else if (d != NULL)
        d->holds++;
    pthread_mutex_unlock(&exports->lock);
    return d ? &d->export : NULL;
}

void nbd_export_put(struct nbd_exports *exports, struct nbd_export *export, bool client)
{
    struct device *d = device_of(export);
    pthread_mutex_lock(&exports->lock);
    if (client) {
        d->clients--;
    } else {
        d->holds--;
        pthread_cond_broadcast(&exports->released);
    }
    pthread_mutex_unlock(&exports->lock);
}

unsigned nbd_export_clients(struct nbd_exports *exports, const struct nbd_export *export)
{
    pthread_mutex_lock(&exports->lock);
    unsigned clients = device_of((struct nbd_export *)export)->clients;
    pthread_mutex_unlock(&exports->lock);
    return clients;
}

size_t nbd_export_list(struct nbd_exports *exports, struct nbd_export_entry *entries, size_t max)
{
    size_t count = 0;
    pthread_mutex_lock(&exports->lock);
    const struct device *first = find(exports, exports->default_name);
    for (int pass = 0; pass < 2; pass++) {
        for (const struct device *d = exports->devices; d != NULL && count < max; d = d->next) {
            if ((pass == 0) != (d == first))
                continue;
            char text[64];
            describe(d, text, sizeof text);
            snprintf(entries[count].name, sizeof entries[count].name, "%s", d->name);
            snprintf(entries[count].description, sizeof entries[count].description,
                     "uzram device, %s%s", text, d == first ? " (the default export)" : "");
            count++;
        }
    }
    pthread_mutex_unlock(&exports->lock);
    return count;
}

int nbd_exports_hot_add(struct nbd_exports *exports, const char *spec, char *message, size_t size)
{
    if (exports->make_device == NULL) {
        snprintf(message, size, "this server cannot make devices");
        return -ENOTSUP;
    }
    /* The name first, so that a taken one is refused before a device is made. */
    char name[NBD_EXPORT_NAME_MAX + 2];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(spec, ":"), spec);
    pthread_mutex_lock(&exports->lock);
    bool taken = find(exports, name) != NULL;
    pthread_mutex_unlock(&exports->lock);
    if (taken) {
        snprintf(message, size,
                 "this server has a device named %s already; choose another name (uzram status "
                 "lists them)",
                 name);
        return -EEXIST;
    }
    struct nbd_new_device made = {0};
    int rc = exports->make_device(exports->make_device_context, spec, &made, message, size);
    if (rc < 0)
        return rc;
    rc = nbd_exports_add(exports, &made, message, size);
    if (rc < 0) {
        uzram_destroy(made.dev);
        return rc;
    }
    if (!exports->quiet)
        fprintf(stderr, "uzram: hot-add: %s\n", message);
    return 0;
}

/* Under the lock: whether anybody but short holds uses `d`'s data: its NBD sessions, its /dev
 * node (a loop device on its FUSE file, whether mounted or not, or nbd-client), an attach or
 * detach request running. The FUSE file exists only while attached, so its opens are counted
 * with the node. 0 when nobody does; else -EBUSY with a line saying who and what to end before
 * trying `what` again. Kernel zram refuses a reset of a device that is open the same way. */
static int users_locked(struct device *d, const char *what, char *message, size_t size)
{
    char node[BLOCKDEV_PATH_MAX] = "";
    if (d->attachment != NULL)
        attachment_device(d->attachment, node, sizeof node);
    if (node[0] != '\0') {
        snprintf(message, size,
                 "%s is attached as %s; stop using it (umount, swapoff) and run uzram detach %s "
                 "first, then %s again",
                 d->name, node, d->name, what);
    } else if (d->attaching > 0 || d->dropping) {
        snprintf(message, size, "%s of %s is running; %s when it has ended",
                 d->dropping ? "a reset" : "an attach or detach", d->name, what);
    } else if (d->clients > 0) {
        snprintf(message, size,
                 "%u client%s use%s %s; disconnect %s first (nbd-client -d, qemu's "
                 "blockdev-del, or stop the program), then %s again",
                 d->clients, d->clients == 1 ? "" : "s", d->clients == 1 ? "s" : "", d->name,
                 d->clients == 1 ? "it" : "them", what);
    } else {
        return 0;
    }
    return -EBUSY;
}

int nbd_export_reset(struct nbd_exports *exports, struct nbd_export *export, const char *value,
                     char *message, size_t size)
{
    struct device *d = device_of(export);
    pthread_mutex_lock(&exports->lock);
    int rc = users_locked(d, "reset", message, size);
    if (rc == 0)
        d->dropping = true; /* (a refusal must not end another request's reset) */
    pthread_mutex_unlock(&exports->lock);
    if (rc < 0)
        return rc;
    rc = uzram_attr_set(export->dev, "reset", value);
    pthread_mutex_lock(&exports->lock);
    d->dropping = false;
    pthread_cond_broadcast(&exports->released);
    pthread_mutex_unlock(&exports->lock);
    return rc;
}

/* An attach or detach request counts as a user while it runs; it waits for a reset that runs. */
static void attach_begin(struct nbd_exports *exports, struct device *d)
{
    pthread_mutex_lock(&exports->lock);
    while (d->dropping)
        pthread_cond_wait(&exports->released, &exports->lock);
    d->attaching++;
    pthread_mutex_unlock(&exports->lock);
}

static void attach_end(struct nbd_exports *exports, struct device *d)
{
    pthread_mutex_lock(&exports->lock);
    d->attaching--;
    pthread_mutex_unlock(&exports->lock);
}

int nbd_export_attach(struct nbd_exports *exports, struct nbd_export *export, const char *via,
                      bool swap, const char *file, char *reply, size_t reply_size, char *message,
                      size_t message_size)
{
    attach_begin(exports, device_of(export));
    int rc = attachment_attach(device_of(export)->attachment, via, swap, file, reply, reply_size,
                               message, message_size);
    attach_end(exports, device_of(export));
    return rc;
}

int nbd_export_detach(struct nbd_exports *exports, struct nbd_export *export, char *reply,
                      size_t reply_size, char *message, size_t message_size)
{
    attach_begin(exports, device_of(export));
    int rc =
        attachment_detach(device_of(export)->attachment, reply, reply_size, message, message_size);
    attach_end(exports, device_of(export));
    return rc;
}

int nbd_exports_hot_remove(struct nbd_exports *exports, const char *name, char *message,
                           size_t size)
{
    pthread_mutex_lock(&exports->lock);
    struct device **link = &exports->devices;
    while (*link != NULL && strcmp((*link)->name, name) != 0)
        link = &(*link)->next;
    struct device *d = *link;
    if (d == NULL) {
        pthread_mutex_unlock(&exports->lock);
        snprintf(message, size, "this server has no device named %s (uzram status lists them)",
                 name);
        return -ENOENT;
    }
    int rc = users_locked(d, "hot-remove", message, size);
    if (rc < 0) {
        pthread_mutex_unlock(&exports->lock);
        return rc;
    }
    /* Out of the list: nobody new finds it. Short holds (a lookup, a control request on
     * it, an attach) end by themselves; then nobody else has it. */
    *link = d->next;
    exports->count--;
    while (d->holds > 0)
        pthread_cond_wait(&exports->released, &exports->lock);
    if (users_locked(d, "hot-remove", message, size) < 0) {
        /* Attached (by a request that ran meanwhile): back in the list, at its end. */
        struct device **tail = &exports->devices;
        while (*tail != NULL)
            tail = &(*tail)->next;
        d->next = NULL;
        *tail = d;
        exports->count++;
        pthread_mutex_unlock(&exports->lock);
        return -EBUSY;
    }
    if (strcmp(exports->default_name, name) == 0)
        exports->default_name[0] = '\0'; /* no device has the name "" */
    pthread_mutex_unlock(&exports->lock);
    attachment_destroy(d->attachment);

    struct uzram_stats st = {0};
    char human[16];
    uzram_get_stats(d->export.dev, &st, sizeof st);
    util_human_size(st.orig_data_size, human, sizeof human);
    /* Stops the device's background threads (recompression, writeback) too. */
    uzram_destroy(d->export.dev);
    snprintf(message, size, "%s removed; its %llu bytes of data (%s) are gone", name,
             (unsigned long long)st.orig_data_size, human);
    if (!exports->quiet)
        fprintf(stderr, "uzram: hot-remove: %s\n", message);
    free(d);
    return 0;
}

uint64_t nbd_exports_data(struct nbd_exports *exports, size_t *count)
{
    uint64_t bytes = 0;
    pthread_mutex_lock(&exports->lock);
    for (const struct device *d = exports->devices; d != NULL; d = d->next) {
        struct uzram_stats st = {0};
        uzram_get_stats(d->export.dev, &st, sizeof st);
        bytes += st.orig_data_size;
    }
    *count = exports->count;
    pthread_mutex_unlock(&exports->lock);
    return bytes;
}

size_t nbd_exports_describe(struct nbd_exports *exports, bool detailed, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    pthread_mutex_lock(&exports->lock);
    for (const struct device *d = exports->devices; d != NULL && used < size; d = d->next) {
        struct uzram_config config;
        uzram_get_config(d->export.dev, &config);
        int n = detailed ? snprintf(text + used, size - used, "%s%s (%llu bytes, %s%s)",
                                    used ? ", " : "", d->name, (unsigned long long)config.disksize,
                                    config.comp_algorithm, d->export.read_only ? ", read-only" : "")
                         : snprintf(text + used, size - used, "%s%s", used ? ", " : "", d->name);
        used = n < 0 ? size : used + (size_t)n;
    }
    size_t count = exports->count;
    pthread_mutex_unlock(&exports->lock);
    return count;
}
