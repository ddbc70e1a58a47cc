/* The detectors whose per-port state lives in flat arrays, updated here once per engine pass
 * for every port sampled: throughput_dip (dip_run), error_burst's steady part (burst_run) and
 * link_degrading's buckets, fits and gauges (fec_run, fec_fits, fec_changes, fec_lanes).
 * This file is the rule of each (docs/DEVELOPING.md, "Each rule once"): plain C doubles and
 * libm. agent/_fallback/detect.py is the plain per-port Python the tests hold to it (within a
 * relative 1e-9 on every gauge, the same events), not a copy of its bits. A detector hands its
 * settings as an object whose attributes are read here once a call (PyObject_GetAttr). */
#include "swtel.h"

#include <math.h>
#include <string.h>

/* Per row (port), per direction (rx, tx): the reals and the ints of its state. */
#define DIP_REALS 3 /* level (-1: not known yet), ref (the level when the dip started), low */
#define DIP_INTS 4  /* seen (ns of samples), start (0: no dip), long (0/1), quiet_until */

/* ------------------------------------------------------------------ the settings object */

static int conf_double(PyObject *conf, const char *name, double *out)
{
    PyObject *v = PyObject_GetAttrString(conf, name);
    if (v == NULL)
        return -1;
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static int conf_ll(PyObject *conf, const char *name, long long *out)
{
    PyObject *v = PyObject_GetAttrString(conf, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A new reference to the attribute, a tuple of exactly ``size`` items (size < 0: any object). */
static PyObject *conf_obj(PyObject *conf, const char *name, Py_ssize_t size)
{
    PyObject *v = PyObject_GetAttrString(conf, name);
    if (v == NULL || size < 0)
        return v;
    if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != size) {
        PyErr_Format(PyExc_TypeError, "conf.%s must be a tuple of %zd", name, size);
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

/* ------------------------------------------------------------------ a pass over rows of arrays */

/* What dip_run and burst_run share: (entries, speeds, rows, reals, ints, conf), the two
 * arrays held and the rows they have room for. */
typedef struct {
    PyObject *entries, *speeds, *rows, *conf;
    Py_buffer b[2];
    double *reals;
    int64_t *ints;
    Py_ssize_t cap;
} row_pass;

static int row_pass_open(PyObject *args, row_pass *rp, Py_ssize_t reals_a_row, Py_ssize_t ints_a_row)
{
    static const swtel_bufspec specs[2] = {{8, 1, "reals"}, {8, 1, "ints"}};
    PyObject *o[2];
    if (!PyArg_ParseTuple(args, "O!O!O!OOO", &PyList_Type, &rp->entries, &PyDict_Type, &rp->speeds, &PyDict_Type,
                          &rp->rows, &o[0], &o[1], &rp->conf))
        return -1;
    if (swtel_get_buffers(o, rp->b, specs, 2) < 0)
        return -1;
    rp->reals = rp->b[0].buf;
    rp->ints = rp->b[1].buf;
    rp->cap = rp->b[0].len / 8 / reals_a_row;
    if (rp->b[1].len / 8 / ints_a_row < rp->cap)
        rp->cap = rp->b[1].len / 8 / ints_a_row;
    return 0;
}

static void row_pass_close(row_pass *rp)
{
    swtel_release_buffers(rp->b, 2);
}

/* Entry k: a tuple of at least ``least`` items whose acc (item 3) is a dict, else NULL with
 * TypeError set. */
static PyObject *row_pass_entry(const row_pass *rp, Py_ssize_t k, Py_ssize_t least)
{
    PyObject *e = PyList_GET_ITEM(rp->entries, k);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < least) {
        PyErr_Format(PyExc_TypeError, "entries[%zd] must be (port, ts, dt, acc, owned, ...)", k);
        return NULL;
    }
    if (!PyDict_Check(PyTuple_GET_ITEM(e, 3))) {
        PyErr_Format(PyExc_TypeError, "entries[%zd]: acc must be a dict", k);
        return NULL;
    }
    return e;
}

/* The port's row in the state arrays (``rows``: port -> row), a new port taking the next
 * one; -1 with an exception set when the arrays are full or the dict holds a bad row. */
static Py_ssize_t row_of(const row_pass *rp, PyObject *port)
{
    PyObject *row_obj = PyDict_GetItemWithError(rp->rows, port);
    if (row_obj == NULL) {
        if (PyErr_Occurred())
            return -1;
        Py_ssize_t row = PyDict_GET_SIZE(rp->rows);
        if (row >= rp->cap) {
            PyErr_Format(PyExc_ValueError, "the state arrays hold %zd rows, row %zd is needed", rp->cap, row);
            return -1;
        }
        PyObject *r = PyLong_FromSsize_t(row);
        if (r == NULL || PyDict_SetItem(rp->rows, port, r) < 0) {
            Py_XDECREF(r);
            return -1;
        }
        Py_DECREF(r);
        return row;
    }
    Py_ssize_t row = PyLong_AsSsize_t(row_obj);
    if (row == -1 && PyErr_Occurred())
        return -1;
    if (row < 0 || row >= rp->cap) {
        PyErr_Format(PyExc_IndexError, "row %zd out of the state arrays (%zd rows)", row, rp->cap);
        return -1;
    }
    return row;
}

/* acc[key] as a double when sem is in owned: 1 (absent: 0.0), 0 when sem is not owned, -1 error. */
static int owned_value(PyObject *acc, PyObject *owned, PyObject *sem, PyObject *key, double *out)
{
    int has = PySequence_Contains(owned, sem);
    if (has <= 0)
        return has;
    PyObject *v = PyDict_GetItemWithError(acc, key);
    *out = 0.0;
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 1;
    *out = PyFloat_AsDouble(v);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 1;
}

/* The port's link speed (bit/s) in *out: 1 known (truthy), 0 not, -1 error. */
static int speed_of(PyObject *speeds, PyObject *port, double *out)
{
    PyObject *speed = PyDict_GetItemWithError(speeds, port);
    if (speed == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int known = PyObject_IsTrue(speed);
    if (known <= 0)
        return known;
    *out = PyFloat_AsDouble(speed);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 1;
}

/* The sample's ts and dt (ns), dt > 0: 0, or -1 with an exception set. */
static int ts_dt(PyObject *e, Py_ssize_t k, long long *ts, long long *dt)
{
    *ts = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1));
    *dt = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 2));
    if ((*ts == -1 || *dt == -1) && PyErr_Occurred())
        return -1;
    if (*dt <= 0) {
        PyErr_Format(PyExc_ValueError, "entries[%zd]: dt must be positive", k);
        return -1;
    }
    return 0;
}

