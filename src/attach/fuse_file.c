/* fuse_file.c - the served disk as one regular file, through FUSE, inside the server process.
 * `uzram attach` puts a loop device on this file: each request goes from the kernel's FUSE
 * queue straight to the engine, with no second hop through an NBD client. */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <errno.h>
#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <linux/fuse.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"
#include "attach/fuse_uring.h"
#include "nbd/limits.h"
#include "common/clock.h"

/* The one inode: the mount point itself is the file (FUSE mounts a regular file over a
 * regular file, as nbdfuse does), so there is nothing to look up. */
#define ROOT_INODE FUSE_ROOT_ID

struct worker {
    struct fuse_file *file;
    pthread_t thread;
    bool started;
    /* Its own descriptor of the FUSE connection (FUSE_DEV_IOC_CLONE), non-blocking: it reads
     * requests from it and answers there. */
    int fd;
    /* Aligned room for a read of up to max_io bytes (and for the sectors around an unaligned
     * one); a ring thread's is the entry's own buffer. */
    unsigned char *buffer;
    size_t max_io;
    /* Where a write not on sector boundaries reads the sectors around it: `buffer`, or for a
     * ring thread a room of its own (the write's data lies in the entry's buffer). */
    unsigned char *scratch;
};

struct fuse_file {
    struct uzram *dev;
    uint64_t size;
    bool read_only;
    bool direct_io;
    char path[FUSE_FILE_PATH_MAX];
    bool created; /* we created the mount point file: remove it at the end */
    bool mounted;
    struct timespec born;
    struct fuse_session *session;
    /* Writes that do not cover whole sectors are read, patched and written back under this
     * lock, so two of them in one sector cannot lose each other's bytes. The loop device
     * never sends them (its blocks are 4 KiB); only a program using the file directly does. */
    pthread_mutex_t unaligned_lock;
    int stop_fd; /* an eventfd: written once to make every worker leave */
    unsigned worker_count;
    atomic_bool stopping;
    /* FUSE over io_uring: whether the kernel offered it at INIT (the reply to `init_unique`
     * says yes), and the rings once they serve; under uring_lock, as INIT is answered by a
     * worker while fuse_file_stop() may run. */
    atomic_bool uring_offered;
    _Atomic uint64_t init_unique;
    atomic_uint_least64_t *uring_requests;
    pthread_mutex_t uring_lock;
    bool uring_closed;
    struct fuse_uring *uring;
    struct worker workers[];
};

static _Thread_local struct worker *current_worker;

/* ------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------- */

static void fill_stat(const struct fuse_file *file, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ROOT_INODE;
    st->st_mode = S_IFREG | (file->read_only ? 0400 : 0600);
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_size = (off_t)file->size;
    st->st_blksize = UZRAM_PAGE_SIZE;
    st->st_blocks = (blkcnt_t)(file->size / 512);
    st->st_atim = st->st_mtim = st->st_ctim = file->born;
}

static void file_init(void *userdata, struct fuse_conn_info *conn)
{
    /* Large requests in one piece: the kernel splits direct I/O at max_write/max_read
     * (FUSE_MAX_PAGES is asked for by libfuse from max_write). */
    struct fuse_file *file = userdata;
    conn->max_write = file->uring_offered ? FUSE_URING_MAX_IO : FUSE_FILE_MAX_IO;
    conn->max_read = FUSE_FILE_MAX_IO;
    /* Asynchronous direct I/O (the loop device's) is "background" to the kernel: this many
     * requests may be queued for us at once. The default (12) would cap a queue depth of 16. */
    conn->max_background = FUSE_FILE_MAX_BACKGROUND;
    conn->congestion_threshold = FUSE_FILE_MAX_BACKGROUND * 3 / 4;
    /* A block device has no page cache of ours to keep coherent. */
    conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
}

static void file_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct fuse_file *file = fuse_req_userdata(req);
    struct stat st;
    if (ino != ROOT_INODE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    fill_stat(file, &st);
    /* The size never changes while mounted: let the kernel keep the attributes. */
    fuse_reply_attr(req, &st, 3600.0);
}

