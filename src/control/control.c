/* control.c - the control socket of a served device: a tiny line protocol, both ends.
 * Requests: "get NAME", "set NAME VALUE", "clients", "stats"; replies "ok\n..." or "error E: msg".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control/control.h"
#include "nbd/server.h"
#include "common/util.h"

#define REQUEST_MAX 4096
#define REPLY_MAX 8192

/* ------------------------------------------------------------------------
 * Server side
 * ---------------------------------------------------------------------- */

static void reply_error(int fd, int err, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void reply_error(int fd, int err, const char *format, ...)
{
    char message[512], name_buf[16], line[600];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    int n = snprintf(line, sizeof line, "error %s: %s\n",
                     util_errno_name(err, name_buf, sizeof name_buf), message);
    util_send_all(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void reply_ok(int fd, const char *body)
{
    struct iovec iov[2] = {{(void *)"ok\n", 3}, {(void *)body, strlen(body)}};
    util_send_iov(fd, iov, 2);
}

/* Identity, then every counter of the library's list (UZRAM_STATS) as
 * "key value" lines: what `uzram status` shows. */
static void handle_stats(int fd, struct nbd_server *server)
{
    const struct nbd_export *export = nbd_server_export(server);
    struct uzram_stats st;
    struct uzram_config config;
    char body[REPLY_MAX];

    uzram_get_config(export->dev, &config);
    int rc = uzram_get_stats(export->dev, &st, sizeof st);
    if (rc < 0) {
        reply_error(fd, -rc, "cannot read statistics: %s", strerror(-rc));
        return;
    }
    int n = snprintf(body, sizeof body,
                     "name %s\nalgorithm %s\ndisksize %llu\nread_only %d\nuse_dedup %d\n"
                     "clients %u\n",
                     export->name, config.comp_algorithm, (unsigned long long)config.disksize,
                     export->read_only, config.use_dedup, nbd_server_clients(server));
    size_t used = n < 0 ? sizeof body : (size_t)n;
    for (size_t i = 0; i < uzram_stat_count() && used < sizeof body; i++) {
        n = snprintf(body + used, sizeof body - used, "%s %llu\n", uzram_stat_name(i),
                     (unsigned long long)uzram_stat_value(&st, sizeof st, i));
        used = n < 0 ? sizeof body : used + (size_t)n;
    }
    if (used >= sizeof body) {
        reply_error(fd, ERANGE, "the statistics do not fit in one reply");
        return;
    }
    reply_ok(fd, body);
}

static void handle_set(int fd, struct nbd_server *server, const char *name, const char *value)
{
    struct uzram *dev = nbd_server_export(server)->dev;

    /* reset drops the data under connected clients: it waits until nobody is
     * connected. (disksize is read-only: uzram_attr_set refuses it.) */
    if (strcmp(name, "reset") == 0) {
        unsigned clients = nbd_server_clients(server);
        if (clients > 0) {
            reply_error(fd, EBUSY, "%u client%s connected; disconnect them first", clients,
                        clients == 1 ? "" : "s");
            return;
        }
    }
    int rc = uzram_attr_set(dev, name, value);
    if (rc == 0) {
        reply_ok(fd, "");
        return;
    }
    const char *usage = uzram_attr_usage(name);
    switch (-rc) {
    case ENOENT:
        if (usage) /* the attribute exists: something its value names does not */
            reply_error(fd, ENOENT,
                        "'%s' for %s names no algorithm this build has, no priority that has "
                        "one (set recomp_algorithm first) or no readable file; it takes %s",
                        value, name, usage);
        else
            reply_error(fd, ENOENT, "no attribute named '%s' (see uzram(1))", name);
        break;
    case EACCES:
        reply_error(fd, EACCES, "'%s' is read-only", name);
        break;
    case EINVAL:
        reply_error(fd, EINVAL, "invalid value '%s' for %s; it takes %s", value, name,
                    usage ? usage : "no value");
        break;
    case EBUSY:
        reply_error(fd, EBUSY,
                    "%s can only change while the device holds no data "
                    "(set reset 1 first)",
                    name);
        break;
    default:
        reply_error(fd, -rc, "%s", strerror(-rc));
        break;
    }
}

void control_serve_one(int fd, struct nbd_server *server)
{
    char request[REQUEST_MAX + 1];
    size_t length = 0;

    /* Read one line; the client may also just close after writing it. */
    while (length < REQUEST_MAX) {
        ssize_t n = recv(fd, request + length, REQUEST_MAX - length, 0);
        if (n <= 0)
            break;
        length += (size_t)n;
        if (memchr(request, '\n', length))
            break;
    }
    request[length] = '\0';
    char *newline = strchr(request, '\n');
    if (newline == NULL && length == REQUEST_MAX) {
        reply_error(fd, EINVAL, "request line too long");
        return;
    }
    if (newline)
        *newline = '\0';

    char *save = NULL;
    char *verb = strtok_r(request, " ", &save);
    if (verb == NULL) {
        reply_error(fd, EINVAL, "empty request; try: get NAME, set NAME VALUE, clients, stats");
        return;
    }
    if (strcmp(verb, "get") == 0) {
        char *name = strtok_r(NULL, " ", &save);
        if (name == NULL) {
            reply_error(fd, EINVAL, "usage: get NAME");
            return;
        }
        char body[REPLY_MAX];
        int rc = uzram_attr_get(nbd_server_export(server)->dev, name, body, sizeof body);
        if (rc >= 0)
            reply_ok(fd, body);
        else if (rc == -ENOENT)
            reply_error(fd, ENOENT, "no attribute named '%s' (see uzram(1))", name);
        else if (rc == -EACCES)
            reply_error(fd, EACCES, "'%s' is write-only", name);
        else
            reply_error(fd, -rc, "%s", strerror(-rc));
    } else if (strcmp(verb, "set") == 0) {
        char *name = strtok_r(NULL, " ", &save);
        char *value = strtok_r(NULL, "", &save);
        if (name == NULL || value == NULL) {
            reply_error(fd, EINVAL, "usage: set NAME VALUE");
            return;
        }
        handle_set(fd, server, name, value);
    } else if (strcmp(verb, "clients") == 0) {
        char body[32];
        snprintf(body, sizeof body, "%u\n", nbd_server_clients(server));
        reply_ok(fd, body);
    } else if (strcmp(verb, "stats") == 0) {
        handle_stats(fd, server);
    } else {
        reply_error(fd, EINVAL,
                    "unknown request '%s'; try: get NAME, set NAME VALUE, clients, stats", verb);
    }
}

/* ------------------------------------------------------------------------
 * Client side
 * ---------------------------------------------------------------------- */

int control_request(const char *path, const char *request, char **body, char *message,
                    size_t message_size)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    char *reply = NULL;
    size_t length = 0, capacity = 0;
    int rc;

    *body = NULL;
    if (strlen(path) >= sizeof address.sun_path) {
        snprintf(message, message_size, "control socket path too long: %s", path);
        return -ENAMETOOLONG;
    }
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
    for (;;) {
        if (rc < 0)
            break;
        if (capacity - length < 4096) {
            capacity = capacity ? capacity * 2 : 8192;
            char *bigger = realloc(reply, capacity);
            if (bigger == NULL) {
                rc = -ENOMEM;
                break;
            }
            reply = bigger;
        }
        ssize_t n = recv(fd, reply + length, capacity - length - 1, 0);
        if (n < 0) {
            rc = errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
            break;
        }
        if (n == 0)
            break;
        length += (size_t)n;
    }
    close(fd);
    if (rc < 0) {
        snprintf(message, message_size, "talking to %s: %s", path, strerror(-rc));
        free(reply);
        return rc;
    }
    if (reply == NULL || length == 0) {
        snprintf(message, message_size, "no reply from %s", path);
        free(reply);
        return -EPROTO;
    }
    reply[length] = '\0';
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

int control_resolve(const char *device, const char *runtime_dir, char *path, size_t size,
                    char *message, size_t message_size)
{
    struct stat st;

    if (strchr(device, '/') != NULL) {
        if (stat(device, &st) < 0 || !S_ISSOCK(st.st_mode)) {
            snprintf(message, message_size, "%s is not a control socket", device);
            return -ENOENT;
        }
        snprintf(path, size, "%s", device);
        return 0;
    }
    if (!util_valid_name(device)) {
        snprintf(message, message_size, "'%s' is not a device name ([A-Za-z0-9._-]+)", device);
        return -EINVAL;
    }
    int n = snprintf(path, size, "%s/%s.ctl", runtime_dir, device);
    if (n < 0 || (size_t)n >= size) {
        snprintf(message, message_size, "path too long");
        return -ENAMETOOLONG;
    }
    if (stat(path, &st) < 0) {
        snprintf(message, message_size,
                 "no device %s is running (no %s); start one with: uzram serve --name %s", device,
                 path, device);
        return -ENOENT;
    }
    return 0;
}
