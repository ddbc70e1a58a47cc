"""``swtel run``: wire config, sources, engine, exporters, control socket and systemd together.

Threads: the tick thread (engine), one per exporter, the control socket's; the
main thread only waits for signals and applies reloads, so a slow reload or a
status request never stalls the tick loop.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import psutil

from agent import __version__, _backend, config, logs
from agent.control.server import ControlServer, ControlServerError
from agent.engine import Engine
from agent.exporters.jsonl import JsonlExporter
from agent.sdnotify import Notifier

log = logs.get("agent")
STOP_TIMEOUT_S = 5.0  # exporters get this long, together, to flush at shutdown


def min_interval(cfg: config.Config) -> float:
    """The smallest poll interval of any enabled source."""
    return min(
        (cfg.interval_of(n) for n in ("netdev", "ethtool", "rdma", "system", "asic")
         if getattr(cfg.sources, n).enabled),
        default=float(cfg.interval),
    )


def build_exporters(cfg: config.Config) -> dict[str, Any]:
    """One listener per configured exporter, keyed by a stable name (for reload)."""
    out: dict[str, Any] = {}
    ex = cfg.exporters
    if ex.jsonl is not None:
        out["jsonl"] = JsonlExporter(ex.jsonl.path)
    if ex.dialout:
        from agent.gnmi.dialout import DialoutExporter

        for dest in ex.dialout:
            exporter = DialoutExporter(dest, cfg.target)
            exporter.log_limiter.period_s = float(cfg.log.rate_limit)
            out[f"dialout:{dest.name}"] = exporter
    if ex.server is not None and ex.server.enabled:
        from agent.gnmi.server import GnmiServer

        out["server"] = GnmiServer(ex.server, cfg.target, min_interval_s=min_interval(cfg))
    if ex.tunnel:
        from agent.gnmi.tunnel import TunnelExporter

        for tun in ex.tunnel:
            tunnel = TunnelExporter(tun, cfg.target, min_interval_s=min_interval(cfg))
            tunnel.log_limiter.period_s = float(cfg.log.rate_limit)
            out[f"tunnel:{tun.name}"] = tunnel
    if ex.otlp is not None and ex.otlp.enabled:
        from agent.exporters.otlp import OtlpExporter

        otlp = OtlpExporter(ex.otlp, cfg.target)
        otlp.log_limiter.period_s = float(cfg.log.rate_limit)
        out["otlp"] = otlp
    return out


def _insights(cfg: config.Config) -> Any:
    """The detectors' runner, or None when ``insights.enabled`` is false."""
    if not cfg.insights.enabled:
        return None
    from agent.insights import InsightsRunner

    return InsightsRunner(cfg.insights, log=logs.get("insights"))


def _exporter_config(cfg: config.Config, key: str) -> Any:
    """The config slice an exporter was built from, to tell whether a reload changed it."""
    ex = cfg.exporters
    if key == "jsonl":
        return ex.jsonl
    if key == "server":
        # The smallest source interval bounds the server's sample_interval check.
        return (ex.server, cfg.target, min_interval(cfg))
    if key == "otlp":
        return (ex.otlp, cfg.target)
    kind, name = key.split(":", 1)
    if kind == "tunnel":
        return (next((t for t in ex.tunnel if t.name == name), None), cfg.target, min_interval(cfg))
    return (next((d for d in ex.dialout if d.name == name), None), cfg.target)