static int append_new(PyObject *list, PyObject *item)
{
    int r = item == NULL ? -1 : PyList_Append(list, item);
    Py_XDECREF(item);
    return r;
}

/* ------------------------------------------------------------------ throughput_dip */

PyDoc_STRVAR(dip_run_doc,
"dip_run(entries, speeds, rows, reals, ints, conf) -> edges\n\n"
"One engine pass of the throughput-dip rule. entries is a list of samples\n"
"(port, ts, dt, acc, owned, ...) in the order the feeds hand them over; speeds maps a port to\n"
"its link speed (a port without a truthy one is skipped); rows maps a port to its row of\n"
"the state arrays (a port without one is given the next row, len(rows)); reals (f64,\n"
"6 a row) and ints (i64, 8 a row) are the rows' state, rx then tx: level, ref, low and\n"
"seen, start, long, quiet_until; the caller sizes them for len(rows) + len(entries) rows,\n"
"a new row holding level -1 and zeros. conf's attributes: tau, dip_ratio, min_utilization,\n"
"max_ns, quiet_ns, warmup_ns, keys (the acc keys of rx and tx octets) and sems (their\n"
"semantics: a direction whose semantic is not in owned is left alone).\n"
"Returns the dips to report, as (entry index, direction, low, ref, took) in entry order.");

typedef struct {
    double tau, ratio, min_util;
    long long max_ns, quiet_ns, warmup_ns;
    PyObject *keys, *sems;
} dip_conf;

static int dip_conf_read(PyObject *conf, dip_conf *cf)
{
    cf->keys = cf->sems = NULL;
    if (conf_double(conf, "tau", &cf->tau) < 0 || conf_double(conf, "dip_ratio", &cf->ratio) < 0 ||
        conf_double(conf, "min_utilization", &cf->min_util) < 0 || conf_ll(conf, "max_ns", &cf->max_ns) < 0 ||
        conf_ll(conf, "quiet_ns", &cf->quiet_ns) < 0 || conf_ll(conf, "warmup_ns", &cf->warmup_ns) < 0 ||
        (cf->keys = conf_obj(conf, "keys", 2)) == NULL || (cf->sems = conf_obj(conf, "sems", 2)) == NULL)
        return -1;
    return 0;
}

/* One direction of a sample: the rule's step on its state; an edge (a dip to report) appended. */
static int dip_step(const dip_conf *cf, double *r, int64_t *s, double util, double alpha, long long ts,
                    long long dt, Py_ssize_t k, int dir, PyObject *edges)
{
    double level = r[0];
    if (level < 0) {
        r[0] = util;
        return 0;
    }
    if (util < cf->ratio * level) {
        if (s[1]) {
            if (util < r[2])
                r[2] = util;
            if (!s[2] && ts - s[1] > cf->max_ns)
                s[2] = 1;
        } else if (s[0] >= cf->warmup_ns && level >= cf->min_util && ts > s[3]) {
            s[1] = ts - dt;
            r[1] = level;
            r[2] = util;
            s[2] = 0;
        }
    } else if (s[1]) {
        long long took = ts - dt - s[1];
        if (!s[2] && took <= cf->max_ns) {
            if (append_new(edges, Py_BuildValue("(niddL)", k, dir, r[2], r[1], took)) < 0)
                return -1;
        } else if (s[2]) {
            s[3] = ts + cf->quiet_ns;
        }
        s[1] = 0;
    }
    r[0] = level + alpha * (util - level);
    s[0] += dt;
    return 0;
}

static PyObject *dip_run(PyObject *self, PyObject *args)
{
    row_pass rp;
    dip_conf cf;
    if (row_pass_open(args, &rp, 2 * DIP_REALS, 2 * DIP_INTS) < 0)
        return NULL;
    PyObject *edges = NULL, *result = NULL;
    if (dip_conf_read(rp.conf, &cf) < 0 || (edges = PyList_New(0)) == NULL)
        goto out;
    long long alpha_dt = 0; /* polls are regular: one dt for most of a pass */
    double alpha = 0.0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(rp.entries); k++) {
        PyObject *e = row_pass_entry(&rp, k, 5);
        if (e == NULL)
            goto out;
        PyObject *port = PyTuple_GET_ITEM(e, 0), *acc = PyTuple_GET_ITEM(e, 3), *owned = PyTuple_GET_ITEM(e, 4);
        double speed;
        int known = speed_of(rp.speeds, port, &speed);
        if (known <= 0) {
            if (known < 0)
                goto out;
            continue;
        }
        long long ts, dt;
        if (ts_dt(e, k, &ts, &dt) < 0)
            goto out;
        Py_ssize_t row = row_of(&rp, port);
        if (row < 0)
            goto out;
        if (dt != alpha_dt) {
            alpha = 1.0 - exp(-(double)dt / cf.tau);
            alpha_dt = dt;
        }
        double scale = 8e9 / (speed * (double)dt); /* octets over what the link could carry */
        for (int dir = 0; dir < 2; dir++) {
            double octets;
            int has = owned_value(acc, owned, PyTuple_GET_ITEM(cf.sems, dir), PyTuple_GET_ITEM(cf.keys, dir), &octets);
            if (has < 0)
                goto out;
            if (has && dip_step(&cf, rp.reals + row * 2 * DIP_REALS + dir * DIP_REALS,
                                rp.ints + row * 2 * DIP_INTS + dir * DIP_INTS, octets * scale, alpha, ts, dt, k,
                                dir, edges) < 0)
                goto out;
        }
    }
    result = edges;
    edges = NULL;
