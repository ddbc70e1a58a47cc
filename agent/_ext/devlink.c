/* devlink (generic netlink family "devlink"): shared-buffer occupancy of switch ASICs
 * (mlxsw), and packet-trap statistics (devlink_trap_parse: the drop reasons).
 * agent/sources/devlink.py and devlink_trap.py name and map what this returns;
 * agent/_fallback/devlink.py is the pure-Python twin and both must give the same answer
 * for any buffer.
 *
 * I/O and parsing are apart: devlink_family, devlink_dump and devlink_exec talk to the
 * kernel (the GIL released) and return raw replies; devlink_parse is pure (bytes in,
 * plain types out), so tests feed it byte-exact messages built from the UAPI layouts.
 *
 * Nothing in a reply is trusted (as in ethnl.c): a bad message header is a ValueError;
 * a bad attribute length ends that message's attribute walk, keeping what was read
 * before it; of each attribute the first usable one wins; one too short for its type
 * is skipped. Occupancy values are what the kernel gives: u32, bytes for mlxsw (the
 * driver converts its cells, DEVLINK_ATTR_SB_POOL_CELL_SIZE bytes each, to bytes). */
#include "swtel.h"
#include "genl.h"

#include <errno.h>
#include <linux/devlink.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

_Static_assert(SWTEL_DEVLINK_PORT_GET == DEVLINK_CMD_PORT_GET && SWTEL_DEVLINK_SB_GET == DEVLINK_CMD_SB_GET &&
                   SWTEL_DEVLINK_SB_PORT_POOL_GET == DEVLINK_CMD_SB_PORT_POOL_GET &&
                   SWTEL_DEVLINK_SB_TC_POOL_BIND_GET == DEVLINK_CMD_SB_TC_POOL_BIND_GET &&
                   SWTEL_DEVLINK_SB_OCC_SNAPSHOT == DEVLINK_CMD_SB_OCC_SNAPSHOT &&
                   SWTEL_DEVLINK_SB_OCC_MAX_CLEAR == DEVLINK_CMD_SB_OCC_MAX_CLEAR &&
                   SWTEL_DEVLINK_TRAP_GET == DEVLINK_CMD_TRAP_GET &&
                   SWTEL_DEVLINK_TRAP_GROUP_GET == DEVLINK_CMD_TRAP_GROUP_GET,
               "swtel.h spells the UAPI command numbers");

#define DUMP_MAX (64u << 20)   /* a whole dump; a Spectrum-4's TC dump is ~1 MiB */
#define NAME_MAX_LEN 64        /* bus and device names in a request (the kernel's are shorter) */
#define FIELDS 11              /* devlink_parse's tuple */
#define TRAP_FIELDS 12         /* devlink_trap_parse's tuple */
#define TRAP_GENERIC_SLOT 7

/* ---------------------------------------------------------------- parsing */

/* Which tuple slot an attribute fills, and how many bytes it needs (0: a string). */
typedef struct {
    uint16_t type;
    int slot;
    size_t size;
} field;

static const field FIELDS_OF[] = {
    {DEVLINK_ATTR_BUS_NAME, 1, 0},
    {DEVLINK_ATTR_DEV_NAME, 2, 0},
    {DEVLINK_ATTR_PORT_INDEX, 3, 4},
    {DEVLINK_ATTR_SB_INDEX, 4, 4},
    {DEVLINK_ATTR_SB_POOL_INDEX, 5, 2},
    {DEVLINK_ATTR_SB_TC_INDEX, 6, 2},
    {DEVLINK_ATTR_SB_POOL_TYPE, 7, 1},
    {DEVLINK_ATTR_SB_OCC_CUR, 8, 4},
    {DEVLINK_ATTR_SB_OCC_MAX, 9, 4},
    {DEVLINK_ATTR_PORT_NETDEV_NAME, 10, 0},
};

