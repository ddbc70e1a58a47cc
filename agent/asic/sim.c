/* swtel's simulated Spectrum switch: an ASIC plugin (swtel_asic.h, ABI 1).
 *
 * Every value is a pure function of (config, t = read time - start): nothing read
 * depends on earlier reads. Integer arithmetic only, so tests/sim_model.py (the
 * reference model, whose docstring describes the model in full) computes the same
 * values bit for bit. The functions below mirror that file's, name for name.
 *
 * Config: space-separated key=value: role=spine|leaf|host seed=N start=<epoch ns>
 * ports=N uplinks=4|8 load=0.0..1.0 scenario=NAME[@START[-[END]]][:PORT[/PRIO]] (repeatable,
 * or comma-separated). Scenarios: symbol-errors imbalance pfc-storm microburst link-flap
 * counter-clear breakout.
 *
 * Layout calls (port_count, port_info, counter_count, counter_info) describe the layout of
 * the generation last returned by generation() (the one at open() before any call).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "swtel_asic.h"

typedef unsigned __int128 u128;
typedef __int128 i128;

#define SLOT 10000000ULL /* ns */
#define CELL (10 * SLOT) /* 100 ms */
#define EPOCH_CELLS 10   /* watermark epoch: 1 s */
#define PERIOD 600       /* cells per scenario table (60 s), then it repeats */
#define INF UINT64_MAX   /* open-ended window end (slots), unbounded event count */
#define MAX_SCENARIOS 64
#define MAX_PORT_WINDOWS 16
#define N_SWITCH 100
#define N_HOST 11
#define MASK32 0xffffffffULL

enum { K_RX = 1, K_TX = 2, K_CORR = 3, K_OCC = 4, K_FLAP = 5, K_DIP = 6, K_SYM = 8, K_EFF = 9,
       K_PFC = 10, K_PFCOCC = 11, K_MB_START = 12, K_MB_LEN = 13, K_MB_DROP = 14, K_MB_WRED = 15,
       K_MB_OCC = 16, K_RETR = 17, K_RETR_SCN = 18, K_OOS = 19, K_CNP = 20, K_CNPH = 21,
       K_ECNR = 22, K_HTX = 23, K_HRX = 24 };

enum { SC_SYM, SC_IMB, SC_PFC, SC_MB, SC_FLAP, SC_CLEAR, SC_BREAKOUT };
static const char *const SC_NAMES[] = {"symbol-errors", "imbalance", "pfc-storm", "microburst",
                                       "link-flap", "counter-clear", "breakout"};
#define N_SC 7
#define IS_TRAFFIC(x) ((x) == SC_SYM || (x) == SC_IMB || (x) == SC_PFC || (x) == SC_FLAP)

/* counter indices (tests/sim_model.py SWITCH_COUNTERS) */
enum { C_IN_OCT = 0, C_OUT_OCT = 4, C_IN_FRAME_ERR = 14, C_IN_ERR = 15, C_OUT_DISC = 16,
       C_OUT_QDROPS = 18, C_OUT_WRED = 20, C_OUT_Q0_WRED = 21, C_IN_PFC0 = 31,
       C_RX_PAUSE0 = 47, C_ECN0 = 63, C_PHY_BITS = 71, C_PHY_SYM = 72, C_PHY_CORR = 73,
       C_PHY_EFF = 74, C_LANE0 = 75, C_CARRIER = 83, C_OCC0 = 84, C_WM0 = 92 };

static const char *const HOST_NAMES[N_HOST] = {
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "out_of_sequence",
    "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent", "rp_cnp_handled",
    "np_ecn_marked_roce_packets", "port_xmit_data", "port_rcv_data"};

struct scen {
    int type, ord;
    uint64_t a, b; /* slots */
    int prio;      /* -1: none given */
    int has_port;
    char port[SWTEL_ASIC_NAME_MAX];
    char *spec;
};

struct ovr {
    uint64_t a, b, r;
};

struct proc {
    uint64_t R, J, q0;
    uint32_t key;
    int nover;
    struct ovr over[MAX_PORT_WINDOWS];
};

