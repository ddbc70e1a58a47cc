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

#define FEC_BINS 16      /* RS(544,514): bins 0..15 */
#define FEC_MAX_UNITS 64 /* lanes a port (a port with more is Python's) */
#define FEC_RING 10      /* a window's buckets: the nine before the current one, and it */
#define FEC_GAUGES 4     /* predicted-flr, observed-cer, fit-r2, max-bin */
/* A port's words (i64; agent/insights/link_degrading.py _Port.w): */
#define FW_IDX 0     /* its current bucket */
#define FW_SLOT 1    /* the publishing slot its gauges were last published in (-1: none) */
#define FW_ALARM 2   /* 1: a unit's tail holds max_bin_count codewords or more */
#define FW_UNC_CUR 3 /* the port's uncorrectable codewords in the current bucket */
#define FW_UNC_TOT 4 /* ... in the ring's buckets still in the window */
#define FW_HEAD 5    /* then cur[n], totals[n], tail_done[units], tail_cur[units] and the ring: FEC_RING
                      * slots of (bucket, uncorrectable, bins[n]), bucket b in slot b mod FEC_RING (its
                      * bucket INT64_MIN: never filled) */

/* The words of a port with n bins in units units. */
static Py_ssize_t fec_words(Py_ssize_t n, Py_ssize_t units)
{
    return FW_HEAD + 2 * n + 2 * units + FEC_RING * (n + 2);
}

PyDoc_STRVAR(fec_run_doc,
"fec_run(entries, fast, conf, pending) -> todo\n\n"
"One engine pass of link_degrading (agent/insights/link_degrading.py) over entries, its samples\n"
"(port, ts, dt, acc, owned, changed[, place, row]) in feed order; conf is (bucket, fec_sem,\n"
"unc_sem, unc_keys, unc_bit, max_bin, max_bin_count, flr, min_r2, scale, per_slot, leaves,\n"
"update, source, spill). A sample's row, where given, is (rows, at, row_keys): its bins'\n"
"deltas are rows[at + column] (i64), not in acc, unless changed has the bit spill (Python's then).\n"
"A sample of a port in fast as (w, keys, hashes, units, sent, boxes, phase, row_keys, cols) (w:\n"
"its words, i64, laid out as _Port's; keys[j] the acc key of bin j, hashes[j] its hash, i64;\n"
"with a row, cols (i32) bin j's column, -1 none, then the columns of the row's lanes outside\n"
"units, and row_keys the very object of the rows it was mapped for, else Python's) is done here\n"
"in two cases. In the current bucket idx = (ts - 1 + phase) // bucket, with no uncorrectable\n"
"codeword and no bin at max_bin or above: its bins are added into cur. In a later bucket, with\n"
"no lane outside units: the current bucket goes into the ring, the buckets <= idx - 10 leave the\n"
"totals, the sample's bins open the new one, the tails and the alarm are recomputed, and the\n"
"window is judged as _judge does: the fits (fec_fits), the events, and the gauges (once per\n"
"publishing slot of per_slot buckets), each leaf that changed (rounded as fec_changes does)\n"
"written into sent[unit] (unit: the lane, None: the port) and made update(ts, boxes[unit],\n"
"leaf, value, source) (update called: a class, StateUpdate). Every other\n"
"sample of such a port (its alarm set, a count not an int, a sum leaving int64 or, where a fit\n"
"needs it, doubles' exact ints, an earlier bucket, a lane that came), and every later one of a\n"
"port left to Python in the pass, is left untouched.\n"
"The updates go to the end of pending while no sample of the pass has been left to Python,\n"
"then into todo. Returns todo: entry index -> None (Python's sample, in its turn) or (events,\n"
"updates), events as (unit, flr, pred, max_t, tail, unc, codewords) to raise in its turn (None:\n"
"none of either).");