static PyObject *field_value(const field *f, span a)
{
    if (f->size == 0) { /* a string: up to its NUL, decoded as interface names are */
        size_t n = 0;
        while (n < a.len && a.p[n] != '\0')
            n++;
        return PyUnicode_DecodeFSDefaultAndSize(a.p, (Py_ssize_t)n);
    }
    if (f->size == 1)
        return PyLong_FromUnsignedLong((uint8_t)a.p[0]);
    if (f->size == 2) {
        uint16_t v;
        memcpy(&v, a.p, sizeof(v));
        return PyLong_FromUnsignedLong(v);
    }
    if (f->size == 8) { /* nla_put_u64_64bit: 4-byte aligned only, hence memcpy */
        uint64_t v;
        memcpy(&v, a.p, sizeof(v));
        return PyLong_FromUnsignedLongLong(v);
    }
    uint32_t v;
    memcpy(&v, a.p, sizeof(v));
    return PyLong_FromUnsignedLong(v);
}

/* Fill the empty slots of t that attrs' attributes of table give (the first usable wins);
 * -1 with an exception set. */
static int fill_fields(PyObject *t, span attrs, const field *table, size_t n)
{
    size_t pos = 0;
    uint16_t type;
    span a;
    while (next_attr(attrs, &pos, &type, &a)) {
        for (size_t i = 0; i < n; i++) {
            const field *f = &table[i];
            if (f->type != type || PyTuple_GET_ITEM(t, f->slot) != NULL || a.len < f->size)
                continue;
            PyObject *v = field_value(f, a);
            if (v == NULL)
                return -1;
            PyTuple_SET_ITEM(t, f->slot, v);
        }
    }
    return 0;
}

/* One devlink message's tuple: (cmd, bus, dev, port, sb, pool, tc, pool_type, occ_cur,
 * occ_max, netdev), None for what it lacks. */
static PyObject *message_tuple(uint8_t cmd, span attrs)
{
    PyObject *t = PyTuple_New(FIELDS);
    if (t == NULL)
        return NULL;
    PyObject *c = PyLong_FromUnsignedLong(cmd);
    if (c == NULL)
        goto fail;
    PyTuple_SET_ITEM(t, 0, c);
    if (fill_fields(t, attrs, FIELDS_OF, sizeof(FIELDS_OF) / sizeof(FIELDS_OF[0])) < 0)
        goto fail;
    for (int i = 1; i < FIELDS; i++)
        if (PyTuple_GET_ITEM(t, i) == NULL) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(t, i, Py_None);
        }
    return t;
fail:
    Py_DECREF(t);
    return NULL;
}

typedef PyObject *(*tuple_of)(uint8_t cmd, span attrs);

/* Every devlink message in buf appended to out, as make_tuple gives it; -1 with an
 * exception set (a malformed header, or an error reply: NLMSG_ERROR, or a failed dump's
 * NLMSG_DONE). */
static int parse_with(const char *buf, size_t size, PyObject *out, tuple_of make_tuple)
{
    size_t off = 0;
    uint8_t cmd;
    span attrs;
    int rc;
    while ((rc = genl_next(buf, size, &off, &cmd, &attrs)) == 1) {
        PyObject *t = make_tuple(cmd, attrs);
        if (t == NULL)
            return -1;
        rc = PyList_Append(out, t);
        Py_DECREF(t);
        if (rc < 0)
            return -1;
    }
    return rc;
}

/* ---------------------------------------------------------------- traps */

static const field TRAP_FIELDS_OF[] = {
    {DEVLINK_ATTR_BUS_NAME, 1, 0},
    {DEVLINK_ATTR_DEV_NAME, 2, 0},
    {DEVLINK_ATTR_TRAP_GROUP_NAME, 3, 0},
    {DEVLINK_ATTR_TRAP_NAME, 4, 0},
    {DEVLINK_ATTR_TRAP_TYPE, 5, 1},
    {DEVLINK_ATTR_TRAP_ACTION, 6, 1},
    {DEVLINK_ATTR_TRAP_POLICER_ID, 8, 4},
};

