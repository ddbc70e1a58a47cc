"""system source: the switch's CPU and memory and the agent's own cost, via psutil."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import psutil

from agent.config import Duration, setting
from agent.counters import COUNTER, GAUGE, SWTEL_ORIGIN, Container, CounterSpec, CounterTable
from agent.sources.base import Source, SourceConfig, doc_row, register

_SYSTEM = Container(SWTEL_ORIGIN, "/system/state")
_AGENT = Container(SWTEL_ORIGIN, "/agent/state")

#: (container, leaf, kind) in value order; read() fills them in this order.
LEAVES = [
    (_SYSTEM, "cpu-utilization-percent", GAUGE),
    (_SYSTEM, "memory-total-bytes", GAUGE),
    (_SYSTEM, "memory-available-bytes", GAUGE),
    (_SYSTEM, "load-average-1m-milli", GAUGE),
    (_AGENT, "rss-bytes", GAUGE),
    (_AGENT, "cpu-utilization-percent-milli", GAUGE),
    (_AGENT, "cpu-time-ms", COUNTER),
]


@dataclass
class SystemConfig(SourceConfig):
    """``sources.system``."""

    interval: Duration | None = setting(Duration(5.0), type="duration (10ms–1h) or null")


@register
class SystemSource(Source):
    name = "system"
    config_class = SystemConfig
    doc = "switch CPU and memory, the agent's own CPU and RSS"

    @classmethod
    def doc_paths(cls) -> list[str]:
        out = ["## System and agent (psutil)", "", "| source | value | path | kind |", "|---|---|---|---|"]
        for container, leaf, kind in LEAVES:
            out.append(doc_row("system", leaf, f"swtel:{container.path}/{leaf}", "gauge" if kind == 1 else "counter"))
        return out + [""]
    uses_links = False
    selects_ports = False  # the switch's own CPU and memory: no port to select

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)  # prime: the first call has no interval to measure
        psutil.cpu_percent(None)

    def setup(self, links) -> None:
        self.table = CounterTable(self.name, [CounterSpec(c, leaf, 64, kind) for c, leaf, kind in LEAVES])
        self.values = array("Q", bytes(8 * len(LEAVES)))

    def read(self) -> int:
        mem = psutil.virtual_memory()
        cpu = self._proc.cpu_times()
        self.values[0] = int(psutil.cpu_percent(None))
        self.values[1] = mem.total
        self.values[2] = mem.available
        self.values[3] = int(psutil.getloadavg()[0] * 1000)
        self.values[4] = self._proc.memory_info().rss
        self.values[5] = int(self._proc.cpu_percent(None) * 1000)
        self.values[6] = int((cpu.user + cpu.system) * 1000)
        return 1
