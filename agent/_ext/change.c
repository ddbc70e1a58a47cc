/* Change kernel: compare this poll's raw values with the previous ones and
 * report only what changed, wrap- and reset-aware. Unchanged counters cost one
 * comparison and no Python work. */
#include "swtel.h"

#include <string.h>

/* hsflowd's rule: a jump this large in one poll is a discontinuity, not traffic. */
#define JUMP_32 0x7FFFFFFFULL
#define JUMP_64 10000000000000ULL /* 1e13 */

PyDoc_STRVAR(diff_doc,
"diff(cur, prev, acc, known, widths, kinds, out_idx, out_delta, out_flags) -> int\n\n"
"cur: u64 raw values just read. prev (u64), acc (u64, cumulative exported\n"
"values) and known (u8, 1 once a counter has a baseline) are state, updated\n"
"in place. widths (u8: 32 or 64) and kinds (u8: 0 counter, 1 gauge, 2 hidden)\n"
"describe each counter; hidden ones are skipped.\n"
"For every changed counter, its index (u32), delta (i64) and\n"
"flags (u8: CHANGED, WRAP, RESET, NEW) are appended to the out buffers.\n"
"A 32-bit counter that drops by more than half its range wrapped; any other\n"
"drop of a counter is a reset (delta = new value); a jump, or a value after\n"
"a reset, above 2^31-1 (32-bit) or 1e13 (64-bit) is a discontinuity\n"
"(delta 0, flagged RESET).\n"
"acc never decreases for a counter. Returns the number of changes.");

static PyObject *diff(PyObject *self, PyObject *args)
{
    static const swtel_bufspec specs[9] = {
        {8, 0, "cur"},   {8, 1, "prev"},    {8, 1, "acc"},       {1, 1, "known"},    {1, 0, "widths"},
        {1, 0, "kinds"}, {4, 1, "out_idx"}, {8, 1, "out_delta"}, {1, 1, "out_flags"},
    };
    PyObject *o[9];
    Py_buffer b[9];
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8]) ||
        swtel_get_buffers(o, b, specs, 9) < 0)
        return NULL;
    Py_ssize_t n = b[0].len / 8, nchanged = -1;
    for (int k = 1; k < 9; k++) {
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
    nchanged = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t c = cur[i], p = prev[i];
        /* A "32-bit" counter holding a wider value is really 64-bit: never wrap it. */
        int w32 = width[i] == 32 && c <= 0xFFFFFFFFULL && p <= 0xFFFFFFFFULL;
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
            if (d > (w32 ? JUMP_32 : JUMP_64)) {
                delta = 0;
                flags |= SWTEL_F_RESET;
            } else {
                delta = (int64_t)d;
                acc[i] += d;
            }
        } else if (w32 && p - c > 0x80000000ULL) {
            uint64_t d = c + 0x100000000ULL - p;
            delta = (int64_t)d;
            acc[i] += d;
            flags |= SWTEL_F_WRAP;
        } else {
            /* A reset: the new value is what was counted since. A value too
             * large to be that is a discontinuity like a jump. */
            delta = c > (w32 ? JUMP_32 : JUMP_64) ? 0 : (int64_t)c;
            acc[i] += (uint64_t)delta;
            flags |= SWTEL_F_RESET;
        }
        prev[i] = c;
        oidx[nchanged] = (uint32_t)i;
        odelta[nchanged] = delta;
        oflags[nchanged] = flags;
        nchanged++;
    }
    Py_END_ALLOW_THREADS
done:
    swtel_release_buffers(b, 9);
    return nchanged < 0 ? NULL : PyLong_FromSsize_t(nchanged);
}

PyMethodDef swtel_change_methods[] = {
    {"diff", diff, METH_VARARGS, diff_doc},
    {NULL, NULL, 0, NULL},
};
