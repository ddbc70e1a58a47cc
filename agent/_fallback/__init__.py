"""The pure-Python fallback of the C extension (agent._swtel): the same functions,
constants, signatures and results, one module per file of agent/_ext/ (netdev, ethtool,
sysfs, change, encode, links, asic, ethnl, devlink, feeds, detect, gather, jsonl).

Selected by agent._backend when ``SWTEL_PUREPYTHON=1`` is set or the extension is
missing; the suite runs against both and the property tests hold them to each other,
as msgpack's fallback is held to its extension. Nothing here imports from a layer above
the fallback (agent.counters and agent's version are its only agent imports).
"""

from __future__ import annotations

from agent import __version__ as version
from agent._fallback.asic import (
    ASIC_ABI_VERSION,
    ASIC_ECHANGED,
    ASIC_ERROR,
    ASIC_MAX_BINS,
    ASIC_MAX_COUNTERS,
    ASIC_MAX_PORTS,
    ASIC_MAX_VALUES,
    ASIC_OK,
    asic_close,
    asic_layout,
    asic_open,
    asic_read,
)
from agent._fallback.change import diff
from agent._fallback.detect import burst_run, dip_run, fec_changes, fec_fits, fec_lanes, fec_run
from agent._fallback.devlink import (
    DEVLINK_PORT_GET,
    DEVLINK_SB_GET,
    DEVLINK_SB_OCC_MAX_CLEAR,
    DEVLINK_SB_OCC_SNAPSHOT,
    DEVLINK_SB_PORT_POOL_GET,
    DEVLINK_SB_TC_POOL_BIND_GET,
    DEVLINK_TRAP_GET,
    DEVLINK_TRAP_GROUP_GET,
    devlink_dump,
    devlink_exec,
    devlink_family,
    devlink_parse,
    devlink_request,
    devlink_trap_parse,
)
from agent._fallback.encode import encode_fields, encode_updates
from agent._fallback.ethnl import (
    ETHNL_FEC_GET,
    ETHNL_STATS_GET,
    ethnl_family,
    ethnl_family_parse,
    ethnl_fec_parse,
    ethnl_query,
    ethnl_request,
    ethnl_stats_parse,
)
from agent._fallback.ethtool import (
    ETHTOOL_SKIPPED,
    ethtool_drvinfo,
    ethtool_parse,
    ethtool_read,
    ethtool_strings,
    ethtool_strings_parse,
)
from agent._fallback.feeds import Feed, feed_add, feed_mark, flush_clear, flush_first
from agent._fallback.gather import gather
from agent._fallback.jsonl import jsonl_lines
from agent._fallback.links import link_parse
from agent._fallback.netdev import NETDEV_FIELDS, netdev_parse, netdev_read
from agent._fallback.sysfs import sysfs_read
from agent.counters import F_CHANGED, F_JUMP, F_NEW, F_RESET, F_WRAP

__all__ = [
    "ASIC_ABI_VERSION", "ASIC_ECHANGED", "ASIC_ERROR", "ASIC_MAX_BINS", "ASIC_MAX_COUNTERS",
    "ASIC_MAX_PORTS", "ASIC_MAX_VALUES", "ASIC_OK", "ETHNL_FEC_GET", "ETHNL_STATS_GET", "ETHTOOL_SKIPPED", "F_CHANGED",
    "F_JUMP", "F_NEW",
    "F_RESET", "F_WRAP", "NETDEV_FIELDS", "asic_close", "asic_layout", "asic_open", "asic_read", "diff",
    "encode_fields", "encode_updates", "ethnl_family",
    "DEVLINK_PORT_GET", "DEVLINK_SB_GET", "DEVLINK_SB_OCC_MAX_CLEAR", "DEVLINK_SB_OCC_SNAPSHOT",
    "DEVLINK_SB_PORT_POOL_GET", "DEVLINK_SB_TC_POOL_BIND_GET", "devlink_dump", "devlink_exec",
    "devlink_family", "devlink_parse", "devlink_request", "devlink_trap_parse", "DEVLINK_TRAP_GET",
    "DEVLINK_TRAP_GROUP_GET", "burst_run", "dip_run", "fec_changes", "fec_fits", "fec_lanes", "fec_run",
    "ethnl_family_parse", "ethnl_fec_parse", "ethnl_query",
    "ethnl_request", "ethnl_stats_parse", "ethtool_drvinfo", "ethtool_parse", "ethtool_read", "ethtool_strings",
    "ethtool_strings_parse", "Feed", "feed_add", "feed_mark", "flush_clear", "flush_first", "gather",
    "jsonl_lines", "link_parse",
    "netdev_parse", "netdev_read", "sysfs_read", "version",
]
