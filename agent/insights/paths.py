"""Which ports a deleted container removes: the insights forget a port (or RDMA device
port) only when its whole subtree goes, ``/interfaces/interface[name=X]`` or an RDMA
port's counters container, never for one source's container below it."""

from __future__ import annotations

from agent.pathgrammar import INTERFACE_PREFIX, RDMA_DEVICE_PREFIX, read_key

MACHINERY = True  # the pipeline's, not a plugin (agent/registry.py load_plugins)


def deleted_ports(path: str) -> list[str]:
    """Port names whose whole data a deleted container path removes."""
    if path.startswith(INTERFACE_PREFIX):
        name, end = read_key(path, len(INTERFACE_PREFIX))
        return [name] if path[end + 1:] in ("", "/") else []
    if path.startswith(RDMA_DEVICE_PREFIX):
        dev, end = read_key(path, len(RDMA_DEVICE_PREFIX))
        rest = path[end + 1:]
        if rest in ("", "/"):
            return [dev]
        if rest.startswith("/ports/port[id="):
            port, end2 = read_key(rest, len("/ports/port[id="))
            if rest[end2 + 1:] in ("", "/", "/hw-counters"):
                return [f"{dev}/{port}", dev]
    return []
