/* netdev reader: one RTM_GETSTATS dump (IFLA_STATS_LINK_64) for every link of
 * the current network namespace per poll. Values for the wanted ifindexes land
 * in a caller-owned flat u64 buffer, SWTEL_NETDEV_FIELDS per wanted link. */
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
        for (struct nlmsghdr *nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, (size_t)len);
             nh = NLMSG_NEXT(nh, len)) {
            if (nh->nlmsg_seq != seq)
                continue; /* a stale reply from an earlier, interrupted dump */
            if (nh->nlmsg_type == NLMSG_DONE)
                return found;
            if (nh->nlmsg_type == NLMSG_ERROR) {
                struct nlmsgerr *err = NLMSG_DATA(nh);
                return err->error ? err->error : -EIO;
            }
            if (nh->nlmsg_type != RTM_NEWSTATS)
                continue;
            struct if_stats_msg *ifsm = NLMSG_DATA(nh);
            Py_ssize_t slot = find_slot(ifindexes, n, (int32_t)ifsm->ifindex);
            if (slot < 0)
                continue;
            int alen = (int)(nh->nlmsg_len - NLMSG_LENGTH(sizeof(*ifsm)));
            for (struct rtattr *rta = (struct rtattr *)((char *)ifsm + NLMSG_ALIGN(sizeof(*ifsm)));
                 RTA_OK(rta, alen); rta = RTA_NEXT(rta, alen)) {
                if (rta->rta_type != IFLA_STATS_LINK_64)
                    continue;
                size_t have = RTA_PAYLOAD(rta) / sizeof(uint64_t);
                size_t take = have < SWTEL_NETDEV_FIELDS ? have : SWTEL_NETDEV_FIELDS;
                uint64_t *dst = out + (size_t)slot * SWTEL_NETDEV_FIELDS;
                memcpy(dst, RTA_DATA(rta), take * sizeof(uint64_t));
                if (!seen[slot]) {
                    seen[slot] = 1;
                    found++;
                }
            }
        }
    }
}

PyDoc_STRVAR(netdev_read_doc,
"netdev_read(fd, ifindexes, out, seen) -> int\n\n"
"Dump IFLA_STATS_LINK_64 for all links over the NETLINK_ROUTE socket fd.\n"
"ifindexes: sorted int32 buffer of wanted links; out: u64 buffer of\n"
"len(ifindexes) * NETDEV_FIELDS, written in place (a missing link keeps its\n"
"old values); seen: writable byte buffer set to 1 per link found.\n"
"Returns the number of wanted links found; raises OSError on failure.");

static const swtel_bufspec netdev_bufs[] = {{4, 0, "ifindexes"}, {8, 1, "out"}, {1, 1, "seen"}};

static PyObject *netdev_read(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *o[3];
    Py_buffer b[3];
    if (!PyArg_ParseTuple(args, "iOOO", &fd, &o[0], &o[1], &o[2]) ||
        swtel_get_buffers(o, b, netdev_bufs, 3) < 0)
        return NULL;
    Py_ssize_t n = b[0].len / 4;
    int rc;
    if (b[1].len < n * SWTEL_NETDEV_FIELDS * 8 || b[2].len < n) {
        PyErr_SetString(PyExc_ValueError, "out or seen buffer too small for ifindexes");
        rc = INT32_MIN;
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = dump_stats(fd, b[0].buf, n, b[1].buf, b[2].buf);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            errno = -rc;
            PyErr_SetFromErrno(PyExc_OSError);
        }
    }
    swtel_release_buffers(b, 3);
    if (rc < 0)
        return NULL;
    return PyLong_FromLong(rc);
}

PyMethodDef swtel_netdev_methods[] = {
    {"netdev_read", netdev_read, METH_VARARGS, netdev_read_doc},
    {NULL, NULL, 0, NULL},
};
