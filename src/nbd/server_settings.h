/* server_settings.h - the settings of `uzram serve` that its server takes, filled by cli/serve.c.
 */
#ifndef UZRAM_NBD_SERVER_SETTINGS_H
#define UZRAM_NBD_SERVER_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nbd/exports.h"
#include "nbd/tls.h"

/* Settings of `uzram serve`, filled by cli/serve.c. */
struct nbd_server_options {
    const char *name; /* the server's: its control socket is NAME.ctl */
    /* The devices to serve at start (at least one), the first the default export; and how
     * hot-add makes more. */
    const struct nbd_new_device *devices;
    size_t device_count;
    nbd_make_device_fn *make_device;
    void *make_device_context;
    uint64_t server_mem_limit; /* --server-mem-limit: bytes, 0 none */
    const char *unix_path;     /* NULL: no Unix socket */
    const char *ctl_path;
    const char *tcp; /* "[ADDR:]PORT" or NULL */
    /* Socket activation: listening NBD sockets handed over by a service manager, served
     * instead of binding unix_path and tcp, and a control socket (-1: bind ctl_path). The
     * manager owns their names: they are not removed at exit. */
    const int *inherited;
    size_t inherited_count;
    int inherited_ctl;
    bool inherited_owned; /* the inherited sockets are ours, from before a planned restart */
    bool persistent;      /* every device's state outlives the process (--persist) */
    unsigned socket_mode;
    long socket_gid;  /* -1: leave the group alone */
    unsigned threads; /* worker threads per connection */
    unsigned timeout; /* client deadlines in seconds; 0: NBD_SERVER_TIMEOUT */
    bool quiet;
    bool swap; /* swap safety is on (cli/serve.c set it up): `attach --swap` may go on */
    long swap_stall_limit; /* --swap-stall-limit's seconds (swap_guard.c); -1: not given */
    struct nbd_tls_options tls;
};

#endif
