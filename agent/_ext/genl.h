/* Generic netlink plumbing that devlink.c and ethnl.c share: the attribute walk, the
 * attribute writer, the error of an NLMSG_ERROR reply, request sequence numbers, the
 * receive loop, the family lookup and a batch of requests each answered before the next.
 * Header-only (static inline): each file stays one compilation unit, as the rest of
 * agent/_ext/ is. Nothing a reply says is trusted: next_attr stops at a bad length.
 * agent/_fallback/genl.py is the twin. */
#ifndef SWTEL_GENL_H
#define SWTEL_GENL_H

#include <errno.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define GENL_REPLY_MAX 65536  /* one reply datagram; a larger one is EMSGSIZE (dump skbs stay below 32 KiB) */
#define GENL_STALE_MAX 64     /* datagrams answering older requests skipped before giving up (EIO) */
#define GENL_REQUEST_MAX 256  /* one request of a batch (genl_batch) */

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

/* The request headers: genl_begin writes the genlmsghdr and returns where the attributes
 * start; genl_end writes the nlmsghdr over the request's len bytes and returns len. */
static inline size_t genl_begin(char *buf, uint8_t cmd, uint8_t version)
{
    struct genlmsghdr gh = {.cmd = cmd, .version = version};
    memcpy(buf + NLMSG_HDRLEN, &gh, sizeof(gh));
    return NLMSG_LENGTH(GENL_HDRLEN);
}

static inline size_t genl_end(char *buf, size_t len, uint16_t type, uint16_t flags, uint32_t seq)
{
    struct nlmsghdr nh = {.nlmsg_len = (uint32_t)len, .nlmsg_type = type, .nlmsg_flags = flags, .nlmsg_seq = seq};
    memcpy(buf, &nh, sizeof(nh));
    return len;
}

/* A family id a request may carry as its nlmsg_type: 0, or -1 with ValueError. */
static inline int genl_check_family(long family)
{
    if (family < NLMSG_MIN_TYPE || family > 0xFFFF) {
        PyErr_Format(PyExc_ValueError, "bad generic netlink family id %ld", family);
        return -1;
    }
    return 0;
}

/* One datagram answering seq into out (GENL_REPLY_MAX bytes): its length, or -errno.
 * Datagrams of older requests (ones that timed out) are skipped. No Python: call it with
 * the GIL released. */
static inline ssize_t genl_receive(int fd, uint32_t seq, char *out)
{
    for (int stale = 0; stale < GENL_STALE_MAX; stale++) {
        ssize_t got = recv(fd, out, GENL_REPLY_MAX, MSG_TRUNC);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (got > GENL_REPLY_MAX)
            return -EMSGSIZE;
        struct nlmsghdr nh;
        if ((size_t)got >= sizeof(nh)) {
            memcpy(&nh, out, sizeof(nh));
            if (nh.nlmsg_seq != seq)
                continue; /* an answer to a request that timed out earlier */
        }
        return got;
    }
    return -EIO;
}

/* Send req (len bytes, sequence number seq) and receive the datagram answering it into out
 * (GENL_REPLY_MAX bytes): its length, or -errno. No Python, as genl_receive. */
