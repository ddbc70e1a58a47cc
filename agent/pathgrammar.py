"""The gNMI path string grammar, in one place: ``origin:/a/b[k=v][k2=v2]/c``.

Every module that writes or reads a path string goes through here (the wire bytes
depend on it, so there is one definition). Inside ``[k=...]`` a backslash escapes the
next character and ``/``, ``[`` and ``=`` are plain text, so a key value may hold any
character: :func:`escape_key` escapes only ``\\`` and ``]``, the two that would end or
garble the value. The key name ends at the first ``=``.

Ground floor: imports nothing from the agent (counters, the sources, the insights, the
exporters and ``gnmi/paths`` all use it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: one path element: (name, keys)
Elem = tuple[str, dict[str, str]]

#: what every interface's path starts with (the key value follows, escaped)
INTERFACE_PREFIX = "/interfaces/interface[name="
#: the same for an interface's QoS subtree (queues)
QOS_INTERFACE_PREFIX = "/qos/interfaces/interface[interface-id="
#: the same for an RDMA device
RDMA_DEVICE_PREFIX = "/rdma/devices/device[name="
#: the same for a devlink device (``<bus>/<dev>``)
DEVLINK_DEVICE_PREFIX = "/devlink/devices/device[name="

#: a regular expression matching one escaped key value as it stands in a path string
#: (no group: callers wrap it in their own)
KEY_VALUE_RE = r"(?:[^\]\\]|\\.)*"


# ---------------------------------------------------------------- key values


def escape_key(value: str) -> str:
    """A key value as it stands inside ``[k=...]``: ``\\`` and ``]`` escaped (gNMI path
    conventions), so any interface name survives a round trip."""
    return value.replace("\\", "\\\\").replace("]", "\\]")


def read_key(text: str, start: int) -> tuple[str, int]:
    """The key value starting at ``text[start]`` up to its unescaped ``]``: (value, index
    of that ``]``, or ``len(text)`` when there is none). A trailing lone ``\\`` is kept."""
    out: list[str] = []
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            out.append(text[i + 1])
            i += 2
            continue
        if ch == "]":
            return "".join(out), i
        out.append(ch)
        i += 1
    return "".join(out), i


def unescape_key(text: str) -> str:
    """The inverse of :func:`escape_key`: ``\\x`` -> ``x`` over the whole text (which is
    one key value, already cut out of its path)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == "\\" and i + 1 < n:
            i += 1
        out.append(text[i])
        i += 1
    return "".join(out)


# ---------------------------------------------------------------- names that are bytes

#: what :func:`escape_name` escapes, in a name decoded with ``surrogateescape``: the escape
#: character itself, C0 controls, DEL, C1 controls, the line and paragraph separators, the
#: bidirectional marks, embeddings and isolates (text shown in another order than it is
#: stored), and each byte that is not UTF-8: fixed ranges, so no Unicode version changes it
_NAME_UNSAFE = re.compile("[%\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\udc80-\udcff]+")
_NAME_ESCAPED = re.compile("%([0-9A-F]{2})")


def escape_name(raw: bytes) -> str:
    """A name the kernel gives as bytes (an interface's, an RDMA device's, a sysfs file's) as
    the printable text every path, log line and status uses: each byte of ``%``, of a control
    character (C0, DEL, C1, U+2028/9, the bidirectional controls) and of a sequence that is
    not UTF-8 becomes ``%XX`` (upper-case hex); the rest is the name's UTF-8 text, unchanged
    (``swp\xff`` -> ``swp%FF``).

    Stable (the bytes alone decide it, not the locale or the Unicode version) and reversible
    (:func:`unescape_name`). It never collides with a real interface's name: an escaped name
    holds ``%``, and the kernel refuses ``%`` in a final name (it is its ``%d`` template).
    ``]``, ``=`` and ``/`` are text and stay: the path grammar escapes them in key values."""
    text = raw.decode("utf-8", "surrogateescape")
    if not _NAME_UNSAFE.search(text):
        return text
    return _NAME_UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogateescape")),
                            text)


def unescape_name(name: str) -> bytes:
    """The bytes :func:`escape_name` made ``name`` from (``swp%FF`` -> ``b"swp\xff"``)."""
    parts = _NAME_ESCAPED.split(name)
    # split alternates text and the hex of one escaped byte
    return b"".join(bytes.fromhex(part) if i % 2 else part.encode("utf-8", "surrogateescape")
                    for i, part in enumerate(parts))


# ---------------------------------------------------------------- parsing


def split_origin(path: str) -> tuple[str, str]:
    """``swtel:/x`` -> ("swtel", "/x"); ``/x`` -> ("", "/x")."""
    head, sep, rest = path.partition(":")
    if sep and "/" not in head and "[" not in head:
        return head, rest
    return "", path


def split(path: str) -> list[Elem]:
    """``/a/b[k=v]/c`` -> [("a", {}), ("b", {"k": "v"}), ("c", {})]; ValueError when malformed.

    Inside ``[...]`` a backslash escapes the next character and ``/`` is plain text,
    so key values may hold any character.
    """
    elems: list[Elem] = []
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
            i = _key(path, i, bool(name), keys)
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


