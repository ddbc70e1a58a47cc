/* jsonl exporter fast path: the changed counters of one batch -> their JSON lines, as one bytes.
 *
 * Python keeps, once per CounterTable, every counter's display path as a JSON string
 * literal (json.dumps(path), quotes included, ASCII: agent/exporters/jsonl.py). Per batch
 * this file only writes the numbers around those cached bytes, in exactly the form
 * json.dumps gives the exporter's dict (", " and ": " separators, keys in this order):
 *
 *   {"ts": T, "path": P, "value": V, "delta": D[, "new": true][, "wrap": true][, "reset": true][, "jump": true]}\n
 *
 * agent/_fallback/jsonl.py writes the same bytes in Python; a test holds the two (and
 * json.dumps) to each other byte for byte.
 */
#include "swtel.h"

#include <string.h>

/* Flag -> its member, in the order the exporter has always written them. */
static const struct {
    uint8_t flag;
    const char *text;
    size_t len;
} flag_members[] = {
    {SWTEL_F_NEW, ", \"new\": true", sizeof(", \"new\": true") - 1},
    {SWTEL_F_WRAP, ", \"wrap\": true", sizeof(", \"wrap\": true") - 1},
    {SWTEL_F_RESET, ", \"reset\": true", sizeof(", \"reset\": true") - 1},
    {SWTEL_F_JUMP, ", \"jump\": true", sizeof(", \"jump\": true") - 1},
};
#define N_FLAG_MEMBERS (sizeof(flag_members) / sizeof(flag_members[0]))

static const char VALUE_KEY[] = ", \"value\": ";
static const char DELTA_KEY[] = ", \"delta\": ";
#define KEY_LEN(k) (sizeof(k) - 1)

