/* attach.h - a served device as a /dev node (`uzram attach`), and swap safety (`--swap`).
 * The server side: the disk as a FUSE file with a loop device on it, or nbd-client on the
 * server's socket; the checks that keep a device in use from being taken away. */
#ifndef UZRAM_ATTACH_H
#define UZRAM_ATTACH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "uzram.h"

/* ------------------------------------------------------------------------
 * The disk as one file through FUSE (fuse_file.c)
 * ---------------------------------------------------------------------- */

/* Largest read or write in one FUSE request (max_read, max_write): the kernel splits larger
 * direct I/O at this size. */
#define FUSE_FILE_MAX_IO (1u << 20)
/* Requests the kernel may queue for us at once for asynchronous direct I/O (the loop
 * device's); more than a queue depth of 16 with room to spare. */
#define FUSE_FILE_MAX_BACKGROUND 64u
/* Most threads reading the FUSE queue (each holds two buffers of FUSE_FILE_MAX_IO). */
#define FUSE_FILE_MAX_THREADS 64u
/* A worker that finds the queue empty tries again for this long before it sleeps. */
#ifndef FUSE_FILE_SPIN_NS
#define FUSE_FILE_SPIN_NS 50000u
#endif
#define FUSE_FILE_PATH_MAX 4096

struct fuse_file;

struct fuse_file_options {
    const char *path; /* the file to mount over (created if missing; must be empty) */
    const char *name; /* the device's name, shown as the filesystem's source */
    unsigned threads; /* threads reading the FUSE queue, 1..FUSE_FILE_MAX_THREADS */
    bool read_only;
    bool direct_io; /* FOPEN_DIRECT_IO: even buffered opens of the file skip the page cache */
    /* Counts the requests served over io_uring (FUSE_OVER_IO_URING, Linux 6.14+, when the fuse
     * module's enable_uring is on; /dev/fuse otherwise); it outlives the file. */
    atomic_uint_least64_t *uring_requests;
};

/* Mount the disk of `dev` as the file options->path and serve it with options->threads
 * threads until fuse_file_stop(). Returns 0, or a negative errno with a message. */
int fuse_file_start(struct uzram *dev, const struct fuse_file_options *options,
                    struct fuse_file **out, char *message, size_t message_size);
/* Unmount (with `wait_for_users`, waiting up to 2 s for the last user to let go; then
 * lazily), stop the threads, close the FUSE connection (whatever still uses the file gets
 * ENOTCONN from then on) and remove the file if it was created. NULL is accepted. */
void fuse_file_stop(struct fuse_file *file, bool wait_for_users);

/* ------------------------------------------------------------------------
 * Block devices: loop devices, users of a device (blockdev.c)
 * ---------------------------------------------------------------------- */

#define BLOCKDEV_PATH_MAX 64

/* Attach a free loop device to the file `path` with direct I/O, 4 KiB logical blocks and
 * LO_FLAGS_AUTOCLEAR (LOOP_CONFIGURE). Fills `device` ("/dev/loopN"), says whether the kernel
 * took direct I/O, and leaves the device open in *fd for loop_hold(). Returns 0 or a negative
 * errno with a message. */
int loop_attach(const char *path, bool read_only, char device[BLOCKDEV_PATH_MAX], bool *direct_io,
                int *fd, char *message, size_t message_size);

/* The process that keeps an attached loop device open (loop_holder.c): with AUTOCLEAR the
 * device goes away at its last close, and the holder is the one user besides whoever mounts
 * it. It is not the server, whose own exit would then wait on the FUSE file it serves itself
 * (a killed server would hang in the kernel): it is the server's program again (`uzram
 * __hold-loop`, the device as its descriptor 3), which leaves when the pipe from the server
 * closes, as it does when the server exits however it exits. */
struct loop_holder {
    pid_t pid; /* 0: none */
    int pipe;  /* the server's end; -1: none */
};

/* Hand the loop device open in *fd over to a holder (*fd is closed, -1). 0, or a negative
 * errno with a message (the device is let go of, and clears itself if unused). */