/* Size, mode and owner are fixed; times are accepted and forgotten (touch works). */
static void file_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                         struct fuse_file_info *fi)
{
    (void)fi;
    struct fuse_file *file = fuse_req_userdata(req);
    struct stat st;
    if (ino != ROOT_INODE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if ((to_set & FUSE_SET_ATTR_SIZE) && (uint64_t)attr->st_size != file->size) {
        fuse_reply_err(req, EPERM);
        return;
    }
    if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    fill_stat(file, &st);
    fuse_reply_attr(req, &st, 3600.0);
}

static void file_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fuse_file *file = fuse_req_userdata(req);
    if (ino != ROOT_INODE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (file->read_only && (fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EROFS);
        return;
    }
    fi->direct_io = file->direct_io;
    fi->keep_cache = 0;
    fuse_reply_open(req, fi);
}

/* The range [offset, offset + *length) cut to the end of the file: 0, or -ENOSPC for a
 * write at or past the end (a block device's answer). */
static int clamp(const struct fuse_file *file, uint64_t offset, size_t *length, bool writing)
{
    if (offset >= file->size) {
        bool refused = writing && *length != 0;
        *length = 0;
        return refused ? -ENOSPC : 0;
    }
    if (*length > file->size - offset)
        *length = (size_t)(file->size - offset);
    return 0;
}

static bool aligned(uint64_t offset, size_t length)
{
    return offset % UZRAM_SECTOR_SIZE == 0 && length % UZRAM_SECTOR_SIZE == 0;
}

/* [offset, offset + length) widened to whole sectors: *start and the widened length. */
static size_t widen(uint64_t offset, size_t length, uint64_t *start)
{
    *start = offset - offset % UZRAM_SECTOR_SIZE;
    uint64_t end = offset + length;
    end += (UZRAM_SECTOR_SIZE - end % UZRAM_SECTOR_SIZE) % UZRAM_SECTOR_SIZE;
    return (size_t)(end - *start);
}

static void file_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    struct fuse_file *file = fuse_req_userdata(req);
    unsigned char *buffer = current_worker->buffer;
    uint64_t offset = (uint64_t)off;
    if (size > current_worker->max_io)
        size = current_worker->max_io;
    clamp(file, offset, &size, false);
    if (size == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    uint64_t start = offset;
    size_t span = size;
    if (!aligned(offset, size))
        span = widen(offset, size, &start);
    int rc = uzram_read(file->dev, start, buffer, span);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, (const char *)buffer + (offset - start), size);
}

/* Patch bytes into whole sectors: read them, copy the new bytes in, write them back. */
static int write_unaligned(struct fuse_file *file, uint64_t offset, const char *data, size_t length)
{
    unsigned char *buffer = current_worker->scratch;
    uint64_t start;
    size_t span = widen(offset, length, &start);
    pthread_mutex_lock(&file->unaligned_lock);
    int rc = uzram_read(file->dev, start, buffer, span);
    if (rc == 0) {
        memcpy(buffer + (offset - start), data, length);
        rc = uzram_write(file->dev, start, buffer, span);
    }
    pthread_mutex_unlock(&file->unaligned_lock);
    return rc;
}

static void file_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    struct fuse_file *file = fuse_req_userdata(req);
    uint64_t offset = (uint64_t)off;
    if (file->read_only) {
        fuse_reply_err(req, EROFS);
        return;
    }
    if (size > FUSE_FILE_MAX_IO)
        size = FUSE_FILE_MAX_IO;
    size_t length = size;
    int rc = clamp(file, offset, &length, true);
    if (rc == 0 && length > 0)
        rc = aligned(offset, length) ? uzram_write(file->dev, offset, buf, length)
                                     : write_unaligned(file, offset, buf, length);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_write(req, length);
}

/* Zero bytes that do not cover whole sectors, through the unaligned write. */
static int zero_unaligned(struct fuse_file *file, uint64_t offset, size_t length)
{
    static const char zeros[UZRAM_SECTOR_SIZE];
    return write_unaligned(file, offset, zeros, length);
}

