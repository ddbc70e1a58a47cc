/* Per-port detector state held in flat arrays and updated here, once per engine pass, for
 * every port sampled (agent/insights/throughput_dip.py): Python runs only for the ports
 * whose state crossed an edge (a dip to report). The arithmetic is the Python rule's,
 * operation for operation, on the same doubles, so that both give the same bits: where
 * Python divides two ints (a correctly rounded true division of possibly 128-bit
 * products) the division is done by Python's own int objects, once per (speed, dt) pair,
 * and cached. agent/_fallback/detect.py is the twin. */
#include "swtel.h"

#include <math.h>
#include <string.h>

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

/* ------------------------------------------------------------------ link_degrading */

#define FEC_BINS 16   /* RS(544,514): bins 0..15 */
#define FEC_MAX_UNITS 64 /* lanes a port (a port with more is Python's) */

PyDoc_STRVAR(fec_run_doc,
"fec_run(entries, fast, bucket, fec_sem, unc_sem, unc_keys, unc_bit, max_bin) -> deferred\n\n"
"One engine pass of link_degrading's per-sample accumulation (agent/insights/link_degrading.py):\n"
"per sample (port, ts, dt, acc, owned, changed) of a port that owns fec_sem, the common case\n"
"(the port in fast as (idx, phase, cur, keys, hashes), the sample in bucket idx =\n"
"(ts - 1 + phase) // bucket, no uncorrectable codeword, no bin at max_bin or above in acc,\n"
"every count an int whose sum stays in int64) adds acc's bins (keys[j], hashes[j]: its hash,\n"
"0: none) into cur (i64). Every other sample of such a port, and any later one of a port\n"
"deferred in the pass, is left untouched and listed: Python runs it in its turn.\n"
"Returns the indexes of the deferred entries, ascending.");

/* floor(a / b) for b > 0, as Python's //. */
static long long floor_div(long long a, long long b)
{
    long long q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* 1 when v (absent: NULL) is an int equal to 0 (the common uncorrectable count). */
static int is_zero(PyObject *v)
{
    if (v == NULL)
        return 1;
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return !overflow && x == 0;
}

/* The common case of one sample: 1 done (cur updated), 0 deferred, -1 error. */
static int fec_add_one(PyObject *e, PyObject *state, long long bucket, PyObject *unc_sem, PyObject *unc_keys,
                       long long unc_bit, int max_bin)
{
    static const swtel_bufspec specs[2] = {{8, 1, "cur"}, {8, 0, "hashes"}};
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 5)
        return 0;
    PyObject *acc = PyTuple_GET_ITEM(e, 3), *owned = PyTuple_GET_ITEM(e, 4), *keys = PyTuple_GET_ITEM(state, 3);
    if (!PyTuple_Check(keys))
        return 0;
    int overflow = 0;
    long long changed = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(e, 5), &overflow);
    if (changed == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        return 0;
    if (changed & unc_bit) { /* Python: unc read only then; any but 0 is Python's */
        int has = PySequence_Contains(owned, unc_sem);
        if (has < 0)
            return -1;
        for (Py_ssize_t i = 0; has && i < PyTuple_GET_SIZE(unc_keys); i++) {
            PyObject *v = PyDict_GetItemWithError(acc, PyTuple_GET_ITEM(unc_keys, i));
            if (v == NULL && PyErr_Occurred())
                return -1;
            if (!is_zero(v))
                return 0;
        }
    }
    long long ts, phase, idx, a;
    ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(e, 1), &overflow);
    if (overflow || (ts == -1 && PyErr_Occurred()))
        return ts == -1 && PyErr_Occurred() ? -1 : 0;
    phase = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(state, 1), &overflow);
    if (overflow || (phase == -1 && PyErr_Occurred()))
        return phase == -1 && PyErr_Occurred() ? -1 : 0;
    idx = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(state, 0), &overflow);
    if (overflow || (idx == -1 && PyErr_Occurred()))
        return idx == -1 && PyErr_Occurred() ? -1 : 0;
    if (__builtin_add_overflow(ts, phase, &a) || __builtin_sub_overflow(a, 1, &a))
        return 0;
    if (floor_div(a, bucket) != idx) /* a bucket closes: Python's */
        return 0;
    PyObject *o[2] = {PyTuple_GET_ITEM(state, 2), PyTuple_GET_ITEM(state, 4)};
    Py_buffer b[2];
    if (swtel_get_buffers(o, b, specs, 2) < 0)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(keys), ret = 0;
    if (b[0].len / 8 != n || b[1].len / 8 != n || n % FEC_BINS || n > FEC_MAX_UNITS * FEC_BINS) {
        swtel_release_buffers(b, 2);
        return 0;
    }
    int64_t *cur = b[0].buf, sums[FEC_MAX_UNITS * FEC_BINS];
    const int64_t *hashes = b[1].buf;
    /* first every lookup, then the adds: a deferred sample leaves cur as it was */
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *key = PyTuple_GET_ITEM(keys, j);
        Py_hash_t h = (Py_hash_t)hashes[j];
        PyObject *v = h ? _PyDict_GetItem_KnownHash(acc, key, h) : PyDict_GetItemWithError(acc, key);
        if (v == NULL) {
            if (PyErr_Occurred()) {
                ret = -1;
                goto done;
            }
            sums[j] = cur[j];
            continue;
        }
        if (j % FEC_BINS >= max_bin || !PyLong_CheckExact(v)) /* a tail moved, or not an int */
            goto done;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || __builtin_add_overflow(cur[j], (int64_t)x, &sums[j]))
            goto done;
    }
    memcpy(cur, sums, (size_t)n * 8);
    ret = 1;