struct table {
    uint32_t v[PERIOD];
    uint64_t pre[PERIOD + 1];
};

struct win {
    const struct scen *sc;
    uint64_t n; /* link-flap, microburst: number of events (INF) */
    struct table *t[3];
};

struct port {
    char name[SWTEL_ASIC_NAME_MAX], parent[SWTEL_ASIC_NAME_MAX];
    uint64_t speed, cap, hbase; /* hbase: seed and port part of the hash */
    uint32_t flags;
    int host, lanes, ncounters;
    struct proc rx, tx, corr, retr, oos, cnp, cnph, ecnr;
    int nwin;
    struct win win[MAX_PORT_WINDOWS];
    int nclear;
    uint64_t *clear_ts;   /* ns, sorted */
    uint64_t *clear_vals; /* nclear x ncounters, truncated to 64 bits */
};

struct sim {
    uint64_t seed;
    int64_t start;
    int role; /* 0 spine, 1 leaf, 2 host */
    int nports_cfg, nuplinks;
    uint64_t load;
    int nsc;
    struct scen sc[MAX_SCENARIOS];
    int nall, nbase, nup;
    struct port *ports; /* all ports: base, then breakout children */
    int *uplinks;       /* indices into ports */
    int nbo;
    int bo_sc[MAX_SCENARIOS]; /* breakout scenarios, sorted by (a, ord) */
    int bo_kid0[MAX_SCENARIOS];
    int ngens;
    int **gen_ports;
    int *gen_n;
    size_t *gen_total;
    int listed; /* generation index (0-based) the layout calls describe */
    char cnames[N_SWITCH][SWTEL_ASIC_NAME_MAX];
};

static void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* --- hashing ---------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xCBF29CE484222325ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001B3ULL;
    return h;
}

static inline uint64_t H(const struct port *p, uint64_t key, uint64_t idx)
{
    return mix64(p->hbase + key * 0xA0761D6478BD642FULL + idx);
}

static inline uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* --- the model (tests/sim_model.py) ---------------------------------------------------- */

static uint64_t flap_down(const struct port *p, const struct scen *sc, uint64_t i)
{
    return sc->a + 300 * i + 50 + H(p, K_FLAP, i) % 101;
}

static int masked(const struct port *p, uint64_t j)
{
    for (int w = 0; w < p->nwin; w++) {
        const struct win *wn = &p->win[w];
        if (wn->sc->type != SC_FLAP || j < wn->sc->a)
            continue;
        uint64_t i = (j - wn->sc->a) / 300;
        if (i < wn->n) {
            uint64_t d = flap_down(p, wn->sc, i);
            if (d <= j && j <= d + 30)
                return 1;
        }
    }
    return 0;
}

static inline uint64_t proc_q(const struct port *p, const struct proc *pr, uint64_t j, int m)
{
    if (m && p->nwin && masked(p, j))
        return 0;
    return (pr->J * (H(p, pr->key, j) & 1023)) >> 10;
}

static inline uint64_t rate_at(const struct proc *pr, uint64_t k)
{
    for (int i = 0; i < pr->nover; i++)
        if (pr->over[i].a <= k && k < pr->over[i].b)
            return pr->over[i].r;
    return pr->R;
}

static u128 proc_x(const struct port *p, const struct proc *pr, uint64_t t, int m)
{
    uint64_t k = t / SLOT, f = t % SLOT;
    i128 base = (i128)pr->R * k;
    for (int i = 0; i < pr->nover; i++) {
        const struct ovr *o = &pr->over[i];
        if (k > o->a)
            base += ((i128)o->r - (i128)pr->R) * (i128)(min64(k, o->b) - o->a);
    }
    uint64_t qk = proc_q(p, pr, k, m), qk1 = proc_q(p, pr, k + 1, m);
    i128 a_k = base + qk - (i128)pr->q0;
    i128 inc = (i128)rate_at(pr, k) + qk1 - qk;
    return (u128)(a_k * SLOT + inc * f);
}

static inline u128 proc_value(const struct port *p, const struct proc *pr, uint64_t t, int m)
{
    return proc_x(p, pr, t, m) / (SLOT << 10);
}

