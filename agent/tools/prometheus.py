"""Latest gNMI values in the Prometheus text exposition format, over http.server.

Two naming schemes, chosen by ``names`` (``swtel collect --prometheus-names``):

* ``cumulus`` (the default): the names and labels remote write and the OTLP ``cumulus``
  profile send for the same values (agent/exporters/otlp_names.py, one table;
  agent/exporters/state_gauges.py's :func:`metric_of_path` decides which values they send):
  ``nvswitch_interface_ether_stats_octets{interface="swp1",target="leaf01"}``. Where two
  sources give one name for one port, the higher rank is served, as those exporters do.
* ``paths``: names from the path elements (``origin`` in front unless it is OpenConfig),
  labels from the path keys plus ``target``:
  ``/interfaces/interface[name=swp1]/state/counters/in-octets`` ->
  ``interfaces_interface_state_counters_in_octets{name="swp1",target="leaf01"}``; strings
  become ``name{...,value="UP"} 1``, other non-numeric values are skipped.

``both`` serves the two side by side (every value twice: a dashboard must not sum across them).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.exporters.state_gauges import metric_of_path
from agent.pathgrammar import split, split_origin

_BAD = re.compile(r"[^a-zA-Z0-9_]")
#: the choices of ``names`` (and ``swtel collect --prometheus-names``), the default first
NAMINGS = ("cumulus", "paths", "both")


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def metric(target: str, path: str) -> tuple[str, dict[str, str]]:
    """(path-derived metric name, labels) for an absolute path string (optionally ``origin:``-prefixed)."""
    origin, rest = split_origin(path)
    names, labels = [], {"target": target}
    if origin and origin != "openconfig":
        names.append(origin)
    for name, keys in split(rest):
        names.append(name)
        for k, v in keys.items():
            label = _BAD.sub("_", k)
            labels[f"{_BAD.sub('_', name)}_{label}" if label in labels else label] = v
    metric_name = _BAD.sub("_", "_".join(names)) or "value"
    if metric_name[0].isdigit():
        metric_name = "_" + metric_name
    return metric_name, labels


def _pattern(path: str) -> str:
    """The path with every key value as ``*``: what all series of one metric share."""
    origin, rest = split_origin(path)
    elems = "".join(f"/{n}" + "".join(f"[{k}=*]" for k in keys) for n, keys in split(rest))
    text = f"{origin}:{elems}" if origin and origin != "openconfig" else elems
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: Any) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return "1"
    return None


#: a series' unchanging parts under the path-derived names: (name, labels, the labels as text,
#: its HELP pattern); None: a path that is not one. Built once per (target, path): a scrape of a
#: fabric is tens of thousands of values, each path parsed once, not per scrape
_Static = tuple[str, dict[str, str], str, str]
_static: dict[tuple[str, str], _Static | None] = {}
#: the same for the Cumulus names: (name, labels as text, rank), None: not served under one
_Named = tuple[str, str, int]
_named: dict[tuple[str, str, bool], _Named | None] = {}
_STATIC_MAX = 1_000_000  # entries kept; beyond, the cache starts again (targets and paths come and go)


def _static_of(target: str, path: str) -> _Static | None:
    key = (target, path)
    hit = _static.get(key, False)
    if hit is not False:
        return hit
    try:
        name, labels = metric(target, path)
    except ValueError:
        entry = None
    else:
        text = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
        entry = (name, labels, text, _pattern(path))
    if len(_static) >= _STATIC_MAX:
        _static.clear()
    _static[key] = entry
    return entry


def _named_of(target: str, path: str, value: Any) -> _Named | None:
    """The Cumulus-style series of a value, as remote write sends it: its kind (a number, not
    text or a boolean) decides with the path, so the cache is per (target, path, is a number)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    key = (target, path, number)
    hit = _named.get(key, False)
    if hit is not False:
        return hit
    try:
        found = metric_of_path(path, value)
    except ValueError:
        found = None
    entry = None
    if found is not None:
        cname, attrs, rank = found
        pairs = sorted((*attrs, ("target", target)))
        entry = (cname, ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs), rank)
    if len(_named) >= _STATIC_MAX:
        _named.clear()
    _named[key] = entry
    return entry


