/* zramgen_conf.c - reads zram-generator's configuration as zram-generator does (files and
 * precedence, INI sections, set! variables, the kernel's systemd.zram option) and works out
 * what each [zramN] device is in uzram: its size, memory limit, algorithms, writeback device,
 * swap or mount. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/zramgen.h"
#include "uzram.h"

#define FILE_MAX_BYTES (1u << 20)
#define FILES_MAX 256

/* The keys of a section, by zram-generator's names (the aliases it still takes after). */
static const struct {
    const char *name;
    enum zramgen_key key;
} keys[] = {
    {"host-memory-limit", ZG_HOST_MEMORY_LIMIT},
    {"memory-limit", ZG_HOST_MEMORY_LIMIT},
    {"zram-size", ZG_ZRAM_SIZE},
    {"zram-resident-limit", ZG_RESIDENT_LIMIT},
    {"compression-algorithm", ZG_COMPRESSION},
    {"writeback-device", ZG_WRITEBACK},
    {"swap-priority", ZG_SWAP_PRIORITY},
    {"mount-point", ZG_MOUNT_POINT},
    {"fs-type", ZG_FS_TYPE},
    {"options", ZG_OPTIONS},
    {"zram-fraction", ZG_FRACTION},
    {"max-zram-size", ZG_MAX_SIZE},
};

static void warn(const char *file, unsigned line, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void warn(const char *file, unsigned line, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "uzram: %s:%u: ", file, line);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
}

static char *trim(char *text)
{
    while (isspace((unsigned char)*text))
        text++;
    size_t length = strlen(text);
    while (length > 0 && isspace((unsigned char)text[length - 1]))
        text[--length] = '\0';
    return text;
}

/* A file's text (NUL-terminated), or NULL with errno; a missing file is errno ENOENT. */
static char *read_text(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *text = malloc(FILE_MAX_BYTES + 1);
    size_t length = 0;
    ssize_t n = 1;
    while (text != NULL && n > 0 && length <= FILE_MAX_BYTES) {
        n = read(fd, text + length, FILE_MAX_BYTES + 1 - length);
        if (n < 0 && errno == EINTR)
            n = 1;
        else if (n > 0)
            length += (size_t)n;
    }
    int err = text == NULL ? ENOMEM : n < 0 ? errno : length > FILE_MAX_BYTES ? EFBIG : 0;
    close(fd);
    if (err == 0 && memchr(text, '\0', length) != NULL)
        err = EINVAL;
    if (err != 0) {
        free(text);
        errno = err;
        return NULL;
    }
    text[length] = '\0';
    return text;
}

/* ------------------------------------------------------------------------
 * Which files, in which order
 * ---------------------------------------------------------------------- */

static const char *const base_dirs[] = {"/usr/lib", "/usr/local/lib", "/etc", "/run"};
#define BASE_COUNT (sizeof base_dirs / sizeof base_dirs[0])

static int compare_names(const void *a, const void *b)
{
    const char *x = strrchr(*(char *const *)a, '/'), *y = strrchr(*(char *const *)b, '/');
    return strcmp(x, y);
}

/* Add DIR/ *.conf to `list` (paths), replacing a file of the same name from an earlier dir. */
static int add_dropins(const char *dir, char **list, size_t *count)
{
    DIR *listing = opendir(dir);
    if (listing == NULL)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    struct dirent *entry;
    int rc = 0;
    while (rc == 0 && (entry = readdir(listing)) != NULL) {
        size_t length = strlen(entry->d_name);
        if (entry->d_name[0] == '.' || length <= 5 || strcmp(entry->d_name + length - 5, ".conf"))
            continue;
        char *path = malloc(strlen(dir) + length + 2);
        if (path == NULL) {
            rc = -ENOMEM;
            break;
        }
        sprintf(path, "%s/%s", dir, entry->d_name);
        size_t i = 0;
        while (i < *count && strcmp(strrchr(list[i], '/'), strrchr(path, '/')) != 0)
            i++;
        if (i < *count)
            free(list[i]);
        else if (*count == FILES_MAX)
            rc = -E2BIG;
        else
            (*count)++;
        if (rc == 0)
            list[i] = path;
        else
            free(path);
    }
    closedir(listing);
    return rc;
}

