/* process.h - other processes (process.c): a helper program run with a deadline (nbd-client,
 * modprobe, mkswap...), and whether a process runs. */
#ifndef UZRAM_COMMON_PROCESS_H
#define UZRAM_COMMON_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Run a program (argv[0] looked up in PATH) with no input, waiting at most
 * `timeout_seconds` (then it is killed). Returns its exit status (0..255), or a negative
 * errno; `message` gets the last line it wrote to stderr, or why it did not run. */
int run_program(const char *const argv[], int timeout_seconds, char *message, size_t message_size);

/* Whether process `pid` runs: a zombie does not (a server killed under memory pressure may
 * stay one while its parent cannot run; its successor must not wait for that). The engine
 * has the same check for a state's owner (lib/state/state.c's process_alive, which uzram_state_info
 * reports as owner_alive): the program reaches the engine only through uzram.h, and a public
 * uzram_ function for a /proc check is not the engine's job; change both together. */
bool util_process_alive(pid_t pid);

#endif