def render(latest: Iterable[tuple[str, str, Any]], names: str = "cumulus") -> str:
    """Exposition text for (target, path, value) triples, under ``names`` (:data:`NAMINGS`):
    the Cumulus names as gauges (labels ``interface``, ``tc``, ``priority``, ``lane``, ... and
    ``target``), the path-derived names as untyped series, or both."""
    if names not in NAMINGS:
        raise ValueError(f"names: one of {', '.join(NAMINGS)}, got {names!r}")
    cumulus_on, paths_on = names in ("cumulus", "both"), names in ("paths", "both")
    by_name: dict[str, list[str]] = {}
    helps: dict[str, str] = {}
    cumulus: dict[tuple[str, str], tuple[int, str]] = {}
    for target, path, value in latest:
        number = _number(value)
        if number is None:
            continue
        if cumulus_on:
            named = _named_of(target, path, value)
            if named is not None:
                cname, ctext, rank = named
                old = cumulus.get((cname, ctext))
                if old is None or rank > old[0]:  # the hardware's counter wins
                    cumulus[(cname, ctext)] = (rank, number)
        if not paths_on:
            continue
        static = _static_of(target, path)
        if static is None:
            continue
        name, labels, text, pattern = static
        if name not in helps:
            helps[name] = pattern
        if isinstance(value, str):  # a state: its value is a label
            text = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted({**labels, "value": value}.items()))
        by_name.setdefault(name, []).append(f"{name}{{{text}}} {number}")
    out = []
    grouped: dict[str, list[str]] = {}
    for (cname, text), (_rank, number) in cumulus.items():
        grouped.setdefault(cname, []).append(f"{cname}{{{text}}} {number}")
    for cname in sorted(grouped):
        out.append(f"# HELP {cname} Cumulus Linux OTLP export name (swtel)")
        out.append(f"# TYPE {cname} gauge")
        out.extend(sorted(grouped[cname]))
    for name in sorted(by_name):
        out.append(f"# HELP {name} gNMI path {helps[name]}")
        out.append(f"# TYPE {name} untyped")
        out.extend(sorted(by_name[name]))
    return "\n".join(out) + "\n"


class _Renderer:
    """The exposition, rendered by one thread at a time and served from the last render.

    A fabric's exposition is tens of thousands of lines: rendering it takes a few hundred ms on
    a quiet machine and seconds on a busy one, longer than Prometheus' scrape timeout (at most
    its interval). Rendered per request, scrapes piled up in threads that fought over the GIL
    with the streams being read, each slower than the last (16 s at load 20), and Prometheus
    never stored a sample. So: a request is answered at once with the last body while a newer
    one is rendered in the background (stale-while-revalidate; values at most one render old);
    only the first request waits. At most one render runs, however many scrapers there are."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, str, Any]]], names: str = "cumulus"):
        self.source, self.names = source, names
        self._lock = threading.Lock()
        self._fresh = threading.Condition(self._lock)
        self._body: bytes | None = None
        self._rendering = False

    def body(self) -> bytes:
        with self._lock:
            if not self._rendering:
                self._rendering = True
                threading.Thread(target=self._render, name="swtel-prometheus-render", daemon=True).start()
            while self._body is None:  # the first request: nothing rendered yet
                self._fresh.wait()
            return self._body

    def _render(self) -> None:
        try:
            body = render(self.source(), self.names).encode()
        except Exception as exc:  # noqa: BLE001 - a bad value must not end the exposition
            body = f"# swtel: the exposition failed to render: {type(exc).__name__}\n".encode()
        with self._lock:
            self._body, self._rendering = body, False
            self._fresh.notify_all()


class MetricsServer:
    """``GET /metrics`` serving ``render(source(), names)`` (through :class:`_Renderer`); runs
    in its own daemon thread."""

    def __init__(self, host: str, port: int, source: Callable[[], Iterable[tuple[str, str, Any]]],
                 names: str = "cumulus"):
        if names not in NAMINGS:
            raise ValueError(f"names: one of {', '.join(NAMINGS)}, got {names!r}")
        self.names = names
        renderer = self.renderer = _Renderer(source, names)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = renderer.body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the scraper gave up (its timeout): nothing to tell it

            def log_message(self, *args: Any) -> None:  # scrapes are not news
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="swtel-prometheus", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
