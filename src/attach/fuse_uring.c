/* fuse_uring.c - FUSE requests over io_uring: each request arrives as a completion on a ring
 * and its reply goes back with the command that fetches the next, so a busy queue costs no
 * read() and writev() a request and no wake-up while requests keep coming. The requests are
 * handed to libfuse in the form /dev/fuse gives them, so the file's handlers serve both paths.
 * The kernel's interface: Documentation/filesystems/fuse-io-uring.rst (Linux 6.14+). */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <errno.h>
#include <fuse3/fuse_lowlevel.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "attach/fuse_uring.h"
#include "nbd/limits.h"

/* The kernel's io_uring interface of FUSE (include/uapi/linux/fuse.h of Linux 6.14+; Debian 12's
 * headers predate it). */
#define OVER_IO_URING_FLAGS2 (1u << (41 - 32)) /* FUSE_OVER_IO_URING, in flags2 */
#define CMD_REGISTER 1u                        /* FUSE_IO_URING_CMD_REGISTER */
#define CMD_COMMIT_AND_FETCH 2u                /* FUSE_IO_URING_CMD_COMMIT_AND_FETCH */
#define HEADER_IN_OUT_SIZE 128u
#define HEADER_OP_SIZE 128u

struct ring_ent_in_out {
    uint64_t flags;
    uint64_t commit_id;
    uint32_t payload_sz;
    uint32_t padding;
    uint64_t reserved;
};

struct ring_header {
    unsigned char in_out[HEADER_IN_OUT_SIZE]; /* fuse_in_header in, fuse_out_header out */
    unsigned char op_in[HEADER_OP_SIZE];      /* the request's own header (fuse_read_in, ...) */
    struct ring_ent_in_out ent;
};

struct ring_cmd {
    uint64_t flags;
    uint64_t commit_id;
    uint16_t qid;
    uint8_t padding[6];
};

_Static_assert(sizeof(struct ring_header) == 288, "fuse_uring_req_header");
_Static_assert(sizeof(struct ring_cmd) == 24, "fuse_uring_cmd_req");

/* Room before an entry's payload where the request is laid out as /dev/fuse would give it:
 * in header, op header, then the payload where the kernel put it (no copy of the data). A page,
 * so that the payload is page-aligned as the /dev/fuse workers' buffers are. */
#define LEAD 4096u
_Static_assert(LEAD >= sizeof(struct fuse_in_header) + HEADER_OP_SIZE, "room for the headers");
/* A READ's data may start anywhere in the first sector (fuse_file.c widens unaligned reads). */
#define PAYLOAD_SIZE (FUSE_URING_MAX_IO + 2 * 512u)

struct entry {
    struct ring_header header;
    struct iovec iov[2]; /* what REGISTER hands the kernel: header, payload */
    uint16_t qid;
    bool replied;
    bool served;          /* the kernel has sent it a request: its registration was taken */
    uint8_t retries;      /* registrations again after a failed commit */
    bool gone;            /* out of service: the connection is going, or the kernel refused it */
    unsigned char *block; /* LEAD bytes, then the payload (PAYLOAD_SIZE) */
};

struct ring_thread {
    struct fuse_uring *owner;
    pthread_t thread;
    bool started;
    struct io_uring ring;
    bool ring_ready;
    struct entry *entries;
    unsigned count;
    unsigned char *scratch; /* PAYLOAD_SIZE: see fuse_uring_hooks.enter */
};

struct fuse_uring {
    struct fuse_session *session;
    int fd;
    int stop_fd;
    unsigned queues, depth, thread_count;
    atomic_bool refused; /* said once in the log */
    struct fuse_uring_hooks hooks;
    struct ring_thread threads[];
};

static _Thread_local struct entry *current_entry;

bool fuse_uring_offered(const void *request, size_t length)
{
    const struct fuse_in_header *in = request;
    if (length < sizeof *in + sizeof(struct fuse_init_in) || in->opcode != FUSE_INIT)
        return false;
    const struct fuse_init_in *init = (const void *)(in + 1);
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    return (init->flags & FUSE_INIT_EXT) && (init->flags2 & OVER_IO_URING_FLAGS2) && cpus > 0 &&
           cpus <= (long)FUSE_URING_MAX_QUEUES;
}

bool fuse_uring_off(void)
{
    char value[8] = "";
    FILE *f = fopen(FUSE_URING_PARAMETER, "re");
    if (f == NULL)
        return false;
    bool off = fgets(value, sizeof value, f) != NULL && value[0] == 'N';
    fclose(f);
    return off;
}

bool fuse_uring_missing(void)
{
    return access(FUSE_URING_PARAMETER, F_OK) < 0 && errno == ENOENT;
}

void fuse_uring_accept(struct iovec *iov, int count)
{
    if (count < 2 || iov[0].iov_len < sizeof(struct fuse_out_header) ||
        iov[1].iov_len < offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t))
        return;
    const struct fuse_out_header *out = iov[0].iov_base;
    struct fuse_init_out *init = iov[1].iov_base;
    if (out->error == 0 && (init->flags & FUSE_INIT_EXT))
        init->flags2 |= OVER_IO_URING_FLAGS2;
}

