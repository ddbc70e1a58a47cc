"""Which ports a deleted container removes: the insights forget a port (or RDMA device
port) only when its whole subtree goes, ``/interfaces/interface[name=X]`` or an RDMA
port's counters container, never for one source's container below it."""

from __future__ import annotations


def _unescape_key(text: str, start: int) -> tuple[str, int]:
    """The key value starting at ``text[start]`` up to its unescaped ``]``: (value, index of ']')."""
    out = []
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if ch == "]":
            return "".join(out), i
        out.append(ch)
        i += 1
    return "".join(out), i


def deleted_ports(path: str) -> list[str]:
    """Port names whose whole data a deleted container path removes."""
    head = "/interfaces/interface[name="
    if path.startswith(head):
        name, end = _unescape_key(path, len(head))
        return [name] if path[end + 1:] in ("", "/") else []
    head = "/rdma/devices/device[name="
    if path.startswith(head):
        dev, end = _unescape_key(path, len(head))
        rest = path[end + 1:]
        if rest in ("", "/"):
            return [dev]
        if rest.startswith("/ports/port[id="):
            port, end2 = _unescape_key(rest, len("/ports/port[id="))
            if rest[end2 + 1:] in ("", "/", "/hw-counters"):
                return [f"{dev}/{port}", dev]
    return []
