/* ethtool netlink (generic netlink family "ethtool"): FEC statistics, with the FEC
 * codeword-error histogram of Linux 6.18, and the standard statistics groups (eth-phy,
 * eth-mac, eth-ctrl, rmon). agent/sources/ethnl.py names and maps what this returns;
 * agent/_fallback/ethnl.py is the pure-Python twin and both must give the same answer
 * for any buffer.
 *
 * I/O and parsing are apart: ethnl_family and ethnl_query talk to the kernel (the GIL
 * released) and return raw replies; ethnl_family_parse, ethnl_fec_parse and
 * ethnl_stats_parse are pure (bytes in, plain types out), so tests feed them byte-exact
 * messages built from the UAPI layouts.
 *
 * Nothing in a reply is trusted (as in links.c): a bad message header makes the whole
 * buffer unusable (ValueError); a bad attribute length ends that attribute walk, keeping
 * what was read before it; of an attribute the parser reads once, the first usable one
 * wins; one too short for its type is skipped. */
#include "swtel.h"
#include "genl.h"

#include <errno.h>
#include <linux/ethtool_netlink.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The FEC histogram (Linux 6.18, include/uapi/linux/ethtool_netlink_generated.h): the
 * build machine's headers may predate it, and its values are UAPI, so they are spelled
 * here: ETHTOOL_A_FEC_STAT_HIST follows ETHTOOL_A_FEC_STAT_CORR_BITS, and the bin's nest
 * is ETHTOOL_A_FEC_HIST_PAD = 1, _BIN_LOW, _BIN_HIGH, _BIN_VAL, _BIN_VAL_PER_LANE. */
#define FEC_STAT_HIST 5
#define FEC_HIST_BIN_LOW 2      /* u32, errors per codeword, inclusive */
#define FEC_HIST_BIN_HIGH 3     /* u32, inclusive */
#define FEC_HIST_BIN_VAL 4      /* uint: u32 or u64 */
#define FEC_HIST_BIN_VAL_PER_LANE 5 /* u64 array */
_Static_assert(ETHTOOL_A_FEC_STAT_CORR_BITS + 1 == FEC_STAT_HIST, "FEC_STAT_HIST is CORR_BITS + 1 in the UAPI");

_Static_assert(SWTEL_ETHNL_FEC_GET == ETHTOOL_MSG_FEC_GET && SWTEL_ETHNL_STATS_GET == ETHTOOL_MSG_STATS_GET,
               "swtel.h spells the UAPI command numbers");

#define STATS_GROUPS_KNOWN 4 /* eth-phy, eth-mac, eth-ctrl, rmon: the request's bitset size */
_Static_assert(ETHTOOL_STATS_RMON + 1 == STATS_GROUPS_KNOWN, "the four standard groups");

#define REQUEST_MAX 128 /* one request (a FEC reply is ~2 KiB, far below GENL_REPLY_MAX) */
_Static_assert(REQUEST_MAX <= GENL_REQUEST_MAX, "a request fits genl_batch's buffer");

/* ---------------------------------------------------------------- attributes */

static uint32_t get_u32(span s)
{
    uint32_t v;
    memcpy(&v, s.p, sizeof(v));
    return v;
}

static uint64_t get_u64(span s)
{
    uint64_t v;
    memcpy(&v, s.p, sizeof(v));
    return v;
}

