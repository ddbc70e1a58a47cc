"""An OTLP/gRPC metrics receiver for tests, on opentelemetry-proto's own service definition
(``MetricsServiceServicer``). It keeps every data point it was sent.

Also runnable on its own (packaging/ci-test.sh runs it with Debian's python3 against the
installed agent): ``python3 tests/otlp_receiver.py --listen 127.0.0.1:4317 --output pts.jsonl
--duration 10`` writes one JSON line per data point.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Collection
from concurrent import futures
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc


@dataclass(frozen=True)
class Point:
    name: str
    kind: str  # gauge | sum
    attrs: tuple[tuple[str, str], ...]
    time_ns: int
    start_ns: int
    value: float | int | tuple[int, ...] | None  # None: a point flagged "no recorded value"
    value_type: str | None  # as_double | as_int | bucket_counts; None with no value
    monotonic: bool = False
    temporality: int = 0
    bounds: tuple[float, ...] = ()  # a histogram's explicit bounds (its value: the bucket counts)

    @property
    def attr(self) -> dict[str, str]:
        return dict(self.attrs)


class Receiver(metrics_service_pb2_grpc.MetricsServiceServicer):
    """``start()``, read ``points``/``requests``/``resources``, ``stop()``; a receiver
    stopped and started again on the same port looks to the agent like an outage."""

    def __init__(self, listen: str = "127.0.0.1:0", credentials: grpc.ServerCredentials | None = None,
                 reply=None, names: Collection[str] | None = None):
        self.listen = listen
        # the metrics whose points are kept (None: all). A simulated spine exports ~17,000
        # points a request: kept and scanned, they made this receiver answer later and later
        # (the agent's queue grew to tens of requests), so a test that reads a few series
        # names them.
        self.names = frozenset(names) if names is not None else None
        self._by_name: dict[str, list[Point]] = {}
        self.credentials = credentials
        self.reply = reply  # callable(request) -> ExportMetricsServiceResponse, or None
        self.points: list[Point] = []
        self.requests = 0
        self.resources: list[dict[str, str]] = []
        self.metadata: list[dict[str, str]] = []
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self.port = 0

    def start(self) -> Receiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                             options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(self, server)
        host = self.listen.rpartition(":")[0]
        address = f"{host}:{self.port}" if self.port else self.listen
        port = (server.add_secure_port(address, self.credentials) if self.credentials
                else server.add_insecure_port(address))
        if not port:
            raise OSError(f"cannot listen on {address}")
        self.port = port
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None

    @property
    def address(self) -> str:
        return f"{self.listen.rpartition(':')[0]}:{self.port}"

    def Export(self, request, context):  # noqa: N802 - the service's name
        points = []
        for rm in request.resource_metrics:
            resource = {a.key: a.value.string_value for a in rm.resource.attributes}
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if self.names is not None and m.name not in self.names:
                        continue
                    kind = m.WhichOneof("data")
                    data = getattr(m, kind)
                    for dp in data.data_points:
                        attrs = tuple((a.key, a.value.string_value) for a in dp.attributes)
                        if kind == "histogram":  # no value oneof: the bucket counts are its value
                            value, vt, bounds = tuple(dp.bucket_counts), "bucket_counts", tuple(dp.explicit_bounds)
                            assert dp.count == sum(value), (dp.count, value)
                        else:
                            vt = dp.WhichOneof("value")  # None: flagged "no recorded value"
                            value, bounds = (getattr(dp, vt) if vt else None), ()
                        points.append(Point(
                            m.name, kind, attrs, dp.time_unix_nano, dp.start_time_unix_nano, value, vt,
                            getattr(data, "is_monotonic", False), getattr(data, "aggregation_temporality", 0),
                            bounds))
        with self._cond:
            self.requests += 1
            self.resources.append(resource)
            self.metadata.append(dict(context.invocation_metadata()))
            self.points.extend(points)
            for p in points:
                self._by_name.setdefault(p.name, []).append(p)
            self._cond.notify_all()
        if self.reply is not None:
            return self.reply(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def wait_for(self, predicate, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.2))
            return True

    def latest(self, name: str, **attrs: str) -> Point | None:
        """The newest point of ``name`` whose attributes include ``attrs``."""
        with self._cond:
            hits = [p for p in self._by_name.get(name, ()) if all(p.attr.get(k) == v for k, v in attrs.items())]
        return max(hits, key=lambda p: p.time_ns) if hits else None

    def series(self, name: str, **attrs: str) -> list[Point]:
        with self._cond:
            return sorted((p for p in self._by_name.get(name, ())
                           if all(p.attr.get(k) == v for k, v in attrs.items())),
                          key=lambda p: p.time_ns)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--duration", type=float, required=True)
    args = ap.parse_args()
    rx = Receiver(args.listen).start()
    print(f"listening on {rx.address}", file=sys.stderr, flush=True)
    time.sleep(args.duration)  # wallclock: the receiver's run as a tool (--duration), not a wait
    rx.stop()
    with open(args.output, "w") as out:
        for p in rx.points:
            out.write(json.dumps({"name": p.name, "kind": p.kind, "attrs": dict(p.attrs), "time": p.time_ns,
                                  "start": p.start_ns, "value": p.value, "value_type": p.value_type,
                                  "resource": rx.resources[0] if rx.resources else {}}) + "\n")
    print(f"{rx.requests} requests, {len(rx.points)} points", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