out:
    row_pass_close(&rp);
    Py_XDECREF(cf.keys);
    Py_XDECREF(cf.sems);
    Py_XDECREF(edges);
    return result;
}

/* ------------------------------------------------------------------ error_burst */

PyDoc_STRVAR(burst_run_doc,
"burst_run(entries, speeds, rows, reals, ints, conf) -> found\n\n"
"One engine pass of the error-burst rule's steady part (agent/insights/error_burst.py): per\n"
"sample (port, ts, dt, acc, owned, changed) the bits received (acc's keys[0] where sems[0]\n"
"is owned, else link speed x dt) and corrected (keys[1] where sems[1] is owned) per ns,\n"
"averaged over about span ns into reals (f64, 2 a row: bitrate, corr_rate) and ints (i64,\n"
"1 a row: ns seen). rows maps a port to its row (a new port gets len(rows)); the caller\n"
"sizes the arrays for len(rows) + len(entries) rows. conf's attributes: span, warning, keys,\n"
"sems, rare_bits. Returns, in entry order, (k, hot, bitrate, corr_rate, seen) for the samples\n"
"in which a semantic of rare_bits moved (changed) or whose own corrected bits exceed warning x\n"
"its bits (hot), with the state after the sample.");

static PyObject *burst_run(PyObject *self, PyObject *args)
{
    row_pass rp;
    if (row_pass_open(args, &rp, 2, 1) < 0)
        return NULL;
    PyObject *keys = NULL, *sems = NULL, *found = NULL, *result = NULL;
    long long span, rare_bits;
    double warning;
    if (conf_ll(rp.conf, "span", &span) < 0 || conf_double(rp.conf, "warning", &warning) < 0 ||
        conf_ll(rp.conf, "rare_bits", &rare_bits) < 0 || (keys = conf_obj(rp.conf, "keys", 2)) == NULL ||
        (sems = conf_obj(rp.conf, "sems", 2)) == NULL)
        goto out;
    if (span <= 0) {
        PyErr_SetString(PyExc_ValueError, "span must be positive");
        goto out;
    }
    if ((found = PyList_New(0)) == NULL)
        goto out;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(rp.entries); k++) {
        PyObject *e = row_pass_entry(&rp, k, 6);
        if (e == NULL)
            goto out;
        PyObject *port = PyTuple_GET_ITEM(e, 0), *acc = PyTuple_GET_ITEM(e, 3), *owned = PyTuple_GET_ITEM(e, 4);
        long long ts, dt, changed = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 5));
        if ((changed == -1 && PyErr_Occurred()) || ts_dt(e, k, &ts, &dt) < 0)
            goto out;
        double bits = 0.0, corr = 0.0;
        int known = owned_value(acc, owned, PyTuple_GET_ITEM(sems, 0), PyTuple_GET_ITEM(keys, 0), &bits);
        if (known == 0) { /* no bit count: the link's speed x the sample's length */
            known = speed_of(rp.speeds, port, &bits);
            bits = bits * (double)dt / 1e9;
        }
        if (known < 0 || owned_value(acc, owned, PyTuple_GET_ITEM(sems, 1), PyTuple_GET_ITEM(keys, 1), &corr) < 0)
            goto out;
        Py_ssize_t row = row_of(&rp, port);
        if (row < 0)
            goto out;
        double *rate = rp.reals + 2 * row;
        int64_t *seen = rp.ints + row;
        if (known) {
            double alpha = *seen ? fmin(1.0, (double)dt / (double)span) : 1.0;
            rate[0] += alpha * (bits / (double)dt - rate[0]);
            rate[1] += alpha * (corr / (double)dt - rate[1]);
            *seen += dt;
        }
        int hot = corr != 0.0 && known && bits != 0.0 && corr > bits * warning;
        if ((hot || (changed & rare_bits)) &&
            append_new(found, Py_BuildValue("(nNddL)", k, PyBool_FromLong(hot), rate[0], rate[1], (long long)*seen)) < 0)
            goto out;
    }
    result = found;
    found = NULL;
out:
    row_pass_close(&rp);
    Py_XDECREF(keys);
    Py_XDECREF(sems);
    Py_XDECREF(found);
    return result;
}

/* ------------------------------------------------------------------ link_degrading */

#define FEC_BINS 16      /* RS(544,514): bins 0..15 */
#define FEC_MAX_UNITS 64 /* lanes a port (a port with more is Python's) */
#define FEC_RING 10      /* a window's buckets: the nine before the current one, and it */
#define FEC_GAUGES 4     /* predicted-flr, observed-cer, fit-r2, max-bin */
#define FEC_DIGITS 4     /* significant digits of a published ratio: a fit's last digits are noise */
#define FEC_MAX_BINS (FEC_MAX_UNITS * FEC_BINS)
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
"(port, ts, dt, acc, owned, changed[, place, row]) in feed order; conf's attributes: bucket,\n"
"fec_sem, unc_sem, unc_keys, unc_bit, max_bin, max_bin_count, flr, min_r2, scale, per_slot,\n"
"leaves, update, source, spill. A sample's row, where given, is (rows, at, row_keys): its bins'\n"
"deltas are rows[at + column] (i64), not in acc, unless changed has the bit spill (Python's then).\n"
"A sample of a port in fast as a FecPort (w, keys, units, sent, boxes, phase, row_keys, cols) (w:\n"
"its words, i64, laid out as _Port's; keys[j] the acc key of bin j;\n"
"with a row, cols (i32) bin j's column, -1 none, then the columns of the row's lanes outside\n"
"units, and row_keys the very object of the rows it was mapped for, else Python's) is done here\n"
"in two cases. In the current bucket idx = (ts - 1 + phase) // bucket, with no uncorrectable\n"
"codeword and no bin at max_bin or above: its bins are added into cur. In a later bucket, with\n"
"no lane outside units: the bucket closes (the current bucket goes into the ring, the buckets\n"
"<= idx - 10 leave the totals, the sample's bins open the new one, the tails and the alarm are\n"
"recomputed), the window is judged (the fits, as fec_fits; the events) and published (once per\n"
"publishing slot of per_slot buckets: each leaf that changed, rounded as fec_changes rounds,\n"
"written into sent[unit] (unit: the lane, None: the port) and made update(ts, boxes[unit],\n"
"leaf, value, source)). Every other sample of such a port (its alarm set, a count not an int, a\n"
"sum leaving int64, an earlier bucket, a lane that came), and every later one of a port left to\n"
"Python in the pass, is left untouched.\n"
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

