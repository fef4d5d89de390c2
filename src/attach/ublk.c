/* ublk.c - `uzram attach --via ublk`: the served device as /dev/ublkbN through the kernel's
 * ublk driver, served by one thread per queue of the server, each with its own io_uring.
 * The driver copies each request's data between the block layer's pages and the queue
 * thread's buffers itself, so a request costs the server no socket buffer and no allocation
 * of its own: the way a swap device must be served (a socket's reply needs kernel memory,
 * which the kernel may be waiting for that very swap-out to free). Not UBLK_F_USER_COPY,
 * where the server reads and writes each request's data through /dev/ublkcN: the same one
 * copy plus a system call per request, and in the VM's fio runs no faster (reads slower;
 * issue 22's note). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/ublk_cmd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"
#include "attach/ublk_request.h"
#include "common/process.h"
#include "common/threads.h"
#include "nbd/limits.h"

#define UBLK_CONTROL "/dev/ublk-control"
/* Linux 6.9's; Debian 12's headers are older. */
#ifndef UBLK_U_CMD_DEL_DEV_ASYNC
#define UBLK_U_CMD_DEL_DEV_ASYNC _IOR('u', 0x14, struct ublksrv_ctrl_cmd)
#endif
/* In the field the driver keeps for the server (ublksrv_flags): this device is uzram's
 * ("uzr" in the high half) and which process serves it (the low half; the driver's own
 * ublksrv_pid is -1 until START_DEV and after a stop), so that a later server may delete it
 * when that process was killed. */
#define UBLK_UZRAM_MARK 0x727a75ULL
#define UBLK_OWNER(pid) ((UBLK_UZRAM_MARK << 32) | (uint32_t)(pid))
/* Requests in flight per queue, and the largest (the buffer each has): 8 MiB of buffers a
 * queue, locked and faulted in under serve --swap. */
#define UBLK_DEPTH 64u
#define UBLK_IO_BYTES (128u << 10)
/* The same for a swap device, whose buffers are part of the memory the server holds for swap
 * (uzram(1) SWAP budgets it): 512 KiB a queue, at most UBLK_SWAP_QUEUES of them. The kernel
 * swaps a page or a cluster of a few at a time (swap-in reads page-cluster's 8 pages), so
 * 32 KiB requests cost it little more than larger ones, 16 of them in flight keep a queue
 * thread busy, and 4 queues compress faster than any swap-out rate reclaim reaches. */
#define UBLK_SWAP_DEPTH 16u
#define UBLK_SWAP_IO_BYTES (32u << 10)
#define UBLK_SWAP_QUEUES 4u
/* Queues, at most (one per CPU up to the server's --threads). */
#define UBLK_QUEUES_MAX 32u
/* A recovery waits this long for the driver to let go of the dead server's device. */
#define UBLK_RECOVERY_WAIT_S 30
/* The queue threads look whether they should stop this often. */
#define QUEUE_POLL_MS 100
/* Submissions queue_command() makes to free an entry of a full ring, 1 ms apart. */
#define QUEUE_SQE_TRIES 3u
/* Each queue's request descriptors are mapped from the character device at this stride. */
#define DESCS_STRIDE                                                                               \
    ((UBLK_MAX_QUEUE_DEPTH * sizeof(struct ublksrv_io_desc) + 4095) & ~(size_t)4095)
#define DESCS_BYTES ((UBLK_DEPTH * sizeof(struct ublksrv_io_desc) + 4095) & ~(size_t)4095)

struct ublk_server;

/* One hardware queue of the device: served by a thread of its own with its own io_uring (the
 * driver takes every command of a queue from the thread that fetched it). */
struct ublk_queue {
    struct ublk_server *server;
    unsigned id;
    struct io_uring ring;
    bool ring_ready;
    struct ublksrv_io_desc *descs; /* MAP_FAILED until mapped */
    unsigned char *buffers;        /* server->depth buffers of server->io_bytes, faulted in */
    pthread_t thread;
    bool thread_started;
    /* Commits the ring had no room for, by tag, and their results: sent at the next turn. */
    uint64_t unsent;
    int unsent_result[UBLK_DEPTH];
    bool told_unsent; /* said on stderr once */
};
_Static_assert(UBLK_DEPTH <= 64, "a queue's unsent commits are bits of one word");

