/* ublk.c - `uzram attach --via ublk`: the served device as /dev/ublkbN through the kernel's
 * ublk driver, served by a thread of the server over io_uring. The driver copies each
 * request's data between the block layer's pages and this thread's buffers itself, so a
 * request costs the server no socket buffer and no allocation of its own: the way a swap
 * device must be served (a socket's reply needs kernel memory, which the kernel may be
 * waiting for that very swap-out to free). */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/ublk_cmd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"
#include "common/util.h"
#include "nbd/limits.h"

#define UBLK_CONTROL "/dev/ublk-control"
/* Requests in flight, and the largest (the buffer each has). */
#define UBLK_DEPTH 64u
#define UBLK_IO_BYTES (128u << 10)
/* The queue thread looks whether it should stop this often. */
#define QUEUE_POLL_MS 100

struct ublk_server {
    struct uzram *dev;
    bool read_only;
    int dev_id;
    int control_fd, char_fd;
    struct io_uring control;
    struct io_uring queue; /* the queue thread's alone */
    struct ublksrv_io_desc *descs;
    size_t descs_bytes;
    unsigned char *buffers; /* UBLK_DEPTH buffers of UBLK_IO_BYTES, faulted in */
    pthread_t thread;
    bool thread_started;
    atomic_bool stopping; /* the queue thread leaves within QUEUE_POLL_MS */
    /* The queue thread's start: 0 when its requests are fetched, or a negative errno. */
    pthread_mutex_t lock;
    pthread_cond_t ready_cond;
    bool ready;
    int ready_rc;
    char path[BLOCKDEV_PATH_MAX];
};

/* One control command (legacy opcodes: the kernel's CONFIG_BLKDEV_UBLK_LEGACY_OPCODES). */
static int control_command(struct ublk_server *s, unsigned op, void *buffer, unsigned length,
                           uint64_t data)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->control);
    if (sqe == NULL)
        return -EBUSY;
    memset(sqe, 0, 2 * sizeof *sqe); /* SQE128 */
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = s->control_fd;
    sqe->cmd_op = op;
    struct ublksrv_ctrl_cmd *cmd = (struct ublksrv_ctrl_cmd *)sqe->cmd;
    cmd->dev_id = (uint32_t)s->dev_id;
    cmd->queue_id = (uint16_t)-1;
    cmd->addr = (uint64_t)(uintptr_t)buffer;
    cmd->len = (uint16_t)length;
    cmd->data[0] = data;
    int rc = io_uring_submit(&s->control);
    if (rc < 0)
        return rc;
    struct io_uring_cqe *cqe;
    rc = io_uring_wait_cqe(&s->control, &cqe);
    if (rc < 0)
        return rc;
    rc = cqe->res;
    io_uring_cqe_seen(&s->control, cqe);
    return rc;
}

static void queue_command(struct ublk_server *s, unsigned op, unsigned tag, int result)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->queue);
    if (sqe == NULL) /* cannot be: the ring has room for two commands per tag */
        return;
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = s->char_fd;
    sqe->cmd_op = op;
    sqe->user_data = tag;
    struct ublksrv_io_cmd *cmd = (struct ublksrv_io_cmd *)sqe->cmd;
    cmd->q_id = 0;
    cmd->tag = (uint16_t)tag;
    cmd->result = result;
    cmd->addr = (uint64_t)(uintptr_t)(s->buffers + (size_t)tag * UBLK_IO_BYTES);
}

/* Run one request on the engine: bytes done, or a negative errno for the block layer. */
static int serve_request(struct ublk_server *s, unsigned tag)
{
    const struct ublksrv_io_desc *iod = &s->descs[tag];
    uint64_t offset = iod->start_sector << 9;
    size_t length = (size_t)iod->nr_sectors << 9;
    void *buffer = s->buffers + (size_t)tag * UBLK_IO_BYTES;
    int rc;
    switch (ublksrv_get_op(iod)) {
    case UBLK_IO_OP_READ:
        rc = length <= UBLK_IO_BYTES ? uzram_read(s->dev, offset, buffer, length) : -EINVAL;
        break;
    case UBLK_IO_OP_WRITE:
        rc = s->read_only             ? -EROFS
             : length > UBLK_IO_BYTES ? -EINVAL
                                      : uzram_write(s->dev, offset, buffer, length);
        break;
    case UBLK_IO_OP_FLUSH:
        return 0;
    case UBLK_IO_OP_DISCARD:
        rc = s->read_only ? -EROFS : uzram_discard(s->dev, offset, length);
        break;
    case UBLK_IO_OP_WRITE_ZEROES:
        rc = s->read_only ? -EROFS : uzram_write_zeroes(s->dev, offset, length, false);
        break;
    default:
        return -EOPNOTSUPP;
    }
    return rc < 0 ? rc : (int)length;
}

