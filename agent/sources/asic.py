"""asic source: counters read straight from the switch ASIC through a plugin.

A plugin is a shared library implementing agent/asic/swtel_asic.h (a vendor SDK
shim, or the built-in simulated Spectrum switch, ``sim``). The reader opens it
with dlopen; each poll is one bulk read of every counter, the GIL released.
The plugin names its counters as the switch does (Cumulus ``HwIf*``, the PHY
set ``phy_*``, mlx5 RDMA ``hw_counters`` for a host view), and this file maps
them through the same driver tables as the ethtool source, so a vendor shim
needs only its C side. The plugin's own timestamp is the sample's time.

The port set is the plugin's, not the kernel's: when the plugin's generation
changes (a breakout, a port added or removed), the layout is listed again and
the engine adds and deletes subtrees as it does on a link event.
"""

from __future__ import annotations

import fnmatch
import time
from array import array
from typing import Any

from agent import _backend, logs
from agent.asic import resolve
from agent.counters import (
    COUNTER,
    GAUGE,
    HIDDEN,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
    escape_key,
)
from agent.sources import ethtool
from agent.sources.base import Source, counter_wanted, leaf_name, register
from agent.sources.ethtool import _QUEUE, _SWQUEUE, MLXSW, SWITCHD, Rule, _rules

log = logs.get("asic")
RETRY_OPEN_S = 30.0  # a plugin that failed to open is tried again this often
PORT_HOST = 0x2  # SWTEL_ASIC_PORT_HOST: a host-side RDMA device, not a switch port

_STATE = (OPENCONFIG, "/interfaces/interface[name={port}]/state/counters")
_PHY = (OPENCONFIG, "/interfaces/interface[name={port}]/phy/state")
_PHY_FEC = (OPENCONFIG, "/interfaces/interface[name={port}]/phy/fec/state")
_PHY_LANE = (OPENCONFIG, "/interfaces/interface[name={port}]/phy/channels/channel[id={n}]/fec/state")
_RAW = (SWTEL_ORIGIN, "/interfaces/interface[name={port}]/asic")

# What the ASIC has beyond switchd's HwIf* set: the PHY (PPCNT) counters that
# `nv show interface swpN link phy-detail` and Cumulus' OTLP export show (paths as
# Cumulus' own gNMI tree), carrier changes, per-TC ECN marks and buffer occupancy.
PHY = _rules(
    (r"phy_received_bits", _PHY, "received-bits"),
    (r"phy_symbol_errors", _PHY, "symbol-errors"),
    (r"phy_effective_errors", _PHY, "effective-errors"),
    (r"phy_raw_errors", _PHY, "raw-errors"),
    (r"phy_corrected_bits", _PHY_FEC, "corrected-bits"),
    (r"phy_raw_errors_lane(?P<n>\d+)", _PHY_LANE, "raw-errors"),
    (r"carrier_changes", _STATE, "carrier-transitions"),
    (r"ecn_marked_tc_(?P<n>\d+)", _QUEUE, "ecn-marked-pkts"),
    (r"tc_curr_occupancy_(?P<n>\d+)", _SWQUEUE, "current-occupancy", GAUGE),
    (r"tc_watermark_(?P<n>\d+)", _SWQUEUE, "watermark", GAUGE),
)

#: every switch-port name goes through these, first match wins (SWITCHD ends in a HwIf* catch-all)
RULES: list[Rule] = PHY + MLXSW + SWITCHD


def host_container(port: str) -> Container:
    """A host view's RDMA device (``mlx5_0`` or ``mlx5_0/2``): the rdma source's own path,
    so a collector sees a simulated host exactly as a real one."""
    dev, _, num = port.partition("/")
    return Container(
        SWTEL_ORIGIN,
        f"/rdma/devices/device[name={escape_key(dev)}]/ports/port[id={escape_key(num or '1')}]/hw-counters",
    )


def map_name(port: str, name: str, host: bool = False) -> tuple[Container, str, int]:
    """A plugin's counter name -> (container, leaf, kind); unknown names keep a raw path."""
    if host:
        return host_container(port), leaf_name(name), COUNTER
    return ethtool.map_name(RULES, port, name, raw=_RAW)