/* floor(a / b) for b > 0, as Python's //. */
static long long floor_div(long long a, long long b)
{
    long long q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* v as an i64: 1 when v is an int (exactly) within int64, 0 when not, -1 on error. */
static int as_i64(PyObject *v, long long *out)
{
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    return !overflow;
}

/* The lanes whose bins acc carries (keys (fec_sem, 'LANE/BIN')), ascending and distinct, in
 * lanes (room for 64) and *nl: 1 done, 0 Python's (a lane not plain ASCII digits, or more than 9
 * of them, or more than 64 lanes), -1 error. */
static int fec_lanes_of(PyObject *acc, PyObject *fec_sem, long *lanes, int *nl)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    *nl = 0;
    while (PyDict_Next(acc, &pos, &key, &value)) {
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2)
            return 0;
        PyObject *sem = PyTuple_GET_ITEM(key, 0), *sub = PyTuple_GET_ITEM(key, 1);
        if (sem != fec_sem) {
            int eq = PyObject_RichCompareBool(sem, fec_sem, Py_EQ);
            if (eq < 0)
                return -1;
            if (!eq)
                continue;
        }
        if (!PyUnicode_CheckExact(sub) || !PyUnicode_IS_ASCII(sub))
            return 0;
        const char *t = (const char *)PyUnicode_DATA(sub);
        const char *slash = memchr(t, '/', (size_t)PyUnicode_GET_LENGTH(sub));
        if (slash == NULL) /* the port's own bin */
            continue;
        long lane = 0;
        if (slash == t || slash - t > 9)
            return 0;
        for (const char *c = t; c < slash; c++) {
            if (*c < '0' || *c > '9')
                return 0;
            lane = lane * 10 + (*c - '0');
        }
        int j = 0;
        while (j < *nl && lanes[j] != lane)
            j++;
        if (j == *nl) {
            if (*nl == 64)
                return 0;
            lanes[(*nl)++] = lane;
        }
    }
    for (int i = 1; i < *nl; i++) /* a few lanes: insertion sort */
        for (int j = i; j > 0 && lanes[j - 1] > lanes[j]; j--) {
            long t = lanes[j];
            lanes[j] = lanes[j - 1];
            lanes[j - 1] = t;
        }
    return 1;
}

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

/* fit() of one unit's bins d (each within 2^53) over total (0 < total <= 2^53): *max_t the
 * highest bin with a count (0: none); with 3 points or more, 1 and out = (predicted CER capped
 * at 1, R^2, slope), *pts the points; else 0. The same double operations in the same order as
 * Python's, with the same libm log10 and pow. */
static int fec_fit(const long long *d, long long total, int *max_t, int *pts, double *out)
{
    *max_t = 0;
    for (int i = 0; i < FEC_BINS; i++)
        if (d[i] > 0)
            *max_t = i;
    /* the points (i, log10(d[i] / total)) for bins 1..15 holding any */
    double xs[FEC_BINS], ys[FEC_BINS];
    int np = 0;
    long long sum_x = 0;
    for (int i = 1; i < FEC_BINS; i++)
        if (d[i] > 0) {
            xs[np] = (double)i;
            ys[np++] = log10((double)d[i] / (double)total);
            sum_x += i;
        }
    *pts = np;
    if (np < 3)
        return 0;
    double mx = (double)sum_x / (double)np, sy = 0.0, sxx = 0.0, sxy = 0.0, ss_tot = 0.0, ss_res = 0.0;
    for (int p = 0; p < np; p++)
        sy += ys[p];
    double my = sy / (double)np;
    for (int p = 0; p < np; p++)
        sxx += py_pow(xs[p] - mx, 2.0);
    for (int p = 0; p < np; p++) {
        volatile double t = (xs[p] - mx) * (ys[p] - my);
        sxy += t;
    }
    double slope = sxy / sxx;
    double icpt = sub_mul(my, slope, mx);
    for (int p = 0; p < np; p++)
        ss_tot += py_pow(ys[p] - my, 2.0);
    for (int p = 0; p < np; p++)
        ss_res += py_pow(sub_mul(ys[p] - icpt, slope, xs[p]), 2.0);
    double r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 0.0;
    double cer = 0.0;
    for (int i = 16; i <= 20; i++) {
        double e = add_mul(icpt, slope, (double)i);
        cer += py_pow(10.0, e < 0.0 ? e : 0.0); /* Python: min(0.0, e) */
    }
    out[0] = 1.0 < cer ? 1.0 : cer; /* min(cer, 1.0) */
    out[1] = r2;
    out[2] = slope;
    return 1;
}

/* A gauge's value as published: x rounded to 4 significant digits as float(f"{x:.3e}") does
 * (format's conversion, then float()'s); a new reference. */
