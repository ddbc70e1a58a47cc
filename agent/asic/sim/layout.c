/* The simulated switch's ports: the base layout of each role, breakouts (one generation
 * each), the scenarios placed on their ports (overlaps refused), the model's tables and
 * the values at counter clears, and the counter names. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

const char *const HOST_NAMES[N_HOST] = {
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "out_of_sequence",
    "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent", "rp_cnp_handled",
    "np_ecn_marked_roce_packets", "port_xmit_data", "port_rcv_data"};

/* The drop reasons, What Just Happened's groups with devlink's trap names (kebab-cased; l1's
 * What Just Happened's own), in the order of enum R_* (sim.h); counter wjh_<group>_<reason>
 * with _ for - (names_init). */
const char *const DROP_GROUPS[N_DROP] = {"l1", "l2", "l2", "l2", "l3", "l3", "l3",
                                         "tunnel", "tunnel", "buffer", "buffer", "acl", "acl"};
const char *const DROP_REASONS[N_DROP] = {
    "link-down",                                                             /* l1 */
    "ingress-vlan-filter", "source-mac-is-multicast", "ingress-spanning-tree-filter", /* l2 */
    "blackhole-route", "ttl-value-is-too-small", "unresolved-neigh",         /* l3 */
    "decap-error", "overlay-smac-is-mc",                                     /* tunnel */
    "tail-drop", "early-drop",                                               /* buffer */
    "ingress-flow-action-drop", "egress-flow-action-drop"};                  /* acl */

static void port_init(struct sim *s, struct port *p, const char *name, const char *parent,
                      uint64_t speed, uint32_t flags)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->parent, sizeof p->parent, "%s", parent);
    p->speed = speed;
    p->flags = flags;
    p->cell = s->cell;
    p->hbase = s->seed * 0x9E3779B97F4A7C15ULL + fnv1a(name) * 0xD6E8FEB86659FD93ULL;
    p->host = !!(flags & SWTEL_ASIC_PORT_HOST);
    p->lanes = speed / 100000 > 1 ? (int)min64(speed / 100000, MAX_LANES) : 1;
    p->ncounters = p->host ? N_HOST : SWITCH_VALUES(p->lanes);
    if (p->host) {
        uint64_t cap = 400000ULL * 1250 * 4096 * 1024 / 4116;
        uint64_t r = cap * s->load / 1000000, j = min64(r / 5, cap - r);
        proc_init(p, &p->tx, r, j, K_HTX);
        proc_init(p, &p->rx, r, j, K_HRX);
        proc_init(p, &p->retr, 10, 10, K_RETR);
        proc_init(p, &p->oos, 5, 5, K_OOS);
        proc_init(p, &p->cnp, 2048, 1024, K_CNP);
        proc_init(p, &p->cnph, 1843, 900, K_CNPH);
        proc_init(p, &p->ecnr, 4096, 2048, K_ECNR);
    } else {
        p->cap = speed * 1250 * 4096 * 1024 / 4116;
        uint64_t r = p->cap * s->load / 1000000, j = min64(r / 5, p->cap - r);
        proc_init(p, &p->rx, r, j, K_RX);
        proc_init(p, &p->tx, r, j, K_TX);
        uint64_t rc = speed * 1024 / 100000;
        proc_init(p, &p->corr, rc, rc / 2, K_CORR);
    }
}

static int find_port(const struct sim *s, const char *name)
{
    for (int i = 0; i < s->nall; i++)
        if (!strcmp(s->ports[i].name, name))
            return i;
    return -1;
}

static int is_uplink(const struct sim *s, const char *name)
{
    for (int i = 0; i < s->nup; i++)
        if (!strcmp(s->ports[s->uplinks[i]].name, name))
            return 1;
    return 0;
}

static int add_clear(struct port *p, uint64_t ts)
{
    uint64_t *n = realloc(p->clear_ts, (p->nclear + 1) * sizeof *n);
    if (!n)
        return -1;
    p->clear_ts = n;
    p->clear_ts[p->nclear++] = ts;
    return 0;
}