/* A u64 array attribute as a list: len / 8 values (a trailing partial one ignored). */
static PyObject *u64_list(span s)
{
    size_t n = s.len / 8;
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        span one = {s.p + 8 * i, 8};
        PyObject *v = PyLong_FromUnsignedLongLong(get_u64(one));
        if (v == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}

/* ETHTOOL_A_HEADER_DEV_INDEX of a request header nest (0: absent). */
static uint32_t header_ifindex(span nest)
{
    size_t pos = 0;
    uint16_t type;
    span a;
    while (next_attr(nest, &pos, &type, &a))
        if (type == ETHTOOL_A_HEADER_DEV_INDEX && a.len >= 4)
            return get_u32(a);
    return 0;
}

/* ---------------------------------------------------------------- family */

PyDoc_STRVAR(family_parse_doc,
"ethnl_family_parse(buf) -> int\n\n"
"The family id in a CTRL_CMD_NEWFAMILY reply (CTRL_ATTR_FAMILY_ID). OSError for an error\n"
"reply, ValueError for a malformed one or none.");

static PyObject *ethnl_family_parse(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    long id = 0;
    int rc = genl_family_id(view.buf, (size_t)view.len, &id);
    PyBuffer_Release(&view);
    return rc < 0 ? NULL : PyLong_FromLong(id);
}

/* ---------------------------------------------------------------- requests */

/* Close a nest opened at start (its header written with the final length). */
static void end_nest(char *buf, size_t start, size_t end, uint16_t type)
{
    struct nlattr nla = {.nla_len = (uint16_t)(end - start), .nla_type = (uint16_t)(type | NLA_F_NESTED)};
    memcpy(buf + start, &nla, sizeof(nla));
}

/* One request into buf (REQUEST_MAX bytes); its length. */
static size_t build_request(char *buf, uint16_t family, uint8_t cmd, uint32_t seq, uint32_t ifindex,
                            uint32_t groups)
{
    size_t off = genl_begin(buf, cmd, ETHTOOL_GENL_VERSION);
    uint16_t header = cmd == ETHTOOL_MSG_FEC_GET ? ETHTOOL_A_FEC_HEADER : ETHTOOL_A_STATS_HEADER;
    size_t nest = off;
    off += NLA_HDRLEN;
    off = put_attr(buf, off, ETHTOOL_A_HEADER_DEV_INDEX, &ifindex, 4);
    if (cmd == ETHTOOL_MSG_FEC_GET) { /* FEC statistics only when asked for */
        uint32_t flags = ETHTOOL_FLAG_STATS;
        off = put_attr(buf, off, ETHTOOL_A_HEADER_FLAGS, &flags, 4);
    }
    end_nest(buf, nest, off, header);
    if (cmd == ETHTOOL_MSG_STATS_GET) { /* a compact bitset: these groups, no mask */
        uint32_t size = STATS_GROUPS_KNOWN;
        nest = off;
        off += NLA_HDRLEN;
        off = put_attr(buf, off, ETHTOOL_A_BITSET_NOMASK, NULL, 0);
        off = put_attr(buf, off, ETHTOOL_A_BITSET_SIZE, &size, 4);
        off = put_attr(buf, off, ETHTOOL_A_BITSET_VALUE, &groups, 4);
        end_nest(buf, nest, off, ETHTOOL_A_STATS_GROUPS);
    }
    return genl_end(buf, off, family, NLM_F_REQUEST, seq);
}

static int check_request(long family, int cmd, unsigned long groups)
{
    if (genl_check_family(family) < 0)
        return -1;
    if (cmd != ETHTOOL_MSG_FEC_GET && cmd != ETHTOOL_MSG_STATS_GET) {
        PyErr_Format(PyExc_ValueError, "unknown ethtool command %d", cmd);
        return -1;
    }
    if (cmd == ETHTOOL_MSG_STATS_GET && (groups == 0 || groups >> STATS_GROUPS_KNOWN)) {
        PyErr_Format(PyExc_ValueError, "stats groups must be a mask of bits 0-3, got %lu", groups);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(request_doc,
"ethnl_request(family, cmd, seq, ifindex, groups) -> bytes\n\n"
"The request ethnl_query sends: cmd ETHNL_FEC_GET (with ETHTOOL_FLAG_STATS) or\n"
"ETHNL_STATS_GET (groups: a mask of ETHNL_GROUP_* bits, as a compact bitset).");

static PyObject *ethnl_request(PyObject *self, PyObject *args)
{
    long family;
    int cmd;
    unsigned int seq, ifindex;
    unsigned long groups;
    if (!PyArg_ParseTuple(args, "liIIk", &family, &cmd, &seq, &ifindex, &groups))
        return NULL;
    if (check_request(family, cmd, groups) < 0)
        return NULL;
    char buf[REQUEST_MAX];
    size_t len = build_request(buf, (uint16_t)family, (uint8_t)cmd, seq, ifindex, (uint32_t)groups);
    return PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
}

/* ---------------------------------------------------------------- I/O (GIL released) */

PyDoc_STRVAR(family_doc,
"ethnl_family(fd) -> int\n\n"
"Resolve the \"ethtool\" generic netlink family (CTRL_CMD_GETFAMILY) on the NETLINK_GENERIC\n"
"socket fd. OSError as the kernel answers (ENOENT: no ethtool netlink).");

static PyObject *ethnl_family(PyObject *self, PyObject *args)
{
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd))
        return NULL;
    return genl_family(fd, ETHTOOL_GENL_NAME, sizeof(ETHTOOL_GENL_NAME));
}

PyDoc_STRVAR(query_doc,
"ethnl_query(fd, family, cmd, ifindexes, groups) -> list[bytes]\n\n"
"One request per ifindex (see ethnl_request), each answered before the next is sent,\n"
"the GIL released throughout: the raw reply datagram of each, in order (an error\n"
"reply is returned as it is: the parsers raise it). OSError when the socket fails\n"
"(EAGAIN: its SO_RCVTIMEO passed).");

static PyObject *ethnl_query(PyObject *self, PyObject *args)
{
    int fd, cmd;
    long family;
    PyObject *seq_obj;
    unsigned long groups;
    if (!PyArg_ParseTuple(args, "iliOk", &fd, &family, &cmd, &seq_obj, &groups))
        return NULL;
    if (check_request(family, cmd, groups) < 0)
        return NULL;
    PyObject *fast = PySequence_Fast(seq_obj, "ifindexes must be a sequence");
    if (fast == NULL)
        return NULL;
    genl_requests reqs;
    PyObject *out = NULL;
    if (genl_requests_new(&reqs, PySequence_Fast_GET_SIZE(fast)) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < reqs.n; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, i));
        if (PyErr_Occurred())
            goto done;
        if (v == 0 || v > UINT32_MAX) {
            PyErr_Format(PyExc_ValueError, "bad ifindex %lu", v);
            goto done;
        }
        reqs.lens[i] = build_request(genl_request_at(&reqs, i), (uint16_t)family, (uint8_t)cmd, genl_next_seq(),
                                     (uint32_t)v, (uint32_t)groups);
    }
    out = genl_batch(fd, &reqs);