struct ublk_server {
    struct uzram *dev;
    bool read_only;
    bool recoverable; /* UBLK_F_USER_RECOVERY: a successor may take the device over */
    bool swap;        /* attached for swap (ublk_request_serve, swap_guard.c) */
    int dev_id;
    int control_fd, char_fd;
    struct io_uring control;
    unsigned nr_queues;
    unsigned depth, io_bytes; /* requests per queue, bytes each: as the device was made */
    struct ublk_queue queues[UBLK_QUEUES_MAX];
    atomic_bool stopping; /* the queue threads leave within QUEUE_POLL_MS */
    /* The queue threads' start: how many have fetched their requests, the first error. */
    pthread_mutex_t lock;
    pthread_cond_t ready_cond;
    unsigned ready;
    int ready_rc;
    char path[BLOCKDEV_PATH_MAX];
    struct ublk_server *next_served; /* served_list */
};

/* The devices this process serves: a recoverable device whose server pid is ours is another
 * image's (before an execve) only when it is not in this list. */
static pthread_mutex_t served_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ublk_server *served_list;

/* One control command about device `dev_id` (legacy opcodes: the kernel's
 * CONFIG_BLKDEV_UBLK_LEGACY_OPCODES, but for the ones that only exist encoded). */
static int control_command_of(struct ublk_server *s, int dev_id, unsigned op, void *buffer,
                              unsigned length, uint64_t data)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->control);
    if (sqe == NULL)
        return -EBUSY;
    memset(sqe, 0, 2 * sizeof *sqe); /* SQE128 */
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = s->control_fd;
    sqe->cmd_op = op;
    struct ublksrv_ctrl_cmd *cmd = (struct ublksrv_ctrl_cmd *)sqe->cmd;
    cmd->dev_id = (uint32_t)dev_id;
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

static int control_command(struct ublk_server *s, unsigned op, void *buffer, unsigned length,
                           uint64_t data)
{
    return control_command_of(s, s->dev_id, op, buffer, length, data);
}

/* Delete device `dev_id` without waiting for its last user to let go (a file system still
 * mounted on it after STOP_DEV: the driver frees it at umount). DEL_DEV would wait for that,
 * and a server stopping under a mounted node would never end; before Linux 6.9, which has no
 * DEL_DEV_ASYNC, it is the only way. */
static int delete_device(struct ublk_server *s, int dev_id)
{
    static atomic_bool said;
    int rc = control_command_of(s, dev_id, UBLK_U_CMD_DEL_DEV_ASYNC, NULL, 0, 0);
    if (rc == -EOPNOTSUPP || rc == -EINVAL || rc == -ENOTTY) {
        if (!atomic_exchange(&said, true))
            fprintf(stderr,
                    "uzram: ublk: this kernel has no DEL_DEV_ASYNC (Linux 6.9 and later): "
                    "deleting /dev/ublkb%d waits until nothing holds it open (umount it)\n",
                    dev_id);
        rc = control_command_of(s, dev_id, UBLK_CMD_DEL_DEV, NULL, 0, 0);
    }
    return rc;
}

/* Take away the devices a uzram server killed before it could delete them left behind: stopped
 * (the driver stops a device whose server died, unless it asked for user recovery; a recoverable
 * one is stopped when its server died before starting it), marked as uzram's, of a process that
 * no longer exists. Nothing can ever use them again; they hold a device number and /dev/ublkcN.
 * A recoverable device whose server died is QUIESCED, not DEAD: it waits for a successor
 * (ublk_recover) and is left alone. */
static void delete_leftovers(struct ublk_server *s)
{
    DIR *dir = opendir("/sys/class/ublk-char");
    struct dirent *entry;
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        int id;
        if (sscanf(entry->d_name, "ublkc%d", &id) != 1)
            continue;
        struct ublksrv_ctrl_dev_info info = {0};
        if (control_command_of(s, id, UBLK_CMD_GET_DEV_INFO, &info, sizeof info, 0) < 0 ||
            info.ublksrv_flags >> 32 != UBLK_UZRAM_MARK || info.state != UBLK_S_DEV_DEAD)
            continue;
        pid_t owner = (pid_t)(uint32_t)info.ublksrv_flags;
        if (owner <= 0 || util_process_alive(owner))
            continue;
        delete_device(s, id);
    }
    if (dir != NULL)
        closedir(dir);
}