done:
    swtel_release_buffers(b, 2);
    return (int)ret;
}

static PyObject *fec_run(PyObject *self, PyObject *args)
{
    PyObject *entries, *fast, *fec_sem, *unc_sem, *unc_keys;
    long long bucket, unc_bit;
    int max_bin;
    if (!PyArg_ParseTuple(args, "O!O!LOOO!Li", &PyList_Type, &entries, &PyDict_Type, &fast, &bucket, &fec_sem,
                          &unc_sem, &PyTuple_Type, &unc_keys, &unc_bit, &max_bin))
        return NULL;
    if (bucket <= 0) {
        PyErr_SetString(PyExc_ValueError, "bucket must be positive");
        return NULL;
    }
    PyObject *deferred = PyList_New(0), *held = PySet_New(NULL), *result = NULL;
    if (deferred == NULL || held == NULL)
        goto out;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *e = PyList_GET_ITEM(entries, k);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 6) {
            PyErr_Format(PyExc_TypeError, "entries[%zd] must be (port, ts, dt, acc, owned, changed)", k);
            goto out;
        }
        PyObject *port = PyTuple_GET_ITEM(e, 0);
        if (!PyDict_Check(PyTuple_GET_ITEM(e, 3))) {
            PyErr_Format(PyExc_TypeError, "entries[%zd]: acc must be a dict", k);
            goto out;
        }
        int has = PySequence_Contains(PyTuple_GET_ITEM(e, 4), fec_sem);
        if (has < 0)
            goto out;
        if (!has) /* Python: nothing to do */
            continue;
        int r = 0;
        int later = PySet_GET_SIZE(held) ? PySet_Contains(held, port) : 0; /* its turn after one of Python's */
        if (later < 0)
            goto out;
        if (!later) {
            PyObject *state = PyDict_GetItemWithError(fast, port);
            if (state == NULL && PyErr_Occurred())
                goto out;
            r = state == NULL ? 0 : fec_add_one(e, state, bucket, unc_sem, unc_keys, unc_bit, max_bin);
            if (r < 0)
                goto out;
        }
        if (!r) {
            PyObject *ko = PyLong_FromSsize_t(k);
            if (ko == NULL || PyList_Append(deferred, ko) < 0 || PySet_Add(held, port) < 0) {
                Py_XDECREF(ko);
                goto out;
            }
            Py_DECREF(ko);
        }
    }
    result = deferred;
    deferred = NULL;
