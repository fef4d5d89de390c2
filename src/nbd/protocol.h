/* protocol.h - the NBD wire format: magics, options, replies, flags, commands, errors.
 * Constants only (no code); the authority is doc/proto.md of the NetworkBlockDevice project. */
#ifndef UZRAM_NBD_PROTOCOL_H
#define UZRAM_NBD_PROTOCOL_H

#include <stdint.h>

/* All integers on the wire are big-endian. Sizes of fixed messages are given
 * in bytes next to each group so parsers need not count fields by hand. */

/* ------------------------------------------------------------------------
 * Handshake (fixed newstyle)
 * ---------------------------------------------------------------------- */

/* S: NBD_MAGIC, NBD_OPT_MAGIC, u16 handshake flags (18 bytes) */
#define NBD_MAGIC UINT64_C(0x4e42444d41474943)       /* "NBDMAGIC" */
#define NBD_OPT_MAGIC UINT64_C(0x49484156454F5054)   /* "IHAVEOPT" */
#define NBD_OLD_VERSION UINT64_C(0x0000420281861253) /* oldstyle; never sent by uzram */

/* Handshake flags (u16, server to client) */
#define NBD_FLAG_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_NO_ZEROES (1u << 1)

/* Client flags (u32, client to server); any other bit means drop the client */
#define NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_C_NO_ZEROES (1u << 1)

/* Option request: NBD_OPT_MAGIC, u32 option, u32 length, data (16 bytes + data) */
#define NBD_OPT_EXPORT_NAME 1
#define NBD_OPT_ABORT 2
#define NBD_OPT_LIST 3
#define NBD_OPT_PEEK_EXPORT 4 /* withdrawn */
#define NBD_OPT_STARTTLS 5
#define NBD_OPT_INFO 6
#define NBD_OPT_GO 7
#define NBD_OPT_STRUCTURED_REPLY 8
#define NBD_OPT_LIST_META_CONTEXT 9
#define NBD_OPT_SET_META_CONTEXT 10
#define NBD_OPT_EXTENDED_HEADERS 11

/* Option reply: NBD_REP_MAGIC, u32 option, u32 reply type, u32 length, data
 * (20 bytes + data) */
#define NBD_REP_MAGIC UINT64_C(0x0003e889045565a9)

/* Option reply types */
#define NBD_REP_ACK 1
#define NBD_REP_SERVER 2       /* u32 name length, name[, description] */
#define NBD_REP_INFO 3         /* u16 info type, then per type */
#define NBD_REP_META_CONTEXT 4 /* u32 context id, name */

/* Option reply errors: bit 31 set; data, if any, is a message for humans */
#define NBD_REP_FLAG_ERROR (1u << 31)
#define NBD_REP_ERR_UNSUP (NBD_REP_FLAG_ERROR | 1u)
#define NBD_REP_ERR_POLICY (NBD_REP_FLAG_ERROR | 2u)
#define NBD_REP_ERR_INVALID (NBD_REP_FLAG_ERROR | 3u)
#define NBD_REP_ERR_PLATFORM (NBD_REP_FLAG_ERROR | 4u)
#define NBD_REP_ERR_TLS_REQD (NBD_REP_FLAG_ERROR | 5u)
#define NBD_REP_ERR_UNKNOWN (NBD_REP_FLAG_ERROR | 6u)
#define NBD_REP_ERR_SHUTDOWN (NBD_REP_FLAG_ERROR | 7u)
#define NBD_REP_ERR_BLOCK_SIZE_REQD (NBD_REP_FLAG_ERROR | 8u)
#define NBD_REP_ERR_TOO_BIG (NBD_REP_FLAG_ERROR | 9u)
#define NBD_REP_ERR_EXT_HEADER_REQD (NBD_REP_FLAG_ERROR | 10u)

/* Info types, in NBD_OPT_INFO/GO requests (u16 list) and NBD_REP_INFO replies */
#define NBD_INFO_EXPORT 0      /* u16 type, u64 size, u16 transmission flags (12 bytes) */
#define NBD_INFO_NAME 1        /* u16 type, name */
#define NBD_INFO_DESCRIPTION 2 /* u16 type, description */
#define NBD_INFO_BLOCK_SIZE 3  /* u16 type, u32 minimum, preferred, maximum (14 bytes) */

/* NBD_OPT_EXPORT_NAME answer without NO_ZEROES: size, flags, then this many zeroes */
#define NBD_EXPORT_NAME_PADDING 124

/* Strings (export names, context names) must not exceed this */
#define NBD_MAX_STRING 4096

/* The one metadata context defined by the specification */
#define NBD_CONTEXT_BASE_ALLOCATION "base:allocation"
/* The id this server gives base:allocation: sent in the NBD_REP_META_CONTEXT
 * reply to SET_META_CONTEXT (LIST replies carry 0) and at the start of every
 * BLOCK_STATUS chunk. The specification lets the server choose it. */