class Agent:
    def __init__(self, cfg: config.Config, notifier: Notifier | None = None) -> None:
        self.cfg = cfg
        self.started = time.monotonic()
        self.notifier = notifier or Notifier()
        self.exporters = build_exporters(cfg)
        self.engine = Engine(cfg, list(self.exporters.values()), insights=_insights(cfg))
        self.engine.tick_hooks.append(self.notifier.tick)
        self.control: ControlServer | None = None
        if cfg.control.enabled:
            self.control = ControlServer(
                cfg.control,
                {"status": self.status, "metrics": self.metrics, "reload": self._reload_cmd, "ports": self.ports},
            )
        self.last_reload: dict[str, Any] = {"ok": None, "ts_ns": None, "error": None}
        self._reload_lock = threading.Lock()
        self._stop = threading.Event()
        self._reload_requested = threading.Event()
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)  # prime: the next call measures from here

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        log.info(
            "starting",
            version=__version__,
            backend=_backend.NAME,
            config=self.cfg.path,
            target=self.cfg.target,
        )
        if _backend.FALLBACK_REASON and not _backend.FORCED:
            log.warning("using the pure-Python reader", reason=_backend.FALLBACK_REASON)
        if self.control is not None:
            self.control.start()
        self.engine.start()

    def run(self, duration: float | None = None) -> int:
        deadline = None if duration is None else time.monotonic() + duration
        ready_sent = False
        while not self._stop.is_set():
            if not ready_sent and self.engine.ready.is_set():
                self.notifier.ready(f"polling {len(self.engine.status()['sources'])} sources")
                log.info("ready", sources=sorted(self.engine.status()["sources"]))
                ready_sent = True
            if self._reload_requested.is_set():
                self._reload_requested.clear()
                self.reload()
            if deadline is not None and time.monotonic() >= deadline:
                break
            self._stop.wait(0.05 if not ready_sent else 0.5)
        return 0

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        self._reload_requested.set()  # the main loop applies it: signal handlers stay tiny

    def shutdown(self) -> None:
        self.notifier.stopping()
        log.info("stopping")
        self.engine.stop()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for exporter in self.exporters.values():
            exporter.stop(max(0.1, deadline - time.monotonic()))
        if self.control is not None:
            self.control.stop()
        self.notifier.close()

    # ------------------------------------------------------------ reload
    def reload(self) -> bool:
        """Re-read the config file; apply it whole, or keep the running one whole."""
        with self._reload_lock:
            self.notifier.reloading()
            try:
                new = config.load(self.cfg.path or config.DEFAULT_PATH)
            except config.ConfigError as exc:
                self.last_reload = {"ok": False, "ts_ns": time.time_ns(), "error": str(exc)}
                log.error("reload rejected; keeping the running config", problems=exc.problems)
                self.notifier.ready()
                return False
            if new.log != self.cfg.log or new.exporters.jsonl != self.cfg.exporters.jsonl:
                _configure_logs(new)
            if new.control != self.cfg.control:
                log.warning("control socket settings change at the next restart")
            self._swap_exporters(new)
            if new.insights.enabled != self.cfg.insights.enabled:
                # on/off: a fresh runner (or none); otherwise the engine reconfigures it in place
                fresh = _insights(new)
                if fresh is not None:
                    fresh.set_port_speeds(self.engine.port_speeds())
                self.engine.insights = fresh
            self.engine.reload(new)
            self.cfg = new
            self.last_reload = {"ok": True, "ts_ns": time.time_ns(), "error": None}
            log.info("reloaded", config=new.path)
            self.notifier.ready()
            return True

    def _swap_exporters(self, new: config.Config) -> None:
        wanted = build_exporters(new)
        merged: dict[str, Any] = {}
        for key, fresh in wanted.items():
            old = self.exporters.get(key)
            if old is not None and _exporter_config(self.cfg, key) == _exporter_config(new, key):
                merged[key] = old  # unchanged destination: no reconnect, no new snapshot
                continue
            if old is not None:
                old.stop(1.0)  # first: the new one may need the old one's port
            self._start_exporter(key, fresh)
            merged[key] = fresh
        for key, old in self.exporters.items():
            if key not in wanted:
                old.stop(1.0)
        self.exporters = merged
        self.engine.listeners = list(merged.values())

    def _start_exporter(self, key: str, exporter: Any) -> None:
        """Start one exporter; a failure is logged and shown in its status, never fatal."""
        try:
            exporter.start(self.engine.store)
        except (OSError, RuntimeError) as exc:
            log.error("exporter failed to start", exporter=key, error=str(exc))

    def _reload_cmd(self, _req: dict) -> dict[str, Any]:
        ok = self.reload()
        return {"ok": ok, **self.last_reload}

    # ------------------------------------------------------------ status
    def status(self, _req: dict | None = None) -> dict[str, Any]:
        eng = self.engine.status()
        return {
            "version": __version__,
            "backend": _backend.NAME,
            "backend_fallback_reason": _backend.FALLBACK_REASON,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.started, 3),
            "now_ns": time.time_ns(),
            "target": self.cfg.target,
            "config": {
                "path": self.cfg.path,
                "last_reload": self.last_reload,
                "health_grace_s": float(self.cfg.control.health_grace),
            },
            "sources": eng["sources"],
            "exporters": {k: e.status() for k, e in self.exporters.items()},
            "events": self.events(),
            "tick": {
                "ticks": eng["ticks"],
                "overruns": eng["overruns"],
                "loop_error": eng["loop_error"],
                "listener_errors": eng["listener_errors"],
                **self._own_cost(),
            },
        }

    def ports(self, _req: dict | None = None) -> dict[str, Any]:
        """Per-port cumulative totals for ``swtel top`` (it turns two of them into rates)."""
        from agent.control.portview import port_totals

        return {"now_ns": time.time_ns(), "target": self.cfg.target,
                "ports": port_totals(self.engine.store.snapshot_batches(), self.engine.port_speeds()),
                "events": self.events()}

    def events(self) -> dict[str, list]:
        """Open insight events and the last cleared ones (newest first)."""
        ins = self.engine.insights
        return ins.status() if ins is not None else {"open": [], "recent": []}

    def _own_cost(self) -> dict[str, Any]:
        """The agent's CPU (% of one core since the last status) and RSS, from psutil."""
        return {"cpu_percent": round(self._proc.cpu_percent(None), 2), "rss_bytes": self._proc.memory_info().rss}

    def metrics(self, _req: dict | None = None) -> dict[str, Any]:
        proc = self._proc
        with proc.oneshot():
            cpu = proc.cpu_times()
            rss = proc.memory_info().rss
            threads = proc.num_threads()
        return {
            "rss_bytes": rss,
            "cpu_user_s": cpu.user,
            "cpu_system_s": cpu.system,
            "threads": threads,
            "uptime_s": round(time.monotonic() - self.started, 3),
            "control": dict(self.control.stats) if self.control else None,
            "notify": {"sent": self.notifier.sent, "failed": self.notifier.failed},
        }


