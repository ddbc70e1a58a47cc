/* Per-port detector state held in flat arrays and updated here, once per engine pass, for
 * every port sampled (agent/insights/throughput_dip.py): Python runs only for the ports
 * whose state crossed an edge (a dip to report). The arithmetic is the Python rule's,
 * operation for operation, on the same doubles, so that both give the same bits: where
 * Python divides two ints (a correctly rounded true division of possibly 128-bit
 * products) the division is done by Python's own int objects, once per (speed, dt) pair,
 * and cached. agent/_fallback/detect.py is the twin. */
#include "swtel.h"

#include <math.h>

/* Per row (port), per direction (rx, tx): the reals and the ints of its state. */
#define DIP_REALS 3 /* level (-1: not known yet), ref (the level when the dip started), low */
#define DIP_INTS 4  /* seen (ns of samples), start (0: no dip), long (0/1), quiet_until */
#define DIP_SPEEDS 8 /* link speeds whose scale is kept for the pass's dt */

PyDoc_STRVAR(dip_run_doc,
"dip_run(entries, speeds, rows, reals, ints, tau, dip_ratio, min_utilization, max_ns,\n"
"        quiet_ns, warmup_ns, keys, sems) -> edges\n\n"
"One engine pass of the throughput-dip rule. entries is a list of samples\n"
"(port, ts, dt, acc, owned, changed) in the order the feeds hand them over; speeds maps a port to\n"
"its link speed (a port without a truthy one is skipped); rows maps a port to its row of\n"
"the state arrays (a port without one is given the next row, len(rows)); reals (f64,\n"
"6 a row) and ints (i64, 8 a row) are the rows' state, rx then tx: level, ref, low and\n"
"seen, start, long, quiet_until; the caller sizes them for len(rows) + len(entries) rows,\n"
"a new row holding level -1 and zeros. keys are the acc keys of rx and tx octets, sems\n"
"their semantics (a direction whose semantic is not in owned is left alone).\n"
"Returns the dips to report, as (entry index, direction, low, ref, took) in entry order.");

/* level + alpha * (x - level), as Python computes it: the product rounded on its own (a
 * compiler may otherwise fuse the multiply and the add where the CPU has FMA, arm64's
 * default, which rounds once and gives other bits). */
/* The port's row in the state arrays (``rows``: port -> row), a new port taking the next
 * one; -1 with an exception set when the arrays are full or the dict holds a bad row. */
static Py_ssize_t row_of(PyObject *rows, PyObject *port, Py_ssize_t cap)
{
    PyObject *row_obj = PyDict_GetItemWithError(rows, port);
    if (row_obj == NULL) {
        if (PyErr_Occurred())
            return -1;
        Py_ssize_t row = PyDict_GET_SIZE(rows);
        if (row >= cap) {
            PyErr_Format(PyExc_ValueError, "the state arrays hold %zd rows, row %zd is needed", cap, row);
            return -1;
        }
        PyObject *r = PyLong_FromSsize_t(row);
        if (r == NULL || PyDict_SetItem(rows, port, r) < 0) {
            Py_XDECREF(r);
            return -1;
        }
        Py_DECREF(r);
        return row;
    }
    Py_ssize_t row = PyLong_AsSsize_t(row_obj);
    if (row == -1 && PyErr_Occurred())
        return -1;
    if (row < 0 || row >= cap) {
        PyErr_Format(PyExc_IndexError, "row %zd out of the state arrays (%zd rows)", row, cap);
        return -1;
    }
    return row;
}

static double ewma(double level, double alpha, double x)
{
    volatile double step = alpha * (x - level);
    return level + step;
}

/* Python's 8 * NS / (speed * dt), by Python's own objects: an int true division is
 * correctly rounded whatever the size of its operands, which doubles alone are not. */
