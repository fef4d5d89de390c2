/* sizes.c - sizes relative to the machine's memory: MemTotal, "N%" for size options, and the
 * arithmetic of zram-generator's zram-size (a recursive descent parser over the text). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sizes.h"
#include "uzram.h"

/* zram-generator's parser (fasteval) refuses an expression longer than 4096 bytes or nested
 * more than 32 deep; uzram refuses the same ones, and its recursion stays bounded by them. */
#define EXPR_TEXT_MAX 4096
#define EXPR_DEPTH_MAX 32

int sizes_ram_bytes(const char *root, uint64_t *bytes)
{
    char path[4096], line[256];
    snprintf(path, sizeof path, "%s/proc/meminfo", root ? root : "");
    FILE *file = fopen(path, "re");
    if (file == NULL)
        return -errno;
    int rc = -ENOENT;
    unsigned long long kib;
    while (rc == -ENOENT && fgets(line, sizeof line, file) != NULL)
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
            rc = 0;
    fclose(file);
    if (rc == 0)
        *bytes = (uint64_t)kib * 1024;
    return rc;
}

int sizes_parse(const char *text, uint64_t *bytes)
{
    size_t length = strlen(text);
    if (length == 0 || text[length - 1] != '%')
        return uzram_parse_size(text, bytes);
    /* A share of memory: digits, at most 3 decimals, then '%'. */
    uint64_t thousandths = 0, ram;
    size_t i = 0, decimals = 0;
    bool point = false;
    for (; i < length - 1; i++) {
        if (text[i] == '.' && !point && i > 0) {
            point = true;
        } else if (isdigit((unsigned char)text[i]) && decimals < 3) {
            thousandths = thousandths * 10 + (uint64_t)(text[i] - '0');
            decimals += point;
            if (thousandths > 1000 * 1000 * 1000)
                return -ERANGE;
        } else {
            return -EINVAL;
        }
    }
    if (i == 0 || text[i - 1] == '.')
        return -EINVAL;
    for (; decimals < 3; decimals++)
        thousandths *= 10;
    if (thousandths > 1000 * 1000)
        return -ERANGE; /* more than 1000% */
    int rc = sizes_ram_bytes(NULL, &ram);
    if (rc < 0)
        return rc;
    /* RAM is below 2^50 and thousandths at most 10^6 < 2^20: no overflow. */
    *bytes = ram / 4096 * thousandths / 100000 * 4096;
    return 0;
}

/* ------------------------------------------------------------------------
 * zram-generator's expressions
 * ---------------------------------------------------------------------- */

struct parser {
    const char *text, *at;
    const struct sizes_variable *variables;
    size_t count;
    char *error;
    size_t error_size;
    unsigned depth; /* the parentheses, function calls and unary signs around p->at */
    bool failed;
};

static double parse_sum(struct parser *p);

static void skip_space(struct parser *p)
{
    while (isspace((unsigned char)*p->at))
        p->at++;
}

static double fail(struct parser *p, const char *what)
{
    if (!p->failed)
        snprintf(p->error, p->error_size, "%s at column %d of '%s'", what,
                 (int)(p->at - p->text) + 1, p->text);
    p->failed = true;
    return 0;
}

/* One level deeper, for a '(', a function's arguments or a unary sign (fasteval's count):
 * false, failed, past EXPR_DEPTH_MAX. The caller calls leave() after a true. */
static bool enter(struct parser *p)
{
    if (p->depth >= EXPR_DEPTH_MAX) {
        char what[128];
        snprintf(what, sizeof what,
                 "nested more than %d deep (parentheses, functions, signs; zram-generator's "
                 "limit too)",
                 EXPR_DEPTH_MAX);
        fail(p, what);
        return false;
    }
    p->depth++;
    return true;
}

static void leave(struct parser *p)
{
    p->depth--;
}

/* fasteval's suffixes: k K M G T, and m u n p for the small ones. */
static double suffix(struct parser *p)
{
    static const struct {
        char letter;
        double factor;
    } suffixes[] = {{'k', 1e3},  {'K', 1e3},  {'M', 1e6},  {'G', 1e9},  {'T', 1e12},
                    {'m', 1e-3}, {'u', 1e-6}, {'n', 1e-9}, {'p', 1e-12}};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        if (*p->at == suffixes[i].letter && !isalnum((unsigned char)p->at[1]) && p->at[1] != '_') {
            p->at++;
            return suffixes[i].factor;
        }
    }
    return 1;
}

static double number(struct parser *p)
{
    const char *start = p->at;
    while (isdigit((unsigned char)*p->at) || *p->at == '.')
        p->at++;
    char digits[64];
    if (p->at - start >= (long)sizeof digits)
        return fail(p, "number too long");
    snprintf(digits, sizeof digits, "%.*s", (int)(p->at - start), start);
    char *end;
    double value = strtod(digits, &end);
    if (*end != '\0' || end == digits) {
        p->at = start;
        return fail(p, "bad number");
    }
    return value * suffix(p);
}