/* Queue a command for tag `tag`: 0, or a negative errno when the ring has no free entry after
 * QUEUE_SQE_TRIES submissions of what it holds. It has two entries per tag and a tag has one
 * command at most waiting to be submitted, so an entry is free unless the kernel refused a
 * submission (no memory for the moment: -EAGAIN); the caller keeps a command it could not
 * queue (queue_commit), never drops it: the driver would wait for that request forever. */
static int queue_command(struct ublk_queue *q, unsigned op, unsigned tag, int result)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
    int rc = -EBUSY;
    for (unsigned tries = 0; sqe == NULL && tries < QUEUE_SQE_TRIES; tries++) {
        rc = io_uring_submit(&q->ring);
        sqe = io_uring_get_sqe(&q->ring);
        if (sqe == NULL) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
    }
    if (sqe == NULL)
        return rc < 0 ? rc : -EBUSY;
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = q->server->char_fd;
    sqe->cmd_op = op;
    sqe->user_data = tag;
    struct ublksrv_io_cmd *cmd = (struct ublksrv_io_cmd *)sqe->cmd;
    cmd->q_id = (uint16_t)q->id;
    cmd->tag = (uint16_t)tag;
    cmd->result = result;
    cmd->addr = (uint64_t)(uintptr_t)(q->buffers + (size_t)tag * q->server->io_bytes);
    return 0;
}

/* Give the driver tag `tag`'s result and take its next request. A commit the ring has no room
 * for is kept in q->unsent and tried again at each turn of queue_main (at least every
 * QUEUE_POLL_MS), said on stderr the first time the queue has one. */
static void queue_commit(struct ublk_queue *q, unsigned tag, int result)
{
    int rc = queue_command(q, UBLK_IO_COMMIT_AND_FETCH_REQ, tag, result);
    uint64_t bit = 1ull << tag;
    if (rc == 0) {
        q->unsent &= ~bit;
        return;
    }
    if (!q->told_unsent)
        fprintf(stderr,
                "uzram: /dev/ublkb%d: queue %u has no room in its io_uring for the result of "
                "request %u (%s); it keeps it and tries again\n",
                q->server->dev_id, q->id, tag, strerror(-rc));
    q->told_unsent = true;
    q->unsent |= bit;
    q->unsent_result[tag] = result;
}

/* Try the commits queue_commit() kept again. */
static void queue_commit_unsent(struct ublk_queue *q)
{
    for (uint64_t unsent = q->unsent; unsent != 0; unsent &= unsent - 1) {
        unsigned tag = (unsigned)__builtin_ctzll(unsent);
        queue_commit(q, tag, q->unsent_result[tag]);
    }
}

static void queue_ready(struct ublk_server *s, int rc)
{
    pthread_mutex_lock(&s->lock);
    s->ready++;
    if (s->ready_rc == 0)
        s->ready_rc = rc;
    pthread_cond_broadcast(&s->ready_cond);
    pthread_mutex_unlock(&s->lock);
}

/* A queue: fetch every tag, then serve and commit until told to stop (after STOP_DEV) or
 * until the driver aborts the commands. */
