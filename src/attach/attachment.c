/* attachment.c - the server side of `uzram attach` and `uzram detach`: at most one /dev node
 * per served device, made and undone in order, and what happens to it when the server stops. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"
#include "common/process.h"
#include "nbd/limits.h"

/* nbd-client connects, negotiates and configures the device in well under a second; the
 * control request that runs it must end within its own deadline. */
#define NBD_CLIENT_TIMEOUT 4

enum method { NONE, LOOP, NBD, UBLK };

struct attachment {
    struct attach_settings settings;
    /* One attach or detach at a time, and none once the server stops. */
    pthread_mutex_t operation_lock;
    bool stopped;
    enum method method;
    struct ublk_server *ublk; /* UBLK: the thread that serves /dev/ublkbN */
    struct fuse_file *file;   /* LOOP: the disk as a file, and its identity */
    dev_t file_dev;
    ino_t file_ino;
    struct loop_holder holder; /* LOOP: keeps the loop device open (it clears itself after) */
    /* What `uzram status` shows, readable while an operation runs. */
    pthread_mutex_t state_lock;
    char device[BLOCKDEV_PATH_MAX];       /* "" when none */
    atomic_uint_least64_t uring_requests; /* served over FUSE's io_uring, all attachments */
};

int attachment_create(const struct attach_settings *settings, struct attachment **out)
{
    /* A swap device's pool takes its new memory from a reserve faulted in ahead of need. */
    int rc = settings->swap ? swap_device_prepare(settings->dev) : 0;
    if (rc < 0)
        return rc;
    struct attachment *attachment = calloc(1, sizeof *attachment);
    if (attachment == NULL)
        return -ENOMEM;
    attachment->settings = *settings;
    attachment->holder = (struct loop_holder){.pid = 0, .pipe = -1};
    pthread_mutex_init(&attachment->operation_lock, NULL);
    pthread_mutex_init(&attachment->state_lock, NULL);
    *out = attachment;
    return 0;
}

static void set_device(struct attachment *attachment, const char *device)
{
    pthread_mutex_lock(&attachment->state_lock);
    snprintf(attachment->device, sizeof attachment->device, "%s", device);
    pthread_mutex_unlock(&attachment->state_lock);
}

void attachment_device(struct attachment *attachment, char *device, size_t size)
{
    pthread_mutex_lock(&attachment->state_lock);
    snprintf(device, size, "%s", attachment->device);
    pthread_mutex_unlock(&attachment->state_lock);
}

uint64_t attachment_uring_requests(struct attachment *attachment)
{
    return atomic_load_explicit(&attachment->uring_requests, memory_order_relaxed);
}

static int attach_loop(struct attachment *attachment, const char *path, char *reply,
                       size_t reply_size, char *message, size_t message_size)
{
    const struct attach_settings *settings = &attachment->settings;
    char default_path[PATH_MAX];
    if (path == NULL) {
        int n = snprintf(default_path, sizeof default_path, "%s/%s.disk", settings->runtime_dir,
                         settings->name);
        if (n < 0 || (size_t)n >= sizeof default_path) {
            snprintf(message, message_size, "file path too long; give one with --file");
            return -ENAMETOOLONG;
        }
        path = default_path;
    }
    struct fuse_file_options options = {
        .path = path,
        .name = settings->name,
        .threads = settings->threads,
        .read_only = settings->read_only,
        .direct_io = true,
        .uring_requests = &attachment->uring_requests,
    };
    struct fuse_file *file;
    int rc = fuse_file_start(settings->dev, &options, &file, message, message_size);
    if (rc < 0)
        return rc;
    struct stat st;
    if (stat(path, &st) < 0) {
        rc = -errno;
        snprintf(message, message_size, "cannot stat %s after mounting it: %s", path,
                 strerror(errno));
        fuse_file_stop(file, false);
        return rc;
    }
    char device[BLOCKDEV_PATH_MAX];
    bool direct_io = false;
    int fd = -1;
    rc = loop_attach(path, settings->read_only, device, &direct_io, &fd, message, message_size);
    if (rc == 0)
        rc = loop_hold(&fd, &attachment->holder, message, message_size);
    if (rc < 0) {
        fuse_file_stop(file, false);
        return rc;
    }
    attachment->method = LOOP;
    attachment->file = file;
    attachment->file_dev = st.st_dev;
    attachment->file_ino = st.st_ino;
    set_device(attachment, device);
    snprintf(reply, reply_size, "device %s\nfile %s\ndirect_io %d\n", device, path, direct_io);
    return 0;
}

