/* banner.c - what `uzram serve` prints when it is ready: what it serves, where, and a connect
 * line that works when pasted into a shell on this machine: with the TLS credentials a
 * client needs (libnbd's tls-psk-file and username, or tls-certificates), quoted for the
 * shell. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd/banner.h"
#include "nbd/server_settings.h"
#include "nbd/tls.h"

/* `text` in single quotes for a POSIX shell ('\'' for a quote inside). */
static void shell_quote(const char *text, char *out, size_t size)
{
    size_t used = 0;
    out[used++] = '\'';
    for (; *text && used + 5 < size; text++) {
        if (*text == '\'') {
            memcpy(out + used, "'\\''", 4);
            used += 4;
        } else {
            out[used++] = *text;
        }
    }
    out[used++] = '\'';
    out[used] = '\0';
}

/* `text` for a URI: every byte but letters, digits, "-._~" and "/" as %XX (libnbd parses
 * the URI strictly: a space or a quote in a socket path must come encoded). */
static const char *uri_encode(const char *text, char *out, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t used = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && used + 4 < size; p++) {
        if (isalnum(*p) || strchr("-._~/", *p) != NULL) {
            out[used++] = (char)*p;
        } else {
            out[used++] = '%';
            out[used++] = hex[*p >> 4];
            out[used++] = hex[*p & 15];
        }
    }
    out[used] = '\0';
    return out;
}

/* The user name of the first key of a psktool file ("username:hexkey"), or "" . */
static void first_psk_user(const char *path, char *user, size_t size)
{
    char line[1024];
    user[0] = '\0';
    FILE *file = fopen(path, "re");
    while (file != NULL && user[0] == '\0' && fgets(line, sizeof line, file) != NULL) {
        char *colon = strchr(line, ':');
        if (colon != NULL && colon != line)
            snprintf(user, size, "%.*s", (int)(colon - line), line);
    }
    if (file != NULL)
        fclose(file);
}

int nbd_connect_uri(const struct nbd_server_options *options, const char *unix_path,
                    const char *tcp_address, const char *export_name, char *uri, size_t size)
{
    const struct nbd_tls_options *tls = &options->tls;
    bool secure = tls->mode == NBD_TLS_REQUIRE;
    char name[256], user[3 * sizeof name] = "", credentials[3 * PATH_MAX + 32] = "";
    char absolute[PATH_MAX], encoded[3 * PATH_MAX];
    if (secure && tls->psk_file != NULL) {
        /* libnbd needs the key file and, in the URI, the user whose key it is. */
        first_psk_user(tls->psk_file, name, sizeof name);
        if (name[0] != '\0')
            snprintf(user, sizeof user, "%s@", uri_encode(name, encoded, sizeof encoded));
        uri_encode(realpath(tls->psk_file, absolute) ? absolute : tls->psk_file, encoded,
                   sizeof encoded);
        snprintf(credentials, sizeof credentials, "tls-psk-file=%s", encoded);
    } else if (secure && tls->certificates != NULL) {
        /* The server's directory has the CA's certificate (ca-cert.pem), which is what a
         * client on this machine needs to check the server's. */
        uri_encode(realpath(tls->certificates, absolute) ? absolute : tls->certificates, encoded,
                   sizeof encoded);
        snprintf(credentials, sizeof credentials, "tls-certificates=%s", encoded);
    }
    char export[3 * 64 + 1];
    uri_encode(export_name, export, sizeof export);
    int n;
    if (unix_path != NULL && unix_path[0] != '\0')
        n = snprintf(uri, size, "%s://%s/%s?socket=%s%s%s", secure ? "nbds+unix" : "nbd+unix", user,
                     export, uri_encode(unix_path, encoded, sizeof encoded),
                     credentials[0] ? "&" : "", credentials);
    else
        n = snprintf(uri, size, "%s://%s%s/%s%s%s", secure ? "nbds" : "nbd", user, tcp_address,
                     export, credentials[0] ? "?" : "", credentials);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

void nbd_banner_print(const struct nbd_server_options *options, const struct nbd_banner *banner)
{
    if (banner->device_count == 1)
        printf("uzram: serving %s on ", banner->devices);
    else
        printf("uzram: serving %zu devices: %s (the first is the default export) on ",
               banner->device_count, banner->devices);
    if (banner->unix_path[0])
        printf("unix:%s%s", banner->unix_path, banner->tcp_address[0] ? ", " : "");
    if (banner->tcp_address[0])
        printf("tcp:%s", banner->tcp_address);
    if (options->inherited_count > 0 && !options->inherited_owned)
        printf(" (%zu socket%s from the service manager)", options->inherited_count,
               options->inherited_count == 1 ? "" : "s");
    printf("; control: %s\n", options->ctl_path);
    if (banner->tls_kind != NULL)
        printf("  TLS %s (%s)\n",
               options->tls.mode == NBD_TLS_REQUIRE ? "required" : "offered, not required",
               banner->tls_kind);
    char uri[7 * PATH_MAX], quoted[8 * PATH_MAX];
    if ((banner->unix_path[0] || banner->tcp_address[0]) &&
        nbd_connect_uri(options, banner->unix_path, banner->tcp_address, "", uri, sizeof uri) ==
            0) {
        shell_quote(uri, quoted, sizeof quoted);
        printf("  connect: nbdinfo %s%s   stats: uzram status\n",
               banner->device_count == 1 ? "" : "--list ", quoted);
    }
    if (options->tls.verify_peer)
        printf("  clients show a certificate: tls-certificates=DIR with ca-cert.pem, "
               "client-cert.pem and client-key.pem\n");
    if (options->persistent)
        printf("  the data outlives this process (--persist): the next server takes it over; "
               "uzram restart restarts in place\n");
    else
        printf("  the data lives only in this process (like zram and tmpfs): it is lost when "
               "the server stops (SIGTERM, SIGINT)\n");
    fflush(stdout);
}