/* Inside DEVLINK_ATTR_STATS (its own attribute space; DEVLINK_ATTR_PAD there is skipped). */
static const field STATS_FIELDS_OF[] = {
    {DEVLINK_ATTR_STATS_RX_PACKETS, 9, 8},
    {DEVLINK_ATTR_STATS_RX_BYTES, 10, 8},
    {DEVLINK_ATTR_STATS_RX_DROPPED, 11, 8},
};

/* One trap (or trap group, or policer) message's tuple: (cmd, bus, dev, group, trap, type,
 * action, generic, policer_id, rx_packets, rx_bytes, rx_dropped); generic is a bool, the
 * rest None for what the message lacks. Every DEVLINK_ATTR_STATS nest is walked, the first
 * usable value of each statistic winning, as at the top level. */
static PyObject *trap_tuple(uint8_t cmd, span attrs)
{
    PyObject *t = PyTuple_New(TRAP_FIELDS);
    if (t == NULL)
        return NULL;
    PyObject *c = PyLong_FromUnsignedLong(cmd);
    if (c == NULL)
        goto fail;
    PyTuple_SET_ITEM(t, 0, c);
    if (fill_fields(t, attrs, TRAP_FIELDS_OF, sizeof(TRAP_FIELDS_OF) / sizeof(TRAP_FIELDS_OF[0])) < 0)
        goto fail;
    size_t pos = 0;
    uint16_t type;
    span a;
    while (next_attr(attrs, &pos, &type, &a)) {
        if (type == DEVLINK_ATTR_TRAP_GENERIC && PyTuple_GET_ITEM(t, TRAP_GENERIC_SLOT) == NULL) {
            Py_INCREF(Py_True);
            PyTuple_SET_ITEM(t, TRAP_GENERIC_SLOT, Py_True);
        } else if (type == DEVLINK_ATTR_STATS &&
                   fill_fields(t, a, STATS_FIELDS_OF, sizeof(STATS_FIELDS_OF) / sizeof(STATS_FIELDS_OF[0])) < 0) {
            goto fail;
        }
    }
    if (PyTuple_GET_ITEM(t, TRAP_GENERIC_SLOT) == NULL) {
        Py_INCREF(Py_False);
        PyTuple_SET_ITEM(t, TRAP_GENERIC_SLOT, Py_False);
    }
    for (int i = 1; i < TRAP_FIELDS; i++)
        if (PyTuple_GET_ITEM(t, i) == NULL) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(t, i, Py_None);
        }
    return t;
fail:
    Py_DECREF(t);
    return NULL;
}

PyDoc_STRVAR(trap_parse_doc,
"devlink_trap_parse(buf) -> list[tuple]\n\n"
"Every devlink message in buf (a DEVLINK_CMD_TRAP_GET or _TRAP_GROUP_GET dump), in order, as\n"
"(cmd, bus, dev, group, trap, type, action, generic, policer_id, rx_packets, rx_bytes,\n"
"rx_dropped): the genlmsghdr command and DEVLINK_ATTR_BUS_NAME, _DEV_NAME, _TRAP_GROUP_NAME,\n"
"_TRAP_NAME, _TRAP_TYPE, _TRAP_ACTION, _TRAP_GENERIC (a bool), _TRAP_POLICER_ID and, from the\n"
"DEVLINK_ATTR_STATS nest, _STATS_RX_PACKETS, _RX_BYTES and _RX_DROPPED; None for what a\n"
"message lacks. Errors as devlink_parse.");

static PyObject *devlink_trap_parse(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out != NULL && parse_with(view.buf, (size_t)view.len, out, trap_tuple) < 0)
        Py_CLEAR(out);
    PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(parse_doc,
"devlink_parse(buf) -> list[tuple]\n\n"
"Every devlink message in buf (a dump's datagrams, or a request's answer), in order, as\n"
"(cmd, bus, dev, port_index, sb_index, pool_index, tc_index, pool_type, occ_cur, occ_max,\n"
"netdev): the genlmsghdr command and DEVLINK_ATTR_BUS_NAME, _DEV_NAME, _PORT_INDEX,\n"
"_SB_INDEX, _SB_POOL_INDEX, _SB_TC_INDEX, _SB_POOL_TYPE, _SB_OCC_CUR, _SB_OCC_MAX and\n"
"_PORT_NETDEV_NAME, None for what a message lacks. OSError for an error reply (NLMSG_ERROR,\n"
"or a dump's NLMSG_DONE with an error), ValueError for a malformed message.");

