"""The path grammar (agent/pathgrammar.py): hostile key values round-trip, and every path
string and wire byte equals what the code it replaced produced (copied below as oracles:
gnmi/paths.split and from_proto, counters.escape_key, the insights' and the OTLP names'
unescaping, the f-strings that built interface paths)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pygnmi.spec.v080 import gnmi_pb2

from agent import pathgrammar as pg
from agent.counters import COUNTER, OPENCONFIG, Container, CounterSpec
from agent.counters import escape_key as counters_escape_key
from agent.exporters import otlp_names
from agent.gnmi import paths
from agent.insights.classify import classify
from agent.insights.paths import deleted_ports
from agent.sources import drivers

ROOT = Path(__file__).resolve().parents[2]

# pure Python and protobuf: no backend in it (the Debian pass checks other libraries)
pytestmark = pytest.mark.libs

HOSTILE = [
    "swp1", "", "]", "\\", "=", "/", "[", "a]b", "a\\b", "a=b", "a/b", "[x]", "\\]", "]\\", "a\\",
    "x]=[y", "k=v]/c[d=e", "\\\\]]", "ü", "漢字", "🙂 port", "tab\tnl\n", "\x00nul", "*", "...",
    "a:b", "swtel:/x", "name=", "=]", " ",
]

# ---------------------------------------------------------------- the previous code, verbatim


def old_escape_key(value: str) -> str:
    return value.replace("\\", "\\\\").replace("]", "\\]")


def old_split(path: str) -> list[tuple[str, dict[str, str]]]:
    """agent/gnmi/paths.split before the grammar moved."""
    elems: list[tuple[str, dict[str, str]]] = []
    name: list[str] = []
    keys: dict[str, str] = {}
    i, n = 0, len(path)

    def elem() -> tuple[str, dict[str, str]]:
        text = "".join(name)
        if not text:
            raise ValueError(f"empty element name in {path!r}")
        return text, keys

    while i < n:
        ch = path[i]
        if ch == "/":
            if name or keys:
                elems.append(elem())
            name, keys = [], {}
            i += 1
        elif ch == "[":
            if not name:
                raise ValueError(f"key without an element name in {path!r}")
            eq = path.find("=", i)
            if eq < 0:
                raise ValueError(f"key without '=' in {path!r}")
            key = path[i + 1 : eq]
            value: list[str] = []
            i = eq + 1
            while i < n and path[i] != "]":
                if path[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(path[i])
                i += 1
            if i >= n or not key or "[" in key or "]" in key:
                raise ValueError(f"bad key in {path!r}")
            keys[key] = "".join(value)
            i += 1
        elif ch == "]":
            raise ValueError(f"unbalanced ']' in {path!r}")
        else:
            if keys:
                raise ValueError(f"text after a key in {path!r}")
            name.append(ch)
            i += 1
    if name or keys:
        elems.append(elem())
    return elems


def old_from_proto(path: gnmi_pb2.Path) -> str:
    out = []
    for e in path.elem:
        keys = "".join(f"[{k}={old_escape_key(e.key[k])}]" for k in sorted(e.key))
        out.append(f"{e.name}{keys}")
    if not out and path.element:
        out = list(path.element)
    return "/" + "/".join(out)


def old_read_key(text: str, start: int) -> tuple[str, int]:
    """agent/insights/paths._unescape_key."""
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


_OLD_UNESCAPE = re.compile(r"\\(.)")
_OLD_KEY = r"((?:[^\]\\]|\\.)*)"


def old_otlp_unescape(value: str) -> str:
    return _OLD_UNESCAPE.sub(r"\1", value)


def outcome(fn, *args):
    """A call's result, or its error's type and message: both must stay the same."""
    try:
        return fn(*args)
    except ValueError as exc:
        return ("ValueError", str(exc))


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_interface_name_round_trips(name):
    path = pg.interface_path(name) + "/state/counters"
    assert path == f"/interfaces/interface[name={old_escape_key(name)}]/state/counters"
    elems = pg.split(path)
    assert elems == [("interfaces", {}), ("interface", {"name": name}), ("state", {}), ("counters", {})]
    assert pg.format_path(elems) == path
    assert paths.from_proto(paths.to_proto(path)) == path
    assert deleted_ports(pg.interface_path(name)) == [name]
    assert deleted_ports(pg.interface_path(name) + "/state") == []


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_reads_back_in_place(name):
    text = f"x[k={pg.escape_key(name)}]tail"
    value, end = pg.read_key(text, len("x[k="))
    assert (value, text[end + 1:]) == (name, "tail")
    assert pg.unescape_key(pg.escape_key(name)) == name


@pytest.mark.parametrize("name", HOSTILE)
def test_wire_bytes_equal_a_message_built_by_hand(name):
    path = pg.interface_path(name) + "/state/counters"
    want = gnmi_pb2.Path(origin="openconfig", target="t", elem=[
        gnmi_pb2.PathElem(name="interfaces"), gnmi_pb2.PathElem(name="interface", key={"name": name}),
        gnmi_pb2.PathElem(name="state"), gnmi_pb2.PathElem(name="counters")])
    assert paths.encoded(path, "openconfig", "t") == want.SerializeToString()


def test_wire_bytes_of_one_hostile_name_are_pinned():
    """Captured before the grammar moved: a change here changes what collectors receive."""
    path = pg.interface_path("a]b\\c=d/e[f]ü") + "/state/counters/in-octets"
    assert path == "/interfaces/interface[name=a\\]b\\\\c=d/e[f\\]ü]/state/counters/in-octets"
    assert paths.encoded(path, "openconfig", "t").hex() == (
        "120a6f70656e636f6e6669671a0c0a0a696e74657266616365731a230a09696e7465726661636512160a046e61"
        "6d65120e615d625c633d642f655b665dc3bc1a070a0573746174651a0a0a08636f756e746572731a0b0a09696e"
        "2d6f6374657473220174")


def test_keys_format_sorted_and_split_keeps_several():
    path = "/a/b[z=1][k=v\\]w][e=]/c"
    elems = pg.split(path)
    assert elems == [("a", {}), ("b", {"z": "1", "k": "v]w", "e": ""}), ("c", {})]
    assert pg.format_path(elems) == "/a/b[e=][k=v\\]w][z=1]/c"
    assert pg.format_path([]) == "/"


@pytest.mark.parametrize("text,want", [
    ("swtel:/x", ("swtel", "/x")), ("/x", ("", "/x")), ("openconfig:/a[k=b:c]", ("openconfig", "/a[k=b:c]")),
    ("/a[k=b:c]", ("", "/a[k=b:c]")), ("a[k:x]", ("", "a[k:x]")), ("o:", ("o", "")),
])
def test_split_origin(text, want):
    assert pg.split_origin(text) == want == paths.split_origin(text)


@pytest.mark.parametrize("bad", ["/a[k=v", "/[k=v]", "/a[kv]", "/a]", "/a[k=v]b", "/a[=v]", "/a[k=v\\",
                                 "/a[k[=v]", "//[k=v]"])
def test_malformed_paths_fail_as_before(bad):
    with pytest.raises(ValueError):
        pg.split(bad)
    assert outcome(pg.split, bad) == outcome(old_split, bad)


# ---------------------------------------------------------------- against the previous code

_HOSTILE_CHARS = st.sampled_from(list("ab/[]=\\:*.ü漢 \n") + ["🙂", "\x00"])
_text = st.text(alphabet=_HOSTILE_CHARS, max_size=24)


@settings(max_examples=3000, deadline=None)
@given(_text)
def test_split_equals_the_previous_parser_on_any_text(text):
    assert outcome(pg.split, text) == outcome(old_split, text)


@settings(max_examples=2000, deadline=None)
@given(_text, st.integers(min_value=0, max_value=24))
def test_escape_and_read_key_equal_the_previous_code(text, start):
    assert pg.escape_key(text) == old_escape_key(text) == counters_escape_key(text)
    assert pg.read_key(text, start) == old_read_key(text, start)


@settings(max_examples=2000, deadline=None)
@given(_text)
def test_unescape_equals_the_otlp_regex_on_every_value_its_pattern_matches(text):
    """OTLP's attributes came from a regex group (an escaped value) through ``\\\\(.)``."""
    m = re.fullmatch(_OLD_KEY, text)
    if m:
        assert pg.unescape_key(text) == old_otlp_unescape(text)
    assert pg.unescape_key(pg.escape_key(text)) == text == old_otlp_unescape(pg.escape_key(text))


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="abc-", min_size=1, max_size=4),
                          st.dictionaries(st.text(alphabet="kx", min_size=1, max_size=2), _text, max_size=3)),
                max_size=4))
