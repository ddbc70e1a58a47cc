"""hft source: Cumulus Linux's High Frequency Telemetry (HFT) job files, read off the tick thread.

HFT (JSON job files since Cumulus 5.10, OTLP streaming since 5.15; Spectrum-4 and later; not on
ports that use 8 lanes) samples ASIC counters every 100–12,750 µs (multiples of 50, default
5,000) during a scheduled *job* (`nv action schedule system telemetry hft job ...`, at most one
at a time, 20 s by default) and, with `nv set system telemetry hft target local`, writes them as
JSON in ``/var/run/cumulus/hft``.
NVIDIA's documentation, which this reader follows (not a captured file: see
tests/fixtures/hft/README.md):

- https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-515/Monitoring-and-Troubleshooting/High-Frequency-Telemetry/
  (the directory, profiles, jobs; counters ``if_in_octets``, ``if_out_octets``, ``tc_curr_occupancy``)
- https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-510/Monitoring-and-Troubleshooting/ASIC-Monitoring/
  ("example json file", in the page as published in 2024: CumulusNetworks/docs commit e4804b8,
  content/cumulus-linux-510/Monitoring-and-Troubleshooting/ASIC-Monitoring.md; later revisions
  dropped it): ``{"hostname": H, "0": {"sample_index": 1, "metadata": {"sec": S, "nsec": N},
  "port_data": {"swp1": {"if_out_octets": V, "if_in_octets": V, "tc_data": {"0":
  {"tc_curr_occupancy": V}}}}}, ...}``, one numbered object per sample)

What the documentation does not say, and how this reader takes it: the file's name (every
``*.json`` in the directory; the newest by mtime is read), when during a job it is written (a
JSON document is whole only once written, so a file is read again only when its size, mtime or
inode change), the occupancy's unit (published as the file gives it) and whether the octets are
running totals (taken as the SDK's ``if_in_octets``, a running total, as switchd's ``HwIfInOctets``).

A worker thread lists the directory every ``refresh``, reads the newest file bounded by
``max_bytes`` and parses it into an immutable :class:`Reading`: the samples it had not seen
(newer than the last reading's newest), folded into one: each counter's newest value, stamped
with that sample's own time, and each queue's peak occupancy over them. The tick's ``read``
only takes the newest reading: a 100 ms tick over ten 10 ms samples publishes one value per
path (the octets' newest total, so no byte is lost, only the shape within; the occupancy of the
newest sample on ``current-occupancy``, the highest of the ten on ``peak-occupancy``). A missing
directory or no job file is a status note, not an error; a garbage, truncated or oversized file
costs that read (an error in status) and keeps the last values. Once the newest published
sample is over 5 s old the table is dropped, and the paths HFT took by ``rank`` go back to the
sources that still move.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from agent.config import Duration, setting
from agent.counters import (
    COUNTER,
    GAUGE,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
)
from agent.files import read_regular
from agent.pathgrammar import escape_key, interface_path, qos_interface_path
from agent.sources.base import NO_DATA, Source, SourceConfig, rank_setting, register

DEFAULT_DIRECTORY = "/var/run/cumulus/hft"
#: the engine refuses a sample's own stamp further than this from the agent's clock
#: (agent/engine.py MAX_CLOCK_SKEW_NS; tests/unit/test_hft.py checks they agree): a job file
#: whose newest sample is older (a job that ended before the agent started) is not published
STALE_NS = 5_000_000_000
MAX_FILES = 4096  # directory entries looked at per listing (the switch keeps at most 35 jobs)
MAX_PORTS = 1024
MAX_TCS = 16  # traffic classes 0–15
MAX_NAME = 64  # characters of a port name
U64 = (1 << 64) - 1

#: the file's per-port counters -> (container template, leaf, kind); the paths the other
#: sources give the same counters (netdev's rx_bytes, the asic source's HwIfInOctets)
_IF = interface_path("{port}")
_QUEUE = qos_interface_path("{port}") + "/output/queues/queue[name={n}]/state"
PORT_COUNTERS = {
    "if_in_octets": (OPENCONFIG, f"{_IF}/state/counters", "in-octets", COUNTER),
    "if_out_octets": (OPENCONFIG, f"{_IF}/state/counters", "out-octets", COUNTER),
}
#: per traffic class: the newest sample's occupancy, and the highest of the samples folded into
#: one read (the asic source's ``tc_curr_occupancy_N`` and ``tc_peak_occupancy_N`` paths)
TC_COUNTER = "tc_curr_occupancy"
TC_LEAVES = ("current-occupancy", "peak-occupancy")

#: a counter of the layout: (port, file counter name, traffic class or "" , leaf)
Key = tuple[str, str, str, str]


def spec_for(key: Key) -> CounterSpec:
    port, name, tc, leaf = key
    if name == TC_COUNTER:
        path = _QUEUE.format(port=escape_key(port), n=escape_key(tc))
        return CounterSpec(Container(SWTEL_ORIGIN, path), leaf, 64, GAUGE, port)
    origin, template, leaf, kind = PORT_COUNTERS[name]
    return CounterSpec(Container(origin, template.format(port=escape_key(port))), leaf, 64, kind, port)


def _u64(value: Any) -> int | None:
    """A counter value of the file: an int in u64 (bools, floats, text and negatives refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U64:
        return None
    return value


def _stamp(metadata: Any) -> int | None:
    """``{"sec": S, "nsec": N}`` -> ns since the epoch, or None when it is not that."""
    if not isinstance(metadata, dict):
        return None
    sec, nsec = _u64(metadata.get("sec")), _u64(metadata.get("nsec"))
    if sec is None or nsec is None or nsec >= 1_000_000_000 or sec > 1 << 40:
        return None
    return sec * 1_000_000_000 + nsec


_WS = re.compile(r"[ \t\n\r]*")


def members(data: bytes) -> Iterator[tuple[str, Any]]:
    """The members of a job file's top-level object, decoded one at a time: the C decoder holds
    the GIL for one sample, not the whole file, and a sample's objects are dropped once folded,
    so the tick thread is not stalled for the length of one ``json.loads`` of the file (nor
    the garbage collector's passes over all of it): bench/bench_hft.py measures both. What
    ``json.loads`` refuses raises ValueError (a truncated file too, once the decoder reaches
    its end); a document that is not an object raises ValueError."""
    text = data.decode("utf-8")
    decoder = json.JSONDecoder()
    i = _WS.match(text, 0).end()
    if not text.startswith("{", i):
        json.loads(text)  # the decoder's own error for what is not JSON
        raise ValueError("not a JSON object")
    try:
        i = _WS.match(text, i + 1).end()
        if text[i] == "}":
            _end(text, i)
            return
        while True:
            if text[i] != '"':
                raise ValueError(f"expected a member name at {i}")
            key, i = decoder.raw_decode(text, i)
            i = _WS.match(text, i).end()
            if text[i] != ":":
                raise ValueError(f"expected ':' at {i}")
            value, i = decoder.raw_decode(text, _WS.match(text, i + 1).end())
            i = _WS.match(text, i).end()
            if text[i] == "}":
                _end(text, i)
                yield key, value
                return
            if text[i] != ",":
                raise ValueError(f"expected ',' or '}}' at {i}")
            yield key, value
            i = _WS.match(text, i + 1).end()
    except IndexError:
        raise ValueError("truncated: the document ends inside its top-level object") from None


def _end(text: str, i: int) -> None:
    if _WS.match(text, i + 1).end() != len(text):
        raise ValueError(f"extra data after the top-level object at {i + 1}")


class SampleParser:
    """One job file's samples, one member at a time: ``sample(name, obj)`` gives (timestamp ns,
    {key: value}) or None (``hostname``, or not of the documented shape: counted in
    ``skipped``, as is each value that is not). ``samples``: how many were read."""

    def __init__(self) -> None:
        self.skipped = 0
        self.samples = 0
        self._ports: set[str] = set()

    def sample(self, name: str, sample: Any) -> tuple[int, dict[Key, int]] | None:
        if name == "hostname":
            return None
        ts = _stamp(sample.get("metadata")) if isinstance(sample, dict) else None
        port_data = sample.get("port_data") if isinstance(sample, dict) else None
        if ts is None or not isinstance(port_data, dict):
            self.skipped += 1
            return None
        self.samples += 1
        values: dict[Key, int] = {}
        for port, data in port_data.items():
            if not port or len(port) > MAX_NAME or not isinstance(data, dict):
                self.skipped += 1
                continue
            if port not in self._ports:
                if len(self._ports) >= MAX_PORTS:
                    self.skipped += 1
                    continue
                self._ports.add(port)
            for counter, (_o, _t, leaf, _k) in PORT_COUNTERS.items():
                if counter in data:
                    v = _u64(data[counter])
                    if v is None:
                        self.skipped += 1
                    else:
                        values[(port, counter, "", leaf)] = v
            tcs = data.get("tc_data")
            if isinstance(tcs, dict):
                for tc, entry in list(tcs.items())[:MAX_TCS]:
                    v = _u64(entry.get(TC_COUNTER)) if isinstance(entry, dict) else None
                    if v is None or not tc.isdigit() or int(tc) >= MAX_TCS:
                        self.skipped += 1
                    else:
                        values[(port, TC_COUNTER, str(int(tc)), TC_LEAVES[0])] = v
        return ts, values


def parse_samples(document: Any) -> tuple[list[tuple[int, dict[Key, int]]], int]:
    """Every sample of a decoded job file, oldest first, and how many values or samples were
    not of the documented shape (each skipped alone). ValueError: no sample in it at all."""
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    parser = SampleParser()
    out = [s for name, obj in document.items() if (s := parser.sample(name, obj)) is not None]
    if not out:
        raise ValueError("no HFT sample (an object with metadata and port_data)")
    return sorted(out, key=lambda s: s[0]), parser.skipped


def fold(samples: Iterable[tuple[int, dict[Key, int]]], after_ns: int) -> tuple[int, dict[Key, int], int]:
    """The samples newer than ``after_ns`` (in any order) folded into one read: (the newest
    one's timestamp, each key's value in the newest sample that has it plus each queue's
    ``peak-occupancy`` over them, how many were folded). Timestamp 0: no new sample."""
    newest_ts, n = 0, 0
    latest: dict[Key, tuple[int, int]] = {}  # key -> (ts, value) of the newest sample with it
    peaks: dict[Key, int] = {}
    for ts, sample in samples:
        if ts <= after_ns:
            continue
        n += 1
        newest_ts = max(newest_ts, ts)
        for key, v in sample.items():
            have = latest.get(key)
            if have is None or ts >= have[0]:
                latest[key] = (ts, v)
            if key[1] == TC_COUNTER:
                peak_key = (key[0], key[1], key[2], TC_LEAVES[1])
                if v > peaks.get(peak_key, -1):
                    peaks[peak_key] = v
    values = {key: v for key, (_ts, v) in latest.items()}
    values.update(peaks)
    return newest_ts, values, n


@dataclass(frozen=True)
class Reading:
    """What the worker made of one look at the directory (immutable: the tick only reads it)."""

    generation: int
    #: "ok", "absent" (no directory, no job file: not an error), "stale", "idle" or "error"
    state: str
    note: str
    ts_ns: int = 0  # the newest folded sample's own time; 0: nothing to publish
    values: tuple[tuple[Key, int], ...] = ()
    folded: int = 0
    file: str = ""


def newest_job_file(directory: str) -> tuple[str, os.stat_result] | None:
    """The newest regular ``*.json`` file of ``directory`` by mtime (None: none). Raises
    FileNotFoundError when the directory does not exist."""
    best: tuple[int, str, os.stat_result] | None = None
    with os.scandir(directory) as entries:
        for n, entry in enumerate(entries):
            if n >= MAX_FILES:
                break
            if not entry.name.endswith(".json"):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and (best is None or (st.st_mtime_ns, entry.name) > best[:2]):
                best = (st.st_mtime_ns, entry.name, st)
    return None if best is None else (os.path.join(directory, best[1]), best[2])


class Worker:
    """Looks at the directory every ``refresh``; ``latest`` is the newest :class:`Reading`
    (None until the first look ends). ``clock`` gives the agent's time (tests inject one)."""

    def __init__(self, section: Any, clock: Any = time.time_ns) -> None:
        self.section = section
        self.clock = clock
        self.latest: Reading | None = None
        self.looks = 0
        self.files_read = 0
        self._generation = 0
        self._seen_file: tuple[str, int, int, int] | None = None  # path, size, mtime, inode
        self._after_ns = 0  # the newest sample already folded into a reading
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="swtel-hft", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(10.0)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.look()
            self._stopping.wait(float(self.section.refresh))

    def look(self) -> Reading | None:
        """One look at the directory (or ``file``): a new Reading when something changed; never raises."""
        try:
            reading = self._look()
        except Exception as exc:  # noqa: BLE001 - a bug here must not end the source for good
            reading = self._reading("error", f"internal: {exc!r}"[:300])
        self.looks += 1
        if reading is not None:
            self.latest = reading
        return reading

    def _reading(self, state: str, note: str, **kw: Any) -> Reading:
        self._generation += 1
        return Reading(self._generation, state, note, **kw)

    def _look(self) -> Reading | None:
        sec = self.section
        try:
            if sec.file:
                st = os.stat(sec.file, follow_symlinks=False)
                found: tuple[str, os.stat_result] | None = (str(sec.file), st)
            else:
                found = newest_job_file(str(sec.directory))
        except FileNotFoundError:
            where = sec.file or sec.directory
            return self._same_or("absent", f"no {where} (HFT not configured with target local, or no job yet)")
        except OSError as exc:
            return self._same_or("error", f"{sec.file or sec.directory}: {exc.strerror or exc}")
        if found is None:
            return self._same_or("absent", f"no HFT job file in {sec.directory}")
        path, st = found
        identity = (path, st.st_size, st.st_mtime_ns, st.st_ino)
        if identity == self._seen_file:
            return None  # unchanged: nothing new to read
        self._seen_file = identity
        if st.st_size > int(sec.max_bytes):
            return self._reading("error", f"{path}: {st.st_size} bytes, over max_bytes {sec.max_bytes} (not read)",
                                 file=path)
        try:
            data = read_regular(path, int(sec.max_bytes) + 1, follow_symlinks=False)
        except OSError as exc:
            return self._reading("error", f"{path}: {exc.strerror or exc}", file=path)
        self.files_read += 1
        if len(data) > int(sec.max_bytes):
            return self._reading("error", f"{path}: over max_bytes {sec.max_bytes} (grew while read)", file=path)
        parser = SampleParser()
        try:
            stream = (s for name, obj in members(data) if (s := parser.sample(name, obj)) is not None)
            ts, values, n = fold(stream, self._after_ns)
            if not parser.samples:
                raise ValueError("no HFT sample (an object with metadata and port_data)")
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return self._reading("error", f"{path}: not an HFT job file: {str(exc)[:120]}", file=path)
        skipped = parser.skipped
        if n == 0:
            return self._reading("idle", f"{path}: no sample newer than the last published", file=path)
        self._after_ns = ts
        bad = f", {skipped} values not of the documented shape skipped" if skipped else ""
        age = self.clock() - ts
        if age > STALE_NS:
            return self._reading("stale", f"{path}: newest sample {age / 1e9:.0f} s old: not published "
                                 f"(a finished job; its series stays in the file){bad}", file=path)
        return self._reading("ok", f"{path}: {n} samples folded{bad}", ts_ns=ts,
                             values=tuple(sorted(values.items())), folded=n, file=path)

    def _same_or(self, state: str, note: str) -> Reading | None:
        """A reading for a condition, once (not a new generation every look while it lasts)."""
        self._seen_file = None
        last = self.latest
        if last is not None and last.state == state and last.note == note:
            return None
        return self._reading(state, note)


@dataclass
class HftConfig(SourceConfig):
    """``sources.hft``."""

    enabled: bool = setting(False)
    interval: Duration | None = setting(None, type="duration (10ms–1h) or null", doc=(
        "how often the tick takes the worker's newest reading (a look-up: the file is read on the "
        "source's own thread, every `refresh`)"))
    directory: str = setting(DEFAULT_DIRECTORY, type="path", doc=(
        "where Cumulus writes HFT job files (`nv set system telemetry hft target local`); the newest "
        "`*.json` by mtime is read"))
    file: str | None = setting(None, type="path or null", doc=(
        "read this one file instead of the directory's newest (tests, a copied job file)"))
    refresh: Duration = setting(Duration(1.0), type="duration (100ms–1h)", doc=(
        "how often the directory is looked at; a file is parsed again only when its size, mtime or "
        "inode change"))
    max_bytes: int = setting(32 << 20, type="integer (4096–268435456)", doc=(
        "the largest job file read; a larger one is an error in status, not read. Reading holds "
        "about twice the file in memory for the moment it is parsed (a 20 s job at 5 ms on 8 ports "
        "with 8 TCs is about 30 MiB; NVIDIA: one counter on one port at 100 µs is about 90 MB in "
        "10 s: keep jobs short and narrow)"))
    rank: int = rank_setting(3)  # HFT's own ASIC samples over the asic plugin's, the kernel's and the driver's


@register
class HftSource(Source):
    name = "hft"
    config_class = HftConfig
    doc = ("Cumulus Linux High Frequency Telemetry job files (`/var/run/cumulus/hft`, JSON): per-port "
           "octets and per-TC occupancy sampled at 100–12,750 µs, folded per tick (newest value, "
           "its own timestamp; peak occupancy)")
    uses_links = False
    selects_ports = False  # no job file (no job yet, or none running) is the usual case, not a fault

    @classmethod
    def check(cls, section: HftConfig, where: str, problems: list[str], cfg: Any) -> None:
        if not 0.1 <= float(section.refresh) <= 3600.0:
            problems.append(f"{where}.refresh: between 100ms and 1h, got {section.refresh}")
        if not 4096 <= int(section.max_bytes) <= 256 << 20:
            problems.append(f"{where}.max_bytes: between 4096 and 268435456, got {section.max_bytes}")
        if not str(section.directory).strip():
            problems.append(f"{where}.directory: a path, got an empty string")

    @classmethod
    def doc_paths(cls) -> list[str]:
        out = ["## Cumulus High Frequency Telemetry (job files)", "",
               "From the newest HFT job file in `/var/run/cumulus/hft` (`sources.hft`, off by default), per "
               "port X and traffic class N: the samples the file holds that were not yet published, folded "
               "into one read stamped with the newest sample's own time; `peak-occupancy` is the highest "
               "occupancy of those samples. Same paths as netdev's and the asic source's, so the election (`rank`, "
               "default 3) puts HFT's values on them until 5 s after the newest sample "
               "([cadence.md](cadence.md)).", "", "| source | value | path | kind |", "|---|---|---|---|"]
        for counter in PORT_COUNTERS:
            spec = spec_for(("X", counter, "", ""))
            out.append(f"| hft | `{counter}` | `{spec.container.full(spec.leaf)}` | counter |")
        for leaf in TC_LEAVES:
            spec = spec_for(("X", TC_COUNTER, "N", leaf))
            what = "`tc_data.N.tc_curr_occupancy`" + (" (newest)" if leaf == TC_LEAVES[0] else " (peak)")
            out.append(f"| hft | {what} | `{spec.container.full(spec.leaf)}` | gauge |")
        return out + [""]

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self._worker: Worker | None = None
        self._seen = 0  # the generation of the reading last taken
        self._layout: tuple[Key, ...] = ()
        self._index: dict[Key, int] = {}
        self._want: tuple[Key, ...] | None = None  # a new layout, built at the next setup
        self._state, self._note = "starting", "no look at the HFT directory yet"
        self.folded = 0
        self.clock = time.time_ns  # the agent's clock, for the age of the values held (tests inject one)
        self.released = 0  # tables dropped because their newest sample grew old

    @property
    def needs_setup(self) -> bool:
        return self._want is not None

    def setup(self, links: Any) -> None:
        if self._want is not None:
            self._layout, self._want = self._want, None
        self._index = {k: i for i, k in enumerate(self._layout)}
        self.table = CounterTable(self.name, [spec_for(k) for k in self._layout])
        self.values = array("Q", bytes(8 * len(self._layout)))
        self.ports = sorted({k[0] for k in self._layout})
        self._seen = 0 if self._layout else self._seen  # a new table: take the reading again into it
        if self._worker is None:
            self._worker = Worker(self.section)
            self._worker.start()

    def read(self) -> int:
        reading = self._worker.latest if self._worker is not None else None
        if reading is None or reading.generation == self._seen:
            if self._layout and self.clock() - self.sample_ts_ns > STALE_NS:
                # the job's values are old: drop the table, so that the election gives the
                # paths back to the sources that still move (netdev, asic)
                self._want = ()
                self.released += 1
                self._state, self._note = "idle", f"{self._note} (values released: newest sample over 5 s old)"
            return NO_DATA
        self._state, self._note = reading.state, reading.note
        if reading.state == "error":
            self._seen = reading.generation
            self.note_error(reading.note)
            return NO_DATA
        if not reading.values:
            self._seen = reading.generation
            return NO_DATA
        keys = tuple(k for k, _v in reading.values)
        if any(k not in self._index for k in keys):
            self._want = tuple(sorted(set(self._layout) | set(keys)))  # set up again, then read it
            return NO_DATA
        self._seen = reading.generation
        for key, value in reading.values:
            self.values[self._index[key]] = value
        self.sample_ts_ns = reading.ts_ns
        self.folded += reading.folded
        return len({k[0] for k in keys})

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def info(self) -> dict[str, Any]:
        w = self._worker
        return {"note": f"hft {self._state}: {self._note}", "hft_state": self._state,
                "samples_folded": self.folded, "files_read": w.files_read if w else 0,
                "released": self.released}


__all__ = ["HftConfig", "HftSource", "Reading", "Worker", "SampleParser", "fold", "members", "newest_job_file",
           "parse_samples"]