static int dip_scale(PyObject *eight_ns, PyObject *speed, PyObject *dt, double *out)
{
    PyObject *prod = PyNumber_Multiply(speed, dt);
    if (prod == NULL)
        return -1;
    PyObject *q = PyNumber_TrueDivide(eight_ns, prod);
    Py_DECREF(prod);
    if (q == NULL)
        return -1;
    *out = PyFloat_AsDouble(q);
    Py_DECREF(q);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *dip_run(PyObject *self, PyObject *args)
{
    static const swtel_bufspec specs[2] = {{8, 1, "reals"}, {8, 1, "ints"}};
    PyObject *entries, *speeds, *rows, *keys, *sems, *o[2];
    double tau, ratio, min_util;
    long long max_ns, quiet_ns, warmup_ns;
    Py_buffer b[2];
    if (!PyArg_ParseTuple(args, "O!O!O!OOdddLLLO!O!", &PyList_Type, &entries, &PyDict_Type, &speeds, &PyDict_Type,
                          &rows, &o[0], &o[1], &tau, &ratio, &min_util, &max_ns, &quiet_ns, &warmup_ns,
                          &PyTuple_Type, &keys, &PyTuple_Type, &sems))
        return NULL;
    if (PyTuple_GET_SIZE(keys) != 2 || PyTuple_GET_SIZE(sems) != 2) {
        PyErr_SetString(PyExc_ValueError, "keys and sems must hold rx's and tx's");
        return NULL;
    }
    if (swtel_get_buffers(o, b, specs, 2) < 0)
        return NULL;
    PyObject *edges = PyList_New(0), *eight_ns = PyLong_FromLongLong(8000000000LL), *result = NULL;
    if (edges == NULL || eight_ns == NULL)
        goto out;
    double *reals = b[0].buf;
    int64_t *ints = b[1].buf;
    Py_ssize_t cap = b[0].len / 8 / (2 * DIP_REALS);
    if (b[1].len / 8 / (2 * DIP_INTS) < cap)
        cap = b[1].len / 8 / (2 * DIP_INTS);
    /* polls are regular: one dt for most of a pass, and a few link speeds */
    long long cached_speed[DIP_SPEEDS], scale_dt = 0, alpha_dt = 0;
    double cached_scale[DIP_SPEEDS];
    int ncached = 0, alpha_known = 0;
    double scale = 0.0, alpha = 0.0;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *e = PyList_GET_ITEM(entries, k);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 5) {
            PyErr_Format(PyExc_TypeError, "entries[%zd] must be (port, ts, dt, acc, owned, ...)", k);
            goto out;
        }
        PyObject *port = PyTuple_GET_ITEM(e, 0), *dt_obj = PyTuple_GET_ITEM(e, 2), *acc = PyTuple_GET_ITEM(e, 3);
        PyObject *owned = PyTuple_GET_ITEM(e, 4);
        if (!PyDict_Check(acc)) {
            PyErr_Format(PyExc_TypeError, "entries[%zd]: acc must be a dict", k);
            goto out;
        }
        PyObject *speed = PyDict_GetItemWithError(speeds, port);
        if (speed == NULL && PyErr_Occurred())
            goto out;
        int known = speed == NULL ? 0 : PyObject_IsTrue(speed);
        if (known < 0)
            goto out;
        if (!known)
            continue;
        long long ts = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1)), dt = PyLong_AsLongLong(dt_obj);
        if ((ts == -1 || dt == -1) && PyErr_Occurred())
            goto out;
        Py_ssize_t row = row_of(rows, port, cap);
        if (row < 0)
            goto out;
        if (!alpha_known || dt != alpha_dt) { /* Python: 1.0 - math.exp(-dt / tau) */
            alpha = 1.0 - exp(-(double)dt / tau);
            alpha_dt = dt;
            alpha_known = 1;
        }
        int overflow = 0;
        long long sp = PyLong_CheckExact(speed) ? PyLong_AsLongLongAndOverflow(speed, &overflow) : 0;
        if (sp == -1 && PyErr_Occurred())
            goto out;
        if (PyLong_CheckExact(speed) && !overflow) {
            if (dt != scale_dt)
                ncached = 0;
            scale_dt = dt;
            int j = 0;
            while (j < ncached && cached_speed[j] != sp)
                j++;
            if (j < ncached) {
                scale = cached_scale[j];
            } else {
                if (dip_scale(eight_ns, speed, dt_obj, &scale) < 0)
                    goto out;
                if (ncached < DIP_SPEEDS) {
                    cached_speed[ncached] = sp;
                    cached_scale[ncached++] = scale;
                }
            }
        } else { /* a speed of another type: Python's arithmetic each time, never cached */
            if (dip_scale(eight_ns, speed, dt_obj, &scale) < 0)
                goto out;
        }
        for (int dir = 0; dir < 2; dir++) {
            int has = PySequence_Contains(owned, PyTuple_GET_ITEM(sems, dir));
            if (has < 0)
                goto out;
            if (!has)
                continue;
            PyObject *v = PyDict_GetItemWithError(acc, PyTuple_GET_ITEM(keys, dir));
            if (v == NULL && PyErr_Occurred())
                goto out;
            double x = 0.0;
            if (v != NULL) {
                x = PyFloat_AsDouble(v); /* an int: correctly rounded, as Python's int * float */
                if (x == -1.0 && PyErr_Occurred())
                    goto out;
            }
            double util = x * scale;
            double *r = reals + row * 2 * DIP_REALS + dir * DIP_REALS;
            int64_t *s = ints + row * 2 * DIP_INTS + dir * DIP_INTS;
            double level = r[0];
            if (level < 0) {
                r[0] = util;
                continue;
            }
            if (util < ratio * level) {
                if (s[1]) {
                    if (util < r[2])
                        r[2] = util;
                    if (!s[2] && ts - s[1] > max_ns)
                        s[2] = 1;
                } else if (s[0] >= warmup_ns && level >= min_util && ts > s[3]) {
                    s[1] = ts - dt;
                    r[1] = level;
                    r[2] = util;
                    s[2] = 0;
                }
            } else if (s[1]) {
                long long took = ts - dt - s[1];
                if (!s[2] && took <= max_ns) {
                    PyObject *edge = Py_BuildValue("(niddL)", k, dir, r[2], r[1], took);
                    if (edge == NULL || PyList_Append(edges, edge) < 0) {
                        Py_XDECREF(edge);
                        goto out;
                    }
                    Py_DECREF(edge);
                } else if (s[2]) {
                    s[3] = ts + quiet_ns;
                }
                s[1] = 0;
            }
            r[0] = ewma(level, alpha, util);
            s[0] += dt;
        }
    }
    result = edges;
    edges = NULL;
