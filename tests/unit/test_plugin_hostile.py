"""Issue 24, items 1, 3 and 4: what the ASIC plugin loader agrees to load, and what it
accepts from a plugin.

Plugins are built here from tests/plugins/hostile_plugin.c (and examples/asic-plugin/mini_plugin.c) in a
private directory (0700), then copied, re-moded, re-owned, linked and replaced by
things that are no plugin at all. Each must be refused by ``swtel validate`` (exit 1, the
problem named) and by the loader before ``dlopen`` (agent/asic/trust.py), and a library
without the entry point must never have its constructor run. A plugin's layout beyond
the limits, with negative counts or bad names, and an error buffer without a NUL, are
refused or bounded by ``asic_layout``/``asic_open``/``asic_read`` of the backend under
test (the suite runs twice: C extension and SWTEL_PUREPYTHON=1), quickly and with a
message naming the port and counter; in a running agent that is a fault in status while
the other sources keep running, and SIGTERM still ends it within 2 s.
"""

from __future__ import annotations

import ctypes
import os
import random
import re
import shutil
import subprocess
import sys
import threading
from array import array
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent import _backend, config
from agent.asic import HEADER, builtin_path, resolve
from agent.asic.proxy import C_HOST, HELPER_ENV, PluginProxy
from agent.asic.trust import PluginRefused, check_plugin, open_checked
from agent.control.validate import validate_main
from agent.sources.asic import AsicSource
from tests.helpers import asic_yaml, status_json, wait_until

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "plugins" / "hostile_plugin.c"
reader = _backend.reader


