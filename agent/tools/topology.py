"""A simulated fabric's topology: its devices (spines, leaves, hosts) and the links between
them, for ``swtel fabric`` and ``swtel demo``.

A two-tier Clos as AI fabrics build them: every leaf's uplinks spread evenly over the
spines (uplink j to spine j mod S), hosts on the leaves' server ports round-robin. Port
names are the simulated switch's own (agent/asic/sim/layout.c): a spine's 64 ports less
the two it breaks out (swp11, swp12), a leaf's server ports swp1-swp32 and uplinks
swp61-swp64 (swp57-swp64 with 8 uplinks), a host's ``mlx5_0``. The simulated devices do
not exchange traffic: the links say which ports face each other, for people and tools.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

ROLES = ("spine", "leaf", "host")
#: a spine's ports a leaf can land on: swp11 and swp12 are broken out on the simulated spine
SPINE_PORTS = tuple(f"swp{i}" for i in range(1, 65) if i not in (11, 12))
#: the field case's spine-1: leaf-3's four uplinks land on the 4 x 100G breakout of swp11
FIELD_SPINE_PORTS = tuple(f"swp11s{i}" for i in range(4))
LEAF_SERVER_PORTS = tuple(f"swp{i}" for i in range(1, 33))
HOST_PORT = "mlx5_0"
MAX_DEVICES = 512  # one agent process each: far beyond what one machine runs
#: what the simulated devices say of themselves in LLDP (lldpd's system description)
SWITCH_DESCRIPTION = "Cumulus Linux 5.13 running on a simulated NVIDIA Spectrum switch (swtel sim)"
HOST_DESCRIPTION = "Debian GNU/Linux 12 (bookworm), a simulated host (swtel sim)"
LLDP_TTL = 120  # lldpd's default: 4 x the 30 s transmit interval


def sim_mac(*parts: str) -> str:
    """A stable, locally administered MAC for a simulated device or port (02:xx:...)."""
    digest = hashlib.sha256(":".join(parts).encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


@dataclass(frozen=True)
class Node:
    name: str
    role: str
    uplinks: int = 0  # a leaf's uplinks (4 or 8); 0 for the others


@dataclass(frozen=True)
class Link:
    """Two ports facing each other: (device, port) at each end, the lower tier first."""

    a: tuple[str, str]
    b: tuple[str, str]


def uplink_ports(uplinks: int) -> list[str]:
    """A simulated leaf's uplink ports (the last ``uplinks`` of swp1-swp64)."""
    return [f"swp{i}" for i in range(65 - uplinks, 65)]