static void proc_init(const struct port *p, struct proc *pr, uint64_t R, uint64_t J, uint32_t key)
{
    memset(pr, 0, sizeof *pr);
    pr->R = R;
    pr->J = J;
    pr->key = key;
    pr->q0 = (J * (H(p, key, 0) & 1023)) >> 10;
}

static uint64_t table_count(const struct table *tb, uint64_t w)
{
    uint64_t c = w / CELL, r = w % CELL, i = c % PERIOD;
    return (c / PERIOD) * tb->pre[PERIOD] + tb->pre[i] + (uint64_t)tb->v[i] * r / CELL;
}

static u128 table_weighted_ns(const struct table *tb, uint64_t w)
{
    uint64_t c = w / CELL, r = w % CELL, i = c % PERIOD;
    return ((u128)(c / PERIOD) * tb->pre[PERIOD] + tb->pre[i]) * CELL + (u128)tb->v[i] * r;
}

static uint64_t window_ns(const struct scen *sc, uint64_t t)
{
    uint64_t a = sc->a * SLOT;
    uint64_t b = sc->b == INF ? INF : sc->b * SLOT;
    uint64_t e = min64(t, b);
    return e > a ? e - a : 0;
}

static void flap_state(const struct port *p, const struct win *wn, uint64_t t, uint64_t *down,
                       uint64_t *changes)
{
    const struct scen *sc = wn->sc;
    if (t < sc->a * SLOT)
        return;
    uint64_t i = (t / SLOT - sc->a) / 300, full = min64(i, wn->n);
    *down += full * 30 * SLOT;
    *changes += 2 * full;
    if (i < wn->n) {
        uint64_t d = flap_down(p, sc, i) * SLOT;
        if (t >= d) {
            *down += min64(t - d, 30 * SLOT);
            *changes += 1 + (t >= d + 30 * SLOT);
        }
    }
}

static uint64_t mb_start(const struct port *p, const struct scen *sc, uint64_t i)
{
    return sc->a + 275 * i + H(p, K_MB_START, i) % 126;
}

static uint64_t mb_len(const struct port *p, uint64_t i) { return 5 + H(p, K_MB_LEN, i) % 16; }

static uint64_t mb_count(const struct port *p, const struct scen *sc)
{
    if (sc->b == INF)
        return INF;
    uint64_t j = (sc->b - 1 - sc->a) / 275;
    return mb_start(p, sc, j) < sc->b ? j + 1 : j;
}

static inline uint64_t mb_e(const struct port *p, uint64_t key, uint64_t base, uint64_t spread,
                            uint64_t i)
{
    return base * i + H(p, key, i) % spread - H(p, key, 0) % spread;
}

static uint64_t mb_drops(const struct port *p, const struct win *wn, uint64_t t, uint64_t key,
                         uint64_t base, uint64_t spread)
{
    const struct scen *sc = wn->sc;
    if (t < sc->a * SLOT)
        return 0;
    uint64_t i = (t / SLOT - sc->a) / 275;
    if (i >= wn->n)
        return mb_e(p, key, base, spread, wn->n);
    uint64_t st = mb_start(p, sc, i) * SLOT, ln = mb_len(p, i) * SLOT;
    uint64_t x = t > st ? min64(t - st, ln) : 0;
    uint64_t e0 = mb_e(p, key, base, spread, i), e1 = mb_e(p, key, base, spread, i + 1);
    return e0 + (e1 - e0) * x / ln;
}

static uint64_t occupancy(const struct port *p, int tc, uint64_t c)
{
    uint64_t v = tc == 3 ? H(p, K_OCC, c) % 65536 : 0;
    for (int w = 0; w < p->nwin; w++) {
        const struct win *wn = &p->win[w];
        const struct scen *sc = wn->sc;
        if (sc->type == SC_MB && tc == 3 && 10 * c + 10 > sc->a) {
            uint64_t lo = 10 * c >= sc->a ? (10 * c - sc->a) / 275 : 0;
            uint64_t hi = min64((10 * c + 9 - sc->a) / 275 + 1, wn->n);
            for (uint64_t i = lo; i < hi; i++) {
                uint64_t s = mb_start(p, sc, i);
                if (s < 10 * c + 10 && s + mb_len(p, i) > 10 * c)
                    v = max64(v, (16ULL << 20) - H(p, K_MB_OCC, i) % (1ULL << 20));
            }
        } else if (sc->type == SC_PFC && sc->prio == tc && 10 * c < sc->b && 10 * c + 10 > sc->a) {
            v = max64(v, (15ULL << 20) - H(p, K_PFCOCC, c) % (1ULL << 18));
        }
    }
    return v;
}

