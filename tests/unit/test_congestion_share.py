"""Congestion thresholds as a share of the queue's limit, and the asic source's switch that
turns buffer data off (``sources.asic.buffers``), with what the congestion detector says
in status then."""

from __future__ import annotations

from array import array

import pytest

import agent.plugins  # noqa: F401  (fills the config registries)
from agent import _backend, _fallback, config
from agent.config import Insights
from agent.control.client import render
from agent.counters import GAUGE, SWTEL_ORIGIN, Batch, Container, CounterSpec, CounterTable
from agent.insights import InsightsPipeline, classify
from agent.insights.congestion import Congestion, parse_threshold
from agent.pathgrammar import qos_interface_path
from agent.sources.asic import BUFFER_LEAVES, AsicSource
from agent.sources.base import NO_DATA
from tests import sim_model

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

NS = 1_000_000_000
PEAK = classify.QUEUE_PEAK
LIMIT = classify.QUEUE_LIMIT


class _Ctx:
    log = None
    speeds: dict = {}

    def __init__(self) -> None:
        self.hits: list[tuple[int, float, str]] = []

    def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
        self.hits.append((ts, peak, message))


def _detector(high, low) -> tuple[Congestion, _Ctx]:
    ins = Insights()
    ins.congestion.high, ins.congestion.low = high, low
    ctx = _Ctx()
    return Congestion(ins.congestion, ctx), ctx


def test_thresholds_parse_as_bytes_or_shares():
    assert parse_threshold(4 << 20) == (4 << 20, None)
    assert parse_threshold("1048576") == (1 << 20, None)
    assert parse_threshold("80%") == (None, 80.0)
    assert parse_threshold(" 12.5 % ") == (None, 12.5)
    for bad in ("4MiB", "%", "-5%", True, 1.5, None):
        with pytest.raises(ValueError):
            parse_threshold(bad)


@pytest.mark.parametrize("owned", [frozenset({PEAK, LIMIT}), frozenset({PEAK})])
def test_a_share_is_judged_against_the_queue_limit_and_never_guessed(owned):
    """80 % / 50 % of a 10 MB limit: raised at 8 MB, held to 5 MB, ended below. Without a
    limit (or when the limit's source is not the one elected for it) nothing is judged and
    status names the queue."""
    det, ctx = _detector("80%", "50%")
    limit = 10_000_000
    levels = [0, 7_999_999, 8_000_000, 9_000_000, 5_000_000, 4_999_999, 7_999_999, 8_000_000]
    for k, level in enumerate(levels):
        acc = {(PEAK, "3"): level}
        if k == 0:
            acc[(LIMIT, "3")] = limit  # a limit is a level: sent once, kept
        det.sample("swp1", k, 1, acc, owned)
    if LIMIT not in owned:
        assert ctx.hits == []
        st = det.status()
        assert st["no_limit"] == 1 and "swp1 queue 3" in st["note"] and "not guessed" in st["note"]
        return
    assert [ts for ts, _, _ in ctx.hits] == [2, 3, 4, 7]
    assert [peak for _, peak, _ in ctx.hits] == [8_000_000, 9_000_000, 9_000_000, 8_000_000]
    assert "80 % of its" in ctx.hits[0][2]
    assert "no_limit" not in det.status()


def test_bytes_thresholds_ignore_limits_and_keep_their_words():
    det, ctx = _detector(1000, 500)
    det.sample("swp1", 1, 1, {(PEAK, "0"): 1000, (LIMIT, "0"): 10**9}, frozenset({PEAK, LIMIT}))
    assert len(ctx.hits) == 1 and "(high 1000 B)" in ctx.hits[0][2]
    assert det.status() is None


def test_a_limit_classifies_as_a_level():
    q = Container(SWTEL_ORIGIN, qos_interface_path("swp1") + "/output/queues/queue[name=3]/state")
    assert classify.classify(CounterSpec(q, "limit", 64, GAUGE, "swp1")) == ("swp1", LIMIT, "3")
    assert classify.classify(CounterSpec(q, "limit", 64, 0, "swp1")) is None


@pytest.mark.parametrize(("yaml", "message"), [
    ("insights: {congestion: {high: '80%', low: 1000}}", "insights.congestion.low: must be of the kind"),
    ("insights: {congestion: {high: '80%', low: '90%'}}", "insights.congestion.low: must be below"),
    ("insights: {congestion: {high: '120%', low: '50%'}}", "insights.congestion.high: a share must be"),
    ("insights: {congestion: {high: '0%', low: '0%'}}", "insights.congestion.high: a share must be"),
    ("insights: {congestion: {high: 'lots'}}", "insights.congestion.high: expected bytes"),
    ("insights: {congestion: {high: [1]}}", "insights.congestion.high: expected bytes"),
])
def test_config_refuses_shares_that_cannot_work(yaml, message):
    with pytest.raises(config.ConfigError) as err:
        config.parse(yaml)
    assert message in str(err.value)


def test_config_takes_shares():
    cfg = config.parse("insights: {congestion: {high: '80%', low: '50%'}}")
    assert (cfg.insights.congestion.high, cfg.insights.congestion.low) == ("80%", "50%")


