/* swtel-asic-host: the ASIC plugin's helper process, in C (the C backend's; the Python
 * helper, agent/asic/host.py, is the pure-Python backend's and the fallback).
 *
 * It speaks host.py's protocol exactly, on the UNIX stream socket SOCK_FD, one request at
 * a time (frame: <u32 payload length> <u8 op> payload):
 *
 *     O msgpack [label, config]  -> o                     load and open PLUGIN_FD
 *     L                          -> l msgpack [gen, ports, counters]
 *     M <u64 n>                  -> m                     map n values of SHM_FD
 *     R <u64 generation>         -> r <i32 status> <i64 ts_ns>
 *     C                          -> c, then exit 0
 *     any request                -> e msgpack [exception class, message] on an error
 *
 * and keeps its containment: the plugin is loaded only as /proc/self/fd/PLUGIN_FD (the
 * file the agent checked), the values are written straight into the shared memfd, the
 * process dies with the agent (PR_SET_PDEATHSIG) and exits on EOF, SIGINT/SIGHUP/SIGPIPE
 * are ignored, and it ends with _exit (no teardown of a plugin in an unknown state). The
 * ABI's rules (load, the layout's checks) are agent/_ext/asic_abi.c's, the extension's own.
 *
 * Why C: a Python interpreter costs ~5.5 MiB PSS before it loads anything; this costs the
 * C library and the plugin (docs/PERFORMANCE.md). For the same reason msgpack is written
 * here (a few types out, one array of two strings in) rather than linked from a library.
 *
 *     swtel-asic-host SOCK_FD SHM_FD PARENT_PID PLUGIN_FD
 *     swtel-asic-host --version   -> "swtel-asic-host VERSION protocol N": the agent runs
 *                                    it only when both match its own (proxy.py) */
#include "../_ext/asic_abi.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SWTEL_EXT_VERSION
#error "built by setup.py, with the agent's version"
#endif
#define HOST_PROTOCOL 1             /* host.py's protocol; proxy.py's HOST_PROTOCOL */
#define MAX_FRAME (64u << 20)       /* bytes: host.py's MAX_FRAME */
#define SMALL_FRAME 64              /* requests up to this size need no allocation */

static int sock_fd = -1, shm_fd = -1, plugin_fd = -1;
static swtel_asic_loaded plugin;
static char label[256]; /* the plugin's path, for messages (as the extension keeps it) */
static uint64_t *values;  /* the shared mapping */
static size_t mapped_bytes, nvalues;

/* ------------------------------------------------------------------ the socket */

static void send_all(const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t k = send(sock_fd, p, len, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            _exit(0); /* the agent went away: as host.py, just end */
        p += k, len -= (size_t)k;
    }
}

static void recv_all(void *data, size_t len)
{
    char *p = data;
    while (len > 0) {
        ssize_t k = recv(sock_fd, p, len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            _exit(0); /* EOF (or a truncated request): the agent is done with us */
        p += k, len -= (size_t)k;
    }
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = (v << 8) | p[k];
    return v;
}

static void reply(char op, const void *payload, size_t len)
{
    unsigned char head[5];
    put_u32(head, (uint32_t)len);
    head[4] = (unsigned char)op;
    if (len == 0) {
        send_all(head, sizeof(head));
        return;
    }
    /* one send for a small reply (a read's), two for a large one (a layout's) */
    unsigned char small[5 + 16];
    if (len <= 16) {
        memcpy(small, head, 5);
        memcpy(small + 5, payload, len);
        send_all(small, 5 + len);
        return;
    }
    send_all(head, sizeof(head));
    send_all(payload, len);
}

/* ------------------------------------------------------------------ msgpack, the little used */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int failed; /* out of memory */
} buf;

static void put(buf *b, const void *data, size_t len)
{
    if (b->failed)
        return;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len)
            cap *= 2;
        unsigned char *grown = realloc(b->p, cap);
        if (grown == NULL) {
            b->failed = 1;
            return;
        }
        b->p = grown, b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
}

