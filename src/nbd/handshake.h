/* handshake.h - NBD fixed newstyle option haggling (handshake.c). */
#ifndef UZRAM_NBD_HANDSHAKE_H
#define UZRAM_NBD_HANDSHAKE_H

struct nbd_exports;
struct nbd_session;

/* Run the option haggling, choosing among `exports`. Returns 1 when transmission starts
 * (session filled in, session->export held as a client: the caller puts it with
 * nbd_export_put(exports, export, true) when the connection ends), 0 when the client ended
 * it cleanly (ABORT or EOF), a negative errno when the connection must be dropped. */
int nbd_handshake(struct nbd_session *session, struct nbd_exports *exports);

#endif