int loop_hold(int *fd, struct loop_holder *holder, char *message, size_t message_size);

/* End the holder, and wait for it: a device nothing else uses goes away now, one still in
 * use (mounted, swap) with its last user. Nothing to do without one. */
void loop_let_go(struct loop_holder *holder);

/* The holder's program: wait for the end of standard input, keeping descriptor 3 open. */
int loop_holder_main(void);

/* Detach the loop device `device` if its backing file is still (st_dev, st_ino) and nothing
 * but its holder uses it (blockdev_claim), letting the holder go. Returns 0; -EBUSY with a
 * message that says what to undo first (the holder stays); -ENXIO when the device no longer
 * has that file. */
int loop_detach(const char *device, dev_t file_dev, ino_t file_ino, struct loop_holder *holder,
                char *message, size_t message_size);

/* Undo the octal escapes of /proc/self/mountinfo and /proc/swaps ("\040" for a space). */
void mountinfo_unescape(char *text);

/* Whether this process may attach a /dev node: loop devices and nbd-client need
 * CAP_SYS_ADMIN, and it is the server that attaches, not who runs `uzram attach`. 0, or
 * -EPERM with a message naming the server's user and saying to start it as root. */
int attach_privileged(const char *name, char *message, size_t message_size);

/* Open `device` exclusively after checking that nothing uses it: not mounted, not swap, not
 * held by another block device (device-mapper, md), not open in another process. Returns
 * the descriptor (the caller closes it), or -EBUSY with a message naming the user and the
 * command that ends its use, or another negative errno. */
int blockdev_claim(const char *device, char *message, size_t message_size);
/* blockdev_claim() that takes process `ours` (a loop device's holder) for no user. */
int blockdev_claim_except(const char *device, pid_t ours, char *message, size_t message_size);

/* ------------------------------------------------------------------------
 * A device's backing store (backing_dev.c)
 * ---------------------------------------------------------------------- */

/* Why uzram_set_backing_dev_flags() refused `path` with `rc`, in words that say what to do,
 * into `message`: a file with data (and `overwrite`, the option that lets it be emptied, or
 * NULL where there is none: run time), another user's file, a mode that lets others in, other
 * hard links, a symbolic link in a shared directory, a block device in use (who uses it, as
 * blockdev_claim() says), the wrong kind or size. */
void backing_refusal(const char *path, int rc, const char *overwrite, char *message, size_t size);

/* The library's rule for a file that holds a device's data (a backing store's file, `what`
 * "the store"; a state file, "the state"): why it refused `path` (`st` its status, or NULL)
 * with -EPERM (another user's), -EACCES (a mode that lets others in) or -EMLINK (other hard
 * links), in words that say what to do, into `message`; false for another `rc`. */
struct stat;
bool private_file_refusal(const char *path, const struct stat *st, int rc, const char *what,
                          char *message, size_t size);

/* backing_refusal() for the backing_dev attribute (`value`, a path), as "cannot use PATH as
 * backing_dev: why", into `message`; left alone when the device holds data (the attribute's
 * own refusal: it changes only while the device is empty). */
void backing_dev_refusal(struct uzram *dev, const char *value, int rc, char *message, size_t size);

/* Attach the store `given` to `dev` (`overwrite`: UZRAM_BACKING_OVERWRITE, as serve's
 * --overwrite-backing-file asks): a relative path is made absolute from this process's
 * directory, or refused with `absolute_only` (a request from another process: hot-add).
 * Returns 0, or a negative errno with backing_refusal()'s line in `message`. */
int backing_dev_open(struct uzram *dev, const char *given, uint64_t size, bool overwrite,
                     bool absolute_only, char *message, size_t message_size);

/* ------------------------------------------------------------------------
 * What a server that was killed left behind (leftovers.c)
 * ---------------------------------------------------------------------- */

/* Whether `path` is the mount point of a FUSE file of uzram whose server is gone: mounted
 * there as fuse.uzram (mountinfo) with its connection dead (stat: ENOTCONN). */
bool leftover_dead_mount(const char *path);

