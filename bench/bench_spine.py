"""What a switch costs: the built-in simulated spine (``sources.asic`` with plugin ``sim``,
``role=spine``: 68 ports, ~16,800 values, every detector on) at 100 ms, with each exporter
the agent ships, to receivers on loopback that count and discard what they get.

Each row starts ``python -m agent run`` afresh, waits for its first ticks and a warm-up,
then measures a steady-state window:

* **CPU**: user + system time of the agent and its plugin helper process (psutil, the agent's
  pid and its children) over the window, as % of one core;
* **PSS** of each (psutil ``memory_full_info().pss``) at the window's end;
* **messages a tick**: gRPC messages (dial-out; OTLP requests) counted at the receiver over
  the window, divided by the window's ticks; jsonl: lines a tick (the exporter's ``sent``);
* **overruns**: the tick loop's ``overruns`` in ``swtel status --json`` (control socket): in
  the window, from one second after the first read to the window's end, and since the start;
* **bytes per value**: (agent + helper PSS) / the values the sources hold (their ``counters``).

Also: the jsonl formatter's cost per line (C, its Python twin, and json.dumps of a dict as the
exporter did before); the floor under a Python gRPC client (a bare one streaming what the
dial-out row sent, and the interpreter alone: what any process that dials out with grpcio
pays; the agent's dial-out runs on grpc's C core with the C backend); and with
``--memory`` where the agent's Python memory goes
(tracemalloc, top 10 modules). Figures only: nothing is asserted. The machine is shared:
compare rows of one run as ratios, not with another run's.

    python bench/bench_spine.py [--seconds 20] [--warmup 10] [--quick] [--memory] [--rows jsonl,...]
                                [--json FILE] [--baseline TREE] [--installed]

``--baseline TREE`` runs each row first with another checkout's agent (e.g. ``git archive``
of the commit before a change, its extension built), printed as ``[baseline]`` above it.

``--installed`` (as root, the .deb installed) runs each row with the installed package's
agent instead of this tree's, as its systemd unit does: ``/usr/bin/swtel run`` (Debian's
``/usr/bin/python3 -I`` with /usr/lib/swtel and its vendor directory on the path, Debian's
python3-grpcio and python3-protobuf) as user ``swtel`` (setpriv ``--reuid --regid
--init-groups``), its config and control socket in a directory that user owns. The
receivers, the measuring and the status queries are this process's, as for the tree's
rows; the table labels the rows ``[installed .deb, user swtel]``.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.lifetime import exit_on_sigterm, with_parent_death  # noqa: E402 - after the path setup

SIM = "role=spine seed=1"
INSTALLED_SWTEL = "/usr/bin/swtel"  # the .deb's launcher: Debian's python3 -I, /usr/lib/swtel on the path
INSTALLED_USER = "swtel"  # the units' User=
INSTALLED_LABEL = "[installed .deb, user swtel]"
NOKIA_METHOD = "/Nokia.SROS.DialoutTelemetry/Publish"
OTLP_METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"


# ---------------------------------------------------------------- receivers: count, discard


class Counter:
    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.messages += 1
            self.bytes += n


class GrpcSink:
    """A gRPC server that counts dial-out messages (Nokia Publish: an empty reply to each, as
    gnmic does) and OTLP Export requests (an empty reply), and decodes nothing."""

    def __init__(self) -> None:
        import grpc

        self.dialout, self.otlp = Counter(), Counter()

        def publish(requests, context):
            for raw in requests:
                self.dialout.add(len(raw))
                yield b""

        def export(raw, context):
            self.otlp.add(len(raw))
            return b""

        handlers = {
            "Nokia.SROS.DialoutTelemetry": {"Publish": grpc.stream_stream_rpc_method_handler(publish)},
            "opentelemetry.proto.collector.metrics.v1.MetricsService": {
                "Export": grpc.unary_unary_rpc_method_handler(export)},
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                  options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        self.server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(svc, methods) for svc, methods in handlers.items()])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0)


class HttpSink:
    """A remote-write receiver that reads each request and answers 204."""

    def __init__(self) -> None:
        self.requests = Counter()
        counter = self.requests

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                counter.add(n)
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- rows


@dataclass
class Row:
    label: str
    exporters: Callable[[GrpcSink, HttpSink], str]  # the exporters section's lines
    interval: str = "100ms"
    insights: bool = True
    quick: bool = True  # run with --quick too
    result: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)  # --baseline's tree, same row


def _dialout(g: GrpcSink, h: HttpSink) -> str:
    return f"  dialout: [{{name: c, address: '127.0.0.1:{g.port}', insecure: true}}]\n"


def _rw(g: GrpcSink, h: HttpSink) -> str:
    return f"  remote_write: [{{name: rw, url: 'http://127.0.0.1:{h.port}/api/v1/write', interval: 1s}}]\n"


ROWS = [
    Row("no exporter, insights off", lambda g, h: "", insights=False, quick=False),
    Row("no exporter", lambda g, h: ""),
    Row("dial-out (nokia, per-tick, the default)", _dialout),
    Row("dial-out + remote write at 1 s", lambda g, h: _dialout(g, h) + _rw(g, h), quick=False),
    Row("OTLP at 1 s", lambda g, h: f"  otlp: {{endpoint: '127.0.0.1:{g.port}', insecure: true, interval: 1s}}\n"),
    Row("jsonl to /dev/null", lambda g, h: "  jsonl: {path: /dev/null}\n"),
    Row("dial-out per-tick at **10 ms**", _dialout, interval="10ms"),
]


def config_text(workdir: Path, row: Row, g: GrpcSink, h: HttpSink) -> str:
    exporters = row.exporters(g, h)
    return "".join([
        f"interval: {row.interval}\n",
        "sources:\n",
        "  netdev: {enabled: false}\n",  # the host's own NICs are not the switch's ports
        "  ethtool: {enabled: false}\n",
        f"  asic: {{enabled: true, plugin: sim, config: '{SIM}'}}\n",
        "exporters:\n" + exporters if exporters else "",
        f"insights: {{enabled: {'true' if row.insights else 'false'}}}\n",
        f"control: {{socket: {workdir / 'swtel.sock'}, group: null}}\n",
    ])


def status(workdir: Path) -> dict[str, Any]:
    from agent.control import client

    return client.request(str(workdir / "swtel.sock"), "status", timeout_s=5.0)


def _cpu(procs: list) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except Exception:  # noqa: BLE001 - a helper that went away counts nothing more
            pass
    return total


def _pss(p) -> int:
    try:
        return p.memory_full_info().pss
    except Exception:  # noqa: BLE001 - gone: nothing to count
        return 0


def _agent_env(root: Path = ROOT) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "GRPC_VERBOSITY": "NONE"}


def _installed_env() -> dict[str, str]:
    """What the unit gives the installed agent: Debian's PATH, none of this venv's variables
    (SWTEL_PUREPYTHON among them; the launcher's -I already drops PYTHONPATH)."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "GRPC_VERBOSITY": "NONE"}


def installed_problem() -> str | None:
    """Why --installed cannot run here, or None."""
    if os.geteuid() != 0:
        return "--installed runs the agent as user swtel: run the bench as root"
    if not os.access(INSTALLED_SWTEL, os.X_OK):
        return f"--installed: no {INSTALLED_SWTEL}: install the .deb (packaging/ci-test.sh, SWTEL_CI_KEEP=1)"
    try:
        pwd.getpwnam(INSTALLED_USER)
    except KeyError:
        return f"--installed: no user {INSTALLED_USER} (the .deb's postinst makes it)"
    return None


def installed_versions() -> str:
    """The installed agent's version and the Debian libraries it runs on, as one phrase."""
    probe = ("import sys; sys.path[0:0] = ['/usr/lib/swtel', '/usr/lib/swtel/vendor']; "
             "import grpc, google.protobuf, platform; from agent import __version__; "
             "print(f'swtel {__version__} on Debian python3 {platform.python_version()}, grpcio {grpc.__version__}, '"
             "f'protobuf {google.protobuf.__version__}')")
    try:
        out = subprocess.run(["/usr/bin/python3", "-I", "-c", probe], capture_output=True, text=True, timeout=60,
                             env=_installed_env())
        return out.stdout.strip() or f"(versions unknown: {out.stderr.strip()[-200:]})"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"(versions unknown: {exc!r})"


def run_row(row: Row, seconds: float, warmup: float, g: GrpcSink, h: HttpSink,
            root: Path | None = ROOT) -> dict[str, Any]:
    """One row's figures, with the agent of the source tree ``root`` (this one, or --baseline's),
    or with ``root=None`` the installed package's, as user swtel."""
    import psutil

    workdir = Path(tempfile.mkdtemp(prefix="swtel-spine-"))
    start = g.dialout.messages
    cfg = workdir / "swtel.yaml"
    cfg.write_text(config_text(workdir, row, g, h))
    log = open(workdir / "agent.log", "w")  # noqa: SIM115 - closed below
    if root is None:
        # mkdtemp's 0700 directory is root's: user swtel must read the config and make its socket there
        account = pwd.getpwnam(INSTALLED_USER)
        os.chown(workdir, account.pw_uid, account.pw_gid)
        os.chmod(workdir, 0o755)
        os.chmod(cfg, 0o644)
        argv = with_parent_death([INSTALLED_SWTEL, "run", "-c", str(cfg)], user=INSTALLED_USER)
        cwd, env = workdir, _installed_env()
    else:
        argv = with_parent_death([sys.executable, "-m", "agent", "run", "-c", str(cfg)])
        cwd, env = root, _agent_env(root)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90  # a start on a loaded machine (CI beside other work) takes >30 s
        while True:  # the first ticks: the control socket answers and the asic source has read
            if proc.poll() is not None:
                raise RuntimeError(f"agent exited: {(workdir / 'agent.log').read_text()[-2000:]}")
            try:
                st = status(workdir)
                if st["sources"].get("asic", {}).get("reads", 0) > 0:
                    break
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("agent not up in 90 s")
            time.sleep(0.2)
        # issue 35: "0 overruns after the first second" (the snapshot on connecting and the
        # first encode of each table come in that second)
        time.sleep(min(1.0, warmup))
        s_first = status(workdir)
        time.sleep(max(warmup - 1.0, 0.0))
        agent = psutil.Process(proc.pid)
        procs = [agent, *agent.children(recursive=True)]
        s0, c0, t0 = status(workdir), _cpu(procs), time.monotonic()
        d0, o0, r0, db0 = g.dialout.messages, g.otlp.messages, h.requests.messages, g.dialout.bytes
        time.sleep(seconds)
        s1, c1, t1 = status(workdir), _cpu(procs), time.monotonic()
        d1, o1, r1, db1 = g.dialout.messages, g.otlp.messages, h.requests.messages, g.dialout.bytes
        helpers = agent.children(recursive=True)
        pss_agent, pss_helper = _pss(agent), sum(_pss(p) for p in helpers)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    wall = t1 - t0
    interval = s1["sources"]["asic"]["interval_s"]
    ticks = wall / interval
    values = sum(src.get("counters", 0) for src in s1["sources"].values())

    def sent(st: dict) -> int:
        return sum(e.get("sent", 0) or 0 for e in st["exporters"].values())

    out = {
        "cpu_pct": (c1 - c0) / wall * 100,
        "pss_agent": pss_agent, "pss_helper": pss_helper,
        "values": values,
        "bytes_per_value": (pss_agent + pss_helper) / values if values else None,
        "overruns_window": s1["tick"]["overruns"] - s0["tick"]["overruns"],
        "overruns_after_1s": s1["tick"]["overruns"] - s_first["tick"]["overruns"],
        "overruns_total": s1["tick"]["overruns"],
        "asic_reads": s1["sources"]["asic"]["reads"] - s0["sources"]["asic"]["reads"],
        "ticks": ticks,
        "dialout_per_tick": (d1 - d0) / ticks,
        "dialout_bytes_per_tick": (db1 - db0) / ticks,
        "dialout_before_window": d0 - start,  # the snapshot on connecting, and the warm-up's ticks
        "otlp_per_tick": (o1 - o0) / ticks,
        "rw_requests": r1 - r0,
        "exporter_sent_per_tick": (sent(s1) - sent(s0)) / ticks,
        "exporters": {k: {"sent": v.get("sent"), "dropped": v.get("dropped"), "state": v.get("state")}
                      for k, v in s1["exporters"].items()},
        "window_s": wall,
        "version": s1.get("version"), "backend": s1.get("backend"),
        "asic_helper": s1["sources"]["asic"].get("helper"),
    }
    shutil.rmtree(workdir, ignore_errors=True)
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f}"