done:
    genl_requests_free(&reqs);
    Py_DECREF(fast);
    return out;
}

/* ---------------------------------------------------------------- FEC */

/* One ETHTOOL_A_FEC_STAT_HIST nest: (low, high, value, per_lane), or Py_None when it lacks
 * a bound. Without BIN_VAL the value is the lanes' sum (the kernel's own rule). */
static PyObject *fec_bin(span nest)
{
    size_t pos = 0;
    uint16_t type;
    span a, lanes = {NULL, 0};
    int have_low = 0, have_high = 0, have_val = 0, have_lanes = 0;
    uint32_t low = 0, high = 0;
    uint64_t val = 0;
    while (next_attr(nest, &pos, &type, &a)) {
        if (type == FEC_HIST_BIN_LOW && !have_low && a.len >= 4) {
            low = get_u32(a);
            have_low = 1;
        } else if (type == FEC_HIST_BIN_HIGH && !have_high && a.len >= 4) {
            high = get_u32(a);
            have_high = 1;
        } else if (type == FEC_HIST_BIN_VAL && !have_val && (a.len == 4 || a.len == 8)) {
            val = a.len == 4 ? get_u32(a) : get_u64(a);
            have_val = 1;
        } else if (type == FEC_HIST_BIN_VAL_PER_LANE && !have_lanes) {
            lanes = a;
            have_lanes = 1;
        }
    }
    if (!have_low || !have_high)
        Py_RETURN_NONE;
    if (!have_val)
        for (size_t i = 0; i < lanes.len / 8; i++) {
            span one = {lanes.p + 8 * i, 8};
            val += get_u64(one);
        }
    PyObject *per_lane = u64_list(lanes);
    if (per_lane == NULL)
        return NULL;
    return Py_BuildValue("(IIKN)", low, high, (unsigned long long)val, per_lane);
}