int build(struct sim *s, char *err, size_t errlen)
{
    int role = s->role, cap;
    if (role == 2)
        cap = 1;
    else if (s->nports_cfg)
        cap = s->nports_cfg;
    else
        cap = 70;
    cap += 4 * s->nsc;
    s->ports = calloc(cap, sizeof *s->ports);
    s->uplinks = calloc(8, sizeof *s->uplinks);
    if (!s->ports || !s->uplinks)
        goto oom;
    char name[32], parent[32];
    if (role == 2) {
        port_init(s, &s->ports[s->nall++], "mlx5_0", "", 400000,
                  SWTEL_ASIC_PORT_UP | SWTEL_ASIC_PORT_HOST);
    } else if (s->nports_cfg) {
        for (int i = 1; i <= s->nports_cfg; i++) {
            snprintf(name, sizeof name, "swp%d", i);
            port_init(s, &s->ports[s->nall++], name, "", 400000, SWTEL_ASIC_PORT_UP);
        }
    } else if (role == 0) {
        for (int i = 1; i <= 64; i++) {
            if (i == 11 || i == 12) {
                snprintf(parent, sizeof parent, "swp%d", i);
                for (int j = 0; j < (i == 11 ? 4 : 2); j++) {
                    snprintf(name, sizeof name, "swp%ds%d", i, j);
                    port_init(s, &s->ports[s->nall++], name, parent, i == 11 ? 100000 : 200000,
                              SWTEL_ASIC_PORT_UP);
                }
            } else {
                snprintf(name, sizeof name, "swp%d", i);
                port_init(s, &s->ports[s->nall++], name, "", 400000, SWTEL_ASIC_PORT_UP);
            }
        }
    } else {
        u128 sum = 0;
        for (int i = 1; i <= 32; i++) {
            snprintf(name, sizeof name, "swp%d", i);
            port_init(s, &s->ports[s->nall], name, "", 200000, SWTEL_ASIC_PORT_UP);
            sum += s->ports[s->nall++].rx.R;
        }
        uint64_t m = (uint64_t)(sum * 3 / 80);
        for (int i = 65 - s->nuplinks; i <= 64; i++) {
            snprintf(name, sizeof name, "swp%d", i);
            struct port *u = &s->ports[s->nall];
            port_init(s, u, name, "", 400000, SWTEL_ASIC_PORT_UP);
            uint64_t j = min64(m / 5, u->cap - m);
            proc_init(u, &u->rx, m, j, K_RX);
            proc_init(u, &u->tx, m, j, K_TX);
            s->uplinks[s->nup++] = s->nall++;
        }
    }
    s->nbase = s->nall;

    /* breakouts */
    for (int k = 0; k < s->nsc; k++) {
        struct scen *sc = &s->sc[k];
        if (sc->type != SC_BREAKOUT)
            continue;
        if (role == 2) {
            errf(err, errlen, "sim: scenario '%s': not available with role=host", sc->spec);
            return -1;
        }
        if (!sc->has_port) {
            errf(err, errlen, "sim: scenario '%s': needs a port (breakout@T:swpN)", sc->spec);
            return -1;
        }
        int pi = find_port(s, sc->port);
        if (pi < 0) {
            errf(err, errlen, "sim: scenario '%s': no port '%s'", sc->spec, sc->port);
            return -1;
        }
        struct port *p = &s->ports[pi];
        if (p->parent[0] || p->speed != 400000 || is_uplink(s, p->name)) {
            errf(err, errlen,
                 "sim: scenario '%s': '%s' cannot be broken out (a 400G port, not an uplink)",
                 sc->spec, sc->port);
            return -1;
        }
        for (int b = 0; b < s->nbo; b++)
            if (!strcmp(s->sc[s->bo_sc[b]].port, sc->port)) {
                errf(err, errlen, "sim: scenario '%s': '%s' is broken out twice", sc->spec,
                     sc->port);
                return -1;
            }
        if (strlen(sc->port) + 3 > sizeof name) {
            errf(err, errlen, "sim: scenario '%s': no port '%s'", sc->spec, sc->port);
            return -1;
        }
        s->bo_sc[s->nbo] = k;
        s->bo_kid0[s->nbo++] = s->nall;
        for (int j = 0; j < 4; j++) {
            snprintf(name, sizeof name, "%ss%d", sc->port, j);
            struct port *kid = &s->ports[s->nall++];
            port_init(s, kid, name, sc->port, 100000, SWTEL_ASIC_PORT_UP);
            if (add_clear(kid, sc->a * SLOT))
                goto oom;
        }
    }
    /* sort breakouts by (a, ord): insertion sort, stable */
    for (int i = 1; i < s->nbo; i++) {
        int sc_i = s->bo_sc[i], kid_i = s->bo_kid0[i], j = i - 1;
        while (j >= 0 && s->sc[s->bo_sc[j]].a > s->sc[sc_i].a) {
            s->bo_sc[j + 1] = s->bo_sc[j];
            s->bo_kid0[j + 1] = s->bo_kid0[j];
            j--;
        }
        s->bo_sc[j + 1] = sc_i;
        s->bo_kid0[j + 1] = kid_i;
    }
    s->ngens = s->nbo + 1;
    s->gen_ports = calloc(s->ngens, sizeof *s->gen_ports);
    s->gen_n = calloc(s->ngens, sizeof *s->gen_n);
    s->gen_total = calloc(s->ngens, sizeof *s->gen_total);
    if (!s->gen_ports || !s->gen_n || !s->gen_total)
        goto oom;
    for (int g = 0; g < s->ngens; g++) {
        s->gen_ports[g] = calloc(s->nall, sizeof(int));
        if (!s->gen_ports[g])
            goto oom;
        if (g == 0) {
            for (int i = 0; i < s->nbase; i++)
                s->gen_ports[0][i] = i;
            s->gen_n[0] = s->nbase;
        } else {
            const char *parent = s->sc[s->bo_sc[g - 1]].port;
            int n = 0;
            for (int i = 0; i < s->gen_n[g - 1]; i++) {
                int pi = s->gen_ports[g - 1][i];
                if (!strcmp(s->ports[pi].name, parent)) {
                    for (int j = 0; j < 4; j++)
                        s->gen_ports[g][n++] = s->bo_kid0[g - 1] + j;
                } else {
                    s->gen_ports[g][n++] = pi;
                }
            }
            s->gen_n[g] = n;
        }
        for (int i = 0; i < s->gen_n[g]; i++)
            s->gen_total[g] += s->ports[s->gen_ports[g][i]].ncounters;
    }

    /* the other scenarios, in config order */
    int touched[MAX_SCENARIOS], ntouched = 0, incasts[MAX_SCENARIOS], nincast = 0;
    int drops[MAX_SCENARIOS], ndrops = 0;
    for (int k = 0; k < s->nsc; k++) {
        struct scen *sc = &s->sc[k];
        if (sc->type == SC_BREAKOUT)
            continue;
        if (role == 2 && sc->type != SC_SYM && sc->type != SC_CLEAR) {
            errf(err, errlen, "sim: scenario '%s': not available with role=host", sc->spec);
            return -1;
        }
        int list[1024 + 4 * MAX_SCENARIOS], n = 0;
        if (role == 2) {
            list[n++] = 0;
        } else if (sc->type == SC_CLEAR && !sc->has_port) {
            for (int i = 0; i < s->nall; i++)
                list[n++] = i;
        } else if (sc->type == SC_IMB) {
            if (!s->nup) {
                errf(err, errlen, "sim: scenario '%s': needs role=leaf (an uplink group)",
                     sc->spec);
                return -1;
            }
            if (!sc->has_port) {
                strcpy(sc->port, s->ports[s->uplinks[0]].name);
                sc->has_port = 1;
            }
            if (!is_uplink(s, sc->port)) {
                if (find_port(s, sc->port) < 0)
                    errf(err, errlen, "sim: scenario '%s': no port '%s'", sc->spec, sc->port);
                else
                    errf(err, errlen, "sim: scenario '%s': '%s' is not an uplink", sc->spec,
                         sc->port);
                return -1;
            }
            for (int i = 0; i < s->nup; i++)
                list[n++] = s->uplinks[i];
        } else {
            if (!sc->has_port) {
                int sym11 = (sc->type == SC_SYM || sc->type == SC_FEC) &&
                            find_port(s, "swp11s1") >= 0;
                strcpy(sc->port, sym11 ? "swp11s1" : "swp1");
                sc->has_port = 1;
            }
            int pi = find_port(s, sc->port);
            if (pi < 0) {
                errf(err, errlen, "sim: scenario '%s': no port '%s'", sc->spec, sc->port);
                return -1;
            }
            if (sc->type == SC_FEC && sc->lane >= s->ports[pi].lanes) {
                errf(err, errlen, "sim: scenario '%s': %s has lanes 0..%d", sc->spec, sc->port,
                     s->ports[pi].lanes - 1);
                return -1;
            }
            list[n++] = pi;
        }
        if ((sc->type == SC_PFC || sc->type == SC_INCAST) && sc->prio < 0)
            sc->prio = 3;
        /* incast windows of a port never overlap: its ingress pool is one window's PG */
        if (sc->type == SC_INCAST) {
            for (int o = 0; o < nincast; o++) {
                const struct scen *other = &s->sc[incasts[o]];
                if (sc->a < other->b && other->a < sc->b && !strcmp(other->port, sc->port)) {
                    errf(err, errlen, "sim: scenarios '%s' and '%s' overlap on %s", other->spec,
                         sc->spec, sc->port);
                    return -1;
                }
            }
            incasts[nincast++] = k;
        }
        /* drops windows of one port and reason never overlap; other reasons may */
        if (sc->type == SC_DROPS) {
            for (int o = 0; o < ndrops; o++) {
                const struct scen *other = &s->sc[drops[o]];
                if (sc->a < other->b && other->a < sc->b && other->reason == sc->reason &&
                    !strcmp(other->port, sc->port)) {
                    errf(err, errlen, "sim: scenarios '%s' and '%s' overlap on %s", other->spec,
                         sc->spec, sc->port);
                    return -1;
                }
            }
            drops[ndrops++] = k;
        }
        if (IS_TRAFFIC(sc->type)) {
            for (int o = 0; o < ntouched; o++) {
                const struct scen *other = &s->sc[touched[o]];
                if (!(sc->a < other->b && other->a < sc->b))
                    continue;
                /* the other's ports */
                const char *common = NULL;
                for (int i = 0; i < n; i++) {
                    const char *nm = s->ports[list[i]].name;
                    int hit;
                    if (role == 2)
                        hit = 1;
                    else if (other->type == SC_IMB)
                        hit = is_uplink(s, nm);
                    else
                        hit = !strcmp(other->port, nm);
                    if (hit && (!common || strcmp(nm, common) < 0))
                        common = nm;
                }
                if (common) {
                    errf(err, errlen, "sim: scenarios '%s' and '%s' overlap on %s", other->spec,
                         sc->spec, common);
                    return -1;
                }
            }
            touched[ntouched++] = k;
        }
        for (int i = 0; i < n; i++) {
            struct port *p = &s->ports[list[i]];
            if (sc->type == SC_CLEAR) {
                if (add_clear(p, sc->a * SLOT))
                    goto oom;
                continue;
            }
            if (p->nwin >= MAX_PORT_WINDOWS) {
                errf(err, errlen, "sim: too many scenarios on %s (max %d)", p->name,
                     MAX_PORT_WINDOWS);
                return -1;
            }
            p->win[p->nwin++].sc = sc;
            if (sc->type == SC_IMB) {
                uint64_t m = p->tx.R, nu = (uint64_t)s->nup;
                uint64_t hi = min64(2 * m, p->cap - p->tx.J);
                struct ovr *o = &p->tx.over[p->tx.nover++];
                o->a = sc->a;
                o->b = sc->b;
                o->r = !strcmp(p->name, sc->port) ? hi : (nu * m - hi) / (nu - 1);
            }
        }
    }

    /* prepare: tables and overrides */
    for (int i = 0; i < s->nall; i++) {
        struct port *p = &s->ports[i];
        for (int w = 0; w < p->nwin; w++) {
            struct win *wn = &p->win[w];
            const struct scen *sc = wn->sc;
            if (sc->type == SC_FLAP) {
                wn->n = INF;
                if (sc->b != INF) {
                    uint64_t j = (sc->b - sc->a - 1) / 300;
                    wn->n = flap_down(p, sc, j) + 30 < sc->b ? j + 1 : j;
                }
            } else if (sc->type == SC_MB) {
                wn->n = mb_count(p, sc);
            } else if (sc->type == SC_INCAST) {
                /* bursts of the whole periods inside the window */
                wn->n = sc->b == INF ? INF : (sc->b - sc->a) * SLOT / sc->period;
            } else if (sc->type == SC_SYM && p->host) {
                if (!(wn->t[0] = make_table(p, K_RETR_SCN, 0, 1)))
                    goto oom;
            } else if (sc->type == SC_SYM) {
                uint64_t mult = max64(1, p->speed / 100000);
                if (!(wn->t[0] = make_table(p, K_SYM, 1, mult)) ||
                    !(wn->t[1] = make_table(p, K_EFF, 2, 1)) ||
                    !(wn->t[2] = make_table(p, K_DIP, 3, 1)))
                    goto oom;
                struct ovr *o = &p->corr.over[p->corr.nover++];
                o->a = sc->a;
                o->b = sc->b;
                o->r = p->speed * 1024 * 2 / 100;
            } else if (sc->type == SC_FEC) {
                uint64_t mult = max64(1, p->speed / 100000);
                if (!(wn->t[0] = make_table(p, K_SYM, 1, mult)) ||
                    !(wn->t[1] = make_table(p, K_FEC_EFF, 4, 1)))
                    goto oom;
            }
        }
    }
    /* clears: sorted, with the values at each */
    for (int i = 0; i < s->nall; i++) {
        struct port *p = &s->ports[i];
        if (!p->nclear)
            continue;
        for (int a = 1; a < p->nclear; a++) {
            uint64_t x = p->clear_ts[a];
            int b = a - 1;
            while (b >= 0 && p->clear_ts[b] > x) {
                p->clear_ts[b + 1] = p->clear_ts[b];
                b--;
            }
            p->clear_ts[b + 1] = x;
        }
        p->clear_vals = malloc((size_t)p->nclear * p->ncounters * sizeof(uint64_t));
        if (!p->clear_vals)
            goto oom;
        for (int c = 0; c < p->nclear; c++)
            raw(p, p->clear_ts[c], p->clear_ts[c], p->clear_vals + (size_t)c * p->ncounters);
    }
    return 0;
oom:
    errf(err, errlen, "sim: out of memory");
    return -1;
}