def _key(path: str, i: int, named: bool, keys: dict[str, str]) -> int:
    """Read ``[k=v]`` at ``path[i]`` into ``keys``; the index after its ``]``."""
    if not named:
        raise ValueError(f"key without an element name in {path!r}")
    eq = path.find("=", i)
    if eq < 0:
        raise ValueError(f"key without '=' in {path!r}")
    key = path[i + 1 : eq]
    value, end = read_key(path, eq + 1)
    if end >= len(path) or not key or "[" in key or "]" in key:
        raise ValueError(f"bad key in {path!r}")
    keys[key] = value
    return end + 1


def _elem(name: list[str], keys: dict[str, str], path: str) -> Elem:
    text = "".join(name)
    if not text:
        raise ValueError(f"empty element name in {path!r}")
    return text, keys


# ---------------------------------------------------------------- formatting


def format_elem(name: str, keys: Mapping[str, str]) -> str:
    """``name[k=v]...``, keys sorted by name, values escaped."""
    return name + "".join(f"[{k}={escape_key(keys[k])}]" for k in sorted(keys))


def format_path(elems: Iterable[tuple[str, Mapping[str, str]]]) -> str:
    """The absolute path string of elements (``/`` for none): the inverse of :func:`split`."""
    return "/" + "/".join(format_elem(n, k) for n, k in elems)


def interface_path(name: str) -> str:
    """``/interfaces/interface[name=<name>]``, the name escaped. ``interface_path("{port}")``
    is a ``str.format`` template (braces are not escaped): fill it with an escaped name."""
    return f"{INTERFACE_PREFIX}{escape_key(name)}]"


#: Cumulus Linux 5.15's RS-FEC histogram below a port's (or a channel's) ``phy``: one list
#: entry per bin, keyed by the bin's upper boundary (corrected symbols per codeword), with the
#: leaves ``count`` and ``upper-boundary``
FEC_HISTOGRAM_LIST = "histograms/state/rs-num-corr-err"


def fec_histogram_bin_path(port: str, upper: int | str, lane: int | str | None = None) -> str:
    """``/interfaces/interface[name=<port>]/phy/histograms/state/rs-num-corr-err[upper-boundary=<U>]``
    (Cumulus 5.15's per-port RS-FEC histogram bin); with ``lane``, the same list below
    ``phy/channels/channel[id=<lane>]``, where Cumulus keeps a port's per-lane PHY leaves.
    ``port`` is escaped; ``interface_path``'s template rule holds for ``"{port}"``."""
    phy = f"{interface_path(port)}/phy" if lane is None else \
        f"{interface_path(port)}/phy/channels/channel[id={escape_key(str(lane))}]"
    return f"{phy}/{FEC_HISTOGRAM_LIST}[upper-boundary={escape_key(str(upper))}]"


def bin_of_count(container_path: str, leaf: str) -> str | None:
    """The path of the histogram bin whose ``count`` a counter is, however its source split
    it: leaf ``count`` below the bin's own container, or (the asic and ethnl sources' RS-FEC
    bins) the bin's keyed element and ``count`` below the histogram's container. None when
    the leaf is not a ``count``. The path is not checked to be a bin: callers match it."""
    if leaf == "count":
        return container_path
    head, _, last = leaf.rpartition("/")
    return f"{container_path}/{head}" if last == "count" and head else None


def qos_interface_path(name: str) -> str:
    """``/qos/interfaces/interface[interface-id=<name>]``, the name escaped."""
    return f"{QOS_INTERFACE_PREFIX}{escape_key(name)}]"


def drop_reason_path(port: str, group: str, reason: str) -> str:
    """``/interfaces/interface[name=<port>]/drops/group[name=<group>]/reason[name=<reason>]/state``:
    one drop reason of a port (docs/insights.md, "Drop reasons"), every name escaped."""
    return (f"{interface_path(port)}/drops/group[name={escape_key(group)}]"
            f"/reason[name={escape_key(reason)}]/state")


def devlink_drop_reason_path(device: str, group: str, reason: str) -> str:
    """``/devlink/devices/device[name=<bus>/<dev>]/drops/group[name=<group>]/reason[name=<reason>]/state``:
    one packet trap of a devlink device (its statistics are per device, not per port), every
    name escaped; the tail below the device is :func:`drop_reason_path`'s."""
    return (f"{DEVLINK_DEVICE_PREFIX}{escape_key(device)}]/drops/group[name={escape_key(group)}]"
            f"/reason[name={escape_key(reason)}]/state")


def rdma_port_path(device: str, port: str) -> str:
    """``/rdma/devices/device[name=<device>]/ports/port[id=<port>]``, both escaped."""
    return f"{RDMA_DEVICE_PREFIX}{escape_key(device)}]/ports/port[id={escape_key(port)}]"
