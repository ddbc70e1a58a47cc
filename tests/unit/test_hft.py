"""sources.hft: Cumulus HFT job files (tests/fixtures/hft: written from NVIDIA's documented
shape, not captured) folded per read, and every way a file can be wrong costing one read."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agent import config
from agent.counters import OPENCONFIG, SWTEL_ORIGIN
from agent.engine import MAX_CLOCK_SKEW_NS, Engine
from agent.sources.base import NO_DATA
from agent.sources.hft import STALE_NS, HftSource, Worker, fold, parse_samples
from agent.store import Store
from tests.helpers import wait_until

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "hft" / "job.json"
#: the fixture's newest sample (metadata sec/nsec of sample "2")
NEWEST_NS = 1715957858 * 1_000_000_000 + 734503118
Q3 = "/qos/interfaces/interface[interface-id=swp1s0]/output/queues/queue[name=3]/state"
CTR = "/interfaces/interface[name=swp1s0]/state/counters"


def _section(**keys: object):
    cfg = config.parse(json.dumps({"sources": {"hft": {"enabled": True, **keys}}}))
    return cfg, cfg.sources.hft


def _worker(path: Path, now_ns: int = NEWEST_NS + 1_000_000, **keys: object) -> Worker:
    _cfg, section = _section(file=str(path), **keys)
    return Worker(section, clock=lambda: now_ns)


def _doc_at(ts_ns: int) -> dict:
    """The fixture with its samples moved so that the newest is at ``ts_ns`` (10 ms apart)."""
    doc = json.loads(FIXTURE.read_text())
    for i, name in enumerate(("0", "1", "2")):
        t = ts_ns - (2 - i) * 10_000_000
        doc[name]["metadata"] = {"sec": t // 1_000_000_000, "nsec": t % 1_000_000_000}
    return doc


def test_the_documented_shape_is_parsed_oldest_first():
    samples, skipped = parse_samples(json.loads(FIXTURE.read_text()))
    assert skipped == 0 and [ts for ts, _ in samples] == sorted(ts for ts, _ in samples)
    assert samples[-1][0] == NEWEST_NS
    assert samples[-1][1][("swp1s0", "if_out_octets", "", "out-octets")] == 26000000
    assert samples[-1][1][("swp1s0", "tc_curr_occupancy", "3", "current-occupancy")] == 12288


def test_a_read_folds_the_new_samples_newest_value_and_peak():
    samples, _ = parse_samples(json.loads(FIXTURE.read_text()))
    ts, values, n = fold(samples, 0)
    assert (ts, n) == (NEWEST_NS, 3)
    assert values[("swp1s0", "tc_curr_occupancy", "3", "current-occupancy")] == 12288  # the newest
    assert values[("swp1s0", "tc_curr_occupancy", "3", "peak-occupancy")] == 409600  # the middle one
    assert values[("swp1s0", "if_in_octets", "", "in-octets")] == 2200000
    # only the samples after the last folded count: the peak is the newest one's then
    ts2, values2, n2 = fold(samples, NEWEST_NS - 5_000_000)
    assert (ts2, n2) == (NEWEST_NS, 1)
    assert values2[("swp1s0", "tc_curr_occupancy", "3", "peak-occupancy")] == 12288
    assert fold(samples, NEWEST_NS) == (0, {}, 0)


def test_the_newest_is_by_timestamp_not_by_place_in_the_file():
    samples, _ = parse_samples(json.loads(FIXTURE.read_text()))
    ts, values, n = fold(list(reversed(samples)), 0)
    assert (ts, n) == (NEWEST_NS, 3)
    assert values[("swp1s0", "tc_curr_occupancy", "3", "current-occupancy")] == 12288
    assert values[("swp1s0", "tc_curr_occupancy", "3", "peak-occupancy")] == 409600


def test_bad_values_cost_one_value_each():
    doc = json.loads(FIXTURE.read_text())
    doc["2"]["port_data"]["swp1s0"]["if_in_octets"] = -5
    doc["2"]["port_data"]["swp1s0"]["tc_data"]["3"]["tc_curr_occupancy"] = "lots"
    doc["2"]["port_data"]["swp1s1"]["if_in_octets"] = True
    doc["1"]["metadata"] = {"sec": "x"}  # a sample without a time: that sample alone
    samples, skipped = parse_samples(doc)
    assert skipped == 4 and len(samples) == 2
    newest = samples[-1][1]
    assert ("swp1s0", "if_in_octets", "", "in-octets") not in newest
    assert newest[("swp1s0", "if_out_octets", "", "out-octets")] == 26000000


@pytest.mark.parametrize("text", ["[]", "{}", '{"hostname": "leaf01"}', "null"])
def test_a_document_with_no_sample_is_not_an_hft_file(text):
    with pytest.raises(ValueError):
        parse_samples(json.loads(text))


@pytest.mark.parametrize("text", [
    FIXTURE.read_text(), "{}", " { } ", '{"a": 1, "b": [1, {"c": "}"}], "d": "x,y"}', "[1, 2]", "null",
    '{"a": 1,}', '{"a" 1}', '{"a": 1} 2', '{"a": 1', '{"a": 1, "b": {"c": [1, 2', "{", '{"a": 1 "b": 2}',
    '{1: 2}', '{"a": tru}', "", r'{"\u00e9": "\ud83d\ude00"}'])
def test_decoding_member_by_member_answers_as_json_loads(text):
    """The same members as ``json.loads``'s object, and an error where it errs (or where the
    document is not an object)."""
    from agent.sources.hft import members
    try:
        want: object = json.loads(text)
    except ValueError:
        want = ValueError
    if not isinstance(want, dict):
        want = ValueError
    try:
        got: object = dict(members(text.encode()))
    except ValueError:
        got = ValueError
    assert got == want


def test_the_worker_reads_the_file_once_until_it_changes(tmp_path):
    path = tmp_path / "job.json"
    path.write_bytes(FIXTURE.read_bytes())
    w = _worker(path)
    r = w.look()
    assert r.state == "ok" and r.ts_ns == NEWEST_NS and r.folded == 3
    assert w.look() is None and w.files_read == 1  # unchanged: not read again
    doc = json.loads(FIXTURE.read_text())
    doc["3"] = {"sample_index": 4, "metadata": {"sec": 1715957858, "nsec": 744503118},
                "port_data": {"swp1s0": {"if_in_octets": 2300000}}}
    path.write_text(json.dumps(doc))
    r2 = w.look()
    assert r2.state == "ok" and r2.folded == 1
    assert dict(r2.values)[("swp1s0", "if_in_octets", "", "in-octets")] == 2300000


def test_the_directory_gives_its_newest_json(tmp_path):
    older, newer = tmp_path / "1.json", tmp_path / "2.json"
    older.write_text("not json at all")
    newer.write_bytes(FIXTURE.read_bytes())
    os.utime(older, ns=(1, 1))
    (tmp_path / "notes.txt").write_text("ignored")
    _cfg, section = _section(directory=str(tmp_path))
    r = Worker(section, clock=lambda: NEWEST_NS).look()
    assert r.state == "ok" and r.file == str(newer)


def test_absent_directory_and_no_file_are_notes_not_errors(tmp_path):
    _cfg, section = _section(directory=str(tmp_path / "nowhere"))
    w = Worker(section, clock=lambda: NEWEST_NS)
    r = w.look()
    assert r.state == "absent" and "no " in r.note
    assert w.look() is None  # the same condition: no new reading per look
    _cfg, section = _section(directory=str(tmp_path))
    assert Worker(section).look().state == "absent"


@pytest.mark.parametrize("content", [b"\x00\xff" * 100, FIXTURE.read_bytes()[:-40], b"[" * 200000])
def test_garbage_and_truncated_files_are_one_failed_read(tmp_path, content):
    path = tmp_path / "job.json"
    path.write_bytes(content)
    w = _worker(path)
    r = w.look()
    assert r.state == "error" and "not an HFT job file" in r.note and not r.values
    path.write_bytes(FIXTURE.read_bytes())  # the next good file is read as ever
    assert w.look().state == "ok"


def test_a_huge_file_is_refused_unread(tmp_path):
    path = tmp_path / "job.json"
    path.write_bytes(b" " * 8192 + FIXTURE.read_bytes())
    w = _worker(path, max_bytes=4096)
    r = w.look()
    assert r.state == "error" and "over max_bytes" in r.note and w.files_read == 0


def test_a_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "job.json"
    os.mkfifo(path)
    r = _worker(path).look()
    assert r.state == "error"


def test_a_finished_jobs_old_samples_are_not_published(tmp_path):
    path = tmp_path / "job.json"
    path.write_bytes(FIXTURE.read_bytes())
    r = _worker(path, now_ns=NEWEST_NS + 60 * 1_000_000_000).look()
    assert r.state == "stale" and not r.values
    assert STALE_NS == MAX_CLOCK_SKEW_NS  # the engine would refuse the stamp past it


def test_the_source_sets_up_its_layout_and_takes_the_samples_own_time(tmp_path):
    path = tmp_path / "job.json"
    path.write_bytes(FIXTURE.read_bytes())
    cfg, _section_ = _section(file=str(path), refresh="1h")
    src = HftSource(cfg)
    src._worker = _worker(path)  # looked at by hand: no thread
    src.clock = lambda: NEWEST_NS + 1_000_000
    src.setup({})
    src._worker.look()
    assert src.read() == NO_DATA and src.needs_setup  # a new layout first
    src.setup({})
    assert src.read() == 2 and src.sample_ts_ns == NEWEST_NS
    got = {(s.container.origin, s.container.path, s.leaf): src.values[i] for i, s in enumerate(src.table.specs)}
    assert got[(OPENCONFIG, CTR, "out-octets")] == 26000000
    assert got[(SWTEL_ORIGIN, Q3, "current-occupancy")] == 12288
    assert got[(SWTEL_ORIGIN, Q3, "peak-occupancy")] == 409600
    assert src.read() == NO_DATA  # the same reading is not taken twice
    assert "hft ok" in src.info()["note"]
    # over 5 s after the newest sample the table goes: the election gives the paths back
    src.clock = lambda: NEWEST_NS + STALE_NS
    assert src.read() == NO_DATA and not src.needs_setup  # not older than the limit yet
    src.clock = lambda: NEWEST_NS + STALE_NS + 1
    assert src.read() == NO_DATA and src.needs_setup
    src.setup({})
    assert len(src.table) == 0 and src.ports == [] and src.info()["released"] == 1
    assert src.read() == NO_DATA and not src.needs_setup  # released once


def test_the_election_puts_hfts_values_on_the_shared_paths():
    """netdev (rank 1) and the asic source (rank 2) give the same counters of swp1s0: HFT's
    (rank 3) take the paths, theirs step aside under their own names."""
    from agent.counters import COUNTER, GAUGE, Container, CounterSpec, CounterTable
    from agent.ports import elect, yielded
    from agent.sources.hft import spec_for
    ctr, q3 = Container(OPENCONFIG, CTR), Container(SWTEL_ORIGIN, Q3)
    netdev = CounterTable("netdev", [CounterSpec(ctr, "in-octets", 64, COUNTER, "swp1s0")])
    asic = CounterTable("asic", [CounterSpec(q3, "current-occupancy", 64, GAUGE, "swp1s0")])
    hft = CounterTable("hft", [spec_for(("swp1s0", "if_in_octets", "", "in-octets")),
                               spec_for(("swp1s0", "tc_curr_occupancy", "3", "current-occupancy"))])
    assert [(s.container, s.leaf) for s in hft.specs] == [(ctr, "in-octets"), (q3, "current-occupancy")]
    moves = elect([("netdev", netdev, 1), ("asic", asic, 2), ("hft", hft, 3)])
    assert moves[0] == {0: (yielded(ctr, "netdev"), "in-octets")}
    assert moves[1] == {0: (yielded(q3, "asic"), "current-occupancy")}
    assert moves[2] == {}  # HFT's on the paths as they are


def test_config_bounds():
    for keys in ({"refresh": "10ms"}, {"max_bytes": 10}, {"directory": " "}):
        with pytest.raises(config.ConfigError):
            config.parse(json.dumps({"sources": {"hft": {"enabled": True, **keys}}}))


def test_the_agent_streams_the_files_values_on_the_shared_paths(tmp_path):
    # the samples are moved to now: the engine keeps a sample's own stamp within 5 s of its
    # clock; on a machine so loaded that a look comes later, the file is written again (fresh)
    path = tmp_path / "job.json"
    written: list[int] = []

    def write_fresh() -> None:
        written.append(time.time_ns())
        path.write_text(json.dumps(_doc_at(written[-1])))
    write_fresh()
    cfg = config.parse(json.dumps({"interval": "50ms", "sources": {
        "netdev": {"enabled": False}, "ethtool": {"enabled": False}, "system": {"enabled": False},
        "hft": {"enabled": True, "interval": "50ms", "file": str(path), "refresh": "100ms"}}}))
    store = Store()
    engine = Engine(cfg, [], store=store)
    engine.start()
    try:
        def published():
            entry = store.latest().get("hft")
            if entry is None or not len(entry[0]):
                if time.time_ns() - written[-1] > STALE_NS // 2:
                    write_fresh()
                return None
            table, values, ts = entry
            return ts, {(s.container.origin, s.container.path, s.leaf): values[i] for i, s in enumerate(table.specs)}
        ts, got = wait_until(published, 30, "the HFT values in the store")
        assert ts in written  # the newest sample's own time, not the tick's
        assert got[(OPENCONFIG, CTR, "in-octets")] == 2200000
        assert got[(SWTEL_ORIGIN, Q3, "peak-occupancy")] == 409600
        status = engine.status()["sources"]["hft"]
        assert status["note"].startswith("hft ok") and status["errors"] == 0
    finally:
        engine.stop()
