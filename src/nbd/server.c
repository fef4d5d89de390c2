/* server.c - sockets, threads and shutdown of the NBD server behind `uzram serve`.
 * Listens on Unix/TCP; each client gets a thread of its own (and helpers while it is busy, see
 * transmission.c). Whoever starts it serves the control socket beside it (control/service.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "nbd/banner.h"
#include "nbd/exports.h"
#include "nbd/handshake.h"
#include "nbd/log.h"
#include "nbd/server.h"
#include "nbd/session.h"
#include "nbd/transmission.h"
#include "attach/attach.h"
#include "common/systemd.h"
#include "common/clock.h"
#include "common/text.h"
#include "common/threads.h"

/* Most listening NBD sockets: one Unix and one TCP of its own, or what a service manager
 * hands over. */
#define LISTENERS_MAX (SYSTEMD_MAX_LISTEN_FDS + 2)

struct listener {
    int fd;
    bool tcp;
    const char *owned_path; /* bound here: removed at exit; NULL for handed-over sockets */
};

struct nbd_server {
    const char *name;
    const struct nbd_server_options *options;
    struct nbd_exports *exports;                /* the devices (exports.c) */
    char unix_path[PATH_MAX], tcp_address[300]; /* for `uzram status`; "" when none */
    struct nbd_transmission_settings transmission;
    unsigned timeout;    /* seconds: handshake, requests, replies */
    struct nbd_tls *tls; /* NULL: --tls off */

    struct listener listeners[LISTENERS_MAX];
    size_t listener_count;
    int ctl_fd, signal_fd; /* -1: none */
    int restart_fd;        /* an eventfd: nbd_server_restart_soon() wakes the accept loop */
    bool restarting;       /* the loop ended for a planned restart: the sockets are kept */
    const char *ctl_owned; /* the control socket's path, when bound here */
    bool devices_taken;    /* the exports hold the options' devices (or destroyed them) */

    /* Live connections, so shutdown can wake them and wait for them. */
    pthread_mutex_t connections_lock;
    pthread_cond_t connections_gone;
    struct client *clients;
    unsigned connection_count;
    unsigned next_id;
};

struct nbd_exports *nbd_server_exports(struct nbd_server *server)
{
    return server->exports;
}

const char *nbd_server_name(struct nbd_server *server)
{
    return server->name;
}

const char *nbd_server_unix_path(struct nbd_server *server)
{
    return server->unix_path;
}

const char *nbd_server_tcp_address(struct nbd_server *server)
{
    return server->tcp_address;
}

int nbd_server_uri(struct nbd_server *server, const char *export_name, char *uri, size_t size)
{
    int rc = nbd_connect_uri(server->options, server->unix_path, server->tcp_address, export_name,
                             uri, size);
    if (rc < 0)
        snprintf(uri, size, "-"); /* paths too long for one */
    return rc;
}

unsigned nbd_server_clients(struct nbd_server *server)
{
    pthread_mutex_lock(&server->connections_lock);
    unsigned count = server->connection_count;
    pthread_mutex_unlock(&server->connections_lock);
    return count;
}

/* ------------------------------------------------------------------------
 * Connections
 * ---------------------------------------------------------------------- */

/* A connected client as the listener sees it: its session (filled by the
 * handshake) and its place in the list. What the transmission phase keeps
 * per connection is private to transmission.c. */
struct client {
    struct nbd_session session;
    struct nbd_server *server;
    struct client *prev, *next;
};

static void client_free(struct client *client)
{
    struct nbd_server *server = client->server;
    pthread_mutex_lock(&server->connections_lock);
    if (client->prev)
        client->prev->next = client->next;
    else
        server->clients = client->next;
    if (client->next)
        client->next->prev = client->prev;
    server->connection_count--;
    pthread_cond_broadcast(&server->connections_gone);
    pthread_mutex_unlock(&server->connections_lock);
    /* Closed only after leaving the list, so shutdown never sees a reused fd. */
    nbd_tls_end(&client->session);
    close(client->session.fd);
    free(client);
}

