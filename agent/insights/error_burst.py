"""Link errors per port (config ``insights.error_burst``): the cable-fault incident.

Three event types, all over ``window`` of sample time:

* ``symbol-ber``: post-FEC symbol errors over the bits received, warning above
  ``symbol_ber`` (1e-12, IEEE 802.3's target); any uncorrectable (effective) error in
  the window makes it critical. Bits received are the PHY's ``received-bits`` where a
  source has it, else link speed x time (the PHY receives idles too); with neither,
  any symbol error counts as over the threshold.
* ``pre-fec-ber``: FEC-corrected bits over the bits received (both averaged
  exponentially over about ``window``: a healthy link corrects bits in every sample,
  so no history is kept), warning above ``pre_fec_ber_warning``, critical above
  ``pre_fec_ber_critical`` (UFM's PDR plugin): the link still delivers, but it is failing.
* ``error-burst``: FCS/CRC and in-errors (``counters``), at least ``threshold`` within
  ``window``. Per sample the largest of the counted leaves counts, since in-errors
  already contains the FCS errors. A sample longer than the window (slow polling)
  counts pro rata: it cannot show that its errors came within one window.

The steady part (the bits received and corrected, averaged per port) lives in flat arrays
updated by a kernel once per pass for every port sampled (agent/_ext/detect.c ``burst_run``: the
rule; its plain Python backend agent/_fallback/detect.py); Python looks only at the samples in which
errors moved or whose
corrected bits are over the warning level.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from agent import _backend
from agent.config import Duration, setting
from agent.insights import classify as c
from agent.insights.base import (
    CLEAR_AFTER_TYPE,
    CRITICAL,
    NS,
    THRESHOLD_TYPE,
    WARNING,
    WINDOW_TYPE,
    Detector,
    Rules,
    Window,
    WindowedConfig,
    fmt_count,
    fmt_duration,
    register,
)

_SEMS = frozenset({c.RX_BITS, c.SYMBOL, c.UNCORRECTABLE, c.CORRECTED, c.ERRORS})


class _Port:
    """A port's error windows, kept from its first error (its steady part, the bits received
    and corrected per ns averaged exponentially over about one window and the ns of samples
    with a known bit count, is a row of the detector's arrays)."""

    __slots__ = ("sym", "unc", "err")

    def __init__(self, span: int) -> None:
        self.sym = Window(span)
        self.unc = Window(span)
        self.err = Window(span)


_BITS = (c.RX_BITS, "")
_CORR = (c.CORRECTED, "")
_RARE = frozenset({c.SYMBOL, c.UNCORRECTABLE, c.ERRORS})
_RARE_BITS = c.mask(_RARE)
_STEADY_KEYS = (_BITS, _CORR)
_STEADY_SEMS = (c.RX_BITS, c.CORRECTED)
_NEW_ROW = array("d", [0.0, 0.0])  # a row of reals (bitrate, corr_rate); ints: ns seen


@dataclass(frozen=True, slots=True)
class BurstRule:
    """The steady part's settings as the kernel reads them (``burst_run``'s conf, by attribute)."""

    span: int  # ns: the window
    warning: float  # pre_fec_ber_warning: a sample's own corrected bits over it are looked at
    keys: tuple = _STEADY_KEYS
    sems: tuple = _STEADY_SEMS
    rare_bits: int = _RARE_BITS


