"""devlink_trap source: packets and bytes per packet trap of every devlink device (mlxsw's
drop reasons: What Just Happened through the kernel), as drop-reason counters.

Each poll, on the generic netlink family "devlink" (resolved once), one
``DEVLINK_CMD_TRAP_GET`` dump: every trap of every device with its group, type (drop,
exception, control), action (drop, trap, mirror) and its ``DEVLINK_ATTR_STATS``
(``_RX_PACKETS``, ``_RX_BYTES``: the packets that reached the CPU through the trap). A
``DEVLINK_CMD_TRAP_GROUP_GET`` dump at setup gives each group's policer, for the command
in status. agent/_ext/devlink.c does the I/O and the parsing (devlink_trap_parse); this
file names and maps.

A drop trap whose action is ``drop`` counts nothing (mlxsw starts all of them so): status
lists them with the ``devlink trap group set`` command that makes them count under their
group's policer. The source never changes an action itself: trapping costs CPU and is
the operator's choice. Devices without devlink (a VM, a host) are a state, not an error.
"""

from __future__ import annotations

import fnmatch
import time
from array import array
from dataclasses import dataclass
from typing import Any, Protocol

from agent import _backend
from agent.config import Duration, setting
from agent.counters import SWTEL_ORIGIN, Container, CounterSpec, CounterTable
from agent.pathgrammar import devlink_drop_reason_path
from agent.sources.base import (
    GENL_OK,
    NO_DATA,
    GenlDiscoverySource,
    SourceConfig,
    doc_row,
    leaf_name,
    register,
)
from agent.sources.devlink import NetlinkIO  # the same devlink socket (its dumps)

# The replies' commands (DEVLINK_CMD_TRAP_NEW, _TRAP_GROUP_NEW: each GET + 2).
TRAP_NEW, TRAP_GROUP_NEW = 63, 67
# devlink_trap_parse's tuple
CMD, BUS, DEV, GROUP, TRAP, TYPE, ACTION, GENERIC, POLICER, RX_PACKETS, RX_BYTES, RX_DROPPED = range(12)
TYPES = ("drop", "exception", "control")  # DEVLINK_TRAP_TYPE_*
ACTIONS = ("drop", "trap", "mirror")  # DEVLINK_TRAP_ACTION_*
LEAVES = ("packets", "bytes")  # RX_PACKETS, RX_BYTES

#: devlink's generic trap groups -> What Just Happened's group names, where they correspond
WJH_GROUPS = {"l2_drops": "l2", "l3_drops": "l3", "l3_exceptions": "l3", "buffer_drops": "buffer",
              "tunnel_drops": "tunnel", "acl_drops": "acl", "parser_error_drops": "parser"}
#: groups whose action mlxsw refuses to change: buffer drops reach the CPU through tc's
#: ``trap`` action on a RED qevent, per port and traffic class, not through devlink
NOT_BY_DEVLINK = {"buffer_drops": "trapped per queue with tc's trap action on a qevent (tc-red(8)), not by devlink"}

OK = GENL_OK
NO_DEVLINK = "no devlink in this kernel"
NO_DEVICE = "no devlink device with packet traps"
NO_TRAP = "no selected trap"

TrapKey = tuple[str, str, str]  # (device, group, trap)


def group_name(group: str) -> str:
    """A devlink trap group as a path key: What Just Happened's name where one corresponds
    (``l3_exceptions`` -> ``l3``), else kebab-cased."""
    return WJH_GROUPS.get(group) or leaf_name(group)


def reason_name(trap: str) -> str:
    """A trap's name as a path key, kebab-cased (``ingress_vlan_filter`` -> ``ingress-vlan-filter``)."""
    return leaf_name(trap)


def trap_container(device: str, group: str, trap: str) -> Container:
    """``swtel:/devlink/devices/device[name=D]/drops/group[name=G]/reason[name=R]/state``."""
    return Container(SWTEL_ORIGIN, devlink_drop_reason_path(device, group_name(group), reason_name(trap)))


