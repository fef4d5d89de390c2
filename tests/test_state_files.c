/* test_state_files.c - a state file must be this user's alone, the backing store's rule
 * (issue 39): uzram_create_in(), uzram_adopt() and uzram_state_info() refuse a file with a mode
 * that lets group or others in (-EACCES), a second hard link (-EMLINK) or another owner (-EPERM,
 * root only), before reading or changing a byte of it; a memfd (no name) and a file of mode 0600
 * are taken. The files are made in /dev/shm (the case is skipped, saying why, where that is not
 * a tmpfs). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cmocka.h>

#include "uzram.h"

#define TMPFS 0x01021994
#define DISK (4u << 20)

static char path[64], link_path[80];

/* A new file of mode `mode` in /dev/shm, opened read-write; skips the case without a tmpfs. */
static int new_file(mode_t mode)
{
    struct statfs fs;
    if (statfs("/dev/shm", &fs) < 0 || fs.f_type != TMPFS) {
        print_message("/dev/shm is not a tmpfs here: skipped\n");
        skip();
    }
    snprintf(path, sizeof path, "/dev/shm/uzram-test-state-%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, mode), 0);
    return fd;
}

static void remove_files(int fd)
{
    close(fd);
    unlink(path);
    if (link_path[0])
        unlink(link_path);
    link_path[0] = '\0';
}

static void make_refused(int fd, int expected)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK;
    struct uzram *dev = NULL, *adopted = NULL;
    struct uzram_state_info info;
    assert_int_equal(uzram_create_in(&config, fd, &dev), expected);
    assert_int_equal(uzram_adopt(fd, &adopted), expected);
    assert_int_equal(uzram_state_info(fd, &info), expected);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, 0); /* not sized, not written */
}

static void test_state_file_mode_refused(void **unused)
{
    (void)unused;
    int fd = new_file(0644);
    make_refused(fd, -EACCES);
    assert_int_equal(fchmod(fd, 0604), 0);
    make_refused(fd, -EACCES);
    /* the same file for this user alone is taken */
    assert_int_equal(fchmod(fd, 0600), 0);
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK;
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    unsigned char page[4096];
    memset(page, 0x5a, sizeof page);
    assert_int_equal(uzram_write(dev, 0, page, sizeof page), 0);
    uzram_destroy(dev);
    /* a state widened to its group since: not taken over, not a byte changed */
    assert_int_equal(fchmod(fd, 0640), 0);
    unsigned char before[8192], after[8192];
    assert_int_equal(pread(fd, before, sizeof before, 0), (ssize_t)sizeof before);
    struct uzram *adopted = NULL;
    assert_int_equal(uzram_adopt(fd, &adopted), -EACCES);
    assert_int_equal(pread(fd, after, sizeof after, 0), (ssize_t)sizeof after);
    assert_memory_equal(before, after, sizeof before);
    assert_int_equal(fchmod(fd, 0600), 0);
    assert_int_equal(uzram_adopt(fd, &adopted), 0);
    unsigned char back[4096];
    assert_int_equal(uzram_read(adopted, 0, back, sizeof back), 0);
    assert_memory_equal(back, page, sizeof page);
    uzram_destroy(adopted);
    remove_files(fd);
}

static void test_state_file_links_refused(void **unused)
{
    (void)unused;
    int fd = new_file(0600);
    snprintf(link_path, sizeof link_path, "%s-link", path);
    assert_int_equal(link(path, link_path), 0);
    make_refused(fd, -EMLINK);
    /* with the other name gone it is taken */
    assert_int_equal(unlink(link_path), 0);
    link_path[0] = '\0';
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK;
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    uzram_destroy(dev);
    remove_files(fd);
}

static void test_state_file_owner_refused(void **unused)
{
    (void)unused;
    if (geteuid() != 0) {
        print_message("giving a file to another user needs root: skipped\n");
        skip();
    }
    int fd = new_file(0600);
    assert_int_equal(fchown(fd, 65534, 65534), 0);
    make_refused(fd, -EPERM);
    remove_files(fd);
}

/* A memfd has no name, and mode 0777: only its owner counts. */
static void test_state_memfd_taken(void **unused)
{
    (void)unused;
    int fd = memfd_create("uzram-test-state", MFD_CLOEXEC);
    assert_true(fd >= 0);
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK;
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    uzram_destroy(dev);
    struct uzram_state_info info;
    assert_int_equal(uzram_state_info(fd, &info), 0);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    uzram_destroy(dev);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_file_mode_refused),
        cmocka_unit_test(test_state_file_links_refused),
        cmocka_unit_test(test_state_file_owner_refused),
        cmocka_unit_test(test_state_memfd_taken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
