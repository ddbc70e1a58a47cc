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
from agent.insights.feeds import FeedBook
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
@pytest.mark.parametrize("hashed", [False, True])
def test_the_backend_and_the_twin_agree_with_the_reference_on_random_batches(seed, hashed):
    """With and without the keys' hashes (the feed book gives them: C then hashes no key)."""
    rng = random.Random(seed)
    table = _table(rng.randrange(1, 9))
    lay = classify.layout(table)
    hashes = (array("q", (hash(k) if k is not None else 0 for k in lay.keys)),) if hashed else ()
    backends = [_fallback.feed_add] + ([_backend.reader.feed_add] if _backend.NAME == "C" else [])
    states = [[{} for _ in lay.ports] for _ in range(len(backends) + 1)]
    for _ in range(6):  # several batches into the same accumulations (two reads before a pass)
        indices, deltas, flags, values = _random_batch(rng, len(table))
        want = _reference(indices, deltas, flags, values, lay, states[0])
        for fn, accs in zip(backends, states[1:], strict=True):
            got = fn(indices, deltas, flags, values, lay.slot_of, lay.keys, lay.levels, lay.bits, accs, *hashes)
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
    with pytest.raises(ValueError):  # fewer hashes than counters
        f([0], [1], b"\x01", values, lay.slot_of, lay.keys, lay.levels, lay.bits, [{}], array("q", bytes(8)))


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
