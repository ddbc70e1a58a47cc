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
"""

from __future__ import annotations

from dataclasses import dataclass

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
    fmt_count,
    fmt_duration,
    register,
)

_SEMS = frozenset({c.RX_BITS, c.SYMBOL, c.UNCORRECTABLE, c.CORRECTED, c.ERRORS})


class _Port:
    __slots__ = ("bitrate", "corr_rate", "seen", "sym", "unc", "err")

    def __init__(self, span: int) -> None:
        # Bits received and bits corrected per ns, averaged over about one window
        # (exponentially: O(1) per sample, no history kept for the steady counters).
        self.bitrate = 0.0
        self.corr_rate = 0.0
        self.seen = 0  # ns of samples with a known bit count
        self.sym = Window(span)
        self.unc = Window(span)
        self.err = Window(span)


_BITS = (c.RX_BITS, "")
_CORR = (c.CORRECTED, "")
_RARE = frozenset({c.SYMBOL, c.UNCORRECTABLE, c.ERRORS})
_RARE_BITS = c.mask(_RARE)


@dataclass
class ErrorBurstConfig:
    """``insights.error_burst``: physical-layer errors on a port. Three event types:
    `symbol-ber` (post-FEC symbol errors over the bits received, warning above `symbol_ber`;
    any uncorrectable/effective error makes it critical), `pre-fec-ber` (corrected bits over
    the bits received) and `error-burst` (FCS/CRC and in-errors counted within `window`)."""

    enabled: bool = setting(True)
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
class LinkErrors(Detector):
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
        self.counted = frozenset(x.strip() for x in cfg.counters)
        self.ports: dict[str, _Port] = {}

    def sample(self, port, ts, dt, acc, owned) -> None:
        st = self.ports.get(port)
        if st is None:
            st = self.ports[port] = _Port(self.span)
        if c.RX_BITS in owned:
            bits = acc.get(_BITS, 0)
        else:
            speed = self.ctx.speeds.get(port)
            bits = speed * dt / NS if speed else None
        corr = acc.get(_CORR, 0) if c.CORRECTED in owned else 0
        if bits is not None:
            alpha = min(1.0, dt / self.span) if st.seen else 1.0
            st.bitrate += alpha * (bits / dt - st.bitrate)
            st.corr_rate += alpha * (corr / dt - st.corr_rate)
            st.seen += dt
        sym = unc = err = 0
        # Errors are rare: a sample in which none of their semantics moved holds no key of
        # theirs (the feeds' mask), so the look through every key is skipped.
        for key, v in acc.items() if self.changed & _RARE_BITS else ():
            sem = key[0]
            if sem not in _RARE or sem not in owned:
                continue
            if sem == c.SYMBOL:
                sym += v
            elif sem == c.UNCORRECTABLE:
                unc += v
            if key[1] in self.counted and v > err:
                err = v
        if sym:
            st.sym.add(ts, sym)
        if unc:
            st.unc.add(ts, unc)
        if err:
            st.err.add(ts, err * min(1.0, self.span / dt))
        # Judged when errors arrive (so an event's last time is its last error); the pre-FEC
        # BER when a sample's own corrected bits exceed the warning level.
        hot_corr = bool(corr and bits and corr > bits * self.cfg.pre_fec_ber_warning)
        if sym or unc or err or hot_corr:
            self._judge(port, st, ts, dt, bool(sym or unc), hot_corr, bool(err))

    def _judge(self, port: str, st: _Port, ts: int, dt: int, new_sym: bool, new_corr: bool,
               new_err: bool) -> None:
        cfg = self.cfg
        sym, unc, err = st.sym.trim(ts), st.unc.trim(ts), st.err.trim(ts)
        span = max(self.span, dt)
        bits = st.bitrate * min(span, st.seen)
        win = fmt_duration(self.span / NS)
        pre = st.corr_rate / st.bitrate if st.bitrate and st.corr_rate else None
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
