/* persist.c - `serve --persist[=PATH]` (persist.h): where each device's state lives so that it
 * outlives the server, a file on tmpfs or a memfd in systemd's descriptor store, the states
 * handed over at start (LISTEN_FDNAMES "state-NAME": the store's, or the previous process's
 * after a planned restart), and the list of them a planned restart hands on. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "attach/attach.h"
#include "common/systemd.h"
#include "common/text.h"
#include "server/persist.h"

#define complain(to, ...) option_complain(to, __VA_ARGS__)

/* A device's state, while the device lives. */
struct state {
    char name[65];
    int fd;
    bool stored;       /* a memfd in the descriptor store */
    bool created_file; /* PATH was made by this process and nothing was stored in it yet */
    char path[PATH_MAX];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct state states[SYSTEMD_MAX_STATES];
static size_t state_count;
/* The handed-over states taken by a device so far (systemd_states()' order). */
static bool claimed[SYSTEMD_MAX_STATES];

/* The state handed over for device `name` ("state-NAME"), its index, or -1. */
static int handed_over(const char *name)
{
    size_t count;
    const struct systemd_socket *handed = systemd_states(&count);
    for (size_t i = 0; i < count; i++)
        if (strcmp(handed[i].name + strlen(SYSTEMD_STATE_PREFIX), name) == 0)
            return (int)i;
    return -1;
}

/* Whether the super options of the mount whose device is `dev` (/proc/self/mountinfo: the
 * options after " - FSTYPE SOURCE ") include `option`. */
static bool mount_has_option(dev_t dev, const char *option)
{
    FILE *mounts = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    bool found = false;
    while (mounts != NULL && !found && fgets(line, sizeof line, mounts)) {
        unsigned major_number, minor_number;
        char *dash = strstr(line, " - ");
        if (dash == NULL || sscanf(line, "%*u %*u %u:%u", &major_number, &minor_number) != 2 ||
            makedev(major_number, minor_number) != dev)
            continue;
        char fstype[64], source[PATH_MAX], options[2048];
        if (sscanf(dash, " - %63s %4095s %2047s", fstype, source, options) != 3)
            continue;
        for (char *save = NULL, *word = strtok_r(options, ",", &save); word && !found;
             word = strtok_r(NULL, ",", &save))
            found = strcmp(word, option) == 0;
    }
    if (mounts != NULL)
        fclose(mounts);
    return found;
}

/* The state of a swap device (`swap_bytes`: what it may grow to, its --mem-limit and page
 * table) in PATH: on a file system whose pages are never swapped out, since between a server's
 * death and its successor's start nothing keeps them locked, and the kernel would swap them
 * onto the device itself, which only a server can read back (a hang); and with room for it,
 * since in a full tmpfs its writes, which are swap-outs, fail (lib/state/state.c's hold_mapped).
 * 0, or -1 after a complaint. */
static int check_swap_state(const struct complaints *to, const struct label *label,
                            const char *name, const char *persist, uint64_t swap_bytes)
{
    static const char mount_hint[] =
        "mount -t tmpfs -o noswap,size=SIZE,mode=0700 uzram-state /run/uzram-state";
    if (persist[0] == '\0') {
        complain(to,
                 "%s%s without PATH keeps the state of swap device %s in a memfd, which the "
                 "kernel may swap out onto that device while no server runs: give %s=PATH on "
                 "a tmpfs mounted with noswap (Linux 6.4+): %s",
                 label->where, label->name, name, label->name, mount_hint);
        return -1;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", persist);
    char *slash = strrchr(dir, '/');
    slash[slash == dir ? 1 : 0] = '\0';
    struct stat st;
    struct statfs fs;
    if (stat(dir, &st) < 0 || statfs(dir, &fs) < 0) {
        complain(to, "%s%s '%s': %s: %s", label->where, label->name, persist, dir, strerror(errno));
        return -1;
    }
    if (fs.f_type == TMPFS_MAGIC && !mount_has_option(st.st_dev, "noswap")) {
        complain(to,
                 "%s%s '%s': the state of swap device %s must be on a file system that never "
                 "swaps it out, or while no server runs the kernel may swap it onto the device "
                 "itself, which only a server can read back; %s is a tmpfs without noswap: "
                 "put the state on one with it (Linux 6.4+): %s",
                 label->where, label->name, persist, name, dir, mount_hint);
        return -1;
    }
    struct stat file;
    uint64_t held = stat(persist, &file) == 0 ? (uint64_t)file.st_blocks * 512 : 0;
    uint64_t room = (uint64_t)fs.f_bavail * (uint64_t)fs.f_bsize + held;
    if (fs.f_type == TMPFS_MAGIC && fs.f_blocks != 0 && room < swap_bytes) {
        complain(to,
                 "%s%s '%s': %s has %llu MiB for the state, and that of swap device %s may "
                 "grow to %llu MiB (--mem-limit and the page table); in a full tmpfs swap-outs "
                 "fail: give the tmpfs size=%lluM or more",
                 label->where, label->name, persist, dir, (unsigned long long)(room >> 20), name,
                 (unsigned long long)((swap_bytes + (1u << 20) - 1) >> 20),
                 (unsigned long long)((swap_bytes + (1u << 20) - 1) >> 20));
        return -1;
    }
    return 0;
}

int persist_check(const struct complaints *to, const struct label *label, const char *name,
                  const char *persist, bool hot_add, const char *conflict, uint64_t swap_bytes)
{
    if (hot_add) {
        complain(to,
                 "%s%s: a hot-added device cannot persist (the next server would not know its "
                 "settings): add it with persist=no (uzram hot-add %s SIZE --persist=no), or "
                 "serve it from the configuration with persist = PATH",
                 label->where, label->name, name);
        return -1;
    }
    if (conflict != NULL) {
        complain(to, "%s%s cannot keep %s yet: drop one of them", label->where, label->name,
                 conflict);
        return -1;
    }
    if (persist[0] != '\0' && persist[0] != '/') {
        complain(to,
                 "%s%s '%s': give an absolute path (the next server finds the state by it), "
                 "e.g. /dev/shm/%s.uzram",
                 label->where, label->name, persist, name);
        return -1;
    }
    if (persist[0] == '\0' && !systemd_can_store() && handed_over(name) < 0) {
        complain(to,
                 "%s%s without PATH keeps the state in systemd's file descriptor store, and no "
                 "service manager runs this server (NOTIFY_SOCKET is unset): give %s=PATH, a "
                 "file on tmpfs such as /dev/shm/%s.uzram",
                 label->where, label->name, label->name, name);
        return -1;
    }
    return swap_bytes != 0 ? check_swap_state(to, label, name, persist, swap_bytes) : 0;
}

/* Open (or create) the state file PATH for device `name`: a regular file on tmpfs (a disk
 * file system would write every page out), the server's user's alone (the library's rule,
 * checked on what was opened before it is read or locked: another user's file is left as it
 * is), locked for this server. A new one is made with O_EXCL, mode 0600: never through a
 * symbolic link, never a file somebody made first. Returns the descriptor, or -1 after a
 * complaint. */
static int open_file(const struct complaints *to, const struct label *label, const char *path,
                     bool *created)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    *created = false;
    if (fd < 0 && errno == ENOENT) {
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_CREAT | O_EXCL, 0600);
        *created = fd >= 0;
    }
    if (fd < 0) {
        complain(to, "%scannot open %s '%s': %s", label->where, label->name, path, strerror(errno));
        return -1;
    }
    struct stat st;
    struct statfs fs;
    struct uzram_state_info info;
    char refusal[PATH_MAX + 256];
    const char *why = NULL;
    int rc;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        why = "is not a regular file";
    else if (fstatfs(fd, &fs) < 0 || (fs.f_type != TMPFS_MAGIC && fs.f_type != RAMFS_MAGIC))
        why = "is not on tmpfs (every page would go to disk): put it in /dev/shm or /run";
    else if ((rc = uzram_state_info(fd, &info)) < 0 &&
             private_file_refusal(path, &st, rc, "the state", refusal, sizeof refusal))
        why = refusal;
    else if (flock(fd, LOCK_EX | LOCK_NB) < 0)
        why = errno == EWOULDBLOCK ? "is the state of a server that runs: stop it, or give this "
                                     "device a PATH of its own"
                                   : strerror(errno);
    if (why != NULL) {
        complain(to, "%s%s '%s'%s%s", label->where, label->name, path, why == refusal ? ": " : " ",
                 why);
        if (*created)
            unlink(path);
        close(fd);
        return -1;
    }
    return fd;
}

