"""``swtel run``: wire config, sources, engine, exporters, control socket and systemd together.

Threads: the tick thread (engine), one per exporter, the control socket's; the
main thread only waits for signals and applies reloads, so a slow reload or a
status request never stalls the tick loop.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from typing import Any

import psutil

import agent.plugins  # noqa: F401  (fills the registries before any config is read)
from agent import __version__, _backend, config, logs, registry
from agent.control.server import ControlServer, ControlServerError
from agent.engine import Engine
from agent.malloc import release_free_pages
from agent.sdnotify import Notifier
from agent.signals import Wakeup

log = logs.get("agent")
STOP_TIMEOUT_S = 5.0  # exporters get this long, together, to flush at shutdown
#: past STOP_TIMEOUT_S, how long an exporter's stop may still take (its thread's join bound is
#: its timeout + 1 s) before the agent exits without it
STOP_SLACK_S = 1.5
#: how long a stop waits for the tick loop's pass in progress: its output is work the exporters
#: then flush (a pass takes milliseconds; the first encode of a large table took seconds on a
#: loaded machine); past this the pass is left to the exit
ENGINE_STOP_S = STOP_TIMEOUT_S
#: the control command ``states`` takes at most this many path prefixes
MAX_STATE_PREFIXES = 16


def min_interval(cfg: config.Config) -> float:
    """The smallest poll interval of any enabled source."""
    return cfg.min_interval()


def build_exporters(cfg: config.Config) -> dict[str, Any]:
    """One listener per configured exporter, keyed by a stable name (for reload), in the
    registry's order: each exporter class builds its own from its section."""
    out: dict[str, Any] = {}
    for sec in registry.EXPORTERS:
        out.update(sec.plugin.listeners_for(getattr(cfg.exporters, sec.name), cfg))
    return out


def _exporter_class(key: str) -> Any:
    return registry.EXPORTERS[key.partition(":")[0]].plugin


def _insights(cfg: config.Config) -> Any:
    """The insights pipeline (the detectors), or None when ``insights.enabled`` is false."""
    if not cfg.insights.enabled:
        return None
    from agent.insights import InsightsPipeline

    return InsightsPipeline(cfg.insights, log=logs.get("insights"))


def _exporter_config(cfg: config.Config, key: str) -> Any:
    """The config slice an exporter was built from, to tell whether a reload changed it."""
    return _exporter_class(key).built_from(key, cfg)