@dataclass
class ErrorBurstConfig(WindowedConfig):
    """``insights.error_burst``: physical-layer errors on a port. Three event types:
    `symbol-ber` (post-FEC symbol errors over the bits received, warning above `symbol_ber`;
    any uncorrectable/effective error makes it critical), `pre-fec-ber` (corrected bits over
    the bits received) and `error-burst` (FCS/CRC and in-errors counted within `window`)."""

    # Leaves counted by error-burst. Per sample the largest of them counts (in-errors already
    # includes FCS errors, so they are not added up).
    counters: list[str] = setting(
        factory=lambda: ["in-fcs-errors", "in-crc-errors", "in-errors"],
        type="list of leaf names, non-empty", shown="`[in-fcs-errors, in-crc-errors, in-errors]`",
        doc="leaves counted by `error-burst` (per sample the largest: in-errors contains the FCS errors)")
    threshold: int = setting(10, type=THRESHOLD_TYPE, doc="errors within `window` that raise `error-burst`")
    window: Duration = setting(Duration(1.0), type=WINDOW_TYPE,
                               doc="window of the error count and of the BER ratios")
    symbol_ber: float = setting(1e-12, type="number, 0 < x < 1", shown="`1.0e-12`", doc=(
        "`symbol-ber` warning above this post-FEC symbol BER (IEEE 802.3 target); any uncorrectable "
        "error makes it critical"))
    pre_fec_ber_warning: float = setting(5e-07, type="number, 0 < x < 1", shown="`5.0e-7`",
                                         doc="`pre-fec-ber` warning above this (UFM PDR plugin)")
    pre_fec_ber_critical: float = setting(1e-06, type="number, 0 < x < 1, ≥ warning", shown="`1.0e-6`",
                                          doc="`pre-fec-ber` critical above this")
    clear_after: Duration = setting(Duration(60.0), type=CLEAR_AFTER_TYPE, shown="`1m`",
                                    doc="quiet time before the event clears")