def test_from_proto_equals_the_previous_code(elems):
    msg = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=n, key=k) for n, k in elems])
    text = paths.from_proto(msg)
    assert text == old_from_proto(msg) == pg.format_path(elems)
    assert pg.split(text) == [(n, dict(k)) for n, k in elems]


def test_from_proto_keeps_gnmi_03_string_elements():
    msg = gnmi_pb2.Path(element=["interfaces", "interface[name=a]"])
    assert paths.from_proto(msg) == old_from_proto(msg) == "/interfaces/interface[name=a]"
    assert paths.from_proto(gnmi_pb2.Path()) == "/"


# ---------------------------------------------------------------- the users


@pytest.mark.parametrize("name", HOSTILE)
def test_driver_containers_equal_the_previous_templates(name):
    key = old_escape_key(name)
    c, leaf, _kind = drivers.map_name(drivers.MLXSW, name, "rx_octets_prio_3")
    assert (c.path, leaf) == (f"/interfaces/interface[name={key}]/pfc/priority[id=3]/state", "in-octets")
    c, _leaf, _kind = drivers.map_name(drivers.MLXSW, name, "tc_no_buffer_discard_uc_tc_5")
    assert c.path == f"/qos/interfaces/interface[interface-id={key}]/output/queues/queue[name=5]/state"
    c, leaf, _kind = drivers.map_name([], name, "SomethingNew")
    assert (c.path, leaf) == (f"/interfaces/interface[name={key}]/ethtool", "something-new")