out:
    swtel_release_buffers(b, 2);
    Py_XDECREF(edges);
    Py_XDECREF(eight_ns);
    return result;
}

/* ------------------------------------------------------------------ error_burst */

#define EXACT (1LL << 53) /* ints up to this are doubles exactly: Python's int / int is then theirs */

PyDoc_STRVAR(burst_run_doc,
"burst_run(entries, speeds, rows, reals, ints, span, warning, keys, sems, rare_bits, slow)\n"
"    -> found\n\n"
"One engine pass of the error-burst rule's steady part (agent/insights/link_errors.py): per\n"
"sample (port, ts, dt, acc, owned, changed) the bits received (acc's keys[0] where sems[0]\n"
"is owned, else link speed x dt) and corrected (keys[1] where sems[1] is owned) per ns,\n"
"averaged over about span ns into reals (f64, 2 a row: bitrate, corr_rate) and ints (i64,\n"
"1 a row: ns seen). rows maps a port to its row (a new port gets len(rows)); the caller\n"
"sizes the arrays for len(rows) + len(entries) rows. A sample whose numbers leave the range\n"
"where doubles are Python's ints exactly is handed to slow(k), the twin's arithmetic, in\n"
"its turn. Returns, in entry order, (k, hot, bitrate, corr_rate, seen) for the samples in\n"
"which a semantic of rare_bits moved (changed) or whose own corrected bits exceed warning x\n"
"its bits (hot), with the state after the sample.");

