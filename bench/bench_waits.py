"""How long the things take that the tests only wait for (figures only, nothing asserted).

Issue 34: the tests judge behaviour (a deadline on an injected clock, an event waited for, work
counted) and leave the speeds to this file, so a loaded machine cannot fail them. Printed:

* the ASIC plugin proxy with a plugin that hangs: a read's timeout (configured 0.5 s) as it
  lands, abort() of a read in flight, close() of a helper stuck in read (CLOSE_TIMEOUT_S);
* a refused plugin: the loader's checks on a world-writable file and on a malformed ELF;
* dial-out's on_batch into an unreachable destination (it only enqueues);
* a control request answered while every slot is held by an idle client (eviction);
* the tick loop's schedule on a real clock: passes per interval and the wake-up lateness.

    python bench/bench_waits.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from array import array
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1e3:8.2f} ms  max {max(samples) * 1e3:8.2f} ms"


def _timed(call: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    try:
        call()
    except OSError:
        pass
    return time.perf_counter() - t0


def proxy_rows(rounds: int, workdir: Path) -> list[tuple[str, str]]:
    from agent.asic import HEADER
    from agent.asic.proxy import CLOSE_TIMEOUT_S, PluginProxy
    from tests.unit.test_plugin_faults import FAULTY_C

    src, so = workdir / "faulty.c", workdir / "faulty.so"
    src.write_text(textwrap.dedent(FAULTY_C))
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-I", str(Path(HEADER).parent), "-o", str(so), str(src)],
                   check=True, capture_output=True)
    so.chmod(0o755)
    timeout, aborted, closed = [], [], []
    for _ in range(rounds):
        p = PluginProxy(read_timeout_s=0.5)
        p.open(str(so), "hang=read")
        gen, *_ = p.layout()
        timeout.append(_timed(lambda p=p, gen=gen: p.read(gen, array("Q", bytes(16)))))
        p = PluginProxy(read_timeout_s=30.0)
        p.open(str(so), "hang=read")
        gen, *_ = p.layout()
        threading.Timer(0.1, p.abort).start()
        aborted.append(_timed(lambda p=p, gen=gen: p.read(gen, array("Q", bytes(16)))) - 0.1)
        p = PluginProxy(read_timeout_s=30.0)
        p.open(str(so), "hang=read")
        gen, *_ = p.layout()
        p.read(gen, array("Q", bytes(16)), 0.05)
        closed.append(_timed(p.close))
    return [("proxy: hung read, timeout 0.5 s, raised after", _ms(timeout)),
            ("proxy: hung read cut short by abort() after", _ms(aborted)),
            (f"proxy: close() of a helper stuck in read (CLOSE_TIMEOUT_S {CLOSE_TIMEOUT_S} s)", _ms(closed))]


def loader_rows(rounds: int, workdir: Path) -> list[tuple[str, str]]:
    from agent.asic.trust import PluginRefused, check_plugin

    writable, broken = workdir / "writable.so", workdir / "broken.so"
    shutil.copy(workdir / "faulty.so", writable)
    writable.chmod(0o757)
    data = bytearray((workdir / "faulty.so").read_bytes())
    data[60:62] = (0xFFFF).to_bytes(2, "little")  # e_shnum: a section table far larger than the file
    broken.write_bytes(bytes(data))
    broken.chmod(0o644)
    rows = []
    for label, path in (("world-writable", writable), ("malformed ELF", broken)):
        samples = []
        for _ in range(rounds * 20):
            t0 = time.perf_counter()
            try:
                check_plugin(str(path))
            except PluginRefused:
                pass
            samples.append(time.perf_counter() - t0)
        rows.append((f"plugin loader refuses a {label} file in", _ms(samples)))
    return rows


def dialout_rows(rounds: int) -> list[tuple[str, str]]:
    from agent.config import HostPort
    from agent.exporters.dialout import DialoutConfig, DialoutExporter
    from tests.gnmi_helpers import free_port
    from tests.unit.test_dialout import Feed

    feed = Feed(ports=4)
    cfg = DialoutConfig(name="bench", address=HostPort(f"127.0.0.1:{free_port()}"), insecure=True, queue=10)
    exp = DialoutExporter(cfg, "bench")
    exp.start(feed.store)
    try:
        batches = [feed.change(range(len(feed.table))) for _ in range(50 * rounds)]
        samples = []
        for b in batches:
            t0 = time.perf_counter()
            exp.on_batch(b)
            samples.append(time.perf_counter() - t0)
    finally:
        exp.stop(0)
    return [("dial-out on_batch into an unreachable destination", _ms(samples))]


def control_rows(rounds: int, workdir: Path) -> list[tuple[str, str]]:
    from agent.config import Control
    from agent.control import client
    from agent.control.server import ControlServer

    path = str(workdir / "ctl.sock")
    srv = ControlServer(Control(socket=path, group=None), {"status": lambda _r: {"now_ns": time.time_ns()}},
                        max_clients=8)
    srv.start()
    idle = []
    try:
        for _ in range(8):  # every slot held by a client that says nothing
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            idle.append(s)
        samples = []
        for _ in range(rounds * 4):
            t0 = time.perf_counter()
            client.request(path, "status", timeout_s=30.0)
            samples.append(time.perf_counter() - t0)
    finally:
        for s in idle:
            s.close()
        srv.stop()
    return [("control: status with every slot held by an idle client", _ms(samples))]


def schedule_rows(workdir: Path) -> list[tuple[str, str]]:
    from agent import config
    from agent.engine import Engine

    cfg = config.parse("interval: 50ms\nsources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}, "
                       f"system: {{interval: 50ms}}}}\ncontrol: {{socket: {workdir}/s.sock, group: null}}\n")
    late: list[float] = []
    eng = Engine(cfg)
    wake = eng.handoff.wake  # what the idle tick loop waits on (Engine._idle_until)

    class Waits:  # the loop's waits, timed: how late each wake-up after a full wait is
        def is_set(self) -> bool:
            return wake.is_set()

        def set(self) -> None:
            wake.set()

        def clear(self) -> None:
            wake.clear()

        def wait(self, timeout: float) -> bool:
            due = time.monotonic() + timeout
            woken = wake.wait(timeout)
            if not woken:  # (woken early by an ask or a stop: no lateness to tell)
                late.append(time.monotonic() - due)
            return woken

    eng.handoff.wake = Waits()  # type: ignore[assignment]
    eng.start()
    try:
        eng.ready.wait(10)
        ticks0, t0 = eng.ticks, time.monotonic()
        time.sleep(3.0)
        ticks, elapsed = eng.ticks - ticks0, time.monotonic() - t0
    finally:
        eng.stop()
    return [("tick loop at 50 ms: passes per second (20 expected), overruns",
             f"{ticks / elapsed:8.2f} /s  overruns {eng.overruns}"),
            ("tick loop: wake-up after the next source was due", _ms(late))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="swtel-bench-waits-"))
    os.chmod(workdir, 0o700)
    rows: list[tuple[str, str]] = []
    try:
        parts: list[tuple[str, Callable[[], list[tuple[str, str]]]]] = [
            ("proxy", lambda: proxy_rows(args.rounds, workdir)), ("loader", lambda: loader_rows(args.rounds, workdir)),
            ("dial-out", lambda: dialout_rows(args.rounds)), ("control", lambda: control_rows(args.rounds, workdir)),
            ("schedule", lambda: schedule_rows(workdir))]
        for name, part in parts:
            try:
                rows += part()
            except Exception as exc:  # noqa: BLE001 - figures only: one part's failure is printed
                rows.append((name, f"failed: {type(exc).__name__}: {exc}"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print("| what the tests wait for | how long it took here |\n|---|---|")
    for what, figure in rows:
        print(f"| {what:<{width}} | {figure} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
