/* ethtool reader over SIOCETHTOOL. The string table and driver info are read
 * once per port (Python caches them and re-reads on link change); each poll
 * issues only ETHTOOL_GSTATS per port, values landing in a flat u64 buffer.
 * None of these commands needs CAP_NET_ADMIN. */
#include "swtel.h"

#include <errno.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

/* status of a port an ethtool_read plan left for a later tick (values kept) */
#define ETHTOOL_SKIPPED (-2)

static int eth_ioctl(int fd, const char *ifname, void *data)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
    ifr.ifr_data = data;
    return ioctl(fd, SIOCETHTOOL, &ifr) < 0 ? -errno : 0;
}

static int check_ifname(const char *name, Py_ssize_t len)
{
    if (len <= 0 || len >= IFNAMSIZ || (Py_ssize_t)strlen(name) != len) {
        PyErr_Format(PyExc_ValueError, "bad interface name '%s'", name);
        return -1;
    }
    return 0;
}

/* Number of ETH_SS_STATS strings, via GSSET_INFO, falling back to GDRVINFO. */
static int stats_count(int fd, const char *ifname, uint32_t *count)
{
    struct {
        struct ethtool_sset_info hdr;
        uint32_t len;
    } sset;
    memset(&sset, 0, sizeof(sset));
    sset.hdr.cmd = ETHTOOL_GSSET_INFO;
    sset.hdr.sset_mask = 1ULL << ETH_SS_STATS;
    int rc = eth_ioctl(fd, ifname, &sset);
    if (rc == 0) {
        *count = (sset.hdr.sset_mask & (1ULL << ETH_SS_STATS)) ? sset.len : 0;
        return 0;
    }
    struct ethtool_drvinfo drv = {.cmd = ETHTOOL_GDRVINFO};
    rc = eth_ioctl(fd, ifname, &drv);
    if (rc == 0)
        *count = drv.n_stats;
    return rc;
}

PyDoc_STRVAR(drvinfo_doc, "ethtool_drvinfo(fd, ifname: str | bytes) -> (driver, version, fw_version, bus_info, n_stats)");

static PyObject *ethtool_drvinfo(PyObject *self, PyObject *args)
{
    int fd;
    const char *ifname;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "is#", &fd, &ifname, &len) || check_ifname(ifname, len) < 0)
        return NULL;
    struct ethtool_drvinfo drv;
    memset(&drv, 0, sizeof(drv));
    drv.cmd = ETHTOOL_GDRVINFO;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = eth_ioctl(fd, ifname, &drv);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        errno = -rc;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, ifname);
    }
    return Py_BuildValue("(ssssI)", drv.driver, drv.version, drv.fw_version, drv.bus_info,
                         drv.n_stats);
}

/* The names of a GSTRINGS reply with room for room names (len bounded by it). */
static PyObject *gstrings_list(const struct ethtool_gstrings *gs, size_t room)
{
    uint32_t got = gs ? (gs->len < room ? gs->len : (uint32_t)room) : 0;
    PyObject *list = PyList_New(got);
    for (uint32_t i = 0; list && i < got; i++) {
        char name[ETH_GSTRING_LEN + 1];
        memcpy(name, gs->data + (size_t)i * ETH_GSTRING_LEN, ETH_GSTRING_LEN);
        name[ETH_GSTRING_LEN] = 0;
        PyObject *s = PyUnicode_DecodeLatin1(name, (Py_ssize_t)strlen(name), NULL);
        if (s == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

/* One GSTATS reply with room for room values, expected to carry want of them: copies
 * them to dst and returns 0, or returns -1 when the driver's count changed (or the reply
 * cannot hold what it claims). */
static int gstats_take(const struct ethtool_stats *es, size_t room, uint32_t want, uint64_t *dst)
{
    if (es->n_stats != want || want > room)
        return -1;
    memcpy(dst, es->data, (size_t)want * sizeof(uint64_t));
    return 0;
}

PyDoc_STRVAR(strings_doc, "ethtool_strings(fd, ifname: str | bytes) -> list[str]\n\n"
                          "The ETH_SS_STATS names, in GSTATS order.");

static PyObject *ethtool_strings(PyObject *self, PyObject *args)
{
    int fd;
    const char *ifname;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "is#", &fd, &ifname, &len) || check_ifname(ifname, len) < 0)
        return NULL;
    uint32_t count = 0;
    size_t room = 0;
    struct ethtool_gstrings *gs = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stats_count(fd, ifname, &count);
    /* As with GSTATS, the kernel writes as many strings as the driver has by now,
     * whatever len says: allocate headroom for a table that grew in between. */
    room = (size_t)count * 2 + 1024;
    if (rc == 0 && count > 0) {
        gs = calloc(1, sizeof(*gs) + room * ETH_GSTRING_LEN);
        if (gs == NULL) {
            rc = -ENOMEM;
        } else {
            gs->cmd = ETHTOOL_GSTRINGS;
            gs->string_set = ETH_SS_STATS;
            gs->len = count;
            rc = eth_ioctl(fd, ifname, gs);
        }
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        free(gs);
        errno = -rc;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, ifname);
    }
    PyObject *list = gstrings_list(gs, room);
    free(gs);
    return list;
}

