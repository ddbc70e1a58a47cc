/* Shared declarations of the swtel C hot path (module agent._swtel).
 *
 * Boundary (psutil style): C does the syscalls and the tight loops over flat
 * buffers; Python owns naming, mapping and everything that runs rarely. Every
 * function here takes and returns plain types: ints, bytes, lists and objects
 * supporting the buffer protocol (array.array, bytearray, memoryview).
 */
#ifndef SWTEL_H
#define SWTEL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* agent/__init__.py's __version__, given by setup.py at build time; checked on import. */
#ifndef SWTEL_EXT_VERSION
#error "build with setup.py: SWTEL_EXT_VERSION comes from agent/__init__.py"
#endif

/* Number of rtnl_link_stats64 fields the netdev reader copies per link. */
#define SWTEL_NETDEV_FIELDS 25

/* Change-kernel flags, one byte per changed counter: agent/counters.py defines them for
 * Python, and tests/unit/test_backend.py holds the two to each other. */
#define SWTEL_F_CHANGED 0x01
#define SWTEL_F_WRAP 0x02
#define SWTEL_F_RESET 0x04
#define SWTEL_F_NEW 0x08
#define SWTEL_F_JUMP 0x10 /* with RESET: a move larger than the counter's limit */

/* Per-file method tables; module.c adds each of them to the module. */
extern PyMethodDef swtel_netdev_methods[];
extern PyMethodDef swtel_ethtool_methods[];
extern PyMethodDef swtel_sysfs_methods[];
extern PyMethodDef swtel_change_methods[];
extern PyMethodDef swtel_encode_methods[];
extern PyMethodDef swtel_asic_methods[];
extern PyMethodDef swtel_links_methods[];
extern PyMethodDef swtel_ethnl_methods[];
extern PyMethodDef swtel_devlink_methods[];
extern PyMethodDef swtel_feeds_methods[];
int swtel_feeds_add_types(PyObject *m); /* feeds.c: the Feed type */
extern PyMethodDef swtel_detect_methods[];
extern PyMethodDef swtel_gather_methods[];
extern PyMethodDef swtel_jsonl_methods[];

/* ethnl.c's commands (ETHTOOL_MSG_FEC_GET, ETHTOOL_MSG_STATS_GET: UAPI values), module constants. */
#define SWTEL_ETHNL_FEC_GET 29
#define SWTEL_ETHNL_STATS_GET 32

/* devlink.c's commands (DEVLINK_CMD_*: UAPI values), module constants. */
#define SWTEL_DEVLINK_PORT_GET 5
#define SWTEL_DEVLINK_SB_GET 11
#define SWTEL_DEVLINK_SB_PORT_POOL_GET 19
#define SWTEL_DEVLINK_SB_TC_POOL_BIND_GET 23
#define SWTEL_DEVLINK_SB_OCC_SNAPSHOT 27
#define SWTEL_DEVLINK_SB_OCC_MAX_CLEAR 28
#define SWTEL_DEVLINK_TRAP_GET 61
#define SWTEL_DEVLINK_TRAP_GROUP_GET 65

/* One buffer argument: its item size, whether C writes into it, its name for errors. */
typedef struct {
    Py_ssize_t itemsize;
    int writable;
    const char *what;
} swtel_bufspec;

/* Get n contiguous buffers with exact item sizes. Returns 0 on success; on
 * failure releases what it got and returns -1 with a Python exception set. */
int swtel_get_buffers(PyObject *const *objs, Py_buffer *views, const swtel_bufspec *specs, int n);
void swtel_release_buffers(Py_buffer *views, int n);

/* A sequence of ints as a loop reads it: a typed buffer (kind 'I': u32 items, as array('I');
 * kind 'q': i64 items, as array('q')) read in place, or any other sequence of Python ints
 * through PySequence_Fast. The engine hands a batch's indices and deltas over as arrays, so
 * no Python int is made per change; tests and callers may still pass lists. */
typedef struct {
    Py_buffer view;
    PyObject *fast;  /* the PySequence_Fast list or tuple, when not a buffer of that kind */
    const void *buf; /* the buffer's items, when it is one */
    Py_ssize_t n;
} swtel_ints;

/* 0, or -1 with an exception set (nothing held then). */
int swtel_ints_get(PyObject *obj, swtel_ints *s, char kind, const char *what);
void swtel_ints_release(swtel_ints *s);

/* Item k as an index (kind 'I'), or -1 with an exception set when an object item is not an int. */
static inline Py_ssize_t swtel_ints_index(const swtel_ints *s, Py_ssize_t k)
{
    if (s->buf != NULL)
        return (Py_ssize_t)((const uint32_t *)s->buf)[k];
    return PyLong_AsSsize_t(PySequence_Fast_ITEMS(s->fast)[k]);
}

#endif
