"""Control-socket framing: a 4-byte big-endian length, then one msgpack map.

Requests look like ``{"cmd": "status"}``; replies are ``{"ok": true, "result": ...}``
or ``{"ok": false, "error": "...", "kind": ...}``, the kind saying whose the error is
(:data:`KIND_AGENT`, :data:`KIND_REQUEST`, :data:`KIND_BUSY`; an agent before kinds sent none).
Requests are capped at :data:`MAX_REQUEST`;
replies (a status of many ports) at :data:`MAX_REPLY`.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import msgpack

from agent.pathgrammar import escape_name

MAX_REQUEST = 64 * 1024
MAX_REPLY = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")
KIND_AGENT = "agent"  # a command failed inside the agent (a handler raised; a reply it cannot send)
KIND_REQUEST = "request"  # the request cannot be answered (malformed, oversized, late, unknown command)
KIND_BUSY = "busy"  # every connection is running a command: try again


class ProtocolError(Exception):
    """A frame that cannot be read: the connection must be closed."""


class PeerClosed(ProtocolError):
    """The peer closed the connection cleanly between frames."""


def pack(obj: Any) -> bytes:
    """One frame: length prefix + msgpack body. Unknown types are sent as their str(); a
    string that is not UTF-8 (a surrogate-escaped name) as its escaped form, so one odd
    name never makes a whole reply unencodable."""
    try:
        body = msgpack.packb(obj, use_bin_type=True, default=str)
    except UnicodeEncodeError:
        body = msgpack.packb(_text(obj), use_bin_type=True, default=str)
    return _HEADER.pack(len(body)) + body


def _text(obj: Any) -> Any:
    """``obj`` with every string that cannot be encoded as UTF-8 escaped (pathgrammar.escape_name)."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return obj
        except UnicodeEncodeError:
            return escape_name(obj.encode("utf-8", "surrogateescape" if _escaped_bytes(obj) else "backslashreplace"))
    if isinstance(obj, dict):
        return {_text(k): _text(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_text(v) for v in obj]
    return obj


def _escaped_bytes(text: str) -> bool:
    """Every surrogate in ``text`` stands for one byte (surrogateescape's U+DC80..U+DCFF)."""
    return all(not 0xD800 <= ord(ch) <= 0xDFFF or 0xDC80 <= ord(ch) <= 0xDCFF for ch in text)


def unpack_body(body: bytes) -> dict[str, Any]:
    """Decode one frame body, which must be a msgpack map."""
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several types (ExtraData, FormatError, ValueError...)
        raise ProtocolError(f"malformed msgpack: {type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a msgpack map, got {type(obj).__name__}")
    return obj


def recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    """Read exactly ``n`` bytes before ``deadline`` (monotonic), or raise."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProtocolError("timed out reading a frame")
            sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(n - len(buf), 65536))
        except TimeoutError:
            raise ProtocolError("timed out reading a frame") from None
        if not chunk:
            if not buf:
                raise PeerClosed("connection closed")
            raise ProtocolError("connection closed in the middle of a frame")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket, max_size: int, timeout_s: float | None) -> dict[str, Any]:
    """Read one whole frame within ``timeout_s`` (a deadline for the frame, not per recv)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    (size,) = _HEADER.unpack(recv_exact(sock, _HEADER.size, deadline))
    if size > max_size:
        raise ProtocolError(f"frame of {size} bytes exceeds the limit of {max_size}")
    if size == 0:
        raise ProtocolError("empty frame")
    try:
        body = recv_exact(sock, size, deadline)
    except PeerClosed:
        raise ProtocolError("connection closed in the middle of a frame") from None
    return unpack_body(body)