static PyObject *fec_rounded(double x)
{
    static const double pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (x == 0.0) /* "0.000e+00" (or "-0...") reads back as itself */
        return PyFloat_FromDouble(x);
    double ax = fabs(x);
    if (ax >= 1e-19 && ax < 1e19) {
        /* The fast way, where it gives the same bits: the 4 digits d = round(ax / 10^k) of ax in
         * [1000, 10000) x 10^k (10^|k| exact: |k| <= 22), read off y = ax / 10^k rounded once
         * (within 1.2e-12 of the exact quotient), taken only when y is not within 1e-6 of a tie;
         * then d x 10^k, one correctly rounded operation on exact operands, is what strtod gives
         * for "d e k" (correctly rounded too). Else (a tie, a power of 10 misjudged, past
         * 10^+-19) the way Python goes. */
        int k = (int)floor(log10(ax)) - 3;
        double y = k >= 0 ? ax / pow10[k] : ax * pow10[-k];
        if (y >= 1000.0 && y < 10000.0) {
            double fl = floor(y), fr = y - fl;
            if (fabs(fr - 0.5) > 1e-6) {
                double d = fr > 0.5 ? fl + 1.0 : fl;
                double r = k >= 0 ? d * pow10[k] : d / pow10[-k];
                return PyFloat_FromDouble(x < 0.0 ? -r : r);
            }
        }
    }
    char *text = PyOS_double_to_string(x, 'e', 3, 0, NULL);
    if (text == NULL)
        return NULL;
    double y = PyOS_string_to_double(text, NULL, NULL);
    PyMem_Free(text);
    if (y == -1.0 && PyErr_Occurred())
        return NULL;
    return PyFloat_FromDouble(y);
}

/* The gauges' resolutions in their order (predicted-flr, observed-cer, fit-r2, max-bin), as
 * (relative, absolute): a gauge is published again only when it moved by more than this from
 * the value last published (docs/insights.md); the ratios' 1e-15 floor keeps a clean link's fit
 * (1e-19..1e-16, jittering by factors) from being news. Twin: agent/_fallback/detect.py. */
static const double FEC_RESOLUTION[FEC_GAUGES][2] = {{0.1, 1e-15}, {0.1, 1e-15}, {0.0, 0.01}, {0.0, 0.0}};

/* fec_moved's rule for two doubles of gauge i: equal is no news, NaN is news unless both are,
 * else a move larger than max(absolute, relative x the larger magnitude). */
static int fec_moved(double was, double v, int i)
{
    if (was == v)
        return 0;
    if (isnan(was) || isnan(v))
        return !(isnan(was) && isnan(v));
    double tol = FEC_RESOLUTION[i][0] * fmax(fabs(was), fabs(v));
    return fabs(v - was) > (tol < FEC_RESOLUTION[i][1] ? FEC_RESOLUTION[i][1] : tol);
}

/* Python's ``if fec_moved(sent.get(leaf), v, i): sent[leaf] = v``: two floats of gauge i (< the
 * gauges) by their resolution, anything else by != (not RichCompareBool: no shortcut for the
 * same object): 1 written, 0 not, -1 error. */
static int fec_change(PyObject *sent, PyObject *leaf, PyObject *v, Py_ssize_t i)
{
    PyObject *was = PyDict_GetItemWithError(sent, leaf);
    int differs;
    if (was == NULL) {
        if (PyErr_Occurred())
            return -1;
        differs = 1;
    } else if (PyFloat_CheckExact(was) && PyFloat_CheckExact(v) && i >= 0 && i < FEC_GAUGES) {
        differs = fec_moved(PyFloat_AS_DOUBLE(was), PyFloat_AS_DOUBLE(v), (int)i);
    } else {
        PyObject *ne = PyObject_RichCompare(was, v, Py_NE);
        differs = ne == NULL ? -1 : PyObject_IsTrue(ne);
        Py_XDECREF(ne);
    }
    if (differs > 0 && PyDict_SetItem(sent, leaf, v) < 0)
        return -1;
    return differs;
}

typedef struct {
    long long bucket, unc_bit, max_bin_count, per_slot;
    int max_bin;
    double flr, min_r2, scale;
    PyObject *fec_sem, *unc_sem, *unc_keys, *leaves, *update, *source;
    long long spill; /* a sample's bit: a bin's delta went to acc, not to its row */
} fec_conf;

/* update(ts, box, leaf, value, source), called as Python calls it: a new reference. */
static PyObject *fec_update(const fec_conf *cf, PyObject *const *args)
{
    return PyObject_Vectorcall(cf->update, args, 5, NULL);
}

/* A unit's gauges (unit None: the port's) as _publish publishes them: sent[unit] (made when
 * absent), each leaf that changed written there and appended to updates as
 * update(ts, box, leaf, value, source). 0 done, -1 error. */