/* v as an int of at most 2^53 in magnitude (absent: 0); 0 if it is not one (the slow path). */
static int small_int(PyObject *v, long long *out)
{
    if (v == NULL) {
        *out = 0;
        return 1;
    }
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || x > EXACT || x < -EXACT)
        return 0;
    *out = x;
    return 1;
}

static PyObject *burst_run(PyObject *self, PyObject *args)
{
    static const swtel_bufspec specs[2] = {{8, 1, "reals"}, {8, 1, "ints"}};
    PyObject *entries, *speeds, *rows, *keys, *sems, *slow, *o[2];
    long long span, rare_bits;
    double warning;
    Py_buffer b[2];
    if (!PyArg_ParseTuple(args, "O!O!O!OOLdO!O!LO", &PyList_Type, &entries, &PyDict_Type, &speeds, &PyDict_Type,
                          &rows, &o[0], &o[1], &span, &warning, &PyTuple_Type, &keys, &PyTuple_Type, &sems,
                          &rare_bits, &slow))
        return NULL;
    if (PyTuple_GET_SIZE(keys) != 2 || PyTuple_GET_SIZE(sems) != 2) {
        PyErr_SetString(PyExc_ValueError, "keys and sems must hold the received bits' and the corrected bits'");
        return NULL;
    }
    if (span <= 0) {
        PyErr_SetString(PyExc_ValueError, "span must be positive");
        return NULL;
    }
    if (swtel_get_buffers(o, b, specs, 2) < 0)
        return NULL;
    PyObject *found = PyList_New(0), *ns = PyLong_FromLongLong(1000000000LL), *result = NULL;
    if (found == NULL || ns == NULL)
        goto out;
    double *reals = b[0].buf;
    int64_t *ints = b[1].buf;
    Py_ssize_t cap = b[0].len / 8 / 2;
    if (b[1].len / 8 < cap)
        cap = b[1].len / 8;
    long long cached_speed[DIP_SPEEDS], cached_dt = 0;
    double cached_bits[DIP_SPEEDS];
    int ncached = 0;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *e = PyList_GET_ITEM(entries, k);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 6) {
            PyErr_Format(PyExc_TypeError, "entries[%zd] must be (port, ts, dt, acc, owned, changed)", k);
            goto out;
        }
        PyObject *port = PyTuple_GET_ITEM(e, 0), *dt_obj = PyTuple_GET_ITEM(e, 2), *acc = PyTuple_GET_ITEM(e, 3);
        PyObject *owned = PyTuple_GET_ITEM(e, 4);
        if (!PyDict_Check(acc)) {
            PyErr_Format(PyExc_TypeError, "entries[%zd]: acc must be a dict", k);
            goto out;
        }
        long long changed = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 5));
        if (changed == -1 && PyErr_Occurred())
            goto out;
        /* what the sample's arithmetic needs, without touching any state yet */
        long long dt = 0, bits_i = 0, corr_i = 0;
        double bits_d = 0.0;
        int fast = span <= EXACT && small_int(dt_obj, &dt) && dt > 0, bits_none = 0, bits_int = 0;
        if (fast) {
            int has = PySequence_Contains(owned, PyTuple_GET_ITEM(sems, 0));
            if (has < 0)
                goto out;
            if (has) {
                PyObject *v = PyDict_GetItemWithError(acc, PyTuple_GET_ITEM(keys, 0));
                if (v == NULL && PyErr_Occurred())
                    goto out;
                fast = small_int(v, &bits_i);
                bits_int = 1;
            } else {
                PyObject *speed = PyDict_GetItemWithError(speeds, port);
                if (speed == NULL && PyErr_Occurred())
                    goto out;
                int known = speed == NULL ? 0 : PyObject_IsTrue(speed);
                if (known < 0)
                    goto out;
                int overflow = 0;
                long long sp = known && PyLong_CheckExact(speed) ? PyLong_AsLongLongAndOverflow(speed, &overflow) : 0;
                if (sp == -1 && PyErr_Occurred())
                    goto out;
                if (!known) {
                    bits_none = 1;
                } else if (!PyLong_CheckExact(speed) || overflow) {
                    fast = 0;
                } else { /* Python: speed * dt / NS, by Python's ints, once per speed and dt */
                    if (dt != cached_dt)
                        ncached = 0;
                    cached_dt = dt;
                    int j = 0;
                    while (j < ncached && cached_speed[j] != sp)
                        j++;
                    if (j < ncached) {
                        bits_d = cached_bits[j];
                    } else {
                        PyObject *prod = PyNumber_Multiply(speed, dt_obj);
                        PyObject *q = prod == NULL ? NULL : PyNumber_TrueDivide(prod, ns);
                        Py_XDECREF(prod);
                        if (q == NULL)
                            goto out;
                        bits_d = PyFloat_AsDouble(q);
                        Py_DECREF(q);
                        if (bits_d == -1.0 && PyErr_Occurred())
                            goto out;
                        if (ncached < DIP_SPEEDS) {
                            cached_speed[ncached] = sp;
                            cached_bits[ncached++] = bits_d;
                        }
                    }
                }
            }
        }
        if (fast) {
            int has = PySequence_Contains(owned, PyTuple_GET_ITEM(sems, 1));
            if (has < 0)
                goto out;
            if (has) {
                PyObject *v = PyDict_GetItemWithError(acc, PyTuple_GET_ITEM(keys, 1));
                if (v == NULL && PyErr_Occurred())
                    goto out;
                fast = small_int(v, &corr_i);
            }
        }
        if (!fast) { /* the twin's arithmetic (Python's), in this sample's turn */
            PyObject *r = PyObject_CallFunction(slow, "n", k);
            if (r == NULL)
                goto out;
            if (r != Py_None && PyList_Append(found, r) < 0) {
                Py_DECREF(r);
                goto out;
            }
            Py_DECREF(r);
            continue;
        }
        Py_ssize_t row = row_of(rows, port, cap);
        if (row < 0)
            goto out;
        double *rate = reals + 2 * row;
        int64_t *seen = ints + row;
        if (!bits_none) { /* Python: alpha = min(1.0, dt / span) if seen else 1.0 */
            double alpha = 1.0;
            if (*seen) {
                double x = (double)dt / (double)span;
                alpha = x < 1.0 ? x : 1.0;
            }
            rate[0] = ewma(rate[0], alpha, bits_int ? (double)bits_i / (double)dt : bits_d / (double)dt);
            rate[1] = ewma(rate[1], alpha, (double)corr_i / (double)dt);
            *seen += dt;
        }
        /* Python: bool(corr and bits and corr > bits * warning), every number exact here */
        int bits_true = bits_none ? 0 : bits_int ? bits_i != 0 : bits_d != 0.0;
        int hot = corr_i != 0 && bits_true && (double)corr_i > (bits_int ? (double)bits_i : bits_d) * warning;
        if (hot || (changed & rare_bits)) {
            PyObject *f = Py_BuildValue("(nNddL)", k, PyBool_FromLong(hot), rate[0], rate[1], (long long)*seen);
            if (f == NULL || PyList_Append(found, f) < 0) {
                Py_XDECREF(f);
                goto out;
            }
            Py_DECREF(f);
        }
    }
    result = found;
    found = NULL;
out:
    swtel_release_buffers(b, 2);
    Py_XDECREF(found);
    Py_XDECREF(ns);
    return result;
}

PyMethodDef swtel_detect_methods[] = {
    {"dip_run", dip_run, METH_VARARGS, dip_run_doc},
    {"burst_run", burst_run, METH_VARARGS, burst_run_doc},
    {NULL, NULL, 0, NULL},
};
