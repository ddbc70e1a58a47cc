"""Pure-Python side of the ASIC plugin loader (agent/_ext/asic.c): the same functions
and errors, with ctypes in place of the C extension.

A plugin is a C shared library by definition (agent/asic/swtel_asic.h), so the
fallback still calls C; what it avoids is the extension module. ctypes releases
the GIL around each foreign call, as the C loader does around ``read``.
"""

from __future__ import annotations

import ctypes
from typing import Any

ASIC_ABI_VERSION = 1
ASIC_HISTOGRAM, ASIC_PEAK = 2, 3  # the kinds of ABI 1.1 (swtel_asic.h)
ASIC_OK, ASIC_ERROR, ASIC_ECHANGED = 0, -1, -2
_NAME_MAX = 64
# What one layout may hold (agent/asic/swtel_asic.h, SWTEL_ASIC_MAX_*; the C loader's limits)
ASIC_MAX_PORTS = 4096
ASIC_MAX_COUNTERS = 4096  # per port
ASIC_MAX_VALUES = 262144  # in all
ASIC_MAX_BINS = 64
_SYMBOL = "swtel_asic_plugin"


class _Port(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * _NAME_MAX),
        ("parent", ctypes.c_char * _NAME_MAX),
        ("speed_mbps", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class _Counter(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * _NAME_MAX),
        ("width", ctypes.c_uint8),
        ("kind", ctypes.c_uint8),
        ("reserved", ctypes.c_uint16),
        ("nbins", ctypes.c_uint32),
    ]


_H = ctypes.c_void_p
_Ops_fields = [
    ("abi_version", ctypes.c_uint32),
    ("ops_size", ctypes.c_uint32),
    ("name", ctypes.c_char_p),
    ("open", ctypes.CFUNCTYPE(_H, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t)),
    ("generation", ctypes.CFUNCTYPE(ctypes.c_uint64, _H)),
    ("port_count", ctypes.CFUNCTYPE(ctypes.c_int, _H)),
    ("port_info", ctypes.CFUNCTYPE(ctypes.c_int, _H, ctypes.c_int, ctypes.POINTER(_Port))),
    ("counter_count", ctypes.CFUNCTYPE(ctypes.c_int, _H, ctypes.c_int)),
    ("counter_info", ctypes.CFUNCTYPE(ctypes.c_int, _H, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Counter))),
    ("read", ctypes.CFUNCTYPE(ctypes.c_int, _H, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64),
                              ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p, ctypes.c_size_t)),
    ("close", ctypes.CFUNCTYPE(None, _H)),
]


class _Bin(ctypes.Structure):
    _fields_ = [("low", ctypes.c_uint64), ("high", ctypes.c_uint64)]


class _Ops(ctypes.Structure):
    """The 1.0 table: what every plugin has (its size is SWTEL_ASIC_OPS_SIZE_1_0)."""

    _fields_ = _Ops_fields


class _Ops11(ctypes.Structure):
    """1.1's table: 1.0's plus bin_info; read only from a plugin whose ops_size covers it."""

    _fields_ = _Ops_fields + [
        ("bin_info", ctypes.CFUNCTYPE(ctypes.c_int, _H, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                      ctypes.POINTER(_Bin))),
    ]


class _Plugin:
    """What the C loader keeps in its capsule: the library, its ops table, the handle."""

    def __init__(self, lib: ctypes.CDLL, ops: _Ops | _Ops11, handle: int, label: str) -> None:
        self.lib, self.ops, self.h, self.label = lib, ops, handle, label
        self.minor = 1 if isinstance(ops, _Ops11) else 0

    def __del__(self) -> None:
        if getattr(self, "h", None):
            self.ops.close(self.h)
            self.h = None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _err_text(err: ctypes.Array) -> str:
    """A plugin's error buffer as the C loader reads it: up to its NUL, and never its last
    byte (the loader terminates the buffer itself; a plugin may fill it to the end)."""
    return _text(err.raw[: len(err) - 1].split(b"\0", 1)[0])