static int fec_gauges(const fec_conf *cf, PyObject *sent, PyObject *unit, PyObject *box, PyObject *ts,
                      const double *vals, int max_t, PyObject *updates)
{
    PyObject *mine = PyDict_GetItemWithError(sent, unit);
    if (mine == NULL) {
        if (PyErr_Occurred())
            return -1;
        mine = PyDict_New();
        if (mine == NULL)
            return -1;
        int bad = PyDict_SetItem(sent, unit, mine);
        Py_DECREF(mine); /* (held by sent) */
        if (bad < 0)
            return -1;
    }
    if (!PyDict_Check(mine)) {
        PyErr_SetString(PyExc_TypeError, "sent must map a unit to a dict");
        return -1;
    }
    for (int i = 0; i < FEC_GAUGES; i++) {
        PyObject *leaf = PyTuple_GET_ITEM(cf->leaves, i);
        PyObject *v = i < 3 ? fec_rounded(vals[i]) : PyLong_FromLong(max_t);
        if (v == NULL)
            return -1;
        int r = fec_change(mine, leaf, v, i);
        if (r > 0) {
            PyObject *args[5] = {ts, box, leaf, v, cf->source};
            PyObject *up = fec_update(cf, args);
            r = up == NULL || PyList_Append(updates, up) < 0 ? -1 : 0;
            Py_XDECREF(up);
        }
        Py_DECREF(v);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* acc's values of the port's bins (keys[j], hashes[j] its hash) into row[0..n) (absent: 0),
 * *high set when one is at max_bin or above: 1 done, 0 Python's (a value not an int within
 * int64), -1 error. (Looking up every bin of the port in acc, which the feeds have just filled,
 * touches less memory than walking acc's keys.) */
static int fec_row(PyObject *acc, PyObject *keys, const int64_t *hashes, Py_ssize_t n, int max_bin, long long *row,
                   int *high)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *v = _PyDict_GetItem_KnownHash(acc, PyTuple_GET_ITEM(keys, j), (Py_hash_t)hashes[j]);
        row[j] = 0;
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        int r = as_i64(v, &row[j]);
        if (r <= 0)
            return r;
        if (j % FEC_BINS >= max_bin)
            *high = 1;
    }
    return 1;
}

/* The same from the feed's row (agent/insights/feeds.py: the FEC bins' deltas, i64, column
 * cols[j] for bin j, -1 none): always done. */
static void fec_row_of(const int64_t *vec, const int32_t *cols, Py_ssize_t n, int max_bin, long long *row, int *high)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        row[j] = cols[j] >= 0 ? vec[cols[j]] : 0;
        if (row[j] != 0 && j % FEC_BINS >= max_bin)
            *high = 1;
    }
}

/* The sample's row and the port's columns into rb (vec: the row's first word), when the port's
 * columns were mapped for that row's keys: 1 done, 0 Python's (nothing held), -1 error. */
static int fec_row_view(PyObject *vrow, PyObject *state, Py_ssize_t n, Py_buffer *rb, const int64_t **vec,
                        const int32_t **cols, Py_ssize_t *ncols)
{
    static const swtel_bufspec specs[2] = {{8, 0, "rows"}, {4, 0, "cols"}};
    if (!PyTuple_Check(vrow) || PyTuple_GET_SIZE(vrow) != 3 || PyTuple_GET_ITEM(vrow, 2) != PyTuple_GET_ITEM(state, 7))
        return 0;
    Py_ssize_t base = PyLong_AsSsize_t(PyTuple_GET_ITEM(vrow, 1));
    if (base == -1 && PyErr_Occurred())
        return -1;
    PyObject *o[2] = {PyTuple_GET_ITEM(vrow, 0), PyTuple_GET_ITEM(state, 8)};
    if (swtel_get_buffers(o, rb, specs, 2) < 0)
        return -1;
    Py_ssize_t words = rb[0].len / 8;
    *ncols = rb[1].len / 4;
    *cols = rb[1].buf;
    int ok = base >= 0 && base <= words && *ncols >= n;
    for (Py_ssize_t j = 0; ok && j < *ncols; j++)
        ok = (*cols)[j] < words - base;
    if (!ok) {
        swtel_release_buffers(rb, 2);
        return 0;
    }
    *vec = (const int64_t *)rb[0].buf + base;
    return 1;
}

/* One sample of a port in fast: 1 done (w updated; events: a new list of them, or NULL),
 * 0 Python's (nothing written), -1 error. */
