/* sizes.h - sizes relative to the machine's memory: `--size 50%`, and zram-generator's size
 * expressions (`zram-size = min(ram / 2, 4096)`), evaluated as zram-generator does. */
#ifndef UZRAM_SIZES_H
#define UZRAM_SIZES_H

#include <stddef.h>
#include <stdint.h>

/* MemTotal of ROOT/proc/meminfo in bytes (root "" or NULL: this machine's), as zram-generator
 * reads it. 0, or -errno (-ENOENT when the file has no MemTotal line). */
int sizes_ram_bytes(const char *root, uint64_t *bytes);

/* A size option's value: a number with an optional K, M, G, T suffix (uzram_parse_size), or
 * a share of this machine's memory, "50%" (up to 3 decimals, at most 1000%), rounded down to
 * whole 4 KiB pages. 0, -EINVAL (not a size), -ERANGE (too large), or sizes_ram_bytes()'s
 * error for a share. */
int sizes_parse(const char *text, uint64_t *bytes);

/* A named value of an expression: `ram` and the variables of zram-generator's set!. */
struct sizes_variable {
    const char *name;
    double value;
};

/* Evaluate `text` in zram-generator's expression language as far as uzram knows it: numbers
 * (decimals, with fasteval's SI suffixes: 500k = 500000, 2G = 2e9; m u n p for 1e-3 ...),
 * the variables, + - * / % ^ (power), unary minus, parentheses, and the functions min(),
 * max() (any number of arguments), abs(), int(), ceil(), floor(), round(). 0 with *result,
 * or -EINVAL with a line in `error` saying what and where (an unknown name or function,
 * a missing parenthesis, text left over; like zram-generator, a text longer than 4096
 * characters or nested more than 32 deep in parentheses, function calls and signs). */
int sizes_eval(const char *text, const struct sizes_variable *variables, size_t count,
               double *result, char *error, size_t error_size);

#endif
