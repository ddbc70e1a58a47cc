/* Generic netlink plumbing that devlink.c and ethnl.c share: the attribute walk, the
 * attribute writer, the error of an NLMSG_ERROR reply and request sequence numbers.
 * Header-only (static inline): each file stays one compilation unit, as the rest of
 * agent/_ext/ is. Nothing a reply says is trusted: next_attr stops at a bad length. */
#ifndef SWTEL_GENL_H
#define SWTEL_GENL_H

#include <errno.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const char *p;
    size_t len;
} span;

/* A process-wide request sequence number (the replies are matched against it). */
static inline uint32_t genl_next_seq(void)
{
    static uint32_t seq;
    return __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
}

/* The next well-formed attribute at *pos; 0 at the end or at a bad length. */
static inline int next_attr(span in, size_t *pos, uint16_t *type, span *payload)
{
    struct nlattr nla;
    if (*pos > in.len || in.len - *pos < sizeof(nla))
        return 0;
    memcpy(&nla, in.p + *pos, sizeof(nla));
    if (nla.nla_len < sizeof(nla) || nla.nla_len > in.len - *pos)
        return 0;
    *type = (uint16_t)(nla.nla_type & NLA_TYPE_MASK);
    payload->p = in.p + *pos + NLA_HDRLEN;
    payload->len = nla.nla_len - NLA_HDRLEN;
    *pos += NLA_ALIGN(nla.nla_len); /* may pass the end: the next call stops there */
    return 1;
}

/* The errno an NLMSG_ERROR message carries (0: an ack); a nonsense value is EIO. */
static inline int reply_errno(const char *msg, size_t len)
{
    int32_t error = 0;
    if (len >= NLMSG_LENGTH(sizeof(error)))
        memcpy(&error, msg + NLMSG_HDRLEN, sizeof(error));
    if (error == 0)
        return 0;
    return error < 0 && error != INT32_MIN ? -error : EIO;
}

/* Write one attribute at buf + off (room checked by the caller); the offset after it. */
static inline size_t put_attr(char *buf, size_t off, uint16_t type, const void *data, size_t len)
{
    struct nlattr nla = {.nla_len = (uint16_t)(NLA_HDRLEN + len), .nla_type = type};
    memcpy(buf + off, &nla, sizeof(nla));
    if (len)
        memcpy(buf + off + NLA_HDRLEN, data, len);
    size_t end = off + NLA_ALIGN(nla.nla_len);
    memset(buf + off + nla.nla_len, 0, end - off - nla.nla_len);
    return end;
}

/* The next generic netlink message of buf from *off: 1 with its command and attributes;
 * 0 at the end; -1 with an exception set (a malformed header: ValueError; an error reply:
 * OSError). Acks, NLMSG_DONE and control messages are skipped. Needs Python.h (swtel.h). */
static inline int genl_next(const char *buf, size_t size, size_t *off, uint8_t *cmd, span *attrs)
{
    while (*off < size) {
        struct nlmsghdr nh;
        if (size - *off < sizeof(nh)) {
            PyErr_SetString(PyExc_ValueError, "truncated netlink message header");
            return -1;
        }
        memcpy(&nh, buf + *off, sizeof(nh));
        if (nh.nlmsg_len < sizeof(nh) || nh.nlmsg_len > size - *off) {
            PyErr_Format(PyExc_ValueError, "netlink message length %u at offset %zu: %zu bytes left",
                         nh.nlmsg_len, *off, size - *off);
            return -1;
        }
        const char *msg = buf + *off;
        size_t len = nh.nlmsg_len;
        *off += NLMSG_ALIGN(len) < size - *off ? NLMSG_ALIGN(len) : size - *off;
        if (nh.nlmsg_type == NLMSG_ERROR || nh.nlmsg_type == NLMSG_DONE) {
            if (nh.nlmsg_type == NLMSG_ERROR && len < NLMSG_LENGTH(sizeof(int32_t))) {
                PyErr_SetString(PyExc_ValueError, "NLMSG_ERROR too short for its error code");
                return -1;
            }
            int code = reply_errno(msg, len);
            if (code != 0) {
                errno = code;
                PyErr_SetFromErrno(PyExc_OSError);
                return -1;
            }
            continue;
        }
        if (nh.nlmsg_type < NLMSG_MIN_TYPE)
            continue;
        if (len < NLMSG_LENGTH(GENL_HDRLEN)) {
            PyErr_SetString(PyExc_ValueError, "generic netlink message too short for its genlmsghdr");
            return -1;
        }
        struct genlmsghdr gh;
        memcpy(&gh, msg + NLMSG_HDRLEN, sizeof(gh));
        *cmd = gh.cmd;
        attrs->p = msg + NLMSG_LENGTH(GENL_HDRLEN);
        attrs->len = len - NLMSG_LENGTH(GENL_HDRLEN);
        return 1;
    }
    return 0;
}

#endif
