/* gNMI encoder fast path: changed counters -> serialized gnmi.SubscribeResponse bytes.
 *
 * Python precomputes, once per CounterTable, the serialized relative gnmi.Path of
 * every counter and the serialized prefix gnmi.Path (origin, target, elems) of every
 * container (agent/gnmi/encode.py). A counter's path is one bytes object, or a (head, tail)
 * pair of bytes whose concatenation it is: a serialized Path's elems are its fields one
 * after another, so the per-tick codec shares a port's head and a leaf's tail among
 * counters instead of keeping a whole path per value. Per tick this file only groups the changed
 * indices by container and writes protobuf framing around those cached bytes:
 *
 *   SubscribeResponse { update(1): Notification {
 *       timestamp(1): int64, prefix(2): Path,
 *       update(4): Update { path(1): Path, val(3): TypedValue { uint_val(3): uint64 } } ... } }
 *
 * agent/_fallback/encode.py builds the same messages with gnmi_pb2; the property test
 * checks that both decode to equal messages.
 */
#include "swtel.h"

#include <string.h>

static inline size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline char *put_varint(char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* Length of the serialized Update body for one counter. */
static inline size_t update_len(Py_ssize_t path_len, uint64_t value)
{
    size_t tv = 1 + varint_len(value);                                    /* TypedValue */
    return 1 + varint_len((uint64_t)path_len) + (size_t)path_len + 1 + varint_len(tv) + tv;
}

/* One counter's serialized Path, in one or two pieces (tail_len 0 for one). */
typedef struct {
    const char *head, *tail;
    Py_ssize_t head_len, tail_len;
} path_ref;

static inline Py_ssize_t path_len(const path_ref *r)
{
    return r->head_len + r->tail_len;
}

/* paths[i] as a path_ref: bytes, or a pair of bytes. 0, or -1 with TypeError. */
static int get_path(PyObject *item, path_ref *out)
{
    if (PyBytes_Check(item)) {
        out->head = PyBytes_AS_STRING(item);
        out->head_len = PyBytes_GET_SIZE(item);
        out->tail = NULL;
        out->tail_len = 0;
        return 0;
    }
    if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2) {
        PyObject *h = PyTuple_GET_ITEM(item, 0), *t = PyTuple_GET_ITEM(item, 1);
        if (PyBytes_Check(h) && PyBytes_Check(t)) {
            out->head = PyBytes_AS_STRING(h);
            out->head_len = PyBytes_GET_SIZE(h);
            out->tail = PyBytes_AS_STRING(t);
            out->tail_len = PyBytes_GET_SIZE(t);
            return 0;
        }
    }
    PyErr_SetString(PyExc_TypeError, "paths must hold bytes or (bytes, bytes) pairs");
    return -1;
}

/* The paths argument: a list by counter index (bytes, or (head, tail) pairs), or a
 * (pieces, heads, tails) triple, counter i's path pieces[heads[i]] + pieces[tails[i]] (heads
 * and tails u32 buffers): the per-tick codec's form, two u32 a counter instead of a tuple. */
typedef struct {
    PyObject *list, *pieces; /* borrowed: the one given */
    Py_buffer views[2];      /* heads, tails (triple only) */
    Py_ssize_t n;            /* counters with a path */
} paths_arg;

static int paths_get(PyObject *obj, paths_arg *pa)
{
    pa->list = pa->pieces = NULL;
    if (PyList_Check(obj)) {
        pa->list = obj;
        pa->n = PyList_GET_SIZE(obj);
        return 0;
    }
    if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 3 && PyList_Check(PyTuple_GET_ITEM(obj, 0))) {
        static const swtel_bufspec bufs[] = {{4, 0, "heads"}, {4, 0, "tails"}};
        PyObject *objs[2] = {PyTuple_GET_ITEM(obj, 1), PyTuple_GET_ITEM(obj, 2)};
        if (swtel_get_buffers(objs, pa->views, bufs, 2) < 0)
            return -1;
        pa->pieces = PyTuple_GET_ITEM(obj, 0);
        pa->n = pa->views[0].len / 4 < pa->views[1].len / 4 ? pa->views[0].len / 4 : pa->views[1].len / 4;
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "paths must be a list or a (pieces, heads, tails) triple");
    return -1;
}

