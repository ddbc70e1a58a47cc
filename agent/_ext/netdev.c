/* netdev reader: one RTM_GETSTATS dump (IFLA_STATS_LINK_64) for every link of
 * the current network namespace per poll. Values for the wanted ifindexes land
 * in a caller-owned flat u64 buffer, SWTEL_NETDEV_FIELDS per wanted link.
 *
 * The reply parser (parse_dump) trusts nothing in the buffer: netdev_read runs
 * it on what recv() returned, netdev_parse on a caller's buffer (for tests and
 * the fuzz harness, fuzz/fuzz_parsers.py), so both exercise the same code. */
#include "swtel.h"

#include <errno.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint32_t netdev_seq = 1;

/* Slot of ifindex in the sorted ifindex array, or -1. */
static Py_ssize_t find_slot(const int32_t *sorted, Py_ssize_t n, int32_t ifindex)
{
    Py_ssize_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (sorted[mid] == ifindex)
            return mid;
        if (sorted[mid] < ifindex)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Parse one recv()'d chunk of an RTM_GETSTATS dump with sequence number seq.
 * Returns 1 when the chunk ends the dump (NLMSG_DONE), 0 when more is to come,
 * or -errno (an NLMSG_ERROR reply). *found counts wanted links seen so far.
 * Messages and attributes are bounded by the chunk and by their own lengths,
 * whatever those say (the lengths are signed, so a misaligned last message
 * cannot wrap them). */
static int parse_dump(const char *buf, size_t size, uint32_t seq, const int32_t *ifindexes,
                      Py_ssize_t n, uint64_t *out, uint8_t *seen, int *found)
{
    size_t off = 0;
    while (size - off >= sizeof(struct nlmsghdr)) {
        struct nlmsghdr nh;
        memcpy(&nh, buf + off, sizeof(nh)); /* the caller's buffer may be unaligned */
        if (nh.nlmsg_len < sizeof(nh) || nh.nlmsg_len > size - off)
            return 0; /* truncated or garbage: nothing more in this chunk */
        const char *msg = buf + off;
        size_t mlen = nh.nlmsg_len;
        off += NLMSG_ALIGN(mlen) < size - off ? NLMSG_ALIGN(mlen) : size - off;
        if (nh.nlmsg_seq != seq)
            continue; /* a stale reply from an earlier, interrupted dump */
        if (nh.nlmsg_type == NLMSG_DONE)
            return 1;
        if (nh.nlmsg_type == NLMSG_ERROR) {
            int32_t error = 0;
            if (mlen >= NLMSG_LENGTH(sizeof(int32_t)))
                memcpy(&error, msg + NLMSG_HDRLEN, sizeof(error));
            return error < 0 && error != INT32_MIN ? error : -EIO;
        }
        if (nh.nlmsg_type != RTM_NEWSTATS || mlen < NLMSG_LENGTH(sizeof(struct if_stats_msg)))
            continue;
        struct if_stats_msg ifsm;
        memcpy(&ifsm, msg + NLMSG_HDRLEN, sizeof(ifsm));
        Py_ssize_t slot = find_slot(ifindexes, n, (int32_t)ifsm.ifindex);
        if (slot < 0)
            continue;
        size_t pos = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(ifsm));
        while (pos + sizeof(struct rtattr) <= mlen) {
            struct rtattr rta;
            memcpy(&rta, msg + pos, sizeof(rta));
            if (rta.rta_len < sizeof(rta) || rta.rta_len > mlen - pos)
                break;
            if (rta.rta_type == IFLA_STATS_LINK_64) {
                size_t have = (rta.rta_len - RTA_LENGTH(0)) / sizeof(uint64_t);
                size_t take = have < SWTEL_NETDEV_FIELDS ? have : SWTEL_NETDEV_FIELDS;
                memcpy(out + (size_t)slot * SWTEL_NETDEV_FIELDS, msg + pos + RTA_LENGTH(0),
                       take * sizeof(uint64_t));
                if (!seen[slot]) {
                    seen[slot] = 1;
                    (*found)++;
                }
            }
            pos += RTA_ALIGN(rta.rta_len);
        }
    }
    return 0;
}