def _gcc(out: Path, *args: str) -> Path:
    subprocess.run(["gcc", "-fPIC", "-O1", "-Wall", "-Werror", "-I", str(Path(HEADER).parent), *args,
                    "-o", str(out), str(HOSTILE)], check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A private directory (0700) with one good plugin and everything that must be refused."""
    d = tmp_path_factory.mktemp("hostile")
    d.chmod(0o700)
    good = _gcc(d / "hostile.so", "-shared")
    good.chmod(0o755)
    ctor = d / "ctor-ran"
    noentry = _gcc(d / "noentry.so", "-shared", "-DNO_ENTRY", f'-DCTOR_FILE="{ctor}"')
    noentry.chmod(0o755)
    obj = _gcc(d / "object.so", "-c")
    obj.chmod(0o644)
    paths = {"good": good, "noentry": noentry, "object": obj, "ctor": ctor}

    def copy(name: str, mode: int, where: Path = d) -> Path:
        out = where / name
        shutil.copyfile(good, out)
        out.chmod(mode)
        return out

    paths["world-writable"] = copy("ww.so", 0o757)
    paths["group-writable"] = copy("gw.so", 0o775)
    paths["nobody"] = copy("nobody.so", 0o755)
    if os.geteuid() == 0:
        os.chown(paths["nobody"], 65534, -1)
    open_dir = d / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    paths["in-open-dir"] = copy("inside.so", 0o755, open_dir)
    group_dir = d / "group"
    group_dir.mkdir()
    group_dir.chmod(0o770)
    paths["in-group-dir"] = copy("inside.so", 0o755, group_dir)
    sticky = d / "sticky"  # like /tmp: root-owned, sticky, world-writable
    sticky.mkdir()
    sticky.chmod(0o1777)
    paths["in-sticky-dir"] = copy("inside.so", 0o755, sticky)
    foreign_sticky = d / "foreign-sticky"  # sticky, but its owner is not root
    foreign_sticky.mkdir()
    foreign_sticky.chmod(0o1777)
    paths["in-foreign-sticky-dir"] = copy("inside.so", 0o755, foreign_sticky)
    if os.geteuid() == 0:
        os.chown(foreign_sticky, 65534, -1)
    (d / "link-ww.so").symlink_to(paths["world-writable"])
    paths["symlink-to-world-writable"] = d / "link-ww.so"
    (d / "link-open.so").symlink_to(paths["in-open-dir"])
    paths["symlink-into-open-dir"] = d / "link-open.so"
    (d / "link.so").symlink_to("hostile.so")
    paths["symlink-to-good"] = d / "link.so"
    (d / "dangling.so").symlink_to("nowhere.so")
    paths["dangling"] = d / "dangling.so"
    (d / "dir.so").mkdir()
    paths["directory"] = d / "dir.so"
    text = d / "notes.so"
    text.write_text("this is not a shared library\n")
    paths["text"] = text
    empty = d / "empty.so"
    empty.write_bytes(b"")
    paths["empty"] = empty
    os.mkfifo(d / "fifo.so")
    paths["fifo"] = d / "fifo.so"
    paths["missing"] = d / "missing.so"
    return {k: str(v) for k, v in paths.items()}


def _quick(fn: Callable[[], object], limit: float = 30.0) -> dict:
    """fn() in a thread that must finish within ``limit`` seconds (a FIFO must never block:
    one that did would block for good, so the bound is generous)."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"still running after {limit} s"
    return box


REFUSED = [
    ("world-writable", r"it is writable by others \(mode 0757\); chmod go-w"),
    ("group-writable", r"it is writable by group \(mode 0775\)"),
    ("in-open-dir", r"directory .*/open is writable by group and others \(mode 0777\)"),
    ("in-group-dir", r"directory .*/group is writable by group \(mode 0770\)"),
    ("symlink-to-world-writable", r"its target .*/ww\.so is writable by others"),
    ("symlink-into-open-dir", r"directory .*/open is writable by group and others"),
    ("directory", r"it is a directory, not a shared library"),
    ("fifo", r"it is a FIFO, not a shared library"),
    ("text", r"not an ELF shared object \(no ELF magic: starts with 74 68 69 73\)"),
    ("empty", r"not an ELF shared object \(no ELF magic: starts with an empty file\)"),
    ("object", r"not a shared object: an ELF file a relocatable object"),
    ("noentry", r"not a swtel ASIC plugin: no symbol swtel_asic_plugin \(checked in the file, before loading it\)"),
    ("missing", r"no such file$"),
    ("dangling", r"no such file \(a symlink to nowhere\.so\)"),
]
#: refused for their owner: making a file another user's needs root (tests/netns/test_plugin_ownership.py)
REFUSED_AS_ROOT = [
    ("nobody", r"it is owned by uid 65534 \(nobody\), not root"),
    ("in-foreign-sticky-dir", r"directory .*/foreign-sticky is owned by uid 65534 \(nobody\), not root"),
]


@pytest.mark.parametrize("which,reason", [pytest.param(*c, id=c[0]) for c in REFUSED])
def test_the_loader_refuses_before_dlopen(lab, which, reason):
    path = lab[which]
    box = _quick(lambda: check_plugin(path))
    err = box.get("error")
    assert isinstance(err, PluginRefused), box
    assert str(err).startswith(f"asic plugin {path}: ")
    assert re.search(reason, str(err)), str(err)
    # resolve() (what the asic source calls before starting the plugin) refuses the same way
    with pytest.raises(PluginRefused):
        resolve(path)
    assert not os.path.exists(lab["ctor"])


def _asic_config(tmp_path: Path, plugin: str, asic_config: str = "", **kw: str) -> Path:
    """The config file of an agent with the asic source on ``plugin`` (health_grace 1 s)."""
    f = tmp_path / "swtel.yaml"
    f.write_text(asic_yaml(tmp_path, plugin, asic_config, control=", health_grace: 1s", **kw))
    return f


@pytest.mark.parametrize("which,reason", [pytest.param(*c, id=c[0]) for c in REFUSED])
def test_validate_names_the_problem(lab, tmp_path, capsys, which, reason):
    path = lab[which]
    f = _asic_config(tmp_path, path)
    box = _quick(lambda: validate_main(SimpleNamespace(file=str(f))))
    assert box.get("result") == 1, box
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("sources.asic.plugin: "))
    assert line.startswith(f"sources.asic.plugin: asic plugin {path}: ")
    assert re.search(reason, line), line
    assert not os.path.exists(lab["ctor"])


