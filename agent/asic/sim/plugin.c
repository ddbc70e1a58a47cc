/* swtel's simulated Spectrum switch: an ASIC plugin (swtel_asic.h, ABI 1).
 *
 * Config: space-separated key=value: role=spine|leaf|host seed=N start=<epoch ns>
 * ports=N uplinks=4|8 load=0.0..1.0 asic=spectrum1..4 (the buffer cell: 96, 144, 144, 192 B)
 * scenario=NAME[@START[-[END]]][:PORT[/PRIO]] (repeatable, or comma-separated). Scenarios:
 * symbol-errors imbalance pfc-storm microburst link-flap counter-clear breakout fec-degrade
 * (START-END required, PORT[:LANE]: the FEC histogram's tail grows bin by bin in that lane, lane
 * 0 by default, the first uncorrectable codeword at END - (END - START) / 10) incast (PORT/TC[/LEN[/PERIOD]]: sub-poll bursts on a
 * queue, its PG, headroom and ingress pool, with drops, ECN marks and PFC pause) drops
 * (PORT:REASON: one What Just Happened reason's drops, wjh_<group>_<reason>, at 1,000/s, the
 * port's drop counters rising with them).
 *
 * Layout calls (port_count, port_info, counter_count, counter_info) describe the layout of
 * the generation last returned by generation() (the one at open() before any call).
 *
 * This file is the ABI; sim.h says where the model, the config parser and the layout are.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void sim_close(void *h);

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t rel(const struct sim *s, int64_t now)
{
    return now > s->start ? (uint64_t)(now - s->start) : 0;
}

static void *sim_open(const char *config, char *err, size_t errlen)
{
    struct sim *s = calloc(1, sizeof *s);
    if (!s) {
        errf(err, errlen, "sim: out of memory");
        return NULL;
    }
    if (parse_config(s, config ? config : "", err, errlen) || build(s, err, errlen)) {
        sim_close(s);
        return NULL;
    }
    if (s->start < 0)
        s->start = now_ns();
    names_init(s);
    s->listed = gen_at(s, rel(s, now_ns()));
    return s;
}

static void sim_close(void *h)
{
    struct sim *s = h;
    if (!s)
        return;
    for (int i = 0; i < s->nsc; i++)
        free(s->sc[i].spec);
    if (s->ports) {
        for (int i = 0; i < s->nall; i++) {
            struct port *p = &s->ports[i];
            for (int w = 0; w < p->nwin; w++)
                for (int k = 0; k < 3; k++)
                    free(p->win[w].t[k]);
            free(p->clear_ts);
            free(p->clear_vals);
        }
    }
    if (s->gen_ports)
        for (int g = 0; g < s->ngens; g++)
            free(s->gen_ports[g]);
    free(s->gen_ports);
    free(s->gen_n);
    free(s->gen_total);
    free(s->ports);
    free(s->uplinks);
    free(s);
}

static uint64_t sim_generation(void *h)
{
    struct sim *s = h;
    s->listed = gen_at(s, rel(s, now_ns()));
    return (uint64_t)s->listed + 1;
}

static int sim_port_count(void *h)
{
    struct sim *s = h;
    return s->gen_n[s->listed];
}

static const struct port *listed_port(const struct sim *s, int port)
{
    if (port < 0 || port >= s->gen_n[s->listed])
        return NULL;
    return &s->ports[s->gen_ports[s->listed][port]];
}

static int sim_port_info(void *h, int port, struct swtel_asic_port *out)
{
    const struct port *p = listed_port(h, port);
    if (!p || !out)
        return -1;
    memset(out, 0, sizeof *out);
    memcpy(out->name, p->name, sizeof out->name);
    memcpy(out->parent, p->parent, sizeof out->parent);
    out->speed_mbps = p->speed;
    out->flags = p->flags;
    return 0;
}

static int sim_counter_count(void *h, int port)
{
    const struct port *p = listed_port(h, port);
    return p ? (p->host ? N_HOST : SWITCH_DESCS(p->lanes)) : -1;
}

/* A switch counter's kind: counters, then gauges with the peaks (the highest level since the
 * previous read) among them, the histograms last (the port's, then each lane's). */
