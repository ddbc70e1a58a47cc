"""Reference model of the simulated Spectrum switch (``agent/asic/sim/``), the test oracle.

Every value is a pure function of (config, t), t = read time - ``start`` in ns (t < 0 reads
as 0), except the peaks, which also depend on the previous read's t. Integer arithmetic only, so this
file and the C plugin agree bit for bit; C truncates
to 64 (or 32) bits at the very end of each counter, so does :meth:`Model.values`.

The model
---------
*Slots* are 10 ms, *cells* 100 ms (10 slots). Scenario times have 10 ms resolution (rounded
down to a slot).

**Jittered process** ``Proc`` (the building block of every steady counter): a mean rate ``R``
per slot, in sub-units of 1/1024 of a count, with a jitter that telescopes::

    q(j)   = J * (hash(key, j) & 1023) >> 10        (0 <= q < J <= R)
    A(k)   = sum_{j<k} R(j) + q(k) - q(0)            (value at the start of slot k)
    inc(k) = R(k) + q(k+1) - q(k)                    (>= 0: monotone; <= R + J)
    X(t)   = A(k) * SLOT + inc(k) * (t - k * SLOT)   (piecewise linear inside a slot)
    value  = X(t) // (SLOT * 1024)

``R(j)`` is piecewise constant (scenario windows override it: imbalance, pre-FEC BER).
Every cumulative counter is ``floor(N / (SLOT << 20))`` of one numerator ``N = X << 10``
minus scenario losses expressed in the same units, so it is monotone exactly.

**Switch port** (speed S Mb/s). Frame octets at 100 % of the wire with 4 KiB frames plus 20
bytes of preamble/IFG: ``CAP = S*1250*4096*1024 // 4116`` sub-octets per slot. Rx and tx
octets are processes at ``R = CAP * load`` with ``J = R // 5``; so octets never exceed the
line rate (``R + J <= CAP`` is enforced, for load > 5/6 J shrinks). Leaf uplinks carry
3/80 of the server ports' summed rx rate each (ECMP, 0.6 x load of an uplink). Packets:
``ucast = oct >> 12`` (4 KiB RoCE frames), ``mcast = oct >> 27``, ``bcast = oct >> 32``.
``phy_received_bits`` = all bits the PHY received while the link is up (``S * up_ns // 1000``,
idles included). ``phy_corrected_bits`` is a process at pre-FEC BER 1e-9 (``S*1024//100000``
sub-units per slot), ``phy_raw_errors_laneN`` splits it evenly over ``S // 100G`` lanes.
``ecn_marked_tc_3 = tx_oct >> 23``. Drops (but for the scenarios'), pause, symbol and
effective errors: 0.
``phy_rs_fec_histogram_laneN`` (a HISTOGRAM of 16 bins per lane, bin b = codewords with b
corrected symbols; one per lane, after every other descriptor): lane i's share of ``x`` over
L lanes is ``x // L + (i < x % L)``; bin k >= 1 = the share of ``phy_corrected_bits >> (3k -
2)``, bin 0 = the share of ``phy_received_bits // 5440`` minus the lane's others (at least 0),
from the 64-bit values. ``phy_rs_fec_histogram`` (the port's, before the lanes') is their sum,
bin by bin. Cleared with the counters.
Gauges: TC 3's occupancy is ``hash(cell) % 64 KiB`` per 100 ms cell, other TCs 0;
``tc_watermark_N`` = max occupancy of the cells of the current 1 s epoch (t // 1 s) up to
now (a watermark cleared every second). ``tc_peak_occupancy_N`` (kind PEAK, cleared by
reading): max occupancy of the cells from the previous successful read's cell to now (at most
the last 600 cells; a handle's first read: its own cell), the one value that depends on
the reads before it. ``asic=spectrum1|2|3|4`` (default 4) sets the buffer cell: 96, 144, 144,
192 bytes; incast's levels (below) are whole cells. The PG (``pg_*``) and ingress pool
(``ingress_pool_*_0``) gauges are 0 outside incast.

**Scenarios** (window [a, b) in slots, b open-ended = infinite):

* ``symbol-errors``: corrected-bits rate x2000 (pre-FEC BER 2e-6); per-cell hashed
  ``phy_symbol_errors`` (0..992 per cell at 100G, ~3400/s; x S/100G) and
  ``phy_effective_errors`` (0..7 per cell, ~35/s, also ``HwIfInDot3FrameErrors`` and
  ``HwIfInErrors``); 30 % of cells lose 30..60 % of the mean rx and tx rate. Per-cell
  tables cover 60 s (600 cells) from the window start, then repeat. On role=host:
  ``roce_adp_retrans`` gains 20..300 per cell (~1600/s) plus derived ``out_of_sequence``
  (3/4), ``packet_seq_err`` (1/8), ``roce_adp_retrans_to``/``local_ack_timeout_err`` (1/64),
  ``roce_slow_restart`` (1/256).
* ``imbalance`` (leaf): in the window the named uplink's tx rate is ``min(2M, CAP - J)``,
  the other uplinks share the rest of the group's ``n*M``.
* ``pfc-storm`` (port/prio): ``HwIfInPfc<p>Pkt`` a process at 200 per slot (20,000/s),
  ``rx_pause_duration_prio_<p>`` = 99 % of the window's elapsed time in microseconds, tx
  octets lose 973/1024 (keep ~5 %), TC p occupancy ~15 MiB.
* ``microburst``: 2.75 s cells from a; burst i at a + 275i + hash%126 slots, 5..20 slots
  long; drops before burst i ``E(i) = 1500i + g(i) - g(0)`` (500..2500 per burst, linear
  inside it) in ``HwIfOutQDrops``, WRED ``W(i) = 400i + g'(i) - g'(0)`` in
  ``HwIfOutQ3WredDrops``/``HwIfOutWredDrops``; ``HwIfOutDiscards`` = both; TC 3 occupancy
  ``16 MiB - hash % 1 MiB`` in cells a burst touches.
* ``link-flap``: 3 s cells from a; flap i down at slot a + 300i + 50 + hash%101 for 30
  slots (300 ms), kept if it ends inside the window. Down: carrier_changes +1, up: +1; no
  traffic, no bits, no corrected bits (the jitter is 0 on those slots, so the loss is exactly
  R per slot).
* ``counter-clear``: every counter of the port (all ports when none) reads
  ``v(t) - v(a)`` from a on.
* ``breakout``: from a the 400G port is replaced by ``<port>s0..s3`` at 100G whose counters
  start at 0 (``v(t) - v(a)``); the generation is 1 + the number of breakouts passed.
* ``fec-degrade`` (needs its end, b - a >= 2 s; default port as symbol-errors): a link that
  fails by its FEC histogram's tail. Failing from ``f = b - (b - a) // 10`` (slots). Phases
  j = 0..11 start at ``a + (f - a) * j // 12``, phase 12 is [f, b); in phase j the tail's
  front is bin ``m = 3 + j``. ``tail_k(t) = sum_{j >= k - 3} (S << (3 + j - k)) * ns_j(t)
  // 64e12``, ``ns_j(t)`` the ns of phase j before t: the front bin gets S/64000 codewords/s
  (6.25/s at 400G), each bin below it twice the one above (log-linear, its level doubling
  with every step of the front). The histogram's bins k >= 1 are the
  ladder of the corrected bits before the tail plus ``tail_k``, all of it in one lane
  (``PORT:LANE``, default 0; the port must have it), so in the port's sum; ``phy_corrected_bits``
  and that lane's ``phy_raw_errors_laneN`` gain ``sum_k k * tail_k``; bin 0 stays the other
  codewords. From f on:
  ``phy_effective_errors`` (and the frame/in-errors) ``1 + hash % 8`` per cell (so the
  first uncorrectable codeword comes within 100 ms of f) and ``phy_symbol_errors`` as
  symbol-errors' table (keys K_FEC_EFF, K_SYM). After b the tail and the errors stop.

* ``incast`` (``PORT/TC[/LEN[/PERIOD]]``, TC default 3, LEN 50ms (1 ms..PERIOD/2), PERIOD
  2s (100 ms..60 s); default port swp1): sub-cell bursts on one egress queue, to the ns.
  Burst i (one per whole period inside the window, n = (b - a) * SLOT // PERIOD of them, INF
  when open-ended) starts at ``a*SLOT + i*PERIOD + hash % (PERIOD / 4us) * 1us`` (the first
  quarter of its period: bursts at least 3/4 of a period apart) and lasts
  ``1ms + hash % ((LEN - 1ms)/1us + 1) * 1us``. Drops before burst i ``E(i) = 1000i + g(i) -
  g(0)`` (g = hash % 1001), burst i drops ``d = E(i+1) - E(i)`` (0..2000); its top is
  ``6 MiB // cell + d * (5120 // cell)`` cells (a larger burst drops more). Its level ramps
  linearly: ``top * (x + 1) // len`` cells x ns into it (the top at its last ns), 0 after
  (the queue drains within microseconds). The TC's occupancy is the max of the cell model
  above and the burst level at t; the watermark and the peak the max of those and the
  highest burst level in [epoch start, t] and in [max(since, the peak's first cell), t]. In
  a burst, ``HwIfOutQDrops``/``HwIfOutDiscards`` rise by ``d * level // top``,
  ``ecn_marked_tc_TC`` by ``(1536 + d) * level // top``. The ingress side (PG = TC): the PG
  holds ``min(level, XOFF)`` (XOFF = 3 MiB // cell) shared and ``(level - XOFF) // 16`` in
  headroom above it, the ingress pool 0 their sum; its watermark and peaks follow the
  level's (monotone). ``HwIfOutPfc<TC>Pkt`` (pause sent) is ``(cells above XOFF so far) //
  64``: the bursts before i each ``top - XOFF``, plus the current ``level - XOFF``. A port's
  incast windows may not overlap in time.

* ``drops`` (``PORT:REASON``, both required; REASON one of ``DROP_REASONS``' names):
  one drop reason's packets, ``wjh_<group>_<reason>``, as a window-local process
  ``Proc(10 << 10, 5 << 10, K_DROP + 64 * reason)`` (1,000 packets/s, +-50 % per slot) from
  the window's start. A port's windows of one reason may not overlap in time; other
  reasons may. Octets do not change (1,000 packets/s is noise next to the line rate).

**Drop reasons** (``wjh_<group>_<reason>``, What Just Happened's groups with devlink's trap
names): 0 outside ``drops`` windows, except ``tail-drop`` (microburst's and incast's queue
drops) and ``early-drop`` (microburst's WRED drops). The port's drop counters are their sums
(``drop_sums``): ``HwIfInDiscards`` every ingress reason (l1, l2, l3, tunnel, the ingress
ACL), ``HwIfInL3Drops`` the l3 ones, ``HwIfInBlackholeDrops`` blackhole-route,
``HwIfInAclDrops`` ingress-flow-action-drop, ``HwIfInBufferDrops`` none (0), ``HwIfOutQDrops``
tail-drop, ``HwIfOutWredDrops`` and ``HwIfOutQ3WredDrops`` early-drop, ``HwIfOutNonQDrops``
egress-flow-action-drop, ``HwIfOutDiscards`` those three.

Traffic scenarios (symbol-errors, imbalance, pfc-storm, link-flap, fec-degrade) may not
overlap in time on one port (imbalance covers every uplink): open() refuses the config.
"""