/* a marker byte and v big-endian in `width` bytes */
static void put_be(buf *b, unsigned char marker, uint64_t v, int width)
{
    unsigned char out[9];
    out[0] = marker;
    for (int k = 0; k < width; k++)
        out[1 + k] = (unsigned char)(v >> (8 * (width - 1 - k)));
    put(b, out, 1 + (size_t)width);
}

static void mp_uint(buf *b, uint64_t v)
{
    if (v < 0x80)
        put_be(b, (unsigned char)v, 0, 0);
    else if (v <= 0xff)
        put_be(b, 0xcc, v, 1);
    else if (v <= 0xffff)
        put_be(b, 0xcd, v, 2);
    else if (v <= 0xffffffffu)
        put_be(b, 0xce, v, 4);
    else
        put_be(b, 0xcf, v, 8);
}

static void mp_array(buf *b, size_t n)
{
    if (n < 16)
        put_be(b, (unsigned char)(0x90 | n), 0, 0);
    else if (n <= 0xffff)
        put_be(b, 0xdc, n, 2);
    else
        put_be(b, 0xdd, n, 4);
}

static void mp_str(buf *b, const char *s)
{
    size_t n = strlen(s);
    if (n < 32)
        put_be(b, (unsigned char)(0xa0 | n), 0, 0);
    else if (n <= 0xff)
        put_be(b, 0xd9, n, 1);
    else if (n <= 0xffff)
        put_be(b, 0xda, n, 2);
    else
        put_be(b, 0xdb, n, 4);
    put(b, s, n);
}

/* One str of a request at *p (end: its end), NUL-terminated into a new allocation; NULL
 * when it is not a msgpack str or holds a NUL (*why says which). */
static char *mp_take_str(const unsigned char **p, const unsigned char *end, const char **why)
{
    *why = "malformed open request (expected msgpack [label, config], two strings)";
    if (*p >= end)
        return NULL;
    unsigned m = *(*p)++;
    size_t n, width = m == 0xd9 ? 1 : m == 0xda ? 2 : m == 0xdb ? 4 : 0;
    if ((m & 0xe0) == 0xa0) {
        n = m & 0x1f;
    } else if (width && (size_t)(end - *p) >= width) {
        n = 0;
        for (size_t k = 0; k < width; k++)
            n = (n << 8) | *(*p)++;
    } else {
        return NULL;
    }
    if ((size_t)(end - *p) < n)
        return NULL;
    if (memchr(*p, '\0', n) != NULL) {
        *why = "embedded null character";
        return NULL;
    }
    char *s = malloc(n + 1);
    if (s == NULL) {
        *why = "out of memory";
        return NULL;
    }
    memcpy(s, *p, n);
    s[n] = '\0';
    *p += n;
    return s;
}

/* ------------------------------------------------------------------ errors */

