"""A simulated fabric: several simulated Spectrum switches (and a host), each run by its
own ``swtel run`` process with its own target name, all dialing out to one collector.

Every switch uses the built-in ``sim`` ASIC plugin with the same seed and the same
time origin (``start``), so their scenarios line up in time and a run is
reproducible. ``swtel fabric`` runs it with a local collector; ``swtel demo``
builds on it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.control.incidents import IncidentPrinter, StreamView
from agent.control.top import TOPOLOGY_FILE, fabric_socket
from agent.signals import StopSignals
from agent.tools.topology import Topology, uplink_ports

#: scenario presets: what ``--scenario`` picks (times relative to the fabric's start)
PRESETS: dict[str, dict[str, list[str]]] = {
    # The two field cases, one after the other: a marginal cable on a spine port (with
    # the RoCE retransmissions it causes on a host), then a leaf overloading one uplink.
    "field": {"spine-1": ["symbol-errors@3s-13s:swp11s1"], "host-1": ["symbol-errors@3s-13s"],
              "leaf-3": ["imbalance@9s:swp62"]},
    "symbol-errors": {"spine-1": ["symbol-errors@3s-20s:swp11s1"], "host-1": ["symbol-errors@3s-20s"]},
    "imbalance": {"leaf-3": ["imbalance@3s:swp62"]},
    "pfc-storm": {"spine-1": ["pfc-storm@3s-10s:swp1/3"]},
    "microburst": {"leaf-3": ["microburst@3s:swp1"]},
    "link-flap": {"spine-1": ["link-flap@3s-15s:swp2"]},
    "counter-clear": {"spine-1": ["counter-clear@5s"], "leaf-3": ["counter-clear@5s"]},
    # a failing optic: its FEC histogram's tail grows, the first uncorrectable codeword at 22.6 s
    "fec-degrade": {"spine-1": ["fec-degrade@1s-25s:swp13"]},
    # incast on a server port's queue 3: bursts of 1-50 ms every 2 s that a 1 s poller of the
    # instantaneous level misses and the queue's peak does not
    "incast": {"leaf-3": ["incast@3s:swp1/3"]},
    "clean": {},
}
LEAF_UPLINKS = uplink_ports(4)  # the field topology's leaf-3
#: how long the agents get, together, to end after SIGTERM before they are killed: an agent
#: with nothing queued ends in well under a second (docs/RELIABILITY.md, "Stop"); one still
#: flushing a backlog to the local collector would take up to its 5 s flush timeout, which a
#: demo's user should not wait for
STOP_BOUND_S = 1.5
#: the same bound when the run ends by itself (its duration, the live view's q, a failed
#: agent): nobody asked for a prompt stop, and the demo's timeline wants what a lagging agent
#: still has to flush
FINISH_BOUND_S = 10.0
#: the collector's grace at the end: only an RPC still running (a killed agent's) waits for it
COLLECTOR_GRACE_S = 0.3


def agent_command() -> list[str]:
    """``swtel`` as this process runs it: the same interpreter and the same import roots
    (a checkout, a venv, or the .deb's private /usr/lib/swtel with its vendored pygnmi),
    in isolated mode when this process is (as /usr/bin/swtel is)."""
    import pygnmi

    roots = [str(Path(__file__).resolve().parents[2]), str(Path(pygnmi.__file__).resolve().parents[1])]
    code = f"import sys; sys.path[0:0] = {roots!r}; from agent.cli import main; sys.exit(main())"
    return [sys.executable, *(["-I"] if sys.flags.isolated else []), "-c", code]


@dataclass
class Switch:
    """One simulated device and the agent process that reads it."""

    name: str
    role: str
    scenarios: list[str] = field(default_factory=list)
    uplinks: int = 0  # a leaf's uplinks (4 or 8)
    proc: subprocess.Popen | None = None
    config_path: Path | None = None
    socket: Path | None = None
    log_path: Path | None = None


class Fabric:
    """Write one config per switch, start their agents, stop them.

    ``collector`` is the ``host:port`` every agent dials out to (plaintext on
    loopback), or None for no dial-out; ``remote_write`` one ``exporters.remote_write`` item
    (``url`` and any other keys) every agent also sends its counters to; ``ports`` gives
    every simulated switch (not a host) that many plain ports (the sim's ``ports=N``);
    ``workdir`` receives configs, control sockets and logs.
    """

    def __init__(self, workdir: Path, collector: str | None, scenario: str = "field", *, seed: int = 1,
                 interval: str = "100ms", start_ns: int | None = None, jsonl: bool = False,
                 topology: Topology | None = None, faults: list[str] | tuple[str, ...] = (),
                 remote_write: dict[str, Any] | None = None, ports: int | None = None) -> None:
        if scenario not in PRESETS:
            raise ValueError(f"unknown scenario {scenario!r} (known: {', '.join(PRESETS)})")
        self.topology = topology or Topology.field()
        self.workdir = Path(workdir)
        self.collector = collector
        self.scenario = scenario
        self.seed = seed
        self.interval = interval
        self.jsonl = jsonl
        self.remote_write = remote_write
        self.ports = ports
        # Agents take about a second to start: the fabric's clock starts after that, so
        # every scenario time is seen from its first moment.
        self.start_ns = start_ns if start_ns is not None else time.time_ns() + 1_500_000_000
        plan = {name: list(scs) for name, scs in PRESETS[scenario].items()}
        for name in plan:
            if self.topology.node(name) is None:
                raise ValueError(f"scenario {scenario!r} names {name}, which this topology lacks "
                                 f"({self.topology.summary()})")
        for fault in faults:  # DEVICE:SCENARIO, e.g. leaf-2:microburst@3s:swp1
            name, _, what = fault.partition(":")
            if self.topology.node(name) is None or not what:
                raise ValueError(f"--fault {fault!r}: expected DEVICE:SCENARIO with a device of the topology")
            plan.setdefault(name, []).append(what)
        self.switches = [Switch(n.name, n.role, plan.get(n.name, []), n.uplinks) for n in self.topology.nodes]

    def plugin_config(self, sw: Switch) -> str:
        parts = [f"role={sw.role}", f"seed={self.seed}", f"start={self.start_ns}"]
        if sw.uplinks == 8:
            parts.append("uplinks=8")
        if self.ports and sw.role != "host":  # a host's one port is its own
            parts.append(f"ports={self.ports}")
        parts += [f"scenario={s}" for s in sw.scenarios]
        return " ".join(parts)

    def config(self, sw: Switch) -> dict:
        """The agent's config for one switch (what ``swtel validate`` accepts)."""
        cfg: dict = {
            "target": sw.name,
            "interval": self.interval,
            "sources": {
                "netdev": {"enabled": False},
                "ethtool": {"enabled": False},
                "system": {"interval": "1s"},  # each agent's own CPU and RSS, for dashboards
                "asic": {"enabled": True, "plugin": "sim", "config": self.plugin_config(sw)},
                # its neighbours as lldpd would give them, from the topology (written by start)
                "lldp": {"enabled": True, "file": str(lldp_file(self.workdir, sw.name)), "interval": "1s"},
            },
            "exporters": {},
            "control": {"socket": str(fabric_socket(self.workdir, sw.name)), "group": None},
            "log": {"level": "info", "format": "kv"},
        }
        if self.collector:
            cfg["exporters"]["dialout"] = [{"name": "fabric", "address": self.collector, "insecure": True,
                                            "insecure_remote": True,  # a development tool: plaintext by design
                                            "notifications": "per-tick"}]
        if self.remote_write:
            cfg["exporters"]["remote_write"] = [{"name": "fabric", **self.remote_write}]
        if self.jsonl:
            cfg["exporters"]["jsonl"] = {"path": str(self.workdir / f"{sw.name}.jsonl")}
        if sw.role == "leaf":
            cfg["insights"] = {"imbalance": {"groups": {"uplinks": uplink_ports(sw.uplinks or 4)}}}
        return cfg

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # what faces what and where each agent answers, for people and tools (swtel top --fabric)
        self.topology.write(self.workdir / TOPOLOGY_FILE,
                            {sw.name: fabric_socket(self.workdir, sw.name).name for sw in self.switches})
        command = agent_command()
        for sw in self.switches:
            lldp_file(self.workdir, sw.name).write_text(json.dumps(self.topology.lldp_document(sw.name), indent=1))
        for sw in self.switches:
            sw.config_path = self.workdir / f"{sw.name}.yaml"
            sw.config_path.write_text(yaml.safe_dump(self.config(sw), sort_keys=False))
            sw.socket = fabric_socket(self.workdir, sw.name)
            sw.log_path = self.workdir / f"{sw.name}.log"
            with open(sw.log_path, "w") as log:
                sw.proc = subprocess.Popen(
                    [*command, "run", "-c", str(sw.config_path)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,  # a terminal's Ctrl-C reaches the demo, which stops them
                )

    def alive(self) -> list[str]:
        return [sw.name for sw in self.switches if sw.proc is not None and sw.proc.poll() is None]

    def failed(self) -> list[tuple[str, int]]:
        return [(sw.name, sw.proc.returncode) for sw in self.switches
                if sw.proc is not None and sw.proc.poll() is not None and sw.proc.returncode != 0]

    def stop(self, timeout: float = 10.0) -> dict[str, int | None]:
        """SIGTERM every agent at once, wait for them together, SIGKILL those still running
        ``timeout`` seconds later; their exit codes (None: killed at the bound). The commands
        (``swtel fabric``, ``swtel demo``) give STOP_BOUND_S; a test gives them all the time
        a loaded machine needs to end cleanly."""
        procs = {sw.name: sw.proc for sw in self.switches if sw.proc is not None}
        return stop_all(procs, timeout)


def lldp_file(workdir: Path, name: str) -> Path:
    """Device ``name``'s neighbours in lldpcli's json0 shape (sources.lldp.file)."""
    return Path(workdir) / f"{name}.lldp.json"


def stop_all(procs: dict[str, subprocess.Popen], timeout: float) -> dict[str, int | None]:
    """SIGTERM every process of ``procs`` at once, then wait for all of them together (each
    reaped as soon as it exits, whatever the order); SIGKILL the ones still running after
    ``timeout`` s. Returns their exit codes, None for those killed (our decision, not their
    failure; a process that got SIGTERM before it could handle it shows -15)."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    running = {name for name, proc in procs.items() if proc.poll() is None}
    while running and time.monotonic() < deadline:
        time.sleep(0.02)  # reaping needs a poll: Popen has no wait on several processes
        running = {name for name in running if procs[name].poll() is None}
    for name in running:
        procs[name].kill()
    for name in running:
        try:
            procs[name].wait(5.0)
        except subprocess.TimeoutExpired:  # unkillable (D state): init reaps it
            pass
    return {name: None if name in running else proc.returncode for name, proc in procs.items()}


def failed_codes(codes: dict[str, int | None]) -> dict[str, int | None]:
    """The agents that ended badly: not 0, not killed at the stop's bound (None), not ended by
    the SIGTERM itself before its handler was in place (-15)."""
    return {k: v for k, v in codes.items() if v not in (0, None, -signal.SIGTERM)}


def stop_with_collector(fabric: Fabric, collector: Any, hung_up: bool, signalled: bool) -> dict[str, int | None]:
    """End the agents and their collector. After a hang-up nobody reads what the agents would
    still flush, so the collector goes first and each agent finds nowhere to send it (and no
    reason to wait); otherwise the agents go first and flush, so that the collector holds their
    last values. Those still running are killed after STOP_BOUND_S when a signal (SIGHUP,
    SIGTERM, Ctrl-C) asked for the stop, after FINISH_BOUND_S when the run ended by itself."""
    if hung_up:
        collector.stop(grace=0)
    codes = fabric.stop(STOP_BOUND_S if signalled else FINISH_BOUND_S)
    if not hung_up:
        collector.stop(grace=COLLECTOR_GRACE_S)
    return codes


def hangup_signals() -> StopSignals:
    """SIGINT, SIGTERM and SIGHUP (a closed terminal or ssh session) all stop the run;
    ``got(signal.SIGHUP)``: nobody reads the terminal any more. The handlers take no lock
    (agent/signals.py: an Event set from one could hang the run for good)."""
    return StopSignals(signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def detach_stdio() -> None:
    """The terminal is gone: what is still written goes nowhere instead of failing (EIO)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    os.close(devnull)


def fabric_main(args) -> int:
    """``swtel fabric``: the simulated fabric and a local collector, until the duration ends
    or Ctrl-C; the collector's JSON lines go to --output. On SIGHUP (a closed terminal) the
    agents are stopped as on Ctrl-C, and the temporary directory (never a --dir) is removed."""
    import shutil
    import tempfile

    from agent.tools.collect import Collector

    own_dir = not args.dir
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="swtel-fabric-"))
    workdir.mkdir(parents=True, exist_ok=True)
    out_path = Path(args.output) if args.output else workdir / "collector.jsonl"
    stop = hangup_signals()
    codes: dict[str, int | None] = {}
    view = StreamView()
    printer: IncidentPrinter | None = None
    with open(out_path, "a", encoding="utf-8") as out:
        try:
            collector = Collector(args.listen, insecure=True, output=out, keep_messages=False,
                                  on_lines=view.on_lines).start()
        except (OSError, RuntimeError) as exc:
            print(f"swtel fabric: --listen {args.listen}: {exc}", file=sys.stderr)
            return 2
        address = f"{args.listen.rpartition(':')[0]}:{collector.port}"
        try:
            topology = None
            if (args.spines, args.leaves, args.hosts) != (None, None, None):
                topology = Topology.clos(1 if args.spines is None else args.spines,
                                         1 if args.leaves is None else args.leaves,
                                         args.hosts or 0, args.uplinks)
            fabric = Fabric(workdir, address, args.scenario, seed=args.seed, interval=args.interval,
                            topology=topology, faults=args.fault)
        except ValueError as exc:
            collector.stop(0)
            print(f"swtel fabric: {exc}", file=sys.stderr)
            return 2
        try:  # whatever happens from here (a signal, a closed terminal), the agents are stopped
            fabric.start()
            printer = IncidentPrinter(view, fabric.start_ns)
            names = ", ".join(s.name for s in fabric.switches[:12]) + (", ..." if len(fabric.switches) > 12 else "")
            print(f"swtel fabric: {fabric.topology.summary()} ({names}) -> collector {address}; "
                  f"data: {out_path}; configs, sockets, logs and topology.yaml: {workdir}", file=sys.stderr)
            deadline = None if args.duration is None else time.monotonic() + args.duration
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                if fabric.failed():
                    break
                stop.wait(0.2)
                for line in printer.update():  # on stdout: the collector's lines go to --output
                    print(line, flush=True)
        except OSError:
            if not stop.got(signal.SIGHUP):
                raise
        finally:
            codes = stop_with_collector(fabric, collector, stop.got(signal.SIGHUP), stop.is_set())
    if stop.got(signal.SIGHUP):
        detach_stdio()
        if own_dir:  # nobody saw where it was: leave nothing behind
            shutil.rmtree(workdir, ignore_errors=True)
        return 128 + signal.SIGHUP
    if printer is not None:  # what the agents flushed as they stopped counts too
        late = printer.update()
        print("\n".join([*late, "incidents (the events grouped by the agents' LLDP neighbours; seconds from the "
                                 "fabric's start):", *("  " + line for line in printer.summary_lines())]), flush=True)
    bad = failed_codes(codes)
    if bad:
        print(f"swtel fabric: agents failed: {bad}; see the logs in {workdir}", file=sys.stderr)
        return 1
    return 0
