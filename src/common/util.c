/* util.c - small helpers shared by the uzram subcommands (not part of libuzram): socket I/O
 * that survives partial transfers and keeps deadlines, big-endian packing, threads with
 * prefaulted stacks, the runtime directory and which directories and sockets can only be the
 * user's, names, sizes, errno names, JSON strings. */
#include "common/util.h"

#include <alloca.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "uzram.h"

uint64_t util_now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000 + (uint64_t)now.tv_nsec;
}

uint64_t util_now_ms(void)
{
    return util_now_ns() / 1000000;
}

int util_read_full_by(int fd, void *buf, size_t length, uint64_t deadline_ms)
{
    unsigned char *p = buf;
    size_t done = 0;

    while (done < length) {
        if (deadline_ms) {
            uint64_t now = util_now_ms();
            if (now >= deadline_ms)
                return -ETIMEDOUT;
            struct pollfd wait = {.fd = fd, .events = POLLIN};
            int ready = poll(&wait, 1, (int)(deadline_ms - now));
            if (ready < 0 && errno != EINTR)
                return -errno;
            if (ready <= 0)
                continue;
        }
        ssize_t n = recv(fd, p + done, length - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return done == 0 ? 0 : -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno == EWOULDBLOCK)
            return -EAGAIN;
        return -errno;
    }
    return 1;
}

int util_discard_by(int fd, uint64_t length, uint64_t deadline_ms)
{
    unsigned char scratch[65536];

    while (length > 0) {
        size_t chunk = length < sizeof scratch ? (size_t)length : sizeof scratch;
        int rc = util_read_full_by(fd, scratch, chunk, deadline_ms);
        if (rc <= 0)
            return rc == 0 ? -ECONNRESET : rc;
        length -= chunk;
    }
    return 0;
}

/* Plain blocking sends when timeout_ms < 0 and deadline_ms == 0 (SO_SNDTIMEO
 * still applies). Otherwise non-blocking sends that poll while the socket is
 * full, until CLOCK_MONOTONIC `deadline_ms` when one is given, else for
 * `timeout_ms` from the moment the socket is first full: that deadline is only
 * read off the clock then, as most sends never wait. */
static int send_iov(int fd, struct iovec *iov, int count, int64_t timeout_ms, uint64_t deadline_ms)
{
    bool waits = timeout_ms >= 0 || deadline_ms != 0;
    while (count > 0) {
        /* Skip exhausted entries so a zero-length buffer never stalls the loop. */
        if (iov->iov_len == 0) {
            iov++;
            count--;
            continue;
        }
        struct msghdr message = {0};
        message.msg_iov = iov;
        message.msg_iovlen = count < IOV_MAX ? (size_t)count : IOV_MAX;
        ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL | (waits ? MSG_DONTWAIT : 0));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EWOULDBLOCK && waits) {
                if (deadline_ms == 0)
                    deadline_ms = util_now_ms() + (uint64_t)timeout_ms;
                uint64_t now = util_now_ms();
                if (now >= deadline_ms)
                    return -ETIMEDOUT;
                uint64_t left = deadline_ms - now;
                struct pollfd pfd = {fd, POLLOUT, 0};
                if (poll(&pfd, 1, (int)(left > 60000 ? 60000 : left)) < 0 && errno != EINTR)
                    return -errno;
                continue;
            }
            if (errno == EWOULDBLOCK)
                return -EAGAIN;
            return -errno;
        }
        size_t sent = (size_t)n;
        while (count > 0 && sent >= iov->iov_len) {
            sent -= iov->iov_len;
            iov++;
            count--;
        }
        if (count > 0) {
            iov->iov_base = (char *)iov->iov_base + sent;
            iov->iov_len -= sent;
        }
    }
    return 0;
}

int util_send_iov(int fd, struct iovec *iov, int count)
{
    return send_iov(fd, iov, count, -1, 0);
}

int util_send_iov_timeout(int fd, struct iovec *iov, int count, int timeout_seconds)
{
    return send_iov(fd, iov, count, (int64_t)timeout_seconds * 1000, 0);
}

int util_send_iov_by(int fd, struct iovec *iov, int count, uint64_t deadline_ms)
{
    return send_iov(fd, iov, count, -1, deadline_ms);
}

int util_send_all_by(int fd, const void *buf, size_t length, uint64_t deadline_ms)
{
    struct iovec iov = {(void *)buf, length};
    return send_iov(fd, &iov, 1, -1, deadline_ms);
}

void util_put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

void util_put32(unsigned char *p, uint32_t v)
{
    util_put16(p, (uint16_t)(v >> 16));
    util_put16(p + 2, (uint16_t)v);
}

void util_put64(unsigned char *p, uint64_t v)
{
    util_put32(p, (uint32_t)(v >> 32));
    util_put32(p + 4, (uint32_t)v);
}