from __future__ import annotations

import re

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1
SLOT = 10_000_000  # ns
CELL = 10 * SLOT  # 100 ms
EPOCH_CELLS = 10  # watermark epoch: 1 s
PERIOD = 600  # cells in a scenario table (60 s), then it repeats
INF = MASK64  # open-ended window end, in slots
DEN = SLOT << 20  # numerator -> counter

COUNTER, GAUGE, HISTOGRAM, PEAK = 0, 1, 2, 3
FEC_BINS = 16  # RS(544,514) codewords by corrected symbols, 0..15 (one HISTOGRAM descriptor)
MAX_LANES = 8  # phy_raw_errors_lane0..7; a port's lanes (speed // 100G) each have a histogram
CW_BITS = 5440  # bits of one codeword
PEAK_CELLS = 600  # a peak reaches back at most 60 s of cells
PORT_UP, PORT_HOST = 1, 2

# hash keys (one stream per quantity)
K_RX, K_TX, K_CORR, K_OCC, K_FLAP, K_DIP, K_SYM, K_EFF = 1, 2, 3, 4, 5, 6, 8, 9
K_PFC, K_PFCOCC, K_MB_START, K_MB_LEN, K_MB_DROP, K_MB_WRED, K_MB_OCC = 10, 11, 12, 13, 14, 15, 16
K_RETR, K_RETR_SCN, K_OOS, K_CNP, K_CNPH, K_ECNR, K_HTX, K_HRX = 17, 18, 19, 20, 21, 22, 23, 24
K_FEC_EFF = 25
K_IC_START, K_IC_LEN, K_IC_DROP = 26, 27, 28
K_DROP = 29  # + 64 * the reason's index
DROP_RATE, DROP_JITTER = 10, 5  # drops: packets per 10 ms slot (1,000/s), jitter (Proc units / 1024)
#: (group, reason) of every drop reason, in the plugin's order (enum R_* of agent/asic/sim/sim.h)
DROP_REASONS = (
    ("l1", "link-down"), ("l2", "ingress-vlan-filter"), ("l2", "source-mac-is-multicast"),
    ("l2", "ingress-spanning-tree-filter"), ("l3", "blackhole-route"), ("l3", "ttl-value-is-too-small"),
    ("l3", "unresolved-neigh"), ("tunnel", "decap-error"), ("tunnel", "overlay-smac-is-mc"),
    ("buffer", "tail-drop"), ("buffer", "early-drop"), ("acl", "ingress-flow-action-drop"),
    ("acl", "egress-flow-action-drop"))
REASON_NAMES = [r for _, r in DROP_REASONS]
#: the port drop counters and the reasons each is the sum of (``drop_sums``)
DROP_SUMS = {
    "HwIfInDiscards": ("link-down", "ingress-vlan-filter", "source-mac-is-multicast",
                       "ingress-spanning-tree-filter", "blackhole-route", "ttl-value-is-too-small",
                       "unresolved-neigh", "decap-error", "overlay-smac-is-mc", "ingress-flow-action-drop"),
    "HwIfInL3Drops": ("blackhole-route", "ttl-value-is-too-small", "unresolved-neigh"),
    "HwIfInBlackholeDrops": ("blackhole-route",),
    "HwIfInAclDrops": ("ingress-flow-action-drop",),
    "HwIfInBufferDrops": (),
    "HwIfOutQDrops": ("tail-drop",),
    "HwIfOutWredDrops": ("early-drop",),
    "HwIfOutQ3WredDrops": ("early-drop",),
    "HwIfOutNonQDrops": ("egress-flow-action-drop",),
    "HwIfOutDiscards": ("tail-drop", "early-drop", "egress-flow-action-drop"),
}