def asic_open(path: str, config: str, label: str | None = None) -> _Plugin:
    """See agent/_ext/asic.c."""
    if not isinstance(path, str) or not isinstance(config, str) or not isinstance(label, (str, type(None))):
        raise TypeError("asic_open(path: str, config: str, label: str = path)")
    dl_path, path = path, path if label is None else label
    try:
        lib = ctypes.CDLL(dl_path, mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        raise OSError(f"asic plugin {path}: cannot load: {exc}") from None
    try:
        entry = getattr(lib, _SYMBOL)
    except AttributeError:
        raise OSError(f"asic plugin {path}: not a swtel ASIC plugin: no symbol {_SYMBOL}") from None
    entry.restype = ctypes.c_void_p
    entry.argtypes = []
    addr = entry()
    if not addr:
        raise OSError(f"asic plugin {path}: {_SYMBOL}() returned NULL")
    head = ctypes.cast(addr, ctypes.POINTER(ctypes.c_uint32 * 2)).contents
    if head[0] != ASIC_ABI_VERSION:
        raise OSError(f"asic plugin {path}: ABI version {head[0]}, this swtel speaks {ASIC_ABI_VERSION}")
    # 1.0's table ends before bin_info: never read past the plugin's ops_size
    table = _Ops11 if head[1] >= ctypes.sizeof(_Ops11) else _Ops
    ops = ctypes.cast(addr, ctypes.POINTER(table)).contents
    if head[1] < ctypes.sizeof(_Ops) or not all(getattr(ops, f) for f, _ in _Ops_fields[3:]):
        raise OSError(f"asic plugin {path}: incomplete ops table (size {head[1]}, expected "
                      f"{ctypes.sizeof(_Ops)} or more)")
    err = ctypes.create_string_buffer(384)
    handle = ops.open(config.encode(), err, len(err))
    if not handle:
        reason = _err_text(err) or "no reason given"
        raise OSError(f"asic plugin {path}: open failed: {reason}")
    return _Plugin(lib, ops, handle, path)


def _live(p: Any) -> _Plugin:
    if not isinstance(p, _Plugin):
        raise TypeError("expected an asic plugin handle")
    if not p.h:
        raise ValueError("asic plugin handle is closed")
    return p


def _refuse(p: _Plugin, why: str) -> OSError:
    return OSError(f"asic plugin {p.label}: layout refused: {why}")


def _name(p: _Plugin, raw: bytes, what: str, label: str, empty_ok: bool = False) -> str:
    """A fixed-size name field's bytes as str, checked as agent/_ext/asic.c does: NUL-terminated
    within the field, UTF-8, no control character (C0, DEL, C1), not empty unless empty_ok."""
    end = raw.find(b"\0")
    if end < 0:
        raise _refuse(p, f"{what}: {label} is not NUL-terminated within {len(raw)} bytes")
    if end == 0 and not empty_ok:
        raise _refuse(p, f"{what}: empty {label}")
    try:
        text = raw[:end].decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse(p, f"{what}: {label} is not UTF-8") from None
    for c in text:
        if c < " " or "\x7f" <= c <= "\x9f":
            raise _refuse(p, f"{what}: {label} contains control character U+{ord(c):04X}")
    return text


def asic_layout(handle: _Plugin) -> tuple[int, list[tuple], list[list[tuple]]]:
    """See agent/_ext/asic.c: the same checks, limits and messages."""
    p = _live(handle)
    o, h = p.ops, p.h
    gen = o.generation(h)
    nports = o.port_count(h)
    if nports < 0:
        raise _refuse(p, f"port_count returned {nports}")
    if nports > ASIC_MAX_PORTS:
        raise _refuse(p, f"port_count returned {nports}, more than the {ASIC_MAX_PORTS} ports swtel accepts")
    ports: list[tuple] = []
    counts: list[int] = []
    seen: dict[str, int] = {}
    port, counter = _Port(), _Counter()
    total = 0
    # First the ports and their counts, so that a layout too large is refused before a
    # single descriptor is listed.
    for i in range(nports):
        ctypes.memset(ctypes.byref(port), 0, ctypes.sizeof(port))
        if o.port_info(h, i, ctypes.byref(port)) != 0:
            raise _refuse(p, f"port_info({i}) failed")
        # the raw fields: ctypes' .name would stop at the end of the array without a NUL
        name = _name(p, ctypes.string_at(ctypes.addressof(port), _NAME_MAX), f"port {i}", "name")
        parent = _name(p, ctypes.string_at(ctypes.addressof(port) + _NAME_MAX, _NAME_MAX), f"port {i}",
                       "parent name", empty_ok=True)
        if name in seen:
            raise _refuse(p, f"port {name!r} listed twice (ports {seen[name]} and {i}): every port needs "
                          "its own name")
        seen[name] = i
        ports.append((name, parent, port.speed_mbps, port.flags))
        nc = o.counter_count(h, i)
        if nc < 0:
            raise _refuse(p, f"port {name!r}: counter_count returned {nc}")
        if nc > ASIC_MAX_COUNTERS:
            raise _refuse(p, f"port {name!r}: counter_count returned {nc}, more than the {ASIC_MAX_COUNTERS} "
                          "counters per port swtel accepts")
        total += nc
        if total > ASIC_MAX_VALUES:
            raise _refuse(p, f"more than the {ASIC_MAX_VALUES} values swtel accepts in one layout ({total} by "
                          f"port {name!r}, {i + 1} of {nports})")
        counts.append(nc)
    counters: list[list[tuple]] = []
    slots = 0  # values in one read: a HISTOGRAM takes nbins
    for i, nc in enumerate(counts):
        pname = ports[i][0]
        row: list[tuple] = []
        names: set[str] = set()
        for j in range(nc):
            ctypes.memset(ctypes.byref(counter), 0, ctypes.sizeof(counter))
            if o.counter_info(h, i, j, ctypes.byref(counter)) != 0:
                raise _refuse(p, f"port {pname!r}: counter_info({i}, {j}) failed")
            cname = _name(p, ctypes.string_at(ctypes.addressof(counter), _NAME_MAX), f"port {pname!r} counter {j}",
                          "name")
            if cname in names:
                raise _refuse(p, f"port {pname!r}: counter {cname!r} listed twice: every counter of a port needs "
                              "its own name")
            names.add(cname)
            # (width and kind are judged by the asic source, which knows what it can unwrap;
            # here what the ABI version allows and what a histogram's bins must be)
            if counter.nbins > ASIC_MAX_BINS:
                raise _refuse(p, f"port {pname!r} counter {cname!r}: nbins {counter.nbins}, more than the "
                              f"{ASIC_MAX_BINS} bins swtel accepts")
            if counter.kind == ASIC_PEAK and p.minor < 1:
                raise _refuse(p, f"port {pname!r} counter {cname!r}: PEAK needs ABI 1.1 (the plugin was built "
                              "against 1.0)")
            hist = counter.kind == ASIC_HISTOGRAM
            slots += counter.nbins if hist else 1
            if slots > ASIC_MAX_VALUES:  # judged before the bins are listed
                raise _refuse(p, f"more than the {ASIC_MAX_VALUES} values swtel accepts in one layout (bins "
                              f"included; by port {pname!r} counter {cname!r})")
            bins = _bins(p, pname, cname, i, j, counter.nbins) if hist else ()
            row.append((cname, counter.width, counter.kind, counter.nbins, bins))
        counters.append(row)
    return gen, ports, counters


def _bins(p: _Plugin, pname: str, cname: str, i: int, j: int, nbins: int) -> tuple[tuple[int, int], ...]:
    """The bins of a HISTOGRAM as (low, high) pairs, checked as agent/_ext/asic.c does."""
    what = f"port {pname!r} counter {cname!r}"
    if p.minor < 1:
        raise _refuse(p, f"{what}: HISTOGRAM needs ABI 1.1 (the plugin was built against 1.0)")
    if not p.ops.bin_info:
        raise _refuse(p, f"{what}: a HISTOGRAM, but the plugin has no bin_info")
    if not 1 <= nbins <= ASIC_MAX_BINS:
        raise _refuse(p, f"{what}: nbins {nbins} (a HISTOGRAM has 1 to {ASIC_MAX_BINS} bins)")
    out: list[tuple[int, int]] = []
    b = _Bin()
    for k in range(nbins):
        b.low = b.high = 0
        if p.ops.bin_info(p.h, i, j, k, ctypes.byref(b)) != 0:
            raise _refuse(p, f"{what}: bin_info({i}, {j}, {k}) failed")
        bad = "its low bound is above its high bound" if b.low > b.high else None
        if bad is None and out and b.low <= out[-1][1]:
            bad = "it does not start above the previous bin's high bound (bins ascend, no overlap)"
        if bad:
            raise _refuse(p, f"{what}: bin {k} [{b.low}, {b.high}]: {bad}")
        out.append((b.low, b.high))
    return tuple(out)


def asic_read(handle: _Plugin, generation: int, out) -> tuple[int, int]:
    """See agent/_ext/asic.c."""
    p = _live(handle)
    view = memoryview(out)
    if view.itemsize != 8 or view.readonly:
        raise TypeError("out: expected a writable buffer of 8-byte items")
    n = len(out)
    buf = (ctypes.c_uint64 * n).from_buffer(out) if n else (ctypes.c_uint64 * 1)()
    ts = ctypes.c_int64(0)
    err = ctypes.create_string_buffer(384)
    rc = p.ops.read(p.h, generation, buf, n, ctypes.byref(ts), err, len(err))
    if rc in (ASIC_OK, ASIC_ECHANGED):
        return rc, ts.value
    raise OSError(f"asic plugin {p.label}: read failed: {_err_text(err) or 'no reason given'}")


def asic_close(handle: _Plugin) -> None:
    """See agent/_ext/asic.c."""
    if not isinstance(handle, _Plugin):
        raise TypeError("expected an asic plugin handle")
    if handle.h:
        handle.ops.close(handle.h)
        handle.h = None