static void *connection_main(void *arg)
{
    struct client *client = arg;
    struct nbd_server *server = client->server;
    struct nbd_session *s = &client->session;

    /* A client must not hold a thread forever without finishing the
     * handshake: the deadline covers every receive and every send of it. */
    s->handshake_deadline_ms = util_now_ms() + server->timeout * 1000ull;
    int rc = nbd_handshake(s, server->exports);
    if (rc == -ETIMEDOUT)
        nbd_log(s, "handshake not finished within %u s; closing", server->timeout);
    if (rc == 1) {
        struct nbd_transmission_settings settings = server->transmission;
        settings.read_only = s->export->read_only;
        nbd_transmission(s, &settings);
        nbd_export_put(server->exports, s->export, true);
    }
    client_free(client);
    return NULL;
}

static void accept_client(struct nbd_server *server, int listener, bool tcp)
{
    int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return; /* EAGAIN, ECONNABORTED, EMFILE: try again on the next wakeup */

    pthread_mutex_lock(&server->connections_lock);
    unsigned id = ++server->next_id;
    bool full = server->connection_count >= NBD_SERVER_MAX_CONNECTIONS;
    pthread_mutex_unlock(&server->connections_lock);
    if (full) {
        fprintf(stderr, "uzram: client %u refused: %u clients already connected\n", id,
                NBD_SERVER_MAX_CONNECTIONS);
        close(fd);
        return;
    }
    if (tcp) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }

    struct client *client = calloc(1, sizeof *client);
    if (client == NULL) {
        close(fd);
        return;
    }
    client->session.fd = fd;
    client->session.id = id;
    client->session.tls_config = server->tls;
    client->server = server;

    pthread_mutex_lock(&server->connections_lock);
    client->next = server->clients;
    if (client->next)
        client->next->prev = client;
    server->clients = client;
    server->connection_count++;
    pthread_mutex_unlock(&server->connections_lock);

    if (util_thread_start(NULL, connection_main, client, NBD_SERVER_THREAD_STACK) < 0) {
        fprintf(stderr, "uzram: client %u refused: cannot start a thread\n", id);
        client_free(client);
    }
}

/* ------------------------------------------------------------------------
 * Listening sockets
 * ---------------------------------------------------------------------- */

/* Bind a Unix socket at `path`. A socket file nobody listens on is stale and
 * replaced; a live one means another server owns the name. */
