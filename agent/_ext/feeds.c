/* The insights feeds' per-change loop (agent/insights/feeds.py): every change a
 * detector reads is added into its port's accumulation (a dict per port slot), so that
 * Python runs once per port touched, never once per change. The per-counter maps (port
 * slot, key, level or not) are built once per table by agent/insights/classify.py. */
#include "swtel.h"

#include <stdlib.h>

PyDoc_STRVAR(feed_add_doc,
"feed_add(indices, deltas, flags, values, slot_of, keys, levels, bits, accs, hashes=None,\n"
"         vcols=None, rows=None, width=0, spill=0) -> (touched, discarded, tops, masks)\n\n"
"indices, deltas (u32 and i64 arrays, or sequences of ints) and flags (u8) are one\n"
"batch's changes; values (u64) its source's cumulative values. slot_of (i32 per counter: the port slot, -1 for\n"
"a counter no detector reads), keys (a sequence per counter: the (sem, sub) key, or\n"
"None) and levels (u8 per counter: 0 a counter, 1 a queue's level, 2 another level) map\n"
"each counter, and bits (u32 per counter) its semantic's bit. accs is the list of\n"
"the port slots' accumulations (dicts), updated in place: a level's key takes its\n"
"latest value; a counter's delta is added to its key (a zero delta adds nothing); a\n"
"change flagged NEW or RESET adds nothing and marks its slot discarded.\n"
"Returns the slots touched, in the order of their first change, the slots discarded, and\n"
"per slot touched the highest queue level (levels 1) among its changes (0: none), which\n"
"lets a detector skip a port whose queues are all below its threshold, and the OR of the\n"
"bits of the keys it set in the slot's accumulation (the semantics that changed).\n"
"hashes (i64 per counter: hash(key), computed once per table) spares a hash of the key per\n"
"change; the results are the same without it.\n"
"vcols (i32 per counter: a column, -1 none) and rows (writable i64, width per slot) keep a\n"
"counter's deltas out of the dict: a counter with a column adds its delta into\n"
"rows[slot * width + column] instead; a delta not an int within int64, or a sum leaving it,\n"
"goes to the dict as without rows, and its slot's mask takes the bit spill too.");

/* The accumulations' dict operations, given the key's hash where the caller computed it
 * once per table (a tuple's hash is not cached: two per change otherwise). */
#if PY_VERSION_HEX < 0x030D0000
#define ACC_GET(d, k, h) ((h) ? _PyDict_GetItem_KnownHash((d), (k), (h)) : PyDict_GetItemWithError((d), (k)))
#define ACC_SET(d, k, v, h) ((h) ? _PyDict_SetItem_KnownHash((d), (k), (v), (h)) : PyDict_SetItem((d), (k), (v)))
#else
#define ACC_GET(d, k, h) PyDict_GetItemWithError((d), (k))
#define ACC_SET(d, k, v, h) PyDict_SetItem((d), (k), (v))
#endif

#define SKIP_FLAGS (SWTEL_F_NEW | SWTEL_F_RESET) /* a baseline or a reset: never traffic */