/* What the loop device sends for TRIM (PUNCH_HOLE) and WRITE ZEROES (ZERO_RANGE): the engine's
 * discard and write-zeroes. Ends not on a sector are zeroed in place. A plain allocation
 * (mode 0) inside the file has nothing to do: every page of the disk can be written. */
static void file_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                           struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    struct fuse_file *file = fuse_req_userdata(req);
    uint64_t offset = (uint64_t)off, length = (uint64_t)len;
    bool punch = mode & FALLOC_FL_PUNCH_HOLE, zero = mode & FALLOC_FL_ZERO_RANGE;
    if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
        fuse_reply_err(req, EOPNOTSUPP);
        return;
    }
    if (off < 0 || len <= 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    /* The file cannot grow; what lies past its end of a hole or zeroed range is nothing. */
    bool past_end = offset >= file->size || length > file->size - offset;
    if (past_end && !((punch || zero) && (mode & FALLOC_FL_KEEP_SIZE))) {
        fuse_reply_err(req, EFBIG);
        return;
    }
    if (offset >= file->size || (!punch && !zero)) {
        fuse_reply_err(req, 0);
        return;
    }
    if (length > file->size - offset)
        length = file->size - offset;
    if (file->read_only) {
        fuse_reply_err(req, EROFS);
        return;
    }
    uint64_t head = (UZRAM_SECTOR_SIZE - offset % UZRAM_SECTOR_SIZE) % UZRAM_SECTOR_SIZE;
    if (head > length)
        head = length;
    uint64_t tail = (length - head) % UZRAM_SECTOR_SIZE;
    uint64_t middle = length - head - tail;
    int rc = 0;
    if (head > 0)
        rc = zero_unaligned(file, offset, (size_t)head);
    if (rc == 0 && middle > 0) {
        rc = punch ? uzram_discard(file->dev, offset + head, middle)
                   : uzram_write_zeroes(file->dev, offset + head, middle, true);
    }
    if (rc == 0 && tail > 0)
        rc = zero_unaligned(file, offset + head + middle, (size_t)tail);
    fuse_reply_err(req, -rc);
}

/* A write is in the engine when its reply goes out: flush and fsync have nothing left to do,
 * and answering them at once is the barrier a filesystem asks for. */
static void file_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    fuse_reply_err(req, 0);
}

static void file_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)datasync;
    file_flush(req, ino, fi);
}

static void file_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    file_flush(req, ino, fi);
}

/* The loop device takes its discard granularity from the block size said here. */
static void file_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct fuse_file *file = fuse_req_userdata(req);
    struct uzram_stats stats;
    struct statvfs st = {0};
    uzram_get_stats(file->dev, &stats, sizeof stats);
    st.f_bsize = st.f_frsize = UZRAM_PAGE_SIZE;
    st.f_blocks = file->size / UZRAM_PAGE_SIZE;
    st.f_bfree = st.f_bavail = st.f_blocks - stats.pages_stored;
    st.f_files = 1;
    st.f_namemax = 255;
    fuse_reply_statfs(req, &st);
}

/* SEEK_DATA and SEEK_HOLE from the engine's extents, so that sparse copies skip holes. */
static void file_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                       struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    struct fuse_file *file = fuse_req_userdata(req);
    if (whence != SEEK_DATA && whence != SEEK_HOLE) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    uint64_t offset = (uint64_t)off;
    if (off < 0 || offset >= file->size) {
        fuse_reply_err(req, ENXIO);
        return;
    }
    while (offset < file->size) {
        uint64_t run;
        unsigned flags;
        int rc = uzram_extent(file->dev, offset, file->size - offset, &run, &flags);
        if (rc < 0) {
            fuse_reply_err(req, -rc);
            return;
        }
        bool hole = flags & UZRAM_EXTENT_HOLE;
        if (hole == (whence == SEEK_HOLE)) {
            fuse_reply_lseek(req, (off_t)offset);
            return;
        }
        offset += run;
    }
    /* No data after off: ENXIO; no hole: the end of the file is one. */
    if (whence == SEEK_DATA)
        fuse_reply_err(req, ENXIO);
    else
        fuse_reply_lseek(req, (off_t)file->size);
}