def drop_counter(group: str, reason: str) -> str:
    """The plugin's name of a drop reason's counter."""
    return f"wjh_{group}_{reason}".replace("-", "_")

US, MS = 1_000, 1_000_000
IC_LEN, IC_PERIOD = 50 * MS, 2_000 * MS  # incast's defaults: bursts of 1 ms..50 ms, one per 2 s
IC_PERIOD_MIN, IC_PERIOD_MAX = 100 * MS, 60_000 * MS
CELL_BYTES = {"spectrum1": 96, "spectrum2": 144, "spectrum3": 144, "spectrum4": 192}  # asic=
IC_BASE, IC_PER_DROP = 6 << 20, 5120  # an incast burst's top: 6 MiB + 5 KiB per drop (whole cells of each)
PG_XOFF, PFC_CELLS, HR_DIV = 3 << 20, 64, 16  # the PG's XOFF; a pause frame per 64 cells above; 1/16 to headroom
FEC_PHASES = 12  # fec-degrade: the tail's front moves from bin 3 to bin 15 in 12 steps
FEC_MIN_SLOTS = 200  # fec-degrade: a window of at least 2 s
FEC_DEN = 64_000_000_000_000  # fec-degrade: (Mb/s x ns) -> codewords; the front bin gets S/64000 per s

SCENARIOS = ("symbol-errors", "imbalance", "pfc-storm", "microburst", "link-flap",
             "counter-clear", "breakout", "fec-degrade", "incast", "drops")
TRAFFIC = {"symbol-errors", "imbalance", "pfc-storm", "link-flap", "fec-degrade"}
KEYS = ("role", "seed", "start", "ports", "uplinks", "load", "asic", "scenario")
MAX_SCENARIOS = 64
MAX_PORT_WINDOWS = 16


def _counter_names() -> list[str]:
    n = ["HwIfInOctets", "HwIfInUcastPkts", "HwIfInMcastPkts", "HwIfInBcastPkts",
         "HwIfOutOctets", "HwIfOutUcastPkts", "HwIfOutMcastPkts", "HwIfOutBcastPkts",
         "HwIfInDiscards", "HwIfInL3Drops", "HwIfInBufferDrops", "HwIfInAclDrops",
         "HwIfInBlackholeDrops", "HwIfInDot3LengthErrors", "HwIfInDot3FrameErrors", "HwIfInErrors",
         "HwIfOutDiscards", "HwIfOutErrors", "HwIfOutQDrops", "HwIfOutNonQDrops",
         "HwIfOutWredDrops"]
    n += [f"HwIfOutQ{i}WredDrops" for i in range(8)]
    n += ["HwIfInPausePkt", "HwIfOutPausePkt"]
    n += [f"HwIfInPfc{i}Pkt" for i in range(8)]
    n += [f"HwIfOutPfc{i}Pkt" for i in range(8)]
    n += [f"rx_pause_duration_prio_{i}" for i in range(8)]
    n += [f"tx_pause_duration_prio_{i}" for i in range(8)]
    n += [f"ecn_marked_tc_{i}" for i in range(8)]
    n += ["phy_received_bits", "phy_symbol_errors", "phy_corrected_bits", "phy_effective_errors"]
    n += [f"phy_raw_errors_lane{i}" for i in range(8)]
    n += ["carrier_changes"]
    n += [drop_counter(g, r) for g, r in DROP_REASONS]
    return n


SWITCH_COUNTERS = [(name, 64, COUNTER) for name in _counter_names()]
SWITCH_COUNTERS += [(f"tc_curr_occupancy_{i}", 64, GAUGE) for i in range(8)]
SWITCH_COUNTERS += [(f"tc_watermark_{i}", 64, GAUGE) for i in range(8)]
SWITCH_COUNTERS += [(f"tc_peak_occupancy_{i}", 64, PEAK) for i in range(8)]
SWITCH_COUNTERS += [(f"pg_{what}_{i}", 64, PEAK if "peak" in what else GAUGE)
                    for what in ("curr_occupancy", "watermark", "peak_occupancy", "headroom_occupancy",
                                 "headroom_watermark", "headroom_peak_occupancy") for i in range(8)]
SWITCH_COUNTERS += [("ingress_pool_occupancy_0", 64, GAUGE), ("ingress_pool_peak_occupancy_0", 64, PEAK)]
SWITCH_COUNTERS += [("phy_rs_fec_histogram", 64, HISTOGRAM)]  # FEC_BINS values: bins [b, b]


def switch_counters(lanes: int) -> list[tuple]:
    """A switch port's descriptors: SWITCH_COUNTERS, then one histogram per lane."""
    return SWITCH_COUNTERS + [(f"phy_rs_fec_histogram_lane{i}", 64, HISTOGRAM) for i in range(lanes)]


HOST_COUNTERS = [(name, 32, COUNTER) for name in (
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "out_of_sequence",
    "packet_seq_err", "local_ack_timeout_err")]
HOST_COUNTERS += [(name, 64, COUNTER) for name in (
    "np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "port_xmit_data",
    "port_rcv_data")]
IDX = {name: i for i, (name, _, _) in enumerate(SWITCH_COUNTERS)}  # the port's histogram is last: its
# bins take value indices IDX["phy_rs_fec_histogram"] .. + FEC_BINS - 1; lane i's the FEC_BINS from
# LANE_FEC0 + i * FEC_BINS
LANE_FEC0 = IDX["phy_rs_fec_histogram"] + FEC_BINS
DROP0 = IDX[drop_counter(*DROP_REASONS[0])]  # the drop reasons' counters, in DROP_REASONS' order


def drop_sums(v: list[int]) -> None:
    """The port's drop counters in ``v`` (one port's values) set to the sums of their reasons."""
    for counter, reasons in DROP_SUMS.items():
        v[IDX[counter]] = sum(v[DROP0 + REASON_NAMES.index(r)] for r in reasons)


def slots(counters: list[tuple]) -> int:
    """Values of one port's descriptors in a read (a histogram's bins each)."""
    return sum(FEC_BINS if c[2] == HISTOGRAM else 1 for c in counters)


def offsets(layout_counters: list[list[tuple]]) -> list[int]:
    """Where each port's values start in a read (ports differ: one histogram per lane)."""
    out, at = [], 0
    for cs in layout_counters:
        out.append(at)
        at += slots(cs)
    return out


def value_kinds(layout_counters: list[list[tuple]]) -> list[int]:
    """The kind of every value of a read (a histogram's bins are counters)."""
    return [COUNTER if c[2] == HISTOGRAM else c[2]
            for cs in layout_counters for c in cs for _ in range(FEC_BINS if c[2] == HISTOGRAM else 1)]


SWITCH_VALUES = slots(switch_counters(4))  # values of a 400G switch port in one read (a ports=N stride)


def descriptors(counters: list[tuple]) -> list[tuple]:
    """One port's descriptors as the loader lists them: (name, width, kind, nbins, bins), a
    histogram's bins [b, b] (b corrected symbols per codeword)."""
    return [(name, width, kind, FEC_BINS, tuple((b, b) for b in range(FEC_BINS)))
            if kind == HISTOGRAM else (name, width, kind, 0, ())
            for name, width, kind in counters]


# --- hashing --------------------------------------------------------------------------------