static void *queue_main(void *arg)
{
    struct ublk_queue *q = arg;
    struct ublk_server *s = q->server;
    /* Not pinned to the CPUs whose requests this queue gets, as ublksrv does: with a queue
     * per CPU the issuer and the server then take turns on one CPU, where unpinned the server
     * runs beside it: pinned was the slower in the VM's fio runs (bench/vm-block.sh), by far
     * for reads at QD16 (the note of issue 22 has the figures). */
    int rc = 0;
    for (unsigned tag = 0; tag < s->depth && rc == 0; tag++)
        rc = queue_command(q, UBLK_IO_FETCH_REQ, tag, 0);
    if (rc == 0)
        rc = io_uring_submit(&q->ring);
    queue_ready(s, rc < 0 ? rc : 0);
    unsigned live = rc < 0 ? 0 : s->depth;
    while (live > 0 && !atomic_load(&s->stopping)) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec wait = {0, QUEUE_POLL_MS * 1000000LL};
        queue_commit_unsent(q);
        rc = io_uring_submit_and_wait_timeout(&q->ring, &cqe, 1, &wait, NULL);
        if (rc < 0 && rc != -EINTR && rc != -ETIME) {
            fprintf(stderr, "uzram: /dev/ublkb%d: queue %u stops: io_uring: %s\n", s->dev_id, q->id,
                    strerror(-rc));
            break;
        }
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&q->ring, head, cqe)
        {
            seen++;
            unsigned tag = (unsigned)cqe->user_data;
            if (cqe->res != UBLK_IO_RES_OK || tag >= s->depth) {
                live--; /* UBLK_IO_RES_ABORT: the device stops */
                continue;
            }
            int result = ublk_request_serve(s->dev, s->read_only, s->swap, &q->descs[tag],
                                            q->buffers + (size_t)tag * s->io_bytes, s->io_bytes);
            if (s->swap && result == -ENOSPC)
                swap_guard_note_nospace();
            queue_commit(q, tag, result);
        }
        io_uring_cq_advance(&q->ring, seen);
    }
    /* The requests served since the last submission: their results go to the driver now, so
     * that a device left to a successor (ublk_leave) has only the unserved ones re-issued. */
    queue_commit_unsent(q);
    io_uring_submit(&q->ring);
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

static size_t buffers_bytes(const struct ublk_server *s)
{
    return (size_t)s->depth * s->io_bytes;
}

/* Map a queue's request descriptors, fault its buffers in, make its ring. */
static int setup_queue(struct ublk_server *s, unsigned id, char *message, size_t message_size)
{
    struct ublk_queue *q = &s->queues[id];
    q->server = s;
    q->id = id;
    q->descs = mmap(NULL, DESCS_BYTES, PROT_READ, MAP_SHARED | MAP_POPULATE, s->char_fd,
                    UBLKSRV_CMD_BUF_OFFSET + id * DESCS_STRIDE);
    /* A mapping of their own, not the heap: given back whole when the device goes. */
    q->buffers =
        mmap(NULL, buffers_bytes(s), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q->descs == MAP_FAILED || q->buffers == MAP_FAILED) {
        snprintf(message, message_size, "ublk: out of memory for queue %u's request buffers", id);
        return -ENOMEM;
    }
    /* Faulted in now: a write to a swap device must not wait for memory. */
    memset(q->buffers, 0, buffers_bytes(s));
    int rc = io_uring_queue_init(2 * s->depth, &q->ring, 0);
    if (rc < 0) {
        snprintf(message, message_size, "ublk: io_uring: %s", strerror(-rc));
        return rc;
    }
    q->ring_ready = true;
    return 0;
}