uint16_t util_get16(const unsigned char *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

uint32_t util_get32(const unsigned char *p)
{
    return ((uint32_t)util_get16(p) << 16) | util_get16(p + 2);
}

uint64_t util_get64(const unsigned char *p)
{
    return ((uint64_t)util_get32(p) << 32) | util_get32(p + 4);
}

/* Stack bytes every thread started here touches first (util_thread_prefault_stack()). */
static size_t stack_prefault;

void util_thread_prefault_stack(size_t bytes)
{
    stack_prefault = bytes;
}

struct thread_start {
    void *(*fn)(void *);
    void *arg;
};

static void *prefaulted_start(void *start_arg)
{
    struct thread_start start = *(struct thread_start *)start_arg;
    free(start_arg);
    unsigned char *stack = alloca(stack_prefault);
    memset(stack, 0, stack_prefault);
    __asm__ volatile("" : : "r"(stack) : "memory");
    return start.fn(start.arg);
}

int util_thread_start(pthread_t *joinable, void *(*fn)(void *), void *arg, size_t stack_size)
{
    struct thread_start *start = NULL;
    if (stack_prefault > 0 && stack_prefault < stack_size / 2) {
        if ((start = malloc(sizeof *start)) == NULL)
            return -ENOMEM;
        *start = (struct thread_start){fn, arg};
        fn = prefaulted_start;
        arg = start;
    }
    pthread_attr_t attr;
    pthread_t detached;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_size);
    if (joinable == NULL)
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(joinable ? joinable : &detached, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        free(start);
    return -rc;
}

int util_set_timeouts(int fd, int receive_seconds, int send_seconds)
{
    struct timeval receive = {receive_seconds, 0};
    struct timeval send = {send_seconds, 0};

    if (receive_seconds >= 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive, sizeof receive) < 0)
        return -errno;
    if (send_seconds >= 0 && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send, sizeof send) < 0)
        return -errno;
    return 0;
}