static void paths_release(paths_arg *pa)
{
    if (pa->pieces != NULL)
        swtel_release_buffers(pa->views, 2);
}

/* Counter i's path (i < pa->n, checked by the caller). 0, or -1 with an exception. */
static int path_at(const paths_arg *pa, Py_ssize_t i, path_ref *out)
{
    if (pa->list != NULL)
        return get_path(PyList_GET_ITEM(pa->list, i), out);
    uint32_t h = ((const uint32_t *)pa->views[0].buf)[i], t = ((const uint32_t *)pa->views[1].buf)[i];
    Py_ssize_t npieces = PyList_GET_SIZE(pa->pieces);
    if (h >= (uint32_t)npieces || t >= (uint32_t)npieces) {
        PyErr_Format(PyExc_IndexError, "path piece %u out of range", h >= (uint32_t)npieces ? h : t);
        return -1;
    }
    PyObject *hb = PyList_GET_ITEM(pa->pieces, h), *tb = PyList_GET_ITEM(pa->pieces, t);
    if (!PyBytes_Check(hb) || !PyBytes_Check(tb)) {
        PyErr_SetString(PyExc_TypeError, "path pieces must be bytes");
        return -1;
    }
    out->head = PyBytes_AS_STRING(hb);
    out->head_len = PyBytes_GET_SIZE(hb);
    out->tail = PyBytes_AS_STRING(tb);
    out->tail_len = PyBytes_GET_SIZE(tb);
    return 0;
}

static inline char *put_path(char *p, const path_ref *r)
{
    memcpy(p, r->head, (size_t)r->head_len);
    p += r->head_len;
    if (r->tail_len) {
        memcpy(p, r->tail, (size_t)r->tail_len);
        p += r->tail_len;
    }
    return p;
}

/* Write one SubscribeResponse holding updates order[0..n) of one container. */
static PyObject *write_response(int64_t ts, const char *prefix, Py_ssize_t prefix_len,
                                const Py_ssize_t *order, Py_ssize_t n, const uint64_t *values,
                                const path_ref *refs)
{
    size_t notif = 1 + varint_len((uint64_t)ts) + 1 + varint_len((uint64_t)prefix_len) +
                   (size_t)prefix_len;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = order[k];
        size_t u = update_len(path_len(&refs[k]), values[i]);
        notif += 1 + varint_len(u) + u;
    }
    size_t total = 1 + varint_len(notif) + notif;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL)
        return NULL;
    char *p = PyBytes_AS_STRING(out);
    *p++ = 0x0a; /* SubscribeResponse.update */
    p = put_varint(p, notif);
    *p++ = 0x08; /* Notification.timestamp */
    p = put_varint(p, (uint64_t)ts);
    *p++ = 0x12; /* Notification.prefix */
    p = put_varint(p, (uint64_t)prefix_len);
    memcpy(p, prefix, (size_t)prefix_len);
    p += prefix_len;
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t v = values[order[k]];
        Py_ssize_t pl = path_len(&refs[k]);
        size_t tv = 1 + varint_len(v);
        *p++ = 0x22; /* Notification.update */
        p = put_varint(p, update_len(pl, v));
        *p++ = 0x0a; /* Update.path */
        p = put_varint(p, (uint64_t)pl);
        p = put_path(p, &refs[k]);
        *p++ = 0x1a; /* Update.val */
        p = put_varint(p, tv);
        *p++ = 0x18; /* TypedValue.uint_val */
        p = put_varint(p, v);
    }
    return out;
}

PyDoc_STRVAR(encode_updates_doc,
"encode_updates(ts_ns, indices, values, containers, prefixes, paths, max_updates) -> list[bytes]\n\n"
"One serialized gnmi.SubscribeResponse per container that has changed counters (split\n"
"every max_updates updates). indices: changed counter indices (a u32 array, or a sequence\n"
"of ints); values: u64 buffer of every counter; containers: u32 buffer, container id of\n"
"every counter; prefixes: list of serialized prefix Paths by container id; paths: list of\n"
"serialized relative Paths by counter index (bytes, or a (head, tail) pair of bytes), or a\n"
"(pieces, heads, tails) triple: counter i's path pieces[heads[i]] + pieces[tails[i]] (u32\n"
"buffers). Notifications come in order of first appearance.");

