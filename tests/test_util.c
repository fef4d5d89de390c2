/* test_util.c - shared helpers for the unit and model tests.
 * The name filter that lets one binary run only its concurrent tests. */
#include "test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

void test_apply_filter(int argc, char **argv)
{
    static char pattern[256];
    const char *filter = argc > 1 ? argv[1] : getenv("UZRAM_TEST_FILTER");
    if (!filter || !*filter)
        return;
    if (strpbrk(filter, "*?"))
        snprintf(pattern, sizeof pattern, "%s", filter);
    else
        snprintf(pattern, sizeof pattern, "*%s*", filter);
    cmocka_set_test_filter(pattern);
}