static inline ssize_t genl_exchange(int fd, const char *req, size_t len, uint32_t seq, char *out)
{
    if (send(fd, req, len, 0) < 0)
        return -errno;
    return genl_receive(fd, seq, out);
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

/* The attributes of the first generic netlink message with command cmd in buf (what:
 * its name, for the error). 1: found; -1: an exception is set (a malformed header, an
 * error reply, no such message). */
static inline int genl_find_reply(const char *buf, size_t size, uint8_t cmd, const char *what, span *attrs)
{
    size_t off = 0;
    uint8_t got;
    int rc;
    while ((rc = genl_next(buf, size, &off, &got, attrs)) == 1)
        if (got == cmd)
            return 1;
    if (rc == 0)
        PyErr_Format(PyExc_ValueError, "no %s reply in the buffer", what);
    return -1;
}

/* The family id in a CTRL_CMD_NEWFAMILY reply: CTRL_ATTR_FAMILY_ID of the first message
 * with that command. 0 with *id set; -1 with an exception set (an error reply: OSError; a
 * malformed reply, or one without the id: ValueError). */
static inline int genl_family_id(const char *buf, size_t size, long *id)
{
    span attrs;
    if (genl_find_reply(buf, size, CTRL_CMD_NEWFAMILY, "CTRL_CMD_NEWFAMILY", &attrs) < 0)
        return -1;
    size_t pos = 0;
    uint16_t type;
    span a;
    while (next_attr(attrs, &pos, &type, &a))
        if (type == CTRL_ATTR_FAMILY_ID && a.len >= 2) {
            uint16_t v;
            memcpy(&v, a.p, sizeof(v));
            *id = v;
            return 0;
        }
    PyErr_SetString(PyExc_ValueError, "CTRL_CMD_NEWFAMILY reply without CTRL_ATTR_FAMILY_ID");
    return -1;
}

static inline PyObject *genl_oserror(int code)
{
    errno = code;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* Resolve the generic netlink family name (size bytes with its NUL, at most 32) on the
 * NETLINK_GENERIC socket fd, the GIL released for the exchange: its id, or NULL with an
 * exception set (OSError as the kernel answers: ENOENT, no such family). */
static inline PyObject *genl_family(int fd, const char *name, size_t size)
{
    char req[64];
    uint32_t seq = genl_next_seq();
    size_t len = put_attr(req, genl_begin(req, CTRL_CMD_GETFAMILY, 1), CTRL_ATTR_FAMILY_NAME, name, size);
    genl_end(req, len, GENL_ID_CTRL, NLM_F_REQUEST, seq);
    char *reply = malloc(GENL_REPLY_MAX);
    if (reply == NULL)
        return PyErr_NoMemory();
    ssize_t got;
    Py_BEGIN_ALLOW_THREADS
    got = genl_exchange(fd, req, len, seq, reply);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    long id = 0;
    if (got < 0)
        genl_oserror((int)-got);
    else if (genl_family_id(reply, (size_t)got, &id) == 0)
        result = PyLong_FromLong(id);
    free(reply);
    return result;
}

/* The requests of a batch: n slots of GENL_REQUEST_MAX bytes, each built by the caller
 * (its sequence number from genl_next_seq) with its length in lens. */
typedef struct {
    char *buf;
    size_t *lens;
    Py_ssize_t n;
} genl_requests;

/* Room for n requests: 0, or -1 with MemoryError. genl_requests_free it either way. */
static inline int genl_requests_new(genl_requests *r, Py_ssize_t n)
{
    size_t slots = (size_t)(n > 0 ? n : 1);
    r->n = n;
    r->buf = PyMem_Malloc(slots * GENL_REQUEST_MAX);
    r->lens = PyMem_Calloc(slots, sizeof(size_t));
    if (r->buf == NULL || r->lens == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static inline char *genl_request_at(const genl_requests *r, Py_ssize_t i)
{
    return r->buf + (size_t)i * GENL_REQUEST_MAX;
}

static inline void genl_requests_free(genl_requests *r)
{
    PyMem_Free(r->buf);
    PyMem_Free(r->lens);
    r->buf = NULL;
    r->lens = NULL;
}

/* The requests sent on fd, each answered before the next is sent, the GIL released
 * throughout: the raw answer datagram of each (the one carrying its request's sequence
 * number), in order, as a list of bytes (an error reply is returned as it is: the parsers
 * raise it). NULL with an exception set: OSError when the socket fails (EAGAIN: its
 * SO_RCVTIMEO passed), MemoryError. */
static inline PyObject *genl_batch(int fd, const genl_requests *r)
{
    Py_ssize_t n = r->n;
    size_t slots = (size_t)(n > 0 ? n : 1);
    char **replies = PyMem_Calloc(slots, sizeof(char *));
    size_t *lens = PyMem_Calloc(slots, sizeof(size_t));
    char *scratch = PyMem_Malloc(GENL_REPLY_MAX);
    PyObject *out = NULL;
    if (replies == NULL || lens == NULL || scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *req = genl_request_at(r, i);
        struct nlmsghdr nh;
        memcpy(&nh, req, sizeof(nh));
        ssize_t got = genl_exchange(fd, req, r->lens[i], nh.nlmsg_seq, scratch);
        if (got < 0) {
            err = (int)-got;
            break;
        }
        replies[i] = malloc((size_t)got ? (size_t)got : 1); /* no Python allocator without the GIL */
        if (replies[i] == NULL) {
            err = ENOMEM;
            break;
        }
        memcpy(replies[i], scratch, (size_t)got);
        lens[i] = (size_t)got;
    }
    Py_END_ALLOW_THREADS
    if (err != 0) {
        genl_oserror(err);
        goto done;
    }
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *b = PyBytes_FromStringAndSize(replies[i], (Py_ssize_t)lens[i]);
        if (b == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, b);
    }
done:
    for (Py_ssize_t i = 0; replies != NULL && i < n; i++)
        free(replies[i]);
    PyMem_Free(replies);
    PyMem_Free(lens);
    PyMem_Free(scratch);
    return out;
}

#endif