/* Returns number of wanted links found (>= 0), or -errno. */
static int dump_stats(int fd, const int32_t *ifindexes, Py_ssize_t n, uint64_t *out,
                      uint8_t *seen)
{
    struct {
        struct nlmsghdr nh;
        struct if_stats_msg ifsm;
    } req;
    char buf[65536];
    int found = 0;
    uint32_t seq = netdev_seq++;

    memset(&req, 0, sizeof(req));
    req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct if_stats_msg));
    req.nh.nlmsg_type = RTM_GETSTATS;
    req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.nh.nlmsg_seq = seq;
    req.ifsm.family = AF_UNSPEC;
    req.ifsm.filter_mask = IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64);
    memset(seen, 0, (size_t)n);

    if (send(fd, &req, req.nh.nlmsg_len, 0) < 0)
        return -errno;
    for (;;) {
        ssize_t len = recv(fd, buf, sizeof(buf), 0);
        if (len < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (len == 0)
            return -EPIPE;
        int rc = parse_dump(buf, (size_t)len, seq, ifindexes, n, out, seen, &found);
        if (rc < 0)
            return rc;
        if (rc > 0)
            return found;
    }
}

static const swtel_bufspec netdev_bufs[] = {{4, 0, "ifindexes"}, {8, 1, "out"}, {1, 1, "seen"}};

/* Gets ifindexes/out/seen from o[1..3] into b[1..3] and checks their sizes; b[0] is the
 * caller's (netdev_parse's reply buffer). Returns the number of wanted links, or -1. */
static Py_ssize_t netdev_buffers(PyObject **o, Py_buffer *b)
{
    if (swtel_get_buffers(o + 1, b + 1, netdev_bufs, 3) < 0)
        return -1;
    Py_ssize_t n = b[1].len / 4;
    if (b[2].len < n * SWTEL_NETDEV_FIELDS * 8 || b[3].len < n) {
        PyErr_SetString(PyExc_ValueError, "out or seen buffer too small for ifindexes");
        swtel_release_buffers(b + 1, 3);
        return -1;
    }
    return n;
}

PyDoc_STRVAR(netdev_read_doc,
"netdev_read(fd, ifindexes, out, seen) -> int\n\n"
"Dump IFLA_STATS_LINK_64 for all links over the NETLINK_ROUTE socket fd.\n"
"ifindexes: sorted int32 buffer of wanted links; out: u64 buffer of\n"
"len(ifindexes) * NETDEV_FIELDS, written in place (a missing link keeps its\n"
"old values); seen: writable byte buffer set to 1 per link found.\n"
"Returns the number of wanted links found; raises OSError on failure.");

static PyObject *netdev_read(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *o[4] = {NULL};
    Py_buffer b[4];
    if (!PyArg_ParseTuple(args, "iOOO", &fd, &o[1], &o[2], &o[3]))
        return NULL;
    Py_ssize_t n = netdev_buffers(o, b);
    if (n < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dump_stats(fd, b[1].buf, n, b[2].buf, b[3].buf);
    Py_END_ALLOW_THREADS
    swtel_release_buffers(b + 1, 3);
    if (rc < 0) {
        errno = -rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(rc);
}

PyDoc_STRVAR(netdev_parse_doc,
"netdev_parse(buf, ifindexes, out, seen, seq=1) -> int\n\n"
"Parse buf as one chunk of an RTM_GETSTATS dump reply with sequence number\n"
"seq, with the very code netdev_read runs on what it receives (for tests\n"
"and fuzzing). seen is cleared first; other arguments and the result as\n"
"netdev_read's. Raises OSError for an NLMSG_ERROR reply.");

static PyObject *netdev_parse(PyObject *self, PyObject *args)
{
    PyObject *o[4];
    Py_buffer b[4];
    unsigned int seq = 1;
    if (!PyArg_ParseTuple(args, "OOOO|I", &o[0], &o[1], &o[2], &o[3], &seq))
        return NULL;
    if (PyObject_GetBuffer(o[0], &b[0], PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t n = netdev_buffers(o, b);
    if (n < 0) {
        PyBuffer_Release(&b[0]);
        return NULL;
    }
    int found = 0;
    memset(b[3].buf, 0, (size_t)n);
    int rc = parse_dump(b[0].buf, (size_t)b[0].len, seq, b[1].buf, n, b[2].buf, b[3].buf, &found);
    swtel_release_buffers(b, 4);
    if (rc < 0) {
        errno = -rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(found);
}

PyMethodDef swtel_netdev_methods[] = {
    {"netdev_read", netdev_read, METH_VARARGS, netdev_read_doc},
    {"netdev_parse", netdev_parse, METH_VARARGS, netdev_parse_doc},
    {NULL, NULL, 0, NULL},
};