static const struct fuse_lowlevel_ops file_ops = {
    .init = file_init,
    .getattr = file_getattr,
    .setattr = file_setattr,
    .open = file_open,
    .read = file_read,
    .write = file_write,
    .flush = file_flush,
    .release = file_release,
    .fsync = file_fsync,
    .statfs = file_statfs,
    .fallocate = file_fallocate,
    .lseek = file_lseek,
};

/* ------------------------------------------------------------------------
 * Workers
 * ---------------------------------------------------------------------- */

/* How each worker waits for a request (libfuse calls this through fuse_session_custom_io):
 * reads its own descriptor, and when the queue is empty, goes on trying for
 * FUSE_FILE_SPIN_NS before it sleeps in poll(). Under load the next request is usually
 * there by then, and a thread that never sleeps is never woken: on a virtual machine a
 * wake-up across CPUs costs more than the request itself. The stop eventfd ends the wait
 * with ENODEV, which libfuse takes as the end of the session. */
static ssize_t worker_read(int fd, void *buf, size_t buf_len, void *userdata)
{
    struct fuse_file *file = userdata;
    struct worker *worker = current_worker;
    uint64_t spin_until = 0;
    (void)fd;
    for (;;) {
        ssize_t n = read(worker->fd, buf, buf_len);
        if (n > 0 && ((const struct fuse_in_header *)buf)->opcode == FUSE_INIT) {
            file->uring_offered = fuse_uring_offered(buf, (size_t)n);
            file->init_unique = ((const struct fuse_in_header *)buf)->unique;
        }
        if (n >= 0 || (errno != EAGAIN && errno != EINTR))
            return n;
        if (atomic_load_explicit(&file->stopping, memory_order_relaxed)) {
            errno = ENODEV;
            return -1;
        }
        if (errno == EINTR)
            continue;
        uint64_t now = util_now_ns();
        if (spin_until == 0)
            spin_until = now + FUSE_FILE_SPIN_NS;
        if (now < spin_until)
            continue;
        struct pollfd fds[2] = {{worker->fd, POLLIN, 0}, {file->stop_fd, POLLIN, 0}};
        poll(fds, 2, -1);
        spin_until = 0;
    }
}

/* A ring thread's view of the file for the handlers: its entry's buffer as the room. */
static void ring_enter(void *arg, unsigned char *room, unsigned char *scratch, size_t size)
{
    static _Thread_local struct worker ring_worker;
    ring_worker.file = arg;
    ring_worker.fd = -1;
    ring_worker.buffer = room;
    ring_worker.scratch = scratch;
    ring_worker.max_io = size - 2 * UZRAM_SECTOR_SIZE;
    current_worker = &ring_worker;
}

/* The kernel took the INIT reply that said yes to io_uring: serve the rings from now on (the
 * kernel moves to them when every queue has its entries; until then, and if this fails, the
 * requests keep coming through /dev/fuse). */
static void start_rings(struct fuse_file *file)
{
    char message[256];
    const struct fuse_uring_hooks hooks = {ring_enter, file, file->uring_requests};
    pthread_mutex_lock(&file->uring_lock);
    if (!file->uring_closed && file->uring == NULL) {
        int rc = fuse_uring_start(file->session, fuse_session_fd(file->session), file->worker_count,
                                  &hooks, &file->uring, message, sizeof message);
        if (rc < 0)
            fprintf(stderr,
                    "uzram: %s: FUSE over io_uring not used (%s); requests go "
                    "through /dev/fuse\n",
                    file->path, message);
        else
            fprintf(stderr, "uzram: %s: FUSE requests over io_uring (%u queues of %u)\n",
                    file->path, fuse_uring_queues(file->uring), fuse_uring_depth(file->uring));
    }
    pthread_mutex_unlock(&file->uring_lock);
}

