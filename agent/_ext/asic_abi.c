/* The ASIC plugin ABI's rules in plain C: see asic_abi.h. */
#include "asic_abi.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ops_complete(const struct swtel_asic_ops *o)
{
    return o->open && o->generation && o->port_count && o->port_info && o->counter_count &&
           o->counter_info && o->read && o->close;
}

int swtel_asic_load(swtel_asic_loaded *p, const char *path, const char *config, char *err, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (p->dl == NULL) {
        const char *why = dlerror();
        snprintf(err, errlen, "cannot load: %s", why ? why : "unknown error");
        return -1;
    }
    swtel_asic_plugin_fn entry = (swtel_asic_plugin_fn)dlsym(p->dl, SWTEL_ASIC_SYMBOL);
    const struct swtel_asic_ops *ops = entry != NULL ? entry() : NULL;
    if (entry == NULL) {
        snprintf(err, errlen, "not a swtel ASIC plugin: no symbol %s", SWTEL_ASIC_SYMBOL);
    } else if (ops == NULL) {
        snprintf(err, errlen, "%s() returned NULL", SWTEL_ASIC_SYMBOL);
    } else if (ops->abi_version != SWTEL_ASIC_ABI_VERSION) {
        snprintf(err, errlen, "ABI version %u, this swtel speaks %u", ops->abi_version, SWTEL_ASIC_ABI_VERSION);
    } else if (ops->ops_size < SWTEL_ASIC_OPS_SIZE_1_0 || !ops_complete(ops)) {
        snprintf(err, errlen, "incomplete ops table (size %u, expected %zu or more)", ops->ops_size,
                 (size_t)SWTEL_ASIC_OPS_SIZE_1_0);
    } else {
        char perr[SWTEL_ASIC_ERR_MAX] = "";
        p->ops = ops;
        /* 1.0's table ends before bin_info: never read past the plugin's ops_size */
        p->minor = ops->ops_size >= sizeof(struct swtel_asic_ops) ? 1 : 0;
        p->h = ops->open(config, perr, sizeof(perr));
        perr[sizeof(perr) - 1] = '\0'; /* the plugin's text may lack its NUL */
        if (p->h != NULL)
            return 0;
        snprintf(err, errlen, "open failed: %s", perr[0] ? perr : "no reason given");
    }
    dlclose(p->dl);
    memset(p, 0, sizeof(*p));
    return -1;
}

void swtel_asic_unload(swtel_asic_loaded *p)
{
    if (p->h != NULL && p->ops != NULL)
        p->ops->close(p->h);
    p->h = NULL;
    if (p->dl != NULL)
        dlclose(p->dl);
    p->dl = NULL;
}

void swtel_asic_layout_free(swtel_asic_layout *l)
{
    free(l->ports);
    free(l->first);
    free(l->counters);
    free(l->bin_first);
    free(l->bins);
    memset(l, 0, sizeof(*l));
}

/* ------------------------------------------------------------------ names */

/* The name as Python's repr() writes a str that passed checked_name: quoted ('...', or
 * "..." when it holds a ' and no "), the quote and backslash escaped. (A name's other
 * characters are printable ASCII or UTF-8 left as it is: repr() would also escape the few
 * non-printable non-control code points, format characters and non-ASCII spaces.) */
typedef struct {
    char s[SWTEL_ASIC_NAME_MAX * 2 + 3];
} name_repr;

static name_repr repr_of(const char *name)
{
    name_repr r;
    char q = strchr(name, '\'') && !strchr(name, '"') ? '"' : '\'';
    size_t k = 0;
    r.s[k++] = q;
    for (const char *c = name; *c && k < sizeof(r.s) - 3; c++) {
        if (*c == q || *c == '\\')
            r.s[k++] = '\\';
        r.s[k++] = *c;
    }
    r.s[k++] = q;
    r.s[k] = '\0';
    return r;
}