@register
class AsicSource(Source):
    name = "asic"
    uses_links = False

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self._handle: Any = None
        self._path = ""
        self._generation = 0
        self._stale = True  # the layout must be listed (first setup, or the plugin said ECHANGED)
        self._retry_at = 0.0
        #: port -> link speed in bits/s, for utilization-based insights
        self.port_speeds: dict[str, int] = {}

    @property
    def needs_setup(self) -> bool:
        if self._handle is None:
            return time.monotonic() >= self._retry_at
        return self._stale

    def _open(self) -> bool:
        sec = self.section
        try:
            self._path = resolve(sec.plugin)
            self._handle = _backend.reader.asic_open(self._path, sec.config)
        except (OSError, ValueError) as exc:
            self._retry_at = time.monotonic() + RETRY_OPEN_S
            self.note_error(str(exc))
            log.error("asic plugin unavailable; other sources keep running", plugin=sec.plugin,
                      error=str(exc), retry_s=RETRY_OPEN_S)
            return False
        log.info("asic plugin opened", plugin=sec.plugin, path=self._path)
        self._stale = True
        return True

    def setup(self, links) -> None:
        if self._handle is None and not self._open():
            return
        try:
            gen, ports, counters = _backend.reader.asic_layout(self._handle)
        except OSError as exc:
            self.note_error(str(exc))
            return
        self._generation = gen
        self._stale = False
        self._build(ports, counters)

    def _build(self, ports: list[tuple], counters: list[list[tuple]]) -> None:
        sec = self.section
        specs: list[CounterSpec] = []
        chosen: list[str] = []
        speeds: dict[str, int] = {}
        hidden = Container(SWTEL_ORIGIN, "/agent/asic/unselected")
        for (port, _parent, speed_mbps, flags), descs in zip(ports, counters, strict=True):
            selected = any(fnmatch.fnmatchcase(port, p) for p in sec.interfaces) and not any(
                fnmatch.fnmatchcase(port, p) for p in sec.exclude)
            if not selected:
                # The plugin fills every counter; these keep their slots but are never reported.
                specs += [CounterSpec(hidden, f"{port}/{d[0]}", 64, HIDDEN) for d in descs]
                continue
            chosen.append(port)
            host = bool(flags & PORT_HOST)
            if speed_mbps and not host:
                speeds[port] = int(speed_mbps) * 1_000_000
            for name, width, kind, _nbins in descs:
                container, leaf, rule_kind = map_name(port, name, host)
                if not counter_wanted(name, sec.counters.include, sec.counters.exclude):
                    out_kind = HIDDEN
                elif kind == 1:  # the plugin says it is a level: trust it over the table
                    out_kind = GAUGE
                else:
                    out_kind = rule_kind
                specs.append(CounterSpec(container, leaf, 32 if width == 32 else 64, out_kind, port))
        self.table = CounterTable(self.name, specs)
        self.values = array("Q", bytes(8 * len(specs)))
        self.ports = chosen
        self.port_speeds = speeds

    def read(self) -> int:
        if self._handle is None or self._stale:
            return 0
        status, ts_ns = _backend.reader.asic_read(self._handle, self._generation, self.values)
        if status == _backend.reader.ASIC_ECHANGED:
            self._stale = True  # list the layout again before the next read
            return 0
        self.sample_ts_ns = ts_ns
        return len(self.ports)

    def inherit(self, old: Source) -> None:
        # Same plugin and config (only intervals or globs changed): keep the open ASIC, so
        # a simulated switch keeps its clock and a vendor's SDK is not re-initialised.
        if isinstance(old, AsicSource) and old._handle is not None and (
            old.section.plugin, old.section.config) == (self.section.plugin, self.section.config):
            self._handle, old._handle = old._handle, None
            self._path = old._path
            self._stale = True

    def info(self) -> dict[str, Any]:
        return {"plugin": self.section.plugin, "path": self._path or None,
                "generation": self._generation, "open": self._handle is not None}

    def close(self) -> None:
        if self._handle is not None:
            _backend.reader.asic_close(self._handle)
            self._handle = None