/* The arguments of a function, after its '(': at most 16. Returns how many. */
static size_t arguments(struct parser *p, double *values)
{
    size_t count = 0;
    skip_space(p);
    if (*p->at == ')') {
        p->at++;
        return 0;
    }
    if (!enter(p))
        return 0;
    for (;;) {
        double value = parse_sum(p);
        if (count < 16)
            values[count++] = value;
        else
            fail(p, "more than 16 arguments");
        skip_space(p);
        if (*p->at == ',') {
            p->at++;
        } else if (*p->at == ')') {
            p->at++;
            break;
        } else {
            fail(p, "expected ',' or ')'");
            break;
        }
        if (p->failed)
            break;
    }
    leave(p);
    return count;
}

static double call(struct parser *p, const char *name, size_t length)
{
    double values[16];
    const char *at = p->at;
    size_t count = arguments(p, values);
    if (p->failed)
        return 0;
    bool is_min = length == 3 && strncmp(name, "min", 3) == 0;
    if (is_min || (length == 3 && strncmp(name, "max", 3) == 0)) {
        if (count == 0)
            return fail(p, is_min ? "min() needs an argument" : "max() needs an argument");
        double best = values[0];
        for (size_t i = 1; i < count; i++)
            best = is_min ? fmin(best, values[i]) : fmax(best, values[i]);
        return best;
    }
    static const struct {
        const char *name;
        double (*fn)(double);
    } one[] = {{"abs", fabs}, {"int", trunc}, {"ceil", ceil}, {"floor", floor}, {"round", round}};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
        if (strlen(one[i].name) != length || strncmp(name, one[i].name, length) != 0)
            continue;
        if (count != 1) {
            p->at = at;
            return fail(p, "this function takes one argument");
        }
        return one[i].fn(values[0]);
    }
    p->at = name;
    return fail(p, "unknown function (uzram knows min, max, abs, int, ceil, floor, round)");
}

static double primary(struct parser *p)
{
    skip_space(p);
    if (*p->at == '(') {
        if (!enter(p))
            return 0;
        p->at++;
        double value = parse_sum(p);
        leave(p);
        skip_space(p);
        if (*p->at != ')')
            return fail(p, "expected ')'");
        p->at++;
        return value;
    }
    if (isdigit((unsigned char)*p->at) || *p->at == '.')
        return number(p);
    if (!isalpha((unsigned char)*p->at) && *p->at != '_')
        return fail(p, *p->at ? "unexpected character" : "unexpected end");
    const char *name = p->at;
    while (isalnum((unsigned char)*p->at) || *p->at == '_')
        p->at++;
    size_t length = (size_t)(p->at - name);
    const char *after = p->at;
    skip_space(p);
    if (*p->at == '(') {
        p->at++;
        return call(p, name, length);
    }
    p->at = after;
    for (size_t i = 0; i < p->count; i++)
        if (strlen(p->variables[i].name) == length &&
            strncmp(p->variables[i].name, name, length) == 0)
            return p->variables[i].value;
    p->at = name;
    return fail(p, "unknown variable");
}

/* '^' binds tighter than unary minus on its left (-2^2 = -4) and is right-associative. A sign
 * is a level of nesting unless a number follows it at once (fasteval reads "-2" as one
 * number); a chain of '^' is none, as in fasteval: EXPR_TEXT_MAX bounds it. */
static double power(struct parser *p)
{
    skip_space(p);
    if (*p->at == '-' || *p->at == '+') {
        bool nested = !isdigit((unsigned char)p->at[1]) && p->at[1] != '.';
        if (nested && !enter(p))
            return 0;
        bool negative = *p->at++ == '-';
        double value = power(p);
        if (nested)
            leave(p);
        return negative ? -value : value;
    }
    double base = primary(p);
    skip_space(p);
    if (*p->at != '^')
        return base;
    p->at++;
    return pow(base, power(p));
}

static double product(struct parser *p)
{
    double value = power(p);
    for (;;) {
        skip_space(p);
        char op = *p->at;
        if (p->failed || (op != '*' && op != '/' && op != '%'))
            return value;
        p->at++;
        double right = power(p);
        value = op == '*' ? value * right : op == '/' ? value / right : fmod(value, right);
    }
}

static double parse_sum(struct parser *p)
{
    double value = product(p);
    for (;;) {
        skip_space(p);
        char op = *p->at;
        if (p->failed || (op != '+' && op != '-'))
            return value;
        p->at++;
        double right = product(p);
        value = op == '+' ? value + right : value - right;
    }
}

int sizes_eval(const char *text, const struct sizes_variable *variables, size_t count,
               double *result, char *error, size_t error_size)
{
    struct parser p = {.text = text,
                       .at = text,
                       .variables = variables,
                       .count = count,
                       .error = error,
                       .error_size = error_size};
    if (strlen(text) > EXPR_TEXT_MAX) {
        snprintf(error, error_size, "longer than %d characters (%zu; zram-generator's limit too)",
                 EXPR_TEXT_MAX, strlen(text));
        return -EINVAL;
    }
    double value = parse_sum(&p);
    skip_space(&p);
    if (!p.failed && *p.at != '\0')
        fail(&p, "unexpected text");
    if (p.failed)
        return -EINVAL;
    *result = value;
    return 0;
}