def messages_cell(row: Row, r: dict[str, Any]) -> str:
    parts = []
    if r["dialout_per_tick"]:
        parts.append(f"{r['dialout_per_tick']:.1f}")
    if r["otlp_per_tick"]:
        parts.append(f"{r['otlp_per_tick']:.1f} (OTLP requests)")
    if r["rw_requests"]:
        parts.append(f"+ {r['rw_requests'] / r['window_s']:.1f} remote-write requests a second")
    if "jsonl" in r["exporters"]:
        parts.append(f"– ({r['exporter_sent_per_tick']:.0f} lines a tick, one write)")
    return " ".join(parts) or "–"


def table(rows: list[Row], result_label: str = "") -> str:
    """The markdown table; ``result_label`` follows each row's label for this run's agent (e.g.
    the installed package's)."""
    lines = ["| configuration | agent + helper CPU (% of a core) | PSS agent + helper (MiB) | bytes a value "
             "| gRPC messages a tick | overruns (window / after the first second / since start) |",
             "|---|---:|---:|---:|---|---:|"]
    for row in rows:
        this = f"{row.label} {result_label}".rstrip()
        for label, r in ((f"{row.label} [baseline]", row.baseline), (this, row.result)):
            if not r:
                continue
            if "error" in r:
                lines.append(f"| {label} | failed: {r['error'][:80]} | | | | |")
                continue
            lines.append(f"| {label} | {r['cpu_pct']:.1f} % | {_mib(r['pss_agent'])} + {_mib(r['pss_helper'])} "
                         f"| {r['bytes_per_value']:,.0f} | {messages_cell(row, r)} "
                         f"| {r['overruns_window']} / {r.get('overruns_after_1s', '–')} / {r['overruns_total']} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the floor under dial-out


def floor_inner(port: int, per_tick: float, size: int, seconds: float) -> int:
    """A bare gRPC client: what the dial-out exporter loads (grpc, gNMI's messages; glibc's
    arenas capped and the start's free pages trimmed, as the agent does) streaming ``per_tick``
    messages of ``size`` bytes a tick at 100 ms to the receiver at ``port`` for ``seconds``."""
    import queue

    from agent import malloc

    malloc.cap_arenas()
    import grpc
    from pygnmi.spec.v080 import gnmi_pb2  # noqa: F401 - loaded by the exporter: its memory counts

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    messages: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    call = channel.stream_stream(NOKIA_METHOD)(iter(messages.get, None))
    threading.Thread(target=lambda: sum(1 for _ in call), daemon=True).start()  # the replies, drained
    payload, credit = os.urandom(size), 0.0
    start = next_tick = time.monotonic()
    trimmed = False
    while time.monotonic() - start < seconds:
        credit += per_tick
        while credit >= 1.0:
            messages.put(payload)
            credit -= 1.0
        if not trimmed and time.monotonic() - start > 2.0:
            trimmed = malloc.release_free_pages() or True  # the agent's trim after its start
        next_tick += 0.1
        time.sleep(max(next_tick - time.monotonic(), 0.0))
    messages.put(None)
    channel.close()
    return 0


def measure_floor(args: argparse.Namespace, g: GrpcSink, per_tick: float, size: int) -> dict[str, Any]:
    """CPU and PSS of :func:`floor_inner` and of a bare interpreter, windows as the rows'."""
    import psutil

    out: dict[str, Any] = {"per_tick": per_tick, "size": size}
    for name, argv in (("grpc", [sys.executable, __file__, "--floor-inner", str(g.port), str(per_tick), str(size),
                                 str(args.warmup + args.seconds + 5)]),
                       ("interpreter", [sys.executable, "-c", "import time; time.sleep(86400)"])):
        proc = subprocess.Popen(with_parent_death(argv), cwd=ROOT, env=_agent_env())
        try:
            time.sleep(args.warmup)
            p = psutil.Process(proc.pid)
            c0, t0 = _cpu([p]), time.monotonic()
            time.sleep(args.seconds)
            out[name] = {"cpu_pct": (_cpu([p]) - c0) / (time.monotonic() - t0) * 100, "pss": _pss(p)}
        finally:
            proc.kill()
            proc.wait()
    return out


def floor_text(floor: dict[str, Any], rows: list[Any]) -> str:
    """The floor's figures, and what the dial-out row added to the no-exporter row's in this run
    (the agent's dial-out runs on grpc's C core with the C backend, not on the Python client)."""
    grpc_, bare = floor["grpc"], floor["interpreter"]
    text = (f"\nthe floor under a Python gRPC client: a bare one (grpc and gNMI's messages loaded, arenas capped, "
            f"trimmed) streaming what the dial-out row sent, {floor['per_tick']:.1f} messages of "
            f"{floor['size'] / 1e3:,.0f} kB a tick at 100 ms, to the same receiver: **{grpc_['cpu_pct']:.1f} % of a "
            f"core, {grpc_['pss'] / 2**20:.1f} MiB PSS**; the interpreter alone: {bare['pss'] / 2**20:.1f} MiB. "
            f"So grpcio's client adds {(grpc_['pss'] - bare['pss']) / 2**20:.1f} MiB to any process that dials "
            "out with it.")
    by_label = {row.label: row.result for row in rows}
    none, dial = by_label.get("no exporter"), next(
        (r for label, r in by_label.items() if label.startswith("dial-out (nokia")), None)
    if none and dial:
        mib = (dial["pss_agent"] + dial["pss_helper"] - none["pss_agent"] - none["pss_helper"]) / 2**20
        text += (f" The agent's dial-out (grpc's C core with the C backend) added {mib:.1f} MiB and "
                 f"{dial['cpu_pct'] - none['cpu_pct']:.1f} points of a core to the no-exporter row in this run.")
    return text


# ---------------------------------------------------------------- jsonl's formatter, per line


def jsonl_cost(repeat: int) -> list[tuple[str, float]]:
    """µs per line of one spine-sized batch: C, the Python twin, json.dumps of a dict (before)."""
    from agent import _fallback
    from agent.counters import F_NEW, OPENCONFIG, Batch, Container, CounterSpec, CounterTable
    from agent.exporters import jsonl

    leaves = ["in-pkts", "out-pkts", "in-octets", "out-octets", "in-errors", "in-discards"]
    specs = [CounterSpec(Container(OPENCONFIG, f"/interfaces/interface[name=swp{p}s{s}]/state/counters"), leaf)
             for p in range(64) for s in range(4) for leaf in leaves]
    table_ = CounterTable("t", specs)
    n = len(specs)
    idx = array("I", range(0, n, 2))  # half the values changed, a tenth of them new
    batch = Batch("t", time.time_ns(), table_, idx, array("Q", range(10**9, 10**9 + n)), array("q", [1234] * len(idx)),
                  bytes(F_NEW if k % 10 == 0 else 0 for k in range(len(idx))))
    paths = jsonl.json_paths(table_)
    lines = len(batch.indices)

    def before() -> None:
        out = []
        for _spec, path, value, delta, flags in batch.items():
            rec: dict[str, Any] = {"ts": batch.ts_ns, "path": path, "value": value, "delta": delta}
            if flags & F_NEW:
                rec["new"] = True
            out.append(json.dumps(rec))
        ("\n".join(out) + "\n").encode()

    out = []
    fns: list[tuple[str, Callable[[], Any]]] = []
    try:
        from agent import _swtel

        fns.append(("C (agent/_ext/jsonl.c)", lambda: _swtel.jsonl_lines(
            batch.ts_ns, batch.indices, batch.values, batch.deltas, batch.flags, paths)))
    except ImportError:
        pass
    fns.append(("Python twin (agent/_fallback/jsonl.py)", lambda: _fallback.jsonl_lines(
        batch.ts_ns, batch.indices, batch.values, batch.deltas, batch.flags, paths)))
    fns.append(("json.dumps of a dict a line (the exporter before)", before))
    for label, fn in fns:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        out.append((label, best / lines * 1e6))
    return out


# ---------------------------------------------------------------- --memory: tracemalloc in the agent


def memory_inner(cfg: str, after_s: float, out: str) -> int:
    """Run the agent in this process under tracemalloc; ``after_s`` after its control socket
    appeared, take a snapshot, stop
    the agent (SIGTERM to itself, as systemd would) and then write the breakdown by module to
    ``out`` (grouped after the agent stopped: its threads no longer compete for the GIL)."""
    import tracemalloc

    tracemalloc.start(8)
    sys.modules.setdefault("rich", None)  # type: ignore[arg-type] - as `swtel run` does
    taken: list[Any] = []

    def snap() -> None:
        sock = Path(cfg).parent / "swtel.sock"
        while not sock.exists():  # started (its SIGTERM handler in place), then after_s in
            time.sleep(0.1)
        time.sleep(after_s)
        taken.append((tracemalloc.take_snapshot(), tracemalloc.get_traced_memory()[0]))
        tracemalloc.stop()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=snap, daemon=True).start()
    from agent import runner
    from agent.cli import main

    runner.exit_now = lambda code: None  # the agent ends its process with os._exit: here it returns

    rc = main(["run", "-c", cfg])
    if not taken:
        return rc or 1
    snapshot, total = taken[0]
    by: dict[str, list[int]] = {}
    stdlib = os.path.dirname(os.__file__) + os.sep
    for stat in snapshot.statistics("traceback"):
        frames = list(stat.traceback)  # oldest first: the allocation is the last
        # the allocating file names the owner, unless it is a helper (the stdlib, a dataclass'
        # generated __init__): then the nearest caller that is not
        where = next((f for f in reversed(frames)
                      if not (f.filename == "<string>" or (f.filename.startswith(stdlib)
                                                          and "-packages" not in f.filename))),
                     frames[-1])
        acc = by.setdefault(_module_name(where.filename), [0, 0, {}])
        acc[0] += stat.size
        acc[1] += stat.count
        acc[2][where.lineno] = acc[2].get(where.lineno, 0) + stat.size
    Path(out).write_text(json.dumps({"total": total, "by": by}))
    return rc


