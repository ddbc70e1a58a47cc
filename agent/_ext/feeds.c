/* The insights feeds' per-change loop (agent/insights/feeds.py): every change a
 * detector reads is added into its port's accumulation (a dict per port slot), so that
 * Python runs once per port touched, never once per change. The per-counter maps (port
 * slot, key, level or not) are built once per table by agent/insights/classify.py. */
#include "swtel.h"

#include <stdlib.h>

#include "structmember.h" /* PyMemberDef: the Feed type's fields */

PyDoc_STRVAR(feed_add_doc,
"feed_add(indices, deltas, flags, values, slot_of, keys, levels, bits, accs,\n"
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
"vcols (i32 per counter: a column, -1 none) and rows (writable i64, width per slot) keep a\n"
"counter's deltas out of the dict: a counter with a column adds its delta into\n"
"rows[slot * width + column] instead; a delta not an int within int64, or a sum leaving it,\n"
"goes to the dict as without rows, and its slot's mask takes the bit spill too.");


#define SKIP_FLAGS (SWTEL_F_NEW | SWTEL_F_RESET) /* a baseline or a reset: never traffic */

static PyObject *feed_add(PyObject *self, PyObject *args)
{
    static const swtel_bufspec specs[5] = {
        {1, 0, "flags"}, {8, 0, "values"}, {4, 0, "slot_of"}, {1, 0, "levels"}, {4, 0, "bits"},
    };
    static const swtel_bufspec row_specs[2] = {{4, 0, "vcols"}, {8, 1, "rows"}};
    PyObject *idx_obj, *delta_obj, *keys_obj, *accs, *o[5], *ro[2] = {Py_None, Py_None};
    Py_buffer b[5], rb[2] = {{0}};
    Py_ssize_t width = 0;
    unsigned long spill = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO!|OOnk", &idx_obj, &delta_obj, &o[0], &o[1], &o[2], &keys_obj, &o[3],
                          &o[4], &PyList_Type, &accs, &ro[0], &ro[1], &width, &spill))
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
    if (with_rows && swtel_get_buffers(ro, rb, row_specs, 2) < 0) {
        swtel_release_buffers(b, 5);
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
    if (with_rows && (rb[0].len / 4 < ncounters || rb[1].len / 8 / width < nslots)) {
        PyErr_SetString(PyExc_ValueError, "vcols must hold one item per counter of slot_of, rows width per slot");
        goto release;
    }
    const int32_t *vcols = with_rows ? rb[0].buf : NULL;
    int64_t *rows = with_rows ? rb[1].buf : NULL;
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
            if (v == NULL || PyDict_SetItem(acc, key, v) < 0) {
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
        PyObject *old = PyDict_GetItemWithError(acc, key), *sum;
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
        if (sum == NULL || PyDict_SetItem(acc, key, sum) < 0) {
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

/* ------------------------------------------------------------------ the Feed type */

/* What one source saw of one port since its previous sample (agent/insights/feeds.py): a type
 * of this module, so the loops below read and write its fields as a C struct; Python reads them
 * as attributes (the members below). Every field is an object, as the pure-Python twin's
 * (agent/_fallback/feeds.py Feed) are: a field deleted from Python reads as AttributeError. */
typedef struct {
    PyObject_HEAD
    PyObject *source, *port, *sems, *ts, *prev_ts, *acc, *discard, *pending, *interval, *owned, *dispatch, *lazy,
        *dead, *top, *changed, *kernels, *plain, *split_of, *lazy_bits, *lazy_of, *lazy_kernels, *row, *always,
        *gated, *lazy_plain_bits;
} feed_obj;

/* The fields in declaration order (members, traverse and clear walk them alike). */
#define FEED_FIELDS(X)                                                                                        \
    X(source) X(port) X(sems) X(ts) X(prev_ts) X(acc) X(discard) X(pending) X(interval) X(owned) X(dispatch)  \
    X(lazy) X(dead) X(top) X(changed) X(kernels) X(plain) X(split_of) X(lazy_bits) X(lazy_of) X(lazy_kernels) \
    X(row) X(always) X(gated) X(lazy_plain_bits)

#ifndef Py_T_OBJECT_EX /* (structmember.h's name before 3.12) */
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif

#define FEED_MEMBER(f) {#f, Py_T_OBJECT_EX, offsetof(feed_obj, f), 0, NULL},
static PyMemberDef feed_members[] = {FEED_FIELDS(FEED_MEMBER){NULL, 0, 0, 0, NULL}};

static PyTypeObject feed_type;

static int feed_traverse(PyObject *self, visitproc visit, void *arg)
{
    feed_obj *f = (feed_obj *)self;
#define FEED_VISIT(x) Py_VISIT(f->x);
    FEED_FIELDS(FEED_VISIT)
#undef FEED_VISIT
    return 0;
}

static int feed_clear(PyObject *self)
{
    feed_obj *f = (feed_obj *)self;
#define FEED_CLEAR(x) Py_CLEAR(f->x);
    FEED_FIELDS(FEED_CLEAR)
#undef FEED_CLEAR
    return 0;
}

static void feed_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    feed_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* Feed(source, port, sems): the fields as the twin's __init__ sets them. */
static PyObject *feed_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"source", "port", "sems", NULL};
    PyObject *source, *port, *sems;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:Feed", kwlist, &source, &port, &sems))
        return NULL;
    feed_obj *f = (feed_obj *)type->tp_alloc(type, 0);
    if (f == NULL)
        return NULL;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) {
        Py_DECREF(f);
        return NULL;
    }
    f->source = Py_NewRef(source);
    f->port = Py_NewRef(port);
    f->sems = Py_NewRef(sems);
    f->ts = Py_NewRef(zero);
    f->prev_ts = Py_NewRef(zero);
    f->acc = PyDict_New();
    f->discard = Py_NewRef(Py_False);
    f->pending = Py_NewRef(Py_False);
    f->interval = Py_NewRef(Py_None); /* EWMA of the sample interval, ns */
    f->owned = PyFrozenSet_New(NULL);
    f->dispatch = PyList_New(0);
    f->lazy = PyList_New(0);
    f->dead = Py_NewRef(Py_False);
    f->top = Py_NewRef(zero);
    f->changed = Py_NewRef(zero);
    f->kernels = PyTuple_New(0);
    f->plain = PyTuple_New(0);
    f->split_of = Py_NewRef(Py_None);
    f->lazy_bits = Py_NewRef(zero);
    f->lazy_of = Py_NewRef(Py_None);
    f->lazy_kernels = PyTuple_New(0);
    f->row = Py_NewRef(Py_None);
    f->always = Py_NewRef(Py_False);
    f->gated = PyTuple_New(0);
    f->lazy_plain_bits = zero; /* (the last reference: taken) */
    if (!f->acc || !f->owned || !f->dispatch || !f->lazy || !f->kernels || !f->plain || !f->lazy_kernels ||
        !f->gated) {
        Py_DECREF(f);
        return NULL;
    }
    return (PyObject *)f;
}