class Topology:
    def __init__(self, nodes: list[Node], links: list[Link]) -> None:
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError("device names must be unique")
        self.nodes = nodes
        self.links = links

    @classmethod
    def field(cls) -> Topology:
        """The field cases' three devices: spine-1, leaf-3 (4 uplinks to spine-1's breakout
        swp11s0-swp11s3, so the marginal cable on swp11s1 is on host-1's paths), host-1."""
        return cls._build(["spine-1"], ["leaf-3"], ["host-1"], 4, FIELD_SPINE_PORTS)

    @classmethod
    def clos(cls, spines: int, leaves: int, hosts: int, uplinks: int | None = None) -> Topology:
        """``spines`` x ``leaves`` x ``hosts``, named spine-1..., leaf-1..., host-1...; a leaf has
        4 uplinks (8 with more than 4 spines) unless ``uplinks`` says."""
        if spines < 0 or leaves < 0 or hosts < 0 or spines + leaves + hosts == 0:
            raise ValueError("at least one device, and no negative counts")
        if spines + leaves + hosts > MAX_DEVICES:
            raise ValueError(f"at most {MAX_DEVICES} devices (one agent each), got {spines + leaves + hosts}")
        up = uplinks or (4 if spines <= 4 else 8)
        return cls._build([f"spine-{i}" for i in range(1, spines + 1)], [f"leaf-{i}" for i in range(1, leaves + 1)],
                          [f"host-{i}" for i in range(1, hosts + 1)], up)

    @classmethod
    def _build(cls, spines: list[str], leaves: list[str], hosts: list[str], up: int,
               spine_ports: tuple[str, ...] = SPINE_PORTS) -> Topology:
        if up not in (4, 8):
            raise ValueError(f"a leaf has 4 or 8 uplinks, got {up}")
        if spines and leaves and (len(spines) > up or up % len(spines)):
            raise ValueError(f"the spines ({len(spines)}) must divide a leaf's {up} uplinks evenly (1, 2, 4 or 8)")
        per_spine = up // len(spines) if spines else 0
        if spines and len(leaves) * per_spine > len(spine_ports):
            raise ValueError(f"{len(leaves)} leaves x {per_spine} links need more than a spine's "
                             f"{len(spine_ports)} ports")
        if hosts and not leaves:
            raise ValueError("hosts need a leaf to attach to")
        if leaves and len(hosts) > len(leaves) * len(LEAF_SERVER_PORTS):
            raise ValueError(f"{len(hosts)} hosts need more than the leaves' server ports")
        nodes = ([Node(n, "spine") for n in spines] + [Node(n, "leaf", up) for n in leaves]
                 + [Node(n, "host") for n in hosts])
        links = []
        for li, leaf in enumerate(leaves):
            for j, port in enumerate(uplink_ports(up) if spines else []):
                spine = spines[j % len(spines)]
                links.append(Link((leaf, port), (spine, spine_ports[li * per_spine + j // len(spines)])))
        for hi, host in enumerate(hosts):
            links.append(Link((host, HOST_PORT), (leaves[hi % len(leaves)], LEAF_SERVER_PORTS[hi // len(leaves)])))
        return cls(nodes, links)

    def neighbors(self, name: str) -> list[tuple[str, str, str]]:
        """(local port, peer device, peer port) of every link of device ``name``, by local port."""
        out = [(a[1], b[0], b[1]) for a, b in ((x.a, x.b) for x in self.links) if a[0] == name]
        out += [(b[1], a[0], a[1]) for a, b in ((x.a, x.b) for x in self.links) if b[0] == name]
        return sorted(out, key=lambda n: (len(n[0]), n[0]))

    def lldp_document(self, name: str) -> dict:
        """What ``lldpcli -f json0 show neighbors details`` would answer on device ``name``: a
        switch's neighbour port by its ifname (Cumulus' ``portidsubtype ifname``), a host's by
        its MAC with the ifname as description (plain lldpd), chassis ids MACs. sources.lldp
        reads it from a file (``sources.lldp.file``: ``swtel fabric`` writes one per device)."""
        roles = {n.name: n.role for n in self.nodes}
        interfaces = []
        for rid, (port, peer, peer_port) in enumerate(self.neighbors(name), start=1):
            host = roles.get(peer) == "host"
            port_id = ({"type": "mac", "value": sim_mac(peer, peer_port)} if host
                       else {"type": "ifname", "value": peer_port})
            interfaces.append({
                "name": port, "via": "LLDP", "rid": str(rid), "age": "0 day, 00:00:00",
                "chassis": [{"id": [{"type": "mac", "value": sim_mac(peer)}], "name": [{"value": peer}],
                             "descr": [{"value": HOST_DESCRIPTION if host else SWITCH_DESCRIPTION}]}],
                "port": [{"id": [port_id], "descr": [{"value": peer_port}], "ttl": [{"value": str(LLDP_TTL)}]}],
            })
        return {"lldp": [{"interface": interfaces} if interfaces else {}]}

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def as_dict(self, sockets: dict[str, str] | None = None) -> dict:
        """The topology as topology.yaml holds it; ``sockets`` (name -> control socket, relative
        to the file's directory) adds each device's agent socket (``swtel top --fabric``)."""
        sockets = sockets or {}
        return {
            "devices": [{"name": n.name, "role": n.role, **({"uplinks": n.uplinks} if n.uplinks else {}),
                         **({"socket": sockets[n.name]} if n.name in sockets else {})}
                        for n in self.nodes],
            "links": [{"a": f"{a[0]}:{a[1]}", "b": f"{b[0]}:{b[1]}"} for a, b in ((x.a, x.b) for x in self.links)],
        }

    def write(self, path: Path, sockets: dict[str, str] | None = None) -> None:
        path.write_text(yaml.safe_dump(self.as_dict(sockets), sort_keys=False))

    def summary(self) -> str:
        count = {r: sum(1 for n in self.nodes if n.role == r) for r in ROLES}
        return f"{count['spine']} spines, {count['leaf']} leaves, {count['host']} hosts, {len(self.links)} links"