/* The descriptor of device `name`'s state: handed over, PATH, or a new memfd. */
static int state_fd(const struct complaints *to, const struct label *label, const char *name,
                    struct state *state)
{
    int handed = handed_over(name);
    if (handed >= 0) {
        size_t count;
        claimed[handed] = true;
        state->stored = systemd_can_store() && state->path[0] == '\0';
        return systemd_states(&count)[handed].fd;
    }
    if (state->path[0] != '\0')
        return open_file(to, label, state->path, &state->created_file);
    char memfd_name[80];
    snprintf(memfd_name, sizeof memfd_name, "uzram-state-%s", name);
    int fd = memfd_create(memfd_name, MFD_CLOEXEC);
    if (fd < 0)
        complain(to, "cannot make the state of %s: memfd_create: %s", name, strerror(errno));
    state->stored = true;
    return fd;
}

/* A state the library found damaged (uzram_state_damage() says where): refused, left as it is. */
static void damaged(const struct complaints *to, const char *where)
{
    complain(to,
             "cannot take over %s: the state is damaged: %s; it is left as it is: move it away "
             "to look at it, or remove it to start empty (what it held is lost)",
             where, uzram_state_damage());
}

/* Take over the state in `fd` (it holds one): the same size, algorithm and dedup setting as
 * `config`, or refused, so that a changed configuration does not silently serve other
 * settings. */
