/* text.h - what the program writes and reads as words (text.c): device names, sizes as
 * zramctl prints them, errno names (the control protocol's), JSON strings, and what a
 * device's page table costs, for the messages that refuse one. */
#ifndef UZRAM_COMMON_TEXT_H
#define UZRAM_COMMON_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* true for names made of [A-Za-z0-9._-], 1..64 characters, not "." or "..",
 * not starting with '-'. */
#define UTIL_NAME_MAX 64
bool util_valid_name(const char *name);

/* Sizes the way util-linux zramctl prints them: 0B, 512B, 4K, 1.5M, 2G. */
void util_human_size(uint64_t bytes, char *buf, size_t size);
/* Write `text` to `out` as a JSON string, quotes included. */
void util_json_string(FILE *out, const char *text);

/* "EBUSY" for EBUSY (positive errno), "E<n>" for ones not in the table. */
const char *util_errno_name(int err, char *buf, size_t size);
/* Inverse of util_errno_name for the names the table knows; 0 if unknown. */
int util_errno_from_name(const char *name);

/* "its page table takes 256M (16 bytes per 4 KiB page), and at most 1/4 of this machine's
 * 24G may go to one": what a device of `disksize` bytes costs besides its data, for the
 * messages that refuse one (uzram_create's -E2BIG). */
void util_table_figures(uint64_t disksize, char *text, size_t size);

#endif