static PyObject *devlink_parse(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out != NULL && parse_with(view.buf, (size_t)view.len, out, message_tuple) < 0)
        Py_CLEAR(out);
    PyBuffer_Release(&view);
    return out;
}

/* ---------------------------------------------------------------- requests */

/* A shared buffer's handle: the devlink device's bus and name, and the SB index. */
typedef struct {
    char bus[NAME_MAX_LEN + 1];
    char dev[NAME_MAX_LEN + 1];
    uint32_t sb;
} handle;

#define REQUEST_MAX (NLMSG_LENGTH(GENL_HDRLEN) + 2 * NLA_ALIGN(NLA_HDRLEN + NAME_MAX_LEN + 1) + 8)
_Static_assert(REQUEST_MAX <= GENL_REQUEST_MAX, "a shared-buffer request fits genl_batch's buffer");

/* A dump request (h NULL) or a doit on one shared buffer, with an ack; its length. */
static size_t build_request(char *buf, uint16_t family, uint8_t cmd, uint32_t seq, const handle *h)
{
    size_t off = genl_begin(buf, cmd, DEVLINK_GENL_VERSION);
    uint16_t flags = NLM_F_REQUEST | NLM_F_DUMP;
    if (h != NULL) {
        off = put_attr(buf, off, DEVLINK_ATTR_BUS_NAME, h->bus, strlen(h->bus) + 1);
        off = put_attr(buf, off, DEVLINK_ATTR_DEV_NAME, h->dev, strlen(h->dev) + 1);
        off = put_attr(buf, off, DEVLINK_ATTR_SB_INDEX, &h->sb, 4);
        flags = NLM_F_REQUEST | NLM_F_ACK;
    }
    return genl_end(buf, off, family, flags, seq);
}

static int is_dump(int cmd)
{
    return cmd == DEVLINK_CMD_PORT_GET || cmd == DEVLINK_CMD_SB_GET || cmd == DEVLINK_CMD_SB_PORT_POOL_GET ||
           cmd == DEVLINK_CMD_SB_TC_POOL_BIND_GET || cmd == DEVLINK_CMD_TRAP_GET || cmd == DEVLINK_CMD_TRAP_GROUP_GET;
}

static int check_request(long family, int cmd, int dump)
{
    if (genl_check_family(family) < 0)
        return -1;
    if (dump ? !is_dump(cmd) : cmd != DEVLINK_CMD_SB_OCC_SNAPSHOT && cmd != DEVLINK_CMD_SB_OCC_MAX_CLEAR) {
        PyErr_Format(PyExc_ValueError, "devlink command %d is not a %s this module sends", cmd,
                     dump ? "dump" : "shared-buffer request");
        return -1;
    }
    return 0;
}

/* A (bus, dev, sb_index) tuple into h. */
static int take_handle(PyObject *obj, handle *h)
{
    PyObject *bus_obj, *dev_obj, *sb_obj;
    if (!PyTuple_Check(obj) || !PyArg_ParseTuple(obj, "UUO!", &bus_obj, &dev_obj, &PyLong_Type, &sb_obj)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "a handle is (bus, dev, sb_index)");
        return -1;
    }
    unsigned long sb = PyLong_AsUnsignedLong(sb_obj);
    if (PyErr_Occurred() || sb > UINT32_MAX) {
        PyErr_Clear();
        PyErr_SetString(PyExc_OverflowError, "sb_index out of range");
        return -1;
    }
    Py_ssize_t bus_len, dev_len;
    const char *bus = PyUnicode_AsUTF8AndSize(bus_obj, &bus_len);
    const char *dev = bus == NULL ? NULL : PyUnicode_AsUTF8AndSize(dev_obj, &dev_len);
    if (dev == NULL)
        return -1;
    if (bus_len == 0 || dev_len == 0 || bus_len > NAME_MAX_LEN || dev_len > NAME_MAX_LEN ||
        strlen(bus) != (size_t)bus_len || strlen(dev) != (size_t)dev_len) {
        PyErr_SetString(PyExc_ValueError, "devlink bus and device names: 1-64 bytes, no NUL");
        return -1;
    }
    memcpy(h->bus, bus, (size_t)bus_len + 1);
    memcpy(h->dev, dev, (size_t)dev_len + 1);
    h->sb = (uint32_t)sb;
    return 0;
}