int gen_at(const struct sim *s, uint64_t t)
{
    int g = 0;
    for (int b = 0; b < s->nbo; b++)
        if (s->sc[s->bo_sc[b]].a * SLOT <= t)
            g++;
    return g;
}

void names_init(struct sim *s)
{
    static const char *const fixed[] = {
        "HwIfInOctets", "HwIfInUcastPkts", "HwIfInMcastPkts", "HwIfInBcastPkts",
        "HwIfOutOctets", "HwIfOutUcastPkts", "HwIfOutMcastPkts", "HwIfOutBcastPkts",
        "HwIfInDiscards", "HwIfInL3Drops", "HwIfInBufferDrops", "HwIfInAclDrops",
        "HwIfInBlackholeDrops", "HwIfInDot3LengthErrors", "HwIfInDot3FrameErrors", "HwIfInErrors",
        "HwIfOutDiscards", "HwIfOutErrors", "HwIfOutQDrops", "HwIfOutNonQDrops",
        "HwIfOutWredDrops"};
    int n = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "%s", fixed[i]);
    for (int i = 0; i < 8; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "HwIfOutQ%dWredDrops", i);
    snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "HwIfInPausePkt");
    snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "HwIfOutPausePkt");
    static const char *const per_prio[] = {"HwIfInPfc%dPkt", "HwIfOutPfc%dPkt",
                                           "rx_pause_duration_prio_%d", "tx_pause_duration_prio_%d",
                                           "ecn_marked_tc_%d"};
    for (int f = 0; f < 5; f++)
        for (int i = 0; i < 8; i++)
            snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, per_prio[f], i);
    static const char *const phy[] = {"phy_received_bits", "phy_symbol_errors",
                                      "phy_corrected_bits", "phy_effective_errors"};
    for (int i = 0; i < 4; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "%s", phy[i]);
    for (int i = 0; i < 8; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "phy_raw_errors_lane%d", i);
    snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "carrier_changes");
    for (int i = 0; i < N_DROP; i++) {
        char *c = s->cnames[n++];
        snprintf(c, SWTEL_ASIC_NAME_MAX, "wjh_%s_%s", DROP_GROUPS[i], DROP_REASONS[i]);
        for (; *c; c++)
            if (*c == '-')
                *c = '_';
    }
    for (int i = 0; i < 8; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "tc_curr_occupancy_%d", i);
    for (int i = 0; i < 8; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "tc_watermark_%d", i);
    for (int i = 0; i < 8; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "tc_peak_occupancy_%d", i);
    static const char *const per_pg[] = {"pg_curr_occupancy_%d",     "pg_watermark_%d",
                                         "pg_peak_occupancy_%d",     "pg_headroom_occupancy_%d",
                                         "pg_headroom_watermark_%d", "pg_headroom_peak_occupancy_%d"};
    for (int f = 0; f < 6; f++)
        for (int i = 0; i < 8; i++)
            snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, per_pg[f], i);
    snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "ingress_pool_occupancy_0");
    snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "ingress_pool_peak_occupancy_0");
    snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "phy_rs_fec_histogram"); /* FEC_BINS values */
    /* each lane's (a port lists its own lanes' only: SWITCH_DESCS) */
    for (int i = 0; i < MAX_LANES; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "phy_rs_fec_histogram_lane%d", i);
}