/* Unmount such a mount lazily (whatever still has the file keeps failing): umount2 as root,
 * fusermount3 -u -z otherwise. 0, or a negative errno with a message. */
int leftover_unmount(const char *path, char *message, size_t message_size);

/* What `uzram detach NAME` does when no server serves NAME: in the runtime directory `dir`,
 * detach the loop devices on NAME.disk that nothing uses (a loop device attached by a server
 * since issue 23 clears itself; one still mounted is named with what to do), unmount the dead
 * FUSE mount on NAME.disk, remove the empty NAME.disk, and remove the sockets of `dir` nobody
 * listens on. `report` gets what was done ("" when nothing was found). Returns 0, -EBUSY with
 * `message` when a loop device is still in use, or another negative errno with `message`. */
int leftover_clean(const char *dir, const char *name, char *report, size_t report_size,
                   char *message, size_t message_size);

/* ------------------------------------------------------------------------
 * The kernel's NBD client (nbd_client.c)
 * ---------------------------------------------------------------------- */

#define NBD_CLIENT_PROGRAM "nbd-client"
#define NBD_CLIENT_ARGS_MAX 16
/* Seconds the kernel waits for a reply before it drops the connection and fails the
 * request (nbd-client -timeout). Without one the kernel waits forever for a request that
 * was in flight when the server died: the file system's journal, then every writer, hang
 * in D state (tests/vm/attach.sh, SIGKILL under a mounted node). Well above what a live local
 * server takes for one request (32 MiB at most). */
#define NBD_REQUEST_TIMEOUT "20"

/* What `attach` asks nbd-client to connect. */
struct nbd_client_plan {
    const char *socket; /* the server's NBD Unix socket */
    const char *export_name;
    const char *device; /* /dev/nbdN */
    bool swap;          /* -swap: nbd-client locks its memory too (ioctl mode) */
    bool read_only;
};

/* Whether the kernel has its NBD client: /sys/module/nbd exists. */
bool nbd_module_loaded(void);

/* Whether a client is connected to /dev/nbdN (it has a pid and a size in /sys/block). */
bool nbd_device_connected(const char *device);

/* The first /dev/nbdN that no client is connected to, into `device`. Returns 0, or -ENODEV
 * when the module is missing or every device is taken. */
int nbd_free_device(char device[BLOCKDEV_PATH_MAX]);

/* The command line that connects plan->device: argv[0] is NBD_CLIENT_PROGRAM, the list ends
 * with NULL. Returns the number of arguments, or -EINVAL. */
int nbd_client_argv(const struct nbd_client_plan *plan, const char *argv[NBD_CLIENT_ARGS_MAX]);
/* The command line that disconnects `device`. */
int nbd_client_disconnect_argv(const char *device, const char *argv[NBD_CLIENT_ARGS_MAX]);

/* ------------------------------------------------------------------------
 * The kernel's ublk driver (ublk.c)
 * ---------------------------------------------------------------------- */

struct ublk_server;

/* Add /dev/ublkbN of `size` bytes served from `dev` by `queues` queues (at most one per
 * CPU), each a thread of this process, and start it. `swap`: a swap device, whose queues
 * hold less memory (fewer, shallower, smaller requests: ublk.c). `recoverable` (a server whose
 * device state outlives it): made with UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE, so that
 * when this process dies the node stays and its I/O waits for ublk_recover() in a successor (the
 * requests this one had taken are sent again). Returns 0, or a negative errno with a message
 * (-ENOENT: no ublk driver). */
int ublk_start(struct uzram *dev, uint64_t size, bool read_only, unsigned queues, bool recoverable,
               bool swap, struct ublk_server **out, char *message, size_t message_size);
/* "/dev/ublkbN". */
const char *ublk_path(const struct ublk_server *server);
/* N of /dev/ublkbN: what a successor gives ublk_recover(). */
int ublk_id(const struct ublk_server *server);
/* Stop and delete the device (whatever still uses it gets I/O errors), end the threads. */
void ublk_stop(struct ublk_server *server);
/* A planned handover: end the threads (the requests they served are completed first) and let
 * go of the device without stopping it. A recoverable device then waits, quiesced, its I/O
 * held, for ublk_recover() in the successor (this process after an execve, or another);
 * one made without recovery is stopped and deleted as by ublk_stop(). NULL is accepted. */