PyDoc_STRVAR(request_doc,
"devlink_request(family, cmd, seq, handle) -> bytes\n\n"
"The request devlink_dump (handle None: NLM_F_DUMP) or devlink_exec (handle (bus, dev,\n"
"sb_index): NLM_F_ACK, the three attributes) sends.");

static PyObject *devlink_request(PyObject *self, PyObject *args)
{
    long family;
    int cmd;
    unsigned int seq;
    PyObject *hobj;
    if (!PyArg_ParseTuple(args, "liIO", &family, &cmd, &seq, &hobj))
        return NULL;
    handle h;
    if (check_request(family, cmd, hobj == Py_None) < 0 || (hobj != Py_None && take_handle(hobj, &h) < 0))
        return NULL;
    char buf[REQUEST_MAX];
    size_t len = build_request(buf, (uint16_t)family, (uint8_t)cmd, seq, hobj == Py_None ? NULL : &h);
    return PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
}

/* ---------------------------------------------------------------- I/O (GIL released) */

/* Whether a datagram ends its request: it holds NLMSG_DONE or NLMSG_ERROR, or cannot be
 * walked (the parser then says what is wrong with it). */
static int ends_reply(const char *buf, size_t size)
{
    size_t off = 0;
    while (off < size) {
        struct nlmsghdr nh;
        if (size - off < sizeof(nh))
            return 1;
        memcpy(&nh, buf + off, sizeof(nh));
        if (nh.nlmsg_len < sizeof(nh) || nh.nlmsg_len > size - off)
            return 1;
        if (nh.nlmsg_type == NLMSG_DONE || nh.nlmsg_type == NLMSG_ERROR)
            return 1;
        off += NLMSG_ALIGN(nh.nlmsg_len);
    }
    return size == 0;
}

/* Send a dump request and gather every datagram of its answer into *out (malloc'ed).
 * Its length, or -errno. */
static ssize_t dump(int fd, uint16_t family, uint8_t cmd, char **out)
{
    char req[REQUEST_MAX];
    uint32_t seq = genl_next_seq();
    size_t len = build_request(req, family, cmd, seq, NULL);
    *out = NULL;
    if (send(fd, req, len, 0) < 0)
        return -errno;
    char *scratch = malloc(GENL_REPLY_MAX);
    if (scratch == NULL)
        return -ENOMEM;
    char *all = NULL;
    size_t used = 0, cap = 0;
    ssize_t rc = 0;
    for (;;) {
        ssize_t got = genl_receive(fd, seq, scratch);
        if (got < 0) {
            rc = got;
            break;
        }
        if (used + (size_t)got > DUMP_MAX) {
            rc = -EMSGSIZE;
            break;
        }
        if (used + (size_t)got > cap) {
            size_t ncap = cap ? cap : GENL_REPLY_MAX;
            while (ncap < used + (size_t)got)
                ncap *= 2;
            char *grown = realloc(all, ncap);
            if (grown == NULL) {
                rc = -ENOMEM;
                break;
            }
            all = grown;
            cap = ncap;
        }
        memcpy(all + used, scratch, (size_t)got);
        used += (size_t)got;
        if (ends_reply(scratch, (size_t)got)) {
            rc = (ssize_t)used;
            break;
        }
    }
    free(scratch);
    if (rc < 0)
        free(all);
    else
        *out = all;
    return rc;
}

