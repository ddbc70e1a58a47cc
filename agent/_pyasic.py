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
ASIC_OK, ASIC_ERROR, ASIC_ECHANGED = 0, -1, -2
_NAME_MAX = 64
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


class _Ops(ctypes.Structure):
    _fields_ = _Ops_fields


class _Plugin:
    """What the C loader keeps in its capsule: the library, its ops table, the handle."""

    def __init__(self, lib: ctypes.CDLL, ops: _Ops, handle: int, label: str) -> None:
        self.lib, self.ops, self.h, self.label = lib, ops, handle, label

    def __del__(self) -> None:
        if getattr(self, "h", None):
            self.ops.close(self.h)
            self.h = None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def asic_open(path: str, config: str) -> _Plugin:
    """See agent/_ext/asic.c."""
    if not isinstance(path, str) or not isinstance(config, str):
        raise TypeError("asic_open(path: str, config: str)")
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
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
    ops = ctypes.cast(addr, ctypes.POINTER(_Ops)).contents
    if head[1] < ctypes.sizeof(_Ops) or not all(getattr(ops, f) for f, _ in _Ops_fields[3:]):
        raise OSError(f"asic plugin {path}: incomplete ops table (size {head[1]}, expected {ctypes.sizeof(_Ops)})")
    err = ctypes.create_string_buffer(384)
    handle = ops.open(config.encode(), err, len(err))
    if not handle:
        reason = _text(err.value) or "no reason given"
        raise OSError(f"asic plugin {path}: open failed: {reason}")
    return _Plugin(lib, ops, handle, path)


def _live(p: Any) -> _Plugin:
    if not isinstance(p, _Plugin):
        raise TypeError("expected an asic plugin handle")
    if not p.h:
        raise ValueError("asic plugin handle is closed")
    return p


def asic_layout(handle: _Plugin) -> tuple[int, list[tuple], list[list[tuple]]]:
    """See agent/_ext/asic.c."""
    p = _live(handle)
    o, h = p.ops, p.h
    gen = o.generation(h)
    nports = o.port_count(h)
    if nports < 0:
        raise OSError(f"asic plugin {p.label}: port_count returned {nports}")
    ports, counters = [], []
    port, counter = _Port(), _Counter()
    for i in range(nports):
        ctypes.memset(ctypes.byref(port), 0, ctypes.sizeof(port))
        if o.port_info(h, i, ctypes.byref(port)) != 0:
            raise OSError(f"asic plugin {p.label}: port_info({i}) failed")
        ports.append((_text(port.name), _text(port.parent), port.speed_mbps, port.flags))
        nc = o.counter_count(h, i)
        if nc < 0:
            raise OSError(f"asic plugin {p.label}: counter_count({i}) returned {nc}")
        row = []
        for j in range(nc):
            ctypes.memset(ctypes.byref(counter), 0, ctypes.sizeof(counter))
            if o.counter_info(h, i, j, ctypes.byref(counter)) != 0:
                raise OSError(f"asic plugin {p.label}: counter_info({i}, {j}) failed")
            row.append((_text(counter.name), counter.width, counter.kind, counter.nbins))
        counters.append(row)
    return gen, ports, counters


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
    raise OSError(f"asic plugin {p.label}: read failed: {_text(err.value) or 'no reason given'}")


def asic_close(handle: _Plugin) -> None:
    """See agent/_ext/asic.c."""
    if not isinstance(handle, _Plugin):
        raise TypeError("expected an asic plugin handle")
    if handle.h:
        handle.ops.close(handle.h)
        handle.h = None
