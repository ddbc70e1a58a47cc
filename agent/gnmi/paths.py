"""gNMI path strings <-> ``gnmi_pb2.Path``, and pre-encoded path bytes.

Path strings use the gNMI string form: ``/a/b[k=v][k2=v2]/c``, an optional
``origin:`` in front; ``*`` and ``...`` are wildcards for matching.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from agent.gnmi import wire
from agent.pathgrammar import escape_key, format_path, split, split_origin

if TYPE_CHECKING:  # the messages: imported where they are built (a dial-out agent never does)
    from pygnmi.spec.v080 import gnmi_pb2

# the grammar lives in agent/pathgrammar.py; these names stay here for this package's callers
__all__ = ["escape_key", "split", "split_origin", "to_proto", "from_proto", "join", "encoded", "matches"]


def to_proto(path: str, origin: str = "", target: str = "") -> gnmi_pb2.Path:
    from pygnmi.spec.v080 import gnmi_pb2

    return gnmi_pb2.Path(
        origin=origin,
        target=target,
        elem=[gnmi_pb2.PathElem(name=n, key=k) for n, k in split(path)],
    )


def from_proto(path: gnmi_pb2.Path) -> str:
    """Path message -> string (elems only; origin and target are separate fields)."""
    if not path.elem and path.element:  # deprecated gNMI 0.3 string elements
        return "/" + "/".join(path.element)
    return format_path((e.name, e.key) for e in path.elem)


def join(prefix: gnmi_pb2.Path | None, path: gnmi_pb2.Path) -> str:
    """Absolute string of ``prefix`` + ``path`` (a notification's prefix and an update's path)."""
    head = from_proto(prefix) if prefix is not None else "/"
    tail = from_proto(path)
    if head == "/":
        return tail
    return head if tail == "/" else head + tail


@lru_cache(maxsize=65536)
def encoded(path: str, origin: str = "", target: str = "") -> bytes:
    """Serialized ``gnmi.Path`` for a string, cached: the encoder's per-counter path bytes."""
    return wire.path(split(path), origin, target)


def matches(pattern: list[tuple[str, dict[str, str]]], concrete: list[tuple[str, dict[str, str]]]) -> bool:
    """True if ``concrete`` lies at or below ``pattern``; ``*`` matches any name or key value,
    ``...`` any number of elements, a missing key any value."""
    if not pattern:
        return True
    name, keys = pattern[0]
    if name == "...":
        return any(matches(pattern[1:], concrete[i:]) for i in range(len(concrete) + 1))
    if not concrete:
        return False
    cname, ckeys = concrete[0]
    if name not in ("*", cname):
        return False
    for k, v in keys.items():
        if v != "*" and ckeys.get(k) != v:
            return False
    return matches(pattern[1:], concrete[1:])