static void error_reply(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void error_reply(const char *kind, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    buf b = {0};
    mp_array(&b, 2);
    mp_str(&b, kind);
    mp_str(&b, message);
    if (b.failed) { /* not even this: say so in the fewest bytes there are */
        static const unsigned char oom[] = {0x92, 0xab, 'M', 'e', 'm', 'o', 'r', 'y', 'E', 'r', 'r', 'o', 'r', 0xa0};
        reply('e', oom, sizeof(oom));
    } else {
        reply('e', b.p, b.len);
    }
    free(b.p);
}

/* ------------------------------------------------------------------ the requests */

static int need_open(void)
{
    if (plugin.h != NULL)
        return 1;
    error_reply("ValueError", "asic plugin handle is closed");
    return 0;
}

static void do_open(const unsigned char *p, size_t len)
{
    if (plugin.h != NULL) {
        error_reply("ValueError", "asic plugin is already open");
        return;
    }
    const unsigned char *end = p + len;
    const char *why = "malformed open request (expected msgpack [label, config], two strings)";
    char *name = NULL, *config = NULL;
    if (len > 0 && (*p == 0x92 || (*p == 0xdc && len >= 3 && p[1] == 0 && p[2] == 2))) {
        p += *p == 0x92 ? 1 : 3;
        name = mp_take_str(&p, end, &why);
        config = name ? mp_take_str(&p, end, &why) : NULL;
    }
    if (config == NULL || p != end) {
        error_reply(strcmp(why, "out of memory") == 0 ? "MemoryError" : "ValueError", "%s",
                    config == NULL ? why : "malformed open request (bytes after [label, config])");
        free(name);
        free(config);
        return;
    }
    char path[64], err[512] = "";
    snprintf(path, sizeof(path), "/proc/self/fd/%d", plugin_fd);
    snprintf(label, sizeof(label), "%s", name);
    if (swtel_asic_load(&plugin, path, config, err, sizeof(err)) < 0)
        error_reply("OSError", "asic plugin %s: %s", name, err);
    else
        reply('o', NULL, 0);
    free(name);
    free(config);
}

static void do_layout(void)
{
    if (!need_open())
        return;
    swtel_asic_layout l;
    char err[768] = "";
    int rc = swtel_asic_list(&plugin, &l, err, sizeof(err));
    if (rc == -2) {
        error_reply("MemoryError", "out of memory");
        return;
    }
    if (rc < 0) {
        error_reply("OSError", "asic plugin %s: %s", label, err);
        return;
    }
    /* [gen, [[name, parent, speed_mbps, flags]...], [[[name, width, kind, nbins, [[low, high]...]]...]...]]:
     * what asic_layout returns, its tuples as arrays (proxy.py makes them tuples again) */
    buf b = {0};
    mp_array(&b, 3);
    mp_uint(&b, l.generation);
    mp_array(&b, (size_t)l.nports);
    for (int i = 0; i < l.nports; i++) {
        mp_array(&b, 4);
        mp_str(&b, l.ports[i].name);
        mp_str(&b, l.ports[i].parent);
        mp_uint(&b, l.ports[i].speed_mbps);
        mp_uint(&b, l.ports[i].flags);
    }
    mp_array(&b, (size_t)l.nports);
    for (int i = 0; i < l.nports; i++) {
        mp_array(&b, l.first[i + 1] - l.first[i]);
        for (size_t k = l.first[i]; k < l.first[i + 1]; k++) {
            const struct swtel_asic_counter *c = &l.counters[k];
            int hist = c->kind == SWTEL_ASIC_HISTOGRAM;
            mp_array(&b, 5);
            mp_str(&b, c->name);
            mp_uint(&b, c->width);
            mp_uint(&b, c->kind);
            mp_uint(&b, c->nbins);
            mp_array(&b, hist ? c->nbins : 0);
            for (uint32_t j = 0; hist && j < c->nbins; j++) {
                mp_array(&b, 2);
                mp_uint(&b, l.bins[l.bin_first[k] + j].low);
                mp_uint(&b, l.bins[l.bin_first[k] + j].high);
            }
        }
    }
    swtel_asic_layout_free(&l);
    if (b.failed || b.len > MAX_FRAME)
        error_reply("MemoryError", b.failed ? "out of memory" : "a layout of more than %u bytes", MAX_FRAME);
    else
        reply('l', b.p, b.len);
    free(b.p);
    malloc_trim(0); /* the layout's memory back to the kernel: from here on, reads only */
}

static void do_map(uint64_t n)
{
    struct stat st;
    if (fstat(shm_fd, &st) < 0) {
        error_reply("OSError", "shared buffer: %s", strerror(errno));
        return;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (n > size / 8) {
        error_reply("ValueError", "shared buffer has %llu bytes, %llu values need %llu", (unsigned long long)size,
                    (unsigned long long)n, (unsigned long long)n * 8);
        return;
    }
    if (values != NULL && mapped_bytes != size) {
        munmap(values, mapped_bytes);
        values = NULL, mapped_bytes = 0;
    }
    if (values == NULL && size > 0) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0);
        if (m == MAP_FAILED) {
            nvalues = 0;
            error_reply("OSError", "shared buffer: %s", strerror(errno));
            return;
        }
        values = m, mapped_bytes = size;
    }
    nvalues = (size_t)n;
    reply('m', NULL, 0);
}

