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
    int minor;       /* the ABI minor the plugin was built against (from its ops_size) */
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
            else if (ops->ops_size < SWTEL_ASIC_OPS_SIZE_1_0 || !ops_complete(ops))
                snprintf(err, sizeof(err), "incomplete ops table (size %u, expected %zu or more)", ops->ops_size,
                         (size_t)SWTEL_ASIC_OPS_SIZE_1_0);
            else {
                char perr[384] = "";
                p->ops = ops;
                /* 1.0's table ends before bin_info: never read past the plugin's ops_size */
                p->minor = ops->ops_size >= sizeof(struct swtel_asic_ops) ? 1 : 0;
                p->h = ops->open(config, perr, sizeof(perr));
                perr[sizeof(perr) - 1] = '\0'; /* the plugin's text may lack its NUL */
                if (p->h == NULL)
                    snprintf(err, sizeof(err), "open failed: %s", perr[0] ? perr : "no reason given");
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (p->h == NULL) {
        PyErr_Format(PyExc_OSError, "asic plugin %s: %s", label, err);
        plugin_free(p);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(p, CAPSULE_NAME, capsule_destructor);
    if (cap == NULL)
        plugin_free(p);
    return cap;
}

/* A refused layout: OSError "asic plugin PATH: layout refused: WHAT: WHY". */
static PyObject *refuse(const asic_plugin *p, PyObject *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *why = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (why != NULL) {
        if (what != NULL)
            PyErr_Format(PyExc_OSError, "asic plugin %s: layout refused: %U: %U", p->label, what, why);
        else
            PyErr_Format(PyExc_OSError, "asic plugin %s: layout refused: %U", p->label, why);
        Py_DECREF(why);
    }
    return NULL;
}

/* A fixed-size name field as str, checked: NUL-terminated within the field, UTF-8, no
 * control character (C0, DEL, C1), and not empty unless empty_ok. NULL with OSError
 * naming `what` otherwise. */
static PyObject *checked_name(const asic_plugin *p, PyObject *what, const char *label, const char *field,
                              size_t size, int empty_ok)
{
    size_t len = strnlen(field, size);
    if (len == size)
        return refuse(p, what, "%s is not NUL-terminated within %d bytes", label, (int)size);
    if (len == 0 && !empty_ok)
        return refuse(p, what, "empty %s", label);
    PyObject *s = PyUnicode_DecodeUTF8(field, (Py_ssize_t)len, "strict");
    if (s == NULL) {
        PyErr_Clear();
        return refuse(p, what, "%s is not UTF-8", label);
    }
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t k = 0, n = PyUnicode_GET_LENGTH(s); k < n; k++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, k);
        if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) {
            char code[16]; /* PyUnicode_FromFormat has no %04X */
            snprintf(code, sizeof(code), "U+%04X", (unsigned)c);
            Py_DECREF(s);
            return refuse(p, what, "%s contains control character %s", label, code);
        }
    }
    return s;
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

/* The bins of HISTOGRAM counter j of port i as a tuple of (low, high), checked; NULL with
 * OSError when the plugin cannot describe them or they do not ascend. */
