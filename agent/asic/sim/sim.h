/* The simulated Spectrum switch's private header: the types, constants and hash the four
 * files of the plugin share (agent/asic/sim/):
 *
 *   model.c     the traffic model: every counter as a pure function of (port, t)
 *   scenario.c  the config string: keys, scenarios, times
 *   layout.c    the ports, their scenarios and the generations (breakouts), counter names
 *   plugin.c    the ABI (swtel_asic.h): open, layout calls, read, close
 *
 * Every value is a pure function of (config, t = read time - start), the peaks (PEAK kind)
 * of (config, t, the previous read's t): nothing else read depends on earlier reads. Integer arithmetic only, so tests/sim_model.py (the
 * reference model, whose docstring describes the model in full) computes the same
 * values bit for bit. The functions of model.c mirror that file's, name for name.
 *
 * Nothing declared here leaves the shared library: the only exported symbol is
 * swtel_asic_plugin (plugin.c).
 */
#ifndef SWTEL_SIM_H
#define SWTEL_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "../swtel_asic.h"

#pragma GCC visibility push(hidden)

typedef unsigned __int128 u128;
typedef __int128 i128;

#define SLOT 10000000ULL /* ns */
#define CELL (10 * SLOT) /* 100 ms */
#define EPOCH_CELLS 10   /* watermark epoch: 1 s */
#define PERIOD 600       /* cells per scenario table (60 s), then it repeats */
#define INF UINT64_MAX   /* open-ended window end (slots), unbounded event count */
#define MAX_SCENARIOS 64
#define MAX_PORT_WINDOWS 16
/* descriptors of a switch port: 100 counters and gauges, 13 drop reasons, 8 TC peaks, 50 PG and
 * pool gauges and peaks, the port's histogram (172), then one histogram per lane (lanes =
 * speed / 100G: 1, 2 or 4), so 173..176 descriptors and 203..251 values a port */
#define N_DROP 13         /* per-reason drop counters (What Just Happened's groups), DROP_REASONS */
#define N_SWITCH_DESC (159 + N_DROP) /* descriptors before the lanes' histograms */
#define FEC_BINS 16       /* RS(544,514) codewords by corrected symbols: 0..15 */
#define N_SWITCH (N_SWITCH_DESC - 1 + FEC_BINS) /* values before the lanes' histograms (187) */
#define MAX_LANES 8       /* phy_raw_errors_lane0..7; a sim port has at most 4 (400G) */
/* a switch port's values (the lanes' histograms after the port's) and descriptors */
#define SWITCH_VALUES(lanes) (N_SWITCH + (lanes) * FEC_BINS)
#define SWITCH_DESCS(lanes) (N_SWITCH_DESC + (lanes))
#define CW_BITS 5440      /* bits of one RS(544,514) codeword (544 10-bit symbols) */
#define PEAK_CELLS 600    /* a peak covers at most the last 60 s of cells (reads further apart) */
#define N_HOST 11
#define MASK32 0xffffffffULL

enum { K_RX = 1, K_TX = 2, K_CORR = 3, K_OCC = 4, K_FLAP = 5, K_DIP = 6, K_SYM = 8, K_EFF = 9,
       K_PFC = 10, K_PFCOCC = 11, K_MB_START = 12, K_MB_LEN = 13, K_MB_DROP = 14, K_MB_WRED = 15,
       K_MB_OCC = 16, K_RETR = 17, K_RETR_SCN = 18, K_OOS = 19, K_CNP = 20, K_CNPH = 21,
       K_ECNR = 22, K_HTX = 23, K_HRX = 24, K_FEC_EFF = 25, K_IC_START = 26, K_IC_LEN = 27,
       K_IC_DROP = 28, K_DROP = 29 };

enum { SC_SYM, SC_IMB, SC_PFC, SC_MB, SC_FLAP, SC_CLEAR, SC_BREAKOUT, SC_FEC, SC_INCAST, SC_DROPS };
#define N_SC 10
#define IS_TRAFFIC(x) \
    ((x) == SC_SYM || (x) == SC_IMB || (x) == SC_PFC || (x) == SC_FLAP || (x) == SC_FEC)

/* fec-degrade: the tail's front moves from bin 3 to bin 15 in FEC_PHASES steps over a window
 * of at least FEC_MIN_SLOTS; the front bin gets S/64000 codewords/s (FEC_DEN: Mb/s x ns) */
#define FEC_PHASES 12
#define FEC_MIN_SLOTS 200
#define FEC_DEN 64000000000000ULL

/* incast: one burst per period, its start hashed into the period's first quarter (so bursts
 * are at least 3/4 of a period apart), its length 1 ms..LEN in 1 us steps; defaults and
 * bounds of LEN and PERIOD (ns) */
#define US 1000ULL
#define MS 1000000ULL
#define IC_LEN (50 * MS)
#define IC_PERIOD (2000 * MS)
#define IC_PERIOD_MIN (100 * MS)
#define IC_PERIOD_MAX (60000 * MS)
/* an incast burst's top: 6 MiB + 5 KiB per drop (a larger burst drops more), in whole cells
 * of each so sums over bursts stay exact; the PG's XOFF threshold 3 MiB: above it the switch
 * sends PFC pause (one frame per 64 cells) and 1/16 of the excess lands in headroom */