/* Strict UTF-8 as Python decodes it: no overlong form, no surrogate, nothing above U+10FFFF.
 * The code points go to cps (len of them at most); -1 when not UTF-8. */
static int utf8_decode(const unsigned char *s, size_t len, uint32_t *cps)
{
    int n = 0;
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        uint32_t cp;
        size_t more;
        if (c < 0x80) {
            cp = c, more = 0;
        } else if (c >= 0xc2 && c <= 0xdf) {
            cp = c & 0x1f, more = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            cp = c & 0x0f, more = 2;
        } else if (c >= 0xf0 && c <= 0xf4) {
            cp = c & 0x07, more = 3;
        } else {
            return -1;
        }
        if (i + more >= len)
            return -1;
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return -1;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((more == 2 && cp < 0x800) || (more == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return -1;
        cps[n++] = cp;
        i += more + 1;
    }
    return n;
}

/* ------------------------------------------------------------------ the listing */

typedef struct {
    char *err;
    size_t errlen;
} refusal;

/* "layout refused: WHY" into the caller's buffer; always -1. */
static int refuse(refusal *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(refusal *r, const char *fmt, ...)
{
    int k = snprintf(r->err, r->errlen, "layout refused: ");
    if (k >= 0 && (size_t)k < r->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A fixed-size name field, checked: NUL-terminated within the field, UTF-8, no control
 * character (C0, DEL, C1), and not empty unless empty_ok. -1 with the refusal naming
 * `what` otherwise. */
static int check_name(refusal *r, const char *what, const char *label, const char *field, size_t size,
                      int empty_ok)
{
    size_t len = strnlen(field, size);
    if (len == size)
        return refuse(r, "%s: %s is not NUL-terminated within %d bytes", what, label, (int)size);
    if (len == 0 && !empty_ok)
        return refuse(r, "%s: empty %s", what, label);
    uint32_t cps[SWTEL_ASIC_NAME_MAX];
    int n = utf8_decode((const unsigned char *)field, len, cps);
    if (n < 0)
        return refuse(r, "%s: %s is not UTF-8", what, label);
    for (int k = 0; k < n; k++)
        if (cps[k] < 0x20 || (cps[k] >= 0x7f && cps[k] <= 0x9f))
            return refuse(r, "%s: %s contains control character U+%04X", what, label, (unsigned)cps[k]);
    return 0;
}

/* An open-addressing set of names (indices into a table of fixed-size name fields), for
 * the duplicate checks: a layout may hold 4096 ports or 4096 counters in one port. */
typedef struct {
    int *slot; /* index + 1; 0: empty */
    size_t mask;
} name_set;

static int set_init(name_set *s, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    s->slot = calloc(cap, sizeof(int));
    s->mask = cap - 1;
    return s->slot != NULL ? 0 : -1;
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Add `index` (its name at names + index * stride): -1 when added, else the index already
 * holding that name. */
static int set_add(name_set *s, const char *names, size_t stride, int index)
{
    const char *name = names + (size_t)index * stride;
    for (size_t k = name_hash(name) & s->mask;; k = (k + 1) & s->mask) {
        if (s->slot[k] == 0) {
            s->slot[k] = index + 1;
            return -1;
        }
        if (strcmp(names + (size_t)(s->slot[k] - 1) * stride, name) == 0)
            return s->slot[k] - 1;
    }
}

static void set_clear(name_set *s)
{
    memset(s->slot, 0, (s->mask + 1) * sizeof(int));
}

/* The bins of HISTOGRAM counter j of port i, checked, appended to l->bins: 0, -1 refused,
 * -2 out of memory. */
static int list_bins(const swtel_asic_loaded *p, refusal *r, swtel_asic_layout *l, size_t *cap, int i, int j,
                     const char *pname, const char *cname, uint32_t nbins)
{
    const struct swtel_asic_ops *o = p->ops;
    name_repr pr = repr_of(pname), cr = repr_of(cname);
    if (p->minor < 1)
        return refuse(r, "port %s counter %s: HISTOGRAM needs ABI 1.1 (the plugin was built against 1.0)", pr.s,
                      cr.s);
    if (o->bin_info == NULL)
        return refuse(r, "port %s counter %s: a HISTOGRAM, but the plugin has no bin_info", pr.s, cr.s);
    if (nbins == 0 || nbins > SWTEL_ASIC_MAX_BINS)
        return refuse(r, "port %s counter %s: nbins %u (a HISTOGRAM has 1 to %d bins)", pr.s, cr.s, nbins,
                      SWTEL_ASIC_MAX_BINS);
    if (l->nbins + nbins > *cap) {
        size_t want = *cap ? *cap * 2 : 256;
        while (want < l->nbins + nbins)
            want *= 2;
        struct swtel_asic_bin *grown = realloc(l->bins, want * sizeof(*grown));
        if (grown == NULL) {
            snprintf(r->err, r->errlen, "out of memory");
            return -2;
        }
        l->bins = grown, *cap = want;
    }
    struct swtel_asic_bin *bins = l->bins + l->nbins;
    for (uint32_t b = 0; b < nbins; b++) {
        struct swtel_asic_bin bin = {0, 0};
        if (o->bin_info(p->h, i, j, (int)b, &bin) != 0)
            return refuse(r, "port %s counter %s: bin_info(%d, %d, %u) failed", pr.s, cr.s, i, j, b);
        const char *bad = bin.low > bin.high ? "its low bound is above its high bound" : NULL;
        if (bad == NULL && b > 0 && bin.low <= bins[b - 1].high)
            bad = "it does not start above the previous bin's high bound (bins ascend, no overlap)";
        if (bad != NULL)
            return refuse(r, "port %s counter %s: bin %u [%llu, %llu]: %s", pr.s, cr.s, b,
                          (unsigned long long)bin.low, (unsigned long long)bin.high, bad);
        bins[b] = bin;
    }
    l->nbins += nbins;
    return 0;
}

static int list(const swtel_asic_loaded *p, refusal *r, swtel_asic_layout *l, name_set *seen)
{
    const struct swtel_asic_ops *o = p->ops;
    char what[SWTEL_ASIC_NAME_MAX * 2 + 64];
    l->generation = o->generation(p->h);
    int nports = o->port_count(p->h);
    if (nports < 0)
        return refuse(r, "port_count returned %d", nports);
    if (nports > SWTEL_ASIC_MAX_PORTS)
        return refuse(r, "port_count returned %d, more than the %d ports swtel accepts", nports,
                      SWTEL_ASIC_MAX_PORTS);
    l->ports = calloc(nports ? (size_t)nports : 1, sizeof(*l->ports));
    l->first = calloc((size_t)nports + 1, sizeof(*l->first));
    if (l->ports == NULL || l->first == NULL || set_init(seen, (size_t)nports) < 0)
        goto oom;
    /* First the ports and their counts (at most MAX_PORTS calls each), so that a layout
     * too large is refused before a single descriptor is listed. */
    size_t total = 0;
    int most = 0; /* the most counters of one port: the size of the counters' name set */
    for (int i = 0; i < nports; i++) {
        struct swtel_asic_port *port = &l->ports[i];
        if (o->port_info(p->h, i, port) != 0)
            return refuse(r, "port_info(%d) failed", i);
        snprintf(what, sizeof(what), "port %d", i);
        if (check_name(r, what, "name", port->name, sizeof(port->name), 0) < 0 ||
            check_name(r, what, "parent name", port->parent, sizeof(port->parent), 1) < 0)
            return -1;
        name_repr pr = repr_of(port->name);
        int first = set_add(seen, l->ports[0].name, sizeof(*port), i);
        if (first >= 0)
            return refuse(r, "port %s listed twice (ports %d and %d): every port needs its own name", pr.s, first, i);
        int nc = o->counter_count(p->h, i);
        if (nc < 0)
            return refuse(r, "port %s: counter_count returned %d", pr.s, nc);
        if (nc > SWTEL_ASIC_MAX_COUNTERS)
            return refuse(r, "port %s: counter_count returned %d, more than the %d counters per port swtel accepts",
                          pr.s, nc, SWTEL_ASIC_MAX_COUNTERS);
        total += (size_t)nc;
        most = nc > most ? nc : most;
        if (total > SWTEL_ASIC_MAX_VALUES)
            return refuse(r, "more than the %d values swtel accepts in one layout (%zu by port %s, %d of %d)",
                          SWTEL_ASIC_MAX_VALUES, total, pr.s, i + 1, nports);
        l->first[i + 1] = total;
    }
    free(seen->slot);
    seen->slot = NULL;
    l->counters = calloc(total ? total : 1, sizeof(*l->counters));
    l->bin_first = calloc(total ? total : 1, sizeof(*l->bin_first));
    if (l->counters == NULL || l->bin_first == NULL || set_init(seen, (size_t)most) < 0)
        goto oom;
    size_t slots = 0, bins_cap = 0; /* values in one read: a HISTOGRAM takes nbins */
    for (int i = 0; i < nports; i++) {
        name_repr pr = repr_of(l->ports[i].name);
        struct swtel_asic_counter *row = l->counters + l->first[i];
        int nc = (int)(l->first[i + 1] - l->first[i]);
        set_clear(seen);
        for (int j = 0; j < nc; j++) {
            struct swtel_asic_counter *c = &row[j];
            if (o->counter_info(p->h, i, j, c) != 0)
                return refuse(r, "port %s: counter_info(%d, %d) failed", pr.s, i, j);
            snprintf(what, sizeof(what), "port %s counter %d", pr.s, j);
            if (check_name(r, what, "name", c->name, sizeof(c->name), 0) < 0)
                return -1;
            name_repr cr = repr_of(c->name);
            if (set_add(seen, row[0].name, sizeof(*c), j) >= 0)
                return refuse(r, "port %s: counter %s listed twice: every counter of a port needs its own name", pr.s,
                              cr.s);
            /* (width and kind are judged by the asic source, which knows what it can unwrap;
             * here what the ABI version allows and what a histogram's bins must be) */
            if (c->nbins > SWTEL_ASIC_MAX_BINS)
                return refuse(r, "port %s counter %s: nbins %u, more than the %d bins swtel accepts", pr.s, cr.s,
                              c->nbins, SWTEL_ASIC_MAX_BINS);
            if (c->kind == SWTEL_ASIC_PEAK && p->minor < 1)
                return refuse(r, "port %s counter %s: PEAK needs ABI 1.1 (the plugin was built against 1.0)", pr.s,
                              cr.s);
            slots += c->kind == SWTEL_ASIC_HISTOGRAM ? c->nbins : 1;
            if (slots > SWTEL_ASIC_MAX_VALUES) /* judged before the bins are listed */
                return refuse(r, "more than the %d values swtel accepts in one layout (bins included; by port %s "
                              "counter %s)", SWTEL_ASIC_MAX_VALUES, pr.s, cr.s);
            l->bin_first[l->first[i] + (size_t)j] = l->nbins;
            if (c->kind == SWTEL_ASIC_HISTOGRAM) {
                int rc = list_bins(p, r, l, &bins_cap, i, j, l->ports[i].name, c->name, c->nbins);
                if (rc < 0)
                    return rc;
            }
        }
    }
    l->nports = nports;
    return 0;
oom:
    snprintf(r->err, r->errlen, "out of memory");
    return -2;
}

int swtel_asic_list(const swtel_asic_loaded *p, swtel_asic_layout *out, char *err, size_t errlen)
{
    refusal r = {err, errlen};
    name_set seen = {NULL, 0};
    memset(out, 0, sizeof(*out));
    int rc = list(p, &r, out, &seen);
    free(seen.slot);
    if (rc < 0)
        swtel_asic_layout_free(out);
    return rc;
}