PyDoc_STRVAR(dump_doc,
"devlink_dump(fd, family, cmd) -> bytes\n\n"
"Dump cmd (DEVLINK_PORT_GET, _SB_GET, _SB_PORT_POOL_GET, _SB_TC_POOL_BIND_GET, _TRAP_GET,\n"
"_TRAP_GROUP_GET) over every\n"
"devlink device on the NETLINK_GENERIC socket fd, the GIL released: every datagram of the\n"
"answer, concatenated up to the one with NLMSG_DONE (or an error), for devlink_parse.\n"
"OSError when the socket fails (EAGAIN: its SO_RCVTIMEO passed).");

static PyObject *devlink_dump(PyObject *self, PyObject *args)
{
    int fd, cmd;
    long family;
    if (!PyArg_ParseTuple(args, "ili", &fd, &family, &cmd))
        return NULL;
    if (check_request(family, cmd, 1) < 0)
        return NULL;
    char *all = NULL;
    ssize_t got;
    Py_BEGIN_ALLOW_THREADS
    got = dump(fd, (uint16_t)family, (uint8_t)cmd, &all);
    Py_END_ALLOW_THREADS
    if (got < 0)
        return genl_oserror((int)-got);
    PyObject *out = PyBytes_FromStringAndSize(all != NULL ? all : "", got);
    free(all);
    return out;
}

PyDoc_STRVAR(exec_doc,
"devlink_exec(fd, family, cmd, handles) -> list[bytes]\n\n"
"cmd (DEVLINK_SB_OCC_SNAPSHOT or _SB_OCC_MAX_CLEAR) on each (bus, dev, sb_index) handle,\n"
"each answered before the next is sent, the GIL released throughout: the raw answer of\n"
"each (an ack; devlink_parse raises its error). OSError when the socket fails.");

static PyObject *devlink_exec(PyObject *self, PyObject *args)
{
    int fd, cmd;
    long family;
    PyObject *seq_obj;
    if (!PyArg_ParseTuple(args, "iliO", &fd, &family, &cmd, &seq_obj))
        return NULL;
    if (check_request(family, cmd, 0) < 0)
        return NULL;
    PyObject *fast = PySequence_Fast(seq_obj, "handles must be a sequence");
    if (fast == NULL)
        return NULL;
    genl_requests reqs;
    PyObject *out = NULL;
    if (genl_requests_new(&reqs, PySequence_Fast_GET_SIZE(fast)) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < reqs.n; i++) {
        handle h;
        if (take_handle(PySequence_Fast_GET_ITEM(fast, i), &h) < 0)
            goto done;
        reqs.lens[i] = build_request(genl_request_at(&reqs, i), (uint16_t)family, (uint8_t)cmd, genl_next_seq(), &h);
    }
    out = genl_batch(fd, &reqs);
done:
    genl_requests_free(&reqs);
    Py_DECREF(fast);
    return out;
}

PyDoc_STRVAR(family_doc,
"devlink_family(fd) -> int\n\n"
"Resolve the \"devlink\" generic netlink family (CTRL_CMD_GETFAMILY) on the NETLINK_GENERIC\n"
"socket fd. OSError as the kernel answers (ENOENT: no devlink in this kernel).");

static PyObject *devlink_family(PyObject *self, PyObject *args)
{
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd))
        return NULL;
    return genl_family(fd, DEVLINK_GENL_NAME, sizeof(DEVLINK_GENL_NAME));
}

PyMethodDef swtel_devlink_methods[] = {
    {"devlink_family", devlink_family, METH_VARARGS, family_doc},
    {"devlink_request", devlink_request, METH_VARARGS, request_doc},
    {"devlink_dump", devlink_dump, METH_VARARGS, dump_doc},
    {"devlink_exec", devlink_exec, METH_VARARGS, exec_doc},
    {"devlink_parse", devlink_parse, METH_VARARGS, parse_doc},
    {"devlink_trap_parse", devlink_trap_parse, METH_VARARGS, trap_parse_doc},
    {NULL, NULL, 0, NULL},
};
