"""jsonl: the C formatter and its pure-Python twin write, byte for byte, what json.dumps of
the exporter's dict always wrote (the format the docs and scripts rely on); the exporter
writes one engine pass with one write, and every line of it."""

from __future__ import annotations

import json
import os
import time
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import _fallback, _swtel
from agent.counters import (
    F_JUMP,
    F_NEW,
    F_RESET,
    F_WRAP,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Batch,
    Container,
    CounterSpec,
    CounterTable,
    StateUpdate,
)
from agent.exporters import jsonl
from agent.exporters.jsonl import JsonlExporter

BACKENDS = {"C": _swtel, "python": _fallback}
U64 = 2**64 - 1


def reference(item: Any) -> bytes:
    """The exporter's lines as it built them before the formatter existed: json.dumps of a dict."""
    lines = []
    if isinstance(item, Batch):
        for _spec, path, value, delta, flags in item.items():
            rec: dict[str, Any] = {"ts": item.ts_ns, "path": path, "value": value, "delta": delta}
            for flag, key in ((F_NEW, "new"), (F_WRAP, "wrap"), (F_RESET, "reset"), (F_JUMP, "jump")):
                if flags & flag:
                    rec[key] = True
            lines.append(json.dumps(rec))
    elif isinstance(item, list):
        lines = [json.dumps({"ts": u.ts_ns, "path": u.path, "value": u.value}) for u in item]
    else:
        ts_ns, containers = item
        lines = [json.dumps({"ts": ts_ns, "path": c.full(""), "delete": True}) for c in containers]
    return "".join(line + "\n" for line in lines).encode("ascii")


def _table(names: list[str]) -> CounterTable:
    specs = []
    for n, name in enumerate(names):
        origin = OPENCONFIG if n % 2 else SWTEL_ORIGIN
        specs.append(CounterSpec(Container(origin, f"/interfaces/interface[name={name}]/state/counters"),
                                 f"leaf-{n}"))
    return CounterTable("t", specs)


def _text_characters() -> st.SearchStrategy[str]:
    """Any character but a lone surrogate (those come from the sampled ones below). Debian 12's
    hypothesis (6.36) names the exclusion blacklist_categories; current ones exclude_categories."""
    try:
        return st.characters(exclude_categories=["Cs"])
    except TypeError:
        return st.characters(blacklist_categories=("Cs",))


_names = st.text(_text_characters() | st.sampled_from(["\udcff", "\"", "\\"]), min_size=1, max_size=8)


@st.composite
def _batches(draw) -> Batch:
    names = draw(st.lists(_names, min_size=1, max_size=12))
    table = _table(names)
    values = array("Q", draw(st.lists(st.integers(0, U64), min_size=len(names), max_size=len(names))))
    idx = draw(st.lists(st.integers(0, len(names) - 1), max_size=20))
    deltas = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=len(idx), max_size=len(idx)))
    flags = bytes(draw(st.lists(st.integers(0, 255), min_size=len(idx), max_size=len(idx))))
    typed = draw(st.booleans())  # the engine's arrays, or plain lists (announcements, tests)
    return Batch("t", draw(st.integers(0, 2**63 - 1)), table, array("I", idx) if typed else idx, values,
                 array("q", deltas) if typed else deltas, flags)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=300, deadline=None)
@given(batch=_batches())
def test_formatter_writes_what_json_dumps_wrote(backend, batch):
    got = BACKENDS[backend].jsonl_lines(batch.ts_ns, batch.indices, batch.values, batch.deltas, batch.flags,
                                        jsonl.json_paths(batch.table))
    assert got == reference(batch)
    for line in got.splitlines():
        json.loads(line)  # each line is JSON on its own


@pytest.mark.parametrize("backend", BACKENDS)
def test_formatter_refuses_bad_arguments(backend):
    f = BACKENDS[backend].jsonl_lines
    paths = [b'"/a"', b'"/b"']
    values = array("Q", [1, 2])
    assert f(1, [], values, [], b"", paths) == b""
    with pytest.raises(IndexError):
        f(1, [2], values, [0], b"\0", paths)
    with pytest.raises(ValueError):
        f(1, [0, 1], values, [0], b"\0\0", paths)
    with pytest.raises(TypeError):
        f(1, [0], values, [0], b"\0", ["/a"])


