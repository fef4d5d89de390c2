/* version.c - the library's version, as uzram.h's UZRAM_VERSION_* give it, for a program to
 * ask the library it runs with. */
#include "uzram.h"

unsigned uzram_version_number(void)
{
    return UZRAM_VERSION_NUMBER;
}

const char *uzram_version(void)
{
    return UZRAM_VERSION_STRING;
}
