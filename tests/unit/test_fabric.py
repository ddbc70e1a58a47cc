"""The simulated Spectrum switch behind the asic source, end to end: exact values against
the model, counter-clear as a reset, the fabric streaming every target to one collector,
events over dial-out, pygnmi and status, ``swtel demo`` and ``swtel top``."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pygnmi.client import gNMIclient

from agent.counters import COUNTER, CounterSpec
from agent.ports import key_path, standard_key
from agent.sources.asic import histogram_bin, map_name
from tests import sim_model
from tests.gnmi_helpers import free_port
from tests.helpers import OFF, asic_yaml, demo_until, status_doc, wait_until
from tests.namespaces import AgentProcess
from tests.sim_model import Model

ROOT = Path(__file__).resolve().parents[2]
NS = 1_000_000_000


def _config(tmp_path, sim: str, exporters: str = "", interval: str = "100ms") -> str:
    return asic_yaml(tmp_path, "sim", sim, netdev=OFF, system=OFF, interval=interval, exporters=exporters,
                     head="target: sim-1\n")


def _paths(model: Model, t_ns: int) -> list[str | None]:
    """Display path of every flat value of the model's layout (None: not reported)."""
    _gen, ports, counters = model.layout(t_ns)
    out: list[str | None] = []
    for (name, _parent, _speed, flags), descs in zip(ports, counters, strict=True):
        for cname, _width, kind in descs:
            container, leaf, _kind = map_name(name, cname, host=bool(flags & 2))
            if kind == sim_model.HISTOGRAM:  # the FEC bins [b, b], one value each
                out += [where.full(bin_leaf) for where, bin_leaf in
                        (histogram_bin(container, leaf, b, b, b) for b in range(sim_model.FEC_BINS))]
            else:
                out.append(published(container, leaf, name))
    return out


def published(container, leaf: str, port: str) -> str:
    """Where an ASIC-only switch publishes a counter: a hardware counter on its standard leaf
    (agent/ports.py elect), every other one on its own path."""
    hit = standard_key(CounterSpec(container, leaf, 64, COUNTER, port))
    if hit is not None and hit[1]:
        container, leaf = key_path(hit[0])
    return container.full(leaf)


def test_every_value_equals_the_model(tmp_path):
    start = time.time_ns() - 3 * NS
    sim = f"role=spine seed=7 start={start} scenario=symbol-errors@2s:swp11s1"
    agent = AgentProcess(None, _config(tmp_path, sim), tmp_path)

    def counters() -> list[dict]:  # agent health and insight events are states, not ASIC values
        return [r for r in agent.records()
                if "delta" in r and not r["path"].startswith(("swtel:/agent/", "swtel:/insights/"))]

    try:
        agent.wait_ready(60)
        agent.wait_for(lambda: len({r["ts"] for r in counters()}) >= 9, 60, "nine reads")
    finally:
        assert agent.stop() == 0
    model = Model(sim)
    records = counters()
    assert records
    # the ports' states: every port of the layout up, each breakout naming its parent
    states = {r["path"]: r["value"] for r in agent.records() if "delta" not in r and "value" in r}
    assert states["/interfaces/interface[name=swp1]/state/oper-status"] == "UP"
    assert states["/interfaces/interface[name=swp11s1]/state/hardware-port"] == "swp11"
    by_ts: dict[int, list[dict]] = {}
    for r in records:
        by_ts.setdefault(r["ts"], []).append(r)
    assert len(by_ts) >= 8  # the reads waited for (the last may be partly written then)
    first_paths = set()
    prev: dict[str, int] = {}
    since = None  # every read changes octets, so every read's time is here: the peaks' since
    for ts in sorted(by_ts):
        paths = _paths(model, ts - start)
        values = model.values(ts - start, since)
        since = ts - start
        where = {p: i for i, p in enumerate(paths)}
        for r in by_ts[ts]:
            i = where[r["path"]]
            assert r["value"] == values[i], (r, values[i])
            if r.get("new"):
                first_paths.add(r["path"])
            else:
                assert r["delta"] == r["value"] - prev[r["path"]], r
            prev[r["path"]] = r["value"]
    # Every counter of the layout was reported once as a baseline (gauges included).
    assert first_paths == set(_paths(model, min(by_ts) - start))
    assert len(first_paths) > 60 * 90