/* Answers go back on the descriptor the request came from, or into a ring's entry. */
static ssize_t worker_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    struct fuse_file *file = userdata;
    ssize_t n;
    if (fuse_uring_capture(iov, count, &n))
        return n;
    const struct fuse_out_header *out = iov[0].iov_base;
    bool init = file->uring_offered && iov[0].iov_len >= sizeof *out &&
                out->unique == file->init_unique && out->error == 0;
    if (init)
        fuse_uring_accept(iov, count);
    else if (iov[0].iov_len >= sizeof *out && out->unique == file->init_unique && fuse_uring_off())
        fprintf(stderr,
                "uzram: %s: FUSE requests go through /dev/fuse; FUSE over io_uring takes less CPU: "
                "echo Y > %s before the attach\n",
                file->path, FUSE_URING_PARAMETER);
    else if (iov[0].iov_len >= sizeof *out && out->unique == file->init_unique &&
             fuse_uring_missing())
        fprintf(stderr,
                "uzram: %s: FUSE requests go through /dev/fuse: this kernel has no FUSE over "
                "io_uring (CONFIG_FUSE_IO_URING, Linux 6.14 and later), which takes less CPU\n",
                file->path);
    n = writev(current_worker ? current_worker->fd : fd, iov, count);
    if (init && n > 0)
        start_rings(file);
    return n;
}

static const struct fuse_custom_io worker_io = {
    .read = worker_read,
    .writev = worker_writev,
};

static void *worker_main(void *arg)
{
    struct worker *worker = arg;
    struct fuse_file *file = worker->file;
    struct fuse_buf buf = {0};
    current_worker = worker;
    while (!fuse_session_exited(file->session)) {
        int rc = fuse_session_receive_buf(file->session, &buf);
        if (rc == -EINTR || rc == -EAGAIN)
            continue;
        if (rc <= 0) /* 0: unmounted or stopped; < 0: the connection failed */
            break;
        fuse_session_process_buf(file->session, &buf);
    }
    free(buf.mem);
    return NULL;
}

static int start_thread(struct worker *worker)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, NBD_SERVER_THREAD_STACK);
    int rc = pthread_create(&worker->thread, &attr, worker_main, worker);
    pthread_attr_destroy(&attr);
    return -rc;
}

/* A descriptor of the connection for each worker: a clone of the session's, so that each
 * can be non-blocking and answered on its own; where the kernel cannot clone (before Linux
 * 4.2), the session's own, shared. */
static int open_worker_fds(struct fuse_file *file, char *message, size_t message_size)
{
    int session_fd = fuse_session_fd(file->session);
    for (unsigned i = 0; i < file->worker_count; i++) {
        int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC | O_NONBLOCK);
        uint32_t master = (uint32_t)session_fd;
        if (fd >= 0 && ioctl(fd, FUSE_DEV_IOC_CLONE, &master) == 0) {
            file->workers[i].fd = fd;
            continue;
        }
        if (fd >= 0)
            close(fd);
        if (fcntl(session_fd, F_SETFL, fcntl(session_fd, F_GETFL) | O_NONBLOCK) < 0) {
            snprintf(message, message_size, "cannot set up the FUSE descriptor: %s",
                     strerror(errno));
            return -errno;
        }
        file->workers[i].fd = session_fd;
    }
    return 0;
}

/* Make every worker leave: they end by themselves once the connection is gone (the file was
 * unmounted); one still waiting (the file is still in use) is woken by the stop eventfd. A
 * worker inside a request finishes it first, in the engine's time. */
static void stop_workers(struct fuse_file *file)
{
    uint64_t one = 1;
    atomic_store(&file->stopping, true);
    fuse_session_exit(file->session);
    if (write(file->stop_fd, &one, sizeof one) < 0) {
        /* cannot fail: the counter is far from full */
    }
    for (unsigned i = 0; i < file->worker_count; i++)
        if (file->workers[i].started)
            pthread_join(file->workers[i].thread, NULL);
    pthread_mutex_lock(&file->uring_lock);
    file->uring_closed = true;
    struct fuse_uring *rings = file->uring;
    file->uring = NULL;
    pthread_mutex_unlock(&file->uring_lock);
    fuse_uring_stop(rings);
}

