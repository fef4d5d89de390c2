/* service.c - the server end of a uzram control socket (NAME.ctl): a tiny line protocol.
 * Requests: "[device DEV] get NAME|set NAME VALUE|clients|stats|attach ...|detach", "devices",
 * "server", "hot-add SPEC", "hot-remove DEV", "restart"; replies "ok\n..." or "error E: msg".
 * The client end is client.c. */
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

#include "control/service.h"
#include "control/control.h"
#include "attach/attach.h"
#include "nbd/exports.h"
#include "nbd/server.h"
#include "common/clock.h"
#include "common/socket_io.h"
#include "common/text.h"
#include "common/threads.h"
#include "server/persist.h"
#include "server/recover.h"
#include "server/reexec.h"

#define REQUEST_MAX CONTROL_REQUEST_MAX
#define REPLY_MAX 8192

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
    uzram_group_get_stats(nbd_exports_group(nbd_server_exports(server)), &group);
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
                     nbd_export_clients(nbd_server_exports(server), export),
                     nbd_server_unix_path(server), nbd_server_tcp_address(server), uri,
                     (unsigned long long)group.mem_limit, (unsigned long long)group.mem_used,
                     (unsigned long long)group.mem_used_max);
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
    attachment_device(nbd_export_attachment(export), device, sizeof device);
    swap_safety_read(&safety);
    n = snprintf(body + used, sizeof body - used,
                 "attached %s\nfuse_uring_requests %llu\nswap %d\nio_flusher %d\nmem_locked %llu\n"
                 "mem_resident %llu\nheap_size %llu\nheap_used %llu\nheap_mapped %llu\n",
                 device[0] ? device : "-",
                 (unsigned long long)attachment_uring_requests(nbd_export_attachment(export)),
                 export->swap, safety.io_flusher, (unsigned long long)safety.locked_kib * 1024,
                 (unsigned long long)safety.resident_kib * 1024,
                 (unsigned long long)safety.heap_bytes, (unsigned long long)safety.heap_used,
                 (unsigned long long)safety.heap_mapped);
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
        char refusal[512];
        int rc =
            nbd_exports_set_mem_limit(nbd_server_exports(server), bytes, refusal, sizeof refusal);
        if (rc < 0)
            reply_error(peer, -rc, "%s", refusal);
        else
            reply_ok(peer, "");
        return;
    }
    /* reset drops the data: refused while anybody uses the device, in one step with that
     * check (nbd_export_reset). disksize is read-only: uzram_attr_set refuses it. */
    char busy[512] = "";
    int rc = strcmp(name, "reset") == 0
                 ? nbd_export_reset(nbd_server_exports(server), export, value, busy, sizeof busy)
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
    int rc = nbd_export_attach(nbd_server_exports(server), export, via, swap, rest, reply,
                               sizeof reply, message, sizeof message);
    if (rc < 0) {
        reply_error(peer, -rc, "%s", message);
        return;
    }
    char device[PATH_MAX];
    attachment_device(nbd_export_attachment(export), device, sizeof device);
    recover_note_attachment(export->dev, device); /* a ublk device: the next server's */
    reply_ok(peer, reply);
}

static void handle_detach(const struct peer *peer, struct nbd_server *server,
                          struct nbd_export *export)
{
    char reply[1024], message[1024];
    int rc = nbd_export_detach(nbd_server_exports(server), export, reply, sizeof reply, message,
                               sizeof message);
    if (rc == 0)
        recover_note_attachment(export->dev, "");
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
    "devices, server, hot-add SPEC, hot-remove DEVICE, restart"

/* "restart": check that the program can take every state over (server/reexec.c), then end
 * the accept loop for the handover; the answer says how many restarts there were before, so
 * the client sees when the next process answers. Refused (and the server keeps serving)
 * when a device has no state or the program cannot read one. */
static void handle_restart(const struct peer *given, struct nbd_server *server)
{
    struct peer peer = *given;
    peer.deadline_ms += RESTART_CHECK_MS; /* the check's deadline comes on top */
    struct nbd_export_entry *entries = malloc(NBD_SERVER_MAX_EXPORTS * sizeof *entries);
    const char **names = malloc(NBD_SERVER_MAX_EXPORTS * sizeof *names);
    char message[1400], body[64];
    if (entries == NULL || names == NULL) {
        reply_error(&peer, ENOMEM, "out of memory");
    } else {
        size_t count = nbd_export_list(nbd_server_exports(server), entries, NBD_SERVER_MAX_EXPORTS);
        for (size_t i = 0; i < count; i++)
            names[i] = entries[i].name;
        int rc = restart_check(names, count, message, sizeof message);
        if (rc < 0) {
            fprintf(stderr, "uzram: restart refused, still serving: %s\n", message);
            reply_error(&peer, -rc, "%s", message);
        } else {
            snprintf(body, sizeof body, "restarts %u\n", restart_count());
            reply_ok(&peer, body);
            nbd_server_restart_soon(server);
        }
    }
    free(entries);
    free(names);
}

/* "devices": the server's devices, one name a line, the default export first. */
static void handle_devices(const struct peer *peer, struct nbd_server *server)
{
    struct nbd_export_entry *entries = malloc(NBD_SERVER_MAX_EXPORTS * sizeof *entries);
    char *body = malloc(NBD_SERVER_MAX_EXPORTS * (NBD_EXPORT_NAME_MAX + 1) + 1);
    if (entries == NULL || body == NULL) {
        reply_error(peer, ENOMEM, "out of memory");
    } else {
        size_t count = nbd_export_list(nbd_server_exports(server), entries, NBD_SERVER_MAX_EXPORTS),
               used = 0;
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
    uzram_group_get_stats(nbd_exports_group(nbd_server_exports(server)), &group);
    snprintf(body, sizeof body,
             "name %s\nsocket %s\ntcp %s\ndevices %llu\nclients %u\nserver_mem_limit %llu\n"
             "server_mem_used %llu\nserver_mem_used_max %llu\npid %d\nrestarts %u\n",
             nbd_server_name(server), nbd_server_unix_path(server), nbd_server_tcp_address(server),
             (unsigned long long)group.devices, nbd_server_clients(server),
             (unsigned long long)group.mem_limit, (unsigned long long)group.mem_used,
             (unsigned long long)group.mem_used_max, (int)getpid(), restart_count());
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
    int rc =
        strcmp(verb, "hot-add") == 0
            ? nbd_exports_hot_add(nbd_server_exports(server), argument, message, sizeof message - 1)
            : nbd_exports_hot_remove(nbd_server_exports(server), argument, message,
                                     sizeof message - 1);
    if (rc < 0) {
        reply_error(peer, -rc, "%s", message);
        return;
    }
    if (strcmp(verb, "hot-remove") == 0)
        persist_forget(argument, false); /* its data is dropped: the state goes too */
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
            uzram_group_get_stats(nbd_exports_group(nbd_server_exports(server)), &group);
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
                 named ? nbd_export_clients(nbd_server_exports(server), export)
                       : nbd_server_clients(server));
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
    if (strcmp(verb, "restart") == 0) {
        handle_restart(peer, server);
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
    struct nbd_export *export = nbd_export_get(nbd_server_exports(server), device, false);
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
    nbd_export_put(nbd_server_exports(server), export, false);
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