static int adopt(const struct complaints *to, const char *where, const struct uzram_config *config,
                 int fd, struct uzram **dev)
{
    struct uzram_state_info info;
    int rc = uzram_state_info(fd, &info);
    char size[16], wanted[16];
    if (rc == -EUCLEAN) {
        damaged(to, where);
        return -1;
    }
    if (rc == -EPROTONOSUPPORT) {
        complain(to,
                 "%s holds a state of format version %u, and this uzram reads version %u: run "
                 "the uzram that wrote it, or remove the state to start empty",
                 where, info.version, info.supported_version);
        return -1;
    }
    if (rc < 0) {
        complain(to, "%s is not a uzram state (%s): give another, or remove it to start empty",
                 where, strerror(-rc));
        return -1;
    }
    if (info.owner_alive && info.owner_pid != getpid()) {
        complain(to, "%s is the state of process %d, which runs: stop it first", where,
                 (int)info.owner_pid);
        return -1;
    }
    if (info.disksize != config->disksize ||
        strcmp(info.comp_algorithm, config->comp_algorithm) != 0) {
        util_human_size(info.disksize, size, sizeof size);
        util_human_size(config->disksize, wanted, sizeof wanted);
        complain(to,
                 "%s holds a %s %s device, not %s %s as asked: give its size and algorithm "
                 "(--size %s --algorithm %s), or remove the state to start empty",
                 where, size, info.comp_algorithm, wanted, config->comp_algorithm, size,
                 info.comp_algorithm);
        return -1;
    }
    if (info.use_dedup != config->use_dedup) {
        complain(to,
                 "%s holds a device with dedup %s, not %s as asked: give --dedup=%s, or remove "
                 "the state to start empty",
                 where, info.use_dedup ? "on" : "off", config->use_dedup ? "on" : "off",
                 info.use_dedup ? "yes" : "no");
        return -1;
    }
    rc = uzram_adopt(fd, dev);
    if (rc == -EUCLEAN)
        damaged(to, where);
    else if (rc == -ENOENT || rc == -ESTALE) /* the state is there: its backing store is not */
        complain(to,
                 "cannot take over %s: the backing file its pages were written back to is %s: "
                 "put it back as it was, or remove the state to start empty",
                 where, rc == -ENOENT ? "missing" : "another file now (not the size it had)");
    else if (rc < 0)
        complain(to, "cannot take over %s: %s", where, strerror(-rc));
    return rc < 0 ? -1 : 0;
}