static int fec_one(PyObject *e, PyObject *state, const fec_conf *cf, PyObject **events, PyObject *updates)
{
    static const swtel_bufspec specs[2] = {{8, 1, "w"}, {8, 0, "hashes"}};
    *events = NULL;
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 9)
        return 0;
    PyObject *vrow = PyTuple_GET_SIZE(e) > 7 ? PyTuple_GET_ITEM(e, 7) : Py_None; /* the feed's FEC row */
    PyObject *acc = PyTuple_GET_ITEM(e, 3), *owned = PyTuple_GET_ITEM(e, 4), *keys = PyTuple_GET_ITEM(state, 1);
    PyObject *units = PyTuple_GET_ITEM(state, 3), *sent = PyTuple_GET_ITEM(state, 4);
    PyObject *boxes = PyTuple_GET_ITEM(state, 5);
    if (!PyTuple_Check(keys) || !PyTuple_Check(units) || !PyDict_Check(sent) || !PyDict_Check(boxes))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(keys), nu = PyTuple_GET_SIZE(units);
    if (nu < 1 || nu > FEC_MAX_UNITS || n != nu * FEC_BINS)
        return 0;
    long long unit_of[FEC_MAX_UNITS], changed, ts, phase, a, unc = 0;
    int r, unc_zero = 1;
    if ((r = as_i64(PyTuple_GET_ITEM(e, 5), &changed)) <= 0)
        return r;
    if (vrow != Py_None && (changed & cf->spill)) /* a bin in acc too: Python's, which adds the two */
        return 0;
    if (changed & cf->unc_bit) { /* Python reads unc only then */
        int has = PySequence_Contains(owned, cf->unc_sem);
        if (has < 0)
            return -1;
        for (Py_ssize_t i = 0; has && i < PyTuple_GET_SIZE(cf->unc_keys); i++) {
            PyObject *v = PyDict_GetItemWithError(acc, PyTuple_GET_ITEM(cf->unc_keys, i));
            long long x;
            if (v == NULL) {
                if (PyErr_Occurred())
                    return -1;
                continue;
            }
            if ((r = as_i64(v, &x)) <= 0)
                return r;
            if (x != 0)
                unc_zero = 0;
            if (__builtin_add_overflow(unc, x, &unc))
                return 0;
        }
    }
    if ((r = as_i64(PyTuple_GET_ITEM(e, 1), &ts)) <= 0 || (r = as_i64(PyTuple_GET_ITEM(state, 6), &phase)) <= 0)
        return r;
    if (__builtin_add_overflow(ts, phase, &a) || __builtin_sub_overflow(a, 1, &a))
        return 0;
    long long i1 = floor_div(a, cf->bucket);
    PyObject *o[2] = {PyTuple_GET_ITEM(state, 0), PyTuple_GET_ITEM(state, 2)};
    Py_buffer b[2], rb[2];
    const int64_t *vec = NULL;
    const int32_t *cols = NULL;
    Py_ssize_t ncols = 0;
    if (vrow != Py_None && (r = fec_row_view(vrow, state, n, rb, &vec, &cols, &ncols)) <= 0)
        return r;
    if (swtel_get_buffers(o, b, specs, 2) < 0) {
        if (vec != NULL)
            swtel_release_buffers(rb, 2);
        return -1;
    }
    int ret = 0;
    if (b[0].len / 8 != fec_words(n, nu) || b[1].len / 8 != n)
        goto done;
    int64_t *w = b[0].buf, *cur = w + FW_HEAD, *totals = cur + n, *tail_done = totals + n;
    int64_t *tail_cur = tail_done + nu, *ring = tail_cur + nu;
    long long i0 = w[FW_IDX];
    if (w[FW_ALARM]) /* every sample of the port is judged: Python's */
        goto done;
    /* the sample's bins (absent: 0) */
    long long row[FEC_MAX_UNITS * FEC_BINS];
    int high = 0;
    if (vec != NULL)
        fec_row_of(vec, cols, n, cf->max_bin, row, &high);
    else if ((r = fec_row(acc, keys, b[1].buf, n, cf->max_bin, row, &high)) <= 0) {
        ret = r;
        goto done;
    }
    if (i1 == i0) { /* the common case: into the current bucket, unless a tail moved or unc came */
        long long sums[FEC_MAX_UNITS * FEC_BINS];
        if (high || !unc_zero)
            goto done;
        for (Py_ssize_t j = 0; j < n; j++)
            if (__builtin_add_overflow(cur[j], row[j], &sums[j]))
                goto done;
        memcpy(cur, sums, (size_t)n * 8);
        ret = 1;
        goto done;
    }
    if (i1 < i0 || i0 < INT64_MIN + 2 * FEC_RING || cf->max_bin < 0 || cf->max_bin > FEC_BINS)
        goto done;
    /* the bucket closes (a lane that came: Python's, the port starts afresh) */
    for (Py_ssize_t u = 0; u < nu; u++)
        if ((r = as_i64(PyTuple_GET_ITEM(units, u), &unit_of[u])) <= 0) {
            ret = r;
            goto done;
        }
    int lanes = !(nu == 1 && unit_of[0] == -1); /* PORT: the port's own histogram */
    long lane_list[64];
    int nl;
    if ((r = fec_lanes_of(acc, cf->fec_sem, lane_list, &nl)) <= 0) {
        ret = r;
        goto done;
    }
    for (int i = 0; i < nl; i++) {
        Py_ssize_t u = 0;
        while (u < nu && unit_of[u] != lane_list[i])
            u++;
        if (u == nu)
            goto done;
    }
    for (Py_ssize_t j = n; j < ncols; j++) /* the row's lanes not among units (cols past n) */
        if (cols[j] >= 0 && vec[cols[j]] != 0)
            goto done;
    PyObject *box_of[FEC_MAX_UNITS + 1]; /* the units' containers, then the port's (built by Python) */
    for (Py_ssize_t u = 0; u <= nu; u++) {
        PyObject *unit = u < nu ? PyTuple_GET_ITEM(units, u) : Py_None;
        box_of[u] = PyDict_GetItemWithError(boxes, unit);
        if (box_of[u] == NULL) {
            ret = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
    }
    /* the window after it, in temporaries: the current bucket joins the totals, buckets
     * <= i1 - 10 leave (in bucket order, as they joined; the current one last) */
    long long tot[FEC_MAX_UNITS * FEC_BINS], d[FEC_MAX_UNITS * FEC_BINS], utot, unc_all, codewords = 0;
    long long tails[FEC_MAX_UNITS], new_done[FEC_MAX_UNITS], new_cur[FEC_MAX_UNITS];
    for (Py_ssize_t j = 0; j < n; j++)
        if (__builtin_add_overflow(totals[j], cur[j], &tot[j]))
            goto done;
    if (__builtin_add_overflow(w[FW_UNC_TOT], w[FW_UNC_CUR], &utot))
        goto done;
    long long last = i1 - FEC_RING < i0 ? i1 - FEC_RING : i0;
    for (long long bk = i0 - (FEC_RING - 1); bk <= last; bk++) {
        const int64_t *bins = cur;
        long long bu = w[FW_UNC_CUR];
        if (bk != i0) {
            long long s = bk % FEC_RING;
            const int64_t *slot = ring + (s < 0 ? s + FEC_RING : s) * (n + 2);
            if (slot[0] != bk) /* no sample in that bucket */
                continue;
            bins = slot + 2;
            bu = slot[1];
        }
        for (Py_ssize_t j = 0; j < n; j++)
            if (__builtin_sub_overflow(tot[j], bins[j], &tot[j]))
                goto done;
        if (__builtin_sub_overflow(utot, bu, &utot))
            goto done;
    }
    int alarm = 0;
    for (Py_ssize_t u = 0; u < nu; u++) {
        long long s1 = 0, s2 = 0;
        for (int i = cf->max_bin; i < FEC_BINS; i++)
            if (__builtin_add_overflow(s1, tot[u * FEC_BINS + i], &s1) ||
                __builtin_add_overflow(s2, row[u * FEC_BINS + i], &s2))
                goto done;
        new_done[u] = s1;
        new_cur[u] = s2;
        if (__builtin_add_overflow(s1, s2, &tails[u]))
            goto done;
        if (tails[u] >= cf->max_bin_count)
            alarm = 1;
    }
    /* the judgement's figures: every one within what the fits take, else Python's */
    if (__builtin_add_overflow(utot, unc, &unc_all))
        goto done;
    for (Py_ssize_t j = 0; j < n; j++)
        if (__builtin_add_overflow(tot[j], row[j], &d[j]) || __builtin_add_overflow(codewords, d[j], &codewords))
            goto done;
    if (__builtin_add_overflow(codewords, unc_all, &codewords))
        goto done;
    int judge = codewords > 0, publish = floor_div(i1, cf->per_slot) != w[FW_SLOT];
    int has[FEC_MAX_UNITS], max_t[FEC_MAX_UNITS], pts[FEC_MAX_UNITS], pred[FEC_MAX_UNITS];
    double fit[FEC_MAX_UNITS][3];
    if (judge) {
        if (codewords > EXACT || unc_all > EXACT || unc_all < -EXACT)
            goto done;
        for (Py_ssize_t j = 0; j < n; j++)
            if (d[j] > EXACT || d[j] < -EXACT)
                goto done;
        for (Py_ssize_t u = 0; u < nu; u++) {
            long long total = 0;
            for (int i = 0; i < FEC_BINS; i++)
                total += d[u * FEC_BINS + i]; /* 16 counts within 2^53: no overflow */
            if (!lanes)
                total = codewords;
            if (total > EXACT)
                goto done;
            has[u] = total > 0;
            pred[u] = has[u] && fec_fit(d + u * FEC_BINS, total, &max_t[u], &pts[u], fit[u]);
        }
    }
    /* no way back: the state after the sample */
    long long s = i0 % FEC_RING;
    int64_t *slot = ring + (s < 0 ? s + FEC_RING : s) * (n + 2);
    slot[0] = i0;
    slot[1] = w[FW_UNC_CUR];
    memcpy(slot + 2, cur, (size_t)n * 8);
    memcpy(totals, tot, (size_t)n * 8);
    memcpy(cur, row, (size_t)n * 8);
    for (Py_ssize_t u = 0; u < nu; u++) {
        tail_done[u] = new_done[u];
        tail_cur[u] = new_cur[u];
    }
    w[FW_IDX] = i1;
    w[FW_UNC_TOT] = utot;
    w[FW_UNC_CUR] = unc;
    w[FW_ALARM] = alarm;
    ret = 1;
    if (!judge)
        goto done;
    double cer = (double)unc_all / (double)codewords, worst[3] = {0.0, 0.0, 0.0}; /* flr, r2, max_t */
    int have_worst = 0, worst_t = 0;
    PyObject *ts_obj = PyTuple_GET_ITEM(e, 1);
    for (Py_ssize_t u = 0; u < nu; u++) {
        if (!has[u]) /* no codewords */
            continue;
        double flr = pred[u] ? fit[u][0] * cf->scale : 0.0, r2 = pred[u] ? fit[u][1] : 0.0;
        if (publish) {
            double vals[3] = {flr, cer, r2};
            if (lanes && fec_gauges(cf, sent, PyTuple_GET_ITEM(units, u), box_of[u], ts_obj, vals, max_t[u],
                                    updates) < 0) {
                ret = -1;
                goto done;
            }
            /* Python: (flr, max_t) > (worst flr, worst max_t) */
            if (!have_worst || (flr != worst[0] ? flr > worst[0] : max_t[u] > worst_t)) {
                have_worst = 1;
                worst[0] = flr;
                worst[1] = r2;
                worst_t = max_t[u];
            }
        }
        int by_bin = tails[u] >= cf->max_bin_count;
        int by_flr = pred[u] && fit[u][1] >= cf->min_r2 && flr >= cf->flr;
        if (by_flr || by_bin) {
            PyObject *p = pred[u] ? Py_BuildValue("(dddi)", fit[u][0], fit[u][1], fit[u][2], pts[u])
                                  : (Py_INCREF(Py_None), Py_None);
            PyObject *ev = p == NULL ? NULL : Py_BuildValue("(OdNiLLL)", lanes ? PyTuple_GET_ITEM(units, u) : Py_None,
                                                            flr, p, max_t[u], tails[u], unc_all, codewords);
            if (ev != NULL && *events == NULL)
                *events = PyList_New(0);
            if (ev == NULL || *events == NULL || PyList_Append(*events, ev) < 0)
                ret = -1;
            Py_XDECREF(ev);
            if (ret < 0)
                goto done;
        }
    }
    if (publish && have_worst) {
        double vals[3] = {worst[0], cer, worst[1]};
        w[FW_SLOT] = floor_div(i1, cf->per_slot);
        if (fec_gauges(cf, sent, Py_None, box_of[nu], ts_obj, vals, worst_t, updates) < 0)
            ret = -1;
    }
done:
    swtel_release_buffers(b, 2);
    if (vec != NULL)
        swtel_release_buffers(rb, 2);
    if (ret < 0)
        Py_CLEAR(*events);
    return ret;
}

