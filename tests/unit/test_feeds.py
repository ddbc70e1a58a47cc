"""The feeds' per-change loop (``feed_add``: agent/_ext/feeds.c and its twin
agent/_fallback/feeds.py): the same random batches through both give the same
accumulations, touched and discarded slots, including wraps, resets, jumps and new
counters; and through the feed book, the same samples as the loop it replaced."""

from __future__ import annotations

import random
from array import array

import pytest

from agent import _backend, _fallback
from agent.counters import (
    F_CHANGED,
    F_JUMP,
    F_NEW,
    F_RESET,
    F_WRAP,
    GAUGE,
    Batch,
    Container,
    CounterSpec,
    CounterTable,
)
from agent.insights import classify
from agent.insights.feeds import FeedBook, merged
from agent.pathgrammar import interface_path, qos_interface_path

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

FLAGS = (F_CHANGED, F_CHANGED, F_CHANGED, F_CHANGED | F_WRAP, F_CHANGED | F_RESET,
         F_CHANGED | F_RESET | F_JUMP, F_CHANGED | F_NEW)


def _table(ports: int) -> CounterTable:
    """Per port: counters the detectors read (some sharing a key: the queues' drops), levels,
    and counters no detector reads."""
    specs = []
    for n in range(ports):
        p = f"swp{n + 1}"
        hw = Container("openconfig", interface_path(p) + "/hw/state/counters")
        specs += [CounterSpec(hw, "in-octets", port=p), CounterSpec(hw, "in-errors", port=p),
                  CounterSpec(hw, "in-ucast-pkts", port=p)]  # (read by no detector)
        for q in range(3):
            c = Container("swtel", qos_interface_path(p) + f"/output/queues/queue[name={q}]/state")
            specs += [CounterSpec(c, "dropped-pkts", port=p), CounterSpec(c, "peak-occupancy", 64, GAUGE, p),
                      CounterSpec(c, "ecn-marked-pkts", port=p), CounterSpec(c, "limit", 64, GAUGE, p)]
    return CounterTable("asic", specs)


def _reference(indices, deltas, flags, values, lay, accs):
    """The loop feed_add replaced (agent/insights/feeds.py before it), written out plainly."""
    touched, discarded, top, mask = [], [], {}, {}
    for k, i in enumerate(indices):
        hit = lay.slots[i]
        if hit is None:
            continue
        slot, key = hit
        if slot not in touched:
            touched.append(slot)
        if key[0] in classify.LEVELS:
            accs[slot][key] = values[i]
            mask[slot] = mask.get(slot, 0) | classify.BITS[key[0]]
            if key[0] in (classify.QUEUE_PEAK, classify.QUEUE_LEVEL):
                top[slot] = max(top.get(slot, 0), values[i])
            continue
        if flags[k] & (F_NEW | F_RESET):
            if slot not in discarded:
                discarded.append(slot)
            continue
        if deltas[k]:
            accs[slot][key] = accs[slot].get(key, 0) + deltas[k]
            mask[slot] = mask.get(slot, 0) | classify.BITS[key[0]]
    return touched, discarded, [top.get(slot, 0) for slot in touched], [mask.get(slot, 0) for slot in touched]


def _random_batch(rng: random.Random, n: int) -> tuple[list[int], list[int], bytes, array]:
    indices = sorted(rng.sample(range(n), rng.randrange(0, n + 1)))
    deltas = [rng.choice((0, 1, rng.randrange(1 << 20), rng.randrange(1 << 62), -rng.randrange(1 << 30)))
              for _ in indices]
    flags = bytes(rng.choice(FLAGS) for _ in indices)
    values = array("Q", (rng.choice((0, rng.randrange(1 << 24), (1 << 64) - 1 - rng.randrange(9)))
                        for _ in range(n)))
    return indices, deltas, flags, values


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("form", ["lists", "arrays"])
def test_the_backend_and_the_twin_agree_with_the_reference_on_random_batches(seed, form):
    """The indices and deltas as lists, or as the engine hands them over (array('I'),
    array('q'): C reads them in place and adds an i64 delta without making an int of it)."""
    rng = random.Random(seed)
    table = _table(rng.randrange(1, 9))
    lay = classify.layout(table)
    backends = [_fallback.feed_add] + ([_backend.reader.feed_add] if _backend.NAME == "C" else [])
    states = [[{} for _ in lay.ports] for _ in range(len(backends) + 1)]
    for _ in range(6):  # several batches into the same accumulations (two reads before a pass)
        indices, deltas, flags, values = _random_batch(rng, len(table))
        want = _reference(indices, deltas, flags, values, lay, states[0])
        given = (array("I", indices), array("q", deltas)) if form == "arrays" else (indices, deltas)
        for fn, accs in zip(backends, states[1:], strict=True):
            got = fn(*given, flags, values, lay.slot_of, lay.keys, lay.levels, lay.bits, accs)
            assert tuple(list(x) for x in got) == want
            assert accs == states[0]
    assert any(states[0])  # the batches did reach the accumulations


