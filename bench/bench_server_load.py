"""Client load against the tick loop (issue 33, item 4): does the dial-in server's load reach
the agent's ticks?

Two agents run side by side, started together on the same machine (the clients come once
both have run ``--settle`` seconds): the built-in simulated
spine (``sources.asic`` plugin ``sim``, ``role=spine``: 68 ports, ~16,800 values) at 100 ms,
the gNMI dial-in server on loopback (plaintext, or ``--tls``). One is left **idle**; the other
gets **40 idle Subscribe streams** (each its own connection, ON_CHANGE on one port's
``oper-status``: subscribed, then quiet) and **10 clients flooding** it for ``--seconds``: 5
ask Get of the whole ``/interfaces`` tree back to back, 5 send Polls (POLL mode, the same
tree) as fast as the answers come, each reconnecting when refused. Every client connects from
127.0.0.1, so the per-address caps are raised to let 50 connections in
(``max_rpcs_per_peer``, ``max_subscribers``: 64).

Two rounds: the **shipped rate limit** (``max_requests_per_second`` 20 per address: most of
the flood is refused RESOURCE_EXHAUSTED) and the **limit lifted** (10,000: every request
served, the worst a client can do when the operator raises the limit).

The window opens ``--warmup`` seconds after every idle stream has had its sync_response
(their connecting is printed on its own line: 40 snapshots and warm-ups at once).
Printed per agent: the tick loop's missed ticks in the window (``tick.overruns`` of ``swtel
status --json``; a missed tick is one the loop skipped because it ran late), the longest stall
(``longest_stall``: the most polls a source missed at once), ticks; for the loaded one the
Get and Poll answers and refusals. 0 overruns is the goal. Figures only, nothing asserted; the
machine is shared, so compare the two agents of one round, not runs.

    python bench/bench_server_load.py [--seconds 15] [--quick] [--tls] [--pure] [--rounds shipped,lifted]
                                      [--clients idle,get,poll]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.lifetime import exit_on_sigterm, with_parent_death  # noqa: E402 - after the path setup

SIM = "role=spine seed=1"
IDLE_STREAMS, GET_CLIENTS, POLL_CLIENTS = 40, 5, 5
# each client its own TCP connection (grpc would otherwise share one per target)
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_text(workdir: Path, port: int, rate: float, tls: Any) -> str:
    server = (f"{{listen: '127.0.0.1:{port}', max_subscribers: 64, max_rpcs_per_peer: 64, "
              f"max_requests_per_second: {rate:g}")
    server += (f", tls: {{cert: '{tls.server_cert}', key: '{tls.server_key}'}}}}" if tls else ", insecure: true}")
    return "".join([
        "interval: 100ms\n",
        "sources:\n",
        "  netdev: {enabled: false}\n",  # the host's own NICs are not the switch's ports
        "  ethtool: {enabled: false}\n",
        f"  asic: {{enabled: true, plugin: sim, config: '{SIM}'}}\n",
        f"exporters:\n  server: {server}\n",
        f"control: {{socket: {workdir / 'swtel.sock'}, group: null}}\n",
    ])


def status(workdir: Path) -> dict[str, Any]:
    from agent.control import client

    return client.request(str(workdir / "swtel.sock"), "status", timeout_s=10.0)


class Agent:
    def __init__(self, name: str, rate: float, tls: Any, pure: bool) -> None:
        self.name = name
        self.workdir = Path(tempfile.mkdtemp(prefix=f"swtel-load-{name}-"))
        self.port = free_port()
        cfg = self.workdir / "swtel.yaml"
        cfg.write_text(config_text(self.workdir, self.port, rate, tls))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GRPC_VERBOSITY": "NONE"}
        if pure:
            env["SWTEL_PUREPYTHON"] = "1"
        self.log = open(self.workdir / "agent.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(with_parent_death([sys.executable, "-m", "agent", "run", "-c", str(cfg)]),
                                     cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_up(self, bound_s: float = 60.0) -> None:
        deadline = time.monotonic() + bound_s
        while True:  # the control socket answers and the asic source has read
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited: {(self.workdir / 'agent.log').read_text()[-2000:]}")
            try:
                if status(self.workdir)["sources"].get("asic", {}).get("reads", 0) > 0:
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent {self.name} not up in {bound_s:.0f} s")
            time.sleep(0.2)

    def status(self) -> dict[str, Any]:
        return status(self.workdir)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------- the clients


class Load:
    """40 idle streams and 10 flooding clients against one agent, until ``stop``."""

    def __init__(self, port: int, tls: Any, kinds: tuple[str, ...] = ("idle", "get", "poll")) -> None:
        import grpc

        self.kinds = kinds
        self.grpc = grpc
        self.target = f"127.0.0.1:{port}"
        self.creds = grpc.ssl_channel_credentials(tls.ca.read_bytes()) if tls else None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.threads: list[threading.Thread] = []
        self.channels: list[Any] = []
        self.idle_calls: list[Any] = []
        self.synced = threading.Semaphore(0)  # one release per idle stream's sync_response

    def _channel(self) -> Any:
        options = [*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", "localhost")] if self.creds else CHANNEL_OPTIONS
        ch = (self.grpc.secure_channel(self.target, self.creds, options=options) if self.creds
              else self.grpc.insecure_channel(self.target, options=options))
        self.channels.append(ch)
        return ch

    def _count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def _code(self, exc: Exception) -> str:
        code = exc.code() if hasattr(exc, "code") else None
        return code.name if code is not None else type(exc).__name__

    def start(self) -> None:
        from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

        self.pb, self.stub_of = gnmi_pb2, gnmi_pb2_grpc.gNMIStub
        for i in range(IDLE_STREAMS if "idle" in self.kinds else 0):
            self._idle(i)
        for i in range(GET_CLIENTS if "get" in self.kinds else 0):
            self._thread(self._get_flood, f"get-{i}")
        for i in range(POLL_CLIENTS if "poll" in self.kinds else 0):
            self._thread(self._poll_flood, f"poll-{i}")

    def wait_synced(self, bound_s: float) -> int:
        """How many idle streams had their sync_response within ``bound_s``."""
        deadline = time.monotonic() + bound_s
        n = 0
        while n < (IDLE_STREAMS if "idle" in self.kinds else 0):
            if not self.synced.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
            n += 1
        return n

    def _thread(self, fn: Any, name: str) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self.threads.append(t)

    def _path(self, text: str) -> Any:
        from agent.gnmi.paths import to_proto

        return to_proto(text)

    def _idle(self, i: int) -> None:
        pb = self.pb
        path = self._path(f"/interfaces/interface[name=swp{i % 32 + 1}]/state/oper-status")
        req = pb.SubscribeRequest(subscribe=pb.SubscriptionList(
            mode=pb.SubscriptionList.STREAM, encoding=pb.JSON_IETF,
            subscription=[pb.Subscription(path=path, mode=pb.ON_CHANGE)]))
        stop = self.stop

        def requests() -> Any:
            yield req
            stop.wait()  # no half-close: subscribed until the round ends

        call = self.stub_of(self._channel()).Subscribe(requests())
        self.idle_calls.append(call)

        def drain() -> None:
            try:
                for resp in call:
                    if resp.sync_response:
                        self.synced.release()
                self._count("idle ended OK")
            except self.grpc.RpcError as exc:
                if not stop.is_set():
                    self._count(f"idle ended {self._code(exc)}")

        self._thread(drain, f"idle-{i}")

    def _get_flood(self) -> None:
        pb = self.pb
        stub = self.stub_of(self._channel())
        req = pb.GetRequest(path=[self._path("/interfaces")], encoding=pb.JSON_IETF)
        while not self.stop.is_set():
            try:
                stub.Get(req, timeout=10)
                self._count("Get OK")
            except self.grpc.RpcError as exc:
                self._count(f"Get {self._code(exc)}")

    def _poll_flood(self) -> None:
        pb = self.pb
        first = pb.SubscribeRequest(subscribe=pb.SubscriptionList(
            mode=pb.SubscriptionList.POLL, encoding=pb.JSON_IETF,
            subscription=[pb.Subscription(path=self._path("/interfaces"))]))
        poll = pb.SubscribeRequest(poll=pb.Poll())
        while not self.stop.is_set():
            answered = threading.Semaphore(1)  # the first Poll goes at once
            ended = threading.Event()

            def requests(answered: threading.Semaphore = answered, ended: threading.Event = ended) -> Any:
                yield first
                while not self.stop.is_set() and not ended.is_set():
                    # one Poll at a time: the next once the last was answered (its sync_response)
                    if answered.acquire(timeout=0.5):
                        yield poll

            call = self.stub_of(self._channel()).Subscribe(requests())
            try:
                for resp in call:
                    if resp.sync_response:
                        self._count("Poll OK")
                        answered.release()
                    if self.stop.is_set():
                        call.cancel()
                        break
            except self.grpc.RpcError as exc:
                if not self.stop.is_set():
                    self._count(f"Poll {self._code(exc)}")
            finally:
                ended.set()

    def finish(self) -> dict[str, int]:
        self.stop.set()
        for call in self.idle_calls:
            call.cancel()
        for t in self.threads:
            t.join(15)
        for ch in self.channels:
            ch.close()
        return dict(sorted(self.counts.items()))


# ---------------------------------------------------------------- a round


def tick_figures(s0: dict, s1: dict) -> dict[str, Any]:
    return {
        "overruns": s1["tick"]["overruns"] - s0["tick"]["overruns"],
        "ticks": s1["tick"]["ticks"] - s0["tick"]["ticks"],
        "longest_stall": max((src.get("longest_stall", 0) for src in s1["sources"].values()), default=0),
        "asic_reads": s1["sources"]["asic"]["reads"] - s0["sources"]["asic"]["reads"],
    }


def one_round(label: str, rate: float, seconds: float, warmup: float, tls: Any, pure: bool,
              kinds: tuple[str, ...], settle: float) -> dict[str, Any]:
    idle, loaded = Agent("idle", rate, tls, pure), Agent("loaded", rate, tls, pure)
    load = None
    try:
        idle.wait_up()
        loaded.wait_up()
        time.sleep(settle)  # a running agent: its ports' leaves all published once
        load = Load(loaded.port, tls, kinds)
        s0, c0 = idle.status(), loaded.status()
        began = time.monotonic()
        load.start()
        synced = load.wait_synced(60.0)
        synced_s = time.monotonic() - began
        time.sleep(warmup)  # the streams synced, the flood running: then the window
        a0, b0, t0 = idle.status(), loaded.status(), time.monotonic()
        time.sleep(seconds)
        a1, b1, t1 = idle.status(), loaded.status(), time.monotonic()
        counts = load.finish()
        load = None
        server = b1["exporters"].get("server", {})
        return {"label": label, "window_s": t1 - t0, "idle": tick_figures(a0, a1), "loaded": tick_figures(b0, b1),
                "setup": {"synced": synced, "synced_s": synced_s, "idle": tick_figures(s0, a0)["overruns"],
                          "loaded": tick_figures(c0, b0)["overruns"], "s": t0 - began},
                "clients": counts, "subscribers": b1["exporters"].get("server", {}).get("subscribers"),
                "refused_limits": server.get("refused_limits"), "results": server.get("results")}
    finally:
        if load is not None:
            load.finish()
        idle.stop()
        loaded.stop()


def print_round(r: dict[str, Any]) -> None:
    w = r["window_s"]
    print(f"\n## {r['label']} ({w:.1f} s window)")
    print("| agent | missed ticks (overruns) | longest stall (since start) | ticks | asic reads |")
    print("|---|---:|---:|---:|---:|")
    for name in ("idle", "loaded"):
        f = r[name]
        print(f"| {name} | {f['overruns']} | {f['longest_stall']} | {f['ticks']} | {f['asic_reads']} |")
    s = r["setup"]
    print(f"before the window: {s['synced']} idle streams synced in {s['synced_s']:.1f} s; missed ticks while they "
          f"connected and the flood began ({s['s']:.1f} s): idle {s['idle']}, loaded {s['loaded']}")
    c = r["clients"]
    served = {k: v for k, v in c.items() if k.endswith(" OK")}
    print(f"clients: {', '.join(f'{k} {v} ({v / w:.0f}/s)' for k, v in served.items()) or 'nothing served'}; "
          f"refused: {', '.join(f'{k} {v}' for k, v in c.items() if not k.endswith(' OK')) or 'none'}")
    print(f"server: {r['subscribers']} subscribers open at the window's end, refused_limits {r['refused_limits']}, "
          f"results {r['results']}")


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds after the idle streams synced")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds the agents run before the clients come")
    ap.add_argument("--quick", action="store_true", help="6 s windows, 2 s warm-up, 3 s settling")
    ap.add_argument("--tls", action="store_true", help="the server over TLS (a throw-away CA)")
    ap.add_argument("--pure", action="store_true", help="the agents with SWTEL_PUREPYTHON=1")
    ap.add_argument("--rounds", default="shipped,lifted", help="shipped, lifted or both")
    ap.add_argument("--clients", default="idle,get,poll",
                    help="which clients: idle (the 40 streams), get, poll (the flooders); default all")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.settle = 6.0, 2.0, 3.0
    tls = None
    pki_dir = None
    if args.tls:
        from tests.gnmi_helpers import make_pki

        pki_dir = Path(tempfile.mkdtemp(prefix="swtel-load-pki-"))
        pki = make_pki(pki_dir)
        tls = argparse.Namespace(ca=pki.ca, server_cert=pki.server_cert, server_key=pki.server_key)
    rounds = {"shipped": ("the shipped rate limit (20 Get/Poll a second per address)", 20.0),
              "lifted": ("the rate limit lifted (10,000 a second): the whole flood served", 10000.0)}
    print(f"# client load vs the tick loop: sim spine at 100 ms, {IDLE_STREAMS} idle Subscribe streams + "
          f"{GET_CLIENTS} Get + {POLL_CLIENTS} Poll flooders on one agent, the other idle "
          f"({'TLS' if tls else 'plaintext'}, {'pure Python' if args.pure else 'C'} backend)")
    try:
        for name in args.rounds.split(","):
            label, rate = rounds[name]
            try:
                print_round(one_round(label, rate, args.seconds, args.warmup, tls, args.pure,
                                      tuple(args.clients.split(",")), args.settle))
            except Exception as exc:  # noqa: BLE001 - a figure missing, never a traceback in CI's log
                print(f"\n## {label}: failed: {exc}")
            sys.stdout.flush()
    finally:
        if pki_dir is not None:
            shutil.rmtree(pki_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
