/* Gather: copy chosen slots of one value buffer into a dense one. The asic source reads
 * every value a plugin fills and keeps only those it streams (sources.asic.buffers off:
 * no buffer slot), so the change kernel and everything after it never see the others. */
#include "swtel.h"

PyDoc_STRVAR(gather_doc,
"gather(src, indices, dst) -> None\n\n"
"dst[k] = src[indices[k]] for every k: src and dst u64, indices u32, each below len(src);\n"
"dst at least as long as indices.");

static PyObject *gather(PyObject *self, PyObject *args)
{
    static const swtel_bufspec specs[3] = {{8, 0, "src"}, {4, 0, "indices"}, {8, 1, "dst"}};
    PyObject *o[3];
    Py_buffer b[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2]))
        return NULL;
    if (swtel_get_buffers(o, b, specs, 3) < 0)
        return NULL;
    Py_ssize_t nsrc = b[0].len / 8, n = b[1].len / 4, ndst = b[2].len / 8;
    const uint64_t *src = b[0].buf;
    const uint32_t *idx = b[1].buf;
    uint64_t *dst = b[2].buf;
    int bad = ndst < n;
    for (Py_ssize_t k = 0; k < n && !bad; k++)
        bad = idx[k] >= (uint64_t)nsrc;
    if (!bad)
        for (Py_ssize_t k = 0; k < n; k++)
            dst[k] = src[idx[k]];
    swtel_release_buffers(b, 3);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, ndst < n ? "dst is shorter than indices" : "an index is beyond src");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef swtel_gather_methods[] = {
    {"gather", gather, METH_VARARGS, gather_doc},
    {NULL, NULL, 0, NULL},
};