/* ---------------------------------------------------------------- the fit */

/* One unit's fit over its bins d and total (> 0). */
typedef struct {
    int max_t;       /* the highest bin with a count (0: none) */
    int pts;         /* bins 1..15 holding any: the line's points */
    int pred;        /* 1: a line (3 points or more), 0: no prediction */
    double line[3];  /* predicted CER (capped at 1), R^2, slope */
} fec_fit_t;

/* The least-squares line through (i, log10(d[i] / total)) for the bins i = 1..15 holding any,
 * extrapolated to bins 16..20 (the codewords RS(544,514) cannot correct): their sum is the
 * predicted CER, the line's R^2 its trust. */
static void fec_fit(const double *d, double total, fec_fit_t *f)
{
    double xs[FEC_BINS], ys[FEC_BINS], sx = 0.0, sy = 0.0;
    int np = 0;
    f->max_t = 0;
    for (int i = 0; i < FEC_BINS; i++)
        if (d[i] > 0)
            f->max_t = i;
    for (int i = 1; i < FEC_BINS; i++)
        if (d[i] > 0) {
            xs[np] = i;
            ys[np] = log10(d[i] / total);
            sx += xs[np];
            sy += ys[np++];
        }
    f->pts = np;
    f->pred = np >= 3;
    if (!f->pred)
        return;
    double mx = sx / np, my = sy / np, sxx = 0.0, sxy = 0.0, ss_tot = 0.0, ss_res = 0.0;
    for (int p = 0; p < np; p++) {
        sxx += (xs[p] - mx) * (xs[p] - mx);
        sxy += (xs[p] - mx) * (ys[p] - my);
    }
    double slope = sxy / sxx, icpt = my - slope * mx;
    for (int p = 0; p < np; p++) {
        double res = ys[p] - icpt - slope * xs[p];
        ss_tot += (ys[p] - my) * (ys[p] - my);
        ss_res += res * res;
    }
    double cer = 0.0;
    for (int i = 16; i <= 20; i++)
        cer += pow(10.0, fmin(0.0, icpt + slope * i));
    f->line[0] = fmin(cer, 1.0);
    f->line[1] = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 0.0; /* a flat line explains nothing */
    f->line[2] = slope;
}

/* (max_t, pred) of a unit as Python sees it: pred None or (CER, R^2, slope, points). */
static PyObject *fec_fit_value(const fec_fit_t *f)
{
    if (!f->pred)
        return Py_BuildValue("(iO)", f->max_t, Py_None);
    return Py_BuildValue("(i(dddi))", f->max_t, f->line[0], f->line[1], f->line[2], f->pts);
}

/* ---------------------------------------------------------------- publishing */

/* x to FEC_DIGITS significant digits (half away from zero). */
static double fec_round(double x)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    double m = pow(10.0, FEC_DIGITS - 1 - floor(log10(fabs(x))));
    return isfinite(m) ? round(x * m) / m : x;
}

/* The gauges' resolutions in their order (predicted-flr, observed-cer, fit-r2, max-bin), as
 * (relative, absolute): a gauge is published again only when it moved by more than this from
 * the value last published (docs/insights.md); the ratios' 1e-15 floor keeps a clean link's fit
 * (1e-19..1e-16, jittering by factors) from being news. */
static const double FEC_RESOLUTION[FEC_GAUGES][2] = {{0.1, 1e-15}, {0.1, 1e-15}, {0.0, 0.01}, {0.0, 0.0}};

/* Whether gauge i moved from was to v: equal is no news, NaN is news unless both are, else a
 * move larger than max(absolute, relative x the larger magnitude). */
static int fec_moved(double was, double v, int i)
{
    if (was == v)
        return 0;
    if (isnan(was) || isnan(v))
        return !(isnan(was) && isnan(v));
    double tol = FEC_RESOLUTION[i][0] * fmax(fabs(was), fabs(v));
    return fabs(v - was) > fmax(tol, FEC_RESOLUTION[i][1]);
}

/* ``if moved(sent.get(leaf), v): sent[leaf] = v``: two floats of gauge i (< the gauges) by
 * their resolution, anything else by !=: 1 written, 0 not, -1 error. */
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
        differs = PyObject_RichCompareBool(was, v, Py_NE);
    }
    if (differs > 0 && PyDict_SetItem(sent, leaf, v) < 0)
        return -1;
    return differs;
}

/* A gauge's value as published: a float rounded (fec_round), anything else as it is. */
static PyObject *fec_published(PyObject *v)
{
    if (PyFloat_CheckExact(v))
        return PyFloat_FromDouble(fec_round(PyFloat_AS_DOUBLE(v)));
    Py_INCREF(v);
    return v;
}

typedef struct {
    long long bucket, unc_bit, max_bin_count, per_slot, spill;
    long long max_bin;
    double flr, min_r2, scale;
    PyObject *fec_sem, *unc_sem, *unc_keys, *leaves, *update, *source;
} fec_conf;

static void fec_conf_clear(fec_conf *cf)
{
    Py_CLEAR(cf->fec_sem);
    Py_CLEAR(cf->unc_sem);
    Py_CLEAR(cf->unc_keys);
    Py_CLEAR(cf->leaves);
    Py_CLEAR(cf->update);
    Py_CLEAR(cf->source);
}