bool fuse_uring_capture(const struct iovec *iov, int count, ssize_t *result)
{
    struct entry *e = current_entry;
    if (e == NULL)
        return false;
    *result = -1;
    errno = EINVAL;
    if (count < 1 || iov[0].iov_len != sizeof(struct fuse_out_header))
        return true;
    unsigned char *payload = e->block + LEAD;
    size_t used = 0;
    for (int i = 1; i < count; i++) {
        if (iov[i].iov_len > PAYLOAD_SIZE - used)
            return true;
        if (iov[i].iov_base != payload + used) /* a READ's data is already in place */
            memmove(payload + used, iov[i].iov_base, iov[i].iov_len);
        used += iov[i].iov_len;
    }
    memcpy(e->header.in_out, iov[0].iov_base, sizeof(struct fuse_out_header));
    e->header.ent.payload_sz = (uint32_t)used;
    e->replied = true;
    *result = (ssize_t)(sizeof(struct fuse_out_header) + used);
    return true;
}

/* ---- one request -------------------------------------------------------- */

static void put_command(struct ring_thread *t, struct entry *e, uint32_t op)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
    if (sqe == NULL) /* cannot be: the ring has room for every entry's command at once */
        return;
    /* SQE128: the command area (sqe->cmd) runs into the second 64 bytes. */
    memset((unsigned char *)sqe, 0, 2 * sizeof *sqe);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = t->owner->fd;
    sqe->cmd_op = op;
    if (op == CMD_REGISTER) {
        sqe->addr = (uint64_t)(uintptr_t)e->iov;
        sqe->len = 2;
    }
    struct ring_cmd *cmd = (struct ring_cmd *)sqe->cmd;
    cmd->commit_id = e->header.ent.commit_id;
    cmd->qid = e->qid;
    io_uring_sqe_set_data(sqe, e);
}

/* Answer a request libfuse could not (it always does for this file's handlers). */
static void reply_error(struct entry *e, uint64_t unique, int error)
{
    struct fuse_out_header out = {.len = sizeof out, .error = -error, .unique = unique};
    memcpy(e->header.in_out, &out, sizeof out);
    e->header.ent.payload_sz = 0;
}

/* The request the kernel put in `e`, laid out as /dev/fuse gives it and run by libfuse; its
 * reply is in the entry afterwards. */
static void serve(struct fuse_uring *u, struct ring_thread *t, struct entry *e)
{
    struct fuse_in_header in;
    memcpy(&in, e->header.in_out, sizeof in);
    size_t payload = e->header.ent.payload_sz;
    e->replied = false;
    if (in.len < sizeof in + payload || in.len - sizeof in - payload > HEADER_OP_SIZE ||
        payload > PAYLOAD_SIZE) {
        reply_error(e, in.unique, EIO);
        return;
    }
    size_t op = in.len - sizeof in - payload;
    unsigned char *start = e->block + LEAD - sizeof in - op;
    memcpy(start, &in, sizeof in);
    memcpy(start + sizeof in, e->header.op_in, op);
    struct fuse_buf buf = {.size = in.len, .mem = start};
    u->hooks.enter(u->hooks.arg, e->block + LEAD, t->scratch, PAYLOAD_SIZE);
    current_entry = e;
    fuse_session_process_buf(u->session, &buf);
    current_entry = NULL;
    if (!e->replied)
        reply_error(e, in.unique, EIO);
    if (u->hooks.served != NULL)
        atomic_fetch_add_explicit(u->hooks.served, 1, memory_order_relaxed);
}

/* ---- the threads -------------------------------------------------------- */

/* A command of `e` failed with `error`. The connection ending (ENOTCONN, ECONNABORTED,
 * ECANCELED) takes the entry out of service; a refused registration too, and the kernel then
 * keeps sending requests through /dev/fuse. A failed commit (the kernel did not find the
 * request: it has ended it with an error) registers the entry again, a few times at most: a
 * queue whose entries are all gone would hold its requests until the connection ends. */
static void ended(struct ring_thread *t, struct entry *e, int error, unsigned *live)
{
    bool ending = error == -ENOTCONN || error == -ECONNABORTED || error == -ECANCELED;
    if (!ending && e->served && e->retries < 3) {
        e->retries++;
        e->served = false;
        put_command(t, e, CMD_REGISTER);
        return;
    }
    if (!ending && !e->served && !atomic_exchange(&t->owner->refused, true))
        fprintf(stderr,
                "uzram: FUSE over io_uring: the kernel refused a ring entry (%s); requests keep "
                "going through /dev/fuse\n",
                strerror(-error));
    if (!e->gone)
        (*live)--;
    e->gone = true;
}