/* Add the device, give it its parameters, set its queues up. */
static int add_device(struct ublk_server *s, uint64_t size, char *message, size_t message_size)
{
    struct ublksrv_ctrl_dev_info info = {
        .nr_hw_queues = (uint16_t)s->nr_queues,
        .queue_depth = (uint16_t)s->depth,
        .max_io_buf_bytes = s->io_bytes,
        .dev_id = (uint32_t)-1,
        .ublksrv_pid = getpid(),
        .ublksrv_flags = UBLK_OWNER(getpid()),
        /* Re-issue: the requests the dead server had taken are sent again to the next one;
         * uzram's are all idempotent (a write of the same bytes, a discard). */
        .flags = s->recoverable ? UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE : 0,
    };
    int rc = control_command(s, UBLK_CMD_ADD_DEV, &info, sizeof info, 0);
    if (rc < 0) {
        snprintf(message, message_size, "ublk: adding a device failed: %s", strerror(-rc));
        return rc;
    }
    s->dev_id = (int)info.dev_id;
    s->nr_queues = info.nr_hw_queues; /* the driver may give fewer */
    /* The driver answers with the flags it took: one without user recovery drops it, and the
     * device would die with its server instead of waiting for the next. */
    if (s->recoverable && !(info.flags & UBLK_F_USER_RECOVERY)) {
        snprintf(message, message_size,
                 "ublk: this kernel's ublk driver has no user recovery (UBLK_F_USER_RECOVERY: "
                 "Linux 6.1 and later), which a device whose state outlives its server needs");
        return -EOPNOTSUPP;
    }
    struct ublk_params params = {
        .len = sizeof params,
        .types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD,
        .basic = {.attrs = s->read_only ? UBLK_ATTR_READ_ONLY : 0,
                  .logical_bs_shift = 12,
                  .physical_bs_shift = 12,
                  .io_opt_shift = 12,
                  .io_min_shift = 12,
                  .max_sectors = s->io_bytes >> 9,
                  .dev_sectors = size >> 9},
        /* A discard or write-zeroes of up to 4 GiB - 4 KiB in one request (zram allows as
         * much): one call into the engine, which keeps no memory for the range, and a
         * result of 0 whatever its length (ublk_request_result). */
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
    for (unsigned id = 0; id < s->nr_queues && rc == 0; id++)
        rc = setup_queue(s, id, message, message_size);
    return rc;
}

/* Start the queue threads and wait until each has fetched its requests (START_DEV and
 * END_USER_RECOVERY wait for that in the driver). */
static int start_queues(struct ublk_server *s, char *message, size_t message_size)
{
    int rc = 0;
    unsigned started = 0;
    for (; started < s->nr_queues; started++) {
        struct ublk_queue *q = &s->queues[started];
        rc = util_thread_start(&q->thread, queue_main, q, NBD_SERVER_THREAD_STACK);
        if (rc < 0) {
            snprintf(message, message_size, "ublk: cannot start queue thread %u", started);
            break;
        }
        q->thread_started = true;
    }
    pthread_mutex_lock(&s->lock);
    while (s->ready < started)
        pthread_cond_wait(&s->ready_cond, &s->lock);
    if (rc == 0 && (rc = s->ready_rc) < 0)
        snprintf(message, message_size, "ublk: a queue of /dev/ublkb%d could not fetch: %s",
                 s->dev_id, strerror(-rc));
    pthread_mutex_unlock(&s->lock);
    return rc; /* a thread that fetched leaves when server_free() says so */
}

/* A server with its control ring, serving nothing yet. */
static int server_new(struct uzram *dev, bool read_only, struct ublk_server **out, char *message,
                      size_t message_size)
{
    struct ublk_server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->dev = dev;
    s->read_only = read_only;
    s->dev_id = -1;
    s->control_fd = s->char_fd = -1;
    for (unsigned id = 0; id < UBLK_QUEUES_MAX; id++) {
        s->queues[id].descs = MAP_FAILED;
        s->queues[id].buffers = MAP_FAILED;
    }
    s->depth = UBLK_DEPTH;
    s->io_bytes = UBLK_IO_BYTES;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->ready_cond, NULL);
    s->control_fd = open(UBLK_CONTROL, O_RDWR | O_CLOEXEC);
    if (s->control_fd < 0) {
        int err = errno;
        snprintf(message, message_size,
                 err == ENOENT ? "the kernel has no ublk driver (ublk_drv, CONFIG_BLK_DEV_UBLK: "
                                 "Linux 6.0 and later where the distribution builds it; "
                                 "modprobe ublk_drv); or use --via nbd or --via loop"
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
    *out = s;
    return 0;
}

/* The device is served: list it, name it. */
static void server_serves(struct ublk_server *s)
{
    snprintf(s->path, sizeof s->path, "/dev/ublkb%d", s->dev_id);
    pthread_mutex_lock(&served_lock);
    s->next_served = served_list;
    served_list = s;
    pthread_mutex_unlock(&served_lock);
}

/* End the threads and let go of everything; with `delete`, stop and delete the device first
 * (its users get errors), else leave it to the driver as it is (a recoverable device waits,
 * quiesced, for a successor). */
static void server_free(struct ublk_server *s, bool delete)
{
    pthread_mutex_lock(&served_lock);
    for (struct ublk_server **link = &served_list; *link != NULL; link = &(*link)->next_served)
        if (*link == s) {
            *link = s->next_served;
            break;
        }
    pthread_mutex_unlock(&served_lock);
    if (delete &&s->dev_id >= 0)
        control_command(s, UBLK_CMD_STOP_DEV, NULL, 0, 0);
    atomic_store(&s->stopping, true);
    for (unsigned id = 0; id < s->nr_queues; id++) {
        struct ublk_queue *q = &s->queues[id];
        if (q->thread_started)
            pthread_join(q->thread, NULL);
        if (q->ring_ready)
            io_uring_queue_exit(&q->ring);
        if (q->descs != MAP_FAILED)
            munmap(q->descs, DESCS_BYTES);
        if (q->buffers != MAP_FAILED)
            munmap(q->buffers, buffers_bytes(s));
    }
    if (s->char_fd >= 0)
        close(s->char_fd);
    if (delete &&s->dev_id >= 0)
        delete_device(s, s->dev_id);
    io_uring_queue_exit(&s->control);
    close(s->control_fd);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->ready_cond);
    free(s);
}

int ublk_start(struct uzram *dev, uint64_t size, bool read_only, unsigned queues, bool recoverable,
               bool swap, struct ublk_server **out, char *message, size_t message_size)
{
    struct ublk_server *s;
    int rc = server_new(dev, read_only, &s, message, message_size);
    if (rc < 0)
        return rc;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && queues > (unsigned long)cpus)
        queues = (unsigned)cpus;
    s->swap = swap;
    if (swap) {
        s->depth = UBLK_SWAP_DEPTH;
        s->io_bytes = UBLK_SWAP_IO_BYTES;
        queues = queues > UBLK_SWAP_QUEUES ? UBLK_SWAP_QUEUES : queues;
    }
    s->nr_queues = queues < 1 ? 1 : queues > UBLK_QUEUES_MAX ? UBLK_QUEUES_MAX : queues;
    s->recoverable = recoverable;
    delete_leftovers(s);
    rc = add_device(s, size, message, message_size);
    if (rc == 0)
        rc = start_queues(s, message, message_size);
    if (rc == 0) {
        rc = control_command(s, UBLK_CMD_START_DEV, NULL, 0, (uint64_t)getpid());
        if (rc < 0)
            snprintf(message, message_size, "ublk: starting /dev/ublkb%d failed: %s", s->dev_id,
                     strerror(-rc));
    }
    if (rc < 0) {
        server_free(s, true);
        return rc;
    }
    server_serves(s);
    *out = s;
    return 0;
}