static int fec_conf_read(PyObject *conf, fec_conf *cf)
{
    memset(cf, 0, sizeof *cf);
    if (conf_ll(conf, "bucket", &cf->bucket) < 0 || conf_ll(conf, "unc_bit", &cf->unc_bit) < 0 ||
        conf_ll(conf, "max_bin", &cf->max_bin) < 0 || conf_ll(conf, "max_bin_count", &cf->max_bin_count) < 0 ||
        conf_ll(conf, "per_slot", &cf->per_slot) < 0 || conf_ll(conf, "spill", &cf->spill) < 0 ||
        conf_double(conf, "flr", &cf->flr) < 0 || conf_double(conf, "min_r2", &cf->min_r2) < 0 ||
        conf_double(conf, "scale", &cf->scale) < 0 || (cf->fec_sem = conf_obj(conf, "fec_sem", -1)) == NULL ||
        (cf->unc_sem = conf_obj(conf, "unc_sem", -1)) == NULL ||
        (cf->unc_keys = conf_obj(conf, "unc_keys", -1)) == NULL ||
        (cf->leaves = conf_obj(conf, "leaves", FEC_GAUGES)) == NULL ||
        (cf->update = conf_obj(conf, "update", -1)) == NULL || (cf->source = conf_obj(conf, "source", -1)) == NULL)
        return -1;
    if (!PyTuple_Check(cf->unc_keys)) {
        PyErr_SetString(PyExc_TypeError, "conf.unc_keys must be a tuple");
        return -1;
    }
    if (!PyCallable_Check(cf->update)) {
        PyErr_SetString(PyExc_TypeError, "conf.update must be callable");
        return -1;
    }
    if (cf->bucket <= 0 || cf->per_slot <= 0) {
        PyErr_SetString(PyExc_ValueError, "conf.bucket and conf.per_slot must be positive");
        return -1;
    }
    if (cf->max_bin < 0 || cf->max_bin > FEC_BINS) {
        PyErr_SetString(PyExc_ValueError, "conf.max_bin must be within the 16 bins");
        return -1;
    }
    return 0;
}

/* A unit's gauges (unit None: the port's) as the detector publishes them: sent[unit] (made when
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
        PyObject *v = i < 3 ? PyFloat_FromDouble(fec_round(vals[i])) : PyLong_FromLong(max_t);
        if (v == NULL)
            return -1;
        int r = fec_change(mine, leaf, v, i);
        if (r > 0) {
            PyObject *args[5] = {ts, box, leaf, v, cf->source};
            r = append_new(updates, PyObject_Vectorcall(cf->update, args, 5, NULL));
        }
        Py_DECREF(v);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- a sample of a port in fast */

/* A port's state, fast[port]: a FecPort (agent/insights/link_degrading.py), read by position. */
enum { FP_W, FP_KEYS, FP_UNITS, FP_SENT, FP_BOXES, FP_PHASE, FP_ROW_KEYS, FP_COLS, FP_FIELDS };

/* A port's state and its sample, as fec_sample_open reads them. */
typedef struct {
    PyObject *e, *units, *sent, *boxes;
    Py_buffer b[1], rb[2];
    int held_b, held_rb;
    int64_t *w, *cur, *totals, *tail_done, *tail_cur, *ring;
    const int64_t *vec; /* the feed's row of the sample's FEC bins (NULL: acc) */
    const int32_t *cols;
    Py_ssize_t n, nu, ncols;
    long long i1, unc; /* the sample's bucket and uncorrectable codewords */
    int unc_zero, high; /* no uncorrectable codeword came; a bin at max_bin or above moved */
    long long row[FEC_MAX_BINS]; /* the sample's bins (absent: 0) */
} fec_sample;

static void fec_sample_close(fec_sample *s)
{
    if (s->held_b)
        swtel_release_buffers(s->b, 1);
    if (s->held_rb)
        swtel_release_buffers(s->rb, 2);
    s->held_b = s->held_rb = 0;
}

/* acc's values of the port's bins (keys[j]) into s->row: 1 done, 0 Python's
 * (a value not an int within int64), -1 error. (Looking up every bin of the port in acc, which
 * the feeds have just filled, touches less memory than walking acc's keys.) */
static int fec_row_from_acc(fec_sample *s, PyObject *acc, PyObject *keys, long long max_bin)
{
    for (Py_ssize_t j = 0; j < s->n; j++) {
        PyObject *v = PyDict_GetItemWithError(acc, PyTuple_GET_ITEM(keys, j));
        s->row[j] = 0;
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        int r = as_i64(v, &s->row[j]);
        if (r <= 0)
            return r;
        if (j % FEC_BINS >= max_bin)
            s->high = 1;
    }
    return 1;
}

/* The sample's row (vrow: (rows, at, row_keys)) when the port's columns were mapped for that
 * row's keys: 1 held, 0 Python's (nothing held), -1 error. */
static int fec_row_view(fec_sample *s, PyObject *vrow, PyObject *state)
{
    static const swtel_bufspec specs[2] = {{8, 0, "rows"}, {4, 0, "cols"}};
    if (!PyTuple_Check(vrow) || PyTuple_GET_SIZE(vrow) != 3 || PyTuple_GET_ITEM(vrow, 2) != PyTuple_GET_ITEM(state, FP_ROW_KEYS))
        return 0;
    Py_ssize_t base = PyLong_AsSsize_t(PyTuple_GET_ITEM(vrow, 1));
    if (base == -1 && PyErr_Occurred())
        return -1;
    PyObject *o[2] = {PyTuple_GET_ITEM(vrow, 0), PyTuple_GET_ITEM(state, FP_COLS)};
    if (swtel_get_buffers(o, s->rb, specs, 2) < 0)
        return -1;
    s->held_rb = 1;
    Py_ssize_t words = s->rb[0].len / 8;
    s->ncols = s->rb[1].len / 4;
    s->cols = s->rb[1].buf;
    int ok = base >= 0 && base <= words && s->ncols >= s->n;
    for (Py_ssize_t j = 0; ok && j < s->ncols; j++)
        ok = s->cols[j] < words - base;
    if (!ok)
        return 0;
    s->vec = (const int64_t *)s->rb[0].buf + base;
    return 1;
}

/* The sample e of a port whose state is ``state`` read into s: 1 the kernel's to do, 0 Python's,
 * -1 error. fec_sample_close releases what it holds in every case. */