PyDoc_STRVAR(feed_type_doc,
"Feed(source, port, sems)\n\n"
"What one source saw of one port since its previous sample (agent/insights/feeds.py says what\n"
"each field holds; the pure-Python twin is agent/_fallback/feeds.py Feed).");

static PyTypeObject feed_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "agent._swtel.Feed",
    .tp_basicsize = sizeof(feed_obj),
    .tp_dealloc = feed_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = feed_type_doc,
    .tp_traverse = feed_traverse,
    .tp_clear = feed_clear,
    .tp_members = feed_members,
    .tp_new = feed_new,
};

int swtel_feeds_add_types(PyObject *m)
{
    if (PyType_Ready(&feed_type) < 0)
        return -1;
    Py_INCREF(&feed_type);
    if (PyModule_AddObject(m, "Feed", (PyObject *)&feed_type) < 0) {
        Py_DECREF(&feed_type);
        return -1;
    }
    return 0;
}

/* A feed's field (borrowed), or NULL with AttributeError when Python deleted it. */
#define FGET(f, x) ((f)->x != NULL ? (f)->x : feed_missing(#x))

static PyObject *feed_missing(const char *name)
{
    PyErr_Format(PyExc_AttributeError, "'Feed' object has no attribute '%s'", name);
    return NULL;
}

/* field = v (a new reference taken: steals v). */
#define FPUT(f, x, v) Py_XSETREF((f)->x, (v))