void ublk_leave(struct ublk_server *server);

/* A uzram ublk device whose server is gone and that a successor may take over. */
struct ublk_recoverable {
    int dev_id;            /* /dev/ublkbN */
    uint64_t size;         /* bytes */
    unsigned queues;       /* hardware queues, as made */
    unsigned depth;        /* requests per queue */
    unsigned max_io_bytes; /* the largest request */
    bool read_only;
    bool quiesced; /* the driver has seen its server go (else it will, within moments) */
    pid_t owner;   /* the last server's pid */
};

/* The recoverable devices (made by ublk_start() with `recoverable`) whose server is gone, at
 * most `max` into `list`: how many, or a negative errno with a message (no driver). The caller
 * matches them with the state it adopted (device ids it recorded) and recovers those. */
int ublk_list_recoverable(struct ublk_recoverable *list, size_t max, char *message,
                          size_t message_size);
/* Take over /dev/ublkbN (`dev_id`) whose server died or left (ublk_leave), serving it from
 * `dev` of `size` bytes as ublk_start() does: waits (at most 30 s) until the driver has let go
 * of the old server (START_USER_RECOVERY), opens /dev/ublkcN, maps the queues, fetches every
 * request, ends the recovery with this pid: the I/O held since resumes, the requests in flight
 * at the death are re-issued. Refused, with the device left as it is: -ENODEV no such device,
 * -EPERM not uzram's, -EBUSY its server runs, -EOPNOTSUPP made without recovery or stopped,
 * -EINVAL another size, mode or queue layout, -ETIMEDOUT the driver did not let go. The
 * result is ended by ublk_stop() (for good) or ublk_leave() (another handover). */
int ublk_recover(struct uzram *dev, int dev_id, uint64_t size, bool read_only,
                 struct ublk_server **out, char *message, size_t message_size);
/* Stop and delete /dev/ublkbN (`dev_id`) of a uzram server that is gone, quiesced or not (a
 * stop for good of a device no successor will take: its held I/O fails). 0, or a negative
 * errno with a message (-EBUSY: its server runs; -EPERM: not uzram's; -ENODEV). */
int ublk_delete(int dev_id, char *message, size_t message_size);

/* ------------------------------------------------------------------------
 * Swap safety (swap.c)
 * ---------------------------------------------------------------------- */

/* What `serve --swap` put in place, read back from the kernel. */
struct swap_safety {
    bool memory_locked;  /* mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) */
    bool io_flusher;     /* PR_GET_IO_FLUSHER of the calling thread */
    int oom_score_adj;   /* /proc/self/oom_score_adj */
    uint64_t locked_kib; /* VmLck of /proc/self/status */
    /* Where the server's memory is (uzram(1), SWAP): VmRSS, and of it the heap (mallinfo2):
     * its size (arena: under --swap all of it faulted in and never given back), the part in
     * use, and the blocks allocated as mappings of their own (hblkhd). */
    uint64_t resident_kib;
    uint64_t heap_bytes, heap_used, heap_mapped;
};

/* Lock the process's memory (present and future, as it is touched), mark it an I/O flusher
 * (PR_SET_IO_FLUSHER: its allocations never wait for I/O, which could be its own), keep
 * the OOM killer away (oom_score_adj -1000) and have server threads touch their stacks first.
 * Call in the main thread before any other thread starts: threads inherit the flusher mark.
 * All or nothing: returns 0, or a negative errno with a message naming what was refused and
 * the privilege it needs (nothing stays set). */
int swap_safety_enable(char *message, size_t message_size);
/* Fault the heap in ahead of need (one arena, never trimmed): after swap_safety_enable() and
 * swap_successor_memory(dev, false) for every device, before the server's threads start. */
void swap_memory_ahead(void);
/* The reserve of a swap device: keep = false, the reserve alone, giving back at once what its
 * predecessor kept besides for this process's start (a device taken over from its state);
 * keep = true, once the device is served, the reserve and, for a device with a state file,
 * 32 MiB more kept for the next successor. Returns 0 or a negative errno. */
