"""sources.lldp (agent/sources/lldp.py): lldpd's neighbours from ``lldpcli -f json0``, read off
the tick thread. Fixtures are real lldpd 1.0.16 answers (tests/fixtures/lldp/, captured in
network namespaces: a Cumulus-style leaf seeing a host and a spine, the host seeing the leaf);
the failure modes run a stand-in lldpcli (absent, not running, hanging, garbage, 10 MB)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from agent import config
from agent.counters import OPENCONFIG
from agent.engine import Engine
from agent.sources.base import NO_DATA
from agent.sources.lldp import (
    LldpSource,
    Reading,
    Worker,
    mgmt_container,
    neighbor_container,
    parse_age,
    parse_neighbors,
)
from agent.store import Store
from tests.helpers import failure_bound, wait_until

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lldp"


def _doc(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _source(tmp_path: Path, **keys: object) -> LldpSource:
    section = {"enabled": True, **keys}
    cfg = config.parse(json.dumps({"sources": {"lldp": section}}))
    return LldpSource(cfg)


def _script(tmp_path: Path, body: str, name: str = "lldpcli") -> str:
    """A stand-in lldpcli: a Python script (its argv as lldpcli's)."""
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport os, sys, time\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _next_reading(src: LldpSource, after: int = 0) -> Reading:
    """Wait for the worker's reading after generation ``after``, and let the source take it."""
    reading = wait_until(lambda: (r := src._worker.latest) is not None and r.generation > after and r, 30,
                         "an lldpcli reading")
    src.read()
    return reading


# ---------------------------------------------------------------- the captured answers


def test_a_switch_sees_a_host_by_mac_and_a_spine_by_ifname():
    leaf = parse_neighbors(_doc("switch"))
    host, spine = leaf
    assert (host.interface, host.id, host.system_name) == ("va1390", "1", "host-1")
    # plain lldpd on a host: its MAC as port id, the ifname as description
    assert (host.port_id, host.port_id_type, host.port_description) == (
        "9a:61:d7:88:76:5e", "MAC_ADDRESS", "vb1390")
    assert (host.chassis_id, host.chassis_id_type) == ("9a:61:d7:88:76:5e", "MAC_ADDRESS")
    assert host.system_description.startswith("Debian GNU/Linux 12")
    assert host.mgmt == (("fe80::9861:d7ff:fe88:765e", 2),)
    assert (host.ttl, host.age) == (4, 1)
    # a Cumulus-style switch (portidsubtype ifname): its ifname as port id
    assert (spine.interface, spine.system_name, spine.port_id, spine.port_id_type) == (
        "vd1390", "spine-1", "vc1390", "INTERFACE_NAME")
    assert spine.system_description == "Cumulus Linux version 5.9.1 running on Nvidia SN5600"
    assert spine.mgmt == (("198.18.6.2", 2), ("fe80::ac60:d3ff:fe05:d993", 2))


def test_the_host_sees_the_leaf():
    (leaf,) = parse_neighbors(_doc("host"))
    assert (leaf.interface, leaf.system_name, leaf.port_id, leaf.port_id_type, leaf.age) == (
        "vb1390", "leaf-3", "va1390", "INTERFACE_NAME", 17)


def test_no_neighbours_and_not_lldpcli():
    assert parse_neighbors(_doc("empty")) == ()  # lldpd's {"lldp": [{}]}
    for bad in ([], "x", {"lldp-updated": []}, None):
        with pytest.raises(ValueError):
            parse_neighbors(bad)
    # what is not the shape is skipped, never raised
    odd = {"lldp": [{"interface": [1, {"name": 5}, {"name": "swp1", "chassis": "x", "port": [{"id": 3}],
                                                    "age": [], "rid": {"x": 1}}]}]}
    number, n = parse_neighbors(odd)
    assert number.interface == "5"  # a number where a name stands: its text
    assert (n.interface, n.system_name, n.port_id, n.ttl, n.age) == ("swp1", "", "", None, None)
    assert n.leaves() == {"id": "2"}  # no rid: its place on the list


def test_age_and_text():
    assert parse_age("1 day, 02:03:04") == 86400 + 7384
    assert parse_age("0 day, 00:00:13") == 13
    assert parse_age("soon") is None
    doc = {"lldp": [{"interface": [{"name": "swp1", "chassis": [{"name": [{"value": "\udc80x" + "y" * 900}]}]}]}]}
    (n,) = parse_neighbors(doc)
    assert n.system_name.startswith("?x") and len(n.system_name) == 512  # cut, no lone surrogate
    n.system_name.encode("utf-8")


def test_the_source_publishes_states_and_deletes_what_goes(tmp_path):
    doc = tmp_path / "n.json"
    doc.write_text(json.dumps(_doc("switch")))
    src = _source(tmp_path, file=str(doc), refresh="1h")
    src.setup({})
    try:
        _next_reading(src)
        states = {(u.container, u.leaf): u.value for u in src.states(1)}
        host = neighbor_container("va1390", "1")
        assert host.origin == OPENCONFIG
        assert host.path == "/lldp/interfaces/interface[name=va1390]/neighbors/neighbor[id=1]/state"
        assert states[(host, "system-name")] == "host-1"
        assert states[(host, "port-id-type")] == "MAC_ADDRESS"
        assert states[(host, "ttl")] == 4 and states[(host, "age")] == 1
        spine_mgmt = mgmt_container("vd1390", "2", "198.18.6.2")
        assert states[(spine_mgmt, "address")] == "198.18.6.2" and states[(spine_mgmt, "interface-number")] == 2
        assert src.info()["lldp_state"] == "ok" and src.info()["neighbors"] == 2
        assert src.read() == 0 and src.states(2) == []  # the same reading: nothing again

        changed = _doc("switch")
        changed["lldp"][0]["interface"] = changed["lldp"][0]["interface"][:1]  # the spine goes
        changed["lldp"][0]["interface"][0]["chassis"][0]["name"][0]["value"] = "host-9"
        doc.write_text(json.dumps(changed))
        gen = src._worker.latest.generation
        src._worker.poke()
        _next_reading(src, gen)
        updates = src.states(3)
        assert {(u.container, u.leaf): u.value for u in updates if u.value is not None} == {
            (host, "system-name"): "host-9"}
        gone = {(u.container.path, u.leaf) for u in updates if u.value is None}
        assert (neighbor_container("vd1390", "2").path, "system-name") in gone
        assert (spine_mgmt.path, "address") in gone
        assert not any(p.startswith(host.path) for p, _ in gone)
    finally:
        src.close()


def test_the_engine_stores_the_neighbours(tmp_path):
    doc = tmp_path / "n.json"
    doc.write_text(json.dumps(_doc("host")))
    cfg = config.parse(json.dumps({"interval": "50ms", "sources": {
        "netdev": {"enabled": False}, "ethtool": {"enabled": False}, "system": {"enabled": False},
        "lldp": {"enabled": True, "interval": "50ms", "file": str(doc)}}}))
    store = Store()
    engine = Engine(cfg, [], store=store)
    engine.start()
    try:
        leaf = neighbor_container("vb1390", "1")
        wait_until(lambda: any(u.container == leaf and u.value == "leaf-3" for u in store.states()), 30,
                   "the neighbour in the store")
        status = engine.status()["sources"]["lldp"]
        assert status["note"] == "lldp ok: 1 neighbours" and status["errors"] == 0
    finally:
        engine.stop()


# ---------------------------------------------------------------- a missing, slow or hostile lldpcli


def test_lldpd_absent_is_a_state_not_an_error(tmp_path):
    src = _source(tmp_path, lldpcli=str(tmp_path / "no-such-lldpcli"))
    src.setup({})
    try:
        reading = _next_reading(src)
        assert reading.state == "absent" and "no " in reading.note
        assert src.errors == 0 and src.info()["note"].startswith("lldp absent: lldpd absent")
    finally:
        src.close()


def test_lldpd_not_running_is_absent_too(tmp_path):
    fake = _script(tmp_path, "sys.stderr.write('[WARN/control] unable to connect to socket /run/lldpd.socket: "
                             "No such file or directory\\n'); sys.exit(1)")
    src = _source(tmp_path, lldpcli=fake, watch=False)
    src.setup({})
    try:
        reading = _next_reading(src)
        assert reading.state == "absent" and "lldpd not running" in reading.note and src.errors == 0
    finally:
        src.close()


def test_a_hanging_lldpcli_is_killed_and_never_holds_the_tick(tmp_path):
    started = tmp_path / "started"
    fake = _script(tmp_path, f"open({str(started)!r}, 'w').write(str(os.getpid()))\ntime.sleep(3600)")
    src = _source(tmp_path, lldpcli=fake, timeout="500ms", watch=False, refresh="1h")
    src.setup({})
    try:
        wait_until(lambda: started.exists() and started.read_text(), 30, "lldpcli started")
        pid = int(started.read_text())
        # lldpcli hangs now: the tick reads what it has (nothing yet) and goes on
        assert src.read() == NO_DATA and src._worker.latest is None
        reading = _next_reading(src)
        assert reading.state == "error" and reading.note == "lldpcli killed: no answer in 0.5 s"
        assert src.errors == 1 and "no answer" in src.info()["note"]
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped
    finally:
        src.close()


def test_a_stop_kills_a_hanging_lldpcli_at_once(tmp_path):
    """The agent stopping (the engine's interrupt, then close) does not wait out lldpcli's
    timeout (60 s here): the run under way and the watch are killed."""
    started = tmp_path / "started"
    fake = _script(tmp_path, f"open({str(started)!r}, 'a').write(str(os.getpid()) + ' ')\ntime.sleep(3600)")
    src = _source(tmp_path, lldpcli=fake, timeout="60s", refresh="1h")
    src.setup({})
    wait_until(lambda: started.exists() and len(started.read_text().split()) >= 2, 30, "the run and the watch")
    pids = [int(p) for p in started.read_text().split()]
    worker = src._worker
    with failure_bound(30, "close with a hanging lldpcli"):
        src.interrupt()
        src.close()
    assert not any(t.is_alive() for t in worker._threads)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_fifo_as_the_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes: a plain open() would block for good
    section = config.parse(json.dumps({"sources": {"lldp": {"file": str(fifo)}}})).sources.lldp
    with failure_bound(30, "reading a FIFO"):
        reading = Worker(section).fetch(1)
    assert (reading.state, reading.note, reading.neighbors) == ("error", f"{fifo}: not a regular file", None)


def test_garbage_and_a_flood_are_errors_that_keep_the_last_neighbours(tmp_path):
    mode = tmp_path / "mode"
    mode.write_text("good")
    fixture = FIXTURES / "host.json"
    fake = _script(tmp_path, f"""
m = open({str(mode)!r}).read()
out = sys.stdout.buffer
if m == "good":
    out.write(open({str(fixture)!r}, "rb").read())
elif m == "garbage":
    out.write(bytes(range(256)) * 64)
elif m == "deep":
    out.write(b"[" * 200000)
elif m == "flood":
    block = b'{{"lldp": [' + b" " * 65536
    for _ in range(160):  # 10 MB
        out.write(block)
""")
    src = _source(tmp_path, lldpcli=fake, watch=False, refresh="1h", max_bytes=4 << 20)
    src.setup({})
    try:
        first = _next_reading(src)
        assert first.state == "ok" and len(src.states(1)) > 0
        for what, expected in (("garbage", "lldpcli's output is not lldpd json0"),
                               ("deep", "lldpcli's output is not lldpd json0"),
                               ("flood", f"lldpcli killed: output over {4 << 20} bytes")):
            mode.write_text(what)
            gen = src._worker.latest.generation
            src._worker.poke()
            reading = _next_reading(src, gen)
            assert reading.state == "error" and reading.note.startswith(expected), (what, reading.note)
            assert reading.size <= 4 << 20  # never more than the bound read
            assert src.states(2) == [] and src.info()["neighbors"] == 1  # the last neighbours stand
        assert src.errors == 3
    finally:
        src.close()


def test_a_watch_event_reads_again_at_once(tmp_path):
    runs = tmp_path / "runs"
    events = FIXTURES / "watch-updated.json"
    fake = _script(tmp_path, f"""
if "watch" in sys.argv:
    sys.stdout.buffer.write(open({str(events)!r}, "rb").read()); sys.stdout.flush()
    time.sleep(3600)
open({str(runs)!r}, "a").write("x")
sys.stdout.write('{{"lldp": [{{}}]}}')
""")
    src = _source(tmp_path, lldpcli=fake, refresh="1h")  # the timer alone would not run it again
    src.setup({})
    try:
        wait_until(lambda: runs.exists() and len(runs.read_text()) >= 2, 30, "a second run, from the watch")
        assert src._worker.watch_events >= 1
    finally:
        src.close()


def test_config_bounds():
    with pytest.raises(config.ConfigError) as err:
        config.parse(json.dumps({"sources": {"lldp": {"refresh": "100ms", "timeout": "2m", "max_bytes": 10,
                                                      "lldpcli": " "}}}))
    text = "\n".join(err.value.problems)
    for key in ("refresh", "timeout", "max_bytes", "lldpcli"):
        assert f"sources.lldp.{key}" in text


def test_worker_argv_names_the_socket():
    section = config.parse(json.dumps({"sources": {"lldp": {"socket": "/run/x.sock"}}})).sources.lldp
    assert Worker(section).base_argv() == ["lldpcli", "-u", "/run/x.sock"]


# ---------------------------------------------------------------- OTLP and remote write: the info series

INFO = "nvswitch_lldp_neighbor_info"


def _lldp_store(neighbors: tuple, ts_ns: int, store: Store | None = None,
                old: dict | None = None) -> tuple[Store, dict]:
    """The store as the engine feeds it from the source's states (deletes included)."""
    from agent.counters import StateUpdate
    from agent.sources.lldp import neighbor_states

    store = store or Store()
    now = neighbor_states(neighbors)
    updates = [StateUpdate(ts_ns, c, leaf, v, "lldp") for (c, leaf), v in now.items()]
    updates += [StateUpdate(ts_ns, c, leaf, None, "lldp") for (c, leaf) in (old or {}) if (c, leaf) not in now]
    store.set_states(updates)
    return store, now


def _renamed(neighbors: tuple, name: str) -> tuple:
    import dataclasses

    return (dataclasses.replace(neighbors[0], system_name=name), *neighbors[1:])


def test_the_info_series_has_cumulus_name_and_attributes():
    from agent.exporters.state_gauges import gauges

    leaf = parse_neighbors(_doc("switch"))
    store, _ = _lldp_store(leaf, 5)
    info = [g for g in gauges(store) if g[0] == INFO]
    assert len(info) == 2 and {g[2] for g in info} == {1.0}
    host = dict(next(g[1] for g in info if ("interface", "va1390") in g[1]))
    assert host == {"interface": "va1390", "chassis_id": "9a:61:d7:88:76:5e", "chassis_id_type": "MAC_ADDRESS",
                    "port_id": "9a:61:d7:88:76:5e", "port_id_type": "MAC_ADDRESS", "port_description": "vb1390",
                    "system_name": "host-1", "system_description": host["system_description"]}
    assert host["system_description"].startswith("Debian GNU/Linux 12")
    # its numeric leaves (ttl, age) and the management addresses are not gauges of their own
    assert {g[0] for g in gauges(store)} == {INFO}


def test_remote_write_marks_the_old_info_series_stale():
    import math
    import struct

    from tests.interop.test_remote_write import _exporter, _parse

    exp = _exporter("http://127.0.0.1:9/w")
    leaf = parse_neighbors(_doc("switch"))
    store, published = _lldp_store(leaf, 7_000_000_000)
    exp._store = store

    def export() -> dict:
        built = exp.build()
        exp.exports += 1
        return _parse(b"".join(b for b, _n in built))

    first = {k: v for k, v in export().items() if dict(k).get("__name__") == INFO}
    assert len(first) == 2 and all(v == [(1.0, 7000)] for v in first.values())
    old = next(k for k in first if dict(k).get("system_name") == "host-1")
    _lldp_store(_renamed(leaf, "host-9"), 8_000_000_000, store, published)
    second = export()
    new = next(k for k in second if dict(k).get("system_name") == "host-9")
    assert second[new] == [(1.0, 8000)]
    (stale_value, stale_ms), = second[old]  # the old labels: a stale marker, not left to match
    assert math.isnan(stale_value) and struct.pack("<d", stale_value) == struct.pack("<Q", 0x7FF0000000000002)
    assert stale_ms > 7000
    assert old not in export()  # marked once


@pytest.mark.parametrize("profile", ["cumulus", "otel"])
def test_otlp_sends_the_info_series_and_flags_the_old_one(profile):
    from tests.unit.test_otlp import _exporter

    leaf = parse_neighbors(_doc("switch"))
    store, published = _lldp_store(leaf, 7_000_000_000)
    exp = _exporter(None, profile)
    exp._store = store

    def points() -> dict:
        out = {}
        for r in exp.build():
            for m in r.resource_metrics[0].scope_metrics[0].metrics:
                for dp in (m.gauge.data_points if m.HasField("gauge") else ()):
                    if m.name == INFO:
                        out[dict((a.key, a.value.string_value) for a in dp.attributes)["system_name"]] = dp
        return out

    first = points()
    assert set(first) == {"host-1", "spine-1"} and first["host-1"].as_double == 1.0 and first["host-1"].flags == 0
    _lldp_store(_renamed(leaf, "host-9"), 8_000_000_000, store, published)
    second = points()
    assert second["host-9"].as_double == 1.0
    assert second["host-1"].flags == 1 and not second["host-1"].HasField("as_double")  # NO_RECORDED_VALUE
    assert "host-1" not in points()  # once


def test_gnmi_get_answers_the_openconfig_lldp_leaves():
    """pygnmi's Get of a neighbour's state and of the management-address list, from the store the
    source's states fill."""
    from pygnmi.client import gNMIclient

    from agent.config import HostPort
    from agent.exporters.server import GnmiServer, ServerConfig

    store, _ = _lldp_store(parse_neighbors(_doc("switch")), 5)
    server = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True), "leaf-3")
    server.start(store)
    try:
        with gNMIclient(target=("127.0.0.1", server.port), insecure=True, gnmi_timeout=10) as gc:
            state = gc.get(path=["/lldp/interfaces/interface[name=vd1390]/neighbors/neighbor[id=2]/state"],
                           encoding="json")
            mgmt = gc.get(path=["/lldp/interfaces/interface[name=*]/neighbors/neighbor[id=*]/mgmt-addresses/"
                                "mgmt-address[address=*]/state/address"], encoding="json")
    finally:
        server.stop(1)
    got = {u["path"]: u["val"] for n in state["notification"] for u in n.get("update") or ()}
    assert {k: got[k] for k in ("system-name", "chassis-id-type", "port-id", "port-id-type", "port-description",
                                "ttl", "age", "id")} == {
        "system-name": "spine-1", "chassis-id-type": "MAC_ADDRESS", "port-id": "vc1390",
        "port-id-type": "INTERFACE_NAME", "port-description": "vc1390", "ttl": 4, "age": 1, "id": "2"}
    addresses = sorted(u["val"] for n in mgmt["notification"] for u in n.get("update") or ())
    assert addresses == sorted(["fe80::9861:d7ff:fe88:765e", "198.18.6.2", "fe80::ac60:d3ff:fe05:d993"])