@pytest.mark.parametrize("name", HOSTILE)
def test_otlp_attributes_of_a_hostile_name(name):
    """The interface attribute is the name itself, whatever escaping its path needed."""
    container = pg.interface_path(name) + "/state/counters"
    got, attrs, rank = otlp_names.metric_name(container, "in-octets")
    assert (got, attrs, rank) == ("nvswitch_interface_ether_stats_octets", (("interface", name),), 1)
    queue = pg.qos_interface_path(name) + "/output/queues/queue[name=3]/state"
    assert otlp_names.metric_name(queue, "dropped-pkts")[1] == (("interface", name), ("tc", "3"))
    odd = f"/x/y[name={pg.escape_key(name)}]/z"
    assert otlp_names.generic_name(odd, "v")[1] == (("y", name),)


@pytest.mark.parametrize("name", HOSTILE)
def test_the_detectors_classify_a_hostile_port(name):
    spec = CounterSpec(Container(OPENCONFIG, pg.interface_path(name) + "/state/counters"), "in-octets",
                       kind=COUNTER, port=name)
    queue = CounterSpec(Container(OPENCONFIG, pg.qos_interface_path(name) + "/output/queues/queue[name=1]/state"),
                        "dropped-pkts", kind=COUNTER, port=name)
    if not name:  # a counter without a port is never a detector's (as before)
        assert classify(spec) is None and classify(queue) is None
        return
    assert classify(spec) == (name, "rx-octets", "")
    assert classify(queue) == (name, "drops-out", "queue-dropped-pkts")
    other = CounterSpec(spec.container, "in-octets", kind=COUNTER, port=name + "x")
    assert classify(other) is None  # the path names another port


@pytest.mark.parametrize("dev,port", [("mlx5_0", "1"), ("a]b", "\\"), ("", ""), ("ü/=", "x]y")])
def test_rdma_paths(dev, port):
    path = pg.rdma_port_path(dev, port)
    assert path == f"/rdma/devices/device[name={old_escape_key(dev)}]/ports/port[id={old_escape_key(port)}]"
    assert deleted_ports(path + "/hw-counters") == [f"{dev}/{port}", dev]
    spec = CounterSpec(Container("swtel", path + "/hw-counters"), "roce_adp_retrans", port=f"{dev}/{port}")
    assert classify(spec) == (f"{dev}/{port}", "roce", "roce-adp-retrans")


# ---------------------------------------------------------------- one place

def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """String constants that are not docstrings."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


def test_only_the_grammar_spells_an_interface_path():
    found = []
    for path in sorted((ROOT / "agent").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "agent/pathgrammar.py":
            continue
        for node in _code_strings(ast.parse(path.read_text())):
            # markdown prose (docs rows, between backticks) may show a path as an example
            if "interfaces/interface[" in node.value and "`" not in node.value:
                found.append(f"{rel}:{node.lineno}")
    assert not found, found


# ---------------------------------------------------------------- names that are bytes


@given(st.binary(max_size=24))
def test_escape_name_is_reversible_and_stable(raw):
    shown = pg.escape_name(raw)
    assert pg.unescape_name(shown) == raw
    assert pg.escape_name(pg.unescape_name(shown)) == shown
    assert not any(ch in shown for ch in "\x00\x1f\x7f\x85\u2028\u202e") and "\udcff" not in shown
    shown.encode("utf-8")  # always encodable: no surrogate is left
    # a name that needed escaping holds '%', which no Linux interface name can: no collision
    text_ok = "%" not in shown
    if text_ok:
        assert shown.encode() == raw


@pytest.mark.parametrize("raw,shown", [
    (b"swp\xff", "swp%FF"), (b"a%b", "a%25b"), (b"\x1b[31m", "%1B[31m"), (b"", ""),
    ("漢字".encode(), "漢字"), (b"a]b=c", "a]b=c"), (b"\xe2\x80", "%E2%80"), (b"\xc2\x85", "%C2%85"),
])
def test_escape_name_examples(raw, shown):
    assert pg.escape_name(raw) == shown and pg.unescape_name(shown) == raw


@pytest.mark.parametrize("container,leaf,bin_path", [
    ("/x/phy/histograms/state/rs-num-corr-err[upper-boundary=3]", "count",
     "/x/phy/histograms/state/rs-num-corr-err[upper-boundary=3]"),  # the bin's own container
    ("/x/phy/histograms/state", "rs-num-corr-err[upper-boundary=3]/count",
     "/x/phy/histograms/state/rs-num-corr-err[upper-boundary=3]"),  # keyed below the histogram's
    ("/x/phy/histograms/state", "rs-num-corr-err[upper-boundary=3]/upper-boundary", None),
    ("/x/phy/histograms/state", "/count", None),
    ("/x/phy/state", "symbol-errors", None),
])
def test_a_bin_count_reads_the_same_however_its_source_split_it(container, leaf, bin_path):
    assert pg.bin_of_count(container, leaf) == bin_path