static PyObject *fec_run(PyObject *self, PyObject *args)
{
    PyObject *entries, *fast, *conf, *pending;
    fec_conf cf;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyList_Type, &entries, &PyDict_Type, &fast, &PyTuple_Type, &conf,
                          &PyList_Type, &pending))
        return NULL;
    if (!PyArg_ParseTuple(conf, "LOOO!LiLdddLO!OOL;conf must be (bucket, fec_sem, unc_sem, unc_keys, unc_bit, "
                          "max_bin, max_bin_count, flr, min_r2, scale, per_slot, leaves, update, source, spill)",
                          &cf.bucket, &cf.fec_sem, &cf.unc_sem, &PyTuple_Type, &cf.unc_keys, &cf.unc_bit,
                          &cf.max_bin, &cf.max_bin_count, &cf.flr, &cf.min_r2, &cf.scale, &cf.per_slot,
                          &PyTuple_Type, &cf.leaves, &cf.update, &cf.source, &cf.spill))
        return NULL;
    if (!PyCallable_Check(cf.update)) {
        PyErr_SetString(PyExc_TypeError, "update must be callable");
        return NULL;
    }
    if (cf.bucket <= 0 || cf.per_slot <= 0) {
        PyErr_SetString(PyExc_ValueError, "bucket and per_slot must be positive");
        return NULL;
    }
    if (PyTuple_GET_SIZE(cf.leaves) != FEC_GAUGES) {
        PyErr_SetString(PyExc_ValueError, "leaves must name the 4 gauges");
        return NULL;
    }
    PyObject *todo = PyDict_New(), *held = PySet_New(NULL), *result = NULL;
    int direct = 1; /* no sample left to Python yet: updates straight to pending */
    if (todo == NULL || held == NULL)
        goto out;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(entries); k++) {
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
        int has = PySequence_Contains(PyTuple_GET_ITEM(e, 4), cf.fec_sem);
        if (has < 0)
            goto out;
        if (!has) /* Python: nothing to do */
            continue;
        int r = 0;
        PyObject *events = NULL, *ups = NULL, *rec = NULL;
        int later = PySet_GET_SIZE(held) ? PySet_Contains(held, port) : 0; /* its turn after one of Python's */
        if (later < 0)
            goto out;
        if (!later) {
            PyObject *state = PyDict_GetItemWithError(fast, port);
            if (state == NULL && PyErr_Occurred())
                goto out;
            if (state != NULL) {
                Py_INCREF(state); /* (a dict lookup's: the updates' calls run Python) */
                ups = direct ? (Py_INCREF(pending), pending) : PyList_New(0);
                r = ups == NULL ? -1 : fec_one(e, state, &cf, &events, ups);
                Py_DECREF(state);
            }
        }
        if (r > 0 && (events != NULL || (!direct && PyList_GET_SIZE(ups)))) {
            if (direct || !PyList_GET_SIZE(ups))
                rec = Py_BuildValue("(OO)", events ? events : Py_None, Py_None);
            else
                rec = Py_BuildValue("(OO)", events ? events : Py_None, ups);
            if (rec == NULL)
                r = -1;
        } else if (r == 0) {
            direct = 0;
            rec = Py_None;
            Py_INCREF(rec);
            if (PySet_Add(held, port) < 0)
                r = -1;
        }
        Py_XDECREF(events);
        Py_XDECREF(ups);
        if (r >= 0 && rec != NULL) {
            PyObject *ko = PyLong_FromSsize_t(k);
            if (ko == NULL || PyDict_SetItem(todo, ko, rec) < 0)
                r = -1;
            Py_XDECREF(ko);
        }
        Py_XDECREF(rec);
        if (r < 0)
            goto out;
    }
    result = todo;
    todo = NULL;