class Agent:
    def __init__(self, cfg: config.Config, notifier: Notifier | None = None) -> None:
        self.cfg = cfg
        self.started = time.monotonic()
        self.notifier = notifier or Notifier()
        self.exporters = build_exporters(cfg)
        self.insights = _insights(cfg)  # a listener like the exporters (None: insights off)
        self.engine = Engine(cfg, self._listeners())
        self.engine.insights = self.insights  # for the sources that read it (sources/events.py)
        self.engine.tick_hooks.append(self.notifier.tick)
        self.control: ControlServer | None = None
        if cfg.control.enabled:
            self.control = ControlServer(
                cfg.control,
                {"status": self.status, "metrics": self.metrics, "reload": self._reload_cmd, "ports": self.ports,
                 "states": self.states},
            )
        self.last_reload: dict[str, Any] = {"ok": None, "ts_ns": None, "error": None}
        self.reloads = {"applied": 0, "rejected": 0}  # since start (the log line is rate-limited)
        self._reload_lock = threading.Lock()
        # Set by the signal handlers: plain flags and a pipe, no lock (agent/signals.py)
        self._stop_requested = False
        self._reload_requested = False
        self._wake = Wakeup()  # with either: the main loop acts at once
        #: the last ports' sums and what they were made from (:meth:`_port_totals`)
        self._ports_cache: tuple[list, dict[str, int], dict[str, dict[str, Any]], dict] | None = None
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
        if not self.exporters:
            log.warning("no exporter configured: nothing leaves this switch",
                        hint="add exporters.dialout, server, otlp or remote_write (docs/config.md)")
        if self.control is not None:
            self.control.start()
        self.engine.start()

    def run(self, duration: float | None = None) -> int:
        """Wait for a stop, a reload or the deadline. 0 on a requested stop; 1 when the tick
        loop died (so that systemd's ``Restart=on-failure`` acts)."""
        deadline = None if duration is None else time.monotonic() + duration
        ready_sent = False
        freeze_at: float | None = None  # when to freeze the long-lived state (freeze_long_lived)
        trim_at: float | None = None  # when next to hand free heap pages back (agent/malloc.py)
        while not self._stop_requested:
            if self.engine.dead():
                log.error("exiting: the tick loop stopped", error=self.engine.loop_error)
                return 1
            if not ready_sent and self.engine.ready.is_set():
                names = self.engine.source_names()  # not status(): that reads the tick thread's state
                self.notifier.ready(f"polling {len(names)} sources")
                log.info("ready", sources=sorted(names))
                ready_sent = True
                freeze_at = time.monotonic() + FREEZE_AFTER_S
            if self._reload_requested:
                self._reload_requested = False  # a SIGHUP from here on reloads once more
                if self.reload():
                    freeze_at = time.monotonic() + FREEZE_AFTER_S
            if freeze_at is not None and time.monotonic() >= freeze_at:
                freeze_long_lived()
                freeze_at = None
                trim_at = time.monotonic() + TRIM_EVERY_S
            if trim_at is not None and time.monotonic() >= trim_at:
                release_free_pages()
                trim_at = time.monotonic() + TRIM_EVERY_S
            if deadline is not None and time.monotonic() >= deadline:
                break
            # A stop or reload request wakes the loop at once (a SIGHUP used to wait for the
            # next half-second turn, and HUPs within it were merged); the timeout only paces
            # the checks for readiness and a dead tick loop.
            self._wake.wait(0.05 if not ready_sent else 0.5)
        return 0

    def request_stop(self) -> None:
        self._stop_requested = True
        self._wake.wake()

    def request_reload(self) -> None:
        self._reload_requested = True  # the main loop applies it: signal handlers stay tiny
        self._wake.wake()

    def shutdown(self) -> None:
        """Stop everything; a step that fails is logged and the next one still runs (the
        control socket is always removed)."""
        self.notifier.stopping()
        log.info("stopping")
        began = time.monotonic()
        _guarded("engine", self.engine.stop, ENGINE_STOP_S)
        late = stop_exporters(self.exporters, STOP_TIMEOUT_S)
        if self.control is not None:
            _guarded("control", self.control.stop)
        _guarded("notify", self.notifier.close)
        self._wake.close()  # a signal from here on wakes nobody (its handler still calls wake)
        log.info("stopped", took_s=round(time.monotonic() - began, 3), exporters_late=late)

    # ------------------------------------------------------------ reload
    def reload(self) -> bool:
        """Re-read the config file; apply it whole, or keep the running one whole.

        Rejected, with the running config and exporters untouched, when the file cannot be
        loaded or validated (whatever the failure) or when a new or changed exporter cannot
        start (a path it cannot open, a port in use)."""
        with self._reload_lock:
            self.notifier.reloading()
            try:
                new = config.load(self.cfg.path or config.DEFAULT_PATH)
                self._swap_exporters(new)
                self._reload_tls()
            except config.ConfigError as exc:
                return self._reject(exc.problems)
            except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError...: never fatal
                return self._reject([_clip(f"{type(exc).__name__}: {exc}")])
            if new.log != self.cfg.log or new.exporters.jsonl != self.cfg.exporters.jsonl:
                _configure_logs(new)
            if new.control != self.cfg.control:
                log.warning("control socket settings change at the next restart")
            if new.insights.enabled != self.cfg.insights.enabled:
                # on/off: a fresh pipeline (or none); otherwise the engine hands the new config
                # to the running one on its tick thread (on_config), as to every listener
                fresh = _insights(new)
                if fresh is not None:
                    fresh.set_port_speeds(self.engine.port_speeds())
                    fresh.start(self.engine.store)  # the far ends the store holds (LLDP neighbours)
                self.insights = fresh
                self._feed_engine()
            self.engine.reload(new)
            self.cfg = new
            self.last_reload = {"ok": True, "ts_ns": time.time_ns(), "error": None}
            self.reloads["applied"] += 1
            log.info("reloaded", config=new.path)
            self.notifier.ready()
            return True

    def _reload_tls(self) -> None:
        """Every running exporter re-reads its TLS files (certificate, key, CA, CRL) if they
        changed: its next connection uses them. New files that cannot serve (a key that is not
        the certificate's) are logged and the running ones kept: the config reload stands."""
        for key, exporter in self.exporters.items():
            try:
                if exporter.reload_tls():
                    log.info("TLS files reloaded; new connections use them", exporter=key)
            except Exception as exc:  # noqa: BLE001 - TlsError, OSError: never fatal
                log.error("TLS files not reloaded; keeping the running ones", exporter=key,
                          error=_clip(_error_text(exc)))

    def _reject(self, problems: list[str]) -> bool:
        self.last_reload = {"ok": False, "ts_ns": time.time_ns(), "error": "\n".join(problems)}
        self.reloads["rejected"] += 1
        log.error("reload rejected; keeping the running config", problems=problems)
        self.notifier.ready()
        return False

    def _swap_exporters(self, new: config.Config) -> None:
        """All or nothing: the new and changed exporters are started before the old ones are
        let go. One that needs what its predecessor holds (the server's port, a tunnel's
        session) is started after stopping it, and the predecessor is restarted if it fails.
        If any cannot start, those already started are stopped again and
        :class:`config.ConfigError` is raised: the running exporters stay as they were."""
        wanted = build_exporters(new)
        merged: dict[str, Any] = {}
        fresh: dict[str, Any] = {}
        for key, exporter in wanted.items():
            old = self.exporters.get(key)
            if old is not None and _exporter_config(self.cfg, key) == _exporter_config(new, key):
                merged[key] = old  # unchanged destination: no reconnect, no new snapshot
            else:
                fresh[key] = exporter
        started: list[str] = []
        stopped_first: list[str] = []
        for key, exporter in fresh.items():
            old = self.exporters.get(key)
            try:
                if old is not None and _shares_resources(key, self.cfg, new):
                    old.stop(1.0)
                    stopped_first.append(key)
                exporter.start(self.engine.store)
                started.append(key)
            except Exception as exc:  # noqa: BLE001 - OSError, RuntimeError, grpc's ValueError...
                for k in started:
                    _guarded(k, fresh[k].stop, 1.0)
                for k in stopped_first:
                    self._restart_old(k)
                raise config.ConfigError([f"{_where(key)}: {_clip(_error_text(exc))}"]) from None
        for key, old in self.exporters.items():
            if merged.get(key) is not old and key not in stopped_first:
                _guarded(key, old.stop, 1.0)
        merged.update(fresh)
        self.exporters = merged
        self._feed_engine()

    def _feed_engine(self) -> None:
        """The engine's listeners and insights pipeline, after either changed."""
        self.engine.insights = self.insights
        self.engine.listeners = self._listeners()

    def _listeners(self) -> list[Any]:
        """What the engine feeds: the detectors first (their events of a pass reach the
        exporters in the same pass), then every exporter."""
        return ([self.insights] if self.insights is not None else []) + list(self.exporters.values())

    def _restart_old(self, key: str) -> None:
        """A predecessor stopped for its successor, which then failed: run it again as it was."""
        try:
            again = build_exporters(self.cfg)[key]
            again.start(self.engine.store)
        except Exception as exc:  # noqa: BLE001
            log.error("exporter failed to restart after a rejected reload", exporter=key, error=str(exc))
            return
        self.exporters[key] = again
        self._feed_engine()

    def _reload_cmd(self, _req: dict) -> dict[str, Any]:
        ok = self.reload()
        return {"ok": ok, **self.last_reload}

    # ------------------------------------------------------------ status
    # The control socket's handlers run on its threads. What the tick thread mutates (the
    # sources' state, the event book, the detectors' notes, port speeds) is copied on the tick
    # thread itself, between passes (engine.handoff: agent/handoff.py); the rest is safe from
    # any thread: the store's copies (under its lock), the exporters' status() (their own
    # locks, counters, swapped tuples), this object's own fields (replaced, never mutated).
    def status(self, _req: dict | None = None) -> dict[str, Any]:
        tick = self.engine.handoff.ask("status", self._tick_status)
        eng, events = tick.value
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
                "reloads": dict(self.reloads),
                "health_grace_s": float(self.cfg.control.health_grace),
            },
            "sources": eng["sources"],
            "escaped_names": eng["escaped_names"],
            "exporters": {k: e.status() for k, e in list(self.exporters.items())},
            "events": events,
            "tick": {
                "ticks": eng["ticks"],
                "overruns": eng["overruns"],
                "loop_error": self.engine.loop_error or eng["loop_error"],
                "listener_errors": eng["listener_errors"],
                "unencodable": eng["unencodable"],
                "stale_s": tick.stale_s,
                **self._own_cost(),
            },
        }

    def _tick_status(self) -> tuple[dict[str, Any], dict[str, list]]:
        """(On the tick thread.) The engine's status and the events, copied."""
        return self.engine.status(), self.events()

    def ports(self, _req: dict | None = None) -> dict[str, Any]:
        """Per-port cumulative totals for ``swtel top`` (it turns two of them into rates)."""
        tick = self.engine.handoff.ask("ports", lambda: (self.engine.port_speeds(), self.events()))
        speeds, events = tick.value
        return {"now_ns": time.time_ns(), "target": self.cfg.target, "ports": self._port_totals(speeds),
                "events": events, "stale_s": tick.stale_s}

    def states(self, req: dict | None = None) -> dict[str, Any]:
        """The stored states (text and on-change values: LLDP neighbours, an RDMA port's netdev,
        events) whose path starts with one of ``prefixes`` (display form, ``swtel:/rdma/``), as
        [path, value] pairs: what ``swtel top --fabric`` groups into incidents. The store's copy,
        safe off the tick thread."""
        asked = (req or {}).get("prefixes")
        # a malformed request is answered with nothing, not an error in the agent's log
        wanted = tuple(p for p in asked[:MAX_STATE_PREFIXES] if isinstance(p, str) and p) \
            if isinstance(asked, list) else ()
        return {"now_ns": time.time_ns(), "target": self.cfg.target,
                "states": [[u.path, u.value] for u in self.engine.store.states()
                           if wanted and u.path.startswith(wanted)]}

    def _port_totals(self, speeds: dict[str, int]) -> dict[str, dict[str, Any]]:
        """The store's latest values summed per port, off the tick thread (the store hands out
        its arrays under its lock and never mutates one it handed out). Summing every counter
        costs milliseconds at 1,024 ports, so the sums are kept until a source stores new
        values: clients polling faster than the sources are answered from them."""
        from agent.control.portview import port_totals

        latest = self.engine.store.latest()
        ident = [(name, id(table), id(values), ts) for name, (table, values, ts) in sorted(latest.items())]
        cached = self._ports_cache
        if cached is not None and cached[0] == ident and cached[1] == speeds:
            return cached[2]
        totals = port_totals(self.engine.store.snapshot_batches(), speeds)
        # ``latest`` is kept with the ids, so they cannot be reused by other arrays meanwhile;
        # the sums are shared by the replies, which never change them
        self._ports_cache = (ident, speeds, totals, latest)
        return totals

    def events(self) -> dict[str, list]:
        """Open insight events and the last cleared ones (newest first). Iterates the tick
        thread's event book: call it on the tick thread (through engine.handoff)."""
        ins = self.insights
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
            "control": self.control.stats_copy() if self.control else None,
            "notify": {"sent": self.notifier.sent, "failed": self.notifier.failed},
        }