static PyObject *feed_add(PyObject *self, PyObject *args)
{
    static const swtel_bufspec specs[5] = {
        {1, 0, "flags"}, {8, 0, "values"}, {4, 0, "slot_of"}, {1, 0, "levels"}, {4, 0, "bits"},
    };
    static const swtel_bufspec hash_spec[1] = {{8, 0, "hashes"}};
    static const swtel_bufspec row_specs[2] = {{4, 0, "vcols"}, {8, 1, "rows"}};
    PyObject *idx_obj, *delta_obj, *keys_obj, *accs, *o[5], *hash_obj = Py_None, *ro[2] = {Py_None, Py_None};
    Py_buffer b[5], hb = {0}, rb[2] = {{0}};
    Py_ssize_t width = 0;
    unsigned long spill = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO!|OOOnk", &idx_obj, &delta_obj, &o[0], &o[1], &o[2], &keys_obj, &o[3],
                          &o[4], &PyList_Type, &accs, &hash_obj, &ro[0], &ro[1], &width, &spill))
        return NULL;
    int with_rows = ro[0] != Py_None || ro[1] != Py_None;
    if (with_rows && (ro[0] == Py_None || ro[1] == Py_None || width <= 0)) {
        PyErr_SetString(PyExc_ValueError, "vcols and rows go together, with a positive width");
        return NULL;
    }
    swtel_ints idx, deltas;
    if (swtel_ints_get(idx_obj, &idx, 'I', "indices must be a sequence") < 0)
        return NULL;
    if (swtel_ints_get(delta_obj, &deltas, 'q', "deltas must be a sequence") < 0) {
        swtel_ints_release(&idx);
        return NULL;
    }
    PyObject *keys = PySequence_Fast(keys_obj, "keys must be a sequence");
    if (keys == NULL) {
        swtel_ints_release(&idx);
        swtel_ints_release(&deltas);
        return NULL;
    }
    PyObject *touched = NULL, *discarded = NULL, *tops = NULL, *masks = NULL, *result = NULL;
    unsigned char *mark = NULL; /* per slot: 1 touched, 2 discarded too */
    uint64_t *top = NULL;       /* per slot: the highest queue level */
    uint32_t *mask = NULL;      /* per slot: the bits of the keys set */
    if (swtel_get_buffers(o, b, specs, 5) < 0)
        goto out;
    if (hash_obj != Py_None && swtel_get_buffers(&hash_obj, &hb, hash_spec, 1) < 0) {
        swtel_release_buffers(b, 5);
        goto out;
    }
    if (with_rows && swtel_get_buffers(ro, rb, row_specs, 2) < 0) {
        swtel_release_buffers(b, 5);
        if (hash_obj != Py_None)
            swtel_release_buffers(&hb, 1);
        goto out;
    }
    Py_ssize_t n = idx.n, ncounters = b[2].len / 4, nslots = PyList_GET_SIZE(accs);
    if (deltas.n < n || b[0].len < n) {
        PyErr_SetString(PyExc_ValueError, "deltas and flags must hold one item per index");
        goto release;
    }
    if (b[1].len / 8 < ncounters || b[3].len < ncounters || b[4].len / 4 < ncounters ||
        PySequence_Fast_GET_SIZE(keys) < ncounters) {
        PyErr_SetString(PyExc_ValueError, "values, keys, levels and bits must hold one item per counter of slot_of");
        goto release;
    }
    if (hash_obj != Py_None && hb.len / 8 < ncounters) {
        PyErr_SetString(PyExc_ValueError, "hashes must hold one item per counter of slot_of");
        goto release;
    }
    if (with_rows && (rb[0].len / 4 < ncounters || rb[1].len / 8 / width < nslots)) {
        PyErr_SetString(PyExc_ValueError, "vcols must hold one item per counter of slot_of, rows width per slot");
        goto release;
    }
    const int32_t *vcols = with_rows ? rb[0].buf : NULL;
    int64_t *rows = with_rows ? rb[1].buf : NULL;
    const int64_t *hashes = hash_obj != Py_None ? hb.buf : NULL;
    const uint8_t *flags = b[0].buf, *levels = b[3].buf;
    const uint64_t *values = b[1].buf;
    const int32_t *slot_of = b[2].buf;
    const uint32_t *bits = b[4].buf;
    const int64_t *dbuf = deltas.buf; /* (else the deltas are objects: dvals) */
    PyObject **dvals = dbuf == NULL ? PySequence_Fast_ITEMS(deltas.fast) : NULL;
    PyObject **kvals = PySequence_Fast_ITEMS(keys);
    touched = PyList_New(0);
    discarded = PyList_New(0);
    mark = calloc(nslots ? (size_t)nslots : 1, 1);
    top = calloc(nslots ? (size_t)nslots : 1, sizeof(uint64_t));
    mask = calloc(nslots ? (size_t)nslots : 1, sizeof(uint32_t));
    if (touched == NULL || discarded == NULL || mark == NULL || top == NULL || mask == NULL) {
        if (mark == NULL || top == NULL || mask == NULL)
            PyErr_NoMemory();
        goto release;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = swtel_ints_index(&idx, k);
        if (i == -1 && PyErr_Occurred())
            goto release;
        if (i < 0 || i >= ncounters) {
            PyErr_Format(PyExc_IndexError, "index %zd out of the table (%zd counters)", i, ncounters);
            goto release;
        }
        int32_t slot = slot_of[i];
        if (slot < 0)
            continue;
        if (slot >= nslots) {
            PyErr_Format(PyExc_IndexError, "slot %d out of accs (%zd)", (int)slot, nslots);
            goto release;
        }
        if (!mark[slot]) {
            mark[slot] = 1;
            PyObject *s = PyLong_FromLong(slot);
            if (s == NULL || PyList_Append(touched, s) < 0) {
                Py_XDECREF(s);
                goto release;
            }
            Py_DECREF(s);
        }
        PyObject *acc = PyList_GET_ITEM(accs, slot), *key = kvals[i];
        if (!PyDict_Check(acc)) {
            PyErr_Format(PyExc_TypeError, "accs[%d] must be a dict", (int)slot);
            goto release;
        }
        if (levels[i]) { /* a level: its latest value (a baseline is a level too) */
            if (levels[i] == 1 && values[i] > top[slot])
                top[slot] = values[i];
            PyObject *v = PyLong_FromUnsignedLongLong(values[i]);
            if (v == NULL || ACC_SET(acc, key, v, hashes ? (Py_hash_t)hashes[i] : 0) < 0) {
                Py_XDECREF(v);
                goto release;
            }
            Py_DECREF(v);
            mask[slot] |= bits[i];
            continue;
        }
        if (flags[k] & SKIP_FLAGS) {
            if (mark[slot] != 2) {
                mark[slot] = 2;
                PyObject *s = PyLong_FromLong(slot);
                if (s == NULL || PyList_Append(discarded, s) < 0) {
                    Py_XDECREF(s);
                    goto release;
                }
                Py_DECREF(s);
            }
            continue;
        }
        if (vcols != NULL && vcols[i] >= 0 && vcols[i] < width) {
            int overflow = 1;
            long long x = 0;
            if (dbuf != NULL)
                x = dbuf[k], overflow = 0;
            else if (PyLong_CheckExact(dvals[k]))
                x = PyLong_AsLongLongAndOverflow(dvals[k], &overflow);
            if (x == -1 && PyErr_Occurred())
                goto release;
            if (!overflow) {
                if (x == 0)
                    continue;
                int64_t *cell = rows + slot * width + vcols[i], sum;
                if (!__builtin_add_overflow(*cell, x, &sum)) { /* (it writes sum even when it overflows) */
                    *cell = sum;
                    mask[slot] |= bits[i];
                    continue;
                }
            }
            /* not an int within int64, or a sum past it: into the dict, the row's reader told */
            mask[slot] |= (uint32_t)spill;
        }
        if (dbuf != NULL && dbuf[k] == 0)
            continue;
        Py_hash_t h = hashes ? (Py_hash_t)hashes[i] : 0;
        PyObject *old = ACC_GET(acc, key, h), *sum;
        if (old == NULL && PyErr_Occurred())
            goto release;
        if (dbuf != NULL) {
            /* an i64 delta: added in C while the sum stays within int64 (no int made for the delta) */
            int overflow = 1;
            long long was = old != NULL && PyLong_CheckExact(old) ? PyLong_AsLongLongAndOverflow(old, &overflow) : 0;
            long long total;
            if (old == NULL)
                sum = PyLong_FromLongLong(dbuf[k]);
            else if (!overflow && !__builtin_add_overflow(was, (long long)dbuf[k], &total))
                sum = PyLong_FromLongLong(total);
            else {
                PyObject *d = PyLong_FromLongLong(dbuf[k]);
                sum = d == NULL ? NULL : PyNumber_Add(old, d);
                Py_XDECREF(d);
            }
        } else {
            PyObject *d = dvals[k];
            int zero = PyObject_Not(d);
            if (zero < 0)
                goto release;
            if (zero)
                continue;
            sum = old == NULL ? (Py_INCREF(d), d) : PyNumber_Add(old, d);
        }
        if (sum == NULL || ACC_SET(acc, key, sum, h) < 0) {
            Py_XDECREF(sum);
            goto release;
        }
        Py_DECREF(sum);
        mask[slot] |= bits[i];
    }
    Py_ssize_t ntouched = PyList_GET_SIZE(touched);
    tops = PyList_New(ntouched);
    masks = PyList_New(ntouched);
    if (tops == NULL || masks == NULL)
        goto release;
    for (Py_ssize_t j = 0; j < ntouched; j++) {
        Py_ssize_t slot = PyLong_AsSsize_t(PyList_GET_ITEM(touched, j));
        PyObject *v = PyLong_FromUnsignedLongLong(top[slot]);
        if (v == NULL)
            goto release;
        PyList_SET_ITEM(tops, j, v);
        v = PyLong_FromUnsignedLong(mask[slot]);
        if (v == NULL)
            goto release;
        PyList_SET_ITEM(masks, j, v);
    }
    result = PyTuple_Pack(4, touched, discarded, tops, masks);
release:
    swtel_release_buffers(b, 5);
    if (hash_obj != Py_None)
        swtel_release_buffers(&hb, 1);
    if (with_rows)
        swtel_release_buffers(rb, 2);
out:
    free(mark);
    free(top);
    free(mask);
    Py_XDECREF(tops);
    Py_XDECREF(masks);
    Py_XDECREF(touched);
    Py_XDECREF(discarded);
    swtel_ints_release(&idx);
    swtel_ints_release(&deltas);
    Py_DECREF(keys);
    return result;
}

PyMethodDef swtel_feeds_methods[] = {
    {"feed_add", feed_add, METH_VARARGS, feed_add_doc},
    {NULL, NULL, 0, NULL},
};