def _load_or_exit(path: str) -> config.Config | None:
    try:
        return config.load(path)
    except config.ConfigError as exc:
        print(f"swtel: invalid config {path}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def _configure_logs(cfg: config.Config) -> None:
    # JSON lines on stdout keep stdout to themselves; logs then go to stderr.
    jsonl_on_stdout = cfg.exporters.jsonl is not None and cfg.exporters.jsonl.path == "-"
    logs.configure(cfg.log.level, cfg.log.format, stream=sys.stderr if jsonl_on_stdout else None)


def serve(cfg: config.Config, duration: float | None = None) -> int:
    _configure_logs(cfg)
    agent = Agent(cfg)
    signal.signal(signal.SIGTERM, lambda *_: agent.request_stop())
    signal.signal(signal.SIGINT, lambda *_: agent.request_stop())
    signal.signal(signal.SIGHUP, lambda *_: agent.request_reload())
    try:
        agent.start()
    except (ControlServerError, RuntimeError, OSError) as exc:
        log.error("cannot start", error=str(exc))
        agent.shutdown()
        return 1
    try:
        return agent.run(duration)
    finally:
        agent.shutdown()


def run_main(args) -> int:
    path = args.config or config.DEFAULT_PATH
    cfg = _load_or_exit(path)
    if cfg is None:
        return 1
    return serve(cfg, args.duration)