/* ------------------------------------------------------------------------
 * Mounting and unmounting
 * ---------------------------------------------------------------------- */

/* The mount point: an existing empty regular file of ours, or a new one. */
static int make_mount_point(struct fuse_file *file, char *message, size_t message_size)
{
    struct stat st;
    int fd = open(file->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        close(fd);
        file->created = true;
        return 0;
    }
    int err = errno;
    /* A server killed while attached left its FUSE mount here, dead: take it away, and the
     * file under it is ours again (made by that server, removed at the end). */
    bool dead = err == EEXIST && leftover_dead_mount(file->path);
    if (dead && leftover_unmount(file->path, message, message_size) < 0)
        return -EBUSY;
    if (dead)
        fprintf(stderr, "uzram: %s: unmounted the dead FUSE mount a stopped server left\n",
                file->path);
    if (err == EEXIST && lstat(file->path, &st) == 0) {
        file->created = dead && st.st_uid == geteuid();
        if (S_ISREG(st.st_mode) && st.st_size == 0)
            return 0;
        snprintf(message, message_size,
                 "%s exists and is not an empty file; remove it or choose another --file",
                 file->path);
        return -EEXIST;
    }
    snprintf(message, message_size, "cannot create %s: %s", file->path, strerror(err));
    return -err;
}

/* The FUSE session of `file`, mounted on its mount point (fsname uzram:NAME). 0, or -EIO with
 * why in `message`; the caller stops the file either way on failure. */
