/* sysfs reader: files kept open by Python, each read with pread(fd, buf, n, 0)
 * per poll and parsed as an unsigned decimal (RDMA hw_counters, carrier_changes). */
#include "swtel.h"

#include <errno.h>
#include <unistd.h>

PyDoc_STRVAR(sysfs_read_doc,
"sysfs_read(fds, out, status) -> int\n\n"
"fds: int32 buffer of open file descriptors; out: u64 buffer, one value per\n"
"fd, written in place; status: int32 per fd, 0 when read, else the errno\n"
"(EINVAL for text that is not an unsigned integer); a failed fd keeps its\n"
"old value. Returns the number of values read.");

static const swtel_bufspec sysfs_bufs[] = {{4, 0, "fds"}, {8, 1, "out"}, {4, 1, "status"}};

static PyObject *sysfs_read(PyObject *self, PyObject *args)
{
    PyObject *o[3];
    Py_buffer b[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2]) || swtel_get_buffers(o, b, sysfs_bufs, 3) < 0)
        return NULL;
    Py_buffer *fds = &b[0], *out = &b[1], *status = &b[2];
    Py_ssize_t n = fds->len / 4;
    int ok = -1;
    if (out->len / 8 < n || status->len / 4 < n) {
        PyErr_SetString(PyExc_ValueError, "out/status shorter than fds");
    } else {
        const int32_t *fd = fds->buf;
        uint64_t *val = out->buf;
        int32_t *st = status->buf;
        ok = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            char buf[32];
            ssize_t len = pread(fd[i], buf, sizeof(buf), 0);
            if (len < 0) {
                st[i] = errno;
                continue;
            }
            uint64_t v = 0;
            ssize_t j = 0;
            while (j < len && (buf[j] == ' ' || buf[j] == '\t'))
                j++;
            ssize_t start = j;
            int overflow = 0;
            for (; j < len && buf[j] >= '0' && buf[j] <= '9'; j++) {
                uint64_t digit = (uint64_t)(buf[j] - '0');
                if (v > (UINT64_MAX - digit) / 10)
                    overflow = 1;
                v = v * 10 + digit;
            }
            if (j == start || overflow || (j < len && buf[j] != '\n' && buf[j] != ' ')) {
                st[i] = EINVAL;
                continue;
            }
            val[i] = v;
            st[i] = 0;
            ok++;
        }
        Py_END_ALLOW_THREADS
    }
    swtel_release_buffers(b, 3);
    return ok < 0 ? NULL : PyLong_FromLong(ok);
}

PyMethodDef swtel_sysfs_methods[] = {
    {"sysfs_read", sysfs_read, METH_VARARGS, sysfs_read_doc},
    {NULL, NULL, 0, NULL},
};
