/* process.c - other processes (process.h). */
#include "common/process.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

bool util_process_alive(pid_t pid)
{
    if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
        return false;
    char path[32], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *file = fopen(path, "re");
    size_t n = file != NULL ? fread(stat, 1, sizeof stat - 1, file) : 0;
    if (file != NULL)
        fclose(file);
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* "PID (COMM) STATE ...": COMM may hold ')' */
    return end == NULL || end[1] != ' ' || (end[2] != 'Z' && end[2] != 'X');
}