out:
    Py_XDECREF(todo);
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
        int max_t, pts;
        double fit[3];
        PyObject *pred;
        if (fec_fit(d, total, &max_t, &pts, fit)) {
            pred = Py_BuildValue("(dddi)", fit[0], fit[1], fit[2], pts);
            if (pred == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        } else {
            pred = Py_None;
            Py_INCREF(pred);
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
"float(f\"{x:.3e}\") does, by the same CPython conversions; an int as it is) that moved from\n"
"sents[i][leaf] (absent: moved; two floats: by more than the gauge's resolution, FEC_RESOLUTION\n"
"by position in leaves; else Python's !=) is written into sents[i] and listed as\n"
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
            if (PyFloat_CheckExact(v) && PyFloat_AS_DOUBLE(v) == 0.0) { /* reads back as itself */
                Py_INCREF(v);
            } else if (PyFloat_CheckExact(v)) {
                v = fec_rounded(PyFloat_AS_DOUBLE(v));
            } else {
                Py_INCREF(v);
            }
            if (v == NULL)
                goto fail;
            int differs = fec_change(sent, leaf, v, i);
            if (differs > 0) {
                PyObject *change = Py_BuildValue("(nOO)", u, leaf, v);
                if (change == NULL || PyList_Append(out, change) < 0)
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
    PyObject *acc, *fec_sem;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &acc, &fec_sem))
        return NULL;
    long lanes[64];
    int nl, r = fec_lanes_of(acc, fec_sem, lanes, &nl);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE;
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