def test_states_and_deletes_keep_their_lines():
    c = Container(SWTEL_ORIGIN, "/insights/port[name=\udcff]/state")
    states = [StateUpdate(5, c, "level", v) for v in (1, 2.5, "UP", True, None, float("nan"))]
    deletes = (7, [c, Container(OPENCONFIG, "/interfaces/interface[name=x]")])
    assert JsonlExporter.format([states, deletes]) == reference(states) + reference(deletes)


class _Writes:
    """os.write, counted for one file descriptor."""

    def __init__(self, monkeypatch, fd: int) -> None:
        self.fd, self.calls, real = fd, 0, os.write

        def write(f: int, data: Any) -> int:
            if f == self.fd:
                self.calls += 1
            return real(f, data)

        monkeypatch.setattr(os, "write", write)


def _wait(cond, what: str) -> None:
    deadline = time.monotonic() + 5
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_one_write_per_pass_with_every_line(tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"
    exp = JsonlExporter(str(out))
    exp.start(None)
    writes = _Writes(monkeypatch, exp._fd)
    table = _table([f"swp{i}" for i in range(50)])
    values = array("Q", range(50))
    expected = b""
    for p in range(3):
        items = [Batch("t", 10 + p, table, array("I", range(p, 50)), values, array("q", [p] * (50 - p)),
                       bytes([F_NEW if p == 0 else 0]) * (50 - p)),
                 [StateUpdate(10 + p, table.specs[0].container, "oper-status", "UP")],
                 (10 + p, [table.specs[1].container])]
        exp.on_batch(items[0])
        exp.on_state(items[1])
        exp.on_delete(*items[2])
        exp.end_pass(10 + p)
        expected += b"".join(reference(i) for i in items)
        _wait(lambda p=p: writes.calls == p + 1, "one write per pass")
    assert exp.sent == 50 + 49 + 48 + 6 and exp.dropped == 0
    exp.stop(2.0)
    assert out.read_bytes() == expected
    assert exp.status()["queue"] == 0


def test_lines_outside_a_pass_are_written_within_200ms_and_at_stop(tmp_path):
    out = tmp_path / "out.jsonl"
    exp = JsonlExporter(str(out))
    exp.start(None)
    c = Container(OPENCONFIG, "/interfaces/interface[name=x]/state")
    exp.on_state([StateUpdate(1, c, "oper-status", "UP")])  # no end_pass follows (no engine)
    _wait(lambda: exp.sent == 1, "written without a pass")
    exp.on_state([StateUpdate(2, c, "oper-status", "DOWN")])
    exp.stop(2.0)  # at once: before the writer's next look
    assert [json.loads(line)["value"] for line in out.read_text().splitlines()] == ["UP", "DOWN"]


def test_a_full_queue_drops_whole_passes_counting_lines(tmp_path):
    r, w = os.pipe()  # nobody reads: the writer blocks on its first pass once the pipe is full
    try:
        exp = JsonlExporter(f"/proc/self/fd/{w}", max_queue=100)
        exp.start(None)
        table = _table([f"swp{i}" for i in range(60)])
        values = array("Q", range(60))
        big = Batch("t", 1, table, array("I", range(60)), values, array("q", [0] * 60), bytes(60))
        for _ in range(2000):  # ~8 MB: more than the pipe holds
            exp.on_batch(big)
            exp.end_pass(1)
        assert exp.dropped > 0 and exp.dropped % 60 == 0
        assert exp.status()["queue"] <= 100 + 60
    finally:
        os.close(r)  # the writer's write fails (EPIPE): it stops, counting the rest dropped
        exp.stop(2.0)
        os.close(w)


def test_an_unencodable_state_drops_its_line_only(tmp_path):
    out = tmp_path / "out.jsonl"
    exp = JsonlExporter(str(out))
    exp.start(None)
    c = Container(OPENCONFIG, "/x")
    exp.on_state([StateUpdate(1, c, "a", 1), StateUpdate(1, c, "b", object()), StateUpdate(1, c, "c", 3)])
    exp.end_pass(1)
    exp.stop(2.0)
    assert [json.loads(line)["value"] for line in out.read_text().splitlines()] == [1, 3]
    assert (exp.sent, exp.dropped) == (2, 1) and "cannot encode" in exp.last_error