PyDoc_STRVAR(strings_parse_doc,
"ethtool_strings_parse(buf) -> list[str]\n\n"
"The names in buf, a struct ethtool_gstrings as GSTRINGS leaves it (cmd,\n"
"string_set, len, then len names of 32 bytes), with the code ethtool_strings\n"
"runs on the kernel's reply; len is bounded by the buffer (tests, fuzzing).");

static PyObject *ethtool_strings_parse(PyObject *self, PyObject *args)
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b))
        return NULL;
    PyObject *list = PyList_New(0);
    if (list != NULL && (size_t)b.len >= sizeof(struct ethtool_gstrings)) {
        /* a copy: the struct wants its alignment, and the buffer's need not have it */
        struct ethtool_gstrings *gs = malloc((size_t)b.len);
        Py_CLEAR(list);
        if (gs == NULL) {
            PyErr_NoMemory();
        } else {
            memcpy(gs, b.buf, (size_t)b.len);
            list = gstrings_list(gs, ((size_t)b.len - sizeof(*gs)) / ETH_GSTRING_LEN);
            free(gs);
        }
    }
    PyBuffer_Release(&b);
    return list;
}

PyDoc_STRVAR(read_doc,
"ethtool_read(fd, ifnames: list[bytes], counts, out, status, quiet=None, sweep=1, tick=0) -> int\n\n"
"ETHTOOL_GSTATS for each port. counts: u32 buffer, the cached number of\n"
"stats per port; port i's values land in out (u64) right after those of\n"
"ports 0..i-1. status (int32, per port) is set to 0 when read, to the errno\n"
"on failure (values kept), or to -1 when the driver's count changed (the\n"
"string table must be re-read).\n\n"
"With quiet (u32 per port: reads since the port's values last changed,\n"
"kept by this call), a port quiet for sweep reads or more is read only when\n"
"(i + tick) % sweep == 0 and otherwise gets status -2 (values kept): idle\n"
"ports cost one ioctl per sweep, spread evenly over the ticks.\n"
"Returns the number of ports not failed (status 0 or -2).");

static const swtel_bufspec read_bufs[] = {{4, 0, "counts"}, {8, 1, "out"}, {4, 1, "status"}};
static const swtel_bufspec quiet_buf[] = {{4, 1, "quiet"}};

static PyObject *ethtool_read(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *names, *o[3], *quiet_obj = Py_None;
    Py_buffer b[3], qb = {0};
    unsigned int sweep = 1;
    unsigned long long tick = 0;
    if (!PyArg_ParseTuple(args, "iO!OOO|OIK", &fd, &PyList_Type, &names, &o[0], &o[1], &o[2], &quiet_obj,
                          &sweep, &tick) ||
        swtel_get_buffers(o, b, read_bufs, 3) < 0)
        return NULL;
    if (quiet_obj != Py_None && swtel_get_buffers(&quiet_obj, &qb, quiet_buf, 1) < 0) {
        swtel_release_buffers(b, 3);
        return NULL;
    }
    uint32_t *quiet = quiet_obj != Py_None ? qb.buf : NULL;
    if (sweep == 0)
        sweep = 1;
    Py_ssize_t nports = PyList_GET_SIZE(names);
    Py_buffer *counts = &b[0], *out = &b[1], *status = &b[2];
    const uint32_t *cnt = counts->buf;
    int32_t *st = status->buf;
    char (*ifnames)[IFNAMSIZ] = NULL;
    uint64_t total = 0, most = 0;
    int ok = -1;
    if (counts->len / 4 < nports || status->len / 4 < nports || (quiet && qb.len / 4 < nports)) {
        PyErr_SetString(PyExc_ValueError, "counts/status/quiet shorter than ifnames");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nports; i++) {
        total += cnt[i];
        if (cnt[i] > most)
            most = cnt[i];
    }
    if ((uint64_t)out->len < total * 8) {
        PyErr_SetString(PyExc_ValueError, "out buffer shorter than the sum of counts");
        goto done;
    }
    ifnames = calloc((size_t)nports + 1, IFNAMSIZ);
    if (ifnames == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nports; i++) {
        char *s;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PyList_GET_ITEM(names, i), &s, &len) < 0 ||
            check_ifname(s, len) < 0)
            goto done;
        memcpy(ifnames[i], s, (size_t)len);
    }
    /* The kernel writes as many stats as the driver has now, whatever n_stats
     * we pass, so the scratch buffer gets headroom for a grown table. */
    size_t room = (size_t)most * 2 + 4096;
    struct ethtool_stats *es = malloc(sizeof(*es) + room * sizeof(uint64_t));
    if (es == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    ok = 0;
    Py_BEGIN_ALLOW_THREADS
    uint64_t *dst = out->buf;
    for (Py_ssize_t i = 0; i < nports; i++) {
        if (quiet && quiet[i] >= sweep && ((uint64_t)i + tick) % sweep != 0) {
            /* idle: its turn in the sweep comes later; the ioctl is most of a tick */
            quiet[i] += quiet[i] < UINT32_MAX;
            st[i] = ETHTOOL_SKIPPED;
            ok++;
            dst += cnt[i];
            continue;
        }
        es->cmd = ETHTOOL_GSTATS;
        es->n_stats = cnt[i];
        int rc = eth_ioctl(fd, ifnames[i], es);
        if (rc < 0) {
            st[i] = -rc;
        } else {
            int moved = quiet && es->n_stats == cnt[i] && cnt[i] <= room &&
                        memcmp(dst, es->data, (size_t)cnt[i] * sizeof(uint64_t)) != 0;
            st[i] = gstats_take(es, room, cnt[i], dst);
            ok += st[i] == 0;
            if (quiet)
                quiet[i] = moved ? 0 : quiet[i] + (quiet[i] < UINT32_MAX);
        }
        dst += cnt[i];
    }
    Py_END_ALLOW_THREADS
    free(es);
done:
    free(ifnames);
    swtel_release_buffers(b, 3);
    if (quiet)
        PyBuffer_Release(&qb);
    return ok < 0 ? NULL : PyLong_FromLong(ok);
}