static void raw_host(const struct port *p, uint64_t t, uint64_t *v)
{
    uint64_t scn = 0;
    for (int w = 0; w < p->nwin; w++)
        if (p->win[w].sc->type == SC_SYM)
            scn += table_count(p->win[w].t[0], window_ns(p->win[w].sc, t));
    uint64_t retr_to = scn >> 6;
    v[0] = (uint64_t)proc_value(p, &p->retr, t, 1) + scn;
    v[1] = retr_to;
    v[2] = scn >> 8;
    v[3] = (uint64_t)proc_value(p, &p->oos, t, 1) + (scn * 3 >> 2);
    v[4] = scn >> 3;
    v[5] = retr_to;
    v[6] = (uint64_t)proc_value(p, &p->cnp, t, 1);
    v[7] = (uint64_t)proc_value(p, &p->cnph, t, 1);
    v[8] = (uint64_t)proc_value(p, &p->ecnr, t, 1);
    v[9] = (uint64_t)(proc_value(p, &p->tx, t, 1) >> 2);
    v[10] = (uint64_t)(proc_value(p, &p->rx, t, 1) >> 2);
}

/* Every counter at t before clears, truncated to 64 bits. */
static void raw(const struct port *p, uint64_t t, uint64_t *v)
{
    if (p->host) {
        raw_host(p, t, v);
        return;
    }
    memset(v, 0, N_SWITCH * sizeof *v);
    const u128 den = (u128)SLOT << 20;
    u128 rx, tx, corr;
    uint64_t down = 0, changes = 0, sym = 0, eff = 0, qd = 0, wd = 0;
    uint32_t tcs = 1u << 3;
    if (!p->nwin) {
        rx = proc_x(p, &p->rx, t, 0) / (SLOT << 10);
        tx = proc_x(p, &p->tx, t, 0) / (SLOT << 10);
        corr = proc_x(p, &p->corr, t, 0) / (SLOT << 10);
    } else {
        i128 n_rx = (i128)proc_x(p, &p->rx, t, 1) << 10;
        i128 n_tx = (i128)proc_x(p, &p->tx, t, 1) << 10;
        i128 n_corr = (i128)proc_x(p, &p->corr, t, 1) << 10;
        for (int w = 0; w < p->nwin; w++) {
            const struct win *wn = &p->win[w];
            const struct scen *sc = wn->sc;
            if (sc->type != SC_FLAP)
                continue;
            uint64_t d = 0;
            flap_state(p, wn, t, &d, &changes);
            down += d;
            n_rx -= (i128)rate_at(&p->rx, sc->a) * d << 10;
            n_tx -= (i128)rate_at(&p->tx, sc->a) * d << 10;
            n_corr -= (i128)rate_at(&p->corr, sc->a) * d << 10;
        }
        for (int w = 0; w < p->nwin; w++) {
            const struct win *wn = &p->win[w];
            const struct scen *sc = wn->sc;
            uint64_t wns = window_ns(sc, t);
            if (sc->type == SC_SYM) {
                sym += table_count(wn->t[0], wns);
                eff += table_count(wn->t[1], wns);
                i128 dn = (i128)table_weighted_ns(wn->t[2], wns);
                n_rx -= (i128)rate_at(&p->rx, sc->a) * dn;
                n_tx -= (i128)rate_at(&p->tx, sc->a) * dn;
            } else if (sc->type == SC_PFC) {
                int pr = sc->prio;
                struct proc pfc;
                proc_init(p, &pfc, 200 << 10, 100 << 10, K_PFC + 64 * pr);
                v[C_IN_PFC0 + pr] += (uint64_t)proc_value(p, &pfc, wns, 0);
                v[C_RX_PAUSE0 + pr] += (uint64_t)((u128)wns * 99 / 100000);
                if (wns) {
                    uint64_t a = sc->a * SLOT;
                    n_tx -= 973 * ((i128)proc_x(p, &p->tx, a + wns, 1) -
                                   (i128)proc_x(p, &p->tx, a, 1));
                }
                tcs |= 1u << pr;
            } else if (sc->type == SC_MB) {
                qd += mb_drops(p, wn, t, K_MB_DROP, 1500, 1001);
                wd += mb_drops(p, wn, t, K_MB_WRED, 400, 301);
            }
        }
        rx = (u128)n_rx / den;
        tx = (u128)n_tx / den;
        corr = (u128)n_corr / den;
    }
    v[0] = (uint64_t)rx;
    v[1] = (uint64_t)(rx >> 12);
    v[2] = (uint64_t)(rx >> 27);
    v[3] = (uint64_t)(rx >> 32);
    v[4] = (uint64_t)tx;
    v[5] = (uint64_t)(tx >> 12);
    v[6] = (uint64_t)(tx >> 27);
    v[7] = (uint64_t)(tx >> 32);
    v[C_IN_FRAME_ERR] = eff;
    v[C_IN_ERR] = eff;
    v[C_OUT_DISC] = qd + wd;
    v[C_OUT_QDROPS] = qd;
    v[C_OUT_WRED] = wd;
    v[C_OUT_Q0_WRED + 3] = wd;
    v[C_ECN0 + 3] = (uint64_t)(tx >> 23);
    v[C_PHY_BITS] = (uint64_t)((u128)p->speed * (t - down) / 1000);
    v[C_PHY_SYM] = sym;
    v[C_PHY_CORR] = (uint64_t)corr;
    v[C_PHY_EFF] = eff;
    u128 lane = corr / (unsigned)p->lanes;
    for (int i = 0; i < p->lanes && i < 8; i++)
        v[C_LANE0 + i] = (uint64_t)lane;
    v[C_CARRIER] = changes;
    uint64_t c = t / CELL;
    for (int tc = 0; tc < 8; tc++) {
        if (!(tcs & (1u << tc)))
            continue;
        uint64_t lv = 0, wm = 0;
        for (uint64_t x = c - c % EPOCH_CELLS; x <= c; x++) {
            lv = occupancy(p, tc, x);
            wm = max64(wm, lv);
        }
        v[C_OCC0 + tc] = lv;
        v[C_WM0 + tc] = wm;
    }
}