out:
    Py_XDECREF(deferred);
    Py_XDECREF(held);
    return result;
}

PyDoc_STRVAR(fec_fits_doc,
"fec_fits(counts, units, lanes, codewords) -> per unit, or None\n\n"
"link_degrading's fit (agent/insights/link_degrading.py fit()) for each unit's 16 bins of\n"
"counts (a list of ints, unit u's at u * 16): None for a unit whose total (its bins' sum when\n"
"lanes, else codewords) is not positive, else (max_t, pred), max_t the highest bin with a\n"
"count (0: none), pred None with fewer than 3 of bins 1..15 holding any, else (predicted CER\n"
"capped at 1, R^2, slope, points). The same double operations in the same order as Python's,\n"
"with the same libm log10 and pow. Returns None (Python's to do) when a count or a total is\n"
"not an int within 2^53, where Python's int / int would round other than doubles do.");

/* Python's float ** float for a finite base and exponent 2.0 or a finite one (float_pow):
 * a negative base with an integral exponent goes through its absolute value. */
static double py_pow(double iv, double iw)
{
    if (iw == 0.0)
        return 1.0;
    if (iv == 0.0)
        return iw < 0.0 ? HUGE_VAL : 0.0; /* (Python raises on 0 ** negative: never asked here) */
    int negate = 0;
    if (iv < 0.0) { /* (an integral exponent here) */
        iv = -iv;
        negate = fmod(fabs(iw), 2.0) == 1.0;
    }
    if (iv == 1.0)
        return negate ? -1.0 : 1.0;
    double x = pow(iv, iw);
    return negate ? -x : x;
}

/* a - b * c with the product rounded on its own (no FMA contraction), as Python does */
static double sub_mul(double a, double b, double c)
{
    volatile double p = b * c;
    return a - p;
}

static double add_mul(double a, double b, double c)
{
    volatile double p = b * c;
    return a + p;
}

static PyObject *fec_fits(PyObject *self, PyObject *args)
{
    PyObject *counts, *codewords_obj;
    Py_ssize_t units;
    int lanes;
    if (!PyArg_ParseTuple(args, "O!npO", &PyList_Type, &counts, &units, &lanes, &codewords_obj))
        return NULL;
    if (units < 0 || PyList_GET_SIZE(counts) != units * FEC_BINS) {
        PyErr_SetString(PyExc_ValueError, "counts must hold 16 bins per unit");
        return NULL;
    }
    long long codewords;
    if (!small_int(codewords_obj, &codewords))
        Py_RETURN_NONE;
    Py_ssize_t n = units * FEC_BINS;
    for (Py_ssize_t j = 0; j < n; j++) { /* every count within doubles' exact ints, else Python's */
        long long x;
        if (!small_int(PyList_GET_ITEM(counts, j), &x))
            Py_RETURN_NONE;
    }
    PyObject *out = PyList_New(units);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t u = 0; u < units; u++) {
        long long d[FEC_BINS], total = 0;
        for (int i = 0; i < FEC_BINS; i++) {
            small_int(PyList_GET_ITEM(counts, u * FEC_BINS + i), &d[i]);
            total += d[i]; /* 16 counts of at most 2^53: no overflow */
        }
        if (!lanes)
            total = codewords;
        if (total > EXACT) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (total <= 0) {
            Py_INCREF(Py_None);
            PyList_SET_ITEM(out, u, Py_None);
            continue;
        }
        int max_t = 0;
        for (int i = 0; i < FEC_BINS; i++)
            if (d[i] > 0)
                max_t = i;
        /* fit(): the points (i, log10(d[i] / total)) for bins 1..15 holding any */
        double xs[FEC_BINS], ys[FEC_BINS];
        int pts = 0;
        long long sum_x = 0;
        for (int i = 1; i < FEC_BINS; i++)
            if (d[i] > 0) {
                xs[pts] = (double)i;
                ys[pts++] = log10((double)d[i] / (double)total);
                sum_x += i;
            }
        PyObject *pred;
        if (pts < 3) {
            pred = Py_None;
            Py_INCREF(pred);
        } else {
            double mx = (double)sum_x / (double)pts, sy = 0.0, sxx = 0.0, sxy = 0.0, ss_tot = 0.0, ss_res = 0.0;
            for (int p = 0; p < pts; p++)
                sy += ys[p];
            double my = sy / (double)pts;
            for (int p = 0; p < pts; p++)
                sxx += py_pow(xs[p] - mx, 2.0);
            for (int p = 0; p < pts; p++) {
                volatile double t = (xs[p] - mx) * (ys[p] - my);
                sxy += t;
            }
            double slope = sxy / sxx;
            double icpt = sub_mul(my, slope, mx);
            for (int p = 0; p < pts; p++)
                ss_tot += py_pow(ys[p] - my, 2.0);
            for (int p = 0; p < pts; p++)
                ss_res += py_pow(sub_mul(ys[p] - icpt, slope, xs[p]), 2.0);
            double r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 0.0;
            double cer = 0.0;
            for (int i = 16; i <= 20; i++) {
                double e = add_mul(icpt, slope, (double)i);
                cer += py_pow(10.0, e < 0.0 ? e : 0.0); /* Python: min(0.0, e) */
            }
            pred = Py_BuildValue("(dddi)", 1.0 < cer ? 1.0 : cer, r2, slope, pts); /* min(cer, 1.0) */
            if (pred == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        }
        PyObject *unit = Py_BuildValue("(iN)", max_t, pred);
        if (unit == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, u, unit);
    }
    return out;
}

