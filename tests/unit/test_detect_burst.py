"""The error-burst rule's steady part (bits received and corrected per port, averaged) in
arrays, updated once per pass by a kernel (``burst_run``: agent/_ext/detect.c and its twin
agent/_fallback/detect.py).

Held to the detector it replaced (kept below as it was, per port and per object): on
random passes (irregular and huge sample lengths, bit counts and speeds beyond the range
where doubles are exact, wraps, resets and jumps as huge, negative or missing deltas,
symbol errors, uncorrectable blocks, FCS errors and hot corrected bits, ports that go away)
both kernels give the same hits, to the bit, and the same state as the old detector; and a
simulated switch's run gives the same events and state updates through the runner with the
old error_burst and throughput_dip and with the new ones."""

from __future__ import annotations

import random
import struct
from array import array

import pytest

from agent import _backend, _fallback
from agent.config import Duration
from agent.insights import classify as c
from agent.insights.base import CRITICAL, NS, WARNING, Detector, Window, fmt_count, fmt_duration
from agent.insights.link_errors import ErrorBurstConfig, LinkErrors
from tests.unit.test_detect_dip import (
    Ctx,
    OldThroughputDip,
    _run_both,
    _state_of_new,
    _state_of_old,
)

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

KERNELS = {"twin": _fallback.burst_run}
if _backend.NAME == "C":
    KERNELS["C"] = _backend.reader.burst_run


# ---------------------------------------------------------------- the detector it replaced
class _Port:
    __slots__ = ("bitrate", "corr_rate", "seen", "sym", "unc", "err")

    def __init__(self, span: int) -> None:
        self.bitrate = 0.0
        self.corr_rate = 0.0
        self.seen = 0
        self.sym = Window(span)
        self.unc = Window(span)
        self.err = Window(span)


_BITS = (c.RX_BITS, "")
_CORR = (c.CORRECTED, "")
_RARE = frozenset({c.SYMBOL, c.UNCORRECTABLE, c.ERRORS})
_RARE_BITS = c.mask(_RARE)


class OldLinkErrors(Detector):
    """agent/insights/link_errors.py's detector as it was before its state moved into arrays."""

    name = "error_burst"
    types = ("symbol-ber", "pre-fec-ber", "error-burst")
    sems = frozenset({c.RX_BITS, c.SYMBOL, c.UNCORRECTABLE, c.CORRECTED, c.ERRORS})

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


# ---------------------------------------------------------------- random passes
SPEEDS = (400_000_000_000, 100_000_000_000, 25_000_000_000, 399_999_999_977, 1e11, True)
BOTH = frozenset({c.RX_BITS, c.CORRECTED, c.SYMBOL, c.UNCORRECTABLE, c.ERRORS})
OWNED = (BOTH,) * 4 + (frozenset({c.CORRECTED, c.SYMBOL, c.ERRORS}), frozenset({c.RX_BITS}),
                       frozenset({c.SYMBOL, c.UNCORRECTABLE}), frozenset())
ERROR_KEYS = ((c.SYMBOL, ""), (c.UNCORRECTABLE, "fec-uncorrectable-blocks"), (c.UNCORRECTABLE, "effective-errors"),
              (c.ERRORS, "in-errors"), (c.ERRORS, "in-fcs-errors"), (c.ERRORS, "in-crc-errors"),
              (c.ERRORS, "in-other"))