int persist_make(const struct complaints *to, const struct label *label, const char *name,
                 const char *persist, const struct uzram_config *config, struct uzram **dev)
{
    struct state state = {.fd = -1};
    snprintf(state.name, sizeof state.name, "%s", name);
    snprintf(state.path, sizeof state.path, "%s", persist);
    pthread_mutex_lock(&lock);
    int rc = state_count == SYSTEMD_MAX_STATES ? -1 : 0;
    if (rc < 0)
        complain(to, "more than %d devices with a state", SYSTEMD_MAX_STATES);
    if (rc == 0)
        rc = state.fd = state_fd(to, label, name, &state);
    struct stat st;
    if (rc >= 0 && fstat(state.fd, &st) < 0) {
        complain(to, "cannot read the state of %s: %s", name, strerror(errno));
        rc = -1;
    }
    if (rc >= 0 && st.st_size > 0) {
        char where[2 * PATH_MAX + 160];
        if (state.path[0] != '\0')
            snprintf(where, sizeof where, "%s%s '%.*s'", label->where, label->name, PATH_MAX,
                     state.path);
        else
            snprintf(where, sizeof where, "the state of %s (descriptor store)", name);
        rc = adopt(to, where, config, state.fd, dev);
    } else if (rc >= 0) {
        rc = uzram_create_in(config, state.fd, dev);
        if (rc == -ENOSPC)
            complain(to,
                     "cannot make device %s in its state: its tmpfs has no room for the page "
                     "table (%llu MiB: 16 bytes a 4 KiB page, allocated whole on a tmpfs with "
                     "a size): give the tmpfs a larger size=, or the device a smaller size",
                     name, (unsigned long long)((config->disksize / 256 + (1u << 20) - 1) >> 20));
        else if (rc < 0)
            complain(to, "cannot make device %s in its state: %s", name, strerror(-rc));
    }
    if (rc >= 0 && state.stored) {
        int sent = systemd_store(state.fd, name);
        if (sent < 0)
            fprintf(stderr, "uzram: %s: cannot put the state in the descriptor store: %s\n", name,
                    strerror(-sent));
    }
    if (rc >= 0) {
        states[state_count++] = state;
        rc = 0;
    } else if (state.fd >= 0) {
        if (state.created_file)
            unlink(state.path);
        if (handed_over(name) < 0)
            close(state.fd);
        rc = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void persist_forget(const char *name, bool undo)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < state_count; i++) {
        struct state *state = &states[i];
        if (strcmp(state->name, name) != 0)
            continue;
        if (state->stored)
            systemd_unstore(name);
        if (undo && state->created_file)
            unlink(state->path);
        close(state->fd);
        states[i] = states[--state_count];
        break;
    }
    pthread_mutex_unlock(&lock);
}

void persist_leftovers(void)
{
    size_t count;
    const struct systemd_socket *handed = systemd_states(&count);
    for (size_t i = 0; i < count; i++) {
        if (claimed[i])
            continue;
        fprintf(stderr,
                "uzram: a state named %s was handed over, and this server has no device %s with "
                "persist: left as it is (in the descriptor store until the unit stops); serve "
                "%s again with persist to take it over\n",
                handed[i].name, handed[i].name + strlen(SYSTEMD_STATE_PREFIX),
                handed[i].name + strlen(SYSTEMD_STATE_PREFIX));
        close(handed[i].fd);
        claimed[i] = true;
    }
}

bool persist_has(const char *name)
{
    pthread_mutex_lock(&lock);
    bool found = false;
    for (size_t i = 0; i < state_count && !found; i++)
        found = strcmp(states[i].name, name) == 0;
    pthread_mutex_unlock(&lock);
    return found;
}

size_t persist_list(int *fds, char (*names)[128], size_t max)
{
    pthread_mutex_lock(&lock);
    size_t count = 0;
    for (; count < state_count && count < max; count++) {
        fds[count] = states[count].fd;
        snprintf(names[count], 128, "%s%.64s", SYSTEMD_STATE_PREFIX, states[count].name);
    }
    pthread_mutex_unlock(&lock);
    return count;
}