@pytest.mark.parametrize("fn", ["fallback", "backend"])
def test_bad_input_is_refused_not_read_past(fn):
    f = _fallback.feed_add if fn == "fallback" else _backend.reader.feed_add
    lay = classify.layout(_table(1))
    n = len(lay.slot_of)
    values = array("Q", bytes(8 * n))
    with pytest.raises(IndexError):
        f([n], [1], b"\x01", values, lay.slot_of, lay.keys, lay.levels, lay.bits, [{}])
    with pytest.raises(ValueError):
        f([0, 1], [1], b"\x01\x01", values, lay.slot_of, lay.keys, lay.levels, lay.bits, [{}])
    with pytest.raises(ValueError):
        f([0], [1], b"\x01", array("Q", bytes(8)), lay.slot_of, lay.keys, lay.levels, lay.bits, [{}])
    with pytest.raises(IndexError):  # a slot beyond the accumulations given
        f([0], [1], b"\x01", values, lay.slot_of, lay.keys, lay.levels, lay.bits, [])
    with pytest.raises(ValueError):  # rows without their columns
        f([0], [1], b"\x01", values, lay.slot_of, lay.keys, lay.levels, lay.bits, [{}], None, array("q", bytes(8)), 1)


def test_the_feed_book_marks_feeds_and_discards_as_before():
    """Through FeedBook.add: every port touched becomes pending once, in the order of its
    first change; a NEW or RESET counter discards the feed's sample; a later batch of the
    same pass moves the sample's time on."""
    table = _table(3)
    lay = classify.layout(table)
    book = FeedBook()
    values = array("Q", range(len(table)))
    first = [i for i, s in enumerate(lay.slots) if s is not None and s[0] == 2][:2] + \
        [i for i, s in enumerate(lay.slots) if s is not None and s[0] == 0][:1]
    book.add(Batch("asic", 100, table, first, values, [5, 0, 7], bytes([F_CHANGED, F_CHANGED | F_RESET, F_CHANGED])))
    assert [f.port for f in book.dirty] == ["swp3", "swp1"]
    feeds = {f.port: f for f in book.dirty}
    assert feeds["swp3"].discard and not feeds["swp1"].discard
    assert feeds["swp1"].acc == {lay.slots[first[2]][1]: 7} and feeds["swp1"].ts == 100
    book.add(Batch("asic", 200, table, first[2:], values, [3], bytes([F_CHANGED])))
    assert feeds["swp1"].acc == {lay.slots[first[2]][1]: 10} and feeds["swp1"].ts == 200
    assert len(book.dirty) == 2


def _fec_table(ports: int, rng: random.Random) -> CounterTable:
    """Per port: its RS-FEC histogram's bins, some lanes' (lane numbers with gaps), a bin past
    15 and a lane written "01" (neither in the row: they stay in the dict), and an octet counter."""
    specs = []
    for n in range(ports):
        p = f"swp{n + 1}"
        phy = interface_path(p) + "/phy"
        specs.append(CounterSpec(Container("openconfig", interface_path(p) + "/hw/state/counters"), "in-octets",
                                 port=p))
        for lane in ["", *map(str, sorted(rng.sample(range(8), rng.randrange(5)))), "01"]:
            where = phy + (f"/channels/channel[id={lane}]" if lane else "")
            for b in range(17):
                specs.append(CounterSpec(Container("swtel", where + f"/histograms/state/rs-num-corr-err"
                                                             f"[upper-boundary={b}]"), "count", port=p))
    return CounterTable("asic", specs)