#define IC_BASE (6ULL << 20)
#define IC_PER_DROP 5120ULL
#define PG_XOFF (3ULL << 20)
#define PFC_CELLS 64
#define HR_DIV 16

/* drops: 10 packets per 10 ms slot (1,000/s), jittered by up to half of that */
#define DROP_RATE 10
#define DROP_JITTER 5

/* the drop reasons (DROP_REASONS, layout.c), by group; the port drop counters they sum into:
 * docs/insights.md, "Drop reasons on the simulated switch" */
enum { R_LINK_DOWN, R_VLAN, R_SMAC_MC, R_STP, R_BLACKHOLE, R_TTL, R_NEIGH, R_DECAP, R_OVERLAY_SMAC,
       R_TAIL, R_EARLY, R_ACL_IN, R_ACL_OUT };

/* counter indices (tests/sim_model.py SWITCH_COUNTERS): the counters (the drop reasons after
 * carrier_changes), then the gauges and peaks, the histogram last */
enum { C_IN_OCT = 0, C_OUT_OCT = 4, C_IN_DISC = 8, C_IN_L3 = 9, C_IN_ACL = 11, C_IN_BLACKHOLE = 12,
       C_IN_FRAME_ERR = 14, C_IN_ERR = 15, C_OUT_DISC = 16, C_OUT_QDROPS = 18, C_OUT_NONQ = 19,
       C_OUT_WRED = 20, C_OUT_Q0_WRED = 21, C_IN_PFC0 = 31, C_RX_PAUSE0 = 47, C_ECN0 = 63,
       C_PHY_BITS = 71, C_PHY_SYM = 72, C_PHY_CORR = 73, C_PHY_EFF = 74, C_LANE0 = 75,
       C_CARRIER = 83, C_OUT_PFC0 = 39, C_DROP0 = 84, C_OCC0 = C_DROP0 + N_DROP,
       C_WM0 = C_OCC0 + 8, C_PEAK0 = C_OCC0 + 16, C_PG0 = C_OCC0 + 24, C_PG_WM0 = C_OCC0 + 32,
       C_PG_PEAK0 = C_OCC0 + 40, C_HR0 = C_OCC0 + 48, C_HR_WM0 = C_OCC0 + 56,
       C_HR_PEAK0 = C_OCC0 + 64, C_POOL = C_OCC0 + 72, C_POOL_PEAK = C_OCC0 + 73,
       C_FEC0 = C_OCC0 + 74, C_LANE_FEC0 = N_SWITCH };
/* C_LANE_FEC0 + FEC_BINS * L: lane L's histogram (values); descriptor N_SWITCH_DESC + L */

struct scen {
    int type, ord;
    uint64_t a, b; /* slots */
    uint64_t fail; /* fec-degrade: the first uncorrectable codeword's slot */
    int lane;      /* fec-degrade: the lane its tail goes into (default 0) */
    uint64_t blen, period; /* incast: the longest burst and the period (ns) */
    int prio;      /* pfc-storm's priority, incast's traffic class; -1: none given */
    int reason;    /* drops: the reason (R_*) */
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
    uint64_t cell;              /* bytes of a buffer cell (the generation's: asic=) */
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
    uint64_t cell; /* asic=spectrum1..4: 96, 144, 144, 192 bytes */
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
    int read_once;  /* a read succeeded: last_t holds its time (the PEAK kind clears on read) */
    uint64_t last_t;
    char cnames[N_SWITCH_DESC + MAX_LANES][SWTEL_ASIC_NAME_MAX];
};

/* --- hashing ---------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t H(const struct port *p, uint64_t key, uint64_t idx)
{
    return mix64(p->hbase + key * 0xA0761D6478BD642FULL + idx);
}

static inline uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* plugin.c */
void errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* model.c (tests/sim_model.py) */
uint64_t fnv1a(const char *s);
uint64_t flap_down(const struct port *p, const struct scen *sc, uint64_t i);
void proc_init(const struct port *p, struct proc *pr, uint64_t R, uint64_t J, uint32_t key);
uint64_t mb_count(const struct port *p, const struct scen *sc);
struct table *make_table(const struct port *p, uint64_t key, int kind, uint64_t mult);
void raw(const struct port *p, uint64_t t, uint64_t since, uint64_t *v);
void port_values(const struct port *p, uint64_t t, uint64_t since, uint64_t *out);

/* scenario.c */
int parse_config(struct sim *s, const char *config, char *err, size_t errlen);

/* layout.c */
extern const char *const HOST_NAMES[N_HOST];
extern const char *const DROP_GROUPS[N_DROP];
extern const char *const DROP_REASONS[N_DROP];
int build(struct sim *s, char *err, size_t errlen);
int gen_at(const struct sim *s, uint64_t t);
void names_init(struct sim *s);

#pragma GCC visibility pop

#endif