/* obj as a Feed of this module: the object, or NULL with TypeError. */
static feed_obj *as_feed(PyObject *obj, const char *who)
{
    if (!Py_IS_TYPE(obj, &feed_type)) {
        PyErr_Format(PyExc_TypeError, "%s: expected an agent._swtel.Feed, got %.100s", who, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return (feed_obj *)obj;
}

/* ------------------------------------------------------------------ the flush's first loop */

/* obj.name(arg) for a list's append, a set's add, a dict's clear: the exact types in C. */
static int call_append(PyObject *list, PyObject *item)
{
    if (PyList_CheckExact(list))
        return PyList_Append(list, item);
    PyObject *r = PyObject_CallMethod(list, "append", "O", item);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static int call_add(PyObject *set, PyObject *item)
{
    if (PySet_CheckExact(set))
        return PySet_Add(set, item);
    PyObject *r = PyObject_CallMethod(set, "add", "O", item);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static int call_clear(PyObject *acc)
{
    if (PyDict_CheckExact(acc)) {
        PyDict_Clear(acc);
        return 0;
    }
    PyObject *r = PyObject_CallMethod(acc, "clear", NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* det.batch.append(sample), noting det in kernels when its batch was empty: 0, or -1. */
static int to_batch(PyObject *det, PyObject *sample, PyObject *kernels, PyObject *batch_name)
{
    PyObject *entries = PyObject_GetAttr(det, batch_name);
    if (entries == NULL)
        return -1;
    int full = PyObject_IsTrue(entries);
    int r = full < 0 ? -1 : 0;
    if (r == 0 && !full)
        r = call_append(kernels, det);
    if (r == 0)
        r = call_append(entries, sample);
    Py_DECREF(entries);
    return r;
}

/* x & y true (Python's & of two ints, or whatever they are): 1, 0, or -1. */
static int and_true(PyObject *x, PyObject *y)
{
    if (PyLong_CheckExact(x) && PyLong_CheckExact(y)) { /* the common case: two masks within int64 */
        int ox = 0, oy = 0;
        long long a = PyLong_AsLongLongAndOverflow(x, &ox), b = PyLong_AsLongLongAndOverflow(y, &oy);
        if (!ox && !oy)
            return (a & b) != 0;
    }
    PyObject *both = PyNumber_And(x, y);
    if (both == NULL)
        return -1;
    int r = PyObject_IsTrue(both);
    Py_DECREF(both);
    return r;
}

PyDoc_STRVAR(flush_first_doc,
"flush_first(dirty, live, kernels, visit, called, elect, split, shared) -> None\n\n"
"The insights flush's first loop (agent/insights/feeds.py FeedBook.flush): each feed of\n"
"dirty (Feed objects of this module, whose fields are read and written) ends its pass. A live one is\n"
"appended to live as (feed, dt, top, changed) and its sample, (port, ts, dt, acc, owned,\n"
"changed, place, row), to the batch of each of its kernel detectors (each detector whose\n"
"batch was empty appended to kernels); visit gets the places with a Python detector to call,\n"
"called the ports visited for a gated detector, elect the ports of feeds with their first\n"
"interval; split(feed, shared) redoes a feed's detector lists when an election changed them.\n"
"The same steps, in the same order, as the twin's Python loop.");

static PyObject *flush_first(PyObject *self, PyObject *args)
{
    static PyObject *s_batch, *s_sem_bits, *s_level_gate, *s_ports, *zero, *fifth;
    PyObject *dirty, *live, *kernels, *visit, *called, *elect, *split, *shared;
    if (!PyArg_ParseTuple(args, "O!OOOOOOO", &PyList_Type, &dirty, &live, &kernels, &visit, &called, &elect, &split,
                          &shared))
        return NULL;
    if (s_batch == NULL) {
        s_batch = PyUnicode_InternFromString("batch");
        s_sem_bits = PyUnicode_InternFromString("sem_bits");
        s_level_gate = PyUnicode_InternFromString("level_gate");
        s_ports = PyUnicode_InternFromString("ports");
        zero = PyLong_FromLong(0);
        fifth = PyFloat_FromDouble(0.2);
        if (!s_batch || !s_sem_bits || !s_level_gate || !s_ports || !zero || !fifth)
            return NULL;
    }
    Py_ssize_t nlive = PyObject_Length(live);
    if (nlive < 0)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(dirty); k++) {
        PyObject *feed = PyList_GET_ITEM(dirty, k);
        feed_obj *f = as_feed(feed, "flush_first");
        if (f == NULL)
            return NULL;
        Py_INCREF(feed); /* (held while its fields change under it) */
        PyObject *top = NULL, *changed = NULL, *ts = NULL, *dt = NULL, *sample = NULL, *place = NULL;
        FPUT(f, pending, Py_NewRef(Py_False));
        PyObject *t0 = FGET(f, top), *c0 = t0 ? FGET(f, changed) : NULL;
        PyObject *s0 = c0 ? FGET(f, ts) : NULL, *prev = s0 ? FGET(f, prev_ts) : NULL;
        if (prev == NULL)
            goto next;
        top = Py_NewRef(t0);
        changed = Py_NewRef(c0);
        ts = Py_NewRef(s0);
        Py_INCREF(prev);
        FPUT(f, top, Py_NewRef(zero));
        FPUT(f, changed, Py_NewRef(zero));
        FPUT(f, prev_ts, Py_NewRef(ts));
        PyObject *dead = FGET(f, dead);
        int gone = dead == NULL ? -1 : PyObject_IsTrue(dead);
        if (gone == 0) {
            int had = PyObject_IsTrue(prev);
            gone = had < 0 ? -1 : !had;
        }
        if (gone == 0) {
            PyObject *discard = FGET(f, discard);
            gone = discard == NULL ? -1 : PyObject_IsTrue(discard);
        }
        if (gone != 0) {
            if (gone > 0) {
                FPUT(f, discard, Py_NewRef(Py_False));
                PyObject *acc = FGET(f, acc);
                if (acc != NULL)
                    call_clear(acc); /* (an error stays set: seen below) */
            }
            Py_DECREF(prev);
            goto next;
        }
        dt = PyNumber_Subtract(ts, prev);
        Py_DECREF(prev);
        if (dt == NULL)
            goto next;
        int ahead = PyObject_RichCompareBool(dt, zero, Py_GT);
        if (ahead <= 0) {
            if (ahead == 0) {
                PyObject *acc = FGET(f, acc);
                if (acc != NULL)
                    call_clear(acc);
            }
            goto next;
        }
        PyObject *interval = FGET(f, interval);
        if (interval == NULL)
            goto next;
        if (interval == Py_None) {
            PyObject *first = PyNumber_Float(dt), *port = FGET(f, port);
            if (first == NULL)
                goto next;
            FPUT(f, interval, first);
            if (port == NULL || call_add(elect, port) < 0)
                goto next;
        } else if (PyFloat_CheckExact(interval) && PyLong_CheckExact(dt)) {
            /* interval + 0.2 * (dt - interval): the same three float operations as Python's */
            double d = PyLong_AsDouble(dt), iv = PyFloat_AS_DOUBLE(interval);
            if (d == -1.0 && PyErr_Occurred())
                goto next;
            PyObject *moved = PyFloat_FromDouble(iv + 0.2 * (d - iv));
            if (moved == NULL)
                goto next;
            FPUT(f, interval, moved);
        } else {
            PyObject *diff = PyNumber_Subtract(dt, interval), *step = NULL, *moved = NULL;
            if (diff != NULL)
                step = PyNumber_Multiply(fifth, diff);
            if (step != NULL)
                moved = PyNumber_InPlaceAdd(interval, step);
            Py_XDECREF(diff);
            Py_XDECREF(step);
            if (moved == NULL)
                goto next;
            FPUT(f, interval, moved);
        }
        PyObject *entry = PyTuple_Pack(4, feed, dt, top, changed);
        if (entry == NULL || call_append(live, entry) < 0) {
            Py_XDECREF(entry);
            goto next;
        }
        Py_DECREF(entry);
        place = PyLong_FromSsize_t(nlive++);
        if (place == NULL)
            goto next;
        PyObject *split_of = FGET(f, split_of), *dispatch = FGET(f, dispatch);
        PyObject *lazy_of = FGET(f, lazy_of), *lazy = FGET(f, lazy);
        if (split_of == NULL || dispatch == NULL || lazy_of == NULL || lazy == NULL)
            goto next;
        if (split_of != dispatch || lazy_of != lazy) {
            PyObject *r = PyObject_CallFunctionObjArgs(split, feed, shared, NULL);
            if (r == NULL)
                goto next;
            Py_DECREF(r);
        }
        PyObject *kern = FGET(f, kernels), *lazy_kern = FGET(f, lazy_kernels);
        if (kern == NULL || lazy_kern == NULL)
            goto next;
        Py_INCREF(kern);
        Py_INCREF(lazy_kern);
        int any = PyObject_IsTrue(kern);
        if (any == 0)
            any = PyObject_IsTrue(lazy_kern);
        int bad = any < 0;
        if (any > 0) {
            PyObject *port = FGET(f, port), *acc = FGET(f, acc);
            PyObject *owned = FGET(f, owned), *row = FGET(f, row);
            sample = port && acc && owned && row ? PyTuple_Pack(8, port, ts, dt, acc, owned, changed, place, row)
                                                 : NULL;
            PyObject *dets = sample == NULL ? NULL : PySequence_Fast(kern, "kernels must be a sequence");
            bad = dets == NULL;
            for (Py_ssize_t j = 0; !bad && j < PySequence_Fast_GET_SIZE(dets); j++)
                bad = to_batch(PySequence_Fast_ITEMS(dets)[j], sample, kernels, s_batch) < 0;
            Py_XDECREF(dets);
            dets = bad ? NULL : PySequence_Fast(lazy_kern, "lazy_kernels must be a sequence");
            bad = bad || dets == NULL;
            for (Py_ssize_t j = 0; !bad && j < PySequence_Fast_GET_SIZE(dets); j++) {
                PyObject *det = PySequence_Fast_ITEMS(dets)[j], *bits = PyObject_GetAttr(det, s_sem_bits);
                int hit = bits == NULL ? -1 : and_true(bits, changed);
                Py_XDECREF(bits);
                bad = hit < 0 || (hit > 0 && to_batch(det, sample, kernels, s_batch) < 0);
            }
            Py_XDECREF(dets);
        }
        Py_DECREF(kern);
        Py_DECREF(lazy_kern);
        if (bad)
            goto next;
        /* the places visited after the kernels: as the twin's loop says why */
        PyObject *always = FGET(f, always), *lazy_plain = FGET(f, lazy_plain_bits);
        PyObject *gated = FGET(f, gated), *port = FGET(f, port);
        if (always == NULL || lazy_plain == NULL || gated == NULL || port == NULL)
            goto next;
        int every = PyObject_IsTrue(always);
        if (every == 0)
            every = and_true(changed, lazy_plain);
        if (every < 0)
            goto next;
        if (every) {
            if (call_append(visit, place) < 0)
                goto next;
            int has = PyObject_IsTrue(gated);
            if (has < 0 || (has && call_add(called, port) < 0))
                goto next;
            goto next;
        }
        Py_INCREF(gated);
        Py_INCREF(port);
        PyObject *dets = PySequence_Fast(gated, "gated must be a sequence");
        bad = dets == NULL;
        for (Py_ssize_t j = 0; !bad && j < PySequence_Fast_GET_SIZE(dets); j++) {
            PyObject *det = PySequence_Fast_ITEMS(dets)[j];
            PyObject *gate = PyObject_GetAttr(det, s_level_gate);
            int pass = gate == NULL ? -1 : PyObject_RichCompareBool(top, gate, Py_GE);
            Py_XDECREF(gate);
            if (pass == 0) {
                PyObject *ports = PyObject_GetAttr(det, s_ports);
                pass = ports == NULL ? -1 : PySequence_Contains(ports, port);
                Py_XDECREF(ports);
            }
            if (pass == 0)
                pass = PySequence_Contains(called, port);
            if (pass < 0)
                bad = 1;
            else if (pass) {
                bad = call_append(visit, place) < 0 || call_add(called, port) < 0;
                break;
            }
        }
        Py_XDECREF(dets);
        Py_DECREF(gated);
        Py_DECREF(port);
    next:
        Py_XDECREF(top);
        Py_XDECREF(changed);
        Py_XDECREF(ts);
        Py_XDECREF(dt);
        Py_XDECREF(sample);
        Py_XDECREF(place);
        Py_DECREF(feed);
        if (PyErr_Occurred()) /* every failure above leaves its exception set */
            return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(feed_mark_doc,
"feed_mark(feeds, touched, tops, masks, discarded, ts, dirty) -> None\n\n"
"What feed_add found, onto the feeds (agent/insights/feeds.py FeedBook.add): for each slot\n"
"touched, its feed (feeds[slot], a Feed) takes the higher of its top and tops[k], ORs\n"
"masks[k] into its changed, and becomes pending at ts (appended to dirty) unless it already\n"
"is (then its ts moves on to ts if later); each slot of discarded has its feed's discard set.\n"
"The same steps as the twin's Python loop.");

static PyObject *feed_mark(PyObject *self, PyObject *args)
{
    PyObject *feeds, *touched, *tops, *masks, *discarded, *ts, *dirty;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!OO!", &PyList_Type, &feeds, &PyList_Type, &touched, &PyList_Type, &tops,
                          &PyList_Type, &masks, &PyList_Type, &discarded, &ts, &PyList_Type, &dirty))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(touched);
    if (PyList_GET_SIZE(tops) != n || PyList_GET_SIZE(masks) != n) {
        PyErr_SetString(PyExc_ValueError, "touched, tops and masks must be as long");
        return NULL;
    }
    for (int pass = 0; pass < 2; pass++) {
        PyObject *slots = pass == 0 ? touched : discarded;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(slots); k++) {
            Py_ssize_t slot = PyLong_AsSsize_t(PyList_GET_ITEM(slots, k));
            if (slot == -1 && PyErr_Occurred())
                return NULL;
            if (slot < 0 || slot >= PyList_GET_SIZE(feeds)) {
                PyErr_Format(PyExc_IndexError, "slot %zd out of feeds", slot);
                return NULL;
            }
            PyObject *feed = PyList_GET_ITEM(feeds, slot);
            feed_obj *f = as_feed(feed, "feed_mark");
            if (f == NULL)
                return NULL;
            if (pass == 1) {
                FPUT(f, discard, Py_NewRef(Py_True));
                continue;
            }
            PyObject *top = PyList_GET_ITEM(tops, k), *was = FGET(f, top);
            int higher = was == NULL ? -1 : PyObject_RichCompareBool(top, was, Py_GT);
            if (higher < 0)
                return NULL;
            if (higher)
                FPUT(f, top, Py_NewRef(top));
            PyObject *changed = FGET(f, changed);
            PyObject *both = changed == NULL ? NULL : PyNumber_Or(changed, PyList_GET_ITEM(masks, k));
            if (both == NULL)
                return NULL;
            FPUT(f, changed, both);
            PyObject *pending = FGET(f, pending);
            int is = pending == NULL ? -1 : PyObject_IsTrue(pending);
            if (is < 0)
                return NULL;
            if (!is) {
                FPUT(f, pending, Py_NewRef(Py_True));
                FPUT(f, ts, Py_NewRef(ts));
                if (PyList_Append(dirty, feed) < 0)
                    return NULL;
                continue;
            }
            PyObject *at = FGET(f, ts);
            int later = at == NULL ? -1 : PyObject_RichCompareBool(ts, at, Py_GT);
            if (later < 0)
                return NULL;
            if (later) /* two reads before a pass: one sample covering both */
                FPUT(f, ts, Py_NewRef(ts));
        }
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(flush_clear_doc,
"flush_clear(live) -> None\n\n"
"The end of the flush: the accumulation of each live feed (live: flush_first's (feed, dt, top,\n"
"changed) entries) emptied, every sample of the pass having been read.");

static PyObject *flush_clear(PyObject *self, PyObject *args)
{
    PyObject *live;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &live))
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(live); k++) {
        PyObject *entry = PyList_GET_ITEM(live, k);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 1) {
            PyErr_Format(PyExc_TypeError, "live[%zd] must be a (feed, ...) tuple", k);
            return NULL;
        }
        feed_obj *f = as_feed(PyTuple_GET_ITEM(entry, 0), "flush_clear");
        if (f == NULL)
            return NULL;
        PyObject *acc = FGET(f, acc);
        if (acc == NULL || call_clear(acc) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef swtel_feeds_methods[] = {
    {"feed_add", feed_add, METH_VARARGS, feed_add_doc},
    {"flush_first", flush_first, METH_VARARGS, flush_first_doc},
    {"feed_mark", feed_mark, METH_VARARGS, feed_mark_doc},
    {"flush_clear", flush_clear, METH_VARARGS, flush_clear_doc},
    {NULL, NULL, 0, NULL},
};