def mix64(z: int) -> int:
    """splitmix64's finalizer."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def fnv1a(name: str) -> int:
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return h


def hsh(seed: int, pid: int, key: int, idx: int) -> int:
    return mix64((seed * 0x9E3779B97F4A7C15 + pid * 0xD6E8FEB86659FD93
                  + key * 0xA0761D6478BD642F + idx) & MASK64)


# --- parsing --------------------------------------------------------------------------------

class ConfigError(ValueError):
    pass


_TIME = re.compile(r"^([0-9]+)(?:\.([0-9]{1,6}))?(ms|s|m|h)$")
_UNITS = {"ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}


def parse_time(text: str) -> int | None:
    m = _TIME.match(text)
    if not m or len(m.group(1)) > 15:
        return None
    unit = _UNITS[m.group(3)]
    frac = m.group(2) or ""
    ns = int(m.group(1)) * unit + (int(frac) * unit // 10 ** len(frac) if frac else 0)
    return ns if ns < 1 << 62 else None


def _uint(text: str, limit: int) -> int | None:
    if not text.isdigit() or not text.isascii() or len(text) > 20:
        return None
    v = int(text)
    return v if v <= limit else None


class Scenario:
    def __init__(self, spec: str, ordinal: int):
        self.spec = spec
        self.ord = ordinal
        head, sep, port = spec.partition(":")
        self.port = port if sep else None
        name, at, times = head.partition("@")
        if name not in SCENARIOS:
            raise ConfigError(
                f"sim: scenario '{name}': unknown name (known: {' '.join(SCENARIOS)})")
        self.name = name
        self.prio = None
        self.blen, self.period = IC_LEN, IC_PERIOD  # incast: the longest burst, the period (ns)
        self.reason = None  # drops: the reason's index in DROP_REASONS
        self.lane = 0  # fec-degrade: the lane its tail goes into
        if name == "fec-degrade" and self.port is not None and ":" in self.port:  # PORT:LANE
            self.port, _, lane = self.port.partition(":")
            ln = _uint(lane, MAX_LANES - 1)
            if ln is None:
                raise ConfigError(f"sim: scenario '{spec}': lane must be 0..{MAX_LANES - 1}")
            self.lane = ln
        if name == "drops":  # PORT:REASON, both required
            port, colon, reason = (self.port or "").partition(":")
            if not colon or not reason:
                raise ConfigError(f"sim: scenario '{spec}': needs a port and a reason"
                                  " (drops@START-END:PORT:REASON)")
            if reason not in REASON_NAMES:
                raise ConfigError(f"sim: scenario '{spec}': unknown drop reason '{reason}'"
                                  f" (known: {' '.join(REASON_NAMES)})")
            self.port, self.reason = port, REASON_NAMES.index(reason)
        if self.port is not None and "/" in self.port:
            self.port, _, prio = self.port.partition("/")
            if name not in ("pfc-storm", "incast"):
                raise ConfigError(f"sim: scenario '{spec}': a priority is only for pfc-storm"
                                  " (a traffic class for incast)")
            length = period = None
            if name == "incast":  # TC[/LEN[/PERIOD]]
                prio, _, rest = prio.partition("/")
                if _:
                    length, _, period = rest.partition("/")
                    period = period if _ else None
            p = _uint(prio, 7)
            if p is None:
                what = "priority" if name == "pfc-storm" else "traffic class"
                raise ConfigError(f"sim: scenario '{spec}': {what} must be 0..7")
            self.prio = p
            if length is not None:
                self.blen = parse_time(length)
                if self.blen is None:
                    raise ConfigError(f"sim: scenario '{spec}': bad burst length '{length}' (e.g. 20ms)")
            if period is not None:
                self.period = parse_time(period)
                if self.period is None:
                    raise ConfigError(f"sim: scenario '{spec}': bad period '{period}' (e.g. 2s)")
        if self.port == "":
            raise ConfigError(f"sim: scenario '{spec}': empty port name")
        a_ns, b_ns = 0, None
        if at:
            first, dash, second = times.partition("-")
            a_ns = parse_time(first)
            if a_ns is None:
                raise ConfigError(
                    f"sim: scenario '{spec}': bad time '{first}' (e.g. 5s, 500ms, 2m)")
            if dash and second:
                b_ns = parse_time(second)
                if b_ns is None:
                    raise ConfigError(
                        f"sim: scenario '{spec}': bad time '{second}' (e.g. 5s, 500ms, 2m)")
        if name == "incast":
            if not IC_PERIOD_MIN <= self.period <= IC_PERIOD_MAX:
                raise ConfigError(f"sim: scenario '{spec}': period must be 100ms..60s")
            if not MS <= self.blen <= self.period // 2:
                raise ConfigError(f"sim: scenario '{spec}': burst length must be 1ms..half the period")
        self.a = a_ns // SLOT
        self.b = INF if b_ns is None or name in ("counter-clear", "breakout") else b_ns // SLOT
        if self.b <= self.a:
            raise ConfigError(f"sim: scenario '{spec}': end must be after start (10 ms resolution)")
        if name == "fec-degrade":
            if self.b == INF or self.b - self.a < FEC_MIN_SLOTS:
                raise ConfigError(f"sim: scenario '{spec}': needs an end at least 2s after its start"
                                  " (fec-degrade@START-END)")
            self.fail = self.b - (self.b - self.a) // 10  # the first uncorrectable codeword's slot

    def fec_phase(self, j: int) -> int:
        """fec-degrade: the first slot of phase j (0..12; the front at bin 3 + j), j = 13: b."""
        if j > FEC_PHASES:
            return self.b
        return self.a + (self.fail - self.a) * j // FEC_PHASES


def parse_config(config: str) -> dict:
    cfg: dict = {"role": "spine", "seed": 1, "start": None, "ports": None, "uplinks": 4,
                 "load": 550_000, "cell": 192, "scenarios": []}
    seen = set()
    for tok in config.split():
        key, eq, val = tok.partition("=")
        if not eq or not key:
            raise ConfigError(f"sim: expected key=value, got '{tok}'")
        if key not in KEYS:
            raise ConfigError(f"sim: unknown key '{key}' (known: {' '.join(KEYS)})")
        if key != "scenario":
            if key in seen:
                raise ConfigError(f"sim: duplicate key '{key}'")
            seen.add(key)
        if key == "role":
            if val not in ("spine", "leaf", "host"):
                raise ConfigError(f"sim: role: expected spine, leaf or host, got '{val}'")
            cfg["role"] = val
        elif key == "seed":
            v = _uint(val, MASK64)
            if v is None:
                raise ConfigError(f"sim: seed: expected an unsigned 64-bit integer, got '{val}'")
            cfg["seed"] = v
        elif key == "start":
            v = _uint(val, (1 << 63) - 1)
            if v is None:
                raise ConfigError(f"sim: start: expected Unix epoch nanoseconds, got '{val}'")
            cfg["start"] = v
        elif key == "ports":
            v = _uint(val, 1024)
            if not v:
                raise ConfigError(f"sim: ports: expected 1..1024, got '{val}'")
            cfg["ports"] = v
        elif key == "uplinks":
            if val not in ("4", "8"):
                raise ConfigError(f"sim: uplinks: expected 4 or 8, got '{val}'")
            cfg["uplinks"] = int(val)
        elif key == "load":
            m = re.match(r"^([0-9])(?:\.([0-9]{1,6}))?$", val)
            ppm = None
            if m:
                ppm = int(m.group(1)) * 1_000_000 + int((m.group(2) or "0").ljust(6, "0"))
            if ppm is None or ppm > 1_000_000:
                raise ConfigError(f"sim: load: expected 0.0..1.0, got '{val}'")
            cfg["load"] = ppm
        elif key == "asic":
            if val not in CELL_BYTES:
                raise ConfigError("sim: asic: expected spectrum1, spectrum2, spectrum3 or spectrum4,"
                                  f" got '{val}'")
            cfg["cell"] = CELL_BYTES[val]
        else:
            for spec in val.split(","):
                if len(cfg["scenarios"]) >= MAX_SCENARIOS:
                    raise ConfigError(f"sim: too many scenarios (max {MAX_SCENARIOS})")
                cfg["scenarios"].append(Scenario(spec, len(cfg["scenarios"])))
    if cfg["role"] == "host" and cfg["ports"] is not None:
        raise ConfigError("sim: ports: not with role=host")
    return cfg


# --- the model ------------------------------------------------------------------------------

class Proc:
    """A jittered cumulative process (see the module docstring)."""

    def __init__(self, rate: int, jitter: int, key: int):
        self.R, self.J, self.key = rate, jitter, key
        self.over: list[tuple[int, int, int]] = []  # (a, b, rate) overrides, slots

    def rate_at(self, k: int) -> int:
        for a, b, r in self.over:
            if a <= k < b:
                return r
        return self.R

    def X(self, port: Port, t: int, masked: bool = True) -> int:
        """The numerator at t; ``masked``: no jitter on the port's link-flap down slots."""
        k, f = divmod(t, SLOT)
        base = self.R * k
        for a, b, r in self.over:
            if k > a:
                base += (r - self.R) * (min(k, b) - a)

        def q(j: int) -> int:
            if masked and port.masked(j):
                return 0
            return (self.J * (port.h(self.key, j) & 1023)) >> 10

        qk = q(k)
        a_k = base + qk - q(0)
        inc = self.rate_at(k) + q(k + 1) - qk
        return a_k * SLOT + inc * f

    def value(self, port: Port, t: int, masked: bool = True) -> int:
        return self.X(port, t, masked) // (SLOT << 10)


