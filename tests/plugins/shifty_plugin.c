/* A swtel ASIC plugin that behaves as a real SDK sometimes does, for the hardware-boundary
 * tests: ports added one at a time (the generation changes on consecutive reads), a layout
 * that never settles, a timestamp on the wrong clock, a slow first open.
 *
 * Ports "q0".."qN-1", three counters each:
 *   HwIfInOctets       64-bit, ok_reads * 1000 * (port + 1)
 *   phy_symbol_errors  32-bit, ok_reads * 100,000,000 mod 2^32 (wraps about every 43 reads)
 *   HwIfOutQLen        gauge, 0 or 10
 * where ok_reads counts the reads that returned values. Every value is thus a known
 * function of ok_reads, and a test can check each delta exactly.
 *
 * Config keys (space-separated): ports=N (default 2); grow=A,B,... (at the A-th, B-th ...
 * read call one port is added: consecutive numbers change the generation on consecutive
 * reads); stuck=K (from the K-th read call on, every read answers ECHANGED);
 * clock=mono (stamp CLOCK_MONOTONIC, a plugin author's mistake); slow_open_ms=M;
 * slow_first_read_ms=M (the first read takes M ms: it outlasts its poll);
 * jump=K (from the K-th successful read on, q0's octets are 1e13 higher: more than a
 * 400G port can carry); down=N (port N is operationally down); parent=NAME (the last
 * port is a breakout of NAME); width=W (phy_symbol_errors' declared width; values then
 * wrap at 2^W); kind=K (HwIfOutQLen's declared kind); prefix=NAME (ports NAME0..NAMEN-1,
 * e.g. swp, to share names with a kernel's interfaces); open_gate=PATH (open returns only
 * once PATH exists, so a test decides when a slow open ends, without a timed sleep). */
#include "swtel_asic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_GROW 16

struct shifty {
    int ports, ngrow, grow[MAX_GROW], stuck, mono, jump, down, width, kind, slow_first_read_ms;
    char parent[SWTEL_ASIC_NAME_MAX];
    char prefix[16];
    uint64_t calls, ok_reads;
};

static int port_count_at(const struct shifty *s)
{
    int n = s->ports;
    for (int i = 0; i < s->ngrow; i++)
        if (s->calls >= (uint64_t)s->grow[i])
            n++;
    return n;
}