const char *ublk_path(const struct ublk_server *s)
{
    return s->path;
}

int ublk_id(const struct ublk_server *s)
{
    return s->dev_id;
}

void ublk_stop(struct ublk_server *s)
{
    if (s != NULL)
        server_free(s, true);
}

void ublk_leave(struct ublk_server *s)
{
    if (s != NULL)
        server_free(s, !s->recoverable);
}

/* ---- recovery: a successor takes over a device whose server died or left ---- */

/* Whether process `pid` is gone; our own pid counts as gone for a device this process does not
 * serve (an execve of the server keeps its pid: the device was the previous image's). */
static bool owner_gone(pid_t pid, int dev_id)
{
    if (!util_process_alive(pid))
        return true;
    if (pid != getpid())
        return false;
    bool served = false;
    pthread_mutex_lock(&served_lock);
    for (struct ublk_server *s = served_list; s != NULL && !served; s = s->next_served)
        served = s->dev_id == dev_id;
    pthread_mutex_unlock(&served_lock);
    return !served;
}

/* What the driver says of device `id`: 0 and *out filled when it is a recoverable uzram device
 * whose server is gone (quiesced, or still live for the moment the driver takes to notice);
 * -ENODEV no such device, -EPERM not uzram's, -EBUSY its server runs, -EOPNOTSUPP made without
 * user recovery or stopped (its server is gone all the same). */