static void queue_ready(struct ublk_server *s, int rc)
{
    pthread_mutex_lock(&s->lock);
    s->ready = true;
    s->ready_rc = rc;
    pthread_cond_broadcast(&s->ready_cond);
    pthread_mutex_unlock(&s->lock);
}

/* The queue: fetch every tag, then serve and commit until told to stop (after STOP_DEV) or
 * until the driver aborts the commands. The driver wants every command of a queue from one
 * thread. */
static void *queue_main(void *arg)
{
    struct ublk_server *s = arg;
    for (unsigned tag = 0; tag < UBLK_DEPTH; tag++)
        queue_command(s, UBLK_IO_FETCH_REQ, tag, 0);
    int rc = io_uring_submit(&s->queue);
    queue_ready(s, rc < 0 ? rc : 0);
    unsigned live = rc < 0 ? 0 : UBLK_DEPTH;
    while (live > 0 && !atomic_load(&s->stopping)) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec wait = {0, QUEUE_POLL_MS * 1000000LL};
        rc = io_uring_submit_and_wait_timeout(&s->queue, &cqe, 1, &wait, NULL);
        if (rc < 0 && rc != -EINTR && rc != -ETIME)
            break;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&s->queue, head, cqe)
        {
            seen++;
            unsigned tag = (unsigned)cqe->user_data;
            if (cqe->res != UBLK_IO_RES_OK || tag >= UBLK_DEPTH) {
                live--; /* UBLK_IO_RES_ABORT: the device stops */
                continue;
            }
            queue_command(s, UBLK_IO_COMMIT_AND_FETCH_REQ, tag, serve_request(s, tag));
        }
        io_uring_cq_advance(&s->queue, seen);
    }
    return NULL;
}