@pytest.mark.parametrize("seed", range(20))
def test_fec_bins_go_to_the_rows_and_read_back_as_the_dict_held_them(seed):
    """feed_add with rows (classify.Layout.vcols): C and the twin write the same rows, dicts and
    masks, and each slot's dict and row merged (feeds.merged) hold what the reference's dict
    holds (a bin whose deltas sum to 0 aside: no feed delta is negative); a delta past int64, or
    a sum leaving it, or one not an int, goes to the dict and marks the slot SPILL."""
    rng = random.Random(seed)
    table = _fec_table(rng.randrange(1, 6), rng)
    lay = classify.layout(table)
    assert lay.vwidth and any(c < 0 for c, s in zip(lay.vcols, lay.slots, strict=True) if s is not None
                              and s[1][0] == classify.FEC_BIN)  # bins past 15 and lane "01" stay out
    backends = [_fallback.feed_add] + ([_backend.reader.feed_add] if _backend.NAME == "C" else [])
    ref: list[dict] = [{} for _ in lay.ports]
    states = [([{} for _ in lay.ports], array("q", bytes(8 * lay.vwidth * len(lay.ports)))) for _ in backends]
    spilled = set()
    for _ in range(5):
        indices, deltas, flags, values = _random_batch(rng, len(table))
        deltas = [rng.choice((d, 2**63 + 5, 2**62 + rng.randrange(2**62), True)) if rng.random() < 0.05 else d
                  for d in deltas]
        into_row = [k for k, i in enumerate(indices) if lay.vcols[i] >= 0 and not flags[k] & (F_NEW | F_RESET)]
        if into_row:  # one past int64 in every batch
            deltas[rng.choice(into_row)] = 2**63 + 5
        want = _reference(indices, deltas, flags, values, lay, ref)
        got = []
        for fn, (accs, rows) in zip(backends, states, strict=True):
            out = fn(indices, deltas, flags, values, lay.slot_of, lay.keys, lay.levels, lay.bits, accs,
                     lay.vcols, rows, lay.vwidth, classify.SPILL)
            assert [list(x) for x in out[:3]] == [list(x) for x in want[:3]]
            assert [m & ~classify.SPILL for m in out[3]] == want[3]
            spilled |= {slot for slot, m in zip(out[0], out[3], strict=True) if m & classify.SPILL}
            got.append((out, accs, array("q", rows)))
        assert all(g == got[0] for g in got)  # C and the twin: the same, word for word
    accs, rows = states[0]
    for slot in range(len(lay.ports)):
        row = (rows, slot * lay.vwidth, lay.vkeys[slot])
        want_acc = {k: v for k, v in ref[slot].items() if v or k[0] != classify.FEC_BIN or lay.vcols[
            lay.keys.index(k)] < 0}
        assert merged(accs[slot], row) == want_acc, slot
        in_dict = {k for k in accs[slot] if k[0] == classify.FEC_BIN and lay.vcols[lay.keys.index(k)] >= 0}
        assert not in_dict or slot in spilled  # a row's bin in the dict only where the slot was told
    assert spilled and any(any(r) for r in [states[0][1]])  # both ways were taken


@pytest.mark.parametrize("seed", range(10))
def test_array_deltas_whose_sums_leave_int64_spill_as_list_ones_do(seed):
    """i64 deltas (the engine's arrays) near the edges of int64, into rows and into dicts: C
    reading the arrays in place gives what it and the twin give from lists (a sum past int64
    goes to the dict, as a Python int, and marks the slot SPILL)."""
    rng = random.Random(seed)
    table = _fec_table(rng.randrange(1, 4), rng)
    lay = classify.layout(table)
    backends = [_fallback.feed_add] + ([_backend.reader.feed_add] if _backend.NAME == "C" else [])
    edge = (2**63 - 1, 2**62 + 7, -(2**63), -(2**62) - 3, 1)
    results = {}
    for form in ("lists", "arrays"):
        for fn in backends:
            accs, rows = [{} for _ in lay.ports], array("q", bytes(8 * lay.vwidth * len(lay.ports)))
            r = random.Random(seed)
            outs = []
            for _ in range(4):
                indices = sorted(r.sample(range(len(table)), r.randrange(1, len(table) + 1)))
                deltas = [r.choice(edge) for _ in indices]
                flags = bytes(F_CHANGED for _ in indices)
                values = array("Q", bytes(8 * len(table)))
                if form == "arrays":
                    indices, deltas = array("I", indices), array("q", deltas)
                outs.append(fn(indices, deltas, flags, values, lay.slot_of, lay.keys, lay.levels, lay.bits, accs,
                               lay.vcols, rows, lay.vwidth, classify.SPILL))
            results[(form, fn.__module__)] = (outs, accs, list(rows))
    first = next(iter(results.values()))
    assert all(v == first for v in results.values())
    outs, accs, _rows = first
    assert any(m & classify.SPILL for out in outs for m in out[3])  # sums did leave int64
    assert any(abs(v) >= 2**63 for acc in accs for v in acc.values())  # ... and were kept exact