static int listen_unix(const char *path, unsigned mode, long gid)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof address.sun_path) {
        fprintf(stderr,
                "uzram: socket path %s is too long (at most %zu bytes); choose a shorter --unix\n",
                path, sizeof address.sun_path - 1);
        return -1;
    }
    strcpy(address.sun_path, path);

    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            fprintf(stderr,
                    "uzram: %s exists and is not a socket; remove it or choose --name/--unix\n",
                    path);
            return -1;
        }
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&address, sizeof address) == 0) {
            close(probe);
            fprintf(stderr,
                    "uzram: %s is in use by another server; stop it or choose --name/--unix\n",
                    path);
            return -1;
        }
        if (probe >= 0)
            close(probe);
        unlink(path);
    }

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "uzram: socket: %s\n", strerror(errno));
        return -1;
    }
    /* The umask closes the window between bind() and chmod(). */
    mode_t old_mask = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&address, sizeof address);
    umask(old_mask);
    if (rc < 0) {
        int err = errno;
        if (err == EACCES || err == EPERM || err == EROFS)
            fprintf(stderr,
                    "uzram: cannot bind %s: %s; set XDG_RUNTIME_DIR to a directory of your own "
                    "or use --unix PATH\n",
                    path, strerror(err));
        else
            fprintf(stderr, "uzram: cannot bind %s: %s\n", path, strerror(err));
        close(fd);
        return -1;
    }
    if (chmod(path, mode) < 0 || (gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) < 0)) {
        fprintf(stderr, "uzram: cannot set mode/group of %s: %s\n", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    if (listen(fd, 128) < 0) {
        fprintf(stderr, "uzram: cannot listen on %s: %s\n", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    return fd;
}

static void describe_tcp(int fd, char *shown, size_t shown_size, enum nbd_tls_mode tls);

/* "[ADDR:]PORT", ADDR may be "[v6]". Fills `shown` with "ADDR:PORT" as bound. */
static int listen_tcp(const char *spec, char *shown, size_t shown_size, enum nbd_tls_mode tls)
{
    char host[256] = "127.0.0.1";
    const char *port = spec;
    const char *colon = strrchr(spec, ':');

    if (colon != NULL) {
        size_t length = (size_t)(colon - spec);
        const char *start = spec;
        if (length >= 2 && spec[0] == '[' && spec[length - 1] == ']') {
            start++;
            length -= 2;
        }
        if (length == 0 || length >= sizeof host) {
            fprintf(stderr, "uzram: bad --tcp address '%s'; use [ADDR:]PORT\n", spec);
            return -1;
        }
        memcpy(host, start, length);
        host[length] = '\0';
        port = colon + 1;
    }
    char *end;
    long number = strtol(port, &end, 10);
    if (*port == '\0' || *end != '\0' || number < 0 || number > 65535) {
        fprintf(stderr, "uzram: bad --tcp port '%s'; use [ADDR:]PORT with PORT 0-65535\n", port);
        return -1;
    }

    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *found;
    int gai = getaddrinfo(host, port, &hints, &found);
    if (gai != 0) {
        fprintf(stderr, "uzram: cannot resolve --tcp address '%s': %s\n", host, gai_strerror(gai));
        return -1;
    }
    int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) < 0 || listen(fd, 128) < 0) {
        fprintf(stderr, "uzram: cannot listen on tcp %s: %s; choose another --tcp port\n", spec,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(found);
        return -1;
    }
    freeaddrinfo(found);
    describe_tcp(fd, shown, shown_size, tls);
    return fd;
}

/* "ADDR:PORT" of a listening TCP socket into `shown`; a warning when it is not on loopback
 * and clients may connect without TLS. */
static void describe_tcp(int fd, char *shown, size_t shown_size, enum nbd_tls_mode tls)
{
    struct sockaddr_storage bound = {0};
    socklen_t bound_length = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &bound_length);
    char address[INET6_ADDRSTRLEN] = "?";
    unsigned bound_port = 0;
    bool loopback = false;
    if (bound.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&bound;
        inet_ntop(AF_INET, &in->sin_addr, address, sizeof address);
        bound_port = ntohs(in->sin_port);
        loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        snprintf(shown, shown_size, "%s:%u", address, bound_port);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&bound;
        inet_ntop(AF_INET6, &in6->sin6_addr, address, sizeof address);
        bound_port = ntohs(in6->sin6_port);
        /* ::1, or an IPv4 loopback address written as IPv6 (::ffff:127.x.y.z). */
        loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
                   (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127);
        snprintf(shown, shown_size, "[%s]:%u", address, bound_port);
    }
    if (!loopback && tls == NBD_TLS_OFF)
        fprintf(stderr,
                "uzram: warning: listening on %s; NBD has no authentication, anyone who can "
                "reach this address can read and write the device (--tls require prevents "
                "that)\n",
                shown);
    else if (!loopback && tls == NBD_TLS_ON)
        fprintf(stderr,
                "uzram: warning: listening on %s with --tls on: clients that do not start TLS "
                "are served too, unauthenticated and in the clear (--tls require refuses "
                "them)\n",
                shown);
}

/* ------------------------------------------------------------------------
 * Running
 * ---------------------------------------------------------------------- */

/* Wait (with connections_lock held) until every connection is gone or
 * CLOCK_MONOTONIC passes `deadline`; true when they are all gone. */
static bool wait_connections_gone(struct nbd_server *server, const struct timespec *deadline)
{
    while (server->connection_count > 0)
        if (pthread_cond_timedwait(&server->connections_gone, &server->connections_lock,
                                   deadline) == ETIMEDOUT)
            return server->connection_count == 0;
    return true;
}

static void stop_connections(struct nbd_server *server)
{
    pthread_mutex_lock(&server->connections_lock);
    /* SHUT_RD wakes the worker waiting in recv() with end of file, so the
     * connection stops reading; replies to requests in flight still go out. */
    for (struct client *c = server->clients; c; c = c->next)
        shutdown(c->session.fd, SHUT_RD);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += NBD_SERVER_STOP_GRACE;
    if (!wait_connections_gone(server, &deadline)) {
        /* Clients that do not take their replies must not hold the exit for
         * the whole send timeout: a full shutdown fails their pending sends. */
        if (!nbd_log_quiet)
            fprintf(stderr,
                    "uzram: %u client(s) not taking their replies after %d s; closing them\n",
                    server->connection_count, NBD_SERVER_STOP_GRACE);
        for (struct client *c = server->clients; c; c = c->next)
            shutdown(c->session.fd, SHUT_RDWR);
        while (server->connection_count > 0)
            pthread_cond_wait(&server->connections_gone, &server->connections_lock);
    }
    pthread_mutex_unlock(&server->connections_lock);
}

/* The stop line: the data lives only in this process, so say what goes. */
static void log_stop(struct nbd_server *server, uint32_t signo)
{
    char human[16], devices[64] = "";
    size_t count;
    uint64_t data = nbd_exports_data(server->exports, &count);
    util_human_size(data, human, sizeof human);
    if (count != 1)
        snprintf(devices, sizeof devices, " in %zu devices", count);
    unsigned clients = nbd_server_clients(server);
    fprintf(stderr,
            "uzram: %s received: stopping; %s %llu bytes of data (%s)%s with %u client%s "
            "connected\n",
            signo == SIGINT ? "SIGINT" : "SIGTERM",
            server->options->persistent ? "keeping in the states (--persist)" : "discarding",
            (unsigned long long)data, human, devices, clients, clients == 1 ? "" : "s");
}

/* ------------------------------------------------------------------------
 * What the log says about the devices
 * ---------------------------------------------------------------------- */

/* The library counts, the server tells: the backing store full, its writes or
 * reads failing, each said once when it starts and once when it ends, never
 * per page. */
static void say_backing(struct uzram *dev, const char *name, const char *what)
{
    char path[PATH_MAX];
    if (uzram_get_backing_dev(dev, path, sizeof path) < 0)
        snprintf(path, sizeof path, "(?)");
    fprintf(stderr, "uzram: %s: backing store %s: %s\n", name, path, what);
}

/* Called for every device once a second (nbd_exports_watch()). */
static void watch_device(struct uzram *dev, const char *name, struct nbd_device_watch *watch)
{
    struct uzram_stats now;
    if (uzram_get_stats(dev, &now, sizeof now) < 0)
        return;
    struct uzram_stats *seen = &watch->seen;
    bool wrote = now.bd_writes > seen->bd_writes;
    if (now.bd_nospace > seen->bd_nospace && !watch->full) {
        say_backing(dev, name,
                    "full (or its file system is): pages stay in memory, and writes "
                    "past mem_limit fail; see bd_nospace");
        watch->full = true;
    } else if (watch->full && wrote && now.bd_nospace == seen->bd_nospace) {
        say_backing(dev, name, "has room again");
        watch->full = false;
    }
    if (now.bd_write_errors > seen->bd_write_errors && !watch->write_failing) {
        say_backing(dev, name, "writes fail: pages stay in memory; see bd_write_errors");
        watch->write_failing = true;
    } else if (watch->write_failing && wrote && now.bd_write_errors == seen->bd_write_errors) {
        say_backing(dev, name, "writes work again");
        watch->write_failing = false;
    }
    if (now.bd_checksum_errors > 0 && !watch->corrupt) {
        say_backing(dev, name,
                    "holds other bytes than were written (a disk, file system or program "
                    "changed it): those reads fail with EIO, never return them; see "
                    "bd_checksum_errors");
        watch->corrupt = true;
    } else if (now.bd_checksum_errors == 0) {
        watch->corrupt = false; /* a reset: say it again if it happens again */
    }
    time_t clock = time(NULL);
    if (now.failed_reads > seen->failed_reads && clock - watch->read_failure_said >= 60) {
        fprintf(stderr,
                "uzram: %s: %llu read(s) failed with EIO (failed_reads %llu): a backing store "
                "that cannot be read?\n",
                name, (unsigned long long)(now.failed_reads - seen->failed_reads),
                (unsigned long long)now.failed_reads);
        watch->read_failure_said = clock;
        seen->failed_reads = now.failed_reads;
    } else if (now.failed_reads < seen->failed_reads) {
        seen->failed_reads = now.failed_reads; /* a reset */
    }
    if (now.state_lock_timeouts > seen->state_lock_timeouts && seen->state_lock_timeouts == 0)
        fprintf(stderr,
                "uzram: %s: a lock word in its state file stayed held past its deadline "
                "(state_lock_timeouts %llu): what needed it failed with EIO; another process "
                "writes the state, or it is damaged: stop this server, and the next one takes "
                "the state over afresh\n",
                name, (unsigned long long)now.state_lock_timeouts);
    seen->state_lock_timeouts = now.state_lock_timeouts;
    seen->bd_writes = now.bd_writes;
    seen->bd_nospace = now.bd_nospace;
    seen->bd_write_errors = now.bd_write_errors;
}

/* The devices of the command line (or configuration) in the server's list: all or none. */
static int add_devices(struct nbd_server *server, const struct nbd_server_options *options,
                       const char *runtime_dir, unsigned threads)
{
    int rc = nbd_exports_create(options->server_mem_limit, options->make_device,
                                options->make_device_context, options->quiet, &server->exports);
    if (rc < 0) {
        fprintf(stderr, "uzram: %s\n", strerror(-rc));
        for (size_t i = 0; i < options->device_count; i++)
            uzram_destroy(options->devices[i].dev);
        return -1;
    }
    struct attach_settings attach = {
        .unix_path = server->unix_path[0] ? server->unix_path : NULL,
        .runtime_dir = runtime_dir,
        .threads = threads,
        .swap = options->swap,
    };
    nbd_exports_set_attach(server->exports, &attach);
    for (size_t i = 0; i < options->device_count; i++) {
        char message[256];
        rc = nbd_exports_add(server->exports, &options->devices[i], message, sizeof message);
        if (rc < 0) {
            fprintf(stderr, "uzram: %s\n", message);
            for (size_t j = i; j < options->device_count; j++)
                uzram_destroy(options->devices[j].dev);
            return -1;
        }
    }
    return 0;
}

/* malloc's defaults keep what a storm of clients took: an arena per thread (8 per CPU),
 * each keeping its free top, and thresholds that rise with the largest buffer freed, after
 * which buffers of large requests stay in the arenas. One arena, because malloc_trim(), which
 * uzram_compact() calls, shrinks the top of the main arena only: the tops of the others keep
 * what small frees merged into them (2 to 6 MiB after tests/integration/giveback.sh's storm
 * with 4 arenas, 1.9 MiB with one). Small buffers stay per thread in malloc's tcache; buffers
 * of requests up to 32 MiB (the largest) in the arena, and free tops over 256 KiB given back
 * at once. */
static void bound_malloc(void)
{
#ifdef __GLIBC__
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 10);
#endif
}

