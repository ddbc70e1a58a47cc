"""The house drawn from the imports: every module of ``agent`` sits on a floor, imports only
from its own floor or below, and no import cycle exists (docs/DEVELOPING.md has the picture).
Every import counts, at module level, in functions and under TYPE_CHECKING alike."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

# a check of the tree itself: the same whichever backend or libraries run it
pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agent"

#: floors, lowest first: a module matches the longest prefix listed
FLOORS: list[tuple[str, ...]] = [
    # 0 ground: the data model, the path grammar, logging, the hot path and its fallback, TLS files
    ("agent", "agent.counters", "agent.listener", "agent.pathgrammar", "agent.logs", "agent._backend",
     "agent._fallback",
     "agent.tls", "agent.sdnotify", "agent.yamlsafe", "agent.handoff",
     "agent.caps", "agent.credentials", "agent.files", "agent.signals"),
    # 1 protocols and plumbing: gNMI messages and paths, the store, links, the plugin boundary
    ("agent.gnmi", "agent.store", "agent.links", "agent.asic", "agent.control.protocol",
     "agent.control.printable"),
    # 2 configuration: the typed loader and the plugin registries the plugins fill
    ("agent.config", "agent.registry"),
    # 3 what produces data: sources and detectors
    ("agent.sources", "agent.insights"),
    # 4 what moves it: the engine (its port ledger) and the exporters
    ("agent.engine", "agent.ports", "agent.exporters"),
    # 5 the agent: control plane, the runner, generated docs
    ("agent.control", "agent.runner", "agent.pathdoc", "agent.plugins", "agent.configdoc"),
    # 6 around the agent: development tools and the command line
    ("agent.tools", "agent.cli", "agent.__main__"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def floor(module: str) -> int:
    best, best_len = None, -1
    for n, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = n, len(prefix)
    assert best is not None, f"{module} is on no floor: add it to FLOORS"
    return best


def imports(path: Path, known: set[str]) -> set[str]:
    """The agent modules a file imports (``from a.b import c`` counts as a.b.c when that is a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "agent":
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "agent")
    return {m for m in out if m in known}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(path, known) - {name} for name, path in mods.items()}


def test_every_import_goes_down_or_sideways():
    upward = []
    for module, deps in sorted(graph().items()):
        for dep in sorted(deps):
            if dep != "agent" and floor(dep) > floor(module):
                upward.append(f"{module} (floor {floor(module)}) imports {dep} (floor {floor(dep)})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    g = graph()
    # a package's __init__ importing its own modules is how registries fill: not a cycle
    # unless one of those modules imports the package back (an edge to "agent" is the version)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w == "agent":
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                cycles.append(sorted(scc))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_agent_at_run_time_never_loads_the_tools():
    """What the switch runs (``swtel run``) imports nothing from agent.tools: checked on the
    import graph from the runner down."""
    g = graph()
    seen, todo = set(), ["agent.runner"]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(g.get(m, ()))
    assert not [m for m in seen if m.startswith("agent.tools")]


def test_parsing_a_config_leaves_the_grpc_stack_unloaded():
    """Config parsing imports every exporter's file (their sections live there); the gRPC
    stack, pygnmi and the OTLP messages load only when such an exporter is built, so an agent
    with jsonl alone does not carry them (about 15 MiB of RSS)."""
    import os
    import subprocess
    import sys

    code = ("import sys, agent.plugins, agent.config as c; c.parse('exporters: {jsonl: {path: \"-\"}}'); "
            "print(sorted({m.split('.')[0] for m in sys.modules}"
            " & {'grpc', 'pygnmi', 'opentelemetry', 'google', 'snappy'}))")
    # both backends here (this test runs once): the fallback loads whole with agent._backend,
    # which the detectors' kernels bring into a parse
    for pure in ("", "1"):
        env = {k: v for k, v in os.environ.items() if k != "SWTEL_PUREPYTHON"}
        if pure:
            env["SWTEL_PUREPYTHON"] = pure
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                             env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]", (pure, out.stdout)


def _built_dialout(code: str) -> str:
    """What ``code`` (which builds a dial-out exporter) prints, run in a fresh interpreter."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_an_agent_without_password_checks_or_a_tunnel_leaves_their_libraries_unloaded():
    """hashlib (OpenSSL's digests), hmac and secrets load where a password is hashed or
    checked, tempfile where a tunnel makes its socket's directory: a dial-out agent without
    either, its gRPC stack loaded, carries none of them (~1 MiB of PSS, docs/PERFORMANCE.md)."""
    out = _built_dialout(
        "import sys, agent.plugins, agent.config as c, agent.runner\n"
        "cfg = c.parse('exporters: {dialout: [{address: \"127.0.0.1:57400\", insecure: true, "
        "transport: grpcio}]}')\n"
        "agent.runner.build_exporters(cfg)\n"
        "assert 'grpc' in sys.modules\n"
        "print(sorted({'hashlib', 'hmac', 'secrets', 'tempfile'} & set(sys.modules)))")
    assert out.strip() == "[]", out


def test_dialout_on_the_c_core_leaves_grpcio_unloaded():
    """With the C backend and agent._grpcstream built, a dial-out destination runs on grpc's C
    core: grpcio's Python stack (~15 MiB, 100 modules with asyncio) is never imported, nor
    protobuf (~2.5 MiB: agent.gnmi.wire writes what it sends), nor asyncio and ssl (~6 MiB:
    structlog's asyncio is a stand-in, the exporters import ssl where TLS is set up)."""
    import pytest

    from agent import _backend

    if _backend.NAME != "C":
        pytest.skip("the C core transport is the C backend's")
    pytest.importorskip("agent._grpcstream")  # CI proves it built (.ci/test)
    out = _built_dialout(
        "import sys, agent.plugins, agent.config as c, agent.runner\n"
        "cfg = c.parse('exporters: {dialout: [{address: \"127.0.0.1:57400\", insecure: true}]}')\n"
        "[exp] = agent.runner.build_exporters(cfg).values()\n"
        "from agent.counters import Container, StateUpdate\n"
        "exp.open_pass(); exp.on_state([StateUpdate(1, Container('swtel', '/a'), 'b', 2.5, 'x')]); exp.close_pass()\n"
        "print(exp.status()['transport'], exp.status()['queue'],\n"
        "      'grpc' in sys.modules, 'google.protobuf' in sys.modules, 'asyncio' in sys.modules,\n"
        "      'ssl' in sys.modules)")
    assert out.split() == ["grpc-core", "1", "False", "False", "False", "False"], out