def test_a_table_rebuilt_before_the_pass_keeps_the_rows_deltas():
    """The source's table changes between two reads of one pass (a port came): what the old
    rows held goes to the feeds' dicts (SPILL), so the pass's sample still has every delta; the
    flush then zeroes the rows."""
    rng = random.Random(1)
    table = _fec_table(2, rng)
    lay = classify.layout(table)
    book = FeedBook()
    bins = [i for i, s in enumerate(lay.slots) if s is not None and s[1][0] == classify.FEC_BIN and
            lay.vcols[i] >= 0 and s[0] == 0][:3]
    values = array("Q", bytes(8 * len(table)))
    book.add(Batch("asic", 100, table, bins, values, [4, 5, 6], bytes([F_CHANGED] * 3)))
    feed = book.dirty[0]
    assert feed.acc == {} and sorted(v for v in book.sources["asic"].rows if v) == [4, 5, 6]
    bigger = CounterTable("asic", list(table.specs) + list(_fec_table(3, random.Random(1)).specs[-18:]))
    again = bins  # (the old specs keep their places: the new port's come after them)
    book.add(Batch("asic", 200, bigger, again, array("Q", bytes(8 * len(bigger))), [1, 1, 1],
                   bytes([F_CHANGED] * 3)))
    assert book.dirty == [feed] and feed.changed & classify.SPILL
    keys = [lay.keys[i] for i in bins]
    assert merged(feed.acc, feed.row) == dict(zip(keys, [5, 6, 7], strict=True))
    feed.prev_ts = 50
    book.flush()
    assert not any(book.sources["asic"].rows) and feed.acc == {}


def test_a_layouts_keys_are_one_object_per_semantic_and_sub():
    """Equal keys of different ports are the same tuple (the per-change loop's dict updates
    touch a few hot keys, not one object per counter), and still equal what classify says."""
    table = _table(4)
    lay = classify.layout(table)
    by_value: dict = {}
    for spec, key in zip(table.specs, lay.keys, strict=True):
        hit = classify.classify(spec)
        assert (hit is None and key is None) or key == hit[1:]
        if key is not None:
            assert by_value.setdefault(key, key) is key
    assert len(by_value) < sum(k is not None for k in lay.keys)  # (four ports share their keys)


def test_feeds_share_their_detector_tuples_and_forget_them_when_detectors_are_rebuilt():
    """The flush splits each feed's detectors into tuples taken from FeedBook.shared: the feeds
    of one source hold the same objects (read each pass, in cache). A reload that builds a
    detector again empties it: no tuple keeps an old detector."""
    from agent.config import Insights
    from agent.insights import InsightsPipeline

    class Quiet:
        def __getattr__(self, name):
            return lambda *a, **k: None

    table = _table(3)
    runner = InsightsPipeline(Insights(), log=Quiet())
    values = array("Q", bytes(8 * len(table)))
    every = list(range(len(table)))
    for n in range(3):
        for i in every:
            values[i] += 1000 * (n + 1)
        runner.on_batch(Batch("asic", (n + 1) * 10**8, table, every, values, [1000] * len(every),
                              bytes([F_NEW if n == 0 else F_CHANGED]) * len(every)))
        runner.end_pass((n + 1) * 10**8)
    feeds = [f for p in runner._ports.values() for f in p.feeds]
    assert len(feeds) == 3 and feeds[0].kernels and all(f.kernels is feeds[0].kernels for f in feeds)
    assert all(f.plain is feeds[0].plain and f.gated is feeds[0].gated for f in feeds)
    before = feeds[0].kernels
    cfg = Insights()
    cfg.throughput_dip.dip_ratio = 0.5  # (a changed section: built again)
    runner.reconfigure(cfg)
    assert not runner._feeds.shared
    for n in range(3, 5):
        for i in every:
            values[i] += 1000
        runner.on_batch(Batch("asic", (n + 1) * 10**8, table, every, values, [1000] * len(every),
                              bytes([F_CHANGED]) * len(every)))
        runner.end_pass((n + 1) * 10**8)
    live = set(map(id, runner.detectors.values()))
    assert all(id(d) in live for t in runner._feeds.shared for d in t)
    assert feeds[0].kernels is not before and all(f.kernels is feeds[0].kernels for f in feeds)


