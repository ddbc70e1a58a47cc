"""The few gNMI messages swtel sends, written as protobuf's wire format by hand.

Why not gnmi_pb2 here: importing it (protobuf's runtime and gNMI's descriptors) costs a
dial-out agent ~2.5 MiB of its 48 MB budget (issue 35), for five small messages whose wire
format is fixed by gnmi.proto 0.8 (field numbers below). Decoding, and the server's replies
built as messages, stay with gnmi_pb2; tests/unit/test_gnmi_wire.py checks every function here
against gnmi_pb2's serialization, decoded.

A message's fields are written in field-number order, as protobuf does; a repeated field is
its items one after another, so two serialized elem-only Paths joined are one Path.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from typing import Any

# gnmi.proto 0.8: tag = field number << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited)
PATH_ORIGIN, PATH_ELEM, PATH_TARGET = 0x12, 0x1A, 0x22  # Path: origin 2, elem 3, target 4
ELEM_NAME, ELEM_KEY = 0x0A, 0x12  # PathElem: name 1, key 2 (map entries: key 1, value 2)
ENTRY_KEY, ENTRY_VALUE = 0x0A, 0x12
NOTIF_TIMESTAMP, NOTIF_PREFIX, NOTIF_UPDATE, NOTIF_DELETE = 0x08, 0x12, 0x22, 0x2A
UPDATE_PATH, UPDATE_VAL = 0x0A, 0x1A  # Update: path 1, val 3
RESPONSE_UPDATE = 0x0A  # SubscribeResponse: update 1 (sync_response 3 below)
# TypedValue's oneof: string 1, int64 2, uint64 3, bool 4, bytes 5, json_ietf 11, double 14
TV_STRING, TV_INT, TV_UINT, TV_BOOL, TV_BYTES, TV_JSON_IETF, TV_DOUBLE = 0x0A, 0x10, 0x18, 0x20, 0x2A, 0x5A, 0x71

#: ``SubscribeResponse{sync_response: true}``
SYNC = b"\x18\x01"


def varint(v: int) -> bytes:
    """An unsigned varint (a negative int64 is first taken modulo 2**64, as protobuf does)."""
    v &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(tag: int, body: bytes) -> bytes:
    """One length-delimited field: tag byte, length, body."""
    return bytes((tag,)) + varint(len(body)) + body


def _text(tag: int, s: str) -> bytes:
    return field(tag, s.encode("utf-8"))


def path(elems: Iterable[tuple[str, dict[str, str]]], origin: str = "", target: str = "") -> bytes:
    """A serialized ``gnmi.Path``: origin, elems (name, keys in their order), target; empty
    strings left out, as proto3 does."""
    out = [_text(PATH_ORIGIN, origin)] if origin else []
    for name, keys in elems:
        body = _text(ELEM_NAME, name)
        for k, v in keys.items():
            body += field(ELEM_KEY, _text(ENTRY_KEY, k) + _text(ENTRY_VALUE, v))
        out.append(field(PATH_ELEM, body))
    if target:
        out.append(_text(PATH_TARGET, target))
    return b"".join(out)


def typed_value(value: Any) -> bytes:
    """A Python value as the serialized ``gnmi.TypedValue`` a collector expects for it: bool,
    uint64 (an int 0..2**64-1), int64 (a negative one; ValueError outside int64), double,
    string, bytes, anything else as JSON (json_ietf_val, keys sorted)."""
    if isinstance(value, bool):
        return bytes((TV_BOOL, int(value)))
    if isinstance(value, int):
        if 0 <= value < 2**64:
            return bytes((TV_UINT,)) + varint(value)
        if not -(2**63) <= value < 0:
            raise ValueError(f"{value} is outside int64 and uint64")
        return bytes((TV_INT,)) + varint(value)
    if isinstance(value, float):
        return bytes((TV_DOUBLE,)) + struct.pack("<d", value)
    if isinstance(value, str):
        return _text(TV_STRING, value)
    if isinstance(value, bytes):
        return field(TV_BYTES, value)
    return field(TV_JSON_IETF, json.dumps(value, sort_keys=True).encode())


def update(path_bytes: bytes, value_bytes: bytes) -> bytes:
    """A ``Notification.update`` field from a serialized Path and a serialized TypedValue."""
    return field(NOTIF_UPDATE, field(UPDATE_PATH, path_bytes) + field(UPDATE_VAL, value_bytes))


def delete(path_bytes: bytes) -> bytes:
    """A ``Notification.delete`` field from a serialized Path."""
    return field(NOTIF_DELETE, path_bytes)


def notification_head(ts_ns: int, prefix: bytes) -> bytes:
    """A Notification's timestamp and prefix fields, which its update/delete fields follow."""
    return bytes((NOTIF_TIMESTAMP,)) + varint(ts_ns) + field(NOTIF_PREFIX, prefix)


def response(notification: bytes) -> bytes:
    """``SubscribeResponse{update: notification}`` from a serialized Notification."""
    return field(RESPONSE_UPDATE, notification)


def response_of(parts: list[bytes | bytearray], size: int) -> bytes:
    """``SubscribeResponse{update: notification}`` from a Notification serialized in pieces
    (``size`` bytes together), each copied once."""
    return b"".join([bytes((RESPONSE_UPDATE,)) + varint(size), *parts])
