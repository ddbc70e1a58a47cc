/* links parser: the link listener's rtnetlink decoder (agent/links.py owns the
 * sockets). One call parses one recv() result, a run of nlmsghdr messages, and
 * returns a plain tuple per RTM_NEWLINK/RTM_DELLINK; agent/_fallback/links.py is the
 * pure-Python twin and both must give the same answer for any buffer.
 *
 * Nothing in the buffer is trusted: every length is checked against what is
 * left before anything is read (memcpy, since the caller's buffer may be
 * unaligned). A bad message header makes the whole buffer unusable (the next
 * message cannot be found): ValueError. A bad attribute length ends that
 * message's attribute walk, keeping what was read before it; an attribute too
 * short for its type is ignored. */
#include "swtel.h"

#include <errno.h>
#include <linux/if.h> /* IF_OPER_* */
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <sys/socket.h>

/* The fields of one link message, pointing into the caller's buffer. */
typedef struct {
    const char *name, *kind;
    size_t name_len, kind_len;
    int have_name, have_oper, have_linkinfo, have_carrier;
    uint8_t operstate;
    uint32_t carrier_changes;
} link_fields;

/* The next well-formed attribute at *pos of the len bytes at base. Returns 0 at
 * the end or at a bad length (nothing after it can be located). */
static int next_attr(const char *base, size_t len, size_t *pos, uint16_t *type,
                     const char **payload, size_t *payload_len)
{
    struct rtattr rta;
    if (*pos > len || len - *pos < sizeof(rta))
        return 0;
    memcpy(&rta, base + *pos, sizeof(rta));
    if (rta.rta_len < sizeof(rta) || rta.rta_len > len - *pos)
        return 0;
    *type = (uint16_t)(rta.rta_type & NLA_TYPE_MASK); /* without NLA_F_NESTED, NLA_F_NET_BYTEORDER */
    *payload = base + *pos + RTA_LENGTH(0);
    *payload_len = rta.rta_len - RTA_LENGTH(0);
    *pos += RTA_ALIGN(rta.rta_len); /* may pass len: the next call stops there */
    return 1;
}

/* A string attribute ends at its first NUL or at the end of its payload. */
static size_t string_len(const char *s, size_t max)
{
    const char *nul = memchr(s, '\0', max);
    return nul != NULL ? (size_t)(nul - s) : max;
}

/* IFLA_INFO_KIND inside one IFLA_LINKINFO nest (the first one, if repeated). */
static void parse_linkinfo(const char *nest, size_t len, link_fields *f)
{
    size_t pos = 0;
    uint16_t type;
    const char *payload;
    size_t payload_len;
    while (next_attr(nest, len, &pos, &type, &payload, &payload_len)) {
        if (type == IFLA_INFO_KIND) {
            f->kind = payload;
            f->kind_len = string_len(payload, payload_len);
            return;
        }
    }
}

/* The attributes after the ifinfomsg. The first usable one of each type wins. */
static void parse_link_attrs(const char *attrs, size_t len, link_fields *f)
{
    size_t pos = 0;
    uint16_t type;
    const char *payload;
    size_t payload_len;
    while (next_attr(attrs, len, &pos, &type, &payload, &payload_len)) {
        if (type == IFLA_IFNAME && !f->have_name) {
            f->name = payload;
            f->name_len = string_len(payload, payload_len);
            f->have_name = 1;
        } else if (type == IFLA_OPERSTATE && !f->have_oper && payload_len >= 1) {
            uint8_t oper = (uint8_t)payload[0];
            f->operstate = oper <= IF_OPER_UP ? oper : IF_OPER_UNKNOWN; /* RFC 2863 has no more */
            f->have_oper = 1;
        } else if (type == IFLA_LINKINFO && !f->have_linkinfo) {
            parse_linkinfo(payload, payload_len, f);
            f->have_linkinfo = 1;
        } else if (type == IFLA_CARRIER_CHANGES && !f->have_carrier && payload_len >= sizeof(uint32_t)) {
            memcpy(&f->carrier_changes, payload, sizeof(uint32_t));
            f->have_carrier = 1;
        }
    }
}

/* (msg_type, ifindex, ifi_flags, name, operstate, kind, carrier_changes) */
static PyObject *link_tuple(uint16_t msg_type, const struct ifinfomsg *ifi, const link_fields *f)
{
    PyObject *name = PyUnicode_DecodeFSDefaultAndSize(f->name != NULL ? f->name : "",
                                                      (Py_ssize_t)f->name_len);
    PyObject *kind = PyUnicode_DecodeFSDefaultAndSize(f->kind != NULL ? f->kind : "",
                                                      (Py_ssize_t)f->kind_len);
    PyObject *tuple = NULL;
    if (name != NULL && kind != NULL)
        tuple = Py_BuildValue("(HiIOBOI)", msg_type, ifi->ifi_index, ifi->ifi_flags, name,
                              f->operstate, kind, f->carrier_changes);
    Py_XDECREF(name);
    Py_XDECREF(kind);
    return tuple;
}