#define NBD_CONTEXT_ID_BASE_ALLOCATION 1u

/* ------------------------------------------------------------------------
 * Transmission flags (u16, sent with the export size)
 * ---------------------------------------------------------------------- */
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_SEND_FUA (1u << 3)
#define NBD_FLAG_ROTATIONAL (1u << 4)
#define NBD_FLAG_SEND_TRIM (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_SEND_DF (1u << 7) /* only with structured replies */
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)
#define NBD_FLAG_SEND_RESIZE (1u << 9)
#define NBD_FLAG_SEND_CACHE (1u << 10)
#define NBD_FLAG_SEND_FAST_ZERO (1u << 11)
#define NBD_FLAG_BLOCK_STATUS_PAYLOAD (1u << 12)

/* ------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------- */

/* NBD_REQUEST_MAGIC, u16 command flags, u16 type, u64 cookie, u64 offset,
 * u32 length (28 bytes); a WRITE's payload of `length` bytes follows. */
#define NBD_REQUEST_MAGIC UINT32_C(0x25609513)
#define NBD_EXTENDED_REQUEST_MAGIC UINT32_C(0x21e41c71) /* extended headers; unsupported */
#define NBD_REQUEST_SIZE 28

/* Commands */
#define NBD_CMD_READ 0
#define NBD_CMD_WRITE 1
#define NBD_CMD_DISC 2
#define NBD_CMD_FLUSH 3
#define NBD_CMD_TRIM 4
#define NBD_CMD_CACHE 5
#define NBD_CMD_WRITE_ZEROES 6
#define NBD_CMD_BLOCK_STATUS 7
#define NBD_CMD_RESIZE 8

/* Command flags */
#define NBD_CMD_FLAG_FUA (1u << 0)         /* valid on every command once SEND_FUA is set */
#define NBD_CMD_FLAG_NO_HOLE (1u << 1)     /* WRITE_ZEROES: keep the range allocated */
#define NBD_CMD_FLAG_DF (1u << 2)          /* READ: at most one content chunk */
#define NBD_CMD_FLAG_REQ_ONE (1u << 3)     /* BLOCK_STATUS: one descriptor is enough */
#define NBD_CMD_FLAG_FAST_ZERO (1u << 4)   /* WRITE_ZEROES: fail with ENOTSUP if slow */
#define NBD_CMD_FLAG_PAYLOAD_LEN (1u << 5) /* extended headers only */

/* ------------------------------------------------------------------------
 * Replies
 * ---------------------------------------------------------------------- */

/* Simple reply: NBD_SIMPLE_REPLY_MAGIC, u32 error, u64 cookie (16 bytes);
 * data follows only for a successful READ. */
#define NBD_SIMPLE_REPLY_MAGIC UINT32_C(0x67446698)
#define NBD_SIMPLE_REPLY_SIZE 16

/* Structured reply chunk: NBD_STRUCTURED_REPLY_MAGIC, u16 flags, u16 type,
 * u64 cookie, u32 payload length (20 bytes), payload. */
#define NBD_STRUCTURED_REPLY_MAGIC UINT32_C(0x668e33ef)
#define NBD_STRUCTURED_REPLY_SIZE 20

/* Structured reply flags */
#define NBD_REPLY_FLAG_DONE (1u << 0)

/* Structured reply chunk types */
#define NBD_REPLY_TYPE_NONE 0
#define NBD_REPLY_TYPE_OFFSET_DATA 1       /* u64 offset, data */
#define NBD_REPLY_TYPE_OFFSET_HOLE 2       /* u64 offset, u32 hole size */
#define NBD_REPLY_TYPE_BLOCK_STATUS 5      /* u32 context id, (u32 length, u32 flags)... */
                                           /* (the reference nbd.h says 3: the spec says 5) */
#define NBD_REPLY_TYPE_ERROR 0x8001        /* u32 error, u16 message length, message */
#define NBD_REPLY_TYPE_ERROR_OFFSET 0x8002 /* as ERROR, then u64 offset */
#define NBD_REPLY_TYPE_IS_ERROR(type) (((type)&0x8000u) != 0)

/* base:allocation status flags (BLOCK_STATUS descriptors) */
#define NBD_STATE_HOLE (1u << 0)
#define NBD_STATE_ZERO (1u << 1)

/* ------------------------------------------------------------------------
 * Errors (values of the error fields; the same numbers as Linux errno)
 * ---------------------------------------------------------------------- */
#define NBD_EPERM 1
#define NBD_EIO 5
#define NBD_ENOMEM 12
#define NBD_EINVAL 22
#define NBD_ENOSPC 28
#define NBD_EOVERFLOW 75
#define NBD_ENOTSUP 95
#define NBD_ESHUTDOWN 108

#endif /* UZRAM_NBD_PROTOCOL_H */