static void port_values(const struct port *p, uint64_t t, uint64_t *out)
{
    raw(p, t, out);
    const uint64_t *base = NULL;
    for (int i = 0; i < p->nclear; i++)
        if (p->clear_ts[i] <= t)
            base = p->clear_vals + (size_t)i * p->ncounters;
    if (p->host) {
        for (int i = 0; i < N_HOST; i++) {
            if (base)
                out[i] -= base[i];
            if (i < 6)
                out[i] &= MASK32;
        }
    } else if (base) {
        for (int i = 0; i < C_OCC0; i++)
            out[i] -= base[i];
    }
}

/* --- config ---------------------------------------------------------------------------- */

static const char *const KEYS[] = {"role", "seed", "start", "ports", "uplinks", "load", "scenario"};
#define KNOWN_KEYS "role seed start ports uplinks load scenario"
#define KNOWN_SC "symbol-errors imbalance pfc-storm microburst link-flap counter-clear breakout"

/* digits only, at most 20 of them, value <= limit */
static int parse_uint(const char *s, uint64_t limit, uint64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > 20)
        return -1;
    u128 v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        v = v * 10 + (unsigned)(*c - '0');
    }
    if (v > limit)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* ^([0-9]+)(\.([0-9]{1,6}))?(ms|s|m|h)$, integer part at most 15 digits, < 2^62 ns */