static int recoverable_device(struct ublk_server *s, int id, struct ublk_recoverable *out)
{
    struct ublksrv_ctrl_dev_info info = {0};
    int rc = control_command_of(s, id, UBLK_CMD_GET_DEV_INFO, &info, sizeof info, 0);
    if (rc < 0)
        return rc == -ENOENT || rc == -EINVAL ? -ENODEV : rc;
    if (info.ublksrv_flags >> 32 != UBLK_UZRAM_MARK)
        return -EPERM;
    pid_t pid = info.ublksrv_pid > 0 ? info.ublksrv_pid : (pid_t)(uint32_t)info.ublksrv_flags;
    if (!owner_gone(pid, id))
        return -EBUSY;
    if (!(info.flags & UBLK_F_USER_RECOVERY) || info.state == UBLK_S_DEV_DEAD)
        return -EOPNOTSUPP;
    struct ublk_params params = {.len = sizeof params, .types = UBLK_PARAM_TYPE_BASIC};
    rc = control_command_of(s, id, UBLK_CMD_GET_PARAMS, &params, sizeof params, 0);
    if (rc < 0)
        return rc;
    *out = (struct ublk_recoverable){
        .dev_id = id,
        .size = (uint64_t)params.basic.dev_sectors << 9,
        .queues = info.nr_hw_queues,
        .depth = info.queue_depth,
        .max_io_bytes = info.max_io_buf_bytes,
        .read_only = (params.basic.attrs & UBLK_ATTR_READ_ONLY) != 0,
        .quiesced = info.state == UBLK_S_DEV_QUIESCED,
        .owner = pid,
    };
    return 0;
}

int ublk_list_recoverable(struct ublk_recoverable *list, size_t max, char *message,
                          size_t message_size)
{
    struct ublk_server *s;
    int rc = server_new(NULL, false, &s, message, message_size);
    if (rc < 0)
        return rc;
    DIR *dir = opendir("/sys/class/ublk-char");
    struct dirent *entry;
    size_t found = 0;
    while (dir != NULL && (entry = readdir(dir)) != NULL && found < max) {
        int id;
        if (sscanf(entry->d_name, "ublkc%d", &id) == 1 &&
            recoverable_device(s, id, &list[found]) == 0)
            found++;
    }
    if (dir != NULL)
        closedir(dir);
    server_free(s, false);
    return (int)found;
}

/* Wait until the driver has let go of the dead server (its /dev/ublkcN closed, the device
 * quiesced: START_USER_RECOVERY says EBUSY until then), and start the recovery. */
static int start_recovery(struct ublk_server *s, char *message, size_t message_size)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int rc = control_command(s, UBLK_CMD_START_USER_RECOVERY, NULL, 0, 0);
        if (rc == 0)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (rc != -EBUSY) {
            snprintf(message, message_size, "ublk: the driver refused to recover /dev/ublkb%d: %s",
                     s->dev_id, strerror(-rc));
            return rc;
        }
        if (now.tv_sec - start.tv_sec >= UBLK_RECOVERY_WAIT_S) {
            snprintf(message, message_size,
                     "ublk: /dev/ublkb%d is still held by its last server after %d s", s->dev_id,
                     UBLK_RECOVERY_WAIT_S);
            return -ETIMEDOUT;
        }
        struct timespec pause = {0, 100000000};
        nanosleep(&pause, NULL);
    }
}

/* Whether device `found` is one this build can serve as `size` bytes: its queues were set up
 * as ublk_start() does. 0, or -EINVAL with a message. */
static int fits(const struct ublk_recoverable *found, uint64_t size, bool read_only, char *message,
                size_t message_size)
{
    if (found->size != size)
        snprintf(message, message_size,
                 "ublk: /dev/ublkb%d has %llu bytes, the device to serve it from %llu",
                 found->dev_id, (unsigned long long)found->size, (unsigned long long)size);
    else if (!((found->depth == UBLK_DEPTH && found->max_io_bytes == UBLK_IO_BYTES) ||
               (found->depth == UBLK_SWAP_DEPTH && found->max_io_bytes == UBLK_SWAP_IO_BYTES)) ||
             found->queues < 1 || found->queues > UBLK_QUEUES_MAX)
        snprintf(message, message_size,
                 "ublk: /dev/ublkb%d has %u queues of %u requests of %u bytes; this uzram serves "
                 "at most %u queues of %u requests of %u bytes (%u of %u bytes for swap)",
                 found->dev_id, found->queues, found->depth, found->max_io_bytes, UBLK_QUEUES_MAX,
                 UBLK_DEPTH, UBLK_IO_BYTES, UBLK_SWAP_DEPTH, UBLK_SWAP_IO_BYTES);
    else if (found->read_only != read_only)
        snprintf(message, message_size, "ublk: /dev/ublkb%d is %s, the device to serve it not",
                 found->dev_id, found->read_only ? "read-only" : "writable");
    else
        return 0;
    return -EINVAL;
}