def stop_exporters(exporters: dict[str, Any], timeout: float) -> list[str]:
    """Stop every exporter at once, each on a thread of its own, and wait for them together:
    one with something to flush takes up to ``timeout`` without delaying the others, and one
    with nothing to send returns at once (each decides and logs why: exporters/sender.py). One
    still stopping ``STOP_SLACK_S`` past the timeout is left behind (logged; its thread is a
    daemon, the exit does not wait for it). Returns the keys of those left behind."""
    threads = []
    for key, exporter in exporters.items():
        thread = threading.Thread(target=_guarded, args=(key, exporter.stop, timeout),
                                  name=f"stop-{key}", daemon=True)
        thread.start()
        threads.append((key, thread))
    deadline = time.monotonic() + timeout + STOP_SLACK_S
    late = []
    for key, thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            late.append(key)
    if late:
        log.error("exporters still stopping past their bound; exiting without them", exporters=late)
    return late


def _guarded(what: str, fn: Any, *args: Any) -> None:
    """Run a shutdown or clean-up step; log (never raise) what goes wrong."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001
        log.error("clean-up step failed", step=what, error=str(exc))


def _error_text(exc: BaseException) -> str:
    """An exception as a message: an OSError's own text without the ``[Errno N]`` prefix."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f": {exc.filename!r}" if exc.filename else "")
    return str(exc)