int nbd_server_control_fd(struct nbd_server *server)
{
    return server->ctl_fd;
}

/* Signals are taken synchronously through a signalfd in the accept loop; every thread
 * created later inherits the blocked mask. SIGHUP does not stop the server: closing the
 * terminal it was started from must not discard the disk. */
static int take_signals(struct nbd_server *server)
{
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    server->signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);
    if (server->signal_fd < 0) {
        fprintf(stderr, "uzram: signalfd: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* The NBD sockets a service manager handed over (socket activation), or those of --unix and
 * --tcp; then the control socket. */
static int listen_all(struct nbd_server *server, const struct nbd_server_options *options)
{
    if (options->inherited_count > 0) {
        for (size_t i = 0; i < options->inherited_count && i < LISTENERS_MAX; i++) {
            int fd = options->inherited[i];
            struct sockaddr_storage address = {0};
            socklen_t length = sizeof address;
            getsockname(fd, (struct sockaddr *)&address, &length);
            bool tcp = address.ss_family != AF_UNIX;
            /* Sockets of our own from before a planned restart: their names are ours. */
            const char *owned = options->inherited_owned && !tcp ? server->unix_path : NULL;
            server->listeners[server->listener_count++] = (struct listener){fd, tcp, owned};
            if (tcp && server->tcp_address[0] == '\0')
                describe_tcp(fd, server->tcp_address, sizeof server->tcp_address,
                             options->tls.mode);
            if (!tcp && server->unix_path[0] == '\0')
                snprintf(server->unix_path, sizeof server->unix_path, "%.*s",
                         (int)sizeof((struct sockaddr_un *)0)->sun_path,
                         ((struct sockaddr_un *)&address)->sun_path);
        }
    } else {
        if (options->unix_path) {
            int fd = listen_unix(options->unix_path, options->socket_mode, options->socket_gid);
            if (fd < 0)
                return -1;
            server->listeners[server->listener_count++] =
                (struct listener){fd, false, options->unix_path};
            snprintf(server->unix_path, sizeof server->unix_path, "%s", options->unix_path);
        }
        if (options->tcp) {
            int fd = listen_tcp(options->tcp, server->tcp_address, sizeof server->tcp_address,
                                options->tls.mode);
            if (fd < 0)
                return -1;
            server->listeners[server->listener_count++] = (struct listener){fd, true, NULL};
        }
    }
    if (options->inherited_ctl >= 0) {
        server->ctl_fd = options->inherited_ctl;
        server->ctl_owned = options->inherited_owned ? options->ctl_path : NULL;
    } else {
        server->ctl_fd = listen_unix(options->ctl_path, 0600, -1);
        if (server->ctl_fd < 0)
            return -1;
        server->ctl_owned = options->ctl_path;
    }
    return 0;
}

/* Stop accepting and remove the names, so that no new client arrives while the connections
 * drain. Names a service manager made stay: it listens on them again. */
static void close_listeners(struct nbd_server *server)
{
    for (size_t i = 0; i < server->listener_count; i++) {
        close(server->listeners[i].fd);
        if (server->listeners[i].owned_path)
            unlink(server->listeners[i].owned_path);
    }
    server->listener_count = 0;
}

int nbd_server_create(const struct nbd_server_options *options, struct nbd_server **out)
{
    *out = NULL;
    struct nbd_server *server = calloc(1, sizeof *server);
    if (server == NULL) {
        fputs("uzram: out of memory\n", stderr);
        for (size_t i = 0; i < options->device_count; i++)
            uzram_destroy(options->devices[i].dev);
        return -1;
    }
    server->name = options->name;
    server->options = options;
    server->timeout = options->timeout ? options->timeout : NBD_SERVER_TIMEOUT;
    server->ctl_fd = server->signal_fd = -1;
    server->restart_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    unsigned threads = options->threads < 1 ? 1 : options->threads;
    unsigned helpers = threads * NBD_SERVER_HELPERS_PER_THREAD;
    server->transmission = (struct nbd_transmission_settings){
        .threads = threads,
        /* Swap: no thread is started while a swap-out waits (its stack, the kernel's task). */
        .helpers = options->swap                      ? 0
                   : helpers < NBD_SERVER_MAX_HELPERS ? helpers
                                                      : NBD_SERVER_MAX_HELPERS,
        .timeout = server->timeout,
        .handoff_worth_ns = NBD_SERVER_HANDOFF_WORTH_NS,
    };
    nbd_log_quiet = options->quiet;
    if (!options->swap) /* swap_safety_enable() set malloc up its own way */
        bound_malloc();
    pthread_mutex_init(&server->connections_lock, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&server->connections_gone, &monotonic);
    pthread_condattr_destroy(&monotonic);

    /* Credentials that cannot be loaded stop the server before it listens. */
    if (server->restart_fd < 0) {
        fprintf(stderr, "uzram: eventfd: %s\n", strerror(errno));
        nbd_server_destroy(server);
        return -1;
    }
    if (take_signals(server) < 0 || nbd_tls_create(&options->tls, &server->tls) < 0 ||
        listen_all(server, options) < 0) {
        nbd_server_destroy(server);
        return -1;
    }
    /* `uzram attach` puts a device's file beside the control socket. */
    char runtime_dir[PATH_MAX];
    snprintf(runtime_dir, sizeof runtime_dir, "%s", options->ctl_path);
    char *slash = strrchr(runtime_dir, '/');
    if (slash == NULL)
        snprintf(runtime_dir, sizeof runtime_dir, ".");
    else
        slash[slash == runtime_dir] = '\0';
    server->devices_taken = true; /* add_devices() takes them or destroys them */
    if (add_devices(server, options, runtime_dir, threads) < 0) {
        nbd_server_destroy(server);
        return -1;
    }
    *out = server;
    return 0;
}

/* The banner, and READY=1 for a service manager waiting for us (systemd's Type=notify): every
 * socket listens, so what needs the device may start now. */
static void say_ready(struct nbd_server *server)
{
    char devices[1024], names[1024];
    size_t device_count = nbd_exports_describe(server->exports, true, devices, sizeof devices);
    nbd_exports_describe(server->exports, false, names, sizeof names);
    if (!server->options->quiet)
        nbd_banner_print(server->options,
                         &(struct nbd_banner){devices, device_count, server->unix_path,
                                              server->tcp_address,
                                              server->tls ? nbd_tls_kind(server->tls) : NULL});
    char state[1100];
    if (device_count == 1)
        snprintf(state, sizeof state, "READY=1\nSTATUS=serving %s", names);
    else
        snprintf(state, sizeof state, "READY=1\nSTATUS=serving %zu devices: %s", device_count,
                 names);
    int rc = systemd_notify(state);
    if (rc < 0)
        fprintf(stderr, "uzram: cannot tell the service manager we are ready: %s\n", strerror(-rc));
}

/* A stop signal came: true, after saying so. SIGHUP: false. */
static bool stop_signal(struct nbd_server *server)
{
    struct signalfd_siginfo info;
    if (read(server->signal_fd, &info, sizeof info) != (ssize_t)sizeof info)
        return false;
    if (info.ssi_signo == SIGHUP) {
        fprintf(stderr, "uzram: SIGHUP received; ignored: the disk lives in this "
                        "process, SIGTERM or SIGINT stops it\n");
        return false;
    }
    log_stop(server, info.ssi_signo);
    systemd_notify("STOPPING=1\nSTATUS=finishing requests in flight");
    return true;
}

int nbd_server_serve(struct nbd_server *server)
{
    int status = 1;
    say_ready(server);
    for (;;) {
        struct pollfd fds[2 + LISTENERS_MAX] = {{server->signal_fd, POLLIN, 0},
                                                {server->restart_fd, POLLIN, 0}};
        for (size_t i = 0; i < server->listener_count; i++)
            fds[2 + i] = (struct pollfd){server->listeners[i].fd, POLLIN, 0};
        nbd_exports_watch(server->exports, watch_device);
        if (poll(fds, 2 + server->listener_count, 1000) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "uzram: poll: %s\n", strerror(errno));
            break;
        }
        if (fds[0].revents && stop_signal(server)) {
            status = 0;
            break;
        }
        if (fds[1].revents) {
            /* Planned restart: no new client is accepted; those connecting now wait in the
             * sockets' backlog for the next process, which gets the sockets. */
            systemd_notify("RELOADING=1\nSTATUS=restarting: finishing requests in flight");
            server->restarting = true;
            return 0;
        }
        for (size_t i = 0; i < server->listener_count; i++)
            if (fds[2 + i].revents & POLLIN)
                accept_client(server, server->listeners[i].fd, server->listeners[i].tcp);
    }
    close_listeners(server);
    return status;
}

void nbd_server_restart_soon(struct nbd_server *server)
{
    uint64_t one = 1;
    if (write(server->restart_fd, &one, sizeof one) < 0)
        return; /* the counter is already set: the loop wakes anyway */
}

bool nbd_server_restarting(const struct nbd_server *server)
{
    return server->restarting;
}

size_t nbd_server_hand_over(struct nbd_server *server, int *fds, const char **names, size_t max)
{
    size_t count = 0;
    for (size_t i = 0; i < server->listener_count && count < max; i++, count++) {
        fds[count] = server->listeners[i].fd;
        names[count] = "nbd";
    }
    if (server->ctl_fd >= 0 && count < max) {
        fds[count] = server->ctl_fd;
        names[count++] = "control";
    }
    /* They are the next process's now: not closed, their names not removed. */
    server->listener_count = 0;
    server->ctl_fd = -1;
    return count;
}

/* Before a device goes: a device whose state outlives the process is left clean (quiesced). */
static void quiesce_device(struct uzram *dev, const char *name, struct nbd_device_watch *watch)
{
    (void)watch;
    size_t size;
    if (uzram_state_area(dev, &size) == NULL)
        return;
    int rc = uzram_state_quiesce(dev);
    if (rc < 0)
        fprintf(stderr,
                "uzram: %s: cannot leave the state clean: %s (the next server recovers it "
                "as after a crash)\n",
                name, strerror(-rc));
}

void nbd_server_destroy(struct nbd_server *server)
{
    if (server == NULL)
        return;
    close_listeners(server); /* when nbd_server_serve() did not run */
    if (server->ctl_fd >= 0) {
        close(server->ctl_fd);
        if (server->ctl_owned)
            unlink(server->ctl_owned);
    }
    /* Before the connections end: nbd-client -d still talks to us. */
    if (server->exports != NULL)
        nbd_exports_detach_all(server->exports, server->restarting);
    stop_connections(server);
    if (server->exports != NULL)
        nbd_exports_watch(server->exports, quiesce_device);

    if (server->signal_fd >= 0)
        close(server->signal_fd);
    if (server->restart_fd >= 0)
        close(server->restart_fd);
    nbd_tls_free(server->tls);
    pthread_mutex_destroy(&server->connections_lock);
    pthread_cond_destroy(&server->connections_gone);
    nbd_exports_destroy(server->exports);
    for (size_t i = 0; !server->devices_taken && i < server->options->device_count; i++)
        uzram_destroy(server->options->devices[i].dev);
    free(server);
}
