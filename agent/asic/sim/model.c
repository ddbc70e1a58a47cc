/* The simulated switch's traffic model (tests/sim_model.py, function for function): every
 * counter of a port as a pure function of the time since start, scenarios included, and the
 * values after counter clears. */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xCBF29CE484222325ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001B3ULL;
    return h;
}

uint64_t flap_down(const struct port *p, const struct scen *sc, uint64_t i)
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

void proc_init(const struct port *p, struct proc *pr, uint64_t R, uint64_t J, uint32_t key)
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

uint64_t mb_count(const struct port *p, const struct scen *sc)
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

/* incast: drops before burst i, E(i) = 1000i + g(i) - g(0); burst i drops E(i+1) - E(i) */
static inline uint64_t ic_e(const struct port *p, uint64_t i)
{
    return mb_e(p, K_IC_DROP, 1000, 1001, i);
}

/* incast burst i: its start (ns), length (ns), top (cells, IC_BASE and IC_PER_DROP) and drops */
static void ic_burst(const struct port *p, const struct scen *sc, uint64_t i, uint64_t *st,
                     uint64_t *len, uint64_t *top, uint64_t *drops)
{
    *len = MS + H(p, K_IC_LEN, i) % ((sc->blen - MS) / US + 1) * US;
    *st = sc->a * SLOT + i * sc->period + H(p, K_IC_START, i) % (sc->period / (4 * US)) * US;
    *drops = ic_e(p, i + 1) - ic_e(p, i);
    *top = IC_BASE / p->cell + *drops * (IC_PER_DROP / p->cell);
}

/* The highest incast level (cells) in [lo, t] of one window: a burst ramps linearly to its
 * top, reached at its last ns, and is gone after (the queue drains within microseconds). */
static uint64_t ic_peak(const struct port *p, const struct win *wn, uint64_t lo, uint64_t t)
{
    const struct scen *sc = wn->sc;
    uint64_t a = sc->a * SLOT;
    if (t < a || !wn->n)
        return 0;
    uint64_t hi = min64((t - a) / sc->period, wn->n - 1), pk = 0;
    for (uint64_t i = lo > a ? (lo - a) / sc->period : 0; i <= hi; i++) {
        uint64_t st, len, top, d;
        ic_burst(p, sc, i, &st, &len, &top, &d);
        if (st <= t && st + len > lo)
            pk = max64(pk, top * (min64(t, st + len - 1) - st + 1) / len);
    }
    return pk;
}

/* incast's drops, ECN marks and PFC pause frames sent at t, each rising with a burst's
 * level: 1536 + drops marks a burst (about a mark per 4 KiB above the ECN threshold), a
 * pause frame per PFC_CELLS cells above the PG's XOFF threshold. */
static void ic_counts(const struct port *p, const struct win *wn, uint64_t t, uint64_t *drops,
                      uint64_t *ecn, uint64_t *pfc)
{
    const struct scen *sc = wn->sc;
    uint64_t a = sc->a * SLOT;
    if (t < a)
        return;
    uint64_t i = min64((t - a) / sc->period, wn->n), lv = 0, d = 0, top = 1;
    if (i < wn->n) {
        uint64_t st, len;
        ic_burst(p, sc, i, &st, &len, &top, &d);
        lv = t < st ? 0 : top * (min64(t, st + len - 1) - st + 1) / len;
    }
    /* over the bursts before i: sums of terms linear in each burst's drops */
    uint64_t xoff = PG_XOFF / p->cell, e = ic_e(p, i);
    uint64_t above = i * (IC_BASE / p->cell - xoff) + e * (IC_PER_DROP / p->cell);
    *drops += e + d * lv / top;
    *ecn += 1536 * i + e + (1536 + d) * lv / top;
    *pfc += (above + (lv > xoff ? lv - xoff : 0)) / PFC_CELLS;
}

/* a PG's shared (up to XOFF) and headroom (1/16 of the rest) cells at an incast level */
static inline uint64_t pg_shared(const struct port *p, uint64_t lv)
{
    return min64(lv, PG_XOFF / p->cell);
}