static void *ring_main(void *arg)
{
    struct ring_thread *t = arg;
    struct fuse_uring *u = t->owner;
    unsigned live = t->count;
    bool stopping = false;
    /* A poll, not a read: every thread sees the one write that stops them all. */
    struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
    io_uring_prep_poll_add(sqe, u->stop_fd, POLLIN);
    io_uring_sqe_set_data(sqe, NULL);
    for (unsigned i = 0; i < t->count; i++)
        put_command(t, &t->entries[i], CMD_REGISTER);
    /* The replies of a batch of completions go back together, with the one system call that
     * also waits for the next requests (a submit after each reply was slower for reads and
     * writes in bench/server-ab.sh attach). */
    while (!stopping && live > 0) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_submit_and_wait(&t->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
            break;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&t->ring, head, cqe)
        {
            struct entry *e = io_uring_cqe_get_data(cqe);
            seen++;
            if (e == NULL) {
                stopping = true;
            } else if (cqe->res < 0) {
                ended(t, e, cqe->res, &live);
            } else {
                e->served = true;
                serve(u, t, e);
                put_command(t, e, CMD_COMMIT_AND_FETCH);
            }
        }
        io_uring_cq_advance(&t->ring, seen);
    }
    return NULL;
}

static int make_thread(struct fuse_uring *u, struct ring_thread *t, unsigned index)
{
    t->owner = u;
    for (unsigned q = index; q < u->queues; q += u->thread_count)
        t->count += u->depth;
    t->entries = calloc(t->count, sizeof t->entries[0]);
    if (t->entries == NULL || posix_memalign((void **)&t->scratch, 4096, PAYLOAD_SIZE))
        return -ENOMEM;
    unsigned n = 0;
    for (unsigned q = index; q < u->queues; q += u->thread_count)
        for (unsigned d = 0; d < u->depth; d++, n++) {
            struct entry *e = &t->entries[n];
            e->qid = (uint16_t)q;
            if (posix_memalign((void **)&e->block, 4096, LEAD + PAYLOAD_SIZE))
                return -ENOMEM;
            e->iov[0] = (struct iovec){&e->header, sizeof e->header};
            e->iov[1] = (struct iovec){e->block + LEAD, PAYLOAD_SIZE};
        }
    /* Every entry's command and the stop read may be in flight at once. */
    int rc = io_uring_queue_init(t->count + 1, &t->ring, IORING_SETUP_SQE128);
    if (rc < 0)
        return rc;
    t->ring_ready = true;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, NBD_SERVER_THREAD_STACK);
    rc = -pthread_create(&t->thread, &attr, ring_main, t);
    pthread_attr_destroy(&attr);
    t->started = rc == 0;
    return rc;
}

int fuse_uring_start(struct fuse_session *session, int fd, unsigned threads,
                     const struct fuse_uring_hooks *hooks, struct fuse_uring **out, char *message,
                     size_t message_size)
{
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    if (cpus <= 0 || cpus > (long)FUSE_URING_MAX_QUEUES) {
        snprintf(message, message_size, "%ld possible CPUs: more queues than uzram serves", cpus);
        return -EOPNOTSUPP;
    }
    unsigned queues = (unsigned)cpus;
    if (threads == 0)
        threads = 1;
    if (threads > queues)
        threads = queues;
    struct fuse_uring *u = calloc(1, sizeof *u + threads * sizeof u->threads[0]);
    if (u == NULL) {
        snprintf(message, message_size, "out of memory");
        return -ENOMEM;
    }
    u->session = session;
    u->fd = fd;
    u->queues = queues;
    u->depth = FUSE_URING_ENTRIES / queues;
    if (u->depth < FUSE_URING_MIN_DEPTH)
        u->depth = FUSE_URING_MIN_DEPTH;
    if (u->depth > FUSE_URING_MAX_DEPTH)
        u->depth = FUSE_URING_MAX_DEPTH;
    u->thread_count = threads;
    u->hooks = *hooks;
    u->stop_fd = eventfd(0, EFD_CLOEXEC);
    int rc = u->stop_fd < 0 ? -errno : 0;
    for (unsigned i = 0; rc == 0 && i < threads; i++)
        rc = make_thread(u, &u->threads[i], i);
    if (rc < 0) {
        snprintf(message, message_size, "cannot set up the rings: %s", strerror(-rc));
        fuse_uring_stop(u);
        return rc;
    }
    *out = u;
    return 0;
}

void fuse_uring_stop(struct fuse_uring *u)
{
    if (u == NULL)
        return;
    uint64_t one = 1;
    if (u->stop_fd >= 0 && write(u->stop_fd, &one, sizeof one) < 0) {
        /* cannot fail: the counter is far from full */
    }
    for (unsigned i = 0; i < u->thread_count; i++) {
        struct ring_thread *t = &u->threads[i];
        if (t->started)
            pthread_join(t->thread, NULL);
        /* Ending the ring cancels the commands still waiting for requests: the kernel lets go
         * of the entries before their memory is freed. */
        if (t->ring_ready)
            io_uring_queue_exit(&t->ring);
        for (unsigned j = 0; t->entries != NULL && j < t->count; j++)
            free(t->entries[j].block);
        free(t->entries);
        free(t->scratch);
    }
    if (u->stop_fd >= 0)
        close(u->stop_fd);
    free(u);
}

unsigned fuse_uring_queues(const struct fuse_uring *u)
{
    return u->queues;
}

unsigned fuse_uring_depth(const struct fuse_uring *u)
{
    return u->depth;
}