/* The files to read: the main file first, then the drop-ins sorted by name. */
static int locate(struct zramgen_config *config, const char *path, char **list, size_t *count)
{
    char buffer[PATH_MAX + 64];
    *count = 0;
    if (path != NULL) {
        size_t dropins = 0;
        list[(*count)++] = strdup(path);
        snprintf(buffer, sizeof buffer, "%s.d", path);
        int rc = add_dropins(buffer, list + 1, &dropins);
        qsort(list + 1, dropins, sizeof *list, compare_names);
        *count += dropins;
        return rc;
    }
    for (size_t i = BASE_COUNT; i-- > 0;) {
        snprintf(buffer, sizeof buffer, "%s%s/systemd/zram-generator.conf", config->root,
                 base_dirs[i]);
        if (access(buffer, F_OK) == 0) {
            list[(*count)++] = strdup(buffer);
            break;
        }
    }
    size_t first = *count, dropins = 0;
    for (size_t i = 0; i < BASE_COUNT; i++) {
        snprintf(buffer, sizeof buffer, "%s%s/systemd/zram-generator.conf.d", config->root,
                 base_dirs[i]);
        int rc = add_dropins(buffer, list + first, &dropins);
        if (rc < 0)
            return rc;
    }
    qsort(list + first, dropins, sizeof *list, compare_names);
    *count = first + dropins;
    return 0;
}

/* ------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------- */

static struct zramgen_device *device_of(struct zramgen_config *config, const char *name)
{
    struct zramgen_device *device = zramgen_device(config, name);
    if (device != NULL)
        return device;
    struct zramgen_device *bigger =
        realloc(config->devices, (config->device_count + 1) * sizeof *bigger);
    if (bigger == NULL)
        return NULL;
    config->devices = bigger;
    device = &config->devices[config->device_count++];
    memset(device, 0, sizeof *device);
    snprintf(device->name, sizeof device->name, "%s", name);
    return device;
}

/* [zramN]: "zram" and a number, as zram-generator takes them. */
static bool device_section(const char *name)
{
    if (strncmp(name, "zram", 4) != 0 || name[4] == '\0' || strlen(name) >= ZRAMGEN_NAME_MAX)
        return false;
    for (const char *p = name + 4; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    return true;
}

/* set!NAME = PROGRAM: the program's output, an expression, is a variable from then on. */
static int set_variable(struct zramgen_config *config, const char *file, unsigned line,
                        const char *name, const char *program, char *error, size_t error_size)
{
    size_t index = config->variable_count - 1; /* variables[0] is ram */
    if (index >= 32 || strlen(name) >= 64 || name[0] == '\0') {
        snprintf(error, error_size, "%s:%u: set!%s: too many variables or a bad name", file, line,
                 name);
        return -EINVAL;
    }
    char output[4096] = "";
    FILE *pipe = popen(program, "re");
    size_t length = pipe ? fread(output, 1, sizeof output - 1, pipe) : 0;
    int status = pipe ? pclose(pipe) : -1;
    output[length] = '\0';
    if (status != 0)
        warn(file, line, "set!%s: '%s' exited with status %d", name, program,
             status < 0 ? status : WEXITSTATUS(status));
    char why[256];
    double value;
    if (sizes_eval(trim(output), config->variables, config->variable_count, &value, why,
                   sizeof why) < 0) {
        snprintf(error, error_size, "%s:%u: set!%s: the output of '%s': %s", file, line, name,
                 program, why);
        return -EINVAL;
    }
    snprintf(config->variable_names[index], 64, "%s", name);
    config->variables[config->variable_count++] =
        (struct sizes_variable){config->variable_names[index], value};
    return 0;
}

/* One line of a [zramN] section: KEY = VALUE, the last setting winning. */
static void set_key(struct zramgen_device *device, const char *file, unsigned line, const char *key,
                    const char *value)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(keys[i].name, key) == 0) {
            device->set[keys[i].key] = (struct zramgen_setting){value, file, line};
            return;
        }
    }
    warn(file, line, "unknown key '%s' in [%s], ignored (zram-generator.conf(5) has none)", key,
         device->name);
}