CLEARED_OCTETS = "/interfaces/interface[name=swp1]/state/counters/in-octets"  # the plugin's HwIfInOctets


def _run_to_a_clear(workdir: Path, clear_s: int) -> tuple[AgentProcess, int, str] | None:
    """A leaf whose counters are cleared ``clear_s`` after its start, run until three reads
    after the reset; None when the agent's first read came after the clear (too late)."""
    workdir.mkdir()
    start = time.time_ns()
    sim = f"role=leaf seed=3 start={start} scenario=counter-clear@{clear_s}s"
    agent = AgentProcess(None, _config(workdir, sim), workdir)

    def octets() -> list[dict]:
        return [r for r in agent.records() if r.get("path") == CLEARED_OCTETS]

    try:
        agent.wait_ready(60)
        first = agent.wait_for(lambda: min((r["ts"] for r in octets()), default=None), 60, "the baseline read")
        if first >= start + clear_s * NS:
            return None
        # the reset, and three reads after it: the value goes on from the cleared counter
        agent.wait_for(lambda: True in [bool(r.get("reset")) for r in octets()][:-3], clear_s + 60,
                       "the reset and three reads after it")
    finally:
        assert agent.stop() == 0
    return agent, start, sim


def test_counter_clear_is_a_reset_never_a_negative_delta(tmp_path):
    # The clear comes 4 s after the simulator's start. The agent's baseline read must come
    # before it (the test's precondition, not its claim): on a machine too loaded for that,
    # the run is repeated with the clear later, never failed for being slow.
    octets = CLEARED_OCTETS
    for clear_s in (4, 12, 36):
        if (run := _run_to_a_clear(tmp_path / f"clear-{clear_s}s", clear_s)) is not None:
            agent, start, sim = run
            break
    else:
        raise AssertionError("no run read a baseline before the clear")
    # counters (gauges such as queue occupancy go up and down by nature)
    records = [r for r in agent.records() if "delta" in r and not r["path"].endswith(("occupancy", "watermark"))]
    assert len(records) > 1000 and all(r["delta"] >= 0 for r in records)
    series = [r for r in records if r["path"] == octets]
    assert [r["value"] for r in series] == sorted(r["value"] for r in series)  # never down
    resets = [r for r in series if r.get("reset")]
    assert len(resets) == 1 and resets[0]["ts"] - start >= clear_s * NS
    # After the clear, the value is what was there before plus what the port counted since.
    model = Model(sim)
    i = _paths(model, 0).index(octets)
    before = max((r for r in series if r["ts"] < resets[0]["ts"]), key=lambda r: r["ts"])
    assert resets[0]["delta"] == model.values(resets[0]["ts"] - start)[i]
    assert resets[0]["value"] == before["value"] + resets[0]["delta"]


def test_fabric_streams_every_target_to_one_collector(tmp_path):
    from agent.tools.collect import Collector
    from agent.tools.fabric import Fabric

    collector = Collector("127.0.0.1:0", insecure=True, keep_messages=False).start()
    fabric = Fabric(tmp_path, f"127.0.0.1:{collector.port}", "clean", start_ns=time.time_ns())
    fabric.start()
    try:
        want = {
            ("spine-1", "/interfaces/interface[name=swp11s1]/state/counters/in-octets"),
            ("leaf-3", "/interfaces/interface[name=swp61]/state/counters/out-octets"),
            ("host-1", "swtel:/rdma/devices/device[name=mlx5_0]/ports/port[id=1]/hw-counters/roce-adp-retrans"),
        }
        assert collector.wait_for(lambda c: want <= set(c.latest), timeout=20), fabric.alive()
        assert {m.get("system-name") for m in collector.metadata} >= {"spine-1", "leaf-3", "host-1"}
        # each target's values under its own prefix target only
        # read under the collector's lock: the streams keep adding values while the test looks
        keys = collector.keys()
        assert not any(t == "leaf-3" and "swp11s1" in p for t, p in keys)
        assert not any(t == "spine-1" and "/rdma/" in p for t, p in keys)
        assert fabric.failed() == []
    finally:
        codes = fabric.stop()
        collector.stop(0)
    assert set(codes.values()) == {0}