class _Det:
    """A detector as flush_first reads one: its batch (None: no kernel), semantics, gate, ports."""

    def __init__(self, name: str, kernel: bool, sem_bits: int, level_gate: int | None, ports: set[str]) -> None:
        self.name, self.sem_bits, self.level_gate, self.ports = name, sem_bits, level_gate, ports
        self.batch: list | None = [] if kernel else None


def _random_pass(rng: random.Random) -> tuple[list, list]:
    """Feeds in every state the first loop tells apart (dead, discarded, first sample, time gone
    back, a first interval, lists an election changed, gated ports above and below the gate, two
    feeds of one port), and the detectors they hold."""
    from agent.insights.feeds import Feed

    dets = [_Det(f"d{k}", rng.random() < 0.5, 1 << rng.randrange(5), rng.choice((None, 100, 1000)),
                 {f"p{rng.randrange(6)}"}) for k in range(6)]
    feeds = []
    for n in range(rng.randrange(1, 30)):
        f = Feed("asic", f"p{rng.randrange(6)}", frozenset())
        f.pending = True
        f.ts = rng.choice((0, 5, 100, 200, 300 + n))
        f.prev_ts = rng.choice((0, 50, 100, 250))
        f.top = rng.choice((0, 50, 100, 999, 1000, 5000))
        f.changed = rng.randrange(1 << 6) | (1 << 70 if rng.random() < 0.2 else 0)  # (past int64: Python's &)
        f.dead = rng.random() < 0.1
        f.discard = rng.random() < 0.1
        f.acc = {("rx-octets", ""): n}
        f.owned = frozenset({"rx-octets"})
        f.interval = rng.choice((None, 100.0, 12345.5, 7))  # (an int: Python's arithmetic)
        f.dispatch = rng.sample(dets, rng.randrange(4))
        f.lazy = rng.sample(dets, rng.randrange(3))
        if rng.random() < 0.7:  # split already: a later election gives new lists only now and then
            _split_for_test(f)
        f.row = None if rng.random() < 0.5 else ("rows", n, ())
        feeds.append(f)
    return feeds, dets


def _split_for_test(feed) -> None:
    from agent.insights.feeds import _split

    _split(feed, {})


def _flushed(backend, seed: int) -> dict:
    from agent.insights.feeds import _split

    feeds, dets = _random_pass(random.Random(seed))
    live, kernels, visit, called, elect = [], [], [], set(), set()
    shared: dict = {}
    backend.flush_first(list(feeds), live, kernels, visit, called, elect, _split, shared)
    where = {id(f): k for k, f in enumerate(feeds)}
    slots = ("pending", "top", "changed", "ts", "prev_ts", "discard", "interval", "acc")
    before = [dict(f.acc) for f in feeds]
    backend.flush_clear(live)  # (the flush's end: the live feeds' accumulations emptied, no other)
    assert [f.acc for f in feeds] == [{} if any(e[0] is f for e in live) else a
                                      for f, a in zip(feeds, before, strict=True)]
    return {
        "live": [(where[id(f)], dt, top, ch) for f, dt, top, ch in live],
        "kernels": [d.name for d in kernels], "visit": visit, "called": called, "elect": elect,
        "feeds": [tuple(repr(getattr(f, s)) for s in slots) + (f.split_of is f.dispatch,) for f in feeds],
        "before": before,
        "batches": {d.name: [(s[0], s[1], s[2], where[id(next(f for f in feeds if f.acc is s[3]))], s[5], s[6],
                              s[7]) for s in d.batch] for d in dets if d.batch is not None},
    }


@pytest.mark.parametrize("seed", range(60))
def test_flush_first_in_c_and_the_twin_end_a_pass_alike(seed):
    """The flush's first loop, C against its Python twin (the loop it replaced), on random feeds:
    the same live samples, kernel batches, visits, elections, and feeds' state after."""
    twin = _flushed(_fallback, seed)
    if _backend.NAME == "C":
        assert _flushed(_backend.reader, seed) == twin


@pytest.mark.parametrize("backend", ["fallback", "backend"])
def test_flush_first_refuses_feeds_it_cannot_read(backend):
    from agent.insights.feeds import Feed, _split

    b = _fallback if backend == "fallback" else _backend.reader
    f = Feed("asic", "p1", frozenset())
    del f.top  # a slot never set: AttributeError, as Python's attribute access says
    f.ts, f.prev_ts = 200, 100
    with pytest.raises(AttributeError):
        b.flush_first([f], [], [], [], set(), set(), _split, {})

    class Loose:  # not the extension's Feed type (C reads only its own struct)
        pass

    loose = Loose()
    for name in ("pending", "top", "changed", "ts", "prev_ts", "dead", "discard"):
        setattr(loose, name, 0)
    if backend == "backend" and _backend.NAME == "C":
        with pytest.raises((TypeError, AttributeError)):
            b.flush_first([loose], [], [], [], set(), set(), _split, {})