/* A value in quotes loses them, as rust-ini (zram-generator's parser) takes it. */
static char *unquote(char *value)
{
    size_t length = strlen(value);
    if (length >= 2 && (value[0] == '"' || value[0] == '\'') && value[length - 1] == value[0]) {
        value[length - 1] = '\0';
        return value + 1;
    }
    return value;
}

static int parse_file(struct zramgen_config *config, const char *file, char *text, char *error,
                      size_t error_size)
{
    struct zramgen_device *device = NULL;
    bool global = true;
    unsigned line = 0;
    for (char *next = text; next != NULL && *next;) {
        char *start = next;
        next = strchr(start, '\n');
        if (next != NULL)
            *next++ = '\0';
        line++;
        char *content = trim(start);
        if (*content == '\0' || *content == '#' || *content == ';')
            continue;
        size_t length = strlen(content);
        if (content[0] == '[' && content[length - 1] == ']') {
            content[length - 1] = '\0';
            char *name = trim(content + 1);
            global = false;
            device = device_section(name) ? device_of(config, name) : NULL;
            if (device == NULL && device_section(name)) {
                snprintf(error, error_size, "out of memory");
                return -ENOMEM;
            }
            if (device == NULL)
                warn(file, line, "section [%s] ignored: devices are [zramN] sections", name);
            continue;
        }
        char *equals = strchr(content, '=');
        if (equals == NULL) {
            snprintf(error, error_size, "%s:%u: expected [SECTION] or KEY = VALUE, not '%s'", file,
                     line, content);
            return -EINVAL;
        }
        *equals = '\0';
        char *key = trim(content), *value = unquote(trim(equals + 1));
        if (global && strncmp(key, "set!", 4) == 0) {
            int rc = set_variable(config, file, line, key + 4, value, error, error_size);
            if (rc < 0)
                return rc;
        } else if (global) {
            warn(file, line, "'%s' before any section ignored: only set!VARIABLE goes there", key);
        } else if (device != NULL) {
            set_key(device, file, line, key, value);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * What each device is in uzram
 * ---------------------------------------------------------------------- */

/* zram-generator's sizes: an expression in MB (MiB) of `ram` (MemTotal in MB) and set!'s
 * variables, to bytes. `fallback` when the key is not set. */
static int size_of(const struct zramgen_config *config, const struct zramgen_device *device,
                   enum zramgen_key key, const char *fallback, uint64_t *bytes, char *error,
                   size_t error_size)
{
    const struct zramgen_setting *setting = &device->set[key];
    const char *text = setting->value ? setting->value : fallback;
    char why[512];
    double mib;
    if (sizes_eval(text, config->variables, config->variable_count, &mib, why, sizeof why) < 0) {
        snprintf(error, error_size, "%s:%u: %s", setting->file, setting->line, why);
        return -EINVAL;
    }
    if (isnan(mib) || mib < 0 || mib * 1048576.0 >= 18446744073709549568.0) {
        snprintf(error, error_size, "%s:%u: [%s] %s = %s comes to %g MB: not a size",
                 setting->file ? setting->file : "(default)", setting->line, device->name,
                 key == ZG_ZRAM_SIZE ? "zram-size" : "zram-resident-limit", text, mib);
        return -EINVAL;
    }
    *bytes = (uint64_t)(mib * 1048576.0);
    return 0;
}

/* "none", or a whole number of MB. */
static int optional_mb(const struct zramgen_setting *setting, const char *key, bool *given,
                       uint64_t *mb, char *error, size_t error_size)
{
    *given = false;
    if (setting->value == NULL || strcmp(setting->value, "none") == 0)
        return 0;
    char *end;
    errno = 0;
    *mb = strtoull(setting->value, &end, 10);
    if (errno || end == setting->value || *end != '\0' || setting->value[0] == '-') {
        snprintf(error, error_size, "%s:%u: %s '%s' is not a number of MB nor 'none'",
                 setting->file, setting->line, key, setting->value);
        return -EINVAL;
    }
    *given = true;
    return 0;
}

/* The disk size: zram-size, or the obsolete zram-fraction and max-zram-size. */
static int resolve_size(const struct zramgen_config *config, struct zramgen_device *device,
                        char *error, size_t error_size)
{
    const struct zramgen_setting *fraction = &device->set[ZG_FRACTION];
    uint64_t ram_mb = config->ram >> 20, max_mb = UINT64_MAX, bytes;
    bool limited;
    if (fraction->value == NULL && device->set[ZG_MAX_SIZE].value == NULL) {
        if (size_of(config, device, ZG_ZRAM_SIZE, "min(ram / 2, 4096)", &bytes, error, error_size) <
            0)
            return -EINVAL;
    } else {
        double share = 0.5;
        char *end = NULL;
        if (fraction->value != NULL)
            share = strtod(fraction->value, &end);
        if (end != NULL && (*end != '\0' || end == fraction->value || !(share >= 0))) {
            snprintf(error, error_size, "%s:%u: zram-fraction '%s' is not a number from 0",
                     fraction->file, fraction->line, fraction->value);
            return -EINVAL;
        }
        if (optional_mb(&device->set[ZG_MAX_SIZE], "max-zram-size", &limited, &max_mb, error,
                        error_size) < 0)
            return -EINVAL;
        uint64_t mb = (uint64_t)(share * (double)ram_mb);
        bytes = (limited && mb > max_mb ? max_mb : mb) << 20;
    }
    /* zram's disksize is whole pages (the kernel rounds it up); so is uzram's. */
    device->disksize = (bytes + UZRAM_PAGE_SIZE - 1) / UZRAM_PAGE_SIZE * UZRAM_PAGE_SIZE;
    if (device->disksize == 0)
        snprintf(device->why_not, sizeof device->why_not, "its size comes to 0");
    return 0;
}

/* An algorithm uzram has, by zram's name: lzo-rle is the kernel's lzo with runs of zeros
 * coded; uzram has lzo (liblzo2 has no lzo-rle). "" when uzram has none of that name. */
static const char *uzram_algorithm(const char *name, const struct zramgen_setting *where)
{
    int min, max, dflt;
    if (strcmp(name, "lzo-rle") == 0) {
        warn(where->file, where->line, "lzo-rle is the kernel's; uzram uses lzo");
        return "lzo";
    }
    if (uzram_algorithm_levels(name, &min, &max, &dflt) == 0)
        return name;
    char list[256] = "";
    uzram_algorithm_list(NULL, list, sizeof list);
    list[strcspn(list, "\n")] = '\0';
    warn(where->file, where->line, "uzram has no algorithm '%s' (it has: %s)", name, list);
    return "";
}

/* Split WORD, ALGO[(PARAMS)], at its '(' (zram-generator's closing ')' is optional): its
 * parameters, or NULL for none and for parentheses that do not match (warned about: not
 * used, where zram-generator hands them to the kernel, which refuses them). */
static char *split_params(char *word, const struct zramgen_setting *where)
{
    char *open = strchr(word, '(');
    if (open == NULL)
        return NULL;
    size_t length = strlen(open + 1); /* of the parameters, without a closing ')' */
    if (length > 0 && open[length] == ')')
        length--;
    if (strcspn(word, ")") < (size_t)(open - word) || strcspn(open + 1, "()") < length) {
        warn(where->file, where->line,
             "'%s': its parentheses do not match (ALGO(PARAMS) or (PARAMS)); its parameters "
             "are not used",
             word);
        *open = '\0';
        return NULL;
    }
    *open = '\0';
    open[1 + length] = '\0';
    return open + 1;
}

/* compression-algorithm = ALGO[(PARAMS)] [ALGO[(PARAMS)]...] [(PARAMS)]: the first is the
 * device's algorithm, the second its recompression algorithm (serve takes one); PARAMS are
 * comma-separated KEY=VALUE, of which uzram takes level (and, for recompression, dict and
 * group: serve --recompress's keys, which serve checks). What uzram does not take is warned
 * about, and the algorithm used instead named. */
static void resolve_compression(struct zramgen_device *device)
{
    const struct zramgen_setting *where = &device->set[ZG_COMPRESSION];
    char words[1024];
    snprintf(words, sizeof words, "%s", where->value ? where->value : "");
    unsigned priority = 0;
    char *save = NULL;
    for (char *word = strtok_r(words, " \t", &save); word; word = strtok_r(NULL, " \t", &save)) {
        char *params = split_params(word, where);
        if (word[0] == '\0') {
            /* Global recompression parameters: zram-generator writes them to zram's
             * recompress once, when it sets the empty device up. */
            if (params != NULL)
                warn(where->file, where->line,
                     "'(%s)': parameters without an algorithm are not used by uzram", params);
            continue;
        }
        if (priority > 1) {
            warn(where->file, where->line,
                 "uzram serve takes one recompression algorithm: '%s' (priority %u) is not set; "
                 "add it at run time: uzram attr %s recomp_algorithm 'algo=%s priority=%u'",
                 word, priority, device->name, word, priority);
            priority++;
            continue;
        }
        const char *name = uzram_algorithm(word, where);
        char spec[sizeof device->recompress] = "";
        if (name[0] != '\0' && priority == 0)
            snprintf(device->algorithm, sizeof device->algorithm, "%s", name);
        if (name[0] != '\0' && priority == 1)
            snprintf(spec, sizeof spec, "algo=%s", name);
        char *save_param = NULL;
        for (char *param = params ? strtok_r(params, ",", &save_param) : NULL; param && *name;
             param = strtok_r(NULL, ",", &save_param)) {
            param = trim(param);
            if (strncmp(param, "level=", 6) == 0 && priority == 0)
                snprintf(device->level, sizeof device->level, "%s", param + 6);
            else if ((strncmp(param, "level=", 6) == 0 || strncmp(param, "dict=", 5) == 0 ||
                      strncmp(param, "group=", 6) == 0) &&
                     priority == 1 && strlen(spec) + strlen(param) + 2 < sizeof spec)
                snprintf(spec + strlen(spec), sizeof spec - strlen(spec), ",%s", param);
            else
                warn(where->file, where->line, "'%s' of %s is not used by uzram", param, word);
        }
        if (priority == 1 && spec[0] != '\0')
            snprintf(device->recompress, sizeof device->recompress, "%s", spec);
        priority++;
    }
    if (device->algorithm[0] == '\0' && where->value != NULL &&
        where->value[strspn(where->value, " \t")] != '\0') {
        struct uzram_config defaults;
        uzram_config_init(&defaults);
        warn(where->file, where->line, "%s uses uzram's default algorithm, %s", device->name,
             defaults.comp_algorithm);
    }
}

/* An absolute path without "..", as zram-generator wants mount points and writeback devices. */
static int check_path(const struct zramgen_setting *setting, const char *key, char *error,
                      size_t error_size)
{
    const char *p = setting->value;
    if (p == NULL)
        return 0;
    if (p[0] != '/' || strstr(p, "/../") != NULL ||
        (strlen(p) >= 3 && strcmp(p + strlen(p) - 3, "/..") == 0)) {
        snprintf(error, error_size, "%s:%u: %s '%s' is not an absolute path without '..'",
                 setting->file, setting->line, key, p);
        return -EINVAL;
    }
    return 0;
}

static int resolve(const struct zramgen_config *config, struct zramgen_device *device, char *error,
                   size_t error_size)
{
    bool limited;
    uint64_t limit_mb;
    if (optional_mb(&device->set[ZG_HOST_MEMORY_LIMIT], "host-memory-limit", &limited, &limit_mb,
                    error, error_size) < 0 ||
        resolve_size(config, device, error, error_size) < 0 ||
        size_of(config, device, ZG_RESIDENT_LIMIT, "0", &device->mem_limit, error, error_size) <
            0 ||
        check_path(&device->set[ZG_MOUNT_POINT], "mount-point", error, error_size) < 0 ||
        check_path(&device->set[ZG_WRITEBACK], "writeback-device", error, error_size) < 0)
        return -EINVAL;
    if (limited && limit_mb < config->ram >> 20)
        snprintf(device->why_not, sizeof device->why_not,
                 "this machine has %llu MB, more than its host-memory-limit of %llu MB",
                 (unsigned long long)(config->ram >> 20), (unsigned long long)limit_mb);
    device->created = device->why_not[0] == '\0';
    const struct zramgen_setting *priority = &device->set[ZG_SWAP_PRIORITY];
    device->swap_priority = 100;
    if (priority->value != NULL) {
        char *end;
        long value = strtol(priority->value, &end, 10);
        if (*end != '\0' || end == priority->value || value < -1 || value > 32767) {
            snprintf(error, error_size, "%s:%u: swap-priority '%s' is not from -1 to 32767",
                     priority->file, priority->line, priority->value);
            return -EINVAL;
        }
        device->swap_priority = (int)value;
    }
    device->mount_point = device->set[ZG_MOUNT_POINT].value;
    device->fs_type = device->set[ZG_FS_TYPE].value;
    device->swap = device->mount_point == NULL &&
                   (device->fs_type == NULL || !strcmp(device->fs_type, "swap"));
    if (device->fs_type == NULL)
        device->fs_type = device->swap ? "swap" : "ext2";
    device->options = device->set[ZG_OPTIONS].value ? device->set[ZG_OPTIONS].value : "discard";
    device->writeback = device->set[ZG_WRITEBACK].value;
    /* Swapped-out pages must not take all memory (serve --swap wants a limit): without
     * zram-resident-limit, the bound kernel zram has by its size. */
    device->mem_limit_is_size = device->swap && device->mem_limit == 0;
    if (device->mem_limit_is_size)
        device->mem_limit = device->disksize;
    resolve_compression(device);
    return 0;
}

/* systemd.zram[=0|1] on the kernel command line, the last one counting: -1 none, 0, 1. */
static int kernel_option(const char *root)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/proc/cmdline", root);
    char *text = read_text(path);
    int found = -1;
    char *save = NULL;
    for (char *word = text ? strtok_r(text, " \t\n", &save) : NULL; word;
         word = strtok_r(NULL, " \t\n", &save)) {
        if (strncmp(word, "systemd.zram", 12) != 0)
            continue;
        const char *value = word + 12;
        if (!strcmp(value, "") || !strcmp(value, "=1") || !strcmp(value, "=yes") ||
            !strcmp(value, "=true") || !strcmp(value, "=on"))
            found = 1;
        else if (!strcmp(value, "=0") || !strcmp(value, "=no") || !strcmp(value, "=false") ||
                 !strcmp(value, "=off"))
            found = 0;
    }
    free(text);
    return found;
}

int zramgen_load(const char *path, struct zramgen_config **out, char *error, size_t error_size)
{
    struct zramgen_config *config = calloc(1, sizeof *config);
    char **list = calloc(FILES_MAX + 1, sizeof *list);
    if (config == NULL || list == NULL) {
        free(config);
        free(list);
        snprintf(error, error_size, "out of memory");
        return -ENOMEM;
    }
    const char *root = getenv("ZRAM_GENERATOR_ROOT");
    snprintf(config->root, sizeof config->root, "%s", root ? root : "");
    config->files = list;
    config->texts = calloc(FILES_MAX + 1, sizeof *config->texts);
    int rc = config->texts ? sizes_ram_bytes(config->root, &config->ram) : -ENOMEM;
    if (rc < 0)
        snprintf(error, error_size, "cannot read MemTotal from %s/proc/meminfo: %s", config->root,
                 strerror(-rc));
    config->variables[config->variable_count++] =
        (struct sizes_variable){"ram", (double)(config->ram >> 20)};
    int kernel = kernel_option(config->root);
    config->disabled = kernel == 0;
    if (rc == 0 && !config->disabled && (rc = locate(config, path, list, &config->file_count)) < 0)
        snprintf(error, error_size, "cannot list the configuration files: %s", strerror(-rc));
    for (size_t i = 0; rc == 0 && i < config->file_count; i++) {
        config->texts[i] = read_text(list[i]);
        if (config->texts[i] == NULL && (errno != ENOENT || path != NULL)) {
            rc = -errno;
            snprintf(error, error_size, "cannot read %s: %s", list[i], strerror(errno));
        } else if (config->texts[i] != NULL) {
            rc = parse_file(config, list[i], config->texts[i], error, error_size);
        }
    }
    if (rc == 0 && kernel == 1 && device_of(config, "zram0") == NULL)
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < config->device_count; i++)
        rc = resolve(config, &config->devices[i], error, error_size);
    if (rc < 0) {
        zramgen_free(config);
        return rc;
    }
    *out = config;
    return 0;
}

void zramgen_free(struct zramgen_config *config)
{
    if (config == NULL)
        return;
    for (size_t i = 0; i < FILES_MAX && config->files && config->files[i]; i++)
        free(config->files[i]);
    for (size_t i = 0; i < FILES_MAX && config->texts && config->texts[i]; i++)
        free(config->texts[i]);
    free(config->files);
    free(config->texts);
    free(config->devices);
    free(config);
}

struct zramgen_device *zramgen_device(struct zramgen_config *config, const char *name)
{
    for (size_t i = 0; i < config->device_count; i++)
        if (strcmp(config->devices[i].name, name) == 0)
            return &config->devices[i];
    return NULL;
}

/* A size for the command line: the largest of K, M, G that divides it. */
static const char *size_text(uint64_t bytes, char *buffer, size_t size)
{
    const char *units = "KMG";
    int unit = -1;
    while (unit < 2 && bytes % (1024ull << (10 * (unit + 1))) == 0)
        unit++;
    if (unit < 0)
        snprintf(buffer, size, "%llu", (unsigned long long)bytes);
    else
        snprintf(buffer, size, "%llu%c", (unsigned long long)(bytes >> (10 * (unit + 1))),
                 units[unit]);
    return buffer;
}

int zramgen_serve_argv(const struct zramgen_device *device, char storage[4][64],
                       char *argv[ZRAMGEN_ARGS_MAX])
{
    int n = 0;
    argv[n++] = "uzram serve";
    argv[n++] = "--name";
    argv[n++] = (char *)device->name;
    argv[n++] = "--size";
    argv[n++] = (char *)size_text(device->disksize, storage[0], 64);
    if (device->algorithm[0]) {
        argv[n++] = "--algorithm";
        argv[n++] = (char *)device->algorithm;
    }
    if (device->level[0]) {
        argv[n++] = "--level";
        argv[n++] = (char *)device->level;
    }
    if (device->mem_limit) {
        argv[n++] = "--mem-limit";
        argv[n++] = (char *)size_text(device->mem_limit, storage[1], 64);
    }
    if (device->recompress[0]) {
        argv[n++] = "--recompress";
        argv[n++] = (char *)device->recompress;
    }
    if (device->writeback) {
        argv[n++] = "--backing-file";
        argv[n++] = (char *)device->writeback;
    }
    if (device->swap)
        argv[n++] = "--swap";
    argv[n] = NULL;
    return n;
}
