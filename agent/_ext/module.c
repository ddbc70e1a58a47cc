/* agent._swtel: module definition. Each hot-path concern lives in its own file
 * (netdev.c, ethtool.c, sysfs.c, change.c, encode.c, asic.c, links.c) and exports a
 * method table. */
#include "swtel.h"

#include "../asic/swtel_asic.h"

static int get_buffer(PyObject *obj, Py_buffer *view, const swtel_bufspec *spec)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (spec->writable)
        flags |= PyBUF_WRITABLE;
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    /* Typed arrays must match exactly; raw bytes are fine in whole items. */
    if (view->itemsize != spec->itemsize && !(view->itemsize == 1 && view->len % spec->itemsize == 0)) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes, got %zd", spec->what,
                     spec->itemsize, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

int swtel_get_buffers(PyObject *const *objs, Py_buffer *views, const swtel_bufspec *specs, int n)
{
    for (int i = 0; i < n; i++) {
        if (get_buffer(objs[i], &views[i], &specs[i]) < 0) {
            swtel_release_buffers(views, i);
            return -1;
        }
    }
    return 0;
}

void swtel_release_buffers(Py_buffer *views, int n)
{
    for (int i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
}

int swtel_ints_get(PyObject *obj, swtel_ints *s, char kind, const char *what)
{
    Py_ssize_t size = kind == 'I' ? 4 : 8;
    s->fast = NULL;
    s->buf = NULL;
    if (PyObject_CheckBuffer(obj) && PyObject_GetBuffer(obj, &s->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
        const char *f = s->view.format != NULL ? s->view.format : "B";
        if (*f == '@' || *f == '=')
            f++;
        /* i64: 'q', or 'l' where a long is 8 bytes; u32: 'I', or 'L' where a long is 4 */
        int same = s->view.itemsize == size && f[1] == '\0' &&
                   (kind == 'I' ? (*f == 'I' || *f == 'L') : (*f == 'q' || *f == 'l'));
        if (same) {
            s->buf = s->view.buf;
            s->n = s->view.len / size;
            return 0;
        }
        PyBuffer_Release(&s->view); /* a buffer of other items: read as a sequence */
    }
    PyErr_Clear();
    s->fast = PySequence_Fast(obj, what);
    if (s->fast == NULL)
        return -1;
    s->n = PySequence_Fast_GET_SIZE(s->fast);
    return 0;
}

void swtel_ints_release(swtel_ints *s)
{
    if (s->buf != NULL)
        PyBuffer_Release(&s->view);
    Py_CLEAR(s->fast);
    s->buf = NULL;
}

static struct PyModuleDef swtel_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "agent._swtel",
    .m_doc = "swtel hot path: counter readers, change kernel, gNMI encoder and link parser.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__swtel(void)
{
    PyObject *m = PyModule_Create(&swtel_module);
    if (m == NULL)
        return NULL;
    PyMethodDef *tables[] = {swtel_netdev_methods, swtel_ethtool_methods, swtel_sysfs_methods,
                             swtel_change_methods, swtel_encode_methods, swtel_asic_methods,
                             swtel_links_methods,
                             swtel_ethnl_methods,
                             swtel_devlink_methods,
                             swtel_feeds_methods,
                             swtel_detect_methods,
                             swtel_gather_methods,
                             swtel_jsonl_methods};
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        if (PyModule_AddFunctions(m, tables[i]) < 0)
            goto fail;
    }
    if (swtel_feeds_add_types(m) < 0)
        goto fail;
    if (PyModule_AddStringConstant(m, "version", SWTEL_EXT_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "NETDEV_FIELDS", SWTEL_NETDEV_FIELDS) < 0 ||
        PyModule_AddIntConstant(m, "F_CHANGED", SWTEL_F_CHANGED) < 0 ||
        PyModule_AddIntConstant(m, "F_WRAP", SWTEL_F_WRAP) < 0 ||
        PyModule_AddIntConstant(m, "F_RESET", SWTEL_F_RESET) < 0 ||
        PyModule_AddIntConstant(m, "F_NEW", SWTEL_F_NEW) < 0 ||
        PyModule_AddIntConstant(m, "F_JUMP", SWTEL_F_JUMP) < 0 ||
        PyModule_AddIntConstant(m, "ASIC_ABI_VERSION", SWTEL_ASIC_ABI_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "ASIC_ECHANGED", SWTEL_ASIC_ECHANGED) < 0 ||
        PyModule_AddIntConstant(m, "ASIC_MAX_PORTS", SWTEL_ASIC_MAX_PORTS) < 0 ||
        PyModule_AddIntConstant(m, "ASIC_MAX_COUNTERS", SWTEL_ASIC_MAX_COUNTERS) < 0 ||
        PyModule_AddIntConstant(m, "ASIC_MAX_VALUES", SWTEL_ASIC_MAX_VALUES) < 0 ||
        PyModule_AddIntConstant(m, "ASIC_MAX_BINS", SWTEL_ASIC_MAX_BINS) < 0 ||
        PyModule_AddIntConstant(m, "ETHNL_FEC_GET", SWTEL_ETHNL_FEC_GET) < 0 ||
        PyModule_AddIntConstant(m, "ETHNL_STATS_GET", SWTEL_ETHNL_STATS_GET) < 0 ||
        PyModule_AddIntConstant(m, "DEVLINK_PORT_GET", SWTEL_DEVLINK_PORT_GET) < 0 ||
        PyModule_AddIntConstant(m, "DEVLINK_SB_GET", SWTEL_DEVLINK_SB_GET) < 0 ||
        PyModule_AddIntConstant(m, "DEVLINK_SB_PORT_POOL_GET", SWTEL_DEVLINK_SB_PORT_POOL_GET) < 0 ||
        PyModule_AddIntConstant(m, "DEVLINK_SB_TC_POOL_BIND_GET", SWTEL_DEVLINK_SB_TC_POOL_BIND_GET) < 0 ||
        PyModule_AddIntConstant(m, "DEVLINK_SB_OCC_SNAPSHOT", SWTEL_DEVLINK_SB_OCC_SNAPSHOT) < 0 ||
        PyModule_AddIntConstant(m, "DEVLINK_SB_OCC_MAX_CLEAR", SWTEL_DEVLINK_SB_OCC_MAX_CLEAR) < 0 ||
        PyModule_AddIntConstant(m, "DEVLINK_TRAP_GET", SWTEL_DEVLINK_TRAP_GET) < 0 ||
        PyModule_AddIntConstant(m, "DEVLINK_TRAP_GROUP_GET", SWTEL_DEVLINK_TRAP_GROUP_GET) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