static inline uint64_t pg_headroom(const struct port *p, uint64_t lv)
{
    uint64_t xoff = PG_XOFF / p->cell;
    return lv > xoff ? (lv - xoff) / HR_DIV : 0;
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

/* fec-degrade: the first slot of phase j (0..12, the tail's front at bin 3 + j); 13: the end */
static uint64_t fec_phase(const struct scen *sc, int j)
{
    if (j > FEC_PHASES)
        return sc->b;
    return sc->a + (sc->fail - sc->a) * (uint64_t)j / FEC_PHASES;
}

/* fec-degrade's codewords per bin at t, added to tail: in phase j the front bin m = 3 + j
 * gets S/64000 codewords/s and each bin below it twice the one above (a log-linear tail
 * whose front moves out), monotonic in t. */
static void fec_tail(const struct port *p, const struct scen *sc, uint64_t t, uint64_t *tail)
{
    for (int k = 1; k < FEC_BINS; k++) {
        u128 n = 0;
        for (int j = k > 3 ? k - 3 : 0; j <= FEC_PHASES; j++) {
            uint64_t lo = fec_phase(sc, j) * SLOT, hi = fec_phase(sc, j + 1) * SLOT;
            if (t > lo)
                n += ((u128)p->speed << (3 + j - k)) * (min64(t, hi) - lo);
        }
        tail[k] += (uint64_t)(n / FEC_DEN);
    }
}

/* Lane i's share of n spread over `lanes`: the remainder to the first lanes, so the shares sum
 * to n exactly and each is monotonic in n. The sim's lanes are 1, 2 or 4: a shift and a mask
 * (the same quotient and remainder), a division otherwise. */
static inline uint64_t lane_share(uint64_t n, int lanes, int i)
{
    if (!(lanes & (lanes - 1))) {
        int sh = __builtin_ctz((unsigned)lanes);
        return (n >> sh) + ((uint64_t)i < (n & (uint64_t)(lanes - 1)));
    }
    return n / (unsigned)lanes + ((uint64_t)i < n % (unsigned)lanes);
}

/* The RS-FEC histograms from the PHY's counters, per lane: bin k >= 1 holds lane i's share of
 * corr >> (3k - 2) codewords (corr: the corrected bits before fec-degrade's tail; each a shift
 * of a monotonic count, so monotonic itself; about 65 % of the corrected symbols) plus the tails
 * of the lane (`ltail` rows of the lanes in `touched`), bin 0 the rest of the lane's share of
 * the codewords received. The port's histogram is the sum of its lanes'. A healthy link: mass
 * in bins 0-2. */
static void fec_bins(const struct port *p, uint64_t *v, uint64_t corr,
                     uint64_t (*ltail)[FEC_BINS], unsigned touched)
{
    int lanes = p->lanes;
    uint64_t cw = v[C_PHY_BITS] / CW_BITS, bin0 = 0;
    for (int i = 0; i < lanes; i++) {
        uint64_t *lv = v + C_LANE_FEC0 + FEC_BINS * i, errored = 0;
        for (int k = 1; k < FEC_BINS; k++) {
            uint64_t n = lane_share(corr >> (3 * k - 2), lanes, i);
            if (touched >> i & 1)
                n += ltail[i][k];
            lv[k] = n;
            errored += n;
            v[C_FEC0 + k] += n;
        }
        uint64_t c = lane_share(cw, lanes, i);
        lv[0] = c > errored ? c - errored : 0;
        bin0 += lv[0];
    }
    v[C_FEC0] = bin0;
}

/* The port's drop counters as sums of its drop reasons (docs/insights.md): every ingress
 * reason is an ingress discard and the l3 ones also L3 drops; tail drops are the queue drops,
 * early drops WRED (TC 3's), the egress ACL's the drops outside a queue, and the egress
 * discards those three. No reason is an ingress buffer drop (the ingress PGs are lossless). */
static void drop_sums(uint64_t *v)
{
    const uint64_t *r = v + C_DROP0;
    v[C_IN_L3] = r[R_BLACKHOLE] + r[R_TTL] + r[R_NEIGH];
    v[C_IN_BLACKHOLE] = r[R_BLACKHOLE];
    v[C_IN_ACL] = r[R_ACL_IN];
    v[C_IN_DISC] = r[R_LINK_DOWN] + r[R_VLAN] + r[R_SMAC_MC] + r[R_STP] + v[C_IN_L3] + r[R_DECAP] +
                   r[R_OVERLAY_SMAC] + r[R_ACL_IN];
    v[C_OUT_QDROPS] = r[R_TAIL];
    v[C_OUT_WRED] = r[R_EARLY];
    v[C_OUT_Q0_WRED + 3] = r[R_EARLY];
    v[C_OUT_NONQ] = r[R_ACL_OUT];
    v[C_OUT_DISC] = r[R_TAIL] + r[R_EARLY] + r[R_ACL_OUT];
}

/* Every counter at t before clears, truncated to 64 bits; the peaks (PEAK kind) since the
 * previous read at `since` (<= t). */
void raw(const struct port *p, uint64_t t, uint64_t since, uint64_t *v)
{
    if (p->host) {
        raw_host(p, t, v);
        return;
    }
    memset(v, 0, (size_t)p->ncounters * sizeof *v);
    const u128 den = (u128)SLOT << 20;
    u128 rx, tx, corr;
    uint64_t down = 0, changes = 0, sym = 0, eff = 0, qd = 0, wd = 0;
    /* fec-degrade's extra codewords per lane and bin (rows of the lanes in `touched` only) */
    uint64_t ltail[MAX_LANES][FEC_BINS];
    unsigned touched = 0;
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
            } else if (sc->type == SC_INCAST) {
                ic_counts(p, wn, t, &qd, &v[C_ECN0 + sc->prio], &v[C_OUT_PFC0 + sc->prio]);
                tcs |= 1u << sc->prio;
            } else if (sc->type == SC_FEC) {
                uint64_t f = sc->fail * SLOT, e = min64(t, sc->b * SLOT);
                uint64_t failing = e > f ? e - f : 0;
                sym += table_count(wn->t[0], failing);
                eff += table_count(wn->t[1], failing);
                if (!(touched >> sc->lane & 1))
                    memset(ltail[sc->lane], 0, sizeof ltail[sc->lane]);
                touched |= 1u << sc->lane;
                fec_tail(p, sc, t, ltail[sc->lane]);
            } else if (sc->type == SC_DROPS) {
                /* a process of its own, from the window's start */
                struct proc dr;
                proc_init(p, &dr, DROP_RATE << 10, DROP_JITTER << 10, K_DROP + 64 * sc->reason);
                v[C_DROP0 + sc->reason] += (uint64_t)proc_value(p, &dr, wns, 0);
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
    /* microburst's and incast's drops are tail drops and WRED's early drops */
    v[C_DROP0 + R_TAIL] += qd;
    v[C_DROP0 + R_EARLY] += wd;
    drop_sums(v);
    v[C_ECN0 + 3] += (uint64_t)(tx >> 23);
    v[C_PHY_BITS] = (uint64_t)((u128)p->speed * (t - down) / 1000);
    v[C_PHY_SYM] = sym;
    /* the tails' corrected bits: the port's, and each lane's (in its raw errors only) */
    u128 tail_bits = 0, lane_bits[MAX_LANES] = {0};
    for (int i = 0; i < p->lanes; i++) {
        if (!(touched >> i & 1))
            continue;
        for (int k = 1; k < FEC_BINS; k++)
            lane_bits[i] += (u128)k * ltail[i][k];
        tail_bits += lane_bits[i];
    }
    v[C_PHY_CORR] = (uint64_t)(corr + tail_bits);
    v[C_PHY_EFF] = eff;
    for (int i = 0; i < p->lanes; i++)
        v[C_LANE0 + i] = (uint64_t)(corr / (unsigned)p->lanes + lane_bits[i]);
    v[C_CARRIER] = changes;
    uint64_t c = t / CELL;
    /* the peak: every cell from the previous read's (its level lasted past that read) */
    uint64_t c0 = max64(min64(since, t) / CELL, c >= PEAK_CELLS ? c - PEAK_CELLS + 1 : 0);
    for (int tc = 0; tc < 8; tc++) {
        if (!(tcs & (1u << tc)))
            continue;
        uint64_t lv = 0, wm = 0, pk = 0;
        for (uint64_t x = min64(c - c % EPOCH_CELLS, c0); x <= c; x++) {
            lv = occupancy(p, tc, x);
            if (x >= c - c % EPOCH_CELLS)
                wm = max64(wm, lv);
            if (x >= c0)
                pk = max64(pk, lv);
        }
        /* incast's bursts, to the ns: the level at t, the highest since the epoch's start
         * and since the previous read (from the same cell bound as above) */
        for (int w = 0; w < p->nwin; w++) {
            const struct win *wn = &p->win[w];
            if (wn->sc->type != SC_INCAST || wn->sc->prio != tc)
                continue;
            uint64_t lo = max64(min64(since, t), c0 * CELL);
            lv = max64(lv, ic_peak(p, wn, t, t) * p->cell);
            wm = max64(wm, ic_peak(p, wn, (c - c % EPOCH_CELLS) * CELL, t) * p->cell);
            pk = max64(pk, ic_peak(p, wn, lo, t) * p->cell);
        }
        v[C_OCC0 + tc] = lv;
        v[C_WM0 + tc] = wm;
        v[C_PEAK0 + tc] = pk;
    }
    /* the ingress side of incast: PG = TC (priority), the ingress pool 0 their sum (incast
     * windows of a port never overlap, so the pool's peak is one window's); all monotone in
     * the level, so each peak is the level's */
    for (int w = 0; w < p->nwin; w++) {
        const struct win *wn = &p->win[w];
        if (wn->sc->type != SC_INCAST)
            continue;
        int pg = wn->sc->prio;
        uint64_t lv = ic_peak(p, wn, t, t);
        uint64_t wm = ic_peak(p, wn, (c - c % EPOCH_CELLS) * CELL, t);
        uint64_t pk = ic_peak(p, wn, max64(min64(since, t), c0 * CELL), t);
        /* max: two windows of one PG (one after the other) may both be in a peak's span */
        v[C_PG0 + pg] = max64(v[C_PG0 + pg], pg_shared(p, lv) * p->cell);
        v[C_PG_WM0 + pg] = max64(v[C_PG_WM0 + pg], pg_shared(p, wm) * p->cell);
        v[C_PG_PEAK0 + pg] = max64(v[C_PG_PEAK0 + pg], pg_shared(p, pk) * p->cell);
        v[C_HR0 + pg] = max64(v[C_HR0 + pg], pg_headroom(p, lv) * p->cell);
        v[C_HR_WM0 + pg] = max64(v[C_HR_WM0 + pg], pg_headroom(p, wm) * p->cell);
        v[C_HR_PEAK0 + pg] = max64(v[C_HR_PEAK0 + pg], pg_headroom(p, pk) * p->cell);
        v[C_POOL] = max64(v[C_POOL], (pg_shared(p, lv) + pg_headroom(p, lv)) * p->cell);
        v[C_POOL_PEAK] = max64(v[C_POOL_PEAK], (pg_shared(p, pk) + pg_headroom(p, pk)) * p->cell);
    }
    fec_bins(p, v, (uint64_t)corr, ltail, touched);
}

void port_values(const struct port *p, uint64_t t, uint64_t since, uint64_t *out)
{
    raw(p, t, since, out);
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
        for (int i = C_FEC0; i < p->ncounters; i++)
            out[i] -= base[i];
    }
}

struct table *make_table(const struct port *p, uint64_t key, int kind, uint64_t mult)
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
        case 4: /* fec-degrade's effective errors: the first cell has one */
            x = 1 + h % 8;
            break;
        default: /* throughput dips (fraction lost, /1024) */
            x = h % 100 < 30 ? 1024 - (410 + (h >> 32) % 307) : 0;
        }
        tb->v[i] = (uint32_t)x;
        tb->pre[i + 1] = tb->pre[i] + x;
    }
    return tb;
}
