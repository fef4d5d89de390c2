/* process.h - other processes (process.c): whether one runs. */
#ifndef UZRAM_COMMON_PROCESS_H
#define UZRAM_COMMON_PROCESS_H

#include <stdbool.h>
#include <sys/types.h>

/* Whether process `pid` runs: a zombie does not (a server killed under memory pressure may
 * stay one while its parent cannot run; its successor must not wait for that). The engine
 * has the same check for a state's owner (lib/state/state.c's process_alive, which uzram_state_info
 * reports as owner_alive): the program reaches the engine only through uzram.h, and a public
 * uzram_ function for a /proc check is not the engine's job; change both together. */
bool util_process_alive(pid_t pid);

#endif