static int switch_kind(int counter)
{
    if (counter < C_OCC0)
        return SWTEL_ASIC_COUNTER;
    if (counter >= C_FEC0)
        return SWTEL_ASIC_HISTOGRAM;
    if ((counter >= C_PEAK0 && counter < C_PEAK0 + 8) ||
        (counter >= C_PG_PEAK0 && counter < C_PG_PEAK0 + 8) ||
        (counter >= C_HR_PEAK0 && counter < C_HR_PEAK0 + 8) || counter == C_POOL_PEAK)
        return SWTEL_ASIC_PEAK;
    return SWTEL_ASIC_GAUGE;
}

static int sim_counter_info(void *h, int port, int counter, struct swtel_asic_counter *out)
{
    const struct sim *s = h;
    const struct port *p = listed_port(s, port);
    if (!p || !out || counter < 0 || counter >= (p->host ? N_HOST : SWITCH_DESCS(p->lanes)))
        return -1;
    memset(out, 0, sizeof *out);
    if (p->host) {
        snprintf(out->name, sizeof out->name, "%s", HOST_NAMES[counter]);
        out->width = counter < 6 ? 32 : 64;
        out->kind = SWTEL_ASIC_COUNTER;
    } else {
        memcpy(out->name, s->cnames[counter], sizeof out->name);
        out->width = 64;
        out->kind = switch_kind(counter);
        if (counter >= C_FEC0)
            out->nbins = FEC_BINS;
    }
    return 0;
}

/* Bin b of an RS-FEC histogram (the port's or a lane's): the codewords with exactly b
 * corrected symbols. */
static int sim_bin_info(void *h, int port, int counter, int bin, struct swtel_asic_bin *out)
{
    const struct port *p = listed_port(h, port);
    if (!p || p->host || !out || counter < C_FEC0 || counter >= SWITCH_DESCS(p->lanes) || bin < 0 ||
        bin >= FEC_BINS)
        return -1;
    out->low = out->high = (uint64_t)bin;
    return 0;
}

static int sim_read(void *h, uint64_t generation, uint64_t *values, size_t n, int64_t *ts_ns,
                    char *err, size_t errlen)
{
    struct sim *s = h;
    int64_t now = now_ns();
    if (ts_ns)
        *ts_ns = now;
    uint64_t t = rel(s, now);
    int g = gen_at(s, t);
    if (generation != (uint64_t)g + 1 || n != s->gen_total[g])
        return SWTEL_ASIC_ECHANGED;
    if (!values) {
        errf(err, errlen, "sim: values is NULL");
        return SWTEL_ASIC_ERROR;
    }
    uint64_t *out = values;
    /* the first read's peak is its own cell's level; later ones reach back to the previous read */
    uint64_t since = s->read_once ? s->last_t : t;
    for (int i = 0; i < s->gen_n[g]; i++) {
        const struct port *p = &s->ports[s->gen_ports[g][i]];
        port_values(p, t, since, out);
        out += p->ncounters;
    }
    s->read_once = 1;
    s->last_t = t;
    return SWTEL_ASIC_OK;
}

static const struct swtel_asic_ops OPS = {
    .abi_version = SWTEL_ASIC_ABI_VERSION,
    .ops_size = sizeof(struct swtel_asic_ops),
    .name = "sim",
    .open = sim_open,
    .generation = sim_generation,
    .port_count = sim_port_count,
    .port_info = sim_port_info,
    .counter_count = sim_counter_count,
    .counter_info = sim_counter_info,
    .read = sim_read,
    .close = sim_close,
    .bin_info = sim_bin_info,
};

__attribute__((visibility("default"))) const struct swtel_asic_ops *swtel_asic_plugin(void)
{
    return &OPS;
}
