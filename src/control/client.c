/* client.c - the client end of a uzram control socket (control.h): one request and its reply,
 * the one reader of "key value" replies, the servers of a directory, which of them serves a
 * device, and what -u names (control_place). The server end is service.c; find.c builds
 * on this the lookup every subcommand makes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control/control.h"
#include "common/clock.h"
#include "common/runtime_dir.h"
#include "common/socket_io.h"
#include "common/text.h"

/* The client reads at most this much of a reply (the longest, `devices` of 256 devices, is
 * 17 KiB), within its deadline (CONTROL_REPLY_MS, or a pass's). */
#define CONTROL_REPLY_MAX (1u << 20)

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* control_request() that waits `reply_ms` for the whole reply. */
static int request_within(const char *path, const char *request, unsigned long long reply_ms,
                          char **body, char *message, size_t message_size)
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
        rc = util_read_to_end(fd, CONTROL_REPLY_MAX, util_now_ms() + reply_ms, &reply, &length);
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

int control_request(const char *path, const char *request, char **body, char *message,
                    size_t message_size)
{
    return request_within(path, request, CONTROL_REPLY_MS, body, message, message_size);
}

int control_ask(const struct control_target *target, const char *request, char **body,
                char *message, size_t message_size)
{
    return control_ask_within(target, request, CONTROL_REPLY_MS, body, message, message_size);
}

int control_ask_within(const struct control_target *target, const char *request,
                       unsigned long long reply_ms, char **body, char *message, size_t message_size)
{
    if (target->device[0] == '\0')
        return request_within(target->ctl, request, reply_ms, body, message, message_size);
    char line[CONTROL_REQUEST_MAX];
    int n = snprintf(line, sizeof line, "device %s %s", target->device, request);
    if (n < 0 || (size_t)n >= sizeof line) {
        *body = NULL;
        snprintf(message, message_size, "request too long");
        return -E2BIG;
    }
    return request_within(target->ctl, line, reply_ms, body, message, message_size);
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

bool control_next_line(const char **cursor, struct control_line *line)
{
    while (*cursor != NULL && **cursor != '\0') {
        const char *start = *cursor, *end = strchr(start, '\n');
        size_t length = end ? (size_t)(end - start) : strlen(start);
        *cursor = start + length + (end != NULL);
        const char *space = memchr(start, ' ', length);
        if (space == NULL || space == start)
            continue;
        *line = (struct control_line){start, space + 1, (size_t)(space - start),
                                      length - (size_t)(space - start) - 1};
        return true;
    }
    return false;
}

bool control_field(const char *body, const char *key, char *value, size_t size)
{
    struct control_line line;
    size_t length = strlen(key);
    while (control_next_line(&body, &line)) {
        if (line.key_length == length && strncmp(line.key, key, length) == 0) {
            snprintf(value, size, "%.*s", (int)line.value_length, line.value);
            return true;
        }
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
    place->dir[0] = '\0';
    place->sudo_too = given == NULL;
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
    place->dir[0] = '\0';
    return -ENOENT;
}
