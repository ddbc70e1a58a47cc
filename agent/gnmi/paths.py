"""gNMI path strings <-> ``gnmi_pb2.Path``, and pre-encoded path bytes.

Path strings use the gNMI string form: ``/a/b[k=v][k2=v2]/c``, an optional
``origin:`` in front; ``*`` and ``...`` are wildcards for matching.
"""

from __future__ import annotations

from functools import lru_cache

from pygnmi.spec.v080 import gnmi_pb2

from agent.counters import escape_key

__all__ = ["escape_key", "split", "split_origin", "to_proto", "from_proto", "join", "encoded", "matches"]

def split(path: str) -> list[tuple[str, dict[str, str]]]:
    """``/a/b[k=v]/c`` -> [("a", {}), ("b", {"k": "v"}), ("c", {})].

    Inside ``[...]`` a backslash escapes the next character and ``/`` is plain text,
    so key values may hold any character.
    """
    elems: list[tuple[str, dict[str, str]]] = []
    name: list[str] = []
    keys: dict[str, str] = {}
    i, n = 0, len(path)
    while i < n:
        ch = path[i]
        if ch == "/":
            if name or keys:
                elems.append(_elem(name, keys, path))
            name, keys = [], {}
            i += 1
        elif ch == "[":
            if not name:
                raise ValueError(f"key without an element name in {path!r}")
            eq = path.find("=", i)
            if eq < 0:
                raise ValueError(f"key without '=' in {path!r}")
            key = path[i + 1 : eq]
            value: list[str] = []
            i = eq + 1
            while i < n and path[i] != "]":
                if path[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(path[i])
                i += 1
            if i >= n or not key or "[" in key or "]" in key:
                raise ValueError(f"bad key in {path!r}")
            keys[key] = "".join(value)
            i += 1
        elif ch == "]":
            raise ValueError(f"unbalanced ']' in {path!r}")
        else:
            if keys:
                raise ValueError(f"text after a key in {path!r}")
            name.append(ch)
            i += 1
    if name or keys:
        elems.append(_elem(name, keys, path))
    return elems


def _elem(name: list[str], keys: dict[str, str], path: str) -> tuple[str, dict[str, str]]:
    text = "".join(name)
    if not text:
        raise ValueError(f"empty element name in {path!r}")
    return text, keys


def split_origin(path: str) -> tuple[str, str]:
    """``swtel:/x`` -> ("swtel", "/x"); ``/x`` -> ("", "/x")."""
    head, sep, rest = path.partition(":")
    if sep and "/" not in head and "[" not in head:
        return head, rest
    return "", path


def to_proto(path: str, origin: str = "", target: str = "") -> gnmi_pb2.Path:
    return gnmi_pb2.Path(
        origin=origin,
        target=target,
        elem=[gnmi_pb2.PathElem(name=n, key=k) for n, k in split(path)],
    )


def from_proto(path: gnmi_pb2.Path) -> str:
    """Path message -> string (elems only; origin and target are separate fields)."""
    out = []
    for e in path.elem:
        keys = "".join(f"[{k}={escape_key(e.key[k])}]" for k in sorted(e.key))
        out.append(f"{e.name}{keys}")
    if not out and path.element:  # deprecated gNMI 0.3 string elements
        out = list(path.element)
    return "/" + "/".join(out)


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
    return to_proto(path, origin, target).SerializeToString()


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