static int parse_time(const char *s, uint64_t *out)
{
    const char *c = s;
    u128 ip = 0, fp = 0, fdiv = 1;
    int nd = 0;
    while (*c >= '0' && *c <= '9') {
        ip = ip * 10 + (unsigned)(*c++ - '0');
        nd++;
    }
    if (nd == 0 || nd > 15)
        return -1;
    if (*c == '.') {
        c++;
        int nf = 0;
        while (*c >= '0' && *c <= '9') {
            fp = fp * 10 + (unsigned)(*c++ - '0');
            fdiv *= 10;
            nf++;
        }
        if (nf < 1 || nf > 6)
            return -1;
    }
    u128 unit;
    if (!strcmp(c, "ms"))
        unit = 1000000;
    else if (!strcmp(c, "s"))
        unit = 1000000000;
    else if (!strcmp(c, "m"))
        unit = 60000000000ULL;
    else if (!strcmp(c, "h"))
        unit = 3600000000000ULL;
    else
        return -1;
    u128 ns = ip * unit + fp * unit / fdiv;
    if (ns >= ((u128)1 << 62))
        return -1;
    *out = (uint64_t)ns;
    return 0;
}

static int parse_scenario(struct sim *s, const char *spec, char *err, size_t errlen)
{
    if (s->nsc >= MAX_SCENARIOS) {
        errf(err, errlen, "sim: too many scenarios (max %d)", MAX_SCENARIOS);
        return -1;
    }
    struct scen *sc = &s->sc[s->nsc];
    memset(sc, 0, sizeof *sc);
    sc->spec = strdup(spec);
    if (!sc->spec) {
        errf(err, errlen, "sim: out of memory");
        return -1;
    }
    s->nsc++;
    sc->ord = s->nsc - 1;
    sc->prio = -1;
    char *head = strdup(spec);
    if (!head) {
        errf(err, errlen, "sim: out of memory");
        return -1;
    }
    int rc = -1;
    char *port = strchr(head, ':');
    if (port)
        *port++ = '\0';
    char *times = strchr(head, '@');
    if (times)
        *times++ = '\0';
    sc->type = -1;
    for (int i = 0; i < N_SC; i++)
        if (!strcmp(head, SC_NAMES[i]))
            sc->type = i;
    if (sc->type < 0) {
        errf(err, errlen, "sim: scenario '%s': unknown name (known: %s)", head, KNOWN_SC);
        goto out;
    }
    if (port) {
        char *slash = strchr(port, '/');
        if (slash) {
            *slash++ = '\0';
            if (sc->type != SC_PFC) {
                errf(err, errlen, "sim: scenario '%s': a priority is only for pfc-storm", spec);
                goto out;
            }
            uint64_t pr;
            if (parse_uint(slash, 7, &pr)) {
                errf(err, errlen, "sim: scenario '%s': priority must be 0..7", spec);
                goto out;
            }
            sc->prio = (int)pr;
        }
        if (!*port) {
            errf(err, errlen, "sim: scenario '%s': empty port name", spec);
            goto out;
        }
        if (strlen(port) >= SWTEL_ASIC_NAME_MAX) {
            errf(err, errlen, "sim: scenario '%s': no port '%s'", spec, port);
            goto out;
        }
        sc->has_port = 1;
        strcpy(sc->port, port);
    }
    uint64_t a_ns = 0, b_ns = 0;
    int has_b = 0;
    if (times) {
        char *second = strchr(times, '-');
        if (second)
            *second++ = '\0';
        if (parse_time(times, &a_ns)) {
            errf(err, errlen, "sim: scenario '%s': bad time '%s' (e.g. 5s, 500ms, 2m)", spec,
                 times);
            goto out;
        }
        if (second && *second) {
            if (parse_time(second, &b_ns)) {
                errf(err, errlen, "sim: scenario '%s': bad time '%s' (e.g. 5s, 500ms, 2m)", spec,
                     second);
                goto out;
            }
            has_b = 1;
        }
    }
    sc->a = a_ns / SLOT;
    sc->b = (!has_b || sc->type == SC_CLEAR || sc->type == SC_BREAKOUT) ? INF : b_ns / SLOT;
    if (sc->b <= sc->a) {
        errf(err, errlen, "sim: scenario '%s': end must be after start (10 ms resolution)", spec);
        goto out;
    }
    rc = 0;
out:
    free(head);
    return rc;
}