static void do_read(uint64_t generation)
{
    if (!need_open())
        return;
    char err[SWTEL_ASIC_ERR_MAX] = "";
    int64_t ts = 0;
    uint64_t none; /* no values mapped: the plugin still gets a valid pointer */
    int rc = plugin.ops->read(plugin.h, generation, values != NULL ? values : &none, nvalues, &ts, err, sizeof(err));
    err[sizeof(err) - 1] = '\0'; /* the plugin's text may lack its NUL */
    if (rc != SWTEL_ASIC_OK && rc != SWTEL_ASIC_ECHANGED) {
        error_reply("OSError", "asic plugin %s: read failed: %s", label, err[0] ? err : "no reason given");
        return;
    }
    unsigned char out[12];
    put_u32(out, (uint32_t)rc);
    for (int k = 0; k < 8; k++)
        out[4 + k] = (unsigned char)((uint64_t)ts >> (8 * k));
    reply('r', out, sizeof(out));
}

static void serve(void)
{
    unsigned char small[SMALL_FRAME];
    for (;;) {
        unsigned char head[5];
        recv_all(head, sizeof(head));
        uint32_t len = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
        char op = (char)head[4];
        if (len > MAX_FRAME) { /* no request is near this: the stream cannot be trusted any more */
            error_reply("ValueError", "a request of %u bytes (at most %u)", len, MAX_FRAME);
            _exit(0);
        }
        unsigned char *payload = len <= sizeof(small) ? small : malloc(len);
        if (payload == NULL) {
            error_reply("MemoryError", "out of memory");
            _exit(0);
        }
        recv_all(payload, len);
        if ((op == 'R' || op == 'M') && len != 8) {
            error_reply("ValueError", "request %c: %u payload bytes (8 expected)", op, len);
        } else if (op == 'R') {
            do_read(get_u64(payload));
        } else if (op == 'M') {
            do_map(get_u64(payload));
        } else if (op == 'L') {
            do_layout();
        } else if (op == 'O') {
            do_open(payload, len);
        } else if (op == 'C') {
            if (plugin.h != NULL)
                plugin.ops->close(plugin.h);
            reply('c', NULL, 0);
            _exit(0); /* no dlclose: a plugin's library may be in any state */
        } else {
            error_reply("ValueError", "unknown request %d", (unsigned char)op);
        }
        if (payload != small)
            free(payload);
    }
}

static int parse_fd(const char *s, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max)
        return -1;
    return (int)v;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("swtel-asic-host %s protocol %d\n", SWTEL_EXT_VERSION, HOST_PROTOCOL);
        return 0;
    }
    int parent = argc == 5 ? parse_fd(argv[3], INT_MAX) : -1;
    sock_fd = argc == 5 ? parse_fd(argv[1], INT_MAX) : -1;
    shm_fd = argc == 5 ? parse_fd(argv[2], INT_MAX) : -1;
    plugin_fd = argc == 5 ? parse_fd(argv[4], INT_MAX) : -1;
    if (parent < 0 || sock_fd < 0 || shm_fd < 0 || plugin_fd < 0) {
        fprintf(stderr, "usage: swtel-asic-host SOCK_FD SHM_FD PARENT_PID PLUGIN_FD | --version\n");
        return 2;
    }
    /* SIGKILL when the agent (the thread that started us) goes, even while the plugin hangs */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != (pid_t)parent) /* it died before prctl took effect */
        _exit(0);
    /* the agent decides when this process ends (a request, EOF or SIGKILL), not a terminal */
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    serve();
    _exit(0);
}