PyDoc_STRVAR(parse_doc,
"ethtool_parse(replies: list[bytes], counts, out, status) -> int\n\n"
"ethtool_read on replies already received: reply i is a struct ethtool_stats\n"
"as GSTATS leaves it (cmd, n_stats, then the values), checked against\n"
"counts[i] by the code ethtool_read runs on the kernel's reply (tests,\n"
"fuzzing). A reply too short for its header gets status EMSGSIZE.");

static PyObject *ethtool_parse(PyObject *self, PyObject *args)
{
    PyObject *replies, *o[3];
    Py_buffer b[3];
    if (!PyArg_ParseTuple(args, "O!OOO", &PyList_Type, &replies, &o[0], &o[1], &o[2]) ||
        swtel_get_buffers(o, b, read_bufs, 3) < 0)
        return NULL;
    Py_ssize_t nports = PyList_GET_SIZE(replies);
    const uint32_t *cnt = b[0].buf;
    int32_t *st = b[2].buf;
    uint64_t total = 0;
    int ok = -1;
    if (b[0].len / 4 < nports || b[2].len / 4 < nports) {
        PyErr_SetString(PyExc_ValueError, "counts/status shorter than replies");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nports; i++)
        total += cnt[i];
    if ((uint64_t)b[1].len < total * 8) {
        PyErr_SetString(PyExc_ValueError, "out buffer shorter than the sum of counts");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nports; i++) {
        if (!PyBytes_Check(PyList_GET_ITEM(replies, i))) {
            PyErr_SetString(PyExc_TypeError, "replies must be bytes");
            goto done;
        }
    }
    ok = 0;
    uint64_t *dst = b[1].buf;
    for (Py_ssize_t i = 0; i < nports; i++) {
        PyObject *r = PyList_GET_ITEM(replies, i);
        size_t len = (size_t)PyBytes_GET_SIZE(r);
        if (len < sizeof(struct ethtool_stats)) {
            st[i] = EMSGSIZE;
        } else {
            struct ethtool_stats *es = malloc(len); /* aligned, as the reader's own buffer */
            if (es == NULL) {
                PyErr_NoMemory();
                ok = -1;
                goto done;
            }
            memcpy(es, PyBytes_AS_STRING(r), len);
            st[i] = gstats_take(es, (len - sizeof(*es)) / sizeof(uint64_t), cnt[i], dst);
            ok += st[i] == 0;
            free(es);
        }
        dst += cnt[i];
    }
done:
    swtel_release_buffers(b, 3);
    return ok < 0 ? NULL : PyLong_FromLong(ok);
}

PyMethodDef swtel_ethtool_methods[] = {
    {"ethtool_drvinfo", ethtool_drvinfo, METH_VARARGS, drvinfo_doc},
    {"ethtool_strings", ethtool_strings, METH_VARARGS, strings_doc},
    {"ethtool_strings_parse", ethtool_strings_parse, METH_VARARGS, strings_parse_doc},
    {"ethtool_read", ethtool_read, METH_VARARGS, read_doc},
    {"ethtool_parse", ethtool_parse, METH_VARARGS, parse_doc},
    {NULL, NULL, 0, NULL},
};