static int parse_config(struct sim *s, const char *config, char *err, size_t errlen)
{
    s->role = 0;
    s->seed = 1;
    s->start = -1;
    s->nports_cfg = 0;
    s->nuplinks = 4;
    s->load = 550000;
    char *buf = strdup(config);
    if (!buf) {
        errf(err, errlen, "sim: out of memory");
        return -1;
    }
    int rc = -1, seen = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t\n\v\f\r", &save); tok;
         tok = strtok_r(NULL, " \t\n\v\f\r", &save)) {
        char *val = strchr(tok, '=');
        if (!val || val == tok) {
            errf(err, errlen, "sim: expected key=value, got '%s'", tok);
            goto out;
        }
        *val++ = '\0';
        int key = -1;
        for (int i = 0; i < 7; i++)
            if (!strcmp(tok, KEYS[i]))
                key = i;
        if (key < 0) {
            errf(err, errlen, "sim: unknown key '%s' (known: %s)", tok, KNOWN_KEYS);
            goto out;
        }
        if (key != 6) {
            if (seen & (1 << key)) {
                errf(err, errlen, "sim: duplicate key '%s'", tok);
                goto out;
            }
            seen |= 1 << key;
        }
        uint64_t v;
        switch (key) {
        case 0:
            if (!strcmp(val, "spine"))
                s->role = 0;
            else if (!strcmp(val, "leaf"))
                s->role = 1;
            else if (!strcmp(val, "host"))
                s->role = 2;
            else {
                errf(err, errlen, "sim: role: expected spine, leaf or host, got '%s'", val);
                goto out;
            }
            break;
        case 1:
            if (parse_uint(val, UINT64_MAX, &v)) {
                errf(err, errlen, "sim: seed: expected an unsigned 64-bit integer, got '%s'", val);
                goto out;
            }
            s->seed = v;
            break;
        case 2:
            if (parse_uint(val, INT64_MAX, &v)) {
                errf(err, errlen, "sim: start: expected Unix epoch nanoseconds, got '%s'", val);
                goto out;
            }
            s->start = (int64_t)v;
            break;
        case 3:
            if (parse_uint(val, 1024, &v) || v == 0) {
                errf(err, errlen, "sim: ports: expected 1..1024, got '%s'", val);
                goto out;
            }
            s->nports_cfg = (int)v;
            break;
        case 4:
            if (strcmp(val, "4") && strcmp(val, "8")) {
                errf(err, errlen, "sim: uplinks: expected 4 or 8, got '%s'", val);
                goto out;
            }
            s->nuplinks = val[0] - '0';
            break;
        case 5: {
            /* ^[0-9](\.[0-9]{1,6})?$ and <= 1 */
            int ok = val[0] >= '0' && val[0] <= '9';
            uint64_t ppm = ok ? (uint64_t)(val[0] - '0') * 1000000 : 0;
            const char *c = val + 1;
            if (ok && *c == '.') {
                c++;
                uint64_t scale = 100000;
                int nf = 0;
                while (*c >= '0' && *c <= '9' && nf < 7) {
                    ppm += (uint64_t)(*c++ - '0') * scale;
                    scale /= 10;
                    nf++;
                }
                ok = nf >= 1 && nf <= 6;
            }
            if (!ok || *c || ppm > 1000000) {
                errf(err, errlen, "sim: load: expected 0.0..1.0, got '%s'", val);
                goto out;
            }
            s->load = ppm;
            break;
        }
        default: {
            char *p = val;
            for (;;) {
                char *comma = strchr(p, ',');
                if (comma)
                    *comma = '\0';
                if (parse_scenario(s, p, err, errlen))
                    goto out;
                if (!comma)
                    break;
                p = comma + 1;
            }
        }
        }
    }
    if (s->role == 2 && s->nports_cfg) {
        errf(err, errlen, "sim: ports: not with role=host");
        goto out;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

/* --- open ------------------------------------------------------------------------------- */

static void port_init(struct sim *s, struct port *p, const char *name, const char *parent,
                      uint64_t speed, uint32_t flags)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->parent, sizeof p->parent, "%s", parent);
    p->speed = speed;
    p->flags = flags;
    p->hbase = s->seed * 0x9E3779B97F4A7C15ULL + fnv1a(name) * 0xD6E8FEB86659FD93ULL;
    p->host = !!(flags & SWTEL_ASIC_PORT_HOST);
    p->lanes = speed / 100000 > 1 ? (int)(speed / 100000) : 1;
    p->ncounters = p->host ? N_HOST : N_SWITCH;
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

