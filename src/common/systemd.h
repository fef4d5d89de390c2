/* systemd.h - the service manager's protocols, spoken without libsystemd: readiness
 * notification (sd_notify(3): NOTIFY_SOCKET). Works as well under any manager that speaks them. */
#ifndef UZRAM_SYSTEMD_H
#define UZRAM_SYSTEMD_H

/* Take NOTIFY_SOCKET from the environment (and remove it, so that programs this process
 * starts do not speak for it). Call once, before any thread starts. */
void systemd_init(void);

/* Send `state` ("READY=1", "STOPPING=1", "STATUS=...", several separated by '\n') to the
 * service manager. Returns 1 when sent, 0 when no manager listens (NOTIFY_SOCKET was unset),
 * or a negative errno. */
int systemd_notify(const char *state);

#endif