static PyObject *encode_updates(PyObject *self, PyObject *args)
{
    long long ts;
    PyObject *indices_obj, *values_obj, *containers_obj, *prefixes, *paths_obj;
    Py_ssize_t max_updates;
    if (!PyArg_ParseTuple(args, "LOOOO!On", &ts, &indices_obj, &values_obj, &containers_obj,
                          &PyList_Type, &prefixes, &paths_obj, &max_updates))
        return NULL;
    if (max_updates < 1) {
        PyErr_SetString(PyExc_ValueError, "max_updates must be at least 1");
        return NULL;
    }
    paths_arg paths;
    if (paths_get(paths_obj, &paths) < 0)
        return NULL;
    swtel_ints indices;
    if (swtel_ints_get(indices_obj, &indices, 'I', "indices must be a sequence") < 0) {
        paths_release(&paths);
        return NULL;
    }
    static const swtel_bufspec bufs[] = {{8, 0, "values"}, {4, 0, "containers"}};
    PyObject *objs[2] = {values_obj, containers_obj};
    Py_buffer views[2];
    Py_buffer *vbuf = &views[0], *cbuf = &views[1];
    Py_ssize_t *idx = NULL, *start = NULL, *order = NULL;
    path_ref *refs = NULL;
    unsigned char *written = NULL;
    PyObject *result = NULL;
    if (swtel_get_buffers(objs, views, bufs, 2) < 0)
        goto done_indices;

    const uint64_t *values = (const uint64_t *)vbuf->buf;
    const uint32_t *cont = (const uint32_t *)cbuf->buf;
    Py_ssize_t nvalues = vbuf->len / 8, ncounters = cbuf->len / 4;
    Py_ssize_t nprefix = PyList_GET_SIZE(prefixes), npaths = paths.n;
    Py_ssize_t n = indices.n;

    result = PyList_New(0);
    if (result == NULL || n == 0)
        goto done;
    idx = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n);
    order = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n);
    start = PyMem_Calloc((size_t)nprefix + 1, sizeof(Py_ssize_t));
    refs = PyMem_Malloc(sizeof(path_ref) * (size_t)n);
    written = PyMem_Calloc((size_t)nprefix + 1, 1);
    if (!idx || !order || !start || !refs || !written) {
        PyErr_NoMemory();
        goto fail;
    }
    /* Validate and count updates per container (counting sort keeps index order). */
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = swtel_ints_index(&indices, k);
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= nvalues || i >= ncounters || i >= npaths) {
            PyErr_Format(PyExc_IndexError, "counter index %zd out of range", i);
            goto fail;
        }
        if (cont[i] >= (uint32_t)nprefix) {
            PyErr_Format(PyExc_IndexError, "container id %u out of range", cont[i]);
            goto fail;
        }
        idx[k] = i;
        start[cont[i] + 1]++;
    }
    for (Py_ssize_t c = 0; c < nprefix; c++)
        start[c + 1] += start[c];
    /* start[c] is now the first slot of container c; fill, advancing a cursor copy. */
    Py_ssize_t *cursor = PyMem_Malloc(sizeof(Py_ssize_t) * ((size_t)nprefix + 1));
    if (cursor == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(cursor, start, sizeof(Py_ssize_t) * ((size_t)nprefix + 1));
    for (Py_ssize_t k = 0; k < n; k++)
        order[cursor[cont[idx[k]]]++] = idx[k];
    PyMem_Free(cursor);
    for (Py_ssize_t k = 0; k < n; k++)
        if (path_at(&paths, order[k], &refs[k]) < 0)
            goto fail;
    /* Emit containers in order of first appearance among the changed indices. */
    for (Py_ssize_t k = 0; k < n; k++) {
        uint32_t c = cont[idx[k]];
        if (written[c])
            continue;
        written[c] = 1;
        Py_ssize_t lo = start[c], hi = start[c + 1];
        PyObject *pb = PyList_GET_ITEM(prefixes, c);
        if (!PyBytes_Check(pb)) {
            PyErr_SetString(PyExc_TypeError, "prefixes must hold bytes");
            goto fail;
        }
        for (Py_ssize_t s = lo; s < hi; s += max_updates) {
            Py_ssize_t m = hi - s < max_updates ? hi - s : max_updates;
            PyObject *msg = write_response((int64_t)ts, PyBytes_AS_STRING(pb),
                                           PyBytes_GET_SIZE(pb), order + s, m, values, refs + s);
            if (msg == NULL)
                goto fail;
            int rc = PyList_Append(result, msg);
            Py_DECREF(msg);
            if (rc < 0)
                goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    PyMem_Free(idx);
    PyMem_Free(order);
    PyMem_Free(start);
    PyMem_Free(refs);
    PyMem_Free(written);
    swtel_release_buffers(views, 2);
done_indices:
    swtel_ints_release(&indices);
    paths_release(&paths);
    return result;
}

/* Bytes of one Update field (tag, length and body) for one counter. */
static inline size_t update_field_len(Py_ssize_t path_len, uint64_t value)
{
    size_t u = update_len(path_len, value);
    return 1 + varint_len(u) + u;
}

/* Write updates order[0..n) as Notification.update fields at p; returns the end. */
static char *write_update_fields(char *p, const Py_ssize_t *order, Py_ssize_t n, const uint64_t *values,
                                 const path_ref *refs)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t v = values[order[k]];
        Py_ssize_t pl = path_len(&refs[k]);
        size_t tv = 1 + varint_len(v);
        *p++ = 0x22; /* Notification.update */
        p = put_varint(p, update_len(pl, v));
        *p++ = 0x0a; /* Update.path */
        p = put_varint(p, (uint64_t)pl);
        p = put_path(p, &refs[k]);
        *p++ = 0x1a; /* Update.val */
        p = put_varint(p, tv);
        *p++ = 0x18; /* TypedValue.uint_val */
        p = put_varint(p, v);
    }
    return p;
}