static int open_char_device(struct ublk_server *s)
{
    char path[64];
    snprintf(path, sizeof path, "/dev/ublkc%d", s->dev_id);
    /* devtmpfs makes the node as the device is added: give it a moment. */
    for (int tries = 0; tries < 200; tries++) {
        s->char_fd = open(path, O_RDWR | O_CLOEXEC);
        if (s->char_fd >= 0 || errno != ENOENT)
            break;
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
    return s->char_fd < 0 ? -errno : 0;
}

/* Add the device, give it its parameters, map its request descriptors, fault the buffers in. */
static int add_device(struct ublk_server *s, uint64_t size, char *message, size_t message_size)
{
    struct ublksrv_ctrl_dev_info info = {
        .nr_hw_queues = 1,
        .queue_depth = UBLK_DEPTH,
        .max_io_buf_bytes = UBLK_IO_BYTES,
        .dev_id = (uint32_t)-1,
        .ublksrv_pid = getpid(),
    };
    int rc = control_command(s, UBLK_CMD_ADD_DEV, &info, sizeof info, 0);
    if (rc < 0) {
        snprintf(message, message_size, "ublk: adding a device failed: %s", strerror(-rc));
        return rc;
    }
    s->dev_id = (int)info.dev_id;
    struct ublk_params params = {
        .len = sizeof params,
        .types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD,
        .basic = {.attrs = s->read_only ? UBLK_ATTR_READ_ONLY : 0,
                  .logical_bs_shift = 12,
                  .physical_bs_shift = 12,
                  .io_opt_shift = 12,
                  .io_min_shift = 12,
                  .max_sectors = UBLK_IO_BYTES >> 9,
                  .dev_sectors = size >> 9},
        .discard = {.discard_granularity = UZRAM_PAGE_SIZE,
                    .max_discard_sectors = UINT32_MAX >> 9,
                    .max_write_zeroes_sectors = UINT32_MAX >> 9,
                    .max_discard_segments = 1},
    };
    rc = control_command(s, UBLK_CMD_SET_PARAMS, &params, sizeof params, 0);
    if (rc == 0)
        rc = open_char_device(s);
    if (rc < 0) {
        snprintf(message, message_size, "ublk: setting up /dev/ublkc%d failed: %s", s->dev_id,
                 strerror(-rc));
        return rc;
    }
    s->descs_bytes = (UBLK_DEPTH * sizeof *s->descs + 4095) & ~(size_t)4095;
    s->descs = mmap(NULL, s->descs_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, s->char_fd,
                    UBLKSRV_CMD_BUF_OFFSET);
    s->buffers = aligned_alloc(4096, (size_t)UBLK_DEPTH * UBLK_IO_BYTES);
    if (s->descs == MAP_FAILED || s->buffers == NULL) {
        snprintf(message, message_size, "ublk: out of memory for the request buffers");
        return -ENOMEM;
    }
    memset(s->buffers, 0, (size_t)UBLK_DEPTH * UBLK_IO_BYTES);
    rc = io_uring_queue_init(2 * UBLK_DEPTH, &s->queue, 0);
    if (rc < 0)
        snprintf(message, message_size, "ublk: io_uring: %s", strerror(-rc));
    return rc;
}

/* Start the queue thread, wait until it has fetched its requests, then start the device. */
static int start_device(struct ublk_server *s, char *message, size_t message_size)
{
    int rc = util_thread_start(&s->thread, queue_main, s, NBD_SERVER_THREAD_STACK);
    if (rc < 0) {
        snprintf(message, message_size, "ublk: cannot start the queue thread");
        return rc;
    }
    s->thread_started = true;
    pthread_mutex_lock(&s->lock);
    while (!s->ready)
        pthread_cond_wait(&s->ready_cond, &s->lock);
    rc = s->ready_rc;
    pthread_mutex_unlock(&s->lock);
    if (rc == 0)
        rc = control_command(s, UBLK_CMD_START_DEV, NULL, 0, (uint64_t)getpid());
    if (rc < 0)
        snprintf(message, message_size, "ublk: starting /dev/ublkb%d failed: %s", s->dev_id,
                 strerror(-rc));
    return rc;
}

int ublk_start(struct uzram *dev, uint64_t size, bool read_only, struct ublk_server **out,
               char *message, size_t message_size)
{
    struct ublk_server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    *s = (struct ublk_server){.dev = dev,
                              .read_only = read_only,
                              .dev_id = -1,
                              .control_fd = -1,
                              .char_fd = -1,
                              .descs = MAP_FAILED};
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->ready_cond, NULL);
    s->control_fd = open(UBLK_CONTROL, O_RDWR | O_CLOEXEC);
    if (s->control_fd < 0) {
        int err = errno;
        snprintf(message, message_size,
                 err == ENOENT ? "the kernel has no ublk driver (modprobe ublk_drv); or use "
                                 "--via nbd or --via loop"
                               : "cannot open " UBLK_CONTROL ": %s",
                 strerror(err));
        free(s);
        return -err;
    }
    int rc = io_uring_queue_init(4, &s->control, IORING_SETUP_SQE128);
    if (rc < 0) {
        snprintf(message, message_size, "ublk: io_uring: %s", strerror(-rc));
        close(s->control_fd);
        free(s);
        return rc;
    }
    rc = add_device(s, size, message, message_size);
    if (rc == 0)
        rc = start_device(s, message, message_size);
    if (rc < 0) {
        ublk_stop(s);
        return rc;
    }
    snprintf(s->path, sizeof s->path, "/dev/ublkb%d", s->dev_id);
    *out = s;
    return 0;
}

const char *ublk_path(const struct ublk_server *s)
{
    return s->path;
}

void ublk_stop(struct ublk_server *s)
{
    if (s == NULL)
        return;
    if (s->dev_id >= 0)
        control_command(s, UBLK_CMD_STOP_DEV, NULL, 0, 0);
    atomic_store(&s->stopping, true);
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    if (s->queue.ring_fd > 0)
        io_uring_queue_exit(&s->queue);
    if (s->descs != MAP_FAILED)
        munmap(s->descs, s->descs_bytes);
    if (s->char_fd >= 0)
        close(s->char_fd);
    if (s->dev_id >= 0)
        control_command(s, UBLK_CMD_DEL_DEV, NULL, 0, 0);
    io_uring_queue_exit(&s->control);
    close(s->control_fd);
    free(s->buffers);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->ready_cond);
    free(s);
}