def test_events_reach_dialout_pygnmi_and_status(tmp_path):
    from agent.tools.collect import Collector

    collector = Collector("127.0.0.1:0", insecure=True, keep_messages=False).start()
    port = free_port()
    start = time.time_ns() + NS
    sim = f"role=spine seed=1 start={start} scenario=symbol-errors@1s:swp11s1"
    extra = (f"  dialout: [{{name: c, address: '127.0.0.1:{collector.port}', insecure: true, "
             f"notifications: per-tick}}]\n"
             f"  server: {{listen: '127.0.0.1:{port}', insecure: true}}\n")
    text = _config(tmp_path, sim, exporters=extra)
    agent = AgentProcess(None, text, tmp_path)
    try:
        agent.wait_ready()
        with gNMIclient(target=("127.0.0.1", port), insecure=True, timeout=10) as gc:
            sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
                {"path": "swtel:/insights/events", "mode": "on_change"}]})
            seen: list[dict] = []
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                msg = sub.get_update(timeout=15)
                seen += msg.get("update", {}).get("update", [])
                if any(u["path"].endswith("interfaces") and "swp11s1" in str(u["val"]) for u in seen):
                    break
            assert any(u["path"].endswith("interfaces") and "swp11s1" in str(u["val"]) for u in seen), seen
        # Dial-out carries every counter of a 64-port spine per tick ahead of the event: on a
        # loaded machine the queue behind it takes a while to drain (status says how long)
        got = collector.wait_for(lambda c: any(
            t == "sim-1" and p.startswith("swtel:/insights/events/event[") and p.endswith("/interfaces")
            and "swp11s1" in str(v["value"]) for (t, p), v in list(c.latest.items())), timeout=30)
        assert got, (sorted(k for k in collector.keys() if "insights" in k[1])[:20],
                     status_doc(tmp_path)["exporters"])
        status = status_doc(tmp_path)
        opened = status["events"]["open"]
        assert any("swp11s1" in ev["interfaces"] for ev in opened), opened
        assert "event raised" in agent.log.read_text() or "raised" in agent.log.read_text()
    finally:
        assert agent.stop() == 0
        collector.stop(0)


def _raised(out: str, *words: str) -> bool:
    """A RAISED line of the demo's live output naming every one of ``words``."""
    return any("RAISED" in line and all(w in line for w in words) for line in out.splitlines())


