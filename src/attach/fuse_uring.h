/* fuse_uring.h - FUSE requests over io_uring (Linux 6.14+, when the fuse module's enable_uring
 * is on): what fuse_file.c needs to offer it at INIT and to serve its queues. */
#ifndef UZRAM_ATTACH_FUSE_URING_H
#define UZRAM_ATTACH_FUSE_URING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

struct fuse_session;

/* Largest read or write in one request over the ring: the kernel makes every entry's buffer
 * as large as the largest request (max_write, max_pages), and there is an entry per CPU and
 * depth, so requests over the ring are smaller than over /dev/fuse (FUSE_FILE_MAX_IO). */
#define FUSE_URING_MAX_IO (128u << 10)
/* Entries over all queues (the kernel has one queue per possible CPU): each holds a buffer of
 * FUSE_URING_MAX_IO; at least FUSE_URING_MIN_DEPTH a queue, at most FUSE_URING_MAX_DEPTH. */
#define FUSE_URING_ENTRIES 64u
#define FUSE_URING_MIN_DEPTH 2u
#define FUSE_URING_MAX_DEPTH 16u
/* Machines with more possible CPUs than this keep /dev/fuse: the entries' buffers would take
 * more than FUSE_URING_MAX_QUEUES * FUSE_URING_MIN_DEPTH * FUSE_URING_MAX_IO of memory. */
#define FUSE_URING_MAX_QUEUES 256u

/* What the ring threads ask of the file they serve. */
struct fuse_uring_hooks {
    /* Before each request, in the ring thread: the room the handlers build a reply's data in
     * (the entry's own buffer, `size` bytes, so that a READ is decompressed where the kernel
     * takes it from), and the thread's scratch room of as many bytes, apart from the entry's
     * (a write not on sector boundaries reads the sectors around its data, which lies in the
     * entry's buffer). */
    void (*enter)(void *arg, unsigned char *room, unsigned char *scratch, size_t size);
    void *arg;
    /* Counts the requests served over the rings. */
    atomic_uint_least64_t *served;
};

/* The FUSE_INIT request `request` (`length` bytes as read from /dev/fuse): whether the kernel
 * offers io_uring (FUSE_OVER_IO_URING), and this machine is one uzram uses it on. */
bool fuse_uring_offered(const void *request, size_t length);

/* Say yes to io_uring in the INIT reply `iov` (as libfuse hands it to writev). */
void fuse_uring_accept(struct iovec *iov, int count);

/* Whether this kernel has FUSE over io_uring and it is turned off (the fuse module's
 * enable_uring): the server's log then says how to turn it on. */
#define FUSE_URING_PARAMETER "/sys/module/fuse/parameters/enable_uring"
bool fuse_uring_off(void);
/* Whether the kernel has no FUSE over io_uring at all (no enable_uring: before Linux 6.14, or
 * built without CONFIG_FUSE_IO_URING): the server's log says so. */
bool fuse_uring_missing(void);

struct fuse_uring;

/* After the INIT reply is written: register every queue's entries on `fd` (a descriptor of the
 * session's connection) and serve them from `threads` threads, each with its own ring. When
 * the last queue has its entries, the kernel sends requests there instead of /dev/fuse.
 * Returns 0, or a negative errno with a message (the session goes on over /dev/fuse). */
int fuse_uring_start(struct fuse_session *session, int fd, unsigned threads,
                     const struct fuse_uring_hooks *hooks, struct fuse_uring **out, char *message,
                     size_t message_size);
/* Stop the threads and free the entries (after the file is unmounted: a request queued after
 * this waits until the connection ends). NULL is accepted. */
void fuse_uring_stop(struct fuse_uring *ring);
/* Queues and entries a queue, for the log. */
unsigned fuse_uring_queues(const struct fuse_uring *ring);
unsigned fuse_uring_depth(const struct fuse_uring *ring);

/* For fuse_file.c's writev: when the calling thread is a ring thread inside a request, take
 * the reply (`iov`: the out header, then its data) into the entry, set *result to its length
 * (or -1 and errno) and return true; else return false (the reply goes to /dev/fuse). */
bool fuse_uring_capture(const struct iovec *iov, int count, ssize_t *result);

#endif