/* Write `value` to /sys/block/NAME/queue/`setting` of /dev/NAME; a warning if refused. */
static void queue_setting(const char *device, const char *setting, const char *value)
{
    char path[128];
    snprintf(path, sizeof path, "/sys/block/%s/queue/%s", device + 5, setting);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    bool done = fd >= 0 && write(fd, value, strlen(value)) == (ssize_t)strlen(value);
    if (fd >= 0)
        close(fd);
    if (!done)
        fprintf(stderr, "uzram: warning: cannot set %s to %s\n", path, value);
}

/* A swap device's queue: no writeback throttling (wbt would hold reclaim's swap-outs back
 * behind the latency of the ones in flight: kswapd sat 30 s in wbt_wait in a VM test). */
static void swap_queue(const char *device)
{
    queue_setting(device, "wbt_lat_usec", "0");
}

static int attach_nbd(struct attachment *attachment, bool swap, char *reply, size_t reply_size,
                      char *message, size_t message_size)
{
    const struct attach_settings *settings = &attachment->settings;
    if (settings->unix_path == NULL) {
        snprintf(message, message_size,
                 "attaching through nbd-client needs the server's Unix socket (it was started "
                 "with --no-unix); use --via loop");
        return -EINVAL;
    }
    char device[BLOCKDEV_PATH_MAX];
    if (nbd_free_device(device) < 0) {
        snprintf(message, message_size,
                 nbd_module_loaded() ? "every /dev/nbdN is connected; load the module with "
                                       "more (modprobe nbd nbds_max=32) or use --via loop"
                                     : "the kernel has no NBD client (nbd, CONFIG_BLK_DEV_NBD: "
                                       "modprobe nbd); or use --via loop");
        return -ENODEV;
    }
    struct nbd_client_plan plan = {
        .socket = settings->unix_path,
        .export_name = settings->name,
        .device = device,
        .read_only = settings->read_only,
    };
    const char *argv[NBD_CLIENT_ARGS_MAX];
    nbd_client_argv(&plan, argv);
    char output[512];
    int rc = run_program(argv, NBD_CLIENT_TIMEOUT, output, sizeof output);
    if (rc != 0) {
        snprintf(message, message_size, "nbd-client could not connect %s: %s", device, output);
        return rc < 0 ? rc : -EIO;
    }
    /* For swap, every request fits the buffer each server worker already has: a swap-out
     * then allocates no request buffer. */
    if (swap) {
        char value[32];
        snprintf(value, sizeof value, "%u", NBD_SERVER_WORKER_BUFFER / 1024);
        queue_setting(device, "max_sectors_kb", value);
        swap_queue(device);
    }
    attachment->method = NBD;
    set_device(attachment, device);
    snprintf(reply, reply_size, "device %s\n", device);
    return 0;
}

static int attach_ublk(struct attachment *attachment, bool swap, char *reply, size_t reply_size,
                       char *message, size_t message_size)
{
    struct uzram_config config;
    uzram_get_config(attachment->settings.dev, &config);
    int rc = ublk_start(attachment->settings.dev, config.disksize, attachment->settings.read_only,
                        attachment->settings.threads, attachment->settings.persistent, swap,
                        &attachment->ublk, message, message_size);
    if (rc < 0)
        return rc;
    if (swap)
        swap_queue(ublk_path(attachment->ublk));
    attachment->method = UBLK;
    set_device(attachment, ublk_path(attachment->ublk));
    snprintf(reply, reply_size, "device %s\n", ublk_path(attachment->ublk));
    return 0;
}