def test_demo_no_tui_shows_both_field_cases(tmp_path):
    # run until the three devices' events are out, however long a loaded machine takes
    proc = demo_until(tmp_path, seen=lambda out: _raised(out, "spine-1", "symbol") and _raised(
        out, "leaf-3", "imbalance") and _raised(out, "host-1", "roce"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    timeline = out[out.index("event timeline"):]
    rows = timeline.splitlines()
    assert any("spine-1" in r and "swp11s1" in r and "symbol" in r for r in rows), out
    assert any("leaf-3" in r and "swp62" in r and "imbalance" in r for r in rows), out
    assert any("host-1" in r and "roce" in r for r in rows), out
    assert (tmp_path / "collector.jsonl").stat().st_size > 0
    assert str(tmp_path / "collector.jsonl") in out


def test_demo_fec_degrade_predicts_the_failing_link(tmp_path):
    """`swtel demo --scenario fec-degrade`: link-degrading on spine-1 swp13 well before its
    first uncorrectable codeword (22.6 s), the lead printed."""
    proc = demo_until(tmp_path, "--scenario", "fec-degrade",
                      seen=lambda out: _raised(out, "spine-1", "link-degrading", "swp13"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    rows = out[out.index("event timeline"):].splitlines()
    assert any("spine-1" in r and "swp13" in r and "link-degrading" in r for r in rows), out
    m = re.search(r"spine-1 swp13 lane 0: link-degrading raised at \+([\d.]+)s, the first uncorrectable codeword at "
                  r"\+22\.6s: lead ([\d.]+)s", out)
    assert m, out
    assert float(m.group(2)) >= 8 and float(m.group(1)) + float(m.group(2)) == pytest.approx(22.6, abs=0.11)


def _live_and_timeline(out: str) -> tuple[list[str], list[str]]:
    """(the live RAISED lines, the timeline's event rows) of a demo's output."""
    live, _, rest = out.partition("event timeline")
    rest = rest.partition("\nincidents (")[0]  # the incidents section follows the timeline
    rows = [r for r in rest.splitlines()[3:] if re.match(r"^\s+[+-]\d+\.\ds ", r)]
    return [line for line in live.splitlines() if " RAISED " in line], rows


def test_demo_prints_a_live_line_for_every_event_of_its_timeline(tmp_path):
    """pfc-storm (the run that printed no live line while its timeline listed two events):
    every event in the timeline had its RAISED line before it, at the same time, in the same
    time base (no wall-clock time in a message)."""
    proc = demo_until(tmp_path, "--scenario", "pfc-storm", seen=lambda out: _raised(out, "spine-1", "pfc-storm"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    live, rows = _live_and_timeline(proc.stdout)
    assert rows, proc.stdout
    for row in rows:
        raised, _ended, target, _iface, event = row.split()[:5]
        assert any(line.split()[:2] == [raised, target] and f" {event}: " in line for line in live), (row, live)
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d{3}Z", proc.stdout), proc.stdout


def test_demo_shorter_than_its_story_says_how_long_to_run(tmp_path):
    """fec-degrade's first uncorrectable codeword is at +22.6 s: a 4 s run says so before and
    after, and gives no verdict on the prediction."""
    proc = subprocess.run([sys.executable, "-m", "agent", "demo", "--no-tui", "--scenario", "fec-degrade",
                           "--duration", "4s", "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    head, _, tail = out.partition("event timeline")
    assert "spine-1 fec-degrade@1s-25s:swp13: needs about 25 s, longer than this run; run at least 25 s " \
           "(--duration 25s)" in head, out
    assert re.search(r"spine-1 swp13 lane 0: the run ended at \+\d+\.\ds, before the first uncorrectable codeword "
                     r"\(\+22\.6s\) and without link-degrading: run at least 25 s \(--duration 25s\)", tail), out
    assert "not raised" not in out and "lead" not in tail, out


def test_demo_into_a_closed_pipe_stops_quietly(tmp_path):
    """`swtel demo --no-tui | head -2`: no traceback, exit 0, every agent stopped."""
    proc = subprocess.Popen([sys.executable, "-m", "agent", "demo", "--duration", "30", "--no-tui",
                             "--dir", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    head = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()  # the reader goes away; the next event line hits a closed pipe
    _, err = proc.communicate(timeout=60)
    assert head[0].startswith(b"swtel demo:")
    assert proc.returncode == 0 and b"Traceback" not in err, err
    # every agent the demo started is gone (stopped, not orphaned)
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, str(tmp_path))]
    assert left == [], left


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def _read_until(fd: int, needle: bytes | re.Pattern[bytes], timeout: float) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            if needle.search(buf) if isinstance(needle, re.Pattern) else needle in buf:
                return buf
    raise AssertionError(f"{needle!r} not seen in:\n{buf[-3000:]!r}")


def _spawn_in_pty(*argv: str) -> tuple[int, int]:
    """Run ``python -m agent ARGV`` on a real 80x24 pseudo-terminal; (pid, master fd)."""
    import fcntl
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.environ.update({"TERM": "xterm", "COLUMNS": "80", "LINES": "24", "PYTHONPATH": str(ROOT)})
        os.execv(sys.executable, [sys.executable, "-m", "agent", *argv])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    return pid, fd


def _quit_and_wait(pid: int, fd: int, timeout: float = 60) -> tuple[int, bytes]:
    """Press q; return the exit code and what the program printed after it."""
    os.write(fd, b"q")
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        try:
            if select.select([fd], [], [], 0.2)[0]:
                out += os.read(fd, 65536)
        except OSError:
            pass
        if done:
            os.close(fd)
            return os.waitstatus_to_exitcode(status), out
    os.kill(pid, 9)
    raise AssertionError(f"did not quit on q; last output: {out[-2000:]!r}")


def test_top_draws_refreshes_and_quits_in_a_terminal(tmp_path):
    start = time.time_ns()
    sim = f"role=spine seed=1 start={start} scenario=symbol-errors@0s:swp11s1"
    agent = AgentProcess(None, _config(tmp_path, sim), tmp_path)
    try:
        agent.wait_ready()
        pid, fd = _spawn_in_pty("top", "--socket", str(tmp_path / "swtel.sock"))
        first = _read_until(fd, b"swtel top", 60)
        assert b"sim-1" in first
        # a refresh: the port table appears with the busiest ports, then the event
        _read_until(fd, b"swp", 60)
        _read_until(fd, b"symbol-ber", 60)
        code, _ = _quit_and_wait(pid, fd)
        assert code == 0
    finally:
        assert agent.stop() == 0


def test_demo_live_view_in_a_terminal(tmp_path):
    pid, fd = _spawn_in_pty("demo", "--duration", "600", "--dir", str(tmp_path))
    _read_until(fd, b"swtel demo", 60)
    _read_until(fd, b"events at the collector", 60)
    # spine-1's event reached the collector (its pane lists it): what the timeline shows after q.
    # (Its port on the screen is no such sign: swp11s1 may be listed for its traffic before.)
    _read_until(fd, b"symbol BER", 90)
    _read_until(fd, b"swp11s1", 60)  # the faulty port comes to the top once its event is open
    code, out = _quit_and_wait(pid, fd)
    assert code == 0, out
    assert b"event timeline" in out and b"symbol-ber" in out


def test_top_plain_lines_when_not_a_terminal(tmp_path):
    sim = f"role=spine seed=1 start={time.time_ns() - 2 * NS} scenario=symbol-errors@0s:swp11s1"
    agent = AgentProcess(None, _config(tmp_path, sim), tmp_path)
    try:
        agent.wait_ready()
        # the plugin's ports in the store (ready is the first poll of any source)
        agent.wait_for(lambda: status_doc(tmp_path)["sources"]["asic"]["reads"] >= 2, 60, "two ASIC reads")
        proc = subprocess.run([sys.executable, "-m", "agent", "top", "--socket", str(tmp_path / "swtel.sock"),
                               "-n", "2", "--interval", "0.5", "--limit", "100"],
                              cwd=ROOT, capture_output=True, text=True,
                              timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        assert agent.stop() == 0
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum(1 for line in lines if line.startswith("port ")) == 2
    swp = [line for line in lines if line.startswith("swp")]
    assert swp and all(float(line.split()[2]) >= 0 for line in swp)
    # the symbol errors show on swp11s1's row
    row = next(line for line in reversed(lines) if line.startswith("swp11s1 "))
    assert float(row.split()[5].rstrip("kM")) > 0


# ---------------------------------------------------------------- SIGHUP: a closed terminal (issue 24, item 7)


def _agents_running(parent_pid: int, tmp: Path, prefix: str, timeout: float = 40) -> tuple[list, Path]:
    """Every process under the parent (psutil processes: its three ``swtel run`` children and
    their ASIC plugin helpers) once each agent answers on its control socket and has its
    helper, and the temporary directory they run in."""
    import psutil

    def running() -> tuple[list, Path] | None:
        dirs = sorted(tmp.glob(f"{prefix}*"))
        kids = [k for k in psutil.Process(parent_pid).children() if "run" in k.cmdline()]
        if dirs and len(kids) == 3 and len(list(dirs[0].glob("*.sock"))) == 3:
            helpers = [h for k in kids for h in k.children(recursive=True)]
            if len(helpers) >= 3:  # one plugin helper (agent/asic/host.py) per agent
                return kids + helpers, dirs[0]
        return None

    return wait_until(running, timeout, "three agents running", interval=0.2,
                      detail=lambda: f"agents not running: {list(tmp.iterdir())}")


def _assert_nothing_left(kids: list, workdir: Path | None) -> None:
    """Every process that ran under the (exited) parent is gone; the temporary directory too,
    unless ``workdir`` is None (kept: the run was not hung up)."""
    import psutil

    gone, alive = psutil.wait_procs(kids, timeout=10)  # a helper may be reaped a moment after its agent
    assert alive == [], [(k.pid, k.cmdline()) for k in alive]
    if workdir is not None:
        assert not workdir.exists(), list(workdir.iterdir())


def _hup_env(tmp_path: Path) -> dict:
    # tempfile.mkdtemp honours TMPDIR: the run's temporary directory lands where the test looks
    return {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM"])
def test_fabric_leaves_nothing_behind_on_a_signal(tmp_path, sig):
    import signal

    signum = getattr(signal, sig)
    proc = subprocess.Popen([sys.executable, "-m", "agent", "fabric", "--duration", "120"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_hup_env(tmp_path))
    try:
        kids, workdir = _agents_running(proc.pid, tmp_path, "swtel-fabric-")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)  # generous: what is asserted is what is left
    finally:
        if proc.poll() is None:
            proc.kill()
    assert b"Traceback" not in err, err
    # a hang-up: nobody reads, the directory goes; SIGTERM: a stop like Ctrl-C (agents killed at
    # the bound are not failures)
    assert proc.returncode == (128 + signal.SIGHUP if signum == signal.SIGHUP else 0), err
    _assert_nothing_left(kids, workdir if signum == signal.SIGHUP else None)


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGINT"])
def test_demo_leaves_nothing_behind_on_a_signal(tmp_path, sig):
    import signal

    signum = getattr(signal, sig)
    proc = subprocess.Popen([sys.executable, "-m", "agent", "demo", "--duration", "120", "--no-tui"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_hup_env(tmp_path))
    try:
        kids, workdir = _agents_running(proc.pid, tmp_path, "swtel-demo-")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert b"Traceback" not in err, err
    if signum == signal.SIGHUP:
        assert proc.returncode == 128 + signal.SIGHUP, err
        assert b"event timeline" not in out  # nobody reads it any more
    else:  # Ctrl-C: the timeline of what ran
        assert proc.returncode == 0 and b"event timeline" in out, err
    _assert_nothing_left(kids, workdir if signum == signal.SIGHUP else None)


def test_demo_live_view_leaves_nothing_behind_when_its_terminal_closes(tmp_path):
    """The real case: the terminal (here a pseudo-terminal's master) goes away under the live
    view; the kernel hangs the session up."""
    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.environ.update({"TERM": "xterm", "COLUMNS": "80", "LINES": "24", **_hup_env(tmp_path)})
        os.execv(sys.executable, [sys.executable, "-m", "agent", "demo", "--duration", "120"])
    try:
        _read_until(fd, b"swtel demo", 60)
        kids, workdir = _agents_running(pid, tmp_path, "swtel-demo-")
        _read_until(fd, b"events at the collector", 60)
    finally:
        os.close(fd)  # the terminal closes
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        raise AssertionError("swtel demo kept running after its terminal closed")
    assert os.waitstatus_to_exitcode(status) == 129  # stopped by the hangup, after cleaning up
    _assert_nothing_left(kids, workdir)


# ---------------------------------------------------------------- arguments that can never work (issue 24, item 12)


@pytest.mark.parametrize("argv,fragment", [
    (["demo", "--duration", "inf"], "argument --duration: expected a duration like 100ms or 2s, got 'inf'"),
    (["demo", "--duration", "nan"], "argument --duration: expected a duration like 100ms or 2s, got 'nan'"),
    (["demo", "--duration", "-5"], "argument --duration: must not be negative"),
    (["demo", "--duration", "0"], "argument --duration: must be more than 0"),
    (["demo", "--duration", "25h"], "argument --duration: must be at most 24h"),
    (["fabric", "--duration", "inf"], "argument --duration: expected a duration"),
    (["top", "--interval", "0"], "argument --interval: must be from 200ms to 1h, got '0'"),
    (["top", "--interval", "-1"], "argument --interval: must not be negative"),
    (["top", "--interval", "nan"], "argument --interval: expected a duration like 100ms or 2s, got 'nan'"),
    (["top", "--interval", "inf"], "argument --interval: expected a duration"),
    (["top", "-n", "0"], "argument --iterations/-n: must be from 1 to 1000000"),
    (["top", "--limit", "-3"], "argument --limit: must be from 1 to 1000000"),
])
def test_arguments_that_can_never_work_are_refused(argv, fragment):
    proc = subprocess.run([sys.executable, "-m", "agent", *argv, "--socket", "/nonexistent/x.sock"]
                          if argv[0] == "top" else [sys.executable, "-m", "agent", *argv],
                          cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_top_interval_takes_durations():
    from agent.cli import _parser

    args = _parser().parse_args(["top", "--interval", "500ms"])
    assert args.interval == 0.5
    assert _parser().parse_args(["demo", "--duration", "2m"]).duration == 120.0


def test_top_shows_a_fabric_s_devices_and_opens_one(tmp_path):
    """`swtel top --fabric DIR` on a running field fabric (no collector): every device of its
    topology.yaml with role, socket, up and open events (plain lines, checked against each
    agent's status); in a terminal j + Enter opens leaf-3, b goes back to the list; a stopped
    agent shows as down."""
    from agent.control.top import load_fabric
    from agent.tools.fabric import Fabric

    fabric = Fabric(tmp_path, None, "symbol-errors", start_ns=time.time_ns() - 2 * NS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def plain() -> list[str]:
        proc = subprocess.run([sys.executable, "-m", "agent", "top", "--fabric", str(tmp_path), "-n", "1"],
                              cwd=ROOT, capture_output=True, text=True, timeout=30, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    def rows(lines: list[str]) -> dict[str, list[str]]:
        # the devices' rows (the incidents their events form follow them)
        return {line.split()[0]: line.split() for line in lines[2:] if not line.startswith("INCIDENT ")}

    def status_events() -> dict[str, int]:
        return {sw.name: len(status_doc_of(sw.socket)["events"]["open"]) for sw in fabric.switches}

    fabric.start()
    try:
        assert [d.name for d in load_fabric(tmp_path)] == ["spine-1", "leaf-3", "host-1"]
        wait_until(lambda: all(r[2] == "up" for r in rows(plain()).values()), 30, "every agent up",
                   detail=lambda: "\n".join(plain()))
        # spine-1's symbol errors open events; the list's counts are the agents' own
        wait_until(lambda: (lambda r: int(r["spine-1"][3]) >= 1 and {n: int(v[3]) for n, v in r.items()}
                            == status_events())(rows(plain())), 20, "spine-1's events listed as its status has them")
        listed = rows(plain())
        assert {n: r[1] for n, r in listed.items()} == {"spine-1": "spine", "leaf-3": "leaf", "host-1": "host"}
        assert {n: r[-1] for n, r in listed.items()} == {sw.name: str(sw.socket) for sw in fabric.switches}
        pid, fd = _spawn_in_pty("top", "--fabric", str(tmp_path), "--interval", "0.5")
        _read_until(fd, b"3 devices, 3 up", 60)
        os.write(fd, b"j")
        # one key per read: the selection shows on leaf-3 (its row reversed) before the next
        _read_until(fd, re.compile(rb"\x1b\[(?:[0-9;]*;)?7(?:;[0-9;]*)?mleaf-3"), 30)
        os.write(fd, b"\r")
        _read_until(fd, b"swtel top \xe2\x80\x94 leaf-3", 60)  # the device's own view
        _read_until(fd, b"swp", 60)
        os.write(fd, b"b")
        _read_until(fd, b"3 devices", 60)  # back to the list
        leaf = next(sw for sw in fabric.switches if sw.name == "leaf-3")
        leaf.proc.terminate()
        assert leaf.proc.wait(10) == 0
        _read_until(fd, b"3 devices, 2 up", 60)
        code, _ = _quit_and_wait(pid, fd)
        assert code == 0
        assert rows(plain())["leaf-3"][2:5] == ["down", "-", "-"]
    finally:
        fabric.stop()


def status_doc_of(socket: Path) -> dict:
    """An agent's status over its control socket."""
    from agent.control.client import request

    return request(str(socket), "status")
