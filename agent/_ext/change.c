/* Change kernel: compare this poll's raw values with the previous ones and
 * report only what changed, wrap- and reset-aware. Unchanged counters cost one
 * comparison and no Python work. */
#include "swtel.h"

#include <string.h>

/* Without a per-counter limit, hsflowd's rule: a jump this large in one poll is a
 * discontinuity, not traffic (a w-bit counter: half its range). */
#define JUMP_64 10000000000000ULL /* 1e13 */
/* Without a port speed: a 64-bit counter may move this much per second (bits of four
 * 800G links), so a long poll interval does not turn real traffic into a jump. */
#define DEFAULT_RATE 3.2e12

/* The largest move `rate` per second allows in `elapsed` seconds, with a 2x margin. */
static uint64_t limit_for(double rate, double elapsed)
{
    /* never above INT64_MAX: a delta is reported as int64 */
    double l = rate * elapsed * 2.0;
    if (l >= 9.2e18)
        return (uint64_t)INT64_MAX;
    return l < 1.0 ? 1 : (uint64_t)l;
}

PyDoc_STRVAR(diff_doc,
"diff(cur, prev, acc, known, widths, kinds, out_idx, out_delta, out_flags[, rates, elapsed]) -> int\n\n"
"cur: u64 raw values just read. prev (u64), acc (u64, cumulative exported\n"
"values) and known (u8, 1 once a counter has a baseline) are state, updated\n"
"in place. widths (u8: 32, 40, 48 or 64) and kinds (u8: 0 counter, 1 gauge,\n"
"2 hidden) describe each counter; hidden ones are skipped. rates (u64, optional):\n"
"the most a counter can count per second (its port's speed in bits/s; 0: unknown),\n"
"and elapsed (seconds since the previous read) give the largest move one read can\n"
"make: 2 x rate x elapsed; unknown: 1e13, or 2 x 3.2e12 x elapsed if larger. A\n"
"w-bit counter never moves more than half its range.\n"
"For every changed counter, its index (u32), delta (i64) and\n"
"flags (u8: CHANGED, WRAP, RESET, NEW, JUMP) are appended to the out buffers.\n"
"A w-bit counter (w < 64) that drops by more than half its range wrapped; any\n"
"other drop of a counter is a reset (delta = new value); a move, or a value after\n"
"a reset, above the limit is a discontinuity (delta 0, flagged RESET and JUMP).\n"
"acc never decreases for a counter. Returns the number of changes.");

static PyObject *diff(PyObject *self, PyObject *args)
{
    static const swtel_bufspec specs[10] = {
        {8, 0, "cur"},   {8, 1, "prev"},    {8, 1, "acc"},       {1, 1, "known"},     {1, 0, "widths"},
        {1, 0, "kinds"}, {4, 1, "out_idx"}, {8, 1, "out_delta"}, {1, 1, "out_flags"}, {8, 0, "rates"},
    };
    PyObject *o[10] = {NULL};
    Py_buffer b[10];
    double elapsed = 0.0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO|Od", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &elapsed))
        return NULL;
    if (!(elapsed >= 0.0 && elapsed < 1e9)) {
        PyErr_SetString(PyExc_ValueError, "elapsed must be a number of seconds >= 0");
        return NULL;
    }
    int nbuf = (o[9] != NULL && o[9] != Py_None) ? 10 : 9;
    if (swtel_get_buffers(o, b, specs, nbuf) < 0)
        return NULL;
    Py_ssize_t n = b[0].len / 8, nchanged = -1;
    for (int k = 1; k < nbuf; k++) {
        if (b[k].len / specs[k].itemsize < n) {
            PyErr_Format(PyExc_ValueError, "%s is shorter than cur", specs[k].what);
            goto done;
        }
    }
    const uint64_t *cur = b[0].buf;
    uint64_t *prev = b[1].buf, *acc = b[2].buf;
    uint8_t *known = b[3].buf;
    const uint8_t *width = b[4].buf, *kind = b[5].buf;
    uint32_t *oidx = b[6].buf;
    int64_t *odelta = b[7].buf;
    uint8_t *oflags = b[8].buf;
    const uint64_t *rates = nbuf == 10 ? b[9].buf : NULL;
    uint64_t default_limit = limit_for(DEFAULT_RATE, elapsed);
    if (default_limit < JUMP_64)
        default_limit = JUMP_64;
    nchanged = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t c = cur[i], p = prev[i];
        unsigned w = width[i];
        /* A narrow counter holding a wider value is really 64-bit: never wrap it. */
        int narrow = w < 64 && w >= 8 && (c >> w) == 0 && (p >> w) == 0;
        uint64_t half = narrow ? (1ULL << (w - 1)) : 0;
        uint64_t limit = rates != NULL && rates[i] ? limit_for((double)rates[i], elapsed) : default_limit;
        if (narrow && limit > half - 1)
            limit = half - 1;
        int64_t delta;
        uint8_t flags = SWTEL_F_CHANGED;
        if (kind[i] == 2) /* HIDDEN: read but never reported */
            continue;
        if (!known[i]) {
            known[i] = 1;
            prev[i] = acc[i] = c;
            delta = 0;
            flags |= SWTEL_F_NEW;
        } else if (c == p) {
            continue;
        } else if (kind[i]) { /* gauge: passes through */
            delta = (int64_t)(c - p);
            acc[i] = c;
        } else if (c > p) {
            uint64_t d = c - p;
            if (d > limit) {
                delta = 0;
                flags |= SWTEL_F_RESET | SWTEL_F_JUMP;
            } else {
                delta = (int64_t)d;
                acc[i] += d;
            }
        } else if (narrow && p - c > half) {
            uint64_t d = c + (half << 1) - p;
            if (d > limit) {
                delta = 0;
                flags |= SWTEL_F_RESET | SWTEL_F_JUMP;
            } else {
                delta = (int64_t)d;
                acc[i] += d;
                flags |= SWTEL_F_WRAP;
            }
        } else {
            /* A reset: the new value is what was counted since. A value too
             * large to be that is a discontinuity like a jump. */
            flags |= SWTEL_F_RESET;
            if (c > limit) {
                delta = 0;
                flags |= SWTEL_F_JUMP;
            } else {
                delta = (int64_t)c;
            }
            acc[i] += (uint64_t)delta;
        }
        prev[i] = c;
        oidx[nchanged] = (uint32_t)i;
        odelta[nchanged] = delta;
        oflags[nchanged] = flags;
        nchanged++;
    }
    Py_END_ALLOW_THREADS
done:
    swtel_release_buffers(b, nbuf);
    return nchanged < 0 ? NULL : PyLong_FromSsize_t(nchanged);
}

PyMethodDef swtel_change_methods[] = {
    {"diff", diff, METH_VARARGS, diff_doc},
    {NULL, NULL, 0, NULL},
};