def _passes(rng: random.Random, ports: list[str], speeds: dict, n: int):
    """Per pass, its samples (port, ts, dt, acc, owned, changed) and the ports forgotten."""
    ts = 1_700_000_000 * NS
    step = rng.choice((100_000_000, 50_000_000, 1_000_000_000))
    ber = {p: rng.choice((0.0, 1e-7, 6e-7, 2e-6)) for p in ports}
    for _ in range(n):
        dt = step if rng.random() < 0.7 else rng.choice((
            step + rng.randrange(-step // 10, step // 10), rng.randrange(1, 3 * step),
            rng.randrange(1 << 53, 1 << 56), 1))
        ts += dt
        entries = []
        order = list(ports)
        rng.shuffle(order)
        for p in order[:rng.randrange(len(order) // 2, len(order) + 1)]:
            speed = speeds.get(p) or 100_000_000_000
            acc: dict = {}
            bits = int(speed * dt / NS * rng.uniform(0.99, 1.0))
            r = rng.random()
            if r < 0.02:
                bits = rng.choice((0, -rng.randrange(1 << 30), rng.randrange(1 << 53, 1 << 62), (1 << 53) + 1))
            if r < 0.97:
                acc[_BITS] = bits
            if rng.random() < 0.9:
                corr = int(bits * ber[p] * rng.uniform(0.5, 1.5))
                if rng.random() < 0.01:
                    corr = rng.choice((-5, (1 << 53) + 1, rng.randrange(1 << 60)))
                acc[_CORR] = corr
            if rng.random() < 0.08:
                for key in rng.sample(ERROR_KEYS, rng.randrange(1, 4)):
                    acc[key] = rng.choice((1, 3, 12, 500, 0, -2, 1 << 60))
            changed = c.mask({k[0] for k in acc}) if rng.random() < 0.9 else -1
            entries.append((p, ts, dt, acc, rng.choice(OWNED), changed))
        gone = [p for p in ports if rng.random() < 0.002]
        yield entries, gone


def _old_state(old: OldLinkErrors, port: str) -> tuple:
    st = old.ports.get(port)
    return (struct.pack("<2d", st.bitrate, st.corr_rate), st.seen) if st is not None else ()


def _new_state(det: LinkErrors, port: str) -> tuple:
    row = det.rows.get(port)
    if row is None:
        return ()
    return struct.pack("<2d", *det.reals[2 * row:2 * row + 2]), det.ints[row]


@pytest.mark.parametrize("seed", range(16))
def test_both_kernels_hit_and_keep_state_as_the_old_detector_did(seed):
    rng = random.Random(seed)
    ports = [f"swp{i}" for i in range(1, rng.randrange(2, 24))]
    speeds = {p: rng.choice(SPEEDS) for p in ports}
    for p in rng.sample(ports, len(ports) // 6):
        speeds[p] = rng.choice((0, None))
    speeds = {p: s for p, s in speeds.items() if s is not None}
    cfg = ErrorBurstConfig(window=Duration(rng.choice((1.0, 0.3, 5.0))), threshold=rng.choice((10, 1, 100)))
    old = OldLinkErrors(cfg, Ctx(speeds))
    news = {}
    for name, kernel in KERNELS.items():
        det = news[name] = LinkErrors(cfg, Ctx(speeds))
        det.kernel = kernel
    for entries, gone in _passes(rng, ports, speeds, 500):
        for e in entries:
            old.changed = e[5]
            old.sample(*e[:5])
        for det in news.values():
            det.batch.extend(entries)
            for k in det.run_batch():
                det.emit(k)
        for p in gone:
            old.forget(p)
            for det in news.values():
                det.forget(p)
    kinds = {h[0] for h in old.ctx.hits}
    assert {"symbol-ber", "pre-fec-ber", "error-burst"} <= kinds, "the passes missed a rule: the test proves little"
    for name, det in news.items():
        assert det.ctx.hits == old.ctx.hits, name
        for p in ports:
            if p in old.ports or p in det.rows:
                want = _old_state(old, p) or (struct.pack("<2d", 0.0, 0.0), 0)
                assert _new_state(det, p) == want, (name, p)
    if "C" in news:
        assert news["C"].reals.tobytes() == news["twin"].reals.tobytes()
        assert news["C"].ints.tobytes() == news["twin"].ints.tobytes()


@pytest.mark.parametrize("name", ["twin", "C"])
def test_bad_input_is_refused_not_written_past(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    kernel = KERNELS[name]
    keys, sems = (_BITS, _CORR), (c.RX_BITS, c.CORRECTED)
    e = ("swp1", 10 * NS, NS, {_BITS: 5}, BOTH, 0)
    tail = (NS, 5e-7, keys, sems, _RARE_BITS) + ((lambda k: None,) if name == "C" else ())
    with pytest.raises(ValueError):  # no room for a new row
        kernel([e], {}, {}, array("d"), array("q"), *tail)
    with pytest.raises(IndexError):  # a row beyond the arrays
        kernel([e], {}, {"swp1": 3}, array("d", bytes(16)), array("q", bytes(8)), *tail)
    with pytest.raises(TypeError):
        kernel([e[:5]], {}, {}, array("d", bytes(16)), array("q", bytes(8)), *tail)
    with pytest.raises(ValueError):
        kernel([e], {}, {}, array("d", bytes(16)), array("q", bytes(8)), 0, *tail[1:])


def test_the_c_kernel_hands_what_doubles_cannot_do_exactly_to_the_twin_in_turn():
    if "C" not in KERNELS:
        pytest.skip("the C extension is not loaded")
    asked = []

    def slow(k):
        asked.append(k)
        return None

    big = (1 << 53) + 1
    entries = [("swp1", NS, NS, {_BITS: 10}, BOTH, 0), ("swp2", NS, NS, {_BITS: big}, BOTH, 0),
               ("swp3", NS, NS, {_CORR: -big}, BOTH, 0), ("swp4", NS, 1 << 54, {}, BOTH, 0),
               ("swp5", NS, NS, {}, frozenset(), 0)]
    rows: dict = {}
    kernel = KERNELS["C"]
    assert kernel(entries, {"swp5": 1e11}, rows, array("d", bytes(80)), array("q", bytes(40)), NS, 5e-7,
                  (_BITS, _CORR), (c.RX_BITS, c.CORRECTED), _RARE_BITS, slow) == []
    assert asked == [1, 2, 3, 4] and list(rows) == ["swp1"]  # a float speed: the twin's too


# ---------------------------------------------------------------- a simulated switch's run
@pytest.mark.parametrize(("config", "seconds", "step", "jitter"), [
    ("role=spine seed=1 scenario=symbol-errors@5s-25s:swp11s1", 40, 0.1, 0.0),
    ("ports=8 seed=4 scenario=fec-degrade@2s-30s:swp2,counter-clear@9s:swp2,symbol-errors@3s-6s:swp6", 30, 0.1,
     0.2),
])
def test_a_simulated_run_gives_the_old_detectors_events_bit_for_bit(config, seconds, step, jitter):
    def before(runner):
        runner._detectors["throughput_dip"] = OldThroughputDip(runner.cfg.throughput_dip, runner)
        runner._detectors["error_burst"] = OldLinkErrors(runner.cfg.error_burst, runner)

    (new, old), (new_out, old_out) = _run_both(config, seconds, step, jitter, before=before)
    kinds = {e["type"] for e in old.status()["open"] + old.status()["recent"]}
    assert {"symbol-ber", "pre-fec-ber"} <= kinds  # the rule was exercised
    assert new.status() == old.status()
    assert new_out == old_out
    det, ref = new.detectors["error_burst"], old.detectors["error_burst"]
    assert set(det.rows) == set(ref.ports)
    for p in ref.ports:
        assert _new_state(det, p) == _old_state(ref, p)
    dip, ref_dip = new.detectors["throughput_dip"], old.detectors["throughput_dip"]
    for p in ref_dip.ports:
        assert _state_of_new(dip, p) == _state_of_old(ref_dip, p)