/* Whether a device may be attached now (under operation_lock): 0, or a negative errno with a
 * message. */
static int attach_allowed(struct attachment *attachment, char *message, size_t message_size)
{
    if (attachment->stopped) {
        snprintf(message, message_size, "the server is stopping");
        return -ESHUTDOWN;
    }
    if (attachment->method != NONE) {
        snprintf(message, message_size, "%s is already attached as %s; uzram detach %s first",
                 attachment->settings.name, attachment->device, attachment->settings.name);
        return -EEXIST;
    }
    return 0;
}

int attachment_attach(struct attachment *attachment, const char *via, bool swap, const char *file,
                      char *reply, size_t reply_size, char *message, size_t message_size)
{
    int rc;
    pthread_mutex_lock(&attachment->operation_lock);
    if ((rc = attach_allowed(attachment, message, message_size)) < 0) {
        /* said */
    } else if (swap && !attachment->settings.swap) {
        snprintf(message, message_size,
                 "%s was not started with --swap (memory locked, I/O flusher, no OOM kill); "
                 "restart it with: uzram serve --swap --mem-limit SIZE ...",
                 attachment->settings.name);
        rc = -EINVAL;
    } else if ((rc = attach_privileged(attachment->settings.name, message, message_size)) < 0) {
        /* said: the server, not the caller, needs the privilege */
    } else if (strcmp(via, "loop") == 0) {
        rc = attach_loop(attachment, file, reply, reply_size, message, message_size);
    } else if (strcmp(via, "nbd") == 0 && file == NULL) {
        rc = attach_nbd(attachment, swap, reply, reply_size, message, message_size);
    } else if (strcmp(via, "ublk") == 0 && file == NULL) {
        rc = attach_ublk(attachment, swap, reply, reply_size, message, message_size);
    } else {
        snprintf(message, message_size, "usage: attach loop|nbd|ublk [swap] [/FILE]");
        rc = -EINVAL;
    }
    pthread_mutex_unlock(&attachment->operation_lock);
    return rc;
}

