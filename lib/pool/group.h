/* group.h - a memory limit shared by several devices (struct uzram_group, see uzram.h).
 * The pool of each member charges its memory here as well as to itself. */
#ifndef UZRAM_GROUP_H
#define UZRAM_GROUP_H

#include <stdatomic.h>
#include <stdint.h>

#include "uzram.h"

struct uzram_group {
    _Atomic uint64_t used;     /* bytes of pool memory and page tables of every member */
    _Atomic uint64_t used_max; /* peak of used */
    _Atomic uint64_t limit;    /* 0: none */
    _Atomic uint64_t members;  /* devices in the group */
};

/* Charge `bytes` more unless that would take the group past its limit by more than `grace`
 * bytes: 0 or -ENOSPC. */
int group_reserve(struct uzram_group *group, uint64_t bytes, uint64_t grace);

/* Give back `bytes` charged by group_reserve(). */
void group_release(struct uzram_group *group, uint64_t bytes);

#endif