def _module_name(filename: str) -> str:
    p = Path(filename)
    try:
        return ".".join(p.relative_to(ROOT).with_suffix("").parts)
    except ValueError:
        pass
    parts = p.parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            rest = parts[parts.index(anchor) + 1:]
            return ".".join(Path(*rest).with_suffix("").parts[:2])
    if "lib" in parts and len(parts) > parts.index("lib") + 2:
        return "stdlib " + Path(parts[-1]).stem
    return filename


def memory(seconds: float, g: GrpcSink, h: HttpSink) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="swtel-spine-mem-"))
    row = ROWS[2]  # dial-out per tick: the default install
    cfg = workdir / "swtel.yaml"
    cfg.write_text(config_text(workdir, row, g, h))
    out = workdir / "mem.json"
    with open(workdir / "agent.log", "w") as log:
        subprocess.run([sys.executable, __file__, "--memory-inner", str(cfg), str(seconds), str(out)], cwd=ROOT,
                       env=_agent_env(), stdout=log, stderr=subprocess.STDOUT, timeout=seconds + 300)
    if not out.exists():
        return "tracemalloc: no figures (see the agent log)\n" + (workdir / "agent.log").read_text()[-2000:]
    doc = json.loads(out.read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    top = sorted(doc["by"].items(), key=lambda kv: -kv[1][0])[:10]
    lines = [f"Python allocations of the agent ({row.label}, {seconds:.0f} s in, tracemalloc: "
             f"{doc['total'] / 2**20:.1f} MiB traced; tracemalloc's own cost not included), by the allocating "
             "module (for the stdlib's helpers and generated code: their nearest caller outside them); "
             "`<frozen importlib…>` is imported modules' code and data:", "",
             "| module | MiB | blocks | its largest lines (line: MiB) |", "|---|---:|---:|---|"]
    for name, (size, count, by_line) in top:
        big = sorted(by_line.items(), key=lambda kv: -kv[1])[:3]
        lines.append(f"| {name} | {size / 2**20:.2f} | {count:,} | "
                     + ", ".join(f"{ln}: {b / 2**20:.2f}" for ln, b in big) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="steady-state window of each row")
    ap.add_argument("--warmup", type=float, default=10.0, help="after the first read, before the window")
    ap.add_argument("--quick", action="store_true", help="CI: 4 s windows, 3 s warm-up, 5 of the 7 rows (~90 s)")
    ap.add_argument("--memory", action="store_true", help="also tracemalloc's breakdown by module (slow)")
    ap.add_argument("--rows", help="only the rows whose label contains one of these (comma-separated)")
    ap.add_argument("--json", help="write the raw figures here")
    ap.add_argument("--baseline", type=Path, metavar="TREE",
                    help="also run each row with the agent of another source tree (its extension built), "
                         "just before this tree's: before/after side by side in one run")
    ap.add_argument("--installed", action="store_true",
                    help=f"run each row with the installed .deb's agent ({INSTALLED_SWTEL}, Debian's python3) as "
                         f"user {INSTALLED_USER}, as its unit does, instead of this tree's (as root)")
    ap.add_argument("--memory-inner", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--floor-inner", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_inner:
        cfg, after, out = args.memory_inner
        return memory_inner(cfg, float(after), out)
    if args.floor_inner:
        port, per_tick, size, seconds = args.floor_inner
        return floor_inner(int(port), float(per_tick), int(size), float(seconds))
    if args.installed:
        if args.memory:
            sys.exit("--memory traces this tree's agent in-process: not with --installed")
        problem = installed_problem()
        if problem:
            sys.exit(problem)
    else:
        from agent import asic

        if asic.builtin_path("sim") is None:
            sys.exit("the sim plugin is not built: python setup.py build_ext --inplace")
    if args.quick:
        args.seconds, args.warmup = min(args.seconds, 4.0), min(args.warmup, 3.0)
    rows = [r for r in ROWS if r.quick or not args.quick]
    if args.rows:
        rows = [r for r in rows if any(w.strip() in r.label for w in args.rows.split(","))]
    g, h = GrpcSink(), HttpSink()
    load0 = os.getloadavg()[0]
    try:
        for row in rows:
            this: Path | None = None if args.installed else ROOT  # None: the installed package's agent
            runs = [("result", this)] if args.baseline is None else [("baseline", args.baseline.resolve()),
                                                                       ("result", this)]
            for attr, root in runs:
                try:
                    setattr(row, attr, run_row(row, args.seconds, args.warmup, g, h, root))
                except Exception as exc:  # noqa: BLE001 - one row's failure is shown, the others still run
                    setattr(row, attr, {"error": repr(exc)})
        floor = None
        dialout = next((row.result for row in rows if row.label.startswith("dial-out (nokia")), {})
        if dialout.get("dialout_per_tick") and not args.installed:
            size = int(dialout["dialout_bytes_per_tick"] / dialout["dialout_per_tick"])
            floor = measure_floor(args, g, dialout["dialout_per_tick"], size)
        report(args, rows, load0, floor)
        if args.memory:
            print("\n" + memory(20.0, g, h))
    finally:
        g.stop()
        h.stop()
    return 0


def report(args: argparse.Namespace, rows: list[Row], load0: float, floor: dict[str, Any] | None = None) -> None:
    from agent import _backend

    if args.installed:
        backends = sorted({str(r.result.get("backend")) for r in rows if "backend" in r.result}) or ["?"]
        agent = (f"the installed package's agent ({installed_versions()}; backend {', '.join(backends)}; "
                 f"as user {INSTALLED_USER})")
    else:
        agent = f"this tree's agent (backend {_backend.NAME})"
    print(f"\nsimulated spine ({SIM}: 68 ports, every detector on unless said), {agent} at 100 ms unless "
          f"said; {args.seconds:.0f} s windows after {args.warmup:.0f} s of warm-up; "
          f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} CPUs)\n")
    print(table(rows, INSTALLED_LABEL if args.installed else ""))
    helpers = sorted({str(r.get("asic_helper")) for row in rows for r in (row.baseline, row.result)
                      if "asic_helper" in r})
    if helpers:
        print(f"\nthe ASIC plugin's helper (status sources.asic.helper): {', '.join(helpers)}")
    before = [(row.label, row.result["dialout_before_window"]) for row in rows
              if row.result.get("dialout_before_window")]
    if before:
        print("\ndial-out messages from connecting to the window's start (the snapshot, then the warm-up's "
              "ticks): " + "; ".join(f"{label}: {n:,}" for label, n in before))
    if floor:
        print(floor_text(floor, rows))
    cost: list[tuple[str, float]] = []
    if not args.installed:  # this tree's formatter: not the package's figure
        print("\njsonl's formatting, one batch of a spine's size, best of 20, µs a line:\n")
        cost = jsonl_cost(20)
        for label, us in cost:
            print(f"  {label:52} {us:7.3f} µs  ({us / cost[0][1]:5.1f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"agent": "installed" if args.installed else str(ROOT),
                                               "rows": {r.label: r.result for r in rows}, "jsonl_us_per_line": cost,
                                               "dialout_floor": floor},
                                              indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