/* Append (group, updates, fields) for updates order[lo..hi) of one group, cut into runs
 * of at most max_bytes (a lone update larger than that is a run of its own). 0 or -1. */
static int append_runs(PyObject *result, unsigned int group, Py_ssize_t lo, Py_ssize_t hi,
                       const Py_ssize_t *order, const uint64_t *values, const path_ref *refs,
                       Py_ssize_t max_bytes)
{
    Py_ssize_t s = lo;
    while (s < hi) {
        size_t size = 0;
        Py_ssize_t e = s;
        while (e < hi) {
            size_t f = update_field_len(path_len(&refs[e]), values[order[e]]);
            if (e > s && size + f > (size_t)max_bytes)
                break;
            size += f;
            e++;
        }
        PyObject *fields = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
        if (fields == NULL)
            return -1;
        write_update_fields(PyBytes_AS_STRING(fields), order + s, e - s, values, refs + s);
        PyObject *run = Py_BuildValue("(InN)", group, e - s, fields);
        if (run == NULL)
            return -1;
        int rc = PyList_Append(result, run);
        Py_DECREF(run);
        if (rc < 0)
            return -1;
        s = e;
    }
    return 0;
}

PyDoc_STRVAR(encode_fields_doc,
"encode_fields(indices, values, containers, paths, ngroups, max_bytes) -> list[(group, n, bytes)]\n\n"
"The changed counters as serialized Notification.update fields (tag 4, uint_val values), to be\n"
"concatenated into a Notification whose header the caller writes (agent/gnmi/encode.py Packer).\n"
"containers: u32 buffer, group id (< ngroups) of every counter; paths: serialized Paths by\n"
"counter index (bytes, or a (head, tail) pair of bytes), or a (pieces, heads, tails) triple as\n"
"encode_updates takes. One item per run of one group's updates (index order within a group, groups in\n"
"order of first appearance), each run at most max_bytes long unless one update alone is longer.");

