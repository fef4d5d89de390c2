/* test_attach.c - unit tests of `uzram attach`'s command lines (src/attach/nbd_client.c) and of
 * running its helpers (run_program, src/common/process.c). The nbd-client branch cannot run
 * without the kernel's nbd module: its command is checked here. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "attach/attach.h"
#include "common/clock.h"
#include "common/process.h"
#include "test_util.h"

static void assert_argv(const char *const *argv, const char *const *expected)
{
    size_t i = 0;
    for (; expected[i] != NULL; i++) {
        assert_non_null(argv[i]);
        assert_string_equal(argv[i], expected[i]);
    }
    assert_null(argv[i]);
}

static void test_nbd_client_connect(void **state)
{
    (void)state;
    const char *argv[NBD_CLIENT_ARGS_MAX];
    struct nbd_client_plan plan = {
        .socket = "/run/uzram/uzram0.sock",
        .export_name = "uzram0",
        .device = "/dev/nbd3",
    };
    /* netlink (nbd-client's default): no daemon stays behind; 4 KiB blocks, the engine's page;
     * a deadline on every request, so a dead server cannot hang the kernel's I/O. */
    const char *expected[] = {"nbd-client",  "-unix", "/run/uzram/uzram0.sock",
                              "/dev/nbd3",   "-name", "uzram0",
                              "-block-size", "4096",  "-timeout",
                              "20",          NULL};
    assert_int_equal(nbd_client_argv(&plan, argv), 10);
    assert_argv(argv, expected);

    plan.read_only = true;
    plan.swap = true; /* nothing to add: the kernel holds the socket, no client program stays */
    const char *expected_ro[] = {"nbd-client",  "-unix",     "/run/uzram/uzram0.sock",
                                 "/dev/nbd3",   "-name",     "uzram0",
                                 "-block-size", "4096",      "-timeout",
                                 "20",          "-readonly", NULL};
    assert_int_equal(nbd_client_argv(&plan, argv), 11);
    assert_argv(argv, expected_ro);
    assert_true(11 < NBD_CLIENT_ARGS_MAX);
}

static void test_nbd_client_refuses_bad_plans(void **state)
{
    (void)state;
    const char *argv[NBD_CLIENT_ARGS_MAX];
    struct nbd_client_plan plan = {.socket = "/s", .export_name = "x", .device = "/dev/loop0"};
    assert_int_equal(nbd_client_argv(&plan, argv), -EINVAL);
    plan.device = "/dev/nbd0";
    plan.socket = NULL;
    assert_int_equal(nbd_client_argv(&plan, argv), -EINVAL);
    plan.socket = "/s";
    plan.export_name = NULL;
    assert_int_equal(nbd_client_argv(&plan, argv), -EINVAL);
    assert_int_equal(nbd_client_disconnect_argv("/dev/sda", argv), -EINVAL);
    assert_int_equal(nbd_client_disconnect_argv(NULL, argv), -EINVAL);
}

static void test_nbd_client_disconnect(void **state)
{
    (void)state;
    const char *argv[NBD_CLIENT_ARGS_MAX];
    const char *expected[] = {"nbd-client", "-d", "/dev/nbd3", NULL};
    assert_int_equal(nbd_client_disconnect_argv("/dev/nbd3", argv), 3);
    assert_argv(argv, expected);
}

/* The helper that runs nbd-client (and modprobe): exit status, last line, deadline. */
static void test_run_program(void **state)
{
    (void)state;
    char message[256];
    const char *ok[] = {"sh", "-c", "echo first; echo last line >&2", NULL};
    assert_int_equal(run_program(ok, 5, message, sizeof message), 0);
    assert_string_equal(message, "last line");
    const char *failing[] = {"sh", "-c", "echo 'E: Cannot open NBD' >&2; exit 1", NULL};
    assert_int_equal(run_program(failing, 5, message, sizeof message), 1);
    assert_string_equal(message, "E: Cannot open NBD");
    const char *slow[] = {"sleep", "10", NULL};
    assert_int_equal(run_program(slow, 1, message, sizeof message), -ETIMEDOUT);
    const char *missing[] = {"no-such-program-uzram", NULL};
    assert_int_equal(run_program(missing, 1, message, sizeof message), -ENOENT);
    /* A daemon that keeps the output open does not hold the caller past its exit. */
    const char *daemon[] = {"sh", "-c", "sleep 3 & echo started", NULL};
    uint64_t start = util_now_ms();
    assert_int_equal(run_program(daemon, 5, message, sizeof message), 0);
    assert_true(util_now_ms() - start < 2000);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nbd_client_connect),
        cmocka_unit_test(test_nbd_client_refuses_bad_plans),
        cmocka_unit_test(test_nbd_client_disconnect),
        cmocka_unit_test(test_run_program),
    };
    test_apply_filter(argc, argv);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
