/* The simulated switch's config string: space-separated key=value (role, seed, start,
 * ports, uplinks, load, asic) and scenario=NAME[@START[-[END]]][:PORT[/PRIO]] (repeatable,
 * or comma-separated), checked and parsed into struct sim; layout.c places the scenarios.
 * fec-degrade needs its END, at least 2 s after START: its uncorrectable codewords begin
 * at END - (END - START) / 10; PORT[:LANE] (lane 0..7, default 0; layout.c checks the port has
 * it): the lane whose histogram takes the tail. incast takes PORT/TC[/LEN[/PERIOD]]: bursts of 1 ms..LEN
 * (50ms), one per PERIOD (2s). drops takes PORT:REASON (DROP_REASONS): a reason's drops at
 * 1,000 packets/s. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static const char *const SC_NAMES[] = {"symbol-errors", "imbalance", "pfc-storm", "microburst",
                                       "link-flap", "counter-clear", "breakout", "fec-degrade",
                                       "incast", "drops"};

static const char *const KEYS[] = {"role",    "seed", "start", "ports",
                                   "uplinks", "load", "asic",  "scenario"};
#define N_KEYS 8
#define K_SCENARIO 7
#define KNOWN_KEYS "role seed start ports uplinks load asic scenario"
#define KNOWN_SC \
    "symbol-errors imbalance pfc-storm microburst link-flap counter-clear breakout fec-degrade " \
    "incast drops"

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
    if (sc->type == SC_INCAST) {
        sc->blen = IC_LEN;
        sc->period = IC_PERIOD;
    }
    if (sc->type == SC_DROPS) {
        /* PORT:REASON, both required */
        char *reason = port ? strchr(port, ':') : NULL;
        if (!reason || !reason[1]) {
            errf(err, errlen,
                 "sim: scenario '%s': needs a port and a reason (drops@START-END:PORT:REASON)",
                 spec);
            goto out;
        }
        *reason++ = '\0';
        sc->reason = -1;
        for (int i = 0; i < N_DROP; i++)
            if (!strcmp(reason, DROP_REASONS[i]))
                sc->reason = i;
        if (sc->reason < 0) {
            char known[512] = "";
            for (int i = 0; i < N_DROP; i++) {
                strcat(known, i ? " " : "");
                strcat(known, DROP_REASONS[i]);
            }
            errf(err, errlen, "sim: scenario '%s': unknown drop reason '%s' (known: %s)", spec,
                 reason, known);
            goto out;
        }
    }
    if (sc->type == SC_FEC && port) {
        /* PORT[:LANE] */
        char *lane = strchr(port, ':');
        if (lane) {
            *lane++ = '\0';
            uint64_t ln;
            if (parse_uint(lane, MAX_LANES - 1, &ln)) {
                errf(err, errlen, "sim: scenario '%s': lane must be 0..%d", spec, MAX_LANES - 1);
                goto out;
            }
            sc->lane = (int)ln;
        }
    }
    if (port) {
        char *slash = strchr(port, '/');
        if (slash) {
            *slash++ = '\0';
            if (sc->type != SC_PFC && sc->type != SC_INCAST) {
                errf(err, errlen,
                     "sim: scenario '%s': a priority is only for pfc-storm (a traffic class for "
                     "incast)",
                     spec);
                goto out;
            }
            /* incast: TC[/LEN[/PERIOD]] */
            char *len = sc->type == SC_INCAST ? strchr(slash, '/') : NULL, *per = NULL;
            if (len) {
                *len++ = '\0';
                if ((per = strchr(len, '/')))
                    *per++ = '\0';
            }
            uint64_t pr;
            if (parse_uint(slash, 7, &pr)) {
                errf(err, errlen, "sim: scenario '%s': %s must be 0..7", spec,
                     sc->type == SC_PFC ? "priority" : "traffic class");
                goto out;
            }
            sc->prio = (int)pr;
            if (len && parse_time(len, &sc->blen)) {
                errf(err, errlen, "sim: scenario '%s': bad burst length '%s' (e.g. 20ms)", spec, len);
                goto out;
            }
            if (per && parse_time(per, &sc->period)) {
                errf(err, errlen, "sim: scenario '%s': bad period '%s' (e.g. 2s)", spec, per);
                goto out;
            }
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
    if (sc->type == SC_INCAST) {
        if (sc->period < IC_PERIOD_MIN || sc->period > IC_PERIOD_MAX) {
            errf(err, errlen, "sim: scenario '%s': period must be 100ms..60s", spec);
            goto out;
        }
        if (sc->blen < MS || sc->blen > sc->period / 2) {
            errf(err, errlen, "sim: scenario '%s': burst length must be 1ms..half the period",
                 spec);
            goto out;
        }
    }
    sc->a = a_ns / SLOT;
    sc->b = (!has_b || sc->type == SC_CLEAR || sc->type == SC_BREAKOUT) ? INF : b_ns / SLOT;
    if (sc->b <= sc->a) {
        errf(err, errlen, "sim: scenario '%s': end must be after start (10 ms resolution)", spec);
        goto out;
    }
    if (sc->type == SC_FEC) {
        if (sc->b == INF || sc->b - sc->a < FEC_MIN_SLOTS) {
            errf(err, errlen,
                 "sim: scenario '%s': needs an end at least 2s after its start "
                 "(fec-degrade@START-END)",
                 spec);
            goto out;
        }
        sc->fail = sc->b - (sc->b - sc->a) / 10;
    }
    rc = 0;
out:
    free(head);
    return rc;
}

int parse_config(struct sim *s, const char *config, char *err, size_t errlen)
{
    s->role = 0;
    s->seed = 1;
    s->start = -1;
    s->nports_cfg = 0;
    s->nuplinks = 4;
    s->load = 550000;
    s->cell = 192;
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
        for (int i = 0; i < N_KEYS; i++)
            if (!strcmp(tok, KEYS[i]))
                key = i;
        if (key < 0) {
            errf(err, errlen, "sim: unknown key '%s' (known: %s)", tok, KNOWN_KEYS);
            goto out;
        }
        if (key != K_SCENARIO) {
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
        case 6:
            if (!strcmp(val, "spectrum1"))
                s->cell = 96;
            else if (!strcmp(val, "spectrum2") || !strcmp(val, "spectrum3"))
                s->cell = 144;
            else if (!strcmp(val, "spectrum4"))
                s->cell = 192;
            else {
                errf(err, errlen,
                     "sim: asic: expected spectrum1, spectrum2, spectrum3 or spectrum4, got '%s'",
                     val);
                goto out;
            }
            break;
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