_FEED_FIELDS = ("source", "port", "sems", "ts", "prev_ts", "acc", "discard", "pending", "interval", "owned",
                "dispatch", "lazy", "dead", "top", "changed", "kernels", "plain", "split_of", "lazy_bits", "lazy_of",
                "lazy_kernels", "row", "always", "gated", "lazy_plain_bits")


def test_the_feed_types_of_both_backends_hold_the_same_fields():
    """The Feed the extension defines (a C struct) and the twin's class: the same fields, the
    same values when made, each writable and deletable (then read as AttributeError), fresh
    containers per feed, and nothing else settable (a typo is an error, not a new attribute)."""
    from agent._fallback.feeds import Feed as Twin

    kinds = [Twin] + ([_backend.reader.Feed] if _backend.NAME == "C" else [])
    assert set(Twin.__slots__) == set(_FEED_FIELDS)
    made = []
    for kind in kinds:
        a, b = kind("asic", "swp1", frozenset({"rx-octets"})), kind(source="s", port="p", sems=frozenset())
        assert a.acc is not b.acc and a.dispatch is not b.dispatch and a.lazy is not b.lazy
        made.append({name: getattr(a, name) for name in _FEED_FIELDS})
        for name in _FEED_FIELDS:
            setattr(b, name, 7)
            assert getattr(b, name) == 7
            delattr(b, name)
            with pytest.raises(AttributeError):
                getattr(b, name)
        with pytest.raises(AttributeError):
            a.not_a_field = 1
        with pytest.raises(TypeError):
            kind("asic", "swp1")
    assert all(m == made[0] for m in made)
    assert made[0]["sems"] == frozenset({"rx-octets"}) and made[0]["interval"] is None and made[0]["top"] == 0


def test_the_random_passes_reach_every_outcome():
    """(What the agreement test above compares is not empty: live samples, kernel batches,
    visits of both kinds, first intervals, feeds left out.)"""
    runs = [_flushed(_fallback, seed) for seed in range(60)]
    assert all(any(r[k] for r in runs) for k in ("live", "kernels", "visit", "called", "elect"))
    assert any(any(b for b in r["batches"].values()) for r in runs)
    assert any(len(r["live"]) < len(r["feeds"]) for r in runs)


@pytest.mark.parametrize("seed", range(30))
def test_feed_mark_in_c_and_the_twin_agree(seed):
    """What feed_add found, put onto the feeds by C and by the twin (the loop it replaced):
    the same tops (higher only), semantics ORed, pending feeds and their times, dirty order,
    discards, over two batches of one pass (the second's time later, equal or earlier)."""
    from agent.insights.feeds import Feed

    def run(backend) -> list:
        rng = random.Random(seed)
        feeds = []
        for n in range(rng.randrange(1, 12)):
            f = Feed("asic", f"p{n}", frozenset())
            f.top, f.changed = rng.choice((0, 10, 1 << 70)), rng.randrange(8)
            f.pending = rng.random() < 0.3
            f.ts = rng.choice((0, 100, 300))
            feeds.append(f)
        dirty: list = []
        for ts in (200, rng.choice((100, 200, 300))):
            touched = rng.sample(range(len(feeds)), rng.randrange(len(feeds) + 1))
            tops = [rng.choice((0, 5, 10, 50, 1 << 71)) for _ in touched]
            masks = [rng.randrange(1 << 4) | (1 << 65 if rng.random() < 0.1 else 0) for _ in touched]
            discarded = rng.sample(touched, rng.randrange(len(touched) + 1))
            backend.feed_mark(feeds, touched, tops, masks, discarded, ts, dirty)
        return [[(f.top, f.changed, f.pending, f.ts, f.discard) for f in feeds], [feeds.index(f) for f in dirty]]

    twin = run(_fallback)
    assert twin[1] or seed % 5  # (feeds became pending)
    if _backend.NAME == "C":
        assert run(_backend.reader) == twin
        with pytest.raises(IndexError):
            _backend.reader.feed_mark([], [0], [0], [0], [], 1, [])
        with pytest.raises(ValueError):
            _backend.reader.feed_mark([], [0], [], [0], [], 1, [])