int swap_successor_memory(struct uzram *dev, bool keep);
/* Read the settings back. */
void swap_safety_read(struct swap_safety *safety);
/* A device of a server in swap mode keeps pool memory faulted in ahead of need
 * (uzram_set_mem_reserve()). Returns 0 or a negative errno. */
int swap_device_prepare(struct uzram *dev);
/* A write to a swap device refused as the pool is at its memory limit (ENOSPC): counted for
 * the guard (swap_guard.c), from any request thread. */
void swap_guard_note_nospace(void);
/* The guard's look, once a second, by the heap's keeper: after SWAP_GUARD_SECONDS in which
 * every second a swap-out failed at the limit while memory stalled tasks, it asks the kernel's
 * OOM killer to end a task (uzram(1), SWAP). */
void swap_guard_tick(void);

/* The most seconds --swap-stall-limit takes (an hour). */
#define SWAP_STALL_LIMIT_MAX 3600u

/* --swap-stall-limit: how long the stall must last before the guard asks the OOM killer
 * (default SWAP_GUARD_SECONDS); 0: never. Before the first swap_guard_tick(). */
void swap_guard_set_limit(unsigned seconds);

/* ------------------------------------------------------------------------
 * The attachment of a served device (attachment.c)
 * ---------------------------------------------------------------------- */

struct attach_settings {
    struct uzram *dev;
    const char *name;        /* the device's name: export name, default file name */
    const char *unix_path;   /* the NBD socket nbd-client connects to; NULL: none */
    const char *runtime_dir; /* where the FUSE file goes unless the request names one */
    unsigned threads;        /* serve --threads: FUSE workers, ublk queues (at most one per CPU) */
    bool read_only;
    bool swap; /* the server runs with swap safety (serve --swap) */
    /* The device's state outlives the server (serve --persist): a ublk device is made
     * recoverable (ublk_start), for attachment_recover_ublk() in a successor. */
    bool persistent;
};

struct attachment;

int attachment_create(const struct attach_settings *settings, struct attachment **out);
/* attachment_stop(), then free. */
void attachment_destroy(struct attachment *attachment);

/* The control requests. Attach `via` "loop" (the FUSE file at `file`, or NAME.disk in the
 * runtime directory, with a loop device on it) or "nbd" (nbd-client on the Unix socket);
 * `swap` asks that the server be in swap mode. Detach undoes it in order, refusing while the
 * device is in use. Each returns 0 with "key value" lines in `reply` (device, file,
 * direct_io), or a negative errno with a message that says what to do. One runs at a time. */
int attachment_attach(struct attachment *attachment, const char *via, bool swap, const char *file,
                      char *reply, size_t reply_size, char *message, size_t message_size);
int attachment_detach(struct attachment *attachment, char *reply, size_t reply_size, char *message,
                      size_t message_size);
/* The attached /dev path, "" when none. */
void attachment_device(struct attachment *attachment, char *device, size_t size);
/* Requests the FUSE file of `--via loop` served over io_uring since the server started. */
uint64_t attachment_uring_requests(struct attachment *attachment);
/* A successor server that adopted the device's state takes over the ublk device `dev_id` its
 * predecessor had attached (ublk_list_recoverable() lists them; the state records which was
 * its): ublk_recover(), then it is this attachment's, as if attached here. 0, or a negative
 * errno with a message (-EEXIST: something is attached already; ublk_recover()'s). */
int attachment_recover_ublk(struct attachment *attachment, int dev_id, char *message,
                            size_t message_size);
/* A planned restart: a ublk device is left to the successor (ublk_leave: its I/O waits); any
 * other attachment is ended as by attachment_stop(). Refuses attaches after. */
void attachment_hand_over(struct attachment *attachment);
/* The server stops: detach what nothing uses; what is still used stays, failing its I/O (a
 * loop device then goes away with its last user). Logs what it did. Refuses attaches after. */
void attachment_stop(struct attachment *attachment);

#endif