static inline size_t u64_digits(uint64_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static inline uint64_t i64_magnitude(int64_t v)
{
    return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v; /* INT64_MIN included */
}

static inline size_t i64_len(int64_t v)
{
    return (v < 0) + u64_digits(i64_magnitude(v));
}

static inline char *put_u64(char *p, uint64_t v)
{
    size_t n = u64_digits(v);
    char *end = p + n;
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return p + n;
}

static inline char *put_i64(char *p, int64_t v)
{
    if (v < 0)
        *p++ = '-';
    return put_u64(p, i64_magnitude(v));
}

static inline size_t flags_len(uint8_t f)
{
    size_t n = 0;
    for (size_t j = 0; j < N_FLAG_MEMBERS; j++)
        if (f & flag_members[j].flag)
            n += flag_members[j].len;
    return n;
}

/* Item k of deltas as an i64 (a typed buffer read in place, or a Python int). */
static inline int64_t delta_at(const swtel_ints *s, Py_ssize_t k)
{
    if (s->buf != NULL)
        return ((const int64_t *)s->buf)[k];
    return (int64_t)PyLong_AsLongLong(PySequence_Fast_ITEMS(s->fast)[k]);
}

PyDoc_STRVAR(jsonl_lines_doc,
"jsonl_lines(ts_ns, indices, values, deltas, flags, paths) -> bytes\n\n"
"The JSON lines (each ending in a newline) of one batch of changed counters, in the order\n"
"of indices. indices: changed counter indices (a u32 array, or a sequence of ints);\n"
"values: u64 buffer of every counter; deltas: one i64 per index (an array('q'), or a\n"
"sequence of ints); flags: one change-flag byte per index; paths: list of bytes by counter\n"
"index, each the counter's display path as a JSON string literal (json.dumps(path)).");

static PyObject *jsonl_lines(PyObject *self, PyObject *args)
{
    long long ts;
    PyObject *indices_obj, *values_obj, *deltas_obj, *flags_obj, *paths;
    if (!PyArg_ParseTuple(args, "LOOOOO!", &ts, &indices_obj, &values_obj, &deltas_obj, &flags_obj,
                          &PyList_Type, &paths))
        return NULL;
    swtel_ints indices, deltas;
    if (swtel_ints_get(indices_obj, &indices, 'I', "indices must be a sequence") < 0)
        return NULL;
    if (swtel_ints_get(deltas_obj, &deltas, 'q', "deltas must be a sequence") < 0) {
        swtel_ints_release(&indices);
        return NULL;
    }
    static const swtel_bufspec bufs[] = {{8, 0, "values"}, {1, 0, "flags"}};
    PyObject *objs[2] = {values_obj, flags_obj};
    Py_buffer views[2];
    PyObject *result = NULL;
    Py_ssize_t *idx = NULL;
    int64_t *dl = NULL;
    if (swtel_get_buffers(objs, views, bufs, 2) < 0)
        goto done_ints;
    const uint64_t *values = (const uint64_t *)views[0].buf;
    const uint8_t *flags = (const uint8_t *)views[1].buf;
    Py_ssize_t n = indices.n, nvalues = views[0].len / 8, npaths = PyList_GET_SIZE(paths);
    if (deltas.n < n || views[1].len < n) {
        PyErr_SetString(PyExc_ValueError, "deltas and flags must hold one item per index");
        goto done;
    }
    idx = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    dl = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (idx == NULL || dl == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* {"ts": T, "path":  -- the same for every line of the batch */
    char head[48];
    char *h = head;
    memcpy(h, "{\"ts\": ", 7);
    h = put_i64(h + 7, (int64_t)ts);
    memcpy(h, ", \"path\": ", 10);
    size_t head_len = (size_t)(h + 10 - head);
    /* First pass: validate, read the items once, size the output exactly. */
    size_t total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = swtel_ints_index(&indices, k);
        if (i == -1 && PyErr_Occurred())
            goto done;
        if (i < 0 || i >= nvalues || i >= npaths) {
            PyErr_Format(PyExc_IndexError, "counter index %zd out of range", i);
            goto done;
        }
        PyObject *pb = PyList_GET_ITEM(paths, i);
        if (!PyBytes_Check(pb)) {
            PyErr_SetString(PyExc_TypeError, "paths must hold bytes");
            goto done;
        }
        int64_t d = delta_at(&deltas, k);
        if (d == -1 && PyErr_Occurred())
            goto done;
        idx[k] = i;
        dl[k] = d;
        total += head_len + (size_t)PyBytes_GET_SIZE(pb) + KEY_LEN(VALUE_KEY) + u64_digits(values[i]) +
                 KEY_LEN(DELTA_KEY) + i64_len(d) + flags_len(flags[k]) + 2;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (result == NULL)
        goto done;
    char *p = PyBytes_AS_STRING(result);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *pb = PyList_GET_ITEM(paths, idx[k]);
        memcpy(p, head, head_len);
        p += head_len;
        memcpy(p, PyBytes_AS_STRING(pb), (size_t)PyBytes_GET_SIZE(pb));
        p += PyBytes_GET_SIZE(pb);
        memcpy(p, VALUE_KEY, KEY_LEN(VALUE_KEY));
        p = put_u64(p + KEY_LEN(VALUE_KEY), values[idx[k]]);
        memcpy(p, DELTA_KEY, KEY_LEN(DELTA_KEY));
        p = put_i64(p + KEY_LEN(DELTA_KEY), dl[k]);
        for (size_t j = 0; j < N_FLAG_MEMBERS; j++) {
            if (flags[k] & flag_members[j].flag) {
                memcpy(p, flag_members[j].text, flag_members[j].len);
                p += flag_members[j].len;
            }
        }
        *p++ = '}';
        *p++ = '\n';
    }
done:
    PyMem_Free(idx);
    PyMem_Free(dl);
    swtel_release_buffers(views, 2);
done_ints:
    swtel_ints_release(&indices);
    swtel_ints_release(&deltas);
    return result;
}

PyMethodDef swtel_jsonl_methods[] = {
    {"jsonl_lines", jsonl_lines, METH_VARARGS, jsonl_lines_doc},
    {NULL, NULL, 0, NULL},
};