static struct table *make_table(const struct port *p, uint64_t key, int kind, uint64_t mult)
{
    struct table *tb = malloc(sizeof *tb);
    if (!tb)
        return NULL;
    tb->pre[0] = 0;
    for (uint64_t i = 0; i < PERIOD; i++) {
        uint64_t h = H(p, key, i), x;
        switch (kind) {
        case 0: /* host retransmissions */
            x = 20 + h % 281;
            break;
        case 1: /* symbol errors */
            x = (((h % 64) * (h % 64)) >> 2) * mult;
            break;
        case 2: /* effective errors */
            x = h % 8;
            break;
        default: /* throughput dips (fraction lost, /1024) */
            x = h % 100 < 30 ? 1024 - (410 + (h >> 32) % 307) : 0;
        }
        tb->v[i] = (uint32_t)x;
        tb->pre[i + 1] = tb->pre[i] + x;
    }
    return tb;
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

static void sim_close(void *h);

static int build(struct sim *s, char *err, size_t errlen)
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
    int touched[MAX_SCENARIOS], ntouched = 0;
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
                int sym11 = sc->type == SC_SYM && find_port(s, "swp11s1") >= 0;
                strcpy(sc->port, sym11 ? "swp11s1" : "swp1");
                sc->has_port = 1;
            }
            int pi = find_port(s, sc->port);
            if (pi < 0) {
                errf(err, errlen, "sim: scenario '%s': no port '%s'", sc->spec, sc->port);
                return -1;
            }
            list[n++] = pi;
        }
        if (sc->type == SC_PFC && sc->prio < 0)
            sc->prio = 3;
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
            raw(p, p->clear_ts[c], p->clear_vals + (size_t)c * p->ncounters);
    }
    return 0;
oom:
    errf(err, errlen, "sim: out of memory");
    return -1;
}

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

static int gen_at(const struct sim *s, uint64_t t)
{
    int g = 0;
    for (int b = 0; b < s->nbo; b++)
        if (s->sc[s->bo_sc[b]].a * SLOT <= t)
            g++;
    return g;
}

static void names_init(struct sim *s)
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
    for (int i = 0; i < 8; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "tc_curr_occupancy_%d", i);
    for (int i = 0; i < 8; i++)
        snprintf(s->cnames[n++], SWTEL_ASIC_NAME_MAX, "tc_watermark_%d", i);
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
    return p ? p->ncounters : -1;
}

static int sim_counter_info(void *h, int port, int counter, struct swtel_asic_counter *out)
{
    const struct sim *s = h;
    const struct port *p = listed_port(s, port);
    if (!p || !out || counter < 0 || counter >= p->ncounters)
        return -1;
    memset(out, 0, sizeof *out);
    if (p->host) {
        snprintf(out->name, sizeof out->name, "%s", HOST_NAMES[counter]);
        out->width = counter < 6 ? 32 : 64;
        out->kind = SWTEL_ASIC_COUNTER;
    } else {
        memcpy(out->name, s->cnames[counter], sizeof out->name);
        out->width = 64;
        out->kind = counter < C_OCC0 ? SWTEL_ASIC_COUNTER : SWTEL_ASIC_GAUGE;
    }
    return 0;
}

static int sim_read(void *h, uint64_t generation, uint64_t *values, size_t n, int64_t *ts_ns,
                    char *err, size_t errlen)
{
    const struct sim *s = h;
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
    for (int i = 0; i < s->gen_n[g]; i++) {
        const struct port *p = &s->ports[s->gen_ports[g][i]];
        port_values(p, t, out);
        out += p->ncounters;
    }
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
};

__attribute__((visibility("default"))) const struct swtel_asic_ops *swtel_asic_plugin(void)
{
    return &OPS;
}