def cell_table(port: Port, key: int, fn) -> tuple[list[int], list[int]]:
    """Per-cell values over one period (``fn(hash)``) and their prefix sums."""
    vals = [fn(port.h(key, i)) for i in range(PERIOD)]
    pre = [0]
    for v in vals:
        pre.append(pre[-1] + v)
    return vals, pre


def table_count(vals: list[int], pre: list[int], w: int) -> int:
    """Sum of per-cell counts over w ns of a window (linear inside a cell)."""
    c, r = divmod(w, CELL)
    i = c % PERIOD
    return (c // PERIOD) * pre[PERIOD] + pre[i] + vals[i] * r // CELL


def table_weighted_ns(vals: list[int], pre: list[int], w: int) -> int:
    """Sum over w ns of a window of (per-cell weight x ns)."""
    c, r = divmod(w, CELL)
    i = c % PERIOD
    return ((c // PERIOD) * pre[PERIOD] + pre[i]) * CELL + vals[i] * r


def _window_ns(sc: Scenario, t: int) -> int:
    """Elapsed ns of the window at t (clamped to it)."""
    a = sc.a * SLOT
    b = INF if sc.b == INF else sc.b * SLOT
    return max(0, min(t, b) - a)


class Port:
    def __init__(self, model: Model, name: str, parent: str, speed: int, flags: int):
        self.m = model
        self.name, self.parent, self.speed, self.flags = name, parent, speed, flags
        self.pid = fnv1a(name)
        self.host = bool(flags & PORT_HOST)
        self.wins: list[Scenario] = []  # scenarios on this port
        self.flaps: list[tuple[Scenario, int]] = []  # (scenario, number of flaps)
        self.clears: list[int] = []  # ns
        self.clear_vals: list[list[int]] = []
        self.lanes = min(max(1, speed // 100_000), MAX_LANES)
        self.counters = HOST_COUNTERS if self.host else switch_counters(self.lanes)
        self.cell = model.cfg["cell"]
        load = model.cfg["load"]
        if self.host:
            cap = 400_000 * 1250 * 4096 * 1024 // 4116
            r = cap * load // 1_000_000
            j = min(r // 5, cap - r)
            self.tx, self.rx = Proc(r, j, K_HTX), Proc(r, j, K_HRX)
            self.retr, self.oos = Proc(10, 10, K_RETR), Proc(5, 5, K_OOS)
            self.cnp, self.cnph = Proc(2048, 1024, K_CNP), Proc(1843, 900, K_CNPH)
            self.ecnr = Proc(4096, 2048, K_ECNR)
        else:
            self.cap = speed * 1250 * 4096 * 1024 // 4116
            r = self.cap * load // 1_000_000
            self.rx = Proc(r, min(r // 5, self.cap - r), K_RX)
            self.tx = Proc(r, min(r // 5, self.cap - r), K_TX)
            rc = speed * 1024 // 100_000
            self.corr = Proc(rc, rc // 2, K_CORR)

    def h(self, key: int, idx: int) -> int:
        return hsh(self.m.cfg["seed"], self.pid, key, idx)

    # link-flap schedule
    def flap_down(self, sc: Scenario, i: int) -> int:
        return sc.a + 300 * i + 50 + self.h(K_FLAP, i) % 101

    def masked(self, j: int) -> bool:
        for sc, n in self.flaps:
            if j >= sc.a:
                i = (j - sc.a) // 300
                if i < n:
                    d = self.flap_down(sc, i)
                    if d <= j <= d + 30:
                        return True
        return False

    def flap_state(self, sc: Scenario, n: int, t: int) -> tuple[int, int]:
        """(down ns, carrier changes) of one link-flap window at t."""
        if t < sc.a * SLOT:
            return 0, 0
        i = (t // SLOT - sc.a) // 300
        full = min(i, n)
        down, changes = full * 30 * SLOT, 2 * full
        if i < n:
            d = self.flap_down(sc, i) * SLOT
            if t >= d:
                down += min(t - d, 30 * SLOT)
                changes += 1 + (t >= d + 30 * SLOT)
        return down, changes

    # microburst schedule
    def mb_start(self, sc: Scenario, i: int) -> int:
        return sc.a + 275 * i + self.h(K_MB_START, i) % 126

    def mb_len(self, i: int) -> int:
        return 5 + self.h(K_MB_LEN, i) % 16

    def mb_count(self, sc: Scenario) -> int:
        if sc.b == INF:
            return INF
        j = (sc.b - 1 - sc.a) // 275
        return j + 1 if self.mb_start(sc, j) < sc.b else j

    def mb_drops(self, sc: Scenario, t: int, key: int, base: int, spread: int) -> int:
        if t < sc.a * SLOT:
            return 0
        n = self.mb_count(sc)

        def e(i: int) -> int:
            return base * i + self.h(key, i) % spread - self.h(key, 0) % spread

        i = (t // SLOT - sc.a) // 275
        if i >= n:
            return e(n)
        st, ln = self.mb_start(sc, i) * SLOT, self.mb_len(i) * SLOT
        x = min(max(t - st, 0), ln)
        return e(i) + (e(i + 1) - e(i)) * x // ln

    # incast schedule: one burst per period, at a hashed offset in its first quarter
    def ic_e(self, i: int) -> int:
        """Drops before burst i."""
        return 1000 * i + self.h(K_IC_DROP, i) % 1001 - self.h(K_IC_DROP, 0) % 1001

    def ic_burst(self, sc: Scenario, i: int) -> tuple[int, int, int, int]:
        """(start ns, length ns, top in cells, drops) of incast burst i."""
        length = MS + self.h(K_IC_LEN, i) % ((sc.blen - MS) // US + 1) * US
        start = sc.a * SLOT + i * sc.period + self.h(K_IC_START, i) % (sc.period // (4 * US)) * US
        drops = self.ic_e(i + 1) - self.ic_e(i)
        return start, length, IC_BASE // self.cell + drops * (IC_PER_DROP // self.cell), drops

    def ic_peak(self, sc: Scenario, n: int, lo: int, t: int) -> int:
        """The highest incast level (cells) in [lo, t]: a burst ramps to its top at its last ns."""
        a = sc.a * SLOT
        if t < a or not n:
            return 0
        pk = 0
        for i in range((lo - a) // sc.period if lo > a else 0, min((t - a) // sc.period, n - 1) + 1):
            st, ln, top, _ = self.ic_burst(sc, i)
            if st <= t and st + ln > lo:
                pk = max(pk, top * (min(t, st + ln - 1) - st + 1) // ln)
        return pk

    def ic_counts(self, sc: Scenario, n: int, t: int) -> tuple[int, int, int]:
        """(drops, ECN marks, PFC pause frames sent) of incast at t, each rising with a burst's
        level (pause: a frame per PFC_CELLS cells above the PG's XOFF)."""
        a = sc.a * SLOT
        if t < a:
            return 0, 0, 0
        i = min((t - a) // sc.period, n)
        lv = d = 0
        top = 1
        if i < n:
            st, ln, top, d = self.ic_burst(sc, i)
            lv = 0 if t < st else top * (min(t, st + ln - 1) - st + 1) // ln
        xoff, e = PG_XOFF // self.cell, self.ic_e(i)
        above = i * (IC_BASE // self.cell - xoff) + e * (IC_PER_DROP // self.cell)  # the bursts before i
        return (e + d * lv // top, 1536 * i + e + (1536 + d) * lv // top,
                (above + max(lv - xoff, 0)) // PFC_CELLS)

    def pg_cells(self, lv: int) -> tuple[int, int]:
        """(shared, headroom) cells of the PG at an incast level."""
        xoff = PG_XOFF // self.cell
        return min(lv, xoff), max(lv - xoff, 0) // HR_DIV

    def ic_count(self, sc: Scenario) -> int:
        """Bursts of an incast window: one per whole period inside it."""
        return INF if sc.b == INF else (sc.b - sc.a) * SLOT // sc.period

    def occupancy(self, tc: int, c: int) -> int:
        v = self.h(K_OCC, c) % 65536 if tc == 3 else 0
        for sc in self.wins:
            if sc.name == "microburst" and tc == 3 and 10 * c + 10 > sc.a:
                n = self.mb_count(sc)
                lo = (10 * c - sc.a) // 275 if 10 * c >= sc.a else 0
                for i in range(lo, min((10 * c + 9 - sc.a) // 275 + 1, n)):
                    s = self.mb_start(sc, i)
                    if s < 10 * c + 10 and s + self.mb_len(i) > 10 * c:
                        v = max(v, (16 << 20) - self.h(K_MB_OCC, i) % (1 << 20))
            elif sc.name == "pfc-storm" and sc.prio == tc and 10 * c < sc.b and 10 * c + 10 > sc.a:
                v = max(v, (15 << 20) - self.h(K_PFCOCC, c) % (1 << 18))
        return v

    def prepare(self):
        """Tables and rate overrides of this port's scenario windows (at open)."""
        self.tables = {}
        for sc in self.wins:
            if sc.name == "link-flap":
                n = INF
                if sc.b != INF:
                    j = (sc.b - sc.a - 1) // 300
                    n = j + 1 if self.flap_down(sc, j) + 30 < sc.b else j
                self.flaps.append((sc, n))
            elif sc.name == "symbol-errors" and self.host:
                self.tables[sc.ord] = cell_table(self, K_RETR_SCN, lambda h: 20 + h % 281)
            elif sc.name == "symbol-errors":
                mult = max(1, self.speed // 100_000)
                self.tables[sc.ord] = (
                    cell_table(self, K_SYM, lambda h, m=mult: (((h % 64) ** 2) >> 2) * m),
                    cell_table(self, K_EFF, lambda h: h % 8),
                    cell_table(self, K_DIP,
                               lambda h: 1024 - (410 + (h >> 32) % 307) if h % 100 < 30 else 0),
                )
                self.corr.over.append((sc.a, sc.b, self.speed * 1024 * 2 // 100))
            elif sc.name == "fec-degrade":
                mult = max(1, self.speed // 100_000)
                self.tables[sc.ord] = (
                    cell_table(self, K_SYM, lambda h, m=mult: (((h % 64) ** 2) >> 2) * m),
                    cell_table(self, K_FEC_EFF, lambda h: 1 + h % 8),
                )

    def raw(self, t: int, since: int | None = None) -> list[int]:
        """Every counter at t, before clears and truncation (full precision); the peaks since
        the previous read at ``since`` (None: the first read, its own cell)."""
        if self.host:
            return self._raw_host(t)
        v = [0] * slots(self.counters)
        n_rx = self.rx.X(self, t) << 10
        n_tx = self.tx.X(self, t) << 10
        n_corr = self.corr.X(self, t) << 10
        down = changes = 0
        for sc, n in self.flaps:
            d, ch = self.flap_state(sc, n, t)
            down += d
            changes += ch
            n_rx -= (self.rx.rate_at(sc.a) * d) << 10
            n_tx -= (self.tx.rate_at(sc.a) * d) << 10
            n_corr -= (self.corr.rate_at(sc.a) * d) << 10
        sym = eff = q_drops = w_drops = 0
        tails = [[0] * FEC_BINS for _ in range(self.lanes)]  # fec-degrade's extra codewords per lane and bin
        for sc in self.wins:
            w = _window_ns(sc, t)
            if sc.name == "symbol-errors":
                (sv, sp), (ev, ep), (dv, dp) = self.tables[sc.ord]
                sym += table_count(sv, sp, w)
                eff += table_count(ev, ep, w)
                wns = table_weighted_ns(dv, dp, w)
                n_rx -= self.rx.rate_at(sc.a) * wns
                n_tx -= self.tx.rate_at(sc.a) * wns
            elif sc.name == "pfc-storm":
                p = sc.prio
                pfc = Proc(200 << 10, 100 << 10, K_PFC + 64 * p)  # window-local
                v[IDX[f"HwIfInPfc{p}Pkt"]] += pfc.value(self, w, masked=False)
                v[IDX[f"rx_pause_duration_prio_{p}"]] += w * 99 // 100_000
                if w:
                    a = sc.a * SLOT
                    n_tx -= 973 * (self.tx.X(self, a + w) - self.tx.X(self, a))
            elif sc.name == "microburst":
                q_drops += self.mb_drops(sc, t, K_MB_DROP, 1500, 1001)
                w_drops += self.mb_drops(sc, t, K_MB_WRED, 400, 301)
            elif sc.name == "incast":
                d, e, f = self.ic_counts(sc, self.ic_count(sc), t)
                q_drops += d
                v[IDX[f"ecn_marked_tc_{sc.prio}"]] += e
                v[IDX[f"HwIfOutPfc{sc.prio}Pkt"]] += f
            elif sc.name == "fec-degrade":
                (sv, sp), (ev, ep) = self.tables[sc.ord]
                failing = max(0, min(t, sc.b * SLOT) - sc.fail * SLOT)
                sym += table_count(sv, sp, failing)
                eff += table_count(ev, ep, failing)
                self._fec_tail(sc, t, tails[sc.lane])
            elif sc.name == "drops":  # a process of its own, from the window's start
                dr = Proc(DROP_RATE << 10, DROP_JITTER << 10, K_DROP + 64 * sc.reason)
                v[DROP0 + sc.reason] += dr.value(self, w, masked=False)
        rx, tx, corr = n_rx // DEN, n_tx // DEN, n_corr // DEN
        lane_bits = [sum(k * n for k, n in enumerate(tail)) for tail in tails]
        tail_bits = sum(lane_bits)
        v[0:4] = [rx, rx >> 12, rx >> 27, rx >> 32]
        v[4:8] = [tx, tx >> 12, tx >> 27, tx >> 32]
        v[IDX["HwIfInDot3FrameErrors"]] = eff
        v[IDX["HwIfInErrors"]] = eff
        # microburst's and incast's drops are tail drops and WRED's early drops
        v[DROP0 + REASON_NAMES.index("tail-drop")] += q_drops
        v[DROP0 + REASON_NAMES.index("early-drop")] += w_drops
        drop_sums(v)
        v[IDX["ecn_marked_tc_3"]] += tx >> 23
        v[IDX["phy_received_bits"]] = self.speed * (t - down) // 1000
        v[IDX["phy_symbol_errors"]] = sym
        v[IDX["phy_corrected_bits"]] = corr + tail_bits
        v[IDX["phy_effective_errors"]] = eff
        lane0 = IDX["phy_raw_errors_lane0"]
        for i in range(self.lanes):
            v[lane0 + i] = corr // self.lanes + lane_bits[i]
        v[IDX["carrier_changes"]] = changes
        c = t // CELL
        c0 = max(min(t if since is None else since, t) // CELL, c - PEAK_CELLS + 1, 0)
        occ0, wm0, pk0 = IDX["tc_curr_occupancy_0"], IDX["tc_watermark_0"], IDX["tc_peak_occupancy_0"]
        tcs = {3} | {sc.prio for sc in self.wins if sc.name in ("pfc-storm", "incast")}
        for tc in tcs:
            levels = [self.occupancy(tc, x) for x in range(c - c % EPOCH_CELLS, c + 1)]
            v[occ0 + tc] = levels[-1]
            v[wm0 + tc] = max(levels)
            v[pk0 + tc] = max(self.occupancy(tc, x) for x in range(c0, c + 1))
            # incast's bursts, to the ns (from the same cell bound as the peak above)
            lo = max(min(t if since is None else since, t), c0 * CELL)
            for sc in self.wins:
                if sc.name == "incast" and sc.prio == tc:
                    n = self.ic_count(sc)
                    v[occ0 + tc] = max(v[occ0 + tc], self.ic_peak(sc, n, t, t) * self.cell)
                    v[wm0 + tc] = max(v[wm0 + tc], self.ic_peak(sc, n, (c - c % EPOCH_CELLS) * CELL, t) * self.cell)
                    v[pk0 + tc] = max(v[pk0 + tc], self.ic_peak(sc, n, lo, t) * self.cell)
        # incast's ingress side: PG = TC, the ingress pool 0 their sum (one window at a time)
        lo = max(min(t if since is None else since, t), c0 * CELL)
        for sc in self.wins:
            if sc.name != "incast":
                continue
            n, pg = self.ic_count(sc), sc.prio
            levels = (self.ic_peak(sc, n, t, t), self.ic_peak(sc, n, (c - c % EPOCH_CELLS) * CELL, t),
                      self.ic_peak(sc, n, lo, t))
            for what, lv in zip(("occupancy", "watermark", "peak_occupancy"), levels, strict=True):
                shared, headroom = self.pg_cells(lv)  # max: one PG's windows, one after the other
                at = IDX[f"pg_{'curr_' if what == 'occupancy' else ''}{what}_{pg}"]
                v[at] = max(v[at], shared * self.cell)
                at = IDX[f"pg_headroom_{what}_{pg}"]
                v[at] = max(v[at], headroom * self.cell)
            for name, lv in (("ingress_pool_occupancy_0", levels[0]), ("ingress_pool_peak_occupancy_0", levels[2])):
                v[IDX[name]] = max(v[IDX[name]], sum(self.pg_cells(lv)) * self.cell)
        self._fec_bins(v, corr, tails)
        return v

    def _fec_tail(self, sc: Scenario, t: int, tail: list[int]) -> None:
        """fec-degrade's codewords per bin at t, added to ``tail``: in phase j the front bin
        m = 3 + j gets S/64000 codewords/s and each bin below it twice the one above."""
        for k in range(1, FEC_BINS):
            n = 0
            for j in range(max(0, k - 3), FEC_PHASES + 1):
                lo, hi = sc.fec_phase(j) * SLOT, sc.fec_phase(j + 1) * SLOT
                if t > lo:
                    n += (self.speed << (3 + j - k)) * (min(t, hi) - lo)
            tail[k] += n // FEC_DEN

    def _fec_bins(self, v: list[int], corr: int, tails: list[list[int]]) -> None:
        """The RS-FEC histograms (bins S0..S15) from the PHY's counters as the plugin holds
        them (64-bit), per lane: bin k >= 1 = the lane's share of (corrected before
        fec-degrade's tail) >> (3k - 2) plus the lane's tail, bin 0 the lane's share of the
        codewords received (bits // 5440) minus its others; the port's
        (``phy_rs_fec_histogram``) their sum, bin by bin."""
        corr &= MASK64
        lanes = self.lanes

        def share(x: int, i: int) -> int:
            return x // lanes + (i < x % lanes)

        fec0 = IDX["phy_rs_fec_histogram"]
        cw = (v[IDX["phy_received_bits"]] & MASK64) // CW_BITS
        for i, tail in enumerate(tails):
            at = LANE_FEC0 + i * FEC_BINS
            for k in range(1, FEC_BINS):
                v[at + k] = share(corr >> (3 * k - 2), i) + tail[k]
            # C sums a lane's bins in 64 bits
            v[at] = max(share(cw, i) - (sum(v[at + 1:at + FEC_BINS]) & MASK64), 0)
            for k in range(FEC_BINS):
                v[fec0 + k] += v[at + k]

    def _raw_host(self, t: int) -> list[int]:
        scn = 0
        for sc in self.wins:
            if sc.name == "symbol-errors":
                vals, pre = self.tables[sc.ord]
                scn += table_count(vals, pre, _window_ns(sc, t))
        retr_to = scn >> 6
        return [
            self.retr.value(self, t) + scn,
            retr_to,
            scn >> 8,
            self.oos.value(self, t) + (scn * 3 >> 2),
            scn >> 3,
            retr_to,
            self.cnp.value(self, t),
            self.cnph.value(self, t),
            self.ecnr.value(self, t),
            self.tx.value(self, t) >> 2,
            self.rx.value(self, t) >> 2,
        ]

    def values(self, t: int, since: int | None = None) -> list[int]:
        v = self.raw(t, since)
        base = None
        for i, ts in enumerate(self.clears):
            if ts <= t:
                base = self.clear_vals[i]
        out = []
        j = 0
        for _, width, kind in self.counters:
            for _bin in range(FEC_BINS if kind == HISTOGRAM else 1):  # a histogram: its bins
                x = v[j]
                if base is not None and kind not in (GAUGE, PEAK):
                    x -= base[j]
                out.append(x & (MASK32 if width == 32 else MASK64))
                j += 1
        return out


class Model:
    """The simulated switch for one config string (the plugin's ``open()``)."""

    def __init__(self, config: str):
        self.cfg = cfg = parse_config(config)
        self.start = cfg["start"]
        role = cfg["role"]
        base: list[Port] = []
        self.uplinks: list[Port] = []
        if role == "host":
            base.append(Port(self, "mlx5_0", "", 400_000, PORT_UP | PORT_HOST))
        elif cfg["ports"] is not None:
            base += [Port(self, f"swp{i}", "", 400_000, PORT_UP)
                     for i in range(1, cfg["ports"] + 1)]
        elif role == "spine":
            for i in range(1, 65):
                if i == 11:
                    base += [Port(self, f"swp11s{j}", "swp11", 100_000, PORT_UP) for j in range(4)]
                elif i == 12:
                    base += [Port(self, f"swp12s{j}", "swp12", 200_000, PORT_UP) for j in range(2)]
                else:
                    base.append(Port(self, f"swp{i}", "", 400_000, PORT_UP))
        else:
            servers = [Port(self, f"swp{i}", "", 200_000, PORT_UP) for i in range(1, 33)]
            first = 65 - cfg["uplinks"]
            self.uplinks = [Port(self, f"swp{i}", "", 400_000, PORT_UP) for i in range(first, 65)]
            m = sum(p.rx.R for p in servers) * 3 // 80
            for u in self.uplinks:
                j = min(m // 5, u.cap - m)
                u.rx, u.tx = Proc(m, j, K_RX), Proc(m, j, K_TX)
            base = servers + self.uplinks
        self.base = base
        byname = {p.name: p for p in base}
        # breakouts: generation g = base + the first g-1 breakouts (by time, then config order)
        self.breakouts = []
        for sc in cfg["scenarios"]:
            if sc.name != "breakout":
                continue
            if role == "host":
                raise ConfigError(f"sim: scenario '{sc.spec}': not available with role=host")
            if sc.port is None:
                raise ConfigError(f"sim: scenario '{sc.spec}': needs a port (breakout@T:swpN)")
            p = byname.get(sc.port)
            if p is None:
                raise ConfigError(f"sim: scenario '{sc.spec}': no port '{sc.port}'")
            if p.parent or p.speed != 400_000 or p.name in self.uplinks_names():
                raise ConfigError(f"sim: scenario '{sc.spec}': '{sc.port}' cannot be broken out"
                                  " (a 400G port, not an uplink)")
            if any(b.port == sc.port for b, _ in self.breakouts):
                raise ConfigError(f"sim: scenario '{sc.spec}': '{sc.port}' is broken out twice")
            kids = [Port(self, f"{sc.port}s{j}", sc.port, 100_000, PORT_UP) for j in range(4)]
            for k in kids:
                k.clears.append(sc.a * SLOT)
                byname[k.name] = k
            self.breakouts.append((sc, kids))
        self.breakouts.sort(key=lambda bk: (bk[0].a, bk[0].ord))
        self.gens = [list(base)]
        for sc, kids in self.breakouts:
            cur = list(self.gens[-1])
            i = [p.name for p in cur].index(sc.port)
            self.gens.append(cur[:i] + kids + cur[i + 1:])
        self.all_ports = list(byname.values())
        self._assign(byname)
        for p in self.all_ports:
            p.prepare()
        for p in self.all_ports:
            order = sorted(range(len(p.clears)), key=lambda i: p.clears[i])
            p.clears = [p.clears[i] for i in order]
            p.clear_vals = [p.raw(ts) for ts in p.clears]

    def uplinks_names(self) -> set[str]:
        return {u.name for u in self.uplinks}

    def _assign(self, byname: dict[str, Port]) -> None:
        cfg = self.cfg
        host = cfg["role"] == "host"
        touched: list[tuple[Scenario, set[str]]] = []
        incasts: list[Scenario] = []
        drops: list[Scenario] = []
        for sc in cfg["scenarios"]:
            if sc.name == "breakout":
                continue
            if host and sc.name not in ("symbol-errors", "counter-clear"):
                raise ConfigError(f"sim: scenario '{sc.spec}': not available with role=host")
            if host:
                ports = [self.base[0]]
            elif sc.name == "counter-clear" and sc.port is None:
                ports = list(self.all_ports)
            elif sc.name == "imbalance":
                if not self.uplinks:
                    raise ConfigError(
                        f"sim: scenario '{sc.spec}': needs role=leaf (an uplink group)")
                name = sc.port or self.uplinks[0].name
                if name not in self.uplinks_names():
                    if name not in byname:
                        raise ConfigError(f"sim: scenario '{sc.spec}': no port '{name}'")
                    raise ConfigError(f"sim: scenario '{sc.spec}': '{name}' is not an uplink")
                ports = list(self.uplinks)
                sc.port = name
            else:
                name = sc.port
                if name is None:
                    name = "swp1"
                    if sc.name in ("symbol-errors", "fec-degrade") and "swp11s1" in byname:
                        name = "swp11s1"
                if name not in byname:
                    raise ConfigError(f"sim: scenario '{sc.spec}': no port '{name}'")
                if sc.name == "fec-degrade" and sc.lane >= byname[name].lanes:
                    raise ConfigError(f"sim: scenario '{sc.spec}': {name} has lanes 0..{byname[name].lanes - 1}")
                sc.port = name
                ports = [byname[name]]
            if sc.name in ("pfc-storm", "incast") and sc.prio is None:
                sc.prio = 3
            if sc.name == "incast":  # a port's incast windows never overlap (its pool: one window's PG)
                for other in incasts:
                    if other.port == sc.port and sc.a < other.b and other.a < sc.b:
                        raise ConfigError(f"sim: scenarios '{other.spec}' and '{sc.spec}' overlap on {sc.port}")
                incasts.append(sc)
            if sc.name == "drops":  # a port's windows of one reason never overlap
                for other in drops:
                    if other.port == sc.port and other.reason == sc.reason and sc.a < other.b and other.a < sc.b:
                        raise ConfigError(f"sim: scenarios '{other.spec}' and '{sc.spec}' overlap on {sc.port}")
                drops.append(sc)
            if sc.name in TRAFFIC:
                names = {p.name for p in ports}
                for other, onames in touched:
                    common = names & onames
                    if common and sc.a < other.b and other.a < sc.b:
                        raise ConfigError(f"sim: scenarios '{other.spec}' and '{sc.spec}' overlap"
                                          f" on {sorted(common)[0]}")
                touched.append((sc, names))
            for p in ports:
                if sc.name == "counter-clear":
                    p.clears.append(sc.a * SLOT)
                    continue
                if len(p.wins) >= MAX_PORT_WINDOWS:
                    raise ConfigError(
                        f"sim: too many scenarios on {p.name} (max {MAX_PORT_WINDOWS})")
                p.wins.append(sc)
                if sc.name == "imbalance":
                    m, n = p.tx.R, len(self.uplinks)
                    hi = min(2 * m, p.cap - p.tx.J)
                    rate = hi if p.name == sc.port else (n * m - hi) // (n - 1)
                    p.tx.over.append((sc.a, sc.b, rate))

    # --- the plugin's API ---

    def generation(self, t: int) -> int:
        t = max(t, 0)
        return 1 + sum(1 for sc, _ in self.breakouts if sc.a * SLOT <= t)

    def ports_at(self, t: int) -> list[Port]:
        return self.gens[self.generation(t) - 1]

    def layout(self, t: int):
        ports = self.ports_at(t)
        return (self.generation(t), [(p.name, p.parent, p.speed, p.flags) for p in ports],
                [list(p.counters) for p in ports])

    def values(self, t: int, since: int | None = None) -> list[int]:
        """Every value of a read at t; ``since``: the previous successful read's t (the
        PEAK kind clears on read), None for the handle's first read."""
        t = max(t, 0)
        since = None if since is None else max(since, 0)
        out: list[int] = []
        for p in self.ports_at(t):
            out += p.values(t, since)
        return out
