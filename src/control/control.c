/* control.c - the control socket of a server and its devices: a tiny line protocol, both ends.
 * Requests: "[device DEV] get NAME|set NAME VALUE|clients|stats|attach ...|detach", "devices",
 * "server", "hot-add SPEC", "hot-remove DEV"; replies "ok\n..." or "error E: msg". */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control/control.h"
#include "attach/attach.h"
#include "nbd/server.h"
#include "common/util.h"

#define REQUEST_MAX 4096
#define REPLY_MAX 8192
/* The client reads at most this much of a reply (the longest, `devices` of 256 devices, is
 * 17 KiB), within this long. */
#define CONTROL_REPLY_MAX (1u << 20)
unsigned long long control_reply_ms = 30000;

/* ------------------------------------------------------------------------
 * Server side
 * ---------------------------------------------------------------------- */

/* One control connection: its socket and the moment it must be done. */
struct peer {
    int fd;
    uint64_t deadline_ms; /* CLOCK_MONOTONIC: the request read and answered by then */
};

static void reply_error(const struct peer *peer, int err, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void reply_error(const struct peer *peer, int err, const char *format, ...)
{
    char message[512], name_buf[16], line[600];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    int n = snprintf(line, sizeof line, "error %s: %s\n",
                     util_errno_name(err, name_buf, sizeof name_buf), message);
    util_send_all_by(peer->fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1,
                     peer->deadline_ms);
}

static void reply_ok(const struct peer *peer, const char *body)
{
    struct iovec iov[2] = {{(void *)"ok\n", 3}, {(void *)body, strlen(body)}};
    util_send_iov_by(peer->fd, iov, 2, peer->deadline_ms);
}

/* Identity, then every counter of the library's list (UZRAM_STATS) as
 * "key value" lines: what `uzram status` shows. The server's shared memory limit and use
 * come with every device of it. */
static void handle_stats(const struct peer *peer, struct nbd_server *server,
                         const struct nbd_export *export)
{
    struct uzram_stats st;
    struct uzram_config config;
    struct uzram_group_stats group = {0};
    char body[REPLY_MAX], uri[REQUEST_MAX];
    nbd_server_uri(server, export->name, uri, sizeof uri);
    uzram_get_config(export->dev, &config);
    uzram_group_get_stats(nbd_server_group(server), &group);
    int rc = uzram_get_stats(export->dev, &st, sizeof st);
    if (rc < 0) {
        reply_error(peer, -rc, "cannot read statistics: %s", strerror(-rc));
        return;
    }
    int n = snprintf(body, sizeof body,
                     "name %s\nserver %s\nalgorithm %s\ndisksize %llu\nread_only %d\n"
                     "use_dedup %d\nclients %u\nsocket %s\ntcp %s\nuri %s\nserver_mem_limit %llu\n"
                     "server_mem_used %llu\nserver_mem_used_max %llu\n",
                     export->name, nbd_server_name(server), config.comp_algorithm,
                     (unsigned long long)config.disksize, export->read_only, config.use_dedup,
                     nbd_export_clients(server, export), nbd_server_unix_path(server),
                     nbd_server_tcp_address(server), uri, (unsigned long long)group.mem_limit,
                     (unsigned long long)group.mem_used, (unsigned long long)group.mem_used_max);
    size_t used = n < 0 ? sizeof body : (size_t)n;
    for (size_t i = 0; i < uzram_stat_count() && used < sizeof body; i++) {
        n = snprintf(body + used, sizeof body - used, "%s %llu\n", uzram_stat_name(i),
                     (unsigned long long)uzram_stat_value(&st, sizeof st, i));
        used = n < 0 ? sizeof body : used + (size_t)n;
    }
    /* The /dev node of `uzram attach`, and swap safety as this thread reads it back (a thread
     * started after `serve --swap` set it up, so the I/O flusher mark is the inherited one). */
    char device[BLOCKDEV_PATH_MAX];
    struct swap_safety safety;
    attachment_device(nbd_export_attachment(server, export), device, sizeof device);
    swap_safety_read(&safety);
    n = snprintf(body + used, sizeof body - used,
                 "attached %s\nswap %d\nio_flusher %d\nmem_locked %llu\n", device[0] ? device : "-",
                 export->swap, safety.io_flusher, (unsigned long long)safety.locked_kib * 1024);
    used = n < 0 || used >= sizeof body ? sizeof body : used + (size_t)n;
    if (used >= sizeof body) {
        reply_error(peer, ERANGE, "the statistics do not fit in one reply");
        return;
    }
    reply_ok(peer, body);
}

/* The server's own attribute: the memory limit all its devices share (--server-mem-limit),
 * read and written through any device of it. */
#define SERVER_MEM_LIMIT "server_mem_limit"

static void handle_set(const struct peer *peer, struct nbd_server *server,
                       struct nbd_export *export, const char *name, const char *value)
{
    struct uzram *dev = export->dev;

    if (strcmp(name, SERVER_MEM_LIMIT) == 0) {
        uint64_t bytes;
        if (uzram_parse_size(value, &bytes) < 0) {
            reply_error(peer, EINVAL,
                        "invalid value '%s' for %s; it takes a size in bytes, K/M/G/T "
                        "suffixes, 0 for none",
                        value, name);
            return;
        }
        uzram_group_set_mem_limit(nbd_server_group(server), bytes);
        reply_ok(peer, "");
        return;
    }
    /* reset drops the data: refused while anybody uses the device, in one step with that
     * check (nbd_export_reset). disksize is read-only: uzram_attr_set refuses it. */
    char busy[512] = "";
    int rc = strcmp(name, "reset") == 0 ? nbd_export_reset(server, export, value, busy, sizeof busy)
                                        : uzram_attr_set(dev, name, value);
    if (rc < 0 && rc != -EINVAL && strcmp(name, "backing_dev") == 0)
        backing_dev_refusal(dev, value, rc, busy, sizeof busy); /* why, by serve's rules */
    if (rc < 0 && busy[0]) {
        reply_error(peer, -rc, "%s", busy);
        return;
    }
    if (rc == 0) {
        reply_ok(peer, "");
        return;
    }
    const char *usage = uzram_attr_usage(name);
    switch (-rc) {
    case ENOENT:
        if (strcmp(name, "comp_algorithm") == 0) {
            char list[256] = "";
            uzram_algorithm_list(NULL, list, sizeof list);
            list[strcspn(list, "\n")] = '\0';
            reply_error(peer, ENOENT, "this build has no algorithm '%s'; choose one of: %s", value,
                        list);
        } else if (usage) /* the attribute exists: something its value names does not */
            reply_error(peer, ENOENT,
                        "'%s' for %s names no algorithm this build has, no priority that has "
                        "one (set recomp_algorithm first) or no readable file; it takes %s",
                        value, name, usage);
        else
            reply_error(peer, ENOENT, "no attribute named '%s' (see uzram(1))", name);
        break;
    case EACCES:
        reply_error(peer, EACCES, "'%s' is read-only", name);
        break;
    case EINVAL:
        reply_error(peer, EINVAL, "invalid value '%s' for %s; it takes %s", value, name,
                    usage ? usage : "no value");
        break;
    case EBUSY:
        reply_error(peer, EBUSY,
                    "%s can only change while the device holds no data "
                    "(set reset 1 first)",
                    name);
        break;
    default:
        reply_error(peer, -rc, "%s", strerror(-rc));
        break;
    }
}

/* "attach VIA [swap] [/FILE]": the file, when given, is the rest of the line (an absolute
 * path, which may hold spaces). */
static void handle_attach(const struct peer *peer, struct nbd_server *server,
                          struct nbd_export *export, char *args)
{
    char *save = NULL, reply[1024], message[1024];
    char *via = args ? strtok_r(args, " ", &save) : NULL;
    char *rest = strtok_r(NULL, "", &save);
    bool swap = false;
    if (rest != NULL && (strcmp(rest, "swap") == 0 || strncmp(rest, "swap ", 5) == 0)) {
        swap = true;
        rest = rest[4] ? rest + 5 : NULL;
    }
    if (via == NULL || (rest != NULL && rest[0] != '/')) {
        reply_error(peer, EINVAL, "usage: attach loop|nbd|ublk [swap] [/FILE]");
        return;
    }
    int rc = nbd_export_attach(server, export, via, swap, rest, reply, sizeof reply, message,
                               sizeof message);
    if (rc < 0)
        reply_error(peer, -rc, "%s", message);
    else
        reply_ok(peer, reply);
}

static void handle_detach(const struct peer *peer, struct nbd_server *server,
                          struct nbd_export *export)
{
    char reply[1024], message[1024];
    int rc = nbd_export_detach(server, export, reply, sizeof reply, message, sizeof message);
    if (rc < 0)
        reply_error(peer, -rc, "%s", message);
    else
        reply_ok(peer, reply);
}

/* Read the request line by the peer's deadline. Returns its length (the line
 * ends at the first '\n', or where the peer stopped sending), -E2BIG when
 * REQUEST_MAX bytes came without one, -ETIMEDOUT. */
static int read_request(const struct peer *peer, char *request)
{
    size_t length = 0;
    while (length < REQUEST_MAX) {
        uint64_t now = util_now_ms();
        if (now >= peer->deadline_ms)
            return -ETIMEDOUT;
        struct pollfd wait = {peer->fd, POLLIN, 0};
        if (poll(&wait, 1, (int)(peer->deadline_ms - now)) <= 0)
            continue;
        ssize_t n = recv(peer->fd, request + length, REQUEST_MAX - length, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break;
        if (n > 0) {
            length += (size_t)n;
            if (memchr(request + length - (size_t)n, '\n', (size_t)n))
                return (int)length;
        }
    }
    return length == REQUEST_MAX ? -E2BIG : (int)length;
}

/* After an answer to a request that was not read whole: stop sending, and
 * take what the peer still sends (until it closes, a limit or the deadline),
 * so that closing with unread bytes does not reset the connection before the
 * peer has read the answer. */
static void drain(const struct peer *peer)
{
    char scratch[4096];
    size_t taken = 0;
    shutdown(peer->fd, SHUT_WR);
    while (taken < (1u << 20)) {
        uint64_t now = util_now_ms();
        struct pollfd wait = {peer->fd, POLLIN, 0};
        if (now >= peer->deadline_ms || poll(&wait, 1, (int)(peer->deadline_ms - now)) <= 0)
            return;
        ssize_t n = recv(peer->fd, scratch, sizeof scratch, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return;
        if (n > 0)
            taken += (size_t)n;
    }
}

#define REQUESTS                                                                                   \
    "get NAME, set NAME VALUE, clients, stats, attach, detach (each may start with device "        \
    "DEVICE), "                                                                                    \
    "devices, server, hot-add SPEC, hot-remove DEVICE"

/* "devices": the server's devices, one name a line, the default export first. */
static void handle_devices(const struct peer *peer, struct nbd_server *server)
{
    struct nbd_export_entry *entries = malloc(NBD_SERVER_MAX_EXPORTS * sizeof *entries);
    char *body = malloc(NBD_SERVER_MAX_EXPORTS * (NBD_EXPORT_NAME_MAX + 1) + 1);
    if (entries == NULL || body == NULL) {
        reply_error(peer, ENOMEM, "out of memory");
    } else {
        size_t count = nbd_export_list(server, entries, NBD_SERVER_MAX_EXPORTS), used = 0;
        body[0] = '\0';
        for (size_t i = 0; i < count; i++)
            used += (size_t)sprintf(body + used, "%s\n", entries[i].name);
        reply_ok(peer, body);
    }
    free(entries);
    free(body);
}

/* "server": the server itself, whatever devices it has now. */
static void handle_server(const struct peer *peer, struct nbd_server *server)
{
    struct uzram_group_stats group = {0};
    char body[PATH_MAX + 1024];
    uzram_group_get_stats(nbd_server_group(server), &group);
    snprintf(body, sizeof body,
             "name %s\nsocket %s\ntcp %s\ndevices %llu\nclients %u\nserver_mem_limit %llu\n"
             "server_mem_used %llu\nserver_mem_used_max %llu\n",
             nbd_server_name(server), nbd_server_unix_path(server), nbd_server_tcp_address(server),
             (unsigned long long)group.devices, nbd_server_clients(server),
             (unsigned long long)group.mem_limit, (unsigned long long)group.mem_used,
             (unsigned long long)group.mem_used_max);
    reply_ok(peer, body);
}

/* hot-add and hot-remove: the answer says what was done, or what to do. */
static void handle_hotplug(const struct peer *peer, struct nbd_server *server, const char *verb,
                           const char *argument)
{
    char message[512 + 1]; /* room for the '\n' */
    if (argument == NULL || argument[0] == '\0') {
        reply_error(peer, EINVAL, "usage: %s",
                    strcmp(verb, "hot-add") == 0 ? "hot-add NAME[:SIZE[:KEY=VALUE]...]"
                                                 : "hot-remove NAME");
        return;
    }
    int rc = strcmp(verb, "hot-add") == 0
                 ? nbd_server_add(server, argument, message, sizeof message - 1)
                 : nbd_server_remove(server, argument, message, sizeof message - 1);
    if (rc < 0) {
        reply_error(peer, -rc, "%s", message);
        return;
    }
    strcat(message, "\n");
    reply_ok(peer, message);
}

/* A request about one device (get, set, clients, stats), with the device held. */
static void handle_device_request(const struct peer *peer, struct nbd_server *server,
                                  struct nbd_export *export, bool named, char *verb, char **save)
{
    if (strcmp(verb, "get") == 0) {
        char *name = strtok_r(NULL, " ", save);
        if (name == NULL) {
            reply_error(peer, EINVAL, "usage: get NAME");
            return;
        }
        char body[REPLY_MAX];
        int rc;
        if (strcmp(name, SERVER_MEM_LIMIT) == 0) {
            struct uzram_group_stats group;
            uzram_group_get_stats(nbd_server_group(server), &group);
            rc = snprintf(body, sizeof body, "%llu\n", (unsigned long long)group.mem_limit);
        } else {
            rc = uzram_attr_get(export->dev, name, body, sizeof body);
        }
        if (rc >= 0)
            reply_ok(peer, body);
        else if (rc == -ENOENT)
            reply_error(peer, ENOENT, "no attribute named '%s' (see uzram(1))", name);
        else if (rc == -EACCES)
            reply_error(peer, EACCES, "'%s' is write-only", name);
        else
            reply_error(peer, -rc, "%s", strerror(-rc));
    } else if (strcmp(verb, "set") == 0) {
        char *name = strtok_r(NULL, " ", save);
        char *value = strtok_r(NULL, "", save);
        if (name == NULL || value == NULL) {
            reply_error(peer, EINVAL, "usage: set NAME VALUE");
            return;
        }
        handle_set(peer, server, export, name, value);
    } else if (strcmp(verb, "clients") == 0) {
        char body[32];
        /* Without "device NAME", as before several devices: every connection of the
         * server, handshakes included; with it, the sessions using that device. */
        snprintf(body, sizeof body, "%u\n",
                 named ? nbd_export_clients(server, export) : nbd_server_clients(server));
        reply_ok(peer, body);
    } else if (strcmp(verb, "stats") == 0) {
        handle_stats(peer, server, export);
    } else if (strcmp(verb, "attach") == 0) {
        handle_attach(peer, server, export, strtok_r(NULL, "", save));
    } else if (strcmp(verb, "detach") == 0) {
        handle_detach(peer, server, export);
    } else {
        reply_error(peer, EINVAL, "unknown request '%s'; try: " REQUESTS, verb);
    }
}

/* Serve one request on an accepted control connection, within its deadline. */
static void serve_peer(const struct peer *peer, struct nbd_server *server)
{
    char request[REQUEST_MAX + 1];
    int length = read_request(peer, request);
    if (length == -ETIMEDOUT)
        return; /* nobody to answer: the peer did not finish its line in time */
    if (length == -E2BIG) {
        reply_error(peer, EINVAL, "request line too long (at most %d bytes)", REQUEST_MAX - 1);
        drain(peer);
        return;
    }
    request[length] = '\0';
    char *newline = strchr(request, '\n');
    if (newline)
        *newline = '\0';

    char *save = NULL;
    char *verb = strtok_r(request, " ", &save);
    if (verb == NULL) {
        reply_error(peer, EINVAL, "empty request; try: " REQUESTS);
        return;
    }
    if (strcmp(verb, "devices") == 0) {
        handle_devices(peer, server);
        return;
    }
    if (strcmp(verb, "server") == 0) {
        handle_server(peer, server);
        return;
    }
    if (strcmp(verb, "hot-add") == 0 || strcmp(verb, "hot-remove") == 0) {
        handle_hotplug(peer, server, verb, strtok_r(NULL, "", &save));
        return;
    }
    /* The rest is about one device: the one named, or the default export. */
    const char *device = "";
    if (strcmp(verb, "device") == 0) {
        device = strtok_r(NULL, " ", &save);
        verb = device ? strtok_r(NULL, " ", &save) : NULL;
        if (verb == NULL) {
            reply_error(peer, EINVAL, "usage: device DEVICE get NAME|set NAME VALUE|clients|stats");
            return;
        }
    }
    struct nbd_export *export = nbd_export_get(server, device, false);
    if (export == NULL) {
        if (device[0])
            reply_error(peer, ENOENT,
                        "server %s has no device named %s; the request 'devices' lists them",
                        nbd_server_name(server), device);
        else
            reply_error(peer, ENOENT,
                        "server %s has no default device (it was removed); name one: device "
                        "DEVICE %s ...",
                        nbd_server_name(server), verb);
        return;
    }
    handle_device_request(peer, server, export, device[0] != '\0', verb, &save);
    nbd_export_put(server, export, false);
}

/* The control socket is served on a thread of its own, each peer on a
 * thread of its own with a deadline for its whole request, so that a peer
 * that trickles its request delays no one: not the NBD clients, not
 * SIGTERM, not other control requests. */
#define CONTROL_TIMEOUT_MS 5000u
#define CONTROL_PEERS 8u

struct control_service {
    int listen_fd;
    int wake[2]; /* a pipe: control_stop() writes to it */
    struct nbd_server *server;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t peers_gone;
    unsigned peers; /* peer threads running, under lock */
};

struct peer_job {
    struct peer peer;
    struct control_service *service;
};

static void *peer_main(void *arg)
{
    struct peer_job *job = arg;
    struct control_service *service = job->service;
    serve_peer(&job->peer, service->server);
    close(job->peer.fd);
    free(job);
    pthread_mutex_lock(&service->lock);
    service->peers--;
    pthread_cond_broadcast(&service->peers_gone);
    pthread_mutex_unlock(&service->lock);
    return NULL;
}

static void accept_peer(struct control_service *service)
{
    int fd = accept4(service->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct peer_job *job = malloc(sizeof *job);
    pthread_mutex_lock(&service->lock);
    bool room = job != NULL && service->peers < CONTROL_PEERS;
    service->peers += room;
    pthread_mutex_unlock(&service->lock);
    if (!room) {
        struct peer busy = {fd, util_now_ms() + 100}; /* drain(): no reset, 100 ms at most */
        reply_error(&busy, EBUSY, "%u control requests already in progress; try again",
                    CONTROL_PEERS);
        drain(&busy);
        close(fd);
        free(job);
        return;
    }
    *job = (struct peer_job){{fd, util_now_ms() + CONTROL_TIMEOUT_MS}, service};
    if (util_thread_start(NULL, peer_main, job, NBD_SERVER_THREAD_STACK) < 0)
        peer_main(job); /* no thread: answer here (the deadline bounds it), not never */
}

static void *control_main(void *arg)
{
    struct control_service *service = arg;
    for (;;) {
        struct pollfd fds[2] = {{service->listen_fd, POLLIN, 0}, {service->wake[0], POLLIN, 0}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR)
            break;
        if (fds[1].revents)
            break;
        if (fds[0].revents & POLLIN)
            accept_peer(service);
    }
    return NULL;
}

int control_start(int listen_fd, struct nbd_server *server, struct control_service **out)
{
    struct control_service *service = calloc(1, sizeof *service);
    if (service == NULL)
        return -ENOMEM;
    service->listen_fd = listen_fd;
    service->server = server;
    pthread_mutex_init(&service->lock, NULL);
    pthread_cond_init(&service->peers_gone, NULL);
    int rc = pipe2(service->wake, O_CLOEXEC) < 0 ? -errno : 0;
    if (rc == 0) {
        rc = util_thread_start(&service->thread, control_main, service, NBD_SERVER_THREAD_STACK);
        if (rc < 0) {
            close(service->wake[0]);
            close(service->wake[1]);
        }
    }
    if (rc < 0) {
        pthread_mutex_destroy(&service->lock);
        pthread_cond_destroy(&service->peers_gone);
        free(service);
        return rc;
    }
    *out = service;
    return 0;
}

void control_stop(struct control_service *service)
{
    if (service == NULL)
        return;
    char byte = 0;
    while (write(service->wake[1], &byte, 1) < 0 && errno == EINTR)
        ;
    pthread_join(service->thread, NULL);
    /* Requests in progress end by their deadline at the latest. */
    pthread_mutex_lock(&service->lock);
    while (service->peers > 0)
        pthread_cond_wait(&service->peers_gone, &service->lock);
    pthread_mutex_unlock(&service->lock);
    close(service->wake[0]);
    close(service->wake[1]);
    pthread_mutex_destroy(&service->lock);
    pthread_cond_destroy(&service->peers_gone);
    free(service);
}

/* ------------------------------------------------------------------------
 * Client side
 * ---------------------------------------------------------------------- */

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int control_request(const char *path, const char *request, char **body, char *message,
                    size_t message_size)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    char *reply = NULL;
    size_t length = 0;

    *body = NULL;
    if (strlen(path) >= sizeof address.sun_path) {
        snprintf(message, message_size, "control socket path too long: %s", path);
        return -ENAMETOOLONG;
    }
    /* Another user's NAME.ctl would be believed, and its replies printed or acted on. */
    int rc = util_trusted_socket(path, message, message_size);
    if (rc < 0)
        return rc;
    strcpy(address.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        snprintf(message, message_size, "socket: %s", strerror(errno));
        return rc;
    }
    util_set_timeouts(fd, 30, 30);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0) {
        rc = -errno;
        snprintf(message, message_size, "cannot connect to %s: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    struct iovec iov[2] = {{(void *)request, strlen(request)}, {(void *)"\n", 1}};
    rc = util_send_iov(fd, iov, 2);
    shutdown(fd, SHUT_WR);
    /* A reply has a size and a time limit: a server (or whatever listens there) that sends
     * without end must not take this process's memory, nor keep it waiting. */
    if (rc == 0)
        rc = util_read_to_end(fd, CONTROL_REPLY_MAX, util_now_ms() + control_reply_ms, &reply,
                              &length);
    close(fd);
    if (rc == -EFBIG) {
        snprintf(message, message_size, "%s sent more than %u bytes: no uzram server reply", path,
                 CONTROL_REPLY_MAX);
        return rc;
    }
    if (rc < 0) {
        snprintf(message, message_size, "talking to %s: %s", path, strerror(-rc));
        return rc;
    }
    if (reply == NULL || length == 0) {
        snprintf(message, message_size, "no reply from %s", path);
        free(reply);
        return -EPROTO;
    }
    if (strncmp(reply, "ok\n", 3) == 0) {
        memmove(reply, reply + 3, length - 3 + 1);
        *body = reply;
        return 0;
    }
    if (strncmp(reply, "error ", 6) == 0) {
        char *colon = strchr(reply + 6, ':');
        char *end = strchr(reply, '\n');
        if (end)
            *end = '\0';
        int err = EIO;
        if (colon) {
            *colon = '\0';
            int known = util_errno_from_name(reply + 6);
            if (known)
                err = known;
            snprintf(message, message_size, "%s", colon + 1 + (colon[1] == ' '));
        } else {
            snprintf(message, message_size, "%s", reply + 6);
        }
        free(reply);
        return -err;
    }
    snprintf(message, message_size, "unexpected reply from %s", path);
    free(reply);
    return -EPROTO;
}

int control_ask(const struct control_target *target, const char *request, char **body,
                char *message, size_t message_size)
{
    if (target->device[0] == '\0')
        return control_request(target->ctl, request, body, message, message_size);
    char line[REQUEST_MAX];
    int n = snprintf(line, sizeof line, "device %s %s", target->device, request);
    if (n < 0 || (size_t)n >= sizeof line) {
        *body = NULL;
        snprintf(message, message_size, "request too long");
        return -E2BIG;
    }
    return control_request(target->ctl, line, body, message, message_size);
}

int control_devices(const char *ctl, char ***names, size_t *count, char *message,
                    size_t message_size)
{
    char *body;
    *names = NULL;
    *count = 0;
    int rc = control_request(ctl, "devices", &body, message, message_size);
    if (rc < 0)
        return rc;
    size_t lines = 0;
    for (const char *p = body; *p; p++)
        lines += *p == '\n';
    char **list = calloc(lines + 1, sizeof *list);
    char *save = NULL;
    for (char *line = list ? strtok_r(body, "\n", &save) : NULL; line && *count < lines;
         line = strtok_r(NULL, "\n", &save)) {
        list[*count] = strdup(line);
        if (list[*count] == NULL)
            break;
        (*count)++;
    }
    free(body);
    if (list == NULL || *count < lines) {
        control_free_names(list, *count);
        *count = 0;
        snprintf(message, message_size, "out of memory");
        return -ENOMEM;
    }
    *names = list;
    return 0;
}

void control_free_names(char **names, size_t count)
{
    for (size_t i = 0; names != NULL && i < count; i++)
        free(names[i]);
    free(names);
}

int control_servers(const char *dir, char ***paths, size_t *count)
{
    *paths = NULL;
    *count = 0;
    if (access(dir, F_OK) == 0 && util_private_dir(dir) != NULL)
        return -EPERM; /* another user could have put sockets there */
    DIR *listing = opendir(dir);
    if (listing == NULL)
        return errno == ENOENT ? 0 : -errno;
    size_t capacity = 0;
    struct dirent *entry;
    int rc = 0;
    while ((entry = readdir(listing)) != NULL) {
        size_t length = strlen(entry->d_name);
        if (length <= 4 || strcmp(entry->d_name + length - 4, ".ctl") != 0)
            continue;
        if (*count == capacity) {
            capacity = capacity ? capacity * 2 : 8;
            char **bigger = realloc(*paths, capacity * sizeof *bigger);
            if (bigger == NULL) {
                rc = -ENOMEM;
                break;
            }
            *paths = bigger;
        }
        char *path = malloc(strlen(dir) + 1 + length + 1);
        if (path == NULL) {
            rc = -ENOMEM;
            break;
        }
        sprintf(path, "%s/%s", dir, entry->d_name);
        (*paths)[(*count)++] = path;
    }
    closedir(listing);
    if (rc < 0) {
        control_free_names(*paths, *count);
        *paths = NULL;
        *count = 0;
        return rc;
    }
    if (*count > 1)
        qsort(*paths, *count, sizeof **paths, compare_strings);
    return 0;
}

/* Does the server of `ctl` serve `device`? */
static bool serves(const char *ctl, const char *device)
{
    char **names, message[256];
    size_t count;
    if (control_devices(ctl, &names, &count, message, sizeof message) < 0)
        return false;
    bool found = false;
    for (size_t i = 0; i < count && !found; i++)
        found = strcmp(names[i], device) == 0;
    control_free_names(names, count);
    return found;
}

int control_resolve(const char *device, const char *runtime_dir, struct control_target *target,
                    char *message, size_t message_size)
{
    struct stat st;

    target->device[0] = '\0';
    if (strchr(device, '/') != NULL) {
        int rc = stat(device, &st) < 0 ? -errno : 0;
        if (rc == -EACCES) {
            snprintf(message, message_size, "cannot reach %s: %s", device, strerror(EACCES));
            return rc;
        }
        if (rc < 0 || !S_ISSOCK(st.st_mode)) {
            snprintf(message, message_size, "%s is not a control socket", device);
            return -ENOENT;
        }
        snprintf(target->ctl, sizeof target->ctl, "%s", device);
        return 0;
    }
    if (!util_valid_name(device)) {
        snprintf(message, message_size,
                 "'%s' is not a device name ([A-Za-z0-9._-]+, not starting with -)", device);
        return -EINVAL;
    }
    snprintf(target->device, sizeof target->device, "%s", device);
    if (access(runtime_dir, F_OK) == 0 && util_trusted_dir(runtime_dir, message, message_size) < 0)
        return -EPERM;
    /* The server of the same name first (a device served alone is named like its server),
     * then every server of the directory. */
    int n = snprintf(target->ctl, sizeof target->ctl, "%s/%s.ctl", runtime_dir, device);
    if (n < 0 || (size_t)n >= sizeof target->ctl) {
        snprintf(message, message_size, "path too long");
        return -ENAMETOOLONG;
    }
    if (stat(target->ctl, &st) < 0 && errno != ENOENT) {
        int err = errno;
        /* Not "not running": the runtime directory is out of reach. */
        snprintf(message, message_size,
                 "cannot look for %s: %s (%s is another user's, or its permissions do "
                 "not allow it; -u DIR names another runtime directory)",
                 target->ctl, strerror(err), runtime_dir);
        return -err;
    }
    if (access(target->ctl, F_OK) == 0 && util_trusted_socket(target->ctl, message, message_size))
        return -EPERM; /* said, rather than looked past: it is where this device would be */
    if (serves(target->ctl, device))
        return 0;
    char **servers;
    size_t count, found = 0;
    char first[PATH_MAX] = "", second[PATH_MAX] = "";
    int rc = control_servers(runtime_dir, &servers, &count);
    if (rc < 0) {
        snprintf(message, message_size, "cannot list the servers in %s: %s", runtime_dir,
                 strerror(-rc));
        return rc;
    }
    for (size_t i = 0; i < count; i++) {
        if (!serves(servers[i], device))
            continue;
        snprintf(found++ ? second : first, PATH_MAX, "%s", servers[i]);
    }
    control_free_names(servers, count);
    if (found == 1) {
        snprintf(target->ctl, sizeof target->ctl, "%s", first);
        return 0;
    }
    if (found > 1) {
        snprintf(message, message_size,
                 "%zu servers serve a device named %s (%s, %s%s); say which with -u CTL", found,
                 device, first, second, found > 2 ? ", ..." : "");
        return -EEXIST;
    }
    snprintf(message, message_size,
             "no device %s is running (no server in %s serves it); start one with: uzram serve "
             "--name %s, or add it to a server with: uzram hot-add %s SIZE",
             device, runtime_dir, device, device);
    return -ENOENT;
}

bool control_field(const char *body, const char *key, char *value, size_t size)
{
    size_t length = strlen(key);
    for (const char *line = body; line != NULL && *line;) {
        const char *end = strchr(line, '\n');
        size_t line_length = end ? (size_t)(end - line) : strlen(line);
        if (line_length > length && strncmp(line, key, length) == 0 && line[length] == ' ') {
            snprintf(value, size, "%.*s", (int)(line_length - length - 1), line + length + 1);
            return true;
        }
        line = end ? end + 1 : NULL;
    }
    return false;
}

/* The control socket in `dir` whose server listens on the NBD socket `target` (the same
 * inode as its "socket" field); true when found. */
static bool find_server_of(const char *dir, const struct stat *target, char *ctl, size_t size)
{
    DIR *listing = opendir(dir);
    struct dirent *entry;
    bool found = false;
    while (!found && listing != NULL && (entry = readdir(listing)) != NULL) {
        size_t length = strlen(entry->d_name);
        if (length <= 4 || strcmp(entry->d_name + length - 4, ".ctl") != 0)
            continue;
        char path[PATH_MAX], message[256], socket_path[PATH_MAX], *body;
        if (snprintf(path, sizeof path, "%s/%s", dir, entry->d_name) >= (int)sizeof path ||
            control_request(path, "server", &body, message, sizeof message) < 0)
            continue;
        struct stat st;
        if (control_field(body, "socket", socket_path, sizeof socket_path) &&
            socket_path[0] != '\0' && stat(socket_path, &st) == 0 && st.st_dev == target->st_dev &&
            st.st_ino == target->st_ino) {
            snprintf(ctl, size, "%s", path);
            found = true;
        }
        free(body);
    }
    if (listing != NULL)
        closedir(listing);
    return found;
}

int control_place(const char *given, struct control_place *place, char *message,
                  size_t message_size)
{
    struct stat st;
    char runtime_dir[PATH_MAX];
    place->ctl[0] = '\0';
    if (util_runtime_dir(runtime_dir, sizeof runtime_dir) < 0) {
        snprintf(message, message_size, "$XDG_RUNTIME_DIR is too long");
        return -ENAMETOOLONG;
    }
    if (given == NULL) {
        snprintf(place->dir, sizeof place->dir, "%s", runtime_dir);
        return 0;
    }
    if (stat(given, &st) < 0) {
        int err = errno;
        snprintf(message, message_size,
                 "%s: %s; -u takes a runtime directory, or a socket a server was given "
                 "(serve --unix PATH) or made (NAME.ctl)",
                 given, strerror(err));
        return -err;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(place->dir, sizeof place->dir, "%s", given);
        return 0;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(message, message_size, "%s is neither a directory nor a socket", given);
        return -ENOTSOCK;
    }
    /* The directory of the socket, where a server put its control socket when the runtime
     * directory was not usable. */
    const char *slash = strrchr(given, '/');
    if (slash == NULL)
        snprintf(place->dir, sizeof place->dir, ".");
    else
        snprintf(place->dir, sizeof place->dir, "%.*s", (int)(slash == given ? 1 : slash - given),
                 given);
    size_t length = strlen(given);
    if (length > 4 && strcmp(given + length - 4, ".ctl") == 0) {
        snprintf(place->ctl, sizeof place->ctl, "%s", given);
        return 0;
    }
    if (find_server_of(runtime_dir, &st, place->ctl, sizeof place->ctl) ||
        find_server_of(place->dir, &st, place->ctl, sizeof place->ctl))
        return 0;
    snprintf(message, message_size,
             "no running uzram server says it listens on %s (asked the control sockets in %s "
             "and %s)",
             given, runtime_dir, place->dir);
    return -ENOENT;
}