/* ETHTOOL_A_FEC_STATS: the three arrays (first of each wins) and every histogram bin. */
static int fec_stats(span nest, PyObject *arrays[3], PyObject *hist)
{
    size_t pos = 0;
    uint16_t type;
    span a;
    while (next_attr(nest, &pos, &type, &a)) {
        if (type >= ETHTOOL_A_FEC_STAT_CORRECTED && type <= ETHTOOL_A_FEC_STAT_CORR_BITS) {
            PyObject **slot = &arrays[type - ETHTOOL_A_FEC_STAT_CORRECTED];
            if (*slot != NULL)
                continue;
            if ((*slot = u64_list(a)) == NULL)
                return -1;
        } else if (type == FEC_STAT_HIST) {
            PyObject *bin = fec_bin(a);
            if (bin == NULL)
                return -1;
            int rc = bin == Py_None ? 0 : PyList_Append(hist, bin);
            Py_DECREF(bin);
            if (rc < 0)
                return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(fec_parse_doc,
"ethnl_fec_parse(buf) -> (ifindex, corrected, uncorrectable, corrected_bits, hist)\n\n"
"An ETHTOOL_MSG_FEC_GET_REPLY. The three blocks are the kernel's u64 arrays, [] when\n"
"absent, else [total, lane 0, lane 1, ...]; hist: one (low, high, value, per_lane) per\n"
"ETHTOOL_A_FEC_STAT_HIST bin, in order (bounds inclusive, from the device). OSError for\n"
"an error reply (EOPNOTSUPP: the device has no FEC), ValueError for a malformed one.");

static PyObject *ethnl_fec_parse(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    span attrs;
    PyObject *arrays[3] = {NULL, NULL, NULL}, *hist = NULL, *result = NULL;
    if (genl_find_reply(view.buf, (size_t)view.len, ETHTOOL_MSG_FEC_GET_REPLY, "ETHTOOL_MSG_FEC_GET_REPLY", &attrs) < 0)
        goto done;
    if ((hist = PyList_New(0)) == NULL)
        goto done;
    uint32_t ifindex = 0;
    int have_header = 0, have_stats = 0;
    size_t pos = 0;
    uint16_t type;
    span a;
    while (next_attr(attrs, &pos, &type, &a)) {
        if (type == ETHTOOL_A_FEC_HEADER && !have_header) {
            ifindex = header_ifindex(a);
            have_header = 1;
        } else if (type == ETHTOOL_A_FEC_STATS && !have_stats) {
            have_stats = 1;
            if (fec_stats(a, arrays, hist) < 0)
                goto done;
        }
    }
    for (int i = 0; i < 3; i++)
        if (arrays[i] == NULL && (arrays[i] = PyList_New(0)) == NULL)
            goto done;
    result = Py_BuildValue("(IOOOO)", ifindex, arrays[0], arrays[1], arrays[2], hist);
done:
    for (int i = 0; i < 3; i++)
        Py_XDECREF(arrays[i]);
    Py_XDECREF(hist);
    PyBuffer_Release(&view);
    return result;
}

/* ---------------------------------------------------------------- standard statistics */

/* One rmon histogram bucket: (low, high, value), or Py_None when it lacks a field. */
static PyObject *stats_bucket(span nest)
{
    size_t pos = 0;
    uint16_t type;
    span a;
    int have_low = 0, have_high = 0, have_val = 0;
    uint32_t low = 0, high = 0;
    uint64_t val = 0;
    while (next_attr(nest, &pos, &type, &a)) {
        if (type == ETHTOOL_A_STATS_GRP_HIST_BKT_LOW && !have_low && a.len >= 4) {
            low = get_u32(a);
            have_low = 1;
        } else if (type == ETHTOOL_A_STATS_GRP_HIST_BKT_HI && !have_high && a.len >= 4) {
            high = get_u32(a);
            have_high = 1;
        } else if (type == ETHTOOL_A_STATS_GRP_HIST_VAL && !have_val && a.len >= 8) {
            val = get_u64(a);
            have_val = 1;
        }
    }
    if (!have_low || !have_high || !have_val)
        Py_RETURN_NONE;
    return Py_BuildValue("(IIK)", low, high, (unsigned long long)val);
}

static int append_new(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return -1;
    int rc = item == Py_None ? 0 : PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* One ETHTOOL_A_STATS_GRP: (id, ss_id, stats, hist_rx, hist_tx), Py_None without an id.
 * Each ETHTOOL_A_STATS_GRP_STAT nest holds a u64 attribute whose type is the statistic. */
static PyObject *stats_group(span nest)
{
    PyObject *stats = PyList_New(0), *rx = PyList_New(0), *tx = PyList_New(0), *result = NULL;
    size_t pos = 0;
    uint16_t type;
    span a;
    int have_id = 0, have_ss = 0;
    uint32_t id = 0, ss_id = 0;
    if (stats == NULL || rx == NULL || tx == NULL)
        goto done;
    while (next_attr(nest, &pos, &type, &a)) {
        if (type == ETHTOOL_A_STATS_GRP_ID && !have_id && a.len >= 4) {
            id = get_u32(a);
            have_id = 1;
        } else if (type == ETHTOOL_A_STATS_GRP_SS_ID && !have_ss && a.len >= 4) {
            ss_id = get_u32(a);
            have_ss = 1;
        } else if (type == ETHTOOL_A_STATS_GRP_STAT) {
            size_t ipos = 0;
            uint16_t itype;
            span v;
            while (next_attr(a, &ipos, &itype, &v)) {
                if (v.len < 8)
                    continue;
                if (append_new(stats, Py_BuildValue("(HK)", itype, (unsigned long long)get_u64(v))) < 0)
                    goto done;
            }
        } else if (type == ETHTOOL_A_STATS_GRP_HIST_RX || type == ETHTOOL_A_STATS_GRP_HIST_TX) {
            if (append_new(type == ETHTOOL_A_STATS_GRP_HIST_RX ? rx : tx, stats_bucket(a)) < 0)
                goto done;
        }
    }
    if (!have_id) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        result = Py_BuildValue("(IIOOO)", id, ss_id, stats, rx, tx);
    }
done:
    Py_XDECREF(stats);
    Py_XDECREF(rx);
    Py_XDECREF(tx);
    return result;
}

PyDoc_STRVAR(stats_parse_doc,
"ethnl_stats_parse(buf) -> (ifindex, groups)\n\n"
"An ETHTOOL_MSG_STATS_GET_REPLY. groups: one (id, ss_id, stats, hist_rx, hist_tx) per\n"
"ETHTOOL_A_STATS_GRP with an id, in order; stats: (attribute, u64) in order (the\n"
"attribute numbers the group's statistic, from 0); hist_rx/hist_tx: (low, high, value)\n"
"buckets (rmon; bounds from the device). OSError for an error reply, ValueError for a\n"
"malformed one.");

static PyObject *ethnl_stats_parse(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    span attrs;
    PyObject *groups = NULL, *result = NULL;
    if (genl_find_reply(view.buf, (size_t)view.len, ETHTOOL_MSG_STATS_GET_REPLY, "ETHTOOL_MSG_STATS_GET_REPLY",
                   &attrs) < 0)
        goto done;
    if ((groups = PyList_New(0)) == NULL)
        goto done;
    uint32_t ifindex = 0;
    int have_header = 0;
    size_t pos = 0;
    uint16_t type;
    span a;
    while (next_attr(attrs, &pos, &type, &a)) {
        if (type == ETHTOOL_A_STATS_HEADER && !have_header) {
            ifindex = header_ifindex(a);
            have_header = 1;
        } else if (type == ETHTOOL_A_STATS_GRP) {
            if (append_new(groups, stats_group(a)) < 0)
                goto done;
        }
    }
    result = Py_BuildValue("(IO)", ifindex, groups);
done:
    Py_XDECREF(groups);
    PyBuffer_Release(&view);
    return result;
}

PyMethodDef swtel_ethnl_methods[] = {
    {"ethnl_family", ethnl_family, METH_VARARGS, family_doc},
    {"ethnl_family_parse", ethnl_family_parse, METH_VARARGS, family_parse_doc},
    {"ethnl_request", ethnl_request, METH_VARARGS, request_doc},
    {"ethnl_query", ethnl_query, METH_VARARGS, query_doc},
    {"ethnl_fec_parse", ethnl_fec_parse, METH_VARARGS, fec_parse_doc},
    {"ethnl_stats_parse", ethnl_stats_parse, METH_VARARGS, stats_parse_doc},
    {NULL, NULL, 0, NULL},
};