static PyObject *histogram_bins(const asic_plugin *p, PyObject *pname, PyObject *cname, int i, int j,
                                uint32_t nbins)
{
    const struct swtel_asic_ops *o = p->ops;
    if (p->minor < 1)
        return refuse(p, NULL, "port %R counter %R: HISTOGRAM needs ABI 1.1 (the plugin was built against 1.0)",
                      pname, cname);
    if (o->bin_info == NULL)
        return refuse(p, NULL, "port %R counter %R: a HISTOGRAM, but the plugin has no bin_info", pname, cname);
    if (nbins == 0 || nbins > SWTEL_ASIC_MAX_BINS)
        return refuse(p, NULL, "port %R counter %R: nbins %u (a HISTOGRAM has 1 to %d bins)", pname, cname,
                      nbins, SWTEL_ASIC_MAX_BINS);
    PyObject *bins = PyTuple_New(nbins);
    if (bins == NULL)
        return NULL;
    for (uint32_t b = 0; b < nbins; b++) {
        struct swtel_asic_bin bin = {0, 0};
        if (o->bin_info(p->h, i, j, (int)b, &bin) != 0) {
            Py_DECREF(bins);
            return refuse(p, NULL, "port %R counter %R: bin_info(%d, %d, %u) failed", pname, cname, i, j, b);
        }
        const char *bad = bin.low > bin.high ? "its low bound is above its high bound" : NULL;
        if (bad == NULL && b > 0) {
            PyObject *prev = PyTuple_GET_ITEM(PyTuple_GET_ITEM(bins, b - 1), 1);
            if (bin.low <= PyLong_AsUnsignedLongLong(prev))
                bad = "it does not start above the previous bin's high bound (bins ascend, no overlap)";
        }
        if (bad != NULL) {
            Py_DECREF(bins);
            return refuse(p, NULL, "port %R counter %R: bin %u [%llu, %llu]: %s", pname, cname, b,
                          (unsigned long long)bin.low, (unsigned long long)bin.high, bad);
        }
        PyObject *t = Py_BuildValue("(KK)", (unsigned long long)bin.low, (unsigned long long)bin.high);
        if (t == NULL) {
            Py_DECREF(bins);
            return NULL;
        }
        PyTuple_SET_ITEM(bins, b, t);
    }
    return bins;
}

