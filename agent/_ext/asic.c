/* ASIC plugin loader: dlopen a plugin implementing agent/asic/swtel_asic.h,
 * check its ABI, and read every counter in one call with the GIL released.
 * Python (agent/sources/asic.py) names and maps what the plugin describes.
 * The ABI's rules (loading, the layout's checks and limits) are asic_abi.c's,
 * shared with the plugin's C helper process (agent/asic/swtel_asic_host.c). */
#include "swtel.h"

#include "asic_abi.h"

#include <string.h>

#define CAPSULE_NAME "swtel.asic"

typedef struct {
    swtel_asic_loaded plugin; /* dlopen'ed and open (agent/_ext/asic_abi.c) */
    char label[256];          /* plugin path, for error messages */
} asic_plugin;

static void plugin_free(asic_plugin *p)
{
    swtel_asic_unload(&p->plugin);
    PyMem_Free(p);
}

static void capsule_destructor(PyObject *cap)
{
    asic_plugin *p = PyCapsule_GetPointer(cap, CAPSULE_NAME);
    if (p != NULL)
        plugin_free(p);
    else
        PyErr_Clear();
}

static asic_plugin *get_plugin(PyObject *cap)
{
    asic_plugin *p = PyCapsule_GetPointer(cap, CAPSULE_NAME);
    if (p == NULL)
        return NULL;
    if (p->plugin.h == NULL) {
        PyErr_SetString(PyExc_ValueError, "asic plugin handle is closed");
        return NULL;
    }
    return p;
}

PyDoc_STRVAR(asic_open_doc,
"asic_open(path: str, config: str, label: str = path) -> handle\n\n"
"dlopen the plugin, check its ABI version and open it with the config string.\n"
"label names the plugin in error messages (the helper loads /proc/self/fd/N).\n"
"Raises OSError naming the plugin and the reason (cannot load, no entry point,\n"
"wrong ABI version, or the plugin's own error text).");

static PyObject *asic_open(PyObject *self, PyObject *args)
{
    const char *path, *config, *label = NULL;
    if (!PyArg_ParseTuple(args, "ss|s", &path, &config, &label))
        return NULL;
    if (label == NULL)
        label = path;
    asic_plugin *p = PyMem_Calloc(1, sizeof(*p));
    if (p == NULL)
        return PyErr_NoMemory();
    snprintf(p->label, sizeof(p->label), "%s", label);
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = swtel_asic_load(&p->plugin, path, config, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_Format(PyExc_OSError, "asic plugin %s: %s", label, err);
        plugin_free(p);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(p, CAPSULE_NAME, capsule_destructor);
    if (cap == NULL)
        plugin_free(p);
    return cap;
}

PyDoc_STRVAR(asic_layout_doc,
"asic_layout(handle) -> (generation, ports, counters)\n\n"
"ports: [(name, parent, speed_mbps, flags)]; counters: one list per port of\n"
"(name, width, kind, nbins, bins), bins a tuple of (low, high) per bin of a\n"
"HISTOGRAM, () otherwise. Read it again after asic_read returns ECHANGED.\n"
"A layout beyond the limits (ASIC_MAX_PORTS, ASIC_MAX_COUNTERS per port,\n"
"ASIC_MAX_VALUES in all, bins included, ASIC_MAX_BINS), with a negative count,\n"
"a bad or duplicate name, a 1.1 kind from a 1.0 plugin or bins that do not\n"
"ascend raises OSError naming the port and counter; the counts are checked\n"
"before the descriptors are listed, so nothing is allocated for a layout that\n"
"is refused.");

/* A checked name (asic_abi.c: UTF-8, NUL-terminated within its field) as str. */
static PyObject *name_str(const char *field)
{
    return PyUnicode_DecodeUTF8(field, (Py_ssize_t)strlen(field), "strict");
}

/* The listed layout as the tuples and lists asic_layout returns. */
static PyObject *layout_objects(const swtel_asic_layout *l)
{
    PyObject *ports = PyList_New(l->nports), *counters = PyList_New(l->nports);
    if (ports == NULL || counters == NULL)
        goto fail;
    for (int i = 0; i < l->nports; i++) {
        const struct swtel_asic_port *port = &l->ports[i];
        PyObject *t = Py_BuildValue("(NNKI)", name_str(port->name), name_str(port->parent),
                                    (unsigned long long)port->speed_mbps, port->flags);
        if (t == NULL)
            goto fail;
        PyList_SET_ITEM(ports, i, t);
        size_t first = l->first[i], nc = l->first[i + 1] - first;
        PyObject *row = PyList_New((Py_ssize_t)nc);
        if (row == NULL)
            goto fail;
        PyList_SET_ITEM(counters, i, row);
        for (size_t j = 0; j < nc; j++) {
            const struct swtel_asic_counter *c = &l->counters[first + j];
            int hist = c->kind == SWTEL_ASIC_HISTOGRAM;
            PyObject *bins = PyTuple_New(hist ? c->nbins : 0);
            if (bins == NULL)
                goto fail;
            const struct swtel_asic_bin *b = l->bins + l->bin_first[first + j];
            for (uint32_t k = 0; hist && k < c->nbins; k++) {
                PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)b[k].low, (unsigned long long)b[k].high);
                if (pair == NULL) {
                    Py_DECREF(bins);
                    goto fail;
                }
                PyTuple_SET_ITEM(bins, k, pair);
            }
            PyObject *ct = Py_BuildValue("(NiiIN)", name_str(c->name), (int)c->width, (int)c->kind, c->nbins, bins);
            if (ct == NULL)
                goto fail;
            PyList_SET_ITEM(row, (Py_ssize_t)j, ct);
        }
    }
    return Py_BuildValue("(KNN)", (unsigned long long)l->generation, ports, counters);