def _clip(text: str, limit: int = 300) -> str:
    """The useful part of a long error: its start and its tail."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit // 3] + " ... " + text[-(limit * 2 // 3):]


def _where(key: str) -> str:
    """The config key of an exporter (as errors name it)."""
    if key == "jsonl":
        return "exporters.jsonl.path"
    kind, sep, name = key.partition(":")
    return f"exporters.{kind}[name={name}]" if sep else f"exporters.{kind}"


def _shares_resources(key: str, old: config.Config, new: config.Config) -> bool:
    """Whether the new exporter under ``key`` needs what the running one holds, so that
    the running one must stop first: the server on the same port, a tunnel (same name)."""
    return _exporter_class(key).shares_resources(key, old, new)


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
    except (ControlServerError, RuntimeError, OSError, ValueError) as exc:
        log.error("cannot start", error=_clip(_error_text(exc)))
        agent.shutdown()
        return 1
    try:
        return agent.run(duration)
    finally:
        agent.shutdown()


#: after ready or a reload: the sources' tables exist, and the detectors' per-port state has
#: come with the first samples
FREEZE_AFTER_S = 10.0
#: how often the agent hands the pages malloc keeps free back to the kernel once frozen
#: (~0.5 ms each on the simulated spine: agent/malloc.py; a minute let the dial-out spine's
#: freed message buffers hold ~2 MiB of free heap pages between trims)
TRIM_EVERY_S = 10.0
#: the cyclic collector's first threshold once the long-lived state is frozen (Python's is 700):
#: a tick's short-lived containers (live samples, gauge updates) are freed by their counts
#: before it is reached, so the collector seldom walks them (at 700 it ran about once a tick,
#: touching every feed and dict the samples point to: figures in docs/PERFORMANCE.md, "insights").
#: Cyclic garbage still goes, a few thousand allocations later.
GC_GEN0 = 10_000


def freeze_long_lived() -> None:
    """Move what exists now (the tables, layouts, feeds and per-port detector state built at
    setup or by a reload) out of the cyclic collector's reach: they live as long as the
    config, and each full collection would otherwise walk them again (what that cost a tick:
    docs/PERFORMANCE.md; a tick's own garbage is still collected).
    What an earlier freeze kept is unfrozen first, so the cycles a reload let go are collected.
    The first threshold becomes GC_GEN0 (bench/bench_insights.py calls this too). What the
    start freed goes back to the kernel (agent/malloc.py)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0, *gc.get_threshold()[1:])
    release_free_pages()


def run_main(args) -> int:
    path = args.config or config.DEFAULT_PATH
    cfg = _load_or_exit(path)
    if cfg is None:
        return 1
    exit_now(serve(cfg, args.duration))
    return 1  # not reached


def exit_now(code: int) -> None:
    """End the process once :meth:`Agent.shutdown` has stopped everything (exporters flushed,
    control socket removed, logs written): the interpreter's own teardown (a last collection
    over the whole heap, every module's and thread pool's clean-up) took 0.2-0.3 s more on the
    2-core VM and does nothing the agent needs. Standard streams are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more to write there
            pass
    os._exit(code)