int util_runtime_dir(char *buf, size_t size)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    char user_dir[64];
    struct stat st;
    int n;

    snprintf(user_dir, sizeof user_dir, "/run/user/%u", (unsigned)geteuid());
    if (base != NULL && base[0] != '\0')
        n = snprintf(buf, size, "%s/uzram", base);
    else if (geteuid() == 0)
        n = snprintf(buf, size, "/run/uzram");
    else if (stat(user_dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
        n = snprintf(buf, size, "%s/uzram", user_dir);
    else
        n = snprintf(buf, size, "/tmp/uzram-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= size)
        return -ENAMETOOLONG;
    return 0;
}

/* The user who ran sudo, when this is root under sudo (SUDO_UID of another user); else -1. */
static long sudo_uid(void)
{
    const char *text = getenv("SUDO_UID");
    char *end;
    if (geteuid() != 0 || text == NULL || text[0] == '\0')
        return -1;
    errno = 0;
    unsigned long uid = strtoul(text, &end, 10);
    return errno || *end != '\0' || uid == 0 || uid > INT32_MAX ? -1 : (long)uid;
}

int util_sudo_runtime_dir(char *buf, size_t size)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    long uid = sudo_uid();
    if (uid < 0 || (base != NULL && base[0] != '\0'))
        return -ENOENT;
    int n = snprintf(buf, size, "/run/user/%ld/uzram", uid);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* Whose directories and sockets are trusted: this user's, root's, and under sudo those of
 * the user who ran it (whose servers the command is run for). */
static bool trusted_owner(uid_t uid)
{
    return uid == geteuid() || uid == 0 || (long)uid == sudo_uid();
}

int util_make_dir(const char *path)
{
    struct stat st;

    if (mkdir(path, 0700) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    if (stat(path, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

bool util_valid_name(const char *name)
{
    size_t length = strlen(name);

    /* A leading '-' would read as an option to the commands that take the
     * name ("uzram attr -rf ..."), and to rm or ls in a script. */
    if (length == 0 || length > UTIL_NAME_MAX || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0 || name[0] == '-')
        return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

void util_human_size(uint64_t bytes, char *buf, size_t size)
{
    static const char units[] = "BKMGTPE";
    int exponent = 0;

    while (exponent < 6 && bytes >= (UINT64_C(1) << (10 * (exponent + 1))))
        exponent++;
    if (exponent == 0) {
        snprintf(buf, size, "%lluB", (unsigned long long)bytes);
        return;
    }
    uint64_t unit = UINT64_C(1) << (10 * exponent);
    uint64_t whole = bytes / unit;
    /* One decimal, rounded, as zramctl does; "2.0" is shown as "2". */
    uint64_t tenths = ((bytes % unit) * 10 + unit / 2) / unit;
    if (tenths >= 10) {
        whole++;
        tenths = 0;
    }
    if (tenths == 0)
        snprintf(buf, size, "%llu%c", (unsigned long long)whole, units[exponent]);
    else
        snprintf(buf, size, "%llu.%llu%c", (unsigned long long)whole, (unsigned long long)tenths,
                 units[exponent]);
}

static const struct {
    int value;
    const char *name;
} errno_names[] = {
    {EPERM, "EPERM"},
    {ENOENT, "ENOENT"},
    {EIO, "EIO"},
    {ENOMEM, "ENOMEM"},
    {EACCES, "EACCES"},
    {EBUSY, "EBUSY"},
    {EEXIST, "EEXIST"},
    {EINVAL, "EINVAL"},
    {ENOSPC, "ENOSPC"},
    {ERANGE, "ERANGE"},
    {ENOTSUP, "ENOTSUP"},
    {EPROTO, "EPROTO"},
    {ENAMETOOLONG, "ENAMETOOLONG"},
    {EOVERFLOW, "EOVERFLOW"},
    {ENODEV, "ENODEV"},
    {ENXIO, "ENXIO"},
    {ETIMEDOUT, "ETIMEDOUT"},
    {ESHUTDOWN, "ESHUTDOWN"},
};

const char *util_errno_name(int err, char *buf, size_t size)
{
    for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
        if (errno_names[i].value == err)
            return errno_names[i].name;
    snprintf(buf, size, "E%d", err);
    return buf;
}

int util_errno_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
        if (strcmp(errno_names[i].name, name) == 0)
            return errno_names[i].value;
    return 0;
}

void util_json_string(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void util_table_figures(uint64_t disksize, char *text, size_t size)
{
    char table[16], memory[16];
    util_human_size(disksize / UZRAM_PAGE_SIZE * UZRAM_TABLE_BYTES_PER_PAGE, table, sizeof table);
    util_human_size((uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE), memory,
                    sizeof memory);
    snprintf(text, size,
             "its page table takes %s (%u bytes per 4 KiB page), and at most 1/%u of this "
             "machine's %s may go to one",
             table, UZRAM_TABLE_BYTES_PER_PAGE, UZRAM_TABLE_MEMORY_SHARE, memory);
}

int util_read_to_end(int fd, size_t max, uint64_t deadline_ms, char **out, size_t *length)
{
    char *text = NULL;
    size_t used = 0, capacity = 0;
    int rc = 0;
    *out = NULL;
    *length = 0;
    for (;;) {
        if (capacity - used < 4096 && capacity <= max) {
            capacity = capacity ? capacity * 2 : 8192;
            char *bigger = realloc(text, capacity + 1);
            if (bigger == NULL) {
                rc = -ENOMEM;
                break;
            }
            text = bigger;
        }
        uint64_t now = util_now_ms();
        if (now >= deadline_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        struct pollfd wait = {.fd = fd, .events = POLLIN};
        int ready = poll(&wait, 1, (int)(deadline_ms - now));
        if (ready < 0 && errno != EINTR) {
            rc = -errno;
            break;
        }
        if (ready <= 0)
            continue;
        /* One byte past `max` is asked for, to tell a reply of exactly `max` from a longer one. */
        size_t room = capacity - used < max + 1 - used ? capacity - used : max + 1 - used;
        ssize_t n = recv(fd, text + used, room, MSG_DONTWAIT);
        if (n == 0)
            break;
        if (n < 0 && errno != EINTR && errno != EAGAIN) {
            rc = -errno;
            break;
        }
        used += n > 0 ? (size_t)n : 0;
        if (used > max) {
            rc = -EFBIG;
            break;
        }
    }
    if (rc < 0) {
        free(text);
        return rc;
    }
    if (text != NULL)
        text[used] = '\0';
    *out = text;
    *length = used;
    return 0;
}

const char *util_private_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) < 0)
        return strerror(errno);
    if (!trusted_owner(st.st_uid))
        return "it belongs to another user";
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return "it is writable by other users";
    return NULL;
}

int util_trusted_dir(const char *dir, char *message, size_t message_size)
{
    const char *why = util_private_dir(dir);
    if (why == NULL)
        return 0;
    snprintf(message, message_size,
             "not trusting the sockets in %s: %s, so another user could have put them there; "
             "use a runtime directory of your own (XDG_RUNTIME_DIR, or -u DIR)",
             dir, why);
    return -EPERM;
}

int util_trusted_socket(const char *path, char *message, size_t message_size)
{
    char dir[PATH_MAX];
    struct stat st;
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == path ? 1 : slash - path) : 1,
             slash ? path : ".");
    int rc = util_trusted_dir(dir, message, message_size);
    if (rc == 0 && lstat(path, &st) == 0 && !trusted_owner(st.st_uid)) {
        snprintf(message, message_size,
                 "not trusting %s: it belongs to another user, who could answer anything", path);
        rc = -EPERM;
    }
    return rc;
}

bool util_process_alive(pid_t pid)
{
    if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
        return false;
    char path[32], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *file = fopen(path, "re");
    size_t n = file != NULL ? fread(stat, 1, sizeof stat - 1, file) : 0;
    if (file != NULL)
        fclose(file);
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* "PID (COMM) STATE ...": COMM may hold ')' */
    return end == NULL || end[1] != ' ' || (end[2] != 'Z' && end[2] != 'X');
}