fail:
    Py_XDECREF(ports);
    Py_XDECREF(counters);
    return NULL;
}

static PyObject *asic_layout(PyObject *self, PyObject *cap)
{
    asic_plugin *p = get_plugin(cap);
    if (p == NULL)
        return NULL;
    swtel_asic_layout l;
    char err[768] = "";
    int rc = swtel_asic_list(&p->plugin, &l, err, sizeof(err));
    if (rc == -2)
        return PyErr_NoMemory();
    if (rc < 0)
        return PyErr_Format(PyExc_OSError, "asic plugin %s: %s", p->label, err);
    PyObject *out = layout_objects(&l);
    swtel_asic_layout_free(&l);
    return out;
}

PyDoc_STRVAR(asic_read_doc,
"asic_read(handle, generation, out) -> (status, ts_ns)\n\n"
"One bulk read of every counter into out (u64 buffer, the layout's length),\n"
"GIL released. status: 0 read, ECHANGED (-2) the layout changed (nothing\n"
"written). A plugin error raises OSError with its text.");

static const swtel_bufspec asic_bufs[] = {{8, 1, "out"}};

static PyObject *asic_read(PyObject *self, PyObject *args)
{
    PyObject *cap, *o[1];
    unsigned long long gen;
    if (!PyArg_ParseTuple(args, "OKO", &cap, &gen, &o[0]))
        return NULL;
    asic_plugin *p = get_plugin(cap);
    if (p == NULL)
        return NULL;
    Py_buffer b[1];
    if (swtel_get_buffers(o, b, asic_bufs, 1) < 0)
        return NULL;
    char err[SWTEL_ASIC_ERR_MAX] = "";
    int64_t ts = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = p->plugin.ops->read(p->plugin.h, (uint64_t)gen, b[0].buf, (size_t)(b[0].len / 8), &ts, err, sizeof(err));
    err[sizeof(err) - 1] = '\0'; /* the plugin's text may lack its NUL */
    Py_END_ALLOW_THREADS
    swtel_release_buffers(b, 1);
    if (rc == SWTEL_ASIC_OK || rc == SWTEL_ASIC_ECHANGED)
        return Py_BuildValue("(iL)", rc, (long long)ts);
    return PyErr_Format(PyExc_OSError, "asic plugin %s: read failed: %s", p->label,
                        err[0] ? err : "no reason given");
}

PyDoc_STRVAR(asic_close_doc, "asic_close(handle): close the ASIC and unload the plugin (idempotent).");

static PyObject *asic_close(PyObject *self, PyObject *cap)
{
    asic_plugin *p = PyCapsule_GetPointer(cap, CAPSULE_NAME);
    if (p == NULL)
        return NULL;
    if (p->plugin.h != NULL) {
        p->plugin.ops->close(p->plugin.h);
        p->plugin.h = NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef swtel_asic_methods[] = {
    {"asic_open", asic_open, METH_VARARGS, asic_open_doc},
    {"asic_layout", asic_layout, METH_O, asic_layout_doc},
    {"asic_read", asic_read, METH_VARARGS, asic_read_doc},
    {"asic_close", asic_close, METH_O, asic_close_doc},
    {NULL, NULL, 0, NULL},
};