static int fec_sample_open(fec_sample *s, PyObject *e, PyObject *state, const fec_conf *cf)
{
    static const swtel_bufspec specs[1] = {{8, 1, "w"}};
    s->held_b = s->held_rb = 0;
    s->vec = NULL;
    s->cols = NULL;
    s->ncols = 0;
    s->e = e;
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != FP_FIELDS)
        return 0;
    PyObject *vrow = PyTuple_GET_SIZE(e) > 7 ? PyTuple_GET_ITEM(e, 7) : Py_None; /* the feed's FEC row */
    PyObject *acc = PyTuple_GET_ITEM(e, 3), *owned = PyTuple_GET_ITEM(e, 4), *keys = PyTuple_GET_ITEM(state, FP_KEYS);
    s->units = PyTuple_GET_ITEM(state, FP_UNITS);
    s->sent = PyTuple_GET_ITEM(state, FP_SENT);
    s->boxes = PyTuple_GET_ITEM(state, FP_BOXES);
    if (!PyTuple_Check(keys) || !PyTuple_Check(s->units) || !PyDict_Check(s->sent) || !PyDict_Check(s->boxes))
        return 0;
    s->n = PyTuple_GET_SIZE(keys);
    s->nu = PyTuple_GET_SIZE(s->units);
    if (s->nu < 1 || s->nu > FEC_MAX_UNITS || s->n != s->nu * FEC_BINS)
        return 0;
    long long changed, ts, phase, a;
    int r;
    if ((r = as_i64(PyTuple_GET_ITEM(e, 5), &changed)) <= 0)
        return r;
    if (vrow != Py_None && (changed & cf->spill)) /* a bin in acc too: Python's, which adds the two */
        return 0;
    s->unc = 0;
    s->unc_zero = 1;
    s->high = 0;
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
            s->unc_zero = s->unc_zero && x == 0;
            if (__builtin_add_overflow(s->unc, x, &s->unc))
                return 0;
        }
    }
    if ((r = as_i64(PyTuple_GET_ITEM(e, 1), &ts)) <= 0 || (r = as_i64(PyTuple_GET_ITEM(state, FP_PHASE), &phase)) <= 0)
        return r;
    if (__builtin_add_overflow(ts, phase, &a) || __builtin_sub_overflow(a, 1, &a))
        return 0;
    s->i1 = floor_div(a, cf->bucket);
    if (vrow != Py_None && (r = fec_row_view(s, vrow, state)) <= 0)
        return r;
    PyObject *o[1] = {PyTuple_GET_ITEM(state, FP_W)};
    if (swtel_get_buffers(o, s->b, specs, 1) < 0)
        return -1;
    s->held_b = 1;
    if (s->b[0].len / 8 != fec_words(s->n, s->nu))
        return 0;
    s->w = s->b[0].buf;
    s->cur = s->w + FW_HEAD;
    s->totals = s->cur + s->n;
    s->tail_done = s->totals + s->n;
    s->tail_cur = s->tail_done + s->nu;
    s->ring = s->tail_cur + s->nu;
    if (s->w[FW_ALARM]) /* every sample of the port is judged: Python's */
        return 0;
    if (s->vec != NULL) {
        for (Py_ssize_t j = 0; j < s->n; j++) {
            s->row[j] = s->cols[j] >= 0 ? s->vec[s->cols[j]] : 0;
            if (s->row[j] != 0 && j % FEC_BINS >= cf->max_bin)
                s->high = 1;
        }
        return 1;
    }
    return fec_row_from_acc(s, acc, keys, cf->max_bin);
}

/* The common sample: into the current bucket, unless a tail moved or uncorrectable codewords
 * came. 1 done, 0 Python's. */
static int fec_add(fec_sample *s)
{
    long long sums[FEC_MAX_BINS];
    if (s->high || !s->unc_zero)
        return 0;
    for (Py_ssize_t j = 0; j < s->n; j++)
        if (__builtin_add_overflow(s->cur[j], s->row[j], &sums[j]))
            return 0;
    memcpy(s->cur, sums, (size_t)s->n * 8);
    return 1;
}

/* The window after a bucket closes, in temporaries until it is kept. */
typedef struct {
    long long tot[FEC_MAX_BINS];  /* the ring's sums after the roll */
    long long d[FEC_MAX_BINS];    /* ... with the sample's bins: the window judged */
    long long utot, unc_all, codewords;
    long long tails[FEC_MAX_UNITS], new_done[FEC_MAX_UNITS], new_cur[FEC_MAX_UNITS];
    int alarm, lanes;
} fec_window;

/* A ring slot's words: bucket b in slot b mod FEC_RING. */
static int64_t *fec_slot(const fec_sample *s, long long bk)
{
    long long i = bk % FEC_RING;
    return s->ring + (i < 0 ? i + FEC_RING : i) * (s->n + 2);
}

/* The bucket closes (the sample is in a later one): the current bucket joins the totals, buckets
 * <= i1 - 10 leave (in bucket order, as they joined; the current one last), the tails and the
 * alarm recomputed, into win; nothing written yet. 1 done, 0 Python's (a lane that came: the port
 * starts afresh there; a sum past int64), -1 error. */
