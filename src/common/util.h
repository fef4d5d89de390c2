/* util.h - small helpers shared by the uzram subcommands (not part of libuzram): socket I/O
 * that survives partial transfers and keeps deadlines, big-endian packing, threads with
 * prefaulted stacks, the runtime directory and which directories and sockets can only be the
 * user's, names, sizes, errno names, JSON strings. */
#ifndef UZRAM_UTIL_H
#define UZRAM_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Read exactly `length` bytes. Returns 1 when done, 0 on end of file before
 * the first byte, -ECONNRESET on end of file in the middle, -errno on error
 * (-EAGAIN when a receive timeout expired), -ETIMEDOUT once CLOCK_MONOTONIC
 * passes `deadline_ms` (0: no deadline), however the bytes trickle in. */
int util_read_full_by(int fd, void *buf, size_t length, uint64_t deadline_ms);
/* CLOCK_MONOTONIC now, in milliseconds / nanoseconds. */
uint64_t util_now_ms(void);
uint64_t util_now_ns(void);

/* Read and throw away `length` bytes (a payload we refuse but must skip), with a
 * deadline as util_read_full_by(). */
int util_discard_by(int fd, uint64_t length, uint64_t deadline_ms);

/* Send every byte of the iovec array (which is modified), looping over
 * partial sends and IOV_MAX. MSG_NOSIGNAL: a vanished peer is -EPIPE, not a
 * signal. Returns 0 or -errno (-EAGAIN when a send timeout expired). */
int util_send_iov(int fd, struct iovec *iov, int count);
/* The same with an overall deadline: -ETIMEDOUT if the whole message is not
 * out within `timeout_seconds` (a peer that reads a trickle cannot hold the
 * sender for longer). */
int util_send_iov_timeout(int fd, struct iovec *iov, int count, int timeout_seconds);
/* The same with a deadline on CLOCK_MONOTONIC (milliseconds, 0: none), for a
 * whole exchange that must end in time (a handshake, a control request):
 * -ETIMEDOUT once it has passed, however slowly the peer reads. */
int util_send_iov_by(int fd, struct iovec *iov, int count, uint64_t deadline_ms);
/* util_send_iov_by() of one buffer. */
int util_send_all_by(int fd, const void *buf, size_t length, uint64_t deadline_ms);

/* Big-endian loads and stores. */
void util_put16(unsigned char *p, uint16_t v);
void util_put32(unsigned char *p, uint32_t v);
void util_put64(unsigned char *p, uint64_t v);
uint16_t util_get16(const unsigned char *p);
uint32_t util_get32(const unsigned char *p);
uint64_t util_get64(const unsigned char *p);

/* Start a thread running fn(arg) with a stack of `stack_size` bytes: joinable
 * into *joinable, or detached when `joinable` is NULL. 0 or a negative errno. */
int util_thread_start(pthread_t *joinable, void *(*fn)(void *), void *arg, size_t stack_size);
/* From now on, every thread util_thread_start() starts first touches `bytes` of its stack
 * (less than half of it), so that those pages are there, and locked under mlockall(), before
 * it does any work: `serve --swap`, whose threads must not wait for memory while they serve
 * a swap-out. Call before other threads start. */
void util_thread_prefault_stack(size_t bytes);

/* Set SO_RCVTIMEO / SO_SNDTIMEO in seconds (0: no timeout). */
int util_set_timeouts(int fd, int receive_seconds, int send_seconds);

/* The directory that holds the sockets, the one place `serve`, `status`,
 * `attr` and `make run` agree on: $XDG_RUNTIME_DIR/uzram; without
 * XDG_RUNTIME_DIR (unset or empty), /run/uzram for root (as systemd
 * services have it), else /run/user/UID/uzram when that user directory
 * exists, else /tmp/uzram-UID (serve checks that it is this user's alone). */
int util_runtime_dir(char *buf, size_t size);
/* Root under sudo, without XDG_RUNTIME_DIR (sudo drops it): the runtime directory of the user
 * who ran sudo (/run/user/SUDO_UID/uzram), where `sudo uzram attach NAME` finds that user's
 * server. 0, or -ENOENT when this is not root under sudo. The clients trust that user's
 * sockets as their own then (util_private_dir). */
int util_sudo_runtime_dir(char *buf, size_t size);

/* Whether process `pid` runs: a zombie does not (a server killed under memory pressure may
 * stay one while its parent cannot run; its successor must not wait for that). The engine
 * has the same check for a state's owner (lib/state/state.c's process_alive, which uzram_state_info
 * reports as owner_alive): the program reaches the engine only through uzram.h, and a public
 * uzram_ function for a /proc check is not the engine's job; change both together. */
bool util_process_alive(pid_t pid);

/* Create `path` (one level) with mode 0700 if it does not exist. */
int util_make_dir(const char *path);

/* true for names made of [A-Za-z0-9._-], 1..64 characters, not "." or "..",
 * not starting with '-'. */
#define UTIL_NAME_MAX 64
bool util_valid_name(const char *name);

/* Sizes the way util-linux zramctl prints them: 0B, 512B, 4K, 1.5M, 2G. */
void util_human_size(uint64_t bytes, char *buf, size_t size);
/* Write `text` to `out` as a JSON string, quotes included. */
void util_json_string(FILE *out, const char *text);

/* "EBUSY" for EBUSY (positive errno), "E<n>" for ones not in the table. */
const char *util_errno_name(int err, char *buf, size_t size);
/* Inverse of util_errno_name for the names the table knows; 0 if unknown. */
int util_errno_from_name(const char *name);

/* "its page table takes 256M (16 bytes per 4 KiB page), and at most 1/4 of this machine's
 * 24G may go to one": what a device of `disksize` bytes costs besides its data, for the
 * messages that refuse one (uzram_create's -E2BIG). */
void util_table_figures(uint64_t disksize, char *text, size_t size);

/* Read from `fd` until the peer closes, by `deadline_ms` (CLOCK_MONOTONIC), at most `max`
 * bytes: 0 with *out (malloc'd, NUL-terminated; NULL when nothing came) and *length;
 * -EFBIG when more than `max` bytes came, -ETIMEDOUT, -ENOMEM, or -errno of recv. */
int util_read_to_end(int fd, size_t max, uint64_t deadline_ms, char **out, size_t *length);

/* Why somebody else than this user (or root; under sudo, the user who ran it) could change
 * what is in `dir` (create, replace or remove its entries), or NULL when nobody can: it belongs
 * to one of them and is writable by neither group nor others. Sockets found there are
 * trusted only then. */
const char *util_private_dir(const char *dir);

/* Whether sockets in `dir` can only be this user's (or root's): 0 when it is private
 * (util_private_dir), else -EPERM with a line saying why not in `message`. */
int util_trusted_dir(const char *dir, char *message, size_t message_size);

/* Whether the socket `path` is one only this user (or root) can have put there: its
 * directory private (util_trusted_dir), the socket this user's or root's. 0, or -EPERM with
 * a line saying why not in `message`. */
int util_trusted_socket(const char *path, char *message, size_t message_size);

#endif
