/* The ASIC plugin ABI's rules, once, in plain C (no Python): loading a plugin (dlopen, the
 * entry symbol, the ABI version, the ops table, open) and listing its layout with every
 * check and limit of agent/asic/swtel_asic.h. Two programs use them: the C extension's
 * loader (agent/_ext/asic.c, which turns the layout into Python objects) and the plugin's
 * C helper process (agent/asic/swtel_asic_host.c, which sends it as msgpack). The
 * pure-Python fallback (agent/_fallback/asic.py) says the same in ctypes.
 *
 * Errors are text in the caller's buffer without the "asic plugin LABEL: " prefix, which
 * the caller adds: "cannot load: ...", "open failed: ...", "layout refused: ...". */
#ifndef SWTEL_ASIC_ABI_H
#define SWTEL_ASIC_ABI_H

#include "../asic/swtel_asic.h"

#include <stddef.h>
#include <stdint.h>

#define SWTEL_ASIC_ERR_MAX 384 /* the plugin's error buffer: its last byte is always our NUL */

typedef struct {
    void *dl;
    const struct swtel_asic_ops *ops;
    void *h;
    int minor; /* the ABI minor the plugin was built against (from its ops_size) */
} swtel_asic_loaded;

/* A listed layout: ports[nports]; port i's counters are counters[first[i] .. first[i+1]);
 * a HISTOGRAM counter k's bins are bins[bin_first[k] .. bin_first[k] + nbins). */
typedef struct {
    uint64_t generation;
    int nports;
    struct swtel_asic_port *ports;
    size_t *first; /* nports + 1 */
    struct swtel_asic_counter *counters;
    size_t *bin_first;
    struct swtel_asic_bin *bins;
    size_t nbins;
} swtel_asic_layout;

/* dlopen `path`, check its ABI and open it with `config`. 0, or -1 with err set (and
 * nothing left loaded). Call without holding anything the plugin could wait for. */
int swtel_asic_load(swtel_asic_loaded *p, const char *path, const char *config, char *err, size_t errlen);

/* close the handle (when open) and dlclose. */
void swtel_asic_unload(swtel_asic_loaded *p);

/* List the layout, checked (the counts first, so nothing is allocated for a layout beyond
 * the limits). 0 and *out filled (free it with swtel_asic_layout_free); -1 with err set
 * to "layout refused: ..."; -2 out of memory. */
int swtel_asic_list(const swtel_asic_loaded *p, swtel_asic_layout *out, char *err, size_t errlen);

void swtel_asic_layout_free(swtel_asic_layout *l);

#endif