def test_validate_cli_exit_code_and_no_constructor(lab, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for which in ("noentry", "world-writable"):
        f = _asic_config(tmp_path, lab[which])
        r = subprocess.run([sys.executable, "-m", "agent", "validate", str(f)], capture_output=True, text=True,
                           env=env, timeout=60, cwd=ROOT)
        assert r.returncode == 1 and "OK" not in r.stdout
        assert f"sources.asic.plugin: asic plugin {lab[which]}: " in r.stderr, r.stderr
    assert not os.path.exists(lab["ctor"])
    # a good plugin passes, whatever the loader would say of its config
    f = _asic_config(tmp_path, lab["good"])
    r = subprocess.run([sys.executable, "-m", "agent", "validate", str(f)], capture_output=True, text=True,
                       env=env, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("which", ["good", "symlink-to-good"])
def test_a_good_plugin_is_accepted(lab, which):
    real = check_plugin(lab[which])
    assert real == os.path.realpath(lab[which])
    h = reader.asic_open(real, "ports=2")
    try:
        gen, ports, counters = reader.asic_layout(h)
        assert [p[0] for p in ports] == ["h0", "h1"] and [len(c) for c in counters] == [3, 3]
    finally:
        reader.asic_close(h)


def test_the_builtin_sim_is_exempt_and_passes_anyway():
    path = builtin_path("sim")
    assert path is not None and resolve("sim") == path
    assert check_plugin(path) == os.path.realpath(path)  # root-owned, 0755, in the package's tree


def test_the_config_is_not_refused_at_run(lab):
    """``run`` does not refuse the config for the plugin's file (the agent runs on, that source
    unhealthy: test_refused_plugin_in_a_running_agent); only validate reports it."""
    text = f"sources:\n  asic: {{enabled: true, plugin: '{lab['world-writable']}'}}\n"
    config.parse(text)
    with pytest.raises(config.ConfigError, match="writable by others"):
        config.parse(text, plugin_file=True)
    # a disabled source's plugin is not looked at
    config.parse(f"sources:\n  asic: {{enabled: false, plugin: '{lab['world-writable']}'}}\n", plugin_file=True)


def test_malformed_elf_never_raises_anything_else(lab, tmp_path, monkeypatch):
    """Truncated files and corrupted headers: a refusal (or, for a harmless flip, a pass),
    never another exception, never slow."""
    good = Path(lab["good"]).read_bytes()
    rng = random.Random(24)
    variants = [good[:n] for n in (4, 5, 16, 52, 63, 64, 65, 200, len(good) // 2, len(good) - 1)]
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            # the ELF header and the section header table (at its end) are what is parsed
            pos = rng.randrange(64) if rng.random() < 0.5 else rng.randrange(max(64, len(good) - 2048), len(good))
            data[pos] = rng.randrange(256)
        variants.append(bytes(data))
    wide = bytearray(good)
    wide[40:48] = (2**63).to_bytes(8, "little")  # e_shoff far past the end
    variants.append(bytes(wide))
    many = bytearray(good)
    many[60:62] = (0xFFFF).to_bytes(2, "little")  # e_shnum
    variants.append(bytes(many))
    path = tmp_path / "fuzz.so"
    # "never slow", as work rather than time: what the checker reads of each file (every read
    # is an os.pread), a few reads, never more than the file whatever its headers claim
    reads: list[int] = []
    pread = os.pread

    def counted(fd: int, n: int, offset: int) -> bytes:
        data = pread(fd, n, offset)
        reads.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counted)
    for data in variants:
        path.write_bytes(data)
        path.chmod(0o644)
        reads.clear()
        try:
            check_plugin(str(path))
        except PluginRefused as exc:
            assert str(exc).startswith(f"asic plugin {path}: ")
        assert len(reads) <= 8 and sum(reads) <= len(data) + 64, (len(data), reads)


# ---------------------------------------------------------------- a refused plugin is not retried blindly


def _source(tmp_path: Path, plugin: str, asic_config: str = "") -> AsicSource:
    cfg = config.load(str(_asic_config(tmp_path, plugin, asic_config)))
    return AsicSource(cfg)


def test_a_refused_file_is_tried_again_only_when_it_changes(lab, tmp_path):
    path = tmp_path / "plugin.so"
    shutil.copyfile(lab["good"], path)
    path.chmod(0o775)  # group-writable: refused
    src = _source(tmp_path, str(path))
    try:
        src.setup({})
        assert src.errors == 1 and "writable by group" in (src.fault or "") and src._handle is None
        for _ in range(3):  # the retry time comes, the file is the same: nothing is tried, nothing counted
            src._retry_at = 0.0
            assert src.needs_setup
            src.setup({})
        assert src.errors == 1 and src.fault is not None, (src.fault, src.last_error, src.errors)
        path.chmod(0o755)  # fixed: the next retry opens it
        src._retry_at = 0.0

        def opened() -> bool:
            src.setup({})  # the plugin's helper process starts and opens it over a few passes
            return src._handle is not None

        wait_until(opened, 10, "the fixed plugin to open", interval=0.01,
                   detail=lambda: repr((src.fault, src.last_error, src.errors)))
        assert src._handle is not None and src.fault is None and src.ports == ["h0", "h1"], (
            src.fault, src.last_error, src.errors)
    finally:
        src.close()


def test_a_reload_tries_a_refused_file_again(lab, tmp_path):
    old = _source(tmp_path, lab["world-writable"])
    old.setup({})
    assert old.errors == 1 and old._refused is not None
    new = _source(tmp_path, lab["world-writable"])
    new.inherit(old)
    assert new.needs_setup  # at once, not after the old source's retry time
    new.setup({})
    assert new.errors == 1 and "writable by others" in new.fault
    old.close()
    new.close()


def test_a_no_entry_library_never_runs_its_constructor_in_the_source(lab, tmp_path):
    src = _source(tmp_path, lab["noentry"])
    try:
        src.setup({})
        assert "no symbol swtel_asic_plugin" in src.fault and src.errors == 1
    finally:
        src.close()
    assert not os.path.exists(lab["ctor"])


# ---------------------------------------------------------------- layouts: sizes and names


def _layout(path: str, asic_config: str) -> tuple[object, int]:
    """The layout (or the loader's refusal) and how many counter descriptors the loader
    listed to get there (the plugin counts its counter_info calls: work, not time)."""
    # our own reference keeps the library (and its count) loaded across asic_close
    infos = ctypes.c_long.in_dll(ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL), "hostile_counter_infos")
    before = infos.value
    h = reader.asic_open(path, asic_config)
    try:
        try:
            result: object = reader.asic_layout(h)
        except OSError as exc:
            result = exc
        return result, infos.value - before
    finally:
        reader.asic_close(h)


LAYOUTS = [
    ("ports=1000000", r"port_count returned 1000000, more than the 4096 ports swtel accepts"),
    ("ports=1 counters=2147483647",
     r"port 'h0': counter_count returned 2147483647, more than the 4096 counters per port swtel accepts"),
    ("ports=4096 counters=4096", r"more than the 262144 values swtel accepts in one layout \(266240 by port 'h64'"),
    ("ports=1025 counters=256", r"more than the 262144 values swtel accepts in one layout \(262400 by port 'h1024'"),
    ("ports=-1", r"port_count returned -1$"),
    ("ports=2 counters=-5", r"port 'h0': counter_count returned -5$"),
    ("ports=2 dup=port", r"port 'h0' listed twice \(ports 0 and 1\)"),
    ("ports=2 dup=counter", r"port 'h0': counter 'c0' listed twice"),
    ("ports=2 empty=port", r"port 1: empty name$"),
    ("ports=2 empty=counter", r"port 'h0' counter 1: empty name$"),
    ("ports=2 ctrl=port", r"port 1: name contains control character U\+001B$"),
    ("ports=2 ctrl=counter", r"port 'h0' counter 1: name contains control character U\+001B$"),
    ("ports=2 nonul=port", r"port 1: name is not NUL-terminated within 64 bytes$"),
    ("ports=2 nonul=counter", r"port 'h0' counter 1: name is not NUL-terminated within 64 bytes$"),
    ("ports=2 utf8=port", r"port 1: name is not UTF-8$"),
    ("nbins=65", r"port 'h0' counter 'c0': nbins 65, more than the 64 bins swtel accepts$"),
    ("nbins=4294967295", r"port 'h0' counter 'c0': nbins 4294967295, more than the 64 bins swtel accepts$"),
    # ABI 1.1 histograms: bins that do not ascend, or cannot be listed, or none
    ("kind=2 nbins=0", r"port 'h0' counter 'c0': nbins 0 \(a HISTOGRAM has 1 to 64 bins\)$"),
    ("kind=2 nbins=4 bins=overlap", r"port 'h0' counter 'c0': bin 1 \[1, 3\]: it does not start above the "
                                    r"previous bin's high bound \(bins ascend, no overlap\)$"),
    ("kind=2 nbins=4 bins=inverted", r"port 'h0' counter 'c0': bin 1 \[2, 0\]: its low bound is above its high "
                                     r"bound$"),
    ("kind=2 nbins=4 bins=fail", r"port 'h0' counter 'c0': bin_info\(0, 0, 1\) failed$"),
    ("ports=5 counters=1024 kind=2 nbins=52", r"more than the 262144 values swtel accepts in one layout \(bins "
                                              r"included; by port 'h4' counter 'c945'\)$"),
]


@pytest.mark.parametrize("asic_config,reason", LAYOUTS, ids=[c for c, _ in LAYOUTS])
def test_a_bad_layout_is_refused_quickly_with_its_reason(lab, asic_config, reason):
    result, listed = _layout(lab["good"], asic_config)
    assert isinstance(result, OSError), result
    assert str(result).startswith(f"asic plugin {lab['good']}: layout refused: ")
    assert re.search(reason, str(result)), str(result)
    # the counts are judged before the descriptors are listed: never the millions these
    # layouts announce (the most any needs: the nbins case's 4 × 1024 + 946)
    assert listed <= 5 * 1024, listed


HELPER_LAYOUTS = ["ports=2 dup=port", "ports=2 ctrl=counter", "ports=2 utf8=port", "kind=2 nbins=4 bins=overlap",
                  "ports=4096 counters=4096"]


@pytest.mark.parametrize("asic_config", HELPER_LAYOUTS)
def test_the_helper_refuses_a_layout_as_the_python_loader_does(lab, asic_config):
    """Through the helper the backend runs (the C one or host.py): the refusal is an OSError
    with the very text of the ctypes loader (the C helper's repr() of a name included)."""
    from agent._fallback import asic as python_loader

    h = python_loader.asic_open(lab["good"], asic_config)
    try:
        with pytest.raises(OSError) as expected:
            python_loader.asic_layout(h)
    finally:
        python_loader.asic_close(h)
    proxy = PluginProxy()
    proxy.open(lab["good"], asic_config)
    try:
        with pytest.raises(OSError) as err:
            proxy.layout()
        assert type(err.value) is OSError and str(err.value) == str(expected.value)
        assert proxy.alive  # the plugin's refusal, not a fault: the helper goes on
    finally:
        proxy.close()


def test_the_limits_are_the_headers_on_both_backends(lab):
    header = Path(HEADER).read_text()
    want = {k: int(re.search(rf"#define SWTEL_ASIC_{k} (\d+)", header).group(1))
            for k in ("MAX_PORTS", "MAX_COUNTERS", "MAX_VALUES", "MAX_BINS")}
    from agent import _fallback

    backends = [_fallback]
    try:
        from agent import _swtel

        backends.append(_swtel)
    except ImportError:
        pass
    for mod in backends:
        assert {k: getattr(mod, f"ASIC_{k}") for k in want} == want, mod
    # exactly the limit is accepted, and its memory is what was accepted
    (gen, ports, counters), _ = _layout(lab["good"], "ports=1024 counters=256")
    assert len(ports) == 1024 and sum(map(len, counters)) == want["MAX_VALUES"]
    (gen, ports, counters), _ = _layout(lab["good"], "ports=4096 counters=1")
    assert len(ports) == want["MAX_PORTS"]


def test_an_error_buffer_without_nul_is_bounded(lab):
    with pytest.raises(OSError) as err:
        reader.asic_open(lab["good"], "fill=open")
    # the loader's buffer is 384 bytes; its last byte is always the NUL the loader writes
    assert str(err.value) == f"asic plugin {lab['good']}: open failed: " + "A" * 383
    h = reader.asic_open(lab["good"], "fill=read")
    try:
        gen, *_ = reader.asic_layout(h)
        with pytest.raises(OSError) as err:
            reader.asic_read(h, gen, array("Q", bytes(8 * 6)))
        assert str(err.value) == f"asic plugin {lab['good']}: read failed: " + "A" * 383
    finally:
        reader.asic_close(h)


# ---------------------------------------------------------------- in a running agent


def _faulted(tmp_path: Path):
    code, status = status_json(tmp_path)
    asic = status.get("sources", {}).get("asic", {})
    if code == 1 and asic.get("fault") and status["sources"]["system"]["reads"] > 0:
        return code, status
    return None




# ---------------------------------------------------------------- checked and loaded through one open file


def _swap_for_text(path: Path) -> None:
    """Replace ``path`` on disk (a rename, as an attacker with the directory would) by a
    file that is no library at all: loading the path now fails."""
    fake = path.with_name(path.name + ".new")
    fake.write_text("swapped in after the check\n")
    fake.chmod(0o755)
    os.replace(fake, path)


def test_a_plugin_swapped_after_the_check_is_not_the_one_loaded(lab, tmp_path):
    path = tmp_path / "plugin.so"
    shutil.copyfile(lab["good"], path)
    path.chmod(0o755)
    with open_checked(str(path)) as checked:
        _swap_for_text(path)
        with pytest.raises(OSError, match="cannot load"):  # the path now names the swapped-in file
            PluginProxy().open(str(path), "ports=2")
        proxy = PluginProxy()
        proxy.open(str(path), "ports=2", checked.fd)  # the file that was checked
    try:
        _, ports, _ = proxy.layout()
        assert [p[0] for p in ports] == ["h0", "h1"]
    finally:
        proxy.close()


def test_the_source_loads_the_file_it_checked(lab, tmp_path, monkeypatch):
    """The swap comes between the agent's check and its helper's start: the helper still
    loads the checked file (it never opens the path)."""
    path = tmp_path / "plugin.so"
    shutil.copyfile(lab["good"], path)
    path.chmod(0o755)
    real_start = PluginProxy.start

    def swap_then_start(self: PluginProxy, *args: object) -> None:
        _swap_for_text(path)
        real_start(self, *args)

    monkeypatch.setattr(PluginProxy, "start", swap_then_start)
    src = _source(tmp_path, str(path))
    try:
        def opened() -> bool:
            src.setup({})
            return src._handle is not None or src.errors > 0

        wait_until(opened, 30, "the plugin to open", interval=0.01)
        assert src.fault is None and src.ports == ["h0", "h1"], (src.fault, src.last_error)
        assert path.read_text() == "swapped in after the check\n"
    finally:
        src.close()


def test_the_helper_runs_isolated_in_an_environment_of_its_own(lab, monkeypatch):
    """Nothing of the agent's environment reaches the plugin's process: not a PYTHONPATH
    (the Python helper runs ``python -I``), not an LD_PRELOAD, not any other variable."""
    monkeypatch.setenv("PYTHONPATH", "/swtel-canary/pythonpath")
    monkeypatch.setenv("LD_PRELOAD", "/swtel-canary/preload.so")
    monkeypatch.setenv("SWTEL_CANARY", "set in the agent")
    proxy = PluginProxy()
    proxy.open(lab["good"], "ports=1")
    try:
        raw = Path(f"/proc/{proxy.pid}/environ").read_bytes()
        env = dict(item.split("=", 1) for item in raw.decode().split("\0") if item)
        assert env == HELPER_ENV
        argv = Path(f"/proc/{proxy.pid}/cmdline").read_bytes().decode().split("\0")
        if proxy.helper == "python":
            assert argv[1] == "-I", argv
        else:  # the C helper: no interpreter, nothing to isolate beyond its environment
            assert proxy.helper == "c" and argv[0] == C_HOST, argv
        _, ports, _ = proxy.layout()  # and it works: the package found without PYTHONPATH
        assert [p[0] for p in ports] == ["h0"]
    finally:
        proxy.close()