@register
class ErrorBurst(Detector):
    name = "error_burst"
    config_class = ErrorBurstConfig
    doc = ("physical-layer errors on a port (the cable-fault incident): events `symbol-ber`, "
           "`pre-fec-ber`, `error-burst` (docs/insights.md)")
    reads = ("netdev", "ethtool", "asic")
    types = ("symbol-ber", "pre-fec-ber", "error-burst")
    sems = _SEMS

    @classmethod
    def check(cls, section: ErrorBurstConfig, where: str, problems: list[str], cfg) -> None:
        rules = Rules(section, where, problems)
        rules.threshold()
        rules.positive("window")
        rules.names("counters")
        for key in ("symbol_ber", "pre_fec_ber_warning", "pre_fec_ber_critical"):
            rules.ratio(key)
        if section.pre_fec_ber_warning > section.pre_fec_ber_critical:
            problems.append(f"{where}.pre_fec_ber_warning: must not exceed pre_fec_ber_critical, "
                            f"got {section.pre_fec_ber_warning} > {section.pre_fec_ber_critical}")
        super().check(section, where, problems, cfg)

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.rule = BurstRule(self.span, float(cfg.pre_fec_ber_warning))
        self.counted = frozenset(x.strip() for x in cfg.counters)
        #: port -> its error windows, from its first error until it goes away
        self.ports: dict[str, _Port] = {}
        #: port -> its row of the steady state (kept, reset, when the port goes away)
        self.rows: dict[str, int] = {}
        self.reals = array("d")  # per row: bitrate, corr_rate (per ns)
        self.ints = array("q")  # per row: ns seen
        self.batch: list = []
        #: the kernel (the backend's; tests and bench/ set the fallback's beside it)
        self.kernel = _backend.reader.burst_run
        self._entries: list = []
        self._found: dict[int, tuple] = {}  # entry index -> (hot, bitrate, corr_rate, seen)

    def _room(self, rows: int) -> None:
        have = len(self.ints)
        if have < rows:
            more = max(rows - have, have, 64)
            self.reals.extend(_NEW_ROW * more)
            self.ints.extend(array("q", bytes(8 * more)))

    def run_batch(self) -> list[int]:
        entries, self.batch = self.batch, []
        self._entries, self._found = entries, {}
        if not entries:
            return []
        self._room(len(self.rows) + len(entries))
        found = self.kernel(entries, self.ctx.speeds, self.rows, self.reals, self.ints, self.rule)
        for k, *rest in found:
            self._found[k] = rest
        return list(self._found)  # (the kernel finds them in the samples' order)

    def emit(self, k: int) -> None:
        found = self._found.get(k)
        if found is not None:
            port, ts, dt, acc, owned, changed = self._entries[k][:6]
            self._errors(port, ts, dt, acc, owned, changed, *found)

    def sample(self, port, ts, dt, acc, owned) -> None:
        """One sample alone (the feeds pass samples through ``batch``)."""
        self.batch_of_one(port, ts, dt, acc, owned)

    def _errors(self, port: str, ts: int, dt: int, acc, owned, changed: int, hot_corr: bool, bitrate: float,
                corr_rate: float, seen: int) -> None:
        """A sample in which errors moved (or whose corrected bits are over the warning level):
        its errors into the port's windows, and the rule judged (the steady state as the
        kernel left it after this sample)."""
        sym = unc = err = 0
        # Errors are rare: a sample in which none of their semantics moved holds no key of
        # theirs (the feeds' mask), so the look through every key is skipped.
        for key, v in acc.items() if changed & _RARE_BITS else ():
            sem = key[0]
            if sem not in _RARE or sem not in owned:
                continue
            if sem == c.SYMBOL:
                sym += v
            elif sem == c.UNCORRECTABLE:
                unc += v
            if key[1] in self.counted and v > err:
                err = v
        if not (sym or unc or err or hot_corr):
            return
        st = self.ports.get(port)
        if st is None:
            st = self.ports[port] = _Port(self.span)
        if sym:
            st.sym.add(ts, sym)
        if unc:
            st.unc.add(ts, unc)
        if err:
            st.err.add(ts, err * min(1.0, self.span / dt))
        # Judged when errors arrive (so an event's last time is its last error); the pre-FEC
        # BER when a sample's own corrected bits exceed the warning level.
        self._judge(port, st, bitrate, corr_rate, seen, ts, dt, bool(sym or unc), hot_corr, bool(err))

    def _judge(self, port: str, st: _Port, bitrate: float, corr_rate: float, seen: int, ts: int, dt: int,
               new_sym: bool, new_corr: bool, new_err: bool) -> None:
        cfg = self.cfg
        sym, unc, err = st.sym.trim(ts), st.unc.trim(ts), st.err.trim(ts)
        span = max(self.span, dt)
        bits = bitrate * min(span, seen)
        win = fmt_duration(self.span / NS)
        pre = corr_rate / bitrate if bitrate and corr_rate else None
        if new_sym:
            ber = max(sym, unc) / bits if bits else None
            over = ber is None or ber > cfg.symbol_ber or unc > 0
            if over:
                severity = CRITICAL if unc else WARNING
                parts = [f"{port}:"]
                if ber is not None:
                    parts.append(f"symbol BER {ber:.1e} (threshold {cfg.symbol_ber:.0e})")
                else:
                    parts.append(f"{fmt_count(sym)} symbol errors in {win} (link speed unknown)")
                text = " ".join(parts)
                if unc:
                    text += f", {fmt_count(unc)} uncorrectable"
                if pre is not None:
                    text += f", pre-FEC BER {pre:.1e}"
                text += "; check the cable or transceiver"
                peak, unit = (ber, "ber") if ber is not None else (float(max(sym, unc)), f"errors/{win}")
                self.ctx.hit(self, "symbol-ber", port, ts, severity, peak, unit, text, [port])
        if new_corr and pre is not None and pre > cfg.pre_fec_ber_warning:
            severity = CRITICAL if pre > cfg.pre_fec_ber_critical else WARNING
            text = (f"{port}: pre-FEC BER {pre:.1e} (warning {cfg.pre_fec_ber_warning:.0e}, "
                    f"critical {cfg.pre_fec_ber_critical:.0e}); FEC still corrects, but the link is "
                    "degrading: check the cable or transceiver")
            self.ctx.hit(self, "pre-fec-ber", port, ts, severity, pre, "ber", text, [port])
        if new_err and err >= cfg.threshold:
            text = (f"{port}: {fmt_count(err)} receive errors (FCS/CRC, in-errors) within {win} "
                    f"(threshold {cfg.threshold}); check the cable, transceiver or the peer's port")
            self.ctx.hit(self, "error-burst", port, ts, WARNING, err, f"errors/{win}", text, [port])

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)
        row = self.rows.get(port)
        if row is not None:  # its row starts afresh should the port come back
            self.reals[2 * row:2 * row + 2] = _NEW_ROW
            self.ints[row] = 0