static PyObject *encode_fields(PyObject *self, PyObject *args)
{
    PyObject *indices_obj, *values_obj, *containers_obj, *paths_obj;
    Py_ssize_t ngroups, max_bytes;
    if (!PyArg_ParseTuple(args, "OOOOnn", &indices_obj, &values_obj, &containers_obj, &paths_obj,
                          &ngroups, &max_bytes))
        return NULL;
    if (max_bytes < 1 || ngroups < 0 || ngroups > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "max_bytes must be at least 1, ngroups within u32");
        return NULL;
    }
    paths_arg paths;
    if (paths_get(paths_obj, &paths) < 0)
        return NULL;
    swtel_ints indices;
    if (swtel_ints_get(indices_obj, &indices, 'I', "indices must be a sequence") < 0) {
        paths_release(&paths);
        return NULL;
    }
    static const swtel_bufspec bufs[] = {{8, 0, "values"}, {4, 0, "containers"}};
    PyObject *objs[2] = {values_obj, containers_obj};
    Py_buffer views[2];
    Py_ssize_t *idx = NULL, *start = NULL, *cursor = NULL, *order = NULL;
    path_ref *refs = NULL;
    unsigned char *written = NULL;
    PyObject *result = NULL;
    if (swtel_get_buffers(objs, views, bufs, 2) < 0)
        goto done_indices;
    const uint64_t *values = (const uint64_t *)views[0].buf;
    const uint32_t *cont = (const uint32_t *)views[1].buf;
    Py_ssize_t nvalues = views[0].len / 8, ncounters = views[1].len / 4, npaths = paths.n;
    Py_ssize_t n = indices.n;
    result = PyList_New(0);
    if (result == NULL || n == 0)
        goto done;
    idx = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n);
    order = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n);
    start = PyMem_Calloc((size_t)ngroups + 1, sizeof(Py_ssize_t));
    cursor = PyMem_Malloc(sizeof(Py_ssize_t) * ((size_t)ngroups + 1));
    refs = PyMem_Malloc(sizeof(path_ref) * (size_t)n);
    written = PyMem_Calloc((size_t)ngroups + 1, 1);
    if (!idx || !order || !start || !cursor || !refs || !written) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n; k++) { /* validate; count per group (a stable counting sort) */
        Py_ssize_t i = swtel_ints_index(&indices, k);
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= nvalues || i >= ncounters || i >= npaths) {
            PyErr_Format(PyExc_IndexError, "counter index %zd out of range", i);
            goto fail;
        }
        if (cont[i] >= (uint32_t)ngroups) {
            PyErr_Format(PyExc_IndexError, "container id %u out of range", cont[i]);
            goto fail;
        }
        idx[k] = i;
        start[cont[i] + 1]++;
    }
    for (Py_ssize_t c = 0; c < ngroups; c++)
        start[c + 1] += start[c];
    memcpy(cursor, start, sizeof(Py_ssize_t) * ((size_t)ngroups + 1));
    for (Py_ssize_t k = 0; k < n; k++)
        order[cursor[cont[idx[k]]]++] = idx[k];
    for (Py_ssize_t k = 0; k < n; k++)
        if (path_at(&paths, order[k], &refs[k]) < 0)
            goto fail;
    for (Py_ssize_t k = 0; k < n; k++) {
        uint32_t c = cont[idx[k]];
        if (written[c])
            continue;
        written[c] = 1;
        if (append_runs(result, c, start[c], start[c + 1], order, values, refs, max_bytes) < 0)
            goto fail;
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    PyMem_Free(idx);
    PyMem_Free(order);
    PyMem_Free(start);
    PyMem_Free(cursor);
    PyMem_Free(refs);
    PyMem_Free(written);
    swtel_release_buffers(views, 2);
done_indices:
    swtel_ints_release(&indices);
    paths_release(&paths);
    return result;
}

PyMethodDef swtel_encode_methods[] = {
    {"encode_updates", encode_updates, METH_VARARGS, encode_updates_doc},
    {"encode_fields", encode_fields, METH_VARARGS, encode_fields_doc},
    {NULL, NULL, 0, NULL},
};
