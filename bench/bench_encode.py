"""gNMI encoder benchmark: C fast path vs protobuf's own encoder vs the pure-Python fallback.

256 ports x 100 counters = 25,600 updates (every counter changed, as in a snapshot),
and a typical tick where 10% changed. Prints medians of several runs and ratios;
asserts nothing. Run: python bench/bench_encode.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from google.protobuf.internal import api_implementation  # noqa: E402
from pygnmi.spec.v080 import gnmi_pb2  # noqa: E402

from agent import _fallback
from agent.counters import OPENCONFIG, SWTEL_ORIGIN, Batch, Container, CounterSpec, CounterTable  # noqa: E402
from agent.gnmi import encode, paths  # noqa: E402

TARGET = "leaf01"


def build_table(ports: int = 256) -> CounterTable:
    """100 counters per port over three containers, like netdev + ethtool + PFC."""
    specs = []
    for p in range(1, ports + 1):
        name = f"swp{p}"
        oc = Container(OPENCONFIG, f"/interfaces/interface[name={name}]/state/counters")
        eth = Container(OPENCONFIG, f"/interfaces/interface[name={name}]/ethernet/state/counters")
        pfc = Container(SWTEL_ORIGIN, f"/interfaces/interface[name={name}]/pfc")
        specs += [CounterSpec(oc, f"counter-{i}") for i in range(24)]
        specs += [CounterSpec(eth, f"eth-counter-{i}") for i in range(12)]
        specs += [CounterSpec(pfc, f"priority[id={q}]/{leaf}") for q in range(8)
                  for leaf in ("in-pause-pkts", "out-pause-pkts", "in-pause-duration",
                               "out-pause-duration", "rx-bytes", "tx-bytes", "rx-pkts", "tx-pkts")]
    assert len(specs) == ports * 100
    return CounterTable("bench", specs)


def protobuf_encode(batch: Batch, split: list, prefixes: dict) -> list[bytes]:
    """What an exporter written with protobuf does: build messages, SerializeToString.
    Given for free: leaf paths pre-split, prefix Path messages prebuilt per container."""
    groups: dict[Container, list[int]] = {}
    for i in batch.indices:
        groups.setdefault(batch.table.container_at(i), []).append(i)
    out = []
    for c, members in groups.items():
        n = gnmi_pb2.Notification(timestamp=batch.ts_ns)
        n.prefix.CopyFrom(prefixes[c])
        for i in members:
            u = n.update.add()
            for name, keys in split[i]:
                e = u.path.elem.add(name=name)
                for k, v in keys.items():
                    e.key[k] = v
            u.val.uint_val = batch.values[i]
        out.append(gnmi_pb2.SubscribeResponse(update=n).SerializeToString())
    return out


def timeit(fn, runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    try:
        from agent import _swtel
    except ImportError as exc:
        sys.exit(f"C extension not built ({exc}); run setup.py build_ext --inplace")

    table = build_table()
    values = array("Q", [((i * 7919) << 20) + i for i in range(len(table))])
    split = [paths.split(s.leaf) for s in table.specs]
    prefixes = {s.container: paths.to_proto(s.container.path, s.container.origin, TARGET) for s in table.specs}
    codec = encode.codec(table, TARGET)  # built once per table in the agent

    print(f"protobuf {api_implementation.Type()} backend; {len(table)} counters; median of {args.runs} runs")
    print(f"{'case':<22}{'updates':>8}  {'C':>10}  {'protobuf':>10}  {'pure-Python':>12}  {'pb/C':>7}  {'py/C':>7}")
    for label, indices in (("snapshot (all)", list(range(len(table)))),
                           ("tick, 10% changed", list(range(0, len(table), 10)))):
        batch = Batch("bench", time.time_ns(), table, indices, values, [0] * len(indices), bytes(len(indices)))

        def c_fast(batch=batch):
            return _swtel.encode_updates(batch.ts_ns, batch.indices, batch.values, codec.containers,
                                         codec.prefixes, codec.paths, encode.MAX_UPDATES)

        def py_fallback(batch=batch):
            return _fallback.encode_updates(batch.ts_ns, batch.indices, batch.values, codec.containers,
                                            codec.prefixes, codec.paths, encode.MAX_UPDATES)

        # same content from all three
        def decoded(msgs):
            return [gnmi_pb2.SubscribeResponse.FromString(m) for m in msgs]
        assert decoded(c_fast()) == decoded(protobuf_encode(batch, split, prefixes)) == decoded(py_fallback())

        t_c = timeit(c_fast, args.runs)
        t_pb = timeit(lambda batch=batch: protobuf_encode(batch, split, prefixes), args.runs)
        t_py = timeit(py_fallback, args.runs)
        n = len(indices)

        def fmt(t):
            return f"{t * 1e3:8.2f}ms"
        print(f"{label:<22}{n:>8}  {fmt(t_c):>10}  {fmt(t_pb):>10}  {fmt(t_py):>12}  "
              f"{t_pb / t_c:6.1f}x  {t_py / t_c:6.1f}x")
        print(f"{'  per update':<22}{'':>8}  {t_c / n * 1e9:8.0f}ns  {t_pb / n * 1e9:8.0f}ns  "
              f"{t_py / n * 1e9:10.0f}ns")
    t_build = timeit(lambda: encode.codec(CounterTable("bench", table.specs), TARGET), 3)
    print(f"codec build (once per table rebuild): {t_build * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
