/* swtel ASIC plugin ABI, version 1.1 (a version 1.0 plugin loads unchanged).
 *
 * A plugin is a shared library that swtel's reader loads with dlopen(). It
 * exports one symbol, `swtel_asic_plugin`, a function returning a pointer to a
 * static `struct swtel_asic_ops`. swtel checks `abi_version` and `ops_size`
 * before calling anything else, so a plugin built against another version of
 * this header is refused with a clear error instead of crashing the agent.
 *
 * Rules for plugin authors (docs/asic-plugin.md has the full text):
 *  - No Python inside a plugin. swtel calls `read` without holding Python's
 *    GIL, from one thread at a time per handle; `open`/`close` and the layout
 *    calls happen on that same thread.
 *  - Errors are returned as text in the caller's `err` buffer (NUL-terminated,
 *    truncated to `errlen`), never printed. (swtel terminates the buffer itself all
 *    the same: a missing NUL costs the message's last byte, never a read past it.)
 *  - The layout (ports, and per port its counter descriptors) is stable for a
 *    given `generation`. When the port set changes (a breakout, a port added
 *    or removed), the plugin bumps the generation; the next `read` for the old
 *    layout returns SWTEL_ASIC_ECHANGED and swtel lists the layout again.
 *  - `read` fills the caller-owned buffer with every counter of every port, in
 *    port order and, within a port, in descriptor order: one value per descriptor,
 *    `nbins` values for a HISTOGRAM (1.1), bin 0 first. Counters are cumulative;
 *    gauges are levels; a PEAK (1.1) is the highest level since the previous read.
 *  - The timestamp is the collection time of the values, in nanoseconds since
 *    the Unix epoch (CLOCK_REALTIME).
 */
#ifndef SWTEL_ASIC_H
#define SWTEL_ASIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SWTEL_ASIC_ABI_VERSION 1u /* the major version: a plugin of another is refused */
#define SWTEL_ASIC_ABI_MINOR 1u   /* 1.1: the PEAK kind, HISTOGRAM with bin bounds (bin_info) */
#define SWTEL_ASIC_SYMBOL "swtel_asic_plugin"

#define SWTEL_ASIC_NAME_MAX 64 /* port and counter names, including the NUL */

/* What swtel accepts in one layout (docs/asic-plugin.md, "Limits and checks"). A layout
 * beyond them, or with a negative count or an empty, duplicate, unterminated, non-UTF-8
 * or control-character name, is refused with a message when it is listed, before
 * anything is allocated for it. */
#define SWTEL_ASIC_MAX_PORTS 4096    /* port_count */
#define SWTEL_ASIC_MAX_COUNTERS 4096 /* counter_count of one port */
#define SWTEL_ASIC_MAX_VALUES 262144 /* values in one read, bins included (2 MiB of values) */
#define SWTEL_ASIC_MAX_BINS 64       /* nbins of one HISTOGRAM descriptor */

/* read() results */
#define SWTEL_ASIC_OK 0
#define SWTEL_ASIC_ERROR (-1)   /* err holds the reason; the values are not valid */
#define SWTEL_ASIC_ECHANGED (-2) /* the layout changed: list ports and counters again */

/* Counter kinds. PEAK and HISTOGRAM are 1.1's: a plugin built against 1.0 (its ops_size
 * is SWTEL_ASIC_OPS_SIZE_1_0) that declares them is refused. */
enum swtel_asic_kind {
    SWTEL_ASIC_COUNTER = 0, /* cumulative, never decreases except on a reset or a wrap */
    SWTEL_ASIC_GAUGE = 1,   /* a level (queue occupancy, a watermark the plugin clears, temperature) */
    /* `nbins` cumulative counts (1..SWTEL_ASIC_MAX_BINS), one value each in the read, in bin
     * order; each bin's bounds come from bin_info (FEC codewords by corrected symbols,
     * queue-depth samples by occupancy) */
    SWTEL_ASIC_HISTOGRAM = 2,
    /* the highest level since the previous read, cleared by the read itself (Spectrum's
     * READ_CLEAR watermarks, devlink's occ max with max_clear): swtel reads it exactly
     * once per poll, so each value covers the poll interval before it */
    SWTEL_ASIC_PEAK = 3,
};