static int fec_close(fec_sample *s, const fec_conf *cf, fec_window *win)
{
    long long i0 = s->w[FW_IDX], unit_of[FEC_MAX_UNITS];
    int r;
    if (s->i1 < i0 || i0 < INT64_MIN + 2 * FEC_RING)
        return 0;
    for (Py_ssize_t u = 0; u < s->nu; u++)
        if ((r = as_i64(PyTuple_GET_ITEM(s->units, u), &unit_of[u])) <= 0)
            return r;
    win->lanes = !(s->nu == 1 && unit_of[0] == -1); /* PORT: the port's own histogram */
    long lane_list[64];
    int nl;
    if ((r = fec_lanes_of(PyTuple_GET_ITEM(s->e, 3), cf->fec_sem, lane_list, &nl)) <= 0)
        return r;
    for (int i = 0; i < nl; i++) {
        Py_ssize_t u = 0;
        while (u < s->nu && unit_of[u] != lane_list[i])
            u++;
        if (u == s->nu)
            return 0;
    }
    for (Py_ssize_t j = s->n; j < s->ncols; j++) /* the row's lanes not among units (cols past n) */
        if (s->cols[j] >= 0 && s->vec[s->cols[j]] != 0)
            return 0;
    for (Py_ssize_t j = 0; j < s->n; j++)
        if (__builtin_add_overflow(s->totals[j], s->cur[j], &win->tot[j]))
            return 0;
    if (__builtin_add_overflow(s->w[FW_UNC_TOT], s->w[FW_UNC_CUR], &win->utot))
        return 0;
    long long last = s->i1 - FEC_RING < i0 ? s->i1 - FEC_RING : i0;
    for (long long bk = i0 - (FEC_RING - 1); bk <= last; bk++) {
        const int64_t *bins = s->cur;
        long long bu = s->w[FW_UNC_CUR];
        if (bk != i0) {
            const int64_t *slot = fec_slot(s, bk);
            if (slot[0] != bk) /* no sample in that bucket */
                continue;
            bins = slot + 2;
            bu = slot[1];
        }
        for (Py_ssize_t j = 0; j < s->n; j++)
            if (__builtin_sub_overflow(win->tot[j], bins[j], &win->tot[j]))
                return 0;
        if (__builtin_sub_overflow(win->utot, bu, &win->utot))
            return 0;
    }
    win->alarm = 0;
    for (Py_ssize_t u = 0; u < s->nu; u++) {
        long long s1 = 0, s2 = 0;
        for (long long i = cf->max_bin; i < FEC_BINS; i++)
            if (__builtin_add_overflow(s1, win->tot[u * FEC_BINS + i], &s1) ||
                __builtin_add_overflow(s2, s->row[u * FEC_BINS + i], &s2))
                return 0;
        win->new_done[u] = s1;
        win->new_cur[u] = s2;
        if (__builtin_add_overflow(s1, s2, &win->tails[u]))
            return 0;
        if (win->tails[u] >= cf->max_bin_count)
            win->alarm = 1;
    }
    if (__builtin_add_overflow(win->utot, s->unc, &win->unc_all))
        return 0;
    win->codewords = 0;
    for (Py_ssize_t j = 0; j < s->n; j++)
        if (__builtin_add_overflow(win->tot[j], s->row[j], &win->d[j]) ||
            __builtin_add_overflow(win->codewords, win->d[j], &win->codewords))
            return 0;
    if (__builtin_add_overflow(win->codewords, win->unc_all, &win->codewords))
        return 0;
    return 1;
}

/* The closed bucket kept: the ring rolls, the sample opens the new bucket. */
static void fec_keep(fec_sample *s, const fec_window *win)
{
    long long i0 = s->w[FW_IDX];
    int64_t *slot = fec_slot(s, i0);
    slot[0] = i0;
    slot[1] = s->w[FW_UNC_CUR];
    memcpy(slot + 2, s->cur, (size_t)s->n * 8);
    memcpy(s->totals, win->tot, (size_t)s->n * 8);
    memcpy(s->cur, s->row, (size_t)s->n * 8);
    for (Py_ssize_t u = 0; u < s->nu; u++) {
        s->tail_done[u] = win->new_done[u];
        s->tail_cur[u] = win->new_cur[u];
    }
    s->w[FW_IDX] = s->i1;
    s->w[FW_UNC_TOT] = win->utot;
    s->w[FW_UNC_CUR] = s->unc;
    s->w[FW_ALARM] = win->alarm;
}

/* Each unit's fit over the window: a lane's over its own codewords, a port's over all. has[u]:
 * the unit had codewords. */
static void fec_judge(const fec_sample *s, const fec_window *win, int *has, fec_fit_t *fits)
{
    for (Py_ssize_t u = 0; u < s->nu; u++) {
        double d[FEC_BINS], total = 0.0;
        for (int i = 0; i < FEC_BINS; i++) {
            d[i] = (double)win->d[u * FEC_BINS + i];
            total += d[i];
        }
        if (!win->lanes)
            total = (double)win->codewords;
        has[u] = total > 0;
        if (has[u])
            fec_fit(d, total, &fits[u]);
    }
}

/* The window's events (appended to *events, made when first needed) and, once a publishing slot,
 * its gauges: each lane's, then the port's (its worst lane's: the highest FLR, then maxT). */
static int fec_publish(fec_sample *s, const fec_conf *cf, const fec_window *win, const int *has,
                       const fec_fit_t *fits, PyObject **events, PyObject *updates)
{
    PyObject *box_of[FEC_MAX_UNITS + 1]; /* the units' containers, then the port's (built by Python) */
    int publish = floor_div(s->i1, cf->per_slot) != s->w[FW_SLOT];
    double cer = (double)win->unc_all / (double)win->codewords, worst[3] = {0.0, 0.0, 0.0}; /* flr, cer, r2 */
    int have_worst = 0, worst_t = 0;
    PyObject *ts = PyTuple_GET_ITEM(s->e, 1);
    for (Py_ssize_t u = 0; u <= s->nu; u++) {
        box_of[u] = PyDict_GetItemWithError(s->boxes, u < s->nu ? PyTuple_GET_ITEM(s->units, u) : Py_None);
        if (box_of[u] == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_KeyError, "boxes must hold every unit's container and the port's (None)");
            return -1;
        }
    }
    for (Py_ssize_t u = 0; u < s->nu; u++) {
        if (!has[u]) /* no codewords */
            continue;
        const fec_fit_t *f = &fits[u];
        double flr = f->pred ? f->line[0] * cf->scale : 0.0, r2 = f->pred ? f->line[1] : 0.0;
        PyObject *unit = win->lanes ? PyTuple_GET_ITEM(s->units, u) : Py_None;
        if (publish) {
            double vals[3] = {flr, cer, r2};
            if (win->lanes && fec_gauges(cf, s->sent, unit, box_of[u], ts, vals, f->max_t, updates) < 0)
                return -1;
            if (!have_worst || (flr != worst[0] ? flr > worst[0] : f->max_t > worst_t)) {
                have_worst = 1;
                worst[0] = flr;
                worst[2] = r2;
                worst_t = f->max_t;
            }
        }
        int by_bin = win->tails[u] >= cf->max_bin_count;
        int by_flr = f->pred && f->line[1] >= cf->min_r2 && flr >= cf->flr;
        if (by_flr || by_bin) {
            PyObject *p = f->pred ? Py_BuildValue("(dddi)", f->line[0], f->line[1], f->line[2], f->pts)
                                  : (Py_INCREF(Py_None), Py_None);
            if (p == NULL || (*events == NULL && (*events = PyList_New(0)) == NULL)) {
                Py_XDECREF(p);
                return -1;
            }
            if (append_new(*events, Py_BuildValue("(OdNiLLL)", unit, flr, p, f->max_t, win->tails[u], win->unc_all,
                                                  win->codewords)) < 0)
                return -1;
        }
    }
    if (publish && have_worst) {
        worst[1] = cer;
        s->w[FW_SLOT] = floor_div(s->i1, cf->per_slot);
        return fec_gauges(cf, s->sent, Py_None, box_of[s->nu], ts, worst, worst_t, updates);
    }
    return 0;
}