static int mount_session(struct fuse_file *file, const char *name, char *message,
                         size_t message_size)
{
    char max_read[64], fsname[96];
    snprintf(max_read, sizeof max_read, "-omax_read=%u", FUSE_FILE_MAX_IO);
    snprintf(fsname, sizeof fsname, "-ofsname=uzram:%s,subtype=uzram", name);
    char *argv[] = {"uzram", max_read, fsname, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    file->session = fuse_session_new(&args, &file_ops, sizeof file_ops, file);
    fuse_opt_free_args(&args);
    if (file->session == NULL) {
        snprintf(message, message_size, "cannot start a FUSE session (see the server's log)");
        return -EIO;
    }
    if (fuse_session_mount(file->session, file->path) != 0) {
        snprintf(message, message_size,
                 "cannot mount FUSE on %s (is /dev/fuse there, and fusermount3 for a user "
                 "other than root? see the server's log)",
                 file->path);
        return -EIO;
    }
    file->mounted = true;
    return 0;
}

int fuse_file_start(struct uzram *dev, const struct fuse_file_options *options,
                    struct fuse_file **out, char *message, size_t message_size)
{
    unsigned count = options->threads ? options->threads : 1;
    if (count > FUSE_FILE_MAX_THREADS)
        count = FUSE_FILE_MAX_THREADS;
    if (strlen(options->path) >= FUSE_FILE_PATH_MAX) {
        snprintf(message, message_size, "file path too long: %s", options->path);
        return -ENAMETOOLONG;
    }
    if (access("/dev/fuse", F_OK) < 0 && errno == ENOENT) {
        snprintf(message, message_size,
                 "no /dev/fuse: the kernel's FUSE module is not loaded (fuse, CONFIG_FUSE_FS: "
                 "modprobe fuse), which --via loop needs; or use --via nbd");
        return -ENODEV;
    }
    struct fuse_file *file = calloc(1, sizeof *file + count * sizeof file->workers[0]);
    if (file == NULL) {
        snprintf(message, message_size, "out of memory");
        return -ENOMEM;
    }
    struct uzram_config config;
    uzram_get_config(dev, &config);
    file->dev = dev;
    file->size = config.disksize;
    file->read_only = options->read_only;
    file->direct_io = options->direct_io;
    file->uring_requests = options->uring_requests;
    file->worker_count = count;
    snprintf(file->path, sizeof file->path, "%s", options->path);
    clock_gettime(CLOCK_REALTIME, &file->born);
    pthread_mutex_init(&file->unaligned_lock, NULL);
    pthread_mutex_init(&file->uring_lock, NULL);
    for (unsigned i = 0; i < count; i++)
        file->workers[i].fd = -1;
    file->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (file->stop_fd < 0) {
        snprintf(message, message_size, "eventfd: %s", strerror(errno));
        fuse_file_stop(file, false);
        return -EMFILE;
    }

    /* A read of up to FUSE_FILE_MAX_IO, widened to whole sectors at both ends. */
    size_t buffer_size = FUSE_FILE_MAX_IO + 2 * UZRAM_SECTOR_SIZE;
    for (unsigned i = 0; i < count; i++) {
        file->workers[i].file = file;
        file->workers[i].max_io = FUSE_FILE_MAX_IO;
        if (posix_memalign((void **)&file->workers[i].buffer, UZRAM_PAGE_SIZE, buffer_size)) {
            snprintf(message, message_size, "out of memory");
            fuse_file_stop(file, false);
            return -ENOMEM;
        }
        file->workers[i].scratch = file->workers[i].buffer;
    }

    int rc = make_mount_point(file, message, message_size);
    if (rc < 0) {
        fuse_file_stop(file, false);
        return rc;
    }
    rc = mount_session(file, options->name, message, message_size);
    if (rc < 0) {
        fuse_file_stop(file, false);
        return rc;
    }

    rc = open_worker_fds(file, message, message_size);
    if (rc == 0 &&
        fuse_session_custom_io(file->session, &worker_io, fuse_session_fd(file->session)) != 0) {
        snprintf(message, message_size, "cannot set up the FUSE session's I/O");
        rc = -ENOMEM;
    }
    if (rc < 0) {
        fuse_file_stop(file, false);
        return rc;
    }
    for (unsigned i = 0; i < count; i++) {
        rc = start_thread(&file->workers[i]);
        if (rc < 0) {
            snprintf(message, message_size, "cannot start a FUSE thread: %s", strerror(-rc));
            fuse_file_stop(file, false);
            return rc;
        }
        file->workers[i].started = true;
    }
    *out = file;
    return 0;
}

/* Unmount while the workers still answer: the kernel may have a RELEASE to send, and an
 * unmount refused (EBUSY: the loop device has not let go of the file yet) is tried again for
 * a while before it is done lazily. */
static void unmount(struct fuse_file *file, bool wait_for_users)
{
    if (geteuid() != 0)
        return; /* fuse_session_unmount() goes through fusermount3 */
    for (int tries = 0; tries < (wait_for_users ? 200 : 1); tries++) {
        if (umount2(file->path, UMOUNT_NOFOLLOW) == 0 || errno == EINVAL) {
            file->mounted = false;
            return;
        }
        if (errno != EBUSY)
            break;
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
    if (umount2(file->path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
        file->mounted = false;
}

void fuse_file_stop(struct fuse_file *file, bool wait_for_users)
{
    if (file == NULL)
        return;
    if (file->mounted)
        unmount(file, wait_for_users);
    if (file->session != NULL) {
        int session_fd = fuse_session_fd(file->session);
        stop_workers(file);
        /* The connection ends when its last descriptor closes: whatever the kernel still
         * queues for it fails (ENOTCONN). fuse_session_unmount() also unmounts (lazily,
         * through fusermount3 when we are not root) if that has not happened yet; it is
         * called in every case, as it frees the mount point's name fuse_session_mount()
         * kept (and does nothing else once the connection is gone: POLLERR on its fd). */
        for (unsigned i = 0; i < file->worker_count; i++)
            if (file->workers[i].fd >= 0 && file->workers[i].fd != session_fd)
                close(file->workers[i].fd);
        fuse_session_unmount(file->session);
        fuse_session_destroy(file->session);
    }
    if (file->created)
        unlink(file->path);
    for (unsigned i = 0; i < file->worker_count; i++)
        free(file->workers[i].buffer);
    if (file->stop_fd >= 0)
        close(file->stop_fd);
    pthread_mutex_destroy(&file->unaligned_lock);
    pthread_mutex_destroy(&file->uring_lock);
    free(file);
}
