/* limits.h - the numbers of the NBD server behind `uzram serve`, in one place: block sizes,
 * buffers, batching, threads, deadlines and bounds on what clients may hold. */
#ifndef UZRAM_NBD_LIMITS_H
#define UZRAM_NBD_LIMITS_H

/* Block size constraints advertised in NBD_INFO_BLOCK_SIZE. The engine needs
 * 512-byte alignment, so that is the minimum; 4096 is its page size. */
#define NBD_SERVER_MIN_BLOCK 512u
#define NBD_SERVER_PREFERRED_BLOCK 4096u
#define NBD_SERVER_MAX_PAYLOAD (32u << 20)
/* A WRITE larger than the maximum but at most this is read and thrown away
 * (EINVAL); a larger one cannot be skipped cheaply, so the client is dropped. */
#define NBD_SERVER_WRITE_DISCARD_CAP (64u << 20)
/* Each connection reads requests into an input buffer of this size with one
 * recv() that takes whatever the client has sent, so a pipelining client's
 * headers and small WRITE payloads cost one system call for many requests. */
#define NBD_SERVER_INPUT_BUFFER (256u << 10)
/* WRITE payloads up to this size are gathered in the input buffer; the rest of
 * a larger one is received straight into the request's buffer. */
#define NBD_SERVER_SMALL_PAYLOAD (64u << 10)
/* Every worker keeps a buffer this large for WRITE payloads and READ data;
 * only larger requests allocate. */
#define NBD_SERVER_WORKER_BUFFER (128u << 10)
/* Short replies (no data) are held back while more requests are already
 * buffered, and go out together: one send, one wake-up of the client, for up
 * to this many replies (so at most one fewer is ever held). Small enough that a pipelining client
 * keeps getting completions (and sending new requests) while the server works. */
#define NBD_SERVER_REPLY_BATCH 4u
#define NBD_SERVER_HELD_REPLY_MAX 256u
/* An idle worker is woken (or a helper started) for a buffered request only
 * when the connection's requests take at least this long on average. A hand-off costs both threads
 * several microseconds of wake-up and cache misses, and where the client
 * shares the cores (fio on 2 CPUs) it also takes CPU from the client: for
 * 4 KiB lz4 writes (~6 us each) a second worker made one connection ~15%
 * slower, not faster. zstd, large requests and slow reads spread at once;
 * cheap requests scale over connections instead (CAN_MULTI_CONN). */
#define NBD_SERVER_HANDOFF_WORTH_NS 20000u
/* Most worker threads per connection (--threads). */
#define NBD_SERVER_MAX_THREADS 256u
/* Helper workers (beyond each connection's first) over all connections at
 * once: this many per --threads, and at most NBD_SERVER_MAX_HELPERS. */
#define NBD_SERVER_HELPERS_PER_THREAD 4u
#define NBD_SERVER_MAX_HELPERS 1024u
/* A connection with no request for this long gives its helpers and buffers
 * back: an idle connection is one sleeping thread. Receives wake up this
 * often inside a request to check its deadline. */
#define NBD_SERVER_IDLE_MS 1000u
/* Request buffers larger than a worker's own, over all connections. WRITE
 * payloads are charged as their bytes arrive, up to this much per receive. */
#define NBD_SERVER_BUFFER_BUDGET (1ull << 30)
#define NBD_SERVER_RECEIVE_STEP (1u << 20)
/* Default of the client deadlines (seconds; the environment variable
 * UZRAM_SERVE_TIMEOUT sets another, for tests): the whole handshake, sends
 * included; a started request, from the first wait for its bytes to its
 * last byte; a reply, from the socket first refusing bytes to its last. */
#define NBD_SERVER_TIMEOUT 30
/* On SIGINT/SIGTERM, clients get this long to take the replies to requests in
 * flight; then the connections left are shut down both ways. */
#define NBD_SERVER_STOP_GRACE 5
/* At most this many descriptors in one BLOCK_STATUS reply. */
#define NBD_SERVER_MAX_EXTENTS 1024u
/* Zero runs at least this long become OFFSET_HOLE chunks in structured reads. */
#define NBD_SERVER_HOLE_MIN (32u << 10)
/* More connections than this are refused at accept time. */
#define NBD_SERVER_MAX_CONNECTIONS 1000u
/* Stack of every connection and worker thread: the engine keeps page
 * buffers on it (lzo needs over 128 KiB), and sanitizers make frames larger.
 * Only touched pages cost memory. */
#define NBD_SERVER_THREAD_STACK (2u << 20)

/* Most devices one server serves at once (the command line's, the configuration's and
 * hot-added ones). */
#define NBD_SERVER_MAX_EXPORTS 256u
/* Export names are device names (util_valid_name()): at most this long. */
#define NBD_EXPORT_NAME_MAX 64u

#endif