struct swtel_asic_port {
    char name[SWTEL_ASIC_NAME_MAX];   /* as the OS names it: "swp11s1" */
    char parent[SWTEL_ASIC_NAME_MAX]; /* breakout parent ("swp11"), or "" */
    uint64_t speed_mbps;              /* current link speed; 0 when down or unknown */
    uint32_t flags;                   /* SWTEL_ASIC_PORT_* */
    uint32_t reserved;
};

#define SWTEL_ASIC_PORT_UP 0x1u   /* operationally up */
#define SWTEL_ASIC_PORT_HOST 0x2u /* a host-side device (RDMA NIC view), not a switch port */

struct swtel_asic_counter {
    char name[SWTEL_ASIC_NAME_MAX]; /* the driver's name: "HwIfInOctets", "phy_symbol_errors" */
    uint8_t width;                  /* 32, 40, 48 or 64: a narrower counter wraps at 2^width */
    uint8_t kind;                   /* enum swtel_asic_kind */
    uint16_t reserved;
    uint32_t nbins; /* HISTOGRAM only; 0 otherwise */
};

/* One histogram bin (1.1): the values it counts, both bounds inclusive, in the histogram's
 * unit (symbol errors per codeword, bytes of occupancy). The bins of a histogram ascend and
 * do not overlap (bin i's low is above bin i-1's high); UINT64_MAX as `high`: no upper bound. */
struct swtel_asic_bin {
    uint64_t low;
    uint64_t high;
};

struct swtel_asic_ops {
    uint32_t abi_version; /* SWTEL_ASIC_ABI_VERSION */
    uint32_t ops_size;    /* sizeof(struct swtel_asic_ops) */
    const char *name;     /* short plugin name, e.g. "sim" */

    /* Open one ASIC. `config` is the user's string from sources.asic.config
     * (never NULL; may be ""). Returns an opaque handle, or NULL with err set. */
    void *(*open)(const char *config, char *err, size_t errlen);

    /* The layout's generation: changes whenever the port set or a port's
     * counter set changes. */
    uint64_t (*generation)(void *h);

    int (*port_count)(void *h);
    /* 0, or -1 when `port` is out of range. */
    int (*port_info)(void *h, int port, struct swtel_asic_port *out);
    int (*counter_count)(void *h, int port);
    /* 0, or -1 when out of range. */
    int (*counter_info)(void *h, int port, int counter, struct swtel_asic_counter *out);

    /* One bulk read of every counter for layout `generation` into values[0..n).
     * Sets *ts_ns. Returns SWTEL_ASIC_OK, SWTEL_ASIC_ECHANGED (generation is
     * stale or n does not match the layout), or SWTEL_ASIC_ERROR with err set. */
    int (*read)(void *h, uint64_t generation, uint64_t *values, size_t n, int64_t *ts_ns,
                char *err, size_t errlen);

    void (*close)(void *h);

    /* --- 1.1: a plugin built against 1.0 ends here (ops_size SWTEL_ASIC_OPS_SIZE_1_0). --- */

    /* Bin `bin` (0..nbins-1) of HISTOGRAM counter `counter` of `port`: 0, or -1 when out of
     * range. Needed only by a plugin that declares a HISTOGRAM; NULL otherwise. */
    int (*bin_info)(void *h, int port, int counter, int bin, struct swtel_asic_bin *out);
};

/* The ops_size of a plugin built against the 1.0 header: it loads unchanged, as 1.0. */
#define SWTEL_ASIC_OPS_SIZE_1_0 offsetof(struct swtel_asic_ops, bin_info)

typedef const struct swtel_asic_ops *(*swtel_asic_plugin_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