static int detach_nbd(struct attachment *attachment, char *message, size_t message_size)
{
    const char *device = attachment->device;
    int fd = blockdev_claim(device, message, message_size);
    if (fd < 0)
        return fd;
    close(fd);
    const char *argv[NBD_CLIENT_ARGS_MAX];
    nbd_client_disconnect_argv(device, argv);
    char output[512];
    int rc = run_program(argv, NBD_CLIENT_TIMEOUT, output, sizeof output);
    if (rc != 0) {
        snprintf(message, message_size, "nbd-client -d %s failed: %s", device, output);
        return rc < 0 ? rc : -EIO;
    }
    /* The kernel lets go of the device once its connection has ended: wait for that, so
     * that the next attach does not find it half torn down. */
    for (int tries = 0; tries < 200 && nbd_device_connected(device); tries++) {
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
    return 0;
}

/* Detach, in order: the device (only when nothing uses it), then the file under it. */
static int detach_locked(struct attachment *attachment, char *message, size_t message_size)
{
    int rc = 0;
    if (attachment->method == LOOP) {
        rc = loop_detach(attachment->device, attachment->file_dev, attachment->file_ino,
                         &attachment->holder, message, message_size);
        /* -ENXIO: the loop device let go of our file some other way (losetup -d); the file
         * is ours to take down all the same. */
        if (rc < 0 && rc != -ENXIO)
            return rc;
        fuse_file_stop(attachment->file, true);
        attachment->file = NULL;
    } else if (attachment->method == NBD) {
        rc = detach_nbd(attachment, message, message_size);
        if (rc < 0)
            return rc;
    } else if (attachment->method == UBLK) {
        int fd = blockdev_claim(attachment->device, message, message_size);
        if (fd < 0)
            return fd;
        close(fd);
        ublk_stop(attachment->ublk);
        attachment->ublk = NULL;
    }
    attachment->method = NONE;
    set_device(attachment, "");
    return 0;
}

int attachment_detach(struct attachment *attachment, char *reply, size_t reply_size, char *message,
                      size_t message_size)
{
    pthread_mutex_lock(&attachment->operation_lock);
    char device[BLOCKDEV_PATH_MAX];
    snprintf(device, sizeof device, "%s", attachment->device);
    int rc;
    if (attachment->method == NONE) {
        snprintf(message, message_size, "%s is not attached", attachment->settings.name);
        rc = -ENOENT;
    } else {
        rc = detach_locked(attachment, message, message_size);
        if (rc == 0)
            snprintf(reply, reply_size, "device %s\n", device);
    }
    pthread_mutex_unlock(&attachment->operation_lock);
    return rc;
}

/* The server stops: the data goes with it. A device nothing uses is detached as by
 * `uzram detach`; one still in use cannot be taken from its users, so it stays, every request
 * on it fails from now on (EIO), and a loop device goes away by itself once its last user
 * lets go of it. */
void attachment_stop(struct attachment *attachment)
{
    if (attachment == NULL)
        return;
    pthread_mutex_lock(&attachment->operation_lock);
    attachment->stopped = true;
    if (attachment->method != NONE) {
        char message[1024], device[BLOCKDEV_PATH_MAX];
        snprintf(device, sizeof device, "%s", attachment->device);
        if (detach_locked(attachment, message, sizeof message) == 0) {
            fprintf(stderr, "uzram: %s detached\n", device);
        } else {
            fprintf(stderr,
                    "uzram: %s stays attached: %s; from now on its I/O fails (the data is "
                    "discarded with the server)\n",
                    device, message);
            if (attachment->method == LOOP) {
                loop_let_go(&attachment->holder); /* it clears itself with its last user */
                fuse_file_stop(attachment->file, false);
                attachment->file = NULL;
            } else if (attachment->method == UBLK) {
                ublk_stop(attachment->ublk); /* the device goes, its users get errors */
                attachment->ublk = NULL;
            } else {
                fprintf(stderr, "uzram: when it is no longer used: nbd-client -d %s\n", device);
            }
            attachment->method = NONE;
            set_device(attachment, "");
        }
    }
    pthread_mutex_unlock(&attachment->operation_lock);
}

int attachment_recover_ublk(struct attachment *attachment, int dev_id, char *message,
                            size_t message_size)
{
    struct uzram_config config;
    uzram_get_config(attachment->settings.dev, &config);
    pthread_mutex_lock(&attachment->operation_lock);
    int rc = attach_allowed(attachment, message, message_size);
    if (rc == 0) {
        rc = ublk_recover(attachment->settings.dev, dev_id, config.disksize,
                          attachment->settings.read_only, &attachment->ublk, message, message_size);
    }
    if (rc == 0) {
        attachment->method = UBLK;
        set_device(attachment, ublk_path(attachment->ublk));
    }
    pthread_mutex_unlock(&attachment->operation_lock);
    return rc;
}

void attachment_hand_over(struct attachment *attachment)
{
    if (attachment == NULL)
        return;
    pthread_mutex_lock(&attachment->operation_lock);
    if (attachment->method == UBLK) {
        attachment->stopped = true;
        ublk_leave(attachment->ublk);
        attachment->ublk = NULL;
        attachment->method = NONE;
        set_device(attachment, "");
    }
    pthread_mutex_unlock(&attachment->operation_lock);
    attachment_stop(attachment);
}

void attachment_destroy(struct attachment *attachment)
{
    if (attachment == NULL)
        return;
    attachment_stop(attachment);
    pthread_mutex_destroy(&attachment->operation_lock);
    pthread_mutex_destroy(&attachment->state_lock);
    free(attachment);
}