static PyObject *asic_layout(PyObject *self, PyObject *cap)
{
    asic_plugin *p = get_plugin(cap);
    if (p == NULL)
        return NULL;
    const struct swtel_asic_ops *o = p->ops;
    uint64_t gen = o->generation(p->h);
    int nports = o->port_count(p->h);
    if (nports < 0)
        return refuse(p, NULL, "port_count returned %d", nports);
    if (nports > SWTEL_ASIC_MAX_PORTS)
        return refuse(p, NULL, "port_count returned %d, more than the %d ports swtel accepts", nports,
                      SWTEL_ASIC_MAX_PORTS);
    PyObject *ports = PyList_New(nports), *counters = PyList_New(nports), *seen = PyDict_New();
    PyObject *what = NULL, *names = NULL;
    int *ncs = PyMem_Calloc(nports ? (size_t)nports : 1, sizeof(int));
    if (ports == NULL || counters == NULL || seen == NULL || ncs == NULL) {
        if (ncs == NULL)
            PyErr_NoMemory();
        goto fail;
    }
    /* First the ports and their counts (at most MAX_PORTS calls each), so that a layout
     * too large is refused before a single descriptor is listed. */
    long long total = 0;
    for (int i = 0; i < nports; i++) {
        struct swtel_asic_port port;
        memset(&port, 0, sizeof(port));
        if (o->port_info(p->h, i, &port) != 0) {
            refuse(p, NULL, "port_info(%d) failed", i);
            goto fail;
        }
        what = PyUnicode_FromFormat("port %d", i);
        if (what == NULL)
            goto fail;
        PyObject *name = checked_name(p, what, "name", port.name, sizeof(port.name), 0);
        PyObject *parent = name ? checked_name(p, what, "parent name", port.parent, sizeof(port.parent), 1) : NULL;
        Py_CLEAR(what);
        if (parent == NULL) {
            Py_XDECREF(name);
            goto fail;
        }
        PyObject *first = PyDict_GetItemWithError(seen, name);
        PyObject *index = first == NULL && !PyErr_Occurred() ? PyLong_FromLong(i) : NULL;
        if (index == NULL || PyDict_SetItem(seen, name, index) < 0) {
            if (first != NULL)
                refuse(p, NULL, "port %R listed twice (ports %S and %d): every port needs its own name", name,
                       first, i);
            Py_XDECREF(index);
            Py_DECREF(name);
            Py_DECREF(parent);
            goto fail;
        }
        Py_DECREF(index);
        PyObject *t = Py_BuildValue("(NNKI)", name, parent, (unsigned long long)port.speed_mbps, port.flags);
        if (t == NULL)
            goto fail;
        PyList_SET_ITEM(ports, i, t);
        int nc = o->counter_count(p->h, i);
        if (nc < 0) {
            refuse(p, NULL, "port %R: counter_count returned %d", PyTuple_GET_ITEM(t, 0), nc);
            goto fail;
        }
        if (nc > SWTEL_ASIC_MAX_COUNTERS) {
            refuse(p, NULL, "port %R: counter_count returned %d, more than the %d counters per port swtel accepts",
                   PyTuple_GET_ITEM(t, 0), nc, SWTEL_ASIC_MAX_COUNTERS);
            goto fail;
        }
        total += nc;
        if (total > SWTEL_ASIC_MAX_VALUES) {
            refuse(p, NULL, "more than the %d values swtel accepts in one layout (%lld by port %R, %d of %d)",
                   SWTEL_ASIC_MAX_VALUES, total, PyTuple_GET_ITEM(t, 0), i + 1, nports);
            goto fail;
        }
        ncs[i] = nc;
    }
    names = PySet_New(NULL);
    if (names == NULL)
        goto fail;
    long long slots = 0; /* values in one read: a HISTOGRAM takes nbins */
    for (int i = 0; i < nports; i++) {
        PyObject *pname = PyTuple_GET_ITEM(PyList_GET_ITEM(ports, i), 0);
        int nc = ncs[i];
        PyObject *list = PyList_New(nc);
        if (list == NULL || PySet_Clear(names) < 0) {
            Py_XDECREF(list);
            goto fail;
        }
        PyList_SET_ITEM(counters, i, list);
        for (int j = 0; j < nc; j++) {
            struct swtel_asic_counter c;
            memset(&c, 0, sizeof(c));
            if (o->counter_info(p->h, i, j, &c) != 0) {
                refuse(p, NULL, "port %R: counter_info(%d, %d) failed", pname, i, j);
                goto fail;
            }
            what = PyUnicode_FromFormat("port %R counter %d", pname, j);
            if (what == NULL)
                goto fail;
            PyObject *cname = checked_name(p, what, "name", c.name, sizeof(c.name), 0);
            if (cname == NULL)
                goto fail;
            Py_CLEAR(what);
            int dup = PySet_Contains(names, cname);
            if (dup != 0 || PySet_Add(names, cname) < 0) {
                if (dup > 0)
                    refuse(p, NULL, "port %R: counter %R listed twice: every counter of a port needs its own name",
                           pname, cname);
                Py_DECREF(cname);
                goto fail;
            }
            /* (width and kind are judged by the asic source, which knows what it can unwrap;
             * here what the ABI version allows and what a histogram's bins must be) */
            if (c.nbins > SWTEL_ASIC_MAX_BINS) {
                refuse(p, NULL, "port %R counter %R: nbins %u, more than the %d bins swtel accepts", pname, cname,
                       c.nbins, SWTEL_ASIC_MAX_BINS);
                Py_DECREF(cname);
                goto fail;
            }
            if (c.kind == SWTEL_ASIC_PEAK && p->minor < 1) {
                refuse(p, NULL, "port %R counter %R: PEAK needs ABI 1.1 (the plugin was built against 1.0)", pname,
                       cname);
                Py_DECREF(cname);
                goto fail;
            }
            slots += c.kind == SWTEL_ASIC_HISTOGRAM ? (long long)c.nbins : 1;
            if (slots > SWTEL_ASIC_MAX_VALUES) { /* judged before the bins are listed */
                refuse(p, NULL, "more than the %d values swtel accepts in one layout (bins included; by port %R "
                       "counter %R)", SWTEL_ASIC_MAX_VALUES, pname, cname);
                Py_DECREF(cname);
                goto fail;
            }
            PyObject *bins = c.kind == SWTEL_ASIC_HISTOGRAM ? histogram_bins(p, pname, cname, i, j, c.nbins)
                                                            : PyTuple_New(0);
            if (bins == NULL) {
                Py_DECREF(cname);
                goto fail;
            }
            PyObject *ct = Py_BuildValue("(NiiIN)", cname, (int)c.width, (int)c.kind, c.nbins, bins);
            if (ct == NULL)
                goto fail;
            PyList_SET_ITEM(list, j, ct);
        }
    }
    Py_DECREF(seen);
    Py_DECREF(names);
    PyMem_Free(ncs);
    return Py_BuildValue("(KNN)", (unsigned long long)gen, ports, counters);
fail:
    Py_XDECREF(what);
    Py_XDECREF(ports);
    Py_XDECREF(counters);
    Py_XDECREF(seen);
    Py_XDECREF(names);
    PyMem_Free(ncs);
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