def group_command(device: str, group: str, policer: int | None) -> str:
    """The devlink(8) command that makes a group's traps count (devlink-trap(8))."""
    tail = f" policer {policer}" if policer else " policer ID  # a policer of `devlink trap policer show`"
    return f"devlink trap group set {device} group {group} action trap{tail}"


class TrapIO(Protocol):
    """What the source asks the kernel (tests inject one returning fixture replies)."""

    def family(self) -> int: ...

    def dump(self, cmd: int) -> bytes: ...

    def close(self) -> None: ...


@dataclass
class DevlinkTrapConfig(SourceConfig):
    """``sources.devlink_trap``."""

    enabled: bool = setting(False)
    interval: Duration | None = setting(Duration(1.0), type="duration (10ms–1h) or null")
    devices: list[str] = setting(factory=lambda: ["*"], type="globs",
                                 doc="devlink devices to read, as `bus/device` (e.g. `pci/0000:03:00.0`)")
    types: list[str] = setting(factory=lambda: ["drop"], type="list of `drop`, `exception`, `control`",
                               doc="the trap types to stream (drop reasons; exceptions and control "
                                   "packets the switch sends to its CPU)")


@register
class DevlinkTrapSource(GenlDiscoverySource):
    name = "devlink_trap"
    config_class = DevlinkTrapConfig
    doc = ("packets and bytes per devlink packet trap (drop reasons of mlxsw switches), which drop traps "
           "count nothing ([devlink.md](devlink.md#packet-traps-drop-reasons))")
    uses_links = False  # traps are per device; no netdev in their paths
    no_family = NO_DEVLINK  # no devlink, no trap, or a failed setup: looked for again in retry_s
    label = "devlink trap"

    @classmethod
    def check(cls, section: DevlinkTrapConfig, where: str, problems: list[str], cfg) -> None:
        bad = [t for t in section.types if t not in TYPES]
        if bad or not section.types:
            problems.append(f"{where}.types: each one of {', '.join(TYPES)}, at least one (got {section.types})")

    @classmethod
    def doc_paths(cls) -> list[str]:
        container = Container(SWTEL_ORIGIN, devlink_drop_reason_path("D", "G", "R"))
        rows = [doc_row("devlink_trap", attr, container.full(leaf))
                for attr, leaf in zip(("DEVLINK_ATTR_STATS_RX_PACKETS", "DEVLINK_ATTR_STATS_RX_BYTES"), LEAVES,
                                      strict=True)]
        groups = ", ".join(f"`{g}` → `{w}`" for g, w in WJH_GROUPS.items())
        return ["## devlink_trap: packet traps (drop reasons, mlxsw)", "",
                "Per devlink device D (`bus/device`), trap group G and trap R: the packets and bytes the "
                "trap sent to the CPU. G is What Just Happened's group where one corresponds "
                f"({groups}), else the group kebab-cased; R is the trap's name kebab-cased "
                "(`ingress_vlan_filter` → `ingress-vlan-filter`). A drop trap set to action `drop` "
                "counts nothing; details: [devlink.md](devlink.md#packet-traps-drop-reasons).", "",
                "| source | attribute | path | kind |", "|---|---|---|---|", *rows, ""]

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.io: TrapIO | None
        self._devices: list[str] = []
        self._index: dict[TrapKey, int] = {}  # -> index of its packets (its bytes follow)
        self._policers: dict[tuple[str, str], int | None] = {}  # (device, group) -> its policer
        self._dropping: list[TrapKey] = []  # drop traps whose action is drop: they count nothing
        self._layout: tuple | None = None
        self.poll_us = 0.0

    def make_io(self) -> TrapIO:
        return NetlinkIO()

    def forget(self) -> None:
        self._devices, self._policers, self._dropping = [], {}, []
        self._build([])

    def _selected(self, m: tuple) -> bool:
        if None in (m[BUS], m[DEV], m[GROUP], m[TRAP], m[TYPE]) or m[CMD] != TRAP_NEW:
            return False
        if m[TYPE] >= len(TYPES) or TYPES[m[TYPE]] not in self.section.types:
            return False
        return any(fnmatch.fnmatchcase(f"{m[BUS]}/{m[DEV]}", g) for g in self.section.devices)

    def discover(self, links: dict[int, Any]) -> None:
        assert self.io is not None
        reader = _backend.reader
        traps = reader.devlink_trap_parse(self.io.dump(reader.DEVLINK_TRAP_GET))
        groups = reader.devlink_trap_parse(self.io.dump(reader.DEVLINK_TRAP_GROUP_GET))
        self._devices = sorted({f"{m[BUS]}/{m[DEV]}" for m in traps if m[CMD] == TRAP_NEW and m[BUS] and m[DEV]})
        self._policers = {(f"{m[BUS]}/{m[DEV]}", m[GROUP]): m[POLICER] for m in groups
                          if m[CMD] == TRAP_GROUP_NEW and None not in (m[BUS], m[DEV], m[GROUP])}
        keys = [(f"{m[BUS]}/{m[DEV]}", m[GROUP], m[TRAP]) for m in traps if self._selected(m)]
        self.state = OK if keys else NO_DEVICE if not self._devices else NO_TRAP
        self._build(keys)
        self._note_actions(traps)

    def _build(self, keys: list[TrapKey]) -> None:
        layout = tuple(keys)
        if layout == self._layout:
            return  # the same traps: keep the table and the values (no new baselines)
        specs: list[CounterSpec] = []
        self._index = {}
        paths: set[str] = set()
        for key in keys:
            container = trap_container(*key)
            if container.path in paths:  # two names kebab-cased alike: the first keeps the path
                continue
            paths.add(container.path)
            self._index[key] = len(specs)
            specs += [CounterSpec(container, leaf, 64, port=key[0]) for leaf in LEAVES]
        self.table = CounterTable(self.name, specs)
        self.values = array("Q", bytes(8 * len(specs)))
        self.ports = sorted({key[0] for key in self._index})
        self._layout = layout

    def _note_actions(self, traps: list[tuple]) -> None:
        """The selected devices' drop traps set to action drop (whatever ``types`` streams)."""
        self._dropping = sorted(
            (f"{m[BUS]}/{m[DEV]}", m[GROUP], m[TRAP]) for m in traps
            if m[CMD] == TRAP_NEW and m[TYPE] == 0 and m[ACTION] == 0
            and None not in (m[BUS], m[DEV], m[GROUP], m[TRAP])
            and any(fnmatch.fnmatchcase(f"{m[BUS]}/{m[DEV]}", g) for g in self.section.devices))

    def poll(self) -> int:
        """In state OK; I/O errors as GenlDiscoverySource.read."""
        assert self.io is not None
        reader = _backend.reader
        t0 = time.perf_counter_ns()
        traps = reader.devlink_trap_parse(self.io.dump(reader.DEVLINK_TRAP_GET))
        got = 0
        for m in traps:
            if not self._selected(m) or m[RX_PACKETS] is None or m[RX_BYTES] is None:
                continue
            at = self._index.get((f"{m[BUS]}/{m[DEV]}", m[GROUP], m[TRAP]))
            if at is None:
                self._stale = True  # a trap the layout lacks (a device added): set up again
                continue
            self.values[at] = m[RX_PACKETS]
            self.values[at + 1] = m[RX_BYTES]
            got += 1
        self._note_actions(traps)  # an action changed by hand shows at the next poll
        self.poll_us = (time.perf_counter_ns() - t0) / 1e3
        return got if got else NO_DATA

    def info(self) -> dict[str, Any]:
        by_group: dict[tuple[str, str], list[str]] = {}
        for device, group, trap in self._dropping:
            by_group.setdefault((device, group), []).append(trap)
        dropping = []
        for (device, group), traps in sorted(by_group.items()):
            entry: dict[str, Any] = {"device": device, "group": group, "traps": traps}
            if group in NOT_BY_DEVLINK:
                entry["note"] = NOT_BY_DEVLINK[group]
            else:
                entry["command"] = group_command(device, group, self._policers.get((device, group)))
            dropping.append(entry)
        return {
            "state": self.state,
            "family": self._family,
            "devices": self._devices,
            "traps": len(self._index),
            # drop traps that count nothing until their action is trap; never changed by swtel
            "set_to_drop": dropping,
            "poll_us": round(self.poll_us, 1),
        }