PyDoc_STRVAR(fec_changes_doc,
"fec_changes(sents, values, leaves) -> changed, or None\n\n"
"link_degrading's gauges of a port's units (agent/insights/link_degrading.py _publish): for\n"
"each unit i, each of values[i] (a float rounded to 4 significant digits as\n"
"float(f\"{x:.3e}\") does, by the same CPython conversions; an int as it is) that differs\n"
"(Python's !=) from sents[i][leaf] (absent: differs) is written into sents[i] and listed as\n"
"(i, leaf, value), in order. None (Python's to do, nothing written) when a value is neither a\n"
"float nor an int.");

static PyObject *fec_changes(PyObject *self, PyObject *args)
{
    PyObject *sents, *values, *leaves;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &sents, &PyList_Type, &values, &PyTuple_Type, &leaves))
        return NULL;
    Py_ssize_t units = PyList_GET_SIZE(sents), n = PyTuple_GET_SIZE(leaves);
    if (PyList_GET_SIZE(values) != units) {
        PyErr_SetString(PyExc_ValueError, "sents and values must be as long");
        return NULL;
    }
    for (Py_ssize_t u = 0; u < units; u++) {
        PyObject *row = PyList_GET_ITEM(values, u);
        if (!PyDict_Check(PyList_GET_ITEM(sents, u)) || !PyTuple_Check(row) || PyTuple_GET_SIZE(row) != n) {
            PyErr_SetString(PyExc_ValueError, "sents must be dicts, values tuples as long as leaves");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyTuple_GET_ITEM(row, i);
            if (!PyFloat_CheckExact(v) && !PyLong_Check(v))
                Py_RETURN_NONE;
        }
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t u = 0; u < units; u++) {
        PyObject *sent = PyList_GET_ITEM(sents, u), *row = PyList_GET_ITEM(values, u);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyTuple_GET_ITEM(row, i), *leaf = PyTuple_GET_ITEM(leaves, i);
            if (PyFloat_CheckExact(v) && PyFloat_AS_DOUBLE(v) == 0.0) { /* "0.000e+00" (or "-0...") reads */
                Py_INCREF(v);                                             /* back as itself */
            } else if (PyFloat_CheckExact(v)) { /* float(f"{x:.3e}"): format's conversion, then float()'s */
                char *text = PyOS_double_to_string(PyFloat_AS_DOUBLE(v), 'e', 3, 0, NULL);
                if (text == NULL)
                    goto fail;
                double x = PyOS_string_to_double(text, NULL, NULL);
                PyMem_Free(text);
                if (x == -1.0 && PyErr_Occurred())
                    goto fail;
                v = PyFloat_FromDouble(x);
            } else {
                Py_INCREF(v);
            }
            if (v == NULL)
                goto fail;
            PyObject *was = PyDict_GetItemWithError(sent, leaf);
            int differs = 1;
            if (was == NULL) {
                differs = PyErr_Occurred() ? -1 : 1;
            } else { /* Python's != (not RichCompareBool: no shortcut for the same object) */
                PyObject *ne = PyObject_RichCompare(was, v, Py_NE);
                differs = ne == NULL ? -1 : PyObject_IsTrue(ne);
                Py_XDECREF(ne);
            }
            if (differs > 0) {
                PyObject *change = Py_BuildValue("(nOO)", u, leaf, v);
                if (change == NULL || PyDict_SetItem(sent, leaf, v) < 0 || PyList_Append(out, change) < 0)
                    differs = -1;
                Py_XDECREF(change);
            }
            Py_DECREF(v);
            if (differs < 0)
                goto fail;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(fec_lanes_doc,
"fec_lanes(acc, fec_sem) -> lanes, or None\n\n"
"The lanes whose bins acc carries (keys (fec_sem, 'LANE/BIN')), ascending and distinct, as\n"
"agent/insights/link_degrading.py lanes_in() gives them; None (Python's to do) when a lane is\n"
"not plain ASCII digits (int() reads more) or has more than 9 of them.");

static PyObject *fec_lanes(PyObject *self, PyObject *args)
{
    PyObject *acc, *fec_sem, *key, *value;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &acc, &fec_sem))
        return NULL;
    long lanes[64];
    int nl = 0;
    Py_ssize_t pos = 0;
    while (PyDict_Next(acc, &pos, &key, &value)) {
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2)
            Py_RETURN_NONE;
        PyObject *sem = PyTuple_GET_ITEM(key, 0), *sub = PyTuple_GET_ITEM(key, 1);
        if (sem != fec_sem) {
            int eq = PyObject_RichCompareBool(sem, fec_sem, Py_EQ);
            if (eq < 0)
                return NULL;
            if (!eq)
                continue;
        }
        if (!PyUnicode_CheckExact(sub) || !PyUnicode_IS_ASCII(sub))
            Py_RETURN_NONE;
        const char *t = (const char *)PyUnicode_DATA(sub);
        const char *slash = memchr(t, '/', (size_t)PyUnicode_GET_LENGTH(sub));
        if (slash == NULL) /* the port's own bin */
            continue;
        long lane = 0;
        if (slash == t || slash - t > 9)
            Py_RETURN_NONE;
        for (const char *c = t; c < slash; c++) {
            if (*c < '0' || *c > '9')
                Py_RETURN_NONE;
            lane = lane * 10 + (*c - '0');
        }
        int j = 0;
        while (j < nl && lanes[j] != lane)
            j++;
        if (j == nl) {
            if (nl == 64)
                Py_RETURN_NONE;
            lanes[nl++] = lane;
        }
    }
    for (int i = 1; i < nl; i++) /* a few lanes: insertion sort */
        for (int j = i; j > 0 && lanes[j - 1] > lanes[j]; j--) {
            long t = lanes[j];
            lanes[j] = lanes[j - 1];
            lanes[j - 1] = t;
        }
    PyObject *out = PyTuple_New(nl);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < nl; i++) {
        PyObject *x = PyLong_FromLong(lanes[i]);
        if (x == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, x);
    }
    return out;
}

PyMethodDef swtel_detect_methods[] = {
    {"dip_run", dip_run, METH_VARARGS, dip_run_doc},
    {"burst_run", burst_run, METH_VARARGS, burst_run_doc},
    {"fec_run", fec_run, METH_VARARGS, fec_run_doc},
    {"fec_fits", fec_fits, METH_VARARGS, fec_fits_doc},
    {"fec_changes", fec_changes, METH_VARARGS, fec_changes_doc},
    {"fec_lanes", fec_lanes, METH_VARARGS, fec_lanes_doc},
    {NULL, NULL, 0, NULL},
};