/* The errno an NLMSG_ERROR (or a failed dump's NLMSG_DONE) carries: 0 for none. */
static int reply_errno(const char *msg, size_t len)
{
    int32_t error = 0;
    if (len >= NLMSG_LENGTH(sizeof(error)))
        memcpy(&error, msg + NLMSG_HDRLEN, sizeof(error));
    if (error == 0)
        return 0;
    return error < 0 && error != INT32_MIN ? -error : EIO;
}

PyDoc_STRVAR(link_parse_doc,
"link_parse(buf) -> (links, done)\n\n"
"Parse one recv() result of a NETLINK_ROUTE socket (several netlink messages).\n"
"links: one (msg_type, ifindex, ifi_flags, name, operstate, kind,\n"
"carrier_changes) tuple per RTM_NEWLINK/RTM_DELLINK of family AF_UNSPEC (not a\n"
"bridge port's AF_BRIDGE view), in order; name and kind\n"
"are \"\" when absent, operstate (0..6) and carrier_changes 0. done: an\n"
"NLMSG_DONE was seen. Raises OSError for an NLMSG_ERROR (or NLMSG_DONE) with\n"
"an error, ValueError for a malformed message header; other messages are skipped.");

static PyObject *link_parse(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    PyObject *links = PyList_New(0);
    if (links == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *buf = view.buf;
    size_t size = (size_t)view.len, off = 0;
    int done = 0;
    while (off < size) {
        struct nlmsghdr nh;
        if (size - off < sizeof(nh)) {
            PyErr_SetString(PyExc_ValueError, "truncated netlink message header");
            goto fail;
        }
        memcpy(&nh, buf + off, sizeof(nh));
        if (nh.nlmsg_len < sizeof(nh) || nh.nlmsg_len > size - off) {
            PyErr_Format(PyExc_ValueError, "netlink message length %u at offset %zu: %zu bytes left",
                         nh.nlmsg_len, off, size - off);
            goto fail;
        }
        const char *msg = buf + off;
        size_t len = nh.nlmsg_len;
        /* The last message's padding may be missing: step at most to the end. */
        off += NLMSG_ALIGN(len) < size - off ? NLMSG_ALIGN(len) : size - off;

        if (nh.nlmsg_type == NLMSG_ERROR || nh.nlmsg_type == NLMSG_DONE) {
            if (nh.nlmsg_type == NLMSG_ERROR && len < NLMSG_LENGTH(sizeof(int32_t))) {
                PyErr_SetString(PyExc_ValueError, "NLMSG_ERROR too short for its error code");
                goto fail;
            }
            int code = reply_errno(msg, len); /* 0: an ACK, or a dump that ended well */
            if (code != 0) {
                errno = code;
                PyErr_SetFromErrno(PyExc_OSError);
                goto fail;
            }
            if (nh.nlmsg_type == NLMSG_DONE)
                done = 1;
            continue;
        }
        if (nh.nlmsg_type != RTM_NEWLINK && nh.nlmsg_type != RTM_DELLINK)
            continue;
        if (len < NLMSG_LENGTH(sizeof(struct ifinfomsg))) {
            PyErr_SetString(PyExc_ValueError, "link message too short for its ifinfomsg");
            goto fail;
        }
        struct ifinfomsg ifi;
        memcpy(&ifi, msg + NLMSG_HDRLEN, sizeof(ifi));
        /* The bridge sends its ports' state on the same group as AF_BRIDGE link
         * messages (RTM_DELLINK there means "left the bridge", not "gone"). */
        if (ifi.ifi_family != AF_UNSPEC)
            continue;
        link_fields fields = {0};
        size_t attrs = NLMSG_LENGTH(NLMSG_ALIGN(sizeof(ifi)));
        if (len > attrs)
            parse_link_attrs(msg + attrs, len - attrs, &fields);
        PyObject *item = link_tuple(nh.nlmsg_type, &ifi, &fields);
        if (item == NULL)
            goto fail;
        int rc = PyList_Append(links, item);
        Py_DECREF(item);
        if (rc < 0)
            goto fail;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NO)", links, done ? Py_True : Py_False);
fail:
    PyBuffer_Release(&view);
    Py_DECREF(links);
    return NULL;
}

PyMethodDef swtel_links_methods[] = {
    {"link_parse", link_parse, METH_VARARGS, link_parse_doc},
    {NULL, NULL, 0, NULL},
};