static void *shifty_open(const char *config, char *err, size_t errlen)
{
    struct shifty s = {.ports = 2, .down = -1, .width = 32, .kind = SWTEL_ASIC_GAUGE, .prefix = "q"};
    char buf[512], gate[256] = "";
    int slow_ms = 0;
    snprintf(buf, sizeof(buf), "%s", config);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        if (strncmp(tok, "ports=", 6) == 0) {
            s.ports = atoi(tok + 6);
        } else if (strncmp(tok, "grow=", 5) == 0) {
            for (char *p = tok + 5; *p && s.ngrow < MAX_GROW;) {
                s.grow[s.ngrow++] = (int)strtol(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else if (strncmp(tok, "stuck=", 6) == 0) {
            s.stuck = atoi(tok + 6);
        } else if (strncmp(tok, "jump=", 5) == 0) {
            s.jump = atoi(tok + 5);
        } else if (strncmp(tok, "down=", 5) == 0) {
            s.down = atoi(tok + 5);
        } else if (strncmp(tok, "width=", 6) == 0) {
            s.width = atoi(tok + 6);
        } else if (strncmp(tok, "kind=", 5) == 0) {
            s.kind = atoi(tok + 5);
        } else if (strncmp(tok, "parent=", 7) == 0) {
            snprintf(s.parent, sizeof(s.parent), "%s", tok + 7);
        } else if (strncmp(tok, "prefix=", 7) == 0) {
            snprintf(s.prefix, sizeof(s.prefix), "%s", tok + 7);
        } else if (strncmp(tok, "open_gate=", 10) == 0) {
            snprintf(gate, sizeof(gate), "%s", tok + 10);
        } else if (strcmp(tok, "clock=mono") == 0) {
            s.mono = 1;
        } else if (strncmp(tok, "slow_open_ms=", 13) == 0) {
            slow_ms = atoi(tok + 13);
        } else if (strncmp(tok, "slow_first_read_ms=", 19) == 0) {
            s.slow_first_read_ms = atoi(tok + 19);
        } else {
            snprintf(err, errlen, "shifty: unknown key '%s'", tok);
            return NULL;
        }
    }
    if (slow_ms > 0) {
        struct timespec d = {slow_ms / 1000, (long)(slow_ms % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
    while (gate[0] && access(gate, F_OK) != 0) { /* the agent's open deadline bounds this */
        struct timespec d = {0, 5000000L};
        nanosleep(&d, NULL);
    }
    struct shifty *h = malloc(sizeof(*h));
    if (h == NULL) {
        snprintf(err, errlen, "shifty: out of memory");
        return NULL;
    }
    *h = s;
    return h;
}

static uint64_t shifty_generation(void *h)
{
    const struct shifty *s = h;
    if (s->stuck && s->calls >= (uint64_t)s->stuck)
        return 1000 + s->calls; /* a new generation every time it is asked */
    return (uint64_t)port_count_at(s);
}

static int shifty_port_count(void *h)
{
    return port_count_at(h);
}

static int shifty_port_info(void *h, int port, struct swtel_asic_port *out)
{
    if (port < 0 || port >= port_count_at(h))
        return -1;
    const struct shifty *s = h;
    snprintf(out->name, sizeof(out->name), "%s%d", s->prefix, port);
    if (port == port_count_at(s) - 1)
        snprintf(out->parent, sizeof(out->parent), "%s", s->parent);
    out->speed_mbps = 400000;
    out->flags = port == s->down ? 0 : SWTEL_ASIC_PORT_UP;
    return 0;
}

static const char *const names[] = {"HwIfInOctets", "phy_symbol_errors", "HwIfOutQLen"};

static int shifty_counter_count(void *h, int port)
{
    return port >= 0 && port < port_count_at(h) ? 3 : -1;
}

static int shifty_counter_info(void *h, int port, int counter, struct swtel_asic_counter *out)
{
    if (port < 0 || port >= port_count_at(h) || counter < 0 || counter > 2)
        return -1;
    snprintf(out->name, sizeof(out->name), "%s", names[counter]);
    const struct shifty *s = h;
    out->width = counter == 1 ? (uint8_t)s->width : 64;
    out->kind = counter == 2 ? (uint8_t)s->kind : SWTEL_ASIC_COUNTER;
    return 0;
}

static int shifty_read(void *h, uint64_t generation, uint64_t *values, size_t n, int64_t *ts_ns,
                       char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct shifty *s = h;
    s->calls++;
    if (s->calls == 1 && s->slow_first_read_ms > 0) {
        struct timespec d = {s->slow_first_read_ms / 1000, (long)(s->slow_first_read_ms % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
    if (s->stuck && s->calls >= (uint64_t)s->stuck)
        return SWTEL_ASIC_ECHANGED;
    int ports = port_count_at(s);
    if (generation != (uint64_t)ports || n != (size_t)ports * 3)
        return SWTEL_ASIC_ECHANGED;
    s->ok_reads++;
    struct timespec ts;
    clock_gettime(s->mono ? CLOCK_MONOTONIC : CLOCK_REALTIME, &ts);
    *ts_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    for (int p = 0; p < ports; p++) {
        values[p * 3 + 0] = s->ok_reads * 1000 * (uint64_t)(p + 1);
        if (p == 0 && s->jump && s->ok_reads >= (uint64_t)s->jump)
            values[0] += 10000000000000ULL;
        uint64_t mask = s->width >= 64 ? ~0ULL : (1ULL << s->width) - 1;
        values[p * 3 + 1] = (s->ok_reads * 100000000ULL) & mask;
        values[p * 3 + 2] = (s->ok_reads % 2) * 10;
    }
    return SWTEL_ASIC_OK;
}

static void shifty_close(void *h)
{
    free(h);
}

static const struct swtel_asic_ops ops = {
    .abi_version = SWTEL_ASIC_ABI_VERSION,
    .ops_size = sizeof(struct swtel_asic_ops),
    .name = "shifty",
    .open = shifty_open,
    .generation = shifty_generation,
    .port_count = shifty_port_count,
    .port_info = shifty_port_info,
    .counter_count = shifty_counter_count,
    .counter_info = shifty_counter_info,
    .read = shifty_read,
    .close = shifty_close,
};

const struct swtel_asic_ops *swtel_asic_plugin(void)
{
    return &ops;
}
