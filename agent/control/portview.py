"""Per-port totals for ``swtel top``: the store's latest values, summed per port by what
they measure (the detectors' classification, so every source feeds one view)."""

from __future__ import annotations

from typing import Any

from agent.counters import Batch
from agent.insights import classify as c

# What top shows, and how a port's counters of one semantic combine: counters that
# overlap (in-errors contains FCS errors; out-discards contains queue drops) take the
# largest, never the sum, so nothing is counted twice.
_FIELDS = {
    c.RX_OCTETS: ("rx_octets", max),
    c.TX_OCTETS: ("tx_octets", max),
    c.ERRORS: ("errors", max),
    c.SYMBOL: ("symbol_errors", max),
    c.UNCORRECTABLE: ("uncorrectable", max),
    c.DROP_IN: ("drops_in", max),
    c.DROP_OUT: ("drops_out", max),
    c.PFC_FRAMES: ("pfc_frames", sum),
    c.PFC_DURATION: ("pfc_duration_us", max),  # the most-paused priority
    c.CARRIER: ("carrier", max),
    c.ROCE: ("roce_retrans", max),
}


def port_totals(batches: list[Batch], speeds: dict[str, int]) -> dict[str, dict[str, Any]]:
    """port -> {"ts_ns", "speed_bps", one cumulative total per field above, and
    "drop_reasons": {"group/reason": total} where a source counts drops by reason}."""
    parts: dict[str, dict[str, list[int]]] = {}
    reasons_of: dict[str, dict[str, int]] = {}
    stamps: dict[str, int] = {}
    for batch in batches:
        lay = c.layout(batch.table)
        values = batch.values
        for i, slot in enumerate(lay.slots):
            if slot is None:
                continue
            port = lay.ports[slot[0]]
            sem = slot[1][0]
            if sem == c.DROP_REASON:  # per reason ("group/reason"), for top's "why" column
                reasons = reasons_of.setdefault(port, {})
                reasons[slot[1][1]] = reasons.get(slot[1][1], 0) + values[i]
                stamps[port] = max(stamps.get(port, 0), batch.ts_ns)
                continue
            if sem not in _FIELDS:
                continue
            parts.setdefault(port, {}).setdefault(sem, []).append(values[i])
            stamps[port] = max(stamps.get(port, 0), batch.ts_ns)
    out: dict[str, dict[str, Any]] = {}
    for port in parts.keys() | reasons_of.keys():
        row: dict[str, Any] = {"ts_ns": stamps[port], "speed_bps": speeds.get(port)}
        for sem, vals in parts.get(port, {}).items():
            name, combine = _FIELDS[sem]
            row[name] = combine(vals)
        if port in reasons_of:
            row["drop_reasons"] = reasons_of[port]
        out[port] = row
    return out