/* Why recoverable_device() said `rc`, in words. */
static const char *refusal(int rc)
{
    switch (rc) {
    case -ENODEV:
        return "there is no such device";
    case -EPERM:
        return "it is not uzram's";
    case -EOPNOTSUPP:
        return "it was made without user recovery (or is stopped)";
    case -EBUSY:
        return "its server is running";
    default:
        return strerror(-rc);
    }
}

/* A server for device `dev_id`, and what the driver says of it: recoverable_device()'s
 * result with *out made, or server_new()'s error with *out NULL. */
static int server_for(struct uzram *dev, bool read_only, int dev_id, struct ublk_server **out,
                      struct ublk_recoverable *found, char *message, size_t message_size)
{
    *out = NULL;
    int rc = server_new(dev, read_only, out, message, message_size);
    if (rc < 0)
        return rc;
    (*out)->dev_id = dev_id;
    return recoverable_device(*out, dev_id, found);
}

int ublk_recover(struct uzram *dev, int dev_id, uint64_t size, bool read_only,
                 struct ublk_server **out, char *message, size_t message_size)
{
    struct ublk_server *s;
    struct ublk_recoverable found;
    int rc = server_for(dev, read_only, dev_id, &s, &found, message, message_size);
    if (s == NULL)
        return rc;
    s->recoverable = true;
    if (rc < 0)
        snprintf(message, message_size, "ublk: cannot recover /dev/ublkb%d: %s", dev_id,
                 refusal(rc));
    if (rc == 0)
        rc = fits(&found, size, read_only, message, message_size);
    if (rc == 0) {
        s->nr_queues = found.queues;
        s->depth = found.depth;
        s->io_bytes = found.max_io_bytes;
        rc = start_recovery(s, message, message_size);
    }
    if (rc == 0 && (rc = open_char_device(s)) < 0)
        snprintf(message, message_size, "ublk: opening /dev/ublkc%d: %s", dev_id, strerror(-rc));
    for (unsigned id = 0; id < s->nr_queues && rc == 0; id++)
        rc = setup_queue(s, id, message, message_size);
    if (rc == 0)
        rc = start_queues(s, message, message_size);
    if (rc == 0 &&
        (rc = control_command(s, UBLK_CMD_END_USER_RECOVERY, NULL, 0, (uint64_t)getpid())) < 0)
        snprintf(message, message_size, "ublk: ending the recovery of /dev/ublkb%d: %s", dev_id,
                 strerror(-rc));
    if (rc < 0) {
        server_free(s, false); /* the device stays as it was, for another try or ublk_delete */
        return rc;
    }
    server_serves(s);
    *out = s;
    return 0;
}

int ublk_delete(int dev_id, char *message, size_t message_size)
{
    struct ublk_server *s;
    struct ublk_recoverable found;
    int rc = server_for(NULL, false, dev_id, &s, &found, message, message_size);
    if (s == NULL)
        return rc;
    if (rc == -ENODEV || rc == -EPERM || rc == -EBUSY)
        snprintf(message, message_size, "ublk: will not delete /dev/ublkb%d: %s", dev_id,
                 refusal(rc));
    else
        rc = control_command(s, UBLK_CMD_STOP_DEV, NULL, 0, 0);
    if (rc == 0 && (rc = delete_device(s, dev_id)) < 0)
        snprintf(message, message_size, "ublk: deleting /dev/ublkb%d: %s", dev_id, strerror(-rc));
    server_free(s, false);
    return rc;
}
