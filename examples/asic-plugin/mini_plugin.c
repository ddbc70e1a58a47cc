/* A minimal swtel ASIC plugin for the loader's tests (and the smallest example of
 * the ABI): N ports "p0".."pN-1", three counters each, values = reads * weight.
 *
 * Config keys: ports=N (default 2), fail=open|read (fail on purpose), grow=K (after
 * K reads one port is added: the generation changes), drop=K (after K reads the
 * last port goes), kinds=1 (ABI 1.1: two more descriptors per port, a PEAK and a
 * four-bin HISTOGRAM), freeze=K (the values stop moving after K reads: a steady state
 * every exporter must reach exactly). Build with -DABI_VERSION=N to test the version check,
 * -DABI_1_0 to build it as a 1.0 plugin would be (no bin_info, the 1.0 ops_size), or
 * -DNO_ENTRY to build a library without the entry point. */
#include "swtel_asic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef ABI_VERSION
#define ABI_VERSION SWTEL_ASIC_ABI_VERSION
#endif

struct mini {
    int ports, grow, drop, fail_read, kinds, freeze;
    uint64_t reads;
};

/* kinds=1: the RS-FEC histogram's bins, codewords by corrected symbols (inclusive) */
#define NBINS 4
#ifndef ABI_1_0
static const struct swtel_asic_bin BINS[NBINS] = {{0, 0}, {1, 1}, {2, 3}, {4, UINT64_MAX}};
#endif

static int descriptors(const struct mini *m)
{
    return m->kinds ? 5 : 3;
}

static int values_per_port(const struct mini *m)
{
    return m->kinds ? 3 + 1 + NBINS : 3;
}

static int port_count_at(const struct mini *m)
{
    int n = m->ports;
    if (m->grow && m->reads >= (uint64_t)m->grow)
        n++;
    if (m->drop && m->reads >= (uint64_t)m->drop && n > 0)
        n--;
    return n;
}

static void *mini_open(const char *config, char *err, size_t errlen)
{
    struct mini m = {.ports = 2};
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", config);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        if (strncmp(tok, "ports=", 6) == 0)
            m.ports = atoi(tok + 6);
        else if (strncmp(tok, "grow=", 5) == 0)
            m.grow = atoi(tok + 5);
        else if (strncmp(tok, "drop=", 5) == 0)
            m.drop = atoi(tok + 5);
        else if (strncmp(tok, "freeze=", 7) == 0)
            m.freeze = atoi(tok + 7);
        else if (strcmp(tok, "kinds=1") == 0)
            m.kinds = 1;
        else if (strcmp(tok, "fail=read") == 0)
            m.fail_read = 1;
        else if (strcmp(tok, "fail=open") == 0) {
            snprintf(err, errlen, "mini: the ASIC is not responding (on purpose)");
            return NULL;
        } else {
            snprintf(err, errlen, "mini: unknown key '%s'", tok);
            return NULL;
        }
    }
    struct mini *h = malloc(sizeof(*h));
    if (h != NULL)
        *h = m;
    else
        snprintf(err, errlen, "mini: out of memory");
    return h;
}

static uint64_t mini_generation(void *h)
{
    return (uint64_t)port_count_at(h);
}

static int mini_port_count(void *h)
{
    return port_count_at(h);
}

static int mini_port_info(void *h, int port, struct swtel_asic_port *out)
{
    if (port < 0 || port >= port_count_at(h))
        return -1;
    snprintf(out->name, sizeof(out->name), "p%d", port);
    out->speed_mbps = 100000;
    out->flags = SWTEL_ASIC_PORT_UP;
    return 0;
}

static const char *const names[] = {"HwIfInOctets", "phy_symbol_errors", "HwIfOutQLen",
                                    "tc_peak_occupancy_3", "phy_rs_fec_histogram"};

static int mini_counter_count(void *h, int port)
{
    return port >= 0 && port < port_count_at(h) ? descriptors(h) : -1;
}

static int mini_counter_info(void *h, int port, int counter, struct swtel_asic_counter *out)
{
    if (port < 0 || port >= port_count_at(h) || counter < 0 || counter >= descriptors(h))
        return -1;
    snprintf(out->name, sizeof(out->name), "%s", names[counter]);
    out->width = 64;
    out->kind = counter == 2 ? SWTEL_ASIC_GAUGE : SWTEL_ASIC_COUNTER;
    if (counter == 3)
        out->kind = SWTEL_ASIC_PEAK;
    if (counter == 4) {
        out->kind = SWTEL_ASIC_HISTOGRAM;
        out->nbins = NBINS;
    }
    return 0;
}

#ifndef ABI_1_0
static int mini_bin_info(void *h, int port, int counter, int bin, struct swtel_asic_bin *out)
{
    if (port < 0 || port >= port_count_at(h) || counter != 4 || bin < 0 || bin >= NBINS)
        return -1;
    *out = BINS[bin];
    return 0;
}
#endif

static int mini_read(void *h, uint64_t generation, uint64_t *values, size_t n, int64_t *ts_ns,
                     char *err, size_t errlen)
{
    struct mini *m = h;
    if (m->fail_read) {
        snprintf(err, errlen, "mini: register read timed out (on purpose)");
        return SWTEL_ASIC_ERROR;
    }
    m->reads++;
    int ports = port_count_at(m);
    int per = values_per_port(m);
    if (generation != (uint64_t)ports || n != (size_t)ports * (size_t)per)
        return SWTEL_ASIC_ECHANGED;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    *ts_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    uint64_t k = m->freeze && m->reads > (uint64_t)m->freeze ? (uint64_t)m->freeze : m->reads;
    for (int p = 0; p < ports; p++) {
        uint64_t *v = values + (size_t)p * (size_t)per;
        v[0] = k * 1000 * (uint64_t)(p + 1);
        v[1] = k * (uint64_t)p;
        v[2] = (k % 2) * 10; /* a level that goes up and down */
        if (m->kinds) {
            v[3] = (k * 37 + (uint64_t)p) % 1000; /* the peak since the last read */
            for (int b = 0; b < NBINS; b++) /* cumulative codeword counts, bin by bin */
                v[4 + b] = k * (uint64_t)(NBINS - b) * (uint64_t)(p + 1);
        }
    }
    return SWTEL_ASIC_OK;
}

static void mini_close(void *h)
{
    free(h);
}

static const struct swtel_asic_ops ops = {
    .abi_version = ABI_VERSION,
#ifdef ABI_1_0
    .ops_size = SWTEL_ASIC_OPS_SIZE_1_0, /* what a plugin built against the 1.0 header says */
#else
    .ops_size = sizeof(struct swtel_asic_ops),
    .bin_info = mini_bin_info,
#endif
    .name = "mini",
    .open = mini_open,
    .generation = mini_generation,
    .port_count = mini_port_count,
    .port_info = mini_port_info,
    .counter_count = mini_counter_count,
    .counter_info = mini_counter_info,
    .read = mini_read,
    .close = mini_close,
};

#ifndef NO_ENTRY
const struct swtel_asic_ops *swtel_asic_plugin(void)
{
    return &ops;
}
#else
const struct swtel_asic_ops *not_the_entry(void)
{
    return &ops;
}
#endif