/* One sample of a port in fast: 1 done (w updated; events: a new list of them, or NULL),
 * 0 Python's (nothing written), -1 error. */
static int fec_one(PyObject *e, PyObject *state, const fec_conf *cf, PyObject **events, PyObject *updates)
{
    fec_sample s;
    fec_window win;
    int has[FEC_MAX_UNITS];
    fec_fit_t fits[FEC_MAX_UNITS];
    *events = NULL;
    int r = fec_sample_open(&s, e, state, cf);
    if (r > 0 && s.i1 == s.w[FW_IDX])
        r = fec_add(&s);
    else if (r > 0 && (r = fec_close(&s, cf, &win)) > 0) {
        for (Py_ssize_t u = 0; u <= s.nu && r > 0; u++) /* the containers Python built, before any write */
            r = PyDict_Contains(s.boxes, u < s.nu ? PyTuple_GET_ITEM(s.units, u) : Py_None);
        if (r > 0) {
            fec_keep(&s, &win);
            if (win.codewords > 0) {
                fec_judge(&s, &win, has, fits);
                if (fec_publish(&s, cf, &win, has, fits, events, updates) < 0)
                    r = -1;
            }
        }
    }
    fec_sample_close(&s);
    if (r < 0)
        Py_CLEAR(*events);
    return r;
}

static PyObject *fec_run(PyObject *self, PyObject *args)
{
    PyObject *entries, *fast, *conf, *pending;
    fec_conf cf;
    if (!PyArg_ParseTuple(args, "O!O!OO!", &PyList_Type, &entries, &PyDict_Type, &fast, &conf, &PyList_Type,
                          &pending))
        return NULL;
    PyObject *todo = NULL, *held = NULL, *result = NULL;
    int direct = 1; /* no sample left to Python yet: updates straight to pending */
    if (fec_conf_read(conf, &cf) < 0 || (todo = PyDict_New()) == NULL || (held = PySet_New(NULL)) == NULL)
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
            rec = Py_BuildValue("(OO)", events ? events : Py_None, direct || !PyList_GET_SIZE(ups) ? Py_None : ups);
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
    fec_conf_clear(&cf);
    Py_XDECREF(todo);
    Py_XDECREF(held);
    return result;
}

PyDoc_STRVAR(fec_fits_doc,
"fec_fits(counts, units, lanes, codewords) -> per unit\n\n"
"link_degrading's fit for each unit's 16 bins of counts (a list of numbers, unit u's at\n"
"u * 16): None for a unit whose total (its bins' sum when lanes, else codewords) is not\n"
"positive, else (max_t, pred), max_t the highest bin with a count (0: none), pred None with\n"
"fewer than 3 of bins 1..15 holding any, else (predicted CER capped at 1, R^2, slope, points):\n"
"the least-squares line through log10(count / total), extrapolated to bins 16..20.");

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
    double codewords = PyFloat_AsDouble(codewords_obj);
    if (codewords == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *out = PyList_New(units);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t u = 0; u < units; u++) {
        double d[FEC_BINS], total = 0.0;
        for (int i = 0; i < FEC_BINS; i++) {
            d[i] = PyFloat_AsDouble(PyList_GET_ITEM(counts, u * FEC_BINS + i));
            if (d[i] == -1.0 && PyErr_Occurred()) {
                Py_DECREF(out);
                return NULL;
            }
            total += d[i];
        }
        if (!lanes)
            total = codewords;
        PyObject *unit;
        if (total > 0) {
            fec_fit_t f;
            fec_fit(d, total, &f);
            unit = fec_fit_value(&f);
        } else {
            unit = Py_None;
            Py_INCREF(unit);
        }
        if (unit == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, u, unit);
    }
    return out;
}

PyDoc_STRVAR(fec_changes_doc,
"fec_changes(sents, values, leaves) -> changed\n\n"
"link_degrading's gauges of a port's units: for each unit i, each of values[i] (a float\n"
"rounded to 4 significant digits, anything else as it is) that moved from sents[i][leaf]\n"
"(absent: moved; two floats: by more than the gauge's resolution, by position in leaves; else\n"
"!=) is written into sents[i] and listed as (i, leaf, value), in order.");

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
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t u = 0; u < units; u++) {
        PyObject *sent = PyList_GET_ITEM(sents, u), *row = PyList_GET_ITEM(values, u);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *leaf = PyTuple_GET_ITEM(leaves, i), *v = fec_published(PyTuple_GET_ITEM(row, i));
            int differs = v == NULL ? -1 : fec_change(sent, leaf, v, i);
            if (differs > 0)
                differs = append_new(out, Py_BuildValue("(nOO)", u, leaf, v)) < 0 ? -1 : 1;
            Py_XDECREF(v);
            if (differs < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
    }
    return out;
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
