/* ASIC plugin loader: dlopen a plugin implementing agent/asic/swtel_asic.h,
 * check its ABI, and read every counter in one call with the GIL released.
 * Python (agent/sources/asic.py) names and maps what the plugin describes. */
#include "swtel.h"

#include "../asic/swtel_asic.h"

#include <dlfcn.h>
#include <string.h>

#define CAPSULE_NAME "swtel.asic"

typedef struct {
    void *dl;
    const struct swtel_asic_ops *ops;
    void *h;
    char label[256]; /* plugin path, for error messages */
} asic_plugin;

static void plugin_free(asic_plugin *p)
{
    if (p->h != NULL && p->ops != NULL)
        p->ops->close(p->h);
    p->h = NULL;
    if (p->dl != NULL)
        dlclose(p->dl);
    p->dl = NULL;
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
    if (p->h == NULL) {
        PyErr_SetString(PyExc_ValueError, "asic plugin handle is closed");
        return NULL;
    }
    return p;
}

static int ops_complete(const struct swtel_asic_ops *o)
{
    return o->open && o->generation && o->port_count && o->port_info && o->counter_count &&
           o->counter_info && o->read && o->close;
}

PyDoc_STRVAR(asic_open_doc,
"asic_open(path: str, config: str) -> handle\n\n"
"dlopen the plugin, check its ABI version and open it with the config string.\n"
"Raises OSError naming the plugin and the reason (cannot load, no entry point,\n"
"wrong ABI version, or the plugin's own error text).");

static PyObject *asic_open(PyObject *self, PyObject *args)
{
    const char *path, *config;
    if (!PyArg_ParseTuple(args, "ss", &path, &config))
        return NULL;
    asic_plugin *p = PyMem_Calloc(1, sizeof(*p));
    if (p == NULL)
        return PyErr_NoMemory();
    snprintf(p->label, sizeof(p->label), "%s", path);
    char err[512] = "";
    Py_BEGIN_ALLOW_THREADS
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (p->dl == NULL) {
        const char *why = dlerror();
        snprintf(err, sizeof(err), "cannot load: %s", why ? why : "unknown error");
    } else {
        swtel_asic_plugin_fn entry = (swtel_asic_plugin_fn)dlsym(p->dl, SWTEL_ASIC_SYMBOL);
        if (entry == NULL) {
            snprintf(err, sizeof(err), "not a swtel ASIC plugin: no symbol %s", SWTEL_ASIC_SYMBOL);
        } else {
            const struct swtel_asic_ops *ops = entry();
            if (ops == NULL)
                snprintf(err, sizeof(err), "%s() returned NULL", SWTEL_ASIC_SYMBOL);
            else if (ops->abi_version != SWTEL_ASIC_ABI_VERSION)
                snprintf(err, sizeof(err), "ABI version %u, this swtel speaks %u", ops->abi_version,
                         SWTEL_ASIC_ABI_VERSION);
            else if (ops->ops_size < sizeof(struct swtel_asic_ops) || !ops_complete(ops))
                snprintf(err, sizeof(err), "incomplete ops table (size %u, expected %zu)", ops->ops_size,
                         sizeof(struct swtel_asic_ops));
            else {
                char perr[384] = "";
                p->ops = ops;
                p->h = ops->open(config, perr, sizeof(perr));
                if (p->h == NULL)
                    snprintf(err, sizeof(err), "open failed: %s", perr[0] ? perr : "no reason given");
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (p->h == NULL) {
        PyErr_Format(PyExc_OSError, "asic plugin %s: %s", path, err);
        plugin_free(p);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(p, CAPSULE_NAME, capsule_destructor);
    if (cap == NULL)
        plugin_free(p);
    return cap;
}

/* A fixed-size name field as str, up to its NUL (never past the field). */
static PyObject *name_str(const char *field, size_t size)
{
    return PyUnicode_DecodeUTF8(field, strnlen(field, size), "replace");
}

PyDoc_STRVAR(asic_layout_doc,
"asic_layout(handle) -> (generation, ports, counters)\n\n"
"ports: [(name, parent, speed_mbps, flags)]; counters: one list per port of\n"
"(name, width, kind, nbins). Read it again after asic_read returns ECHANGED.");

static PyObject *asic_layout(PyObject *self, PyObject *cap)
{
    asic_plugin *p = get_plugin(cap);
    if (p == NULL)
        return NULL;
    const struct swtel_asic_ops *o = p->ops;
    uint64_t gen = o->generation(p->h);
    int nports = o->port_count(p->h);
    if (nports < 0)
        return PyErr_Format(PyExc_OSError, "asic plugin %s: port_count returned %d", p->label, nports);
    PyObject *ports = PyList_New(nports), *counters = PyList_New(nports);
    if (ports == NULL || counters == NULL)
        goto fail;
    for (int i = 0; i < nports; i++) {
        struct swtel_asic_port port;
        memset(&port, 0, sizeof(port));
        if (o->port_info(p->h, i, &port) != 0) {
            PyErr_Format(PyExc_OSError, "asic plugin %s: port_info(%d) failed", p->label, i);
            goto fail;
        }
        PyObject *name = name_str(port.name, sizeof(port.name));
        PyObject *parent = name_str(port.parent, sizeof(port.parent));
        PyObject *t = (name && parent) ? Py_BuildValue("(OOKI)", name, parent, (unsigned long long)port.speed_mbps,
                                                        port.flags)
                                       : NULL;
        Py_XDECREF(name);
        Py_XDECREF(parent);
        if (t == NULL)
            goto fail;
        PyList_SET_ITEM(ports, i, t);
        int nc = o->counter_count(p->h, i);
        if (nc < 0) {
            PyErr_Format(PyExc_OSError, "asic plugin %s: counter_count(%d) returned %d", p->label, i, nc);
            goto fail;
        }
        PyObject *list = PyList_New(nc);
        if (list == NULL)
            goto fail;
        PyList_SET_ITEM(counters, i, list);
        for (int j = 0; j < nc; j++) {
            struct swtel_asic_counter c;
            memset(&c, 0, sizeof(c));
            if (o->counter_info(p->h, i, j, &c) != 0) {
                PyErr_Format(PyExc_OSError, "asic plugin %s: counter_info(%d, %d) failed", p->label, i, j);
                goto fail;
            }
            PyObject *cname = name_str(c.name, sizeof(c.name));
            PyObject *ct = cname ? Py_BuildValue("(OiiI)", cname, (int)c.width, (int)c.kind, c.nbins) : NULL;
            Py_XDECREF(cname);
            if (ct == NULL)
                goto fail;
            PyList_SET_ITEM(list, j, ct);
        }
    }
    PyObject *out = Py_BuildValue("(KNN)", (unsigned long long)gen, ports, counters);
    return out;
fail:
    Py_XDECREF(ports);
    Py_XDECREF(counters);
    return NULL;
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
    char err[384] = "";
    int64_t ts = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = p->ops->read(p->h, (uint64_t)gen, b[0].buf, (size_t)(b[0].len / 8), &ts, err, sizeof(err));
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
    if (p->h != NULL) {
        p->ops->close(p->h);
        p->h = NULL;
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