# ---------------------------------------------------------------- sources.asic.buffers

T0 = 1_700_000_000_000_000_000


def _source(model: sim_model.Model, buffers: bool) -> AsicSource:
    """The asic source's table and buffers built from the simulated switch's layout."""
    cfg = config.parse(f"sources:\n  asic:\n    enabled: true\n    buffers: {str(buffers).lower()}\n")
    src = AsicSource(cfg)
    _gen, ports, counters = model.layout(0)
    src._build(ports, [sim_model.descriptors(descs) for descs in counters])
    return src


def _read(src: AsicSource, model: sim_model.Model, t: int) -> None:
    """What read() does with the plugin's values at ``t``: into the whole buffer, then kept."""
    raw = array("Q", model.values(t, None))
    if src._raw is None:
        src.values[:] = raw
    else:
        src._raw[:] = raw
        _backend.reader.gather(src._raw, src._keep, src.values)


def test_buffers_off_keeps_every_other_value_exactly_and_no_buffer_level():
    model = sim_model.Model(f"start={T0} ports=4 scenario=incast@1s-9s:swp2/3")
    on, off = _source(model, True), _source(model, False)
    assert on._raw is None and off._raw is not None and len(off._raw) == len(on.table)
    kept = [s for s in on.table.specs if not (s.kind == GAUGE and s.leaf in BUFFER_LEAVES)]
    assert off.table.specs == kept  # the same specs, in the same order, the buffer levels gone
    gone = len(on.table) - len(off.table)
    assert gone and gone % len(on.ports) == 0 and gone // len(on.ports) >= 3 * 8  # per TC and PG at least
    for t in (0, 3 * NS + 7, 5 * NS):
        _read(on, model, t)
        _read(off, model, t)
        by_spec = dict(zip(on.table.specs, on.values, strict=True))
        assert [by_spec[s] for s in off.table.specs] == list(off.values)
        assert any(off.values) or t == 0


def test_gather_refuses_what_it_cannot_do():
    for fn in {_backend.reader.gather, _fallback.gather}:
        dst = array("Q", bytes(16))
        fn(array("Q", [5, 6, 7]), array("I", [2, 0]), dst)
        assert list(dst) == [7, 5]
        with pytest.raises(ValueError):
            fn(array("Q", [5]), array("I", [1]), dst)
        with pytest.raises(ValueError):
            fn(array("Q", [5, 6, 7]), array("I", [0, 1, 2]), dst)


def _run(src: AsicSource, model: sim_model.Model, passes: int = 4) -> InsightsPipeline:
    t = src.table
    n = len(t)
    prev, acc, known = array("Q", bytes(8 * n)), array("Q", bytes(8 * n)), bytearray(n)
    oi, od, of = array("I", bytes(4 * n)), array("q", bytes(8 * n)), bytearray(n)
    runner = InsightsPipeline(Insights())
    for k in range(passes):
        _read(src, model, k * NS // 10)
        m = _backend.reader.diff(src.values, prev, acc, known, t.widths, t.kinds, oi, od, of)
        ts = T0 + k * NS // 10
        runner.on_batch(Batch("asic", ts, t, oi[:m].tolist(), src.values, od[:m].tolist(), bytes(of[:m])))
        runner.end_pass(ts)
    return runner


@pytest.mark.parametrize("buffers", [True, False])
def test_congestion_says_it_has_no_data_when_buffers_are_off(buffers):
    model = sim_model.Model(f"start={T0} ports=4")
    st = _run(_source(model, buffers), model).status()
    note = st.get("detectors", {}).get("congestion")
    text = render({"events": st}, [])  # what `swtel status` prints
    if buffers:
        assert note is None and "insights.congestion" not in text
    else:
        assert note["data"] is False and "sources.asic.buffers" in note["note"]
        assert f"insights.congestion: {note['note']}" in text


def test_no_note_before_any_port_is_reported():
    runner = InsightsPipeline(Insights())
    runner.on_batch(Batch("x", 1, CounterTable("x", []), [], array("Q"), [], b""))
    assert "detectors" not in runner.status()


def test_buffers_off_through_the_plugin_helper():
    """The real read path: the plugin in its helper process fills every slot, the source keeps
    the others, and the values kept are the plugin's (counters move, no buffer leaf left)."""
    import time

    from agent import asic

    if asic.builtin_path("sim") is None:
        pytest.skip("the sim plugin is not built")
    cfg = config.parse("sources:\n  asic:\n    enabled: true\n    buffers: false\n    config: ports=4\n")
    src = AsicSource(cfg)
    try:
        deadline = time.monotonic() + 30
        while (src._handle is None or src._stale) and time.monotonic() < deadline:
            src.setup(None)
            time.sleep(0.05)
        got = src.read()
        while got == NO_DATA and time.monotonic() < deadline:  # a read still running in the helper
            got = src.read()
        assert got == 4
        assert len(src._raw) > len(src.values) == len(src.table)
        assert not {s.leaf for s in src.table.specs} & BUFFER_LEAVES
        octets = [i for i, s in enumerate(src.table.specs) if s.leaf == "in-octets"]
        assert octets and all(src.values[i] for i in octets)
    finally:
        src.close()
