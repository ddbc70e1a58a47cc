"""Bad input: the config loader, the gNMI server and the C netlink/ethtool parsers.

* ``agent.config.parse``: hypothesis text and YAML shaped like the config (known keys, any
  values): a Config or ConfigError, nothing else, the pathological ones stopped by the
  loader's own bounds (values after alias expansion, nesting, size), each naming its bound.
* A running agent's gNMI server (``exporters.server``, plaintext on loopback): random
  Capability/Get/Subscribe requests (valid ones, malformed paths, huge keys, unknown
  encodings and modes, thousands of subscriptions in one request, more streams than the
  limit): every RPC ends with a clear status (never UNKNOWN or INTERNAL, the codes of an
  unhandled exception), the agent stays up and its RSS bounded.
* The parsers (netdev_parse, ethtool_parse, ethtool_strings_parse, link_parse: the code
  the reader runs on the kernel's replies): hypothesis, both backends agreeing; and the atheris
  harness (fuzz/fuzz_parsers.py, coverage-guided, ASan/UBSan build) for 25 s.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from array import array
from pathlib import Path

import grpc
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pygnmi.spec.v080 import gnmi_pb2

from agent import _backend, _fallback, config
from agent.yamlsafe import MAX_DEPTH, MAX_VALUES
from tests import fuzz_inputs
from tests.namespaces import ROOT

FAST = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)

# ---------------------------------------------------------------- parsers


@pytest.mark.once
@settings(FAST, max_examples=1500)
@given(st.one_of(st.binary(max_size=2048),
                 st.tuples(st.sampled_from(fuzz_inputs.seeds()),
                           st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=6))
                 .map(lambda a: bytes(_edit(*a)))))
def test_parsers_agree_on_any_buffer(data):
    assert fuzz_inputs.run(_backend.reader, data) == fuzz_inputs.run(_fallback, data)


def _edit(seed: bytes, edits) -> bytearray:
    out = bytearray(seed)
    for pos, value in edits:
        out[pos % len(out)] = value
    return out


def _parse(impl, buf: bytes, wanted=(3,), seq=1):
    idx = array("i", wanted)
    out = array("Q", bytes(8 * 25 * len(idx)))
    seen = bytearray(len(idx))
    return impl.netdev_parse(buf, idx, out, seen, seq), out.tolist(), bytes(seen)


@pytest.mark.once
@pytest.mark.parametrize("impl", [_backend.reader, _fallback], ids=["active", "python"])
def test_netdev_parse_bounds(impl):
    ok = fuzz_inputs.stats_msg(3, 1, list(range(25)))
    assert _parse(impl, ok + fuzz_inputs.nlmsg(3, 1, bytes(4)))[0] == 1
    assert _parse(impl, ok)[1][:25] == list(range(25))
    # a last message whose length is not a multiple of 4: no read past the buffer
    assert _parse(impl, ok + struct.pack("=IHHII", 21, 92, 0, 1, 0) + bytes(5))[0] == 1
    # an RTM_NEWSTATS too short for its if_stats_msg, and an attribute longer than its message
    short = struct.pack("=IHHII", 20, 92, 0, 1, 0) + struct.pack("=i", 3)
    assert _parse(impl, short) == (0, [0] * 25, b"\0")
    long_attr = (struct.pack("=IHHII", 36, 92, 0, 1, 0) + struct.pack("=BBHiI", 0, 0, 0, 3, 1)
                 + struct.pack("=HH", 200, 1) + bytes(4))
    assert _parse(impl, long_attr)[0] == 0
    # NLMSG_ERROR: too short, positive or INT_MIN are EIO; a real one is its errno
    for payload, code in ((b"", 5), (struct.pack("=i", 7), 5), (struct.pack("=i", -(2**31)), 5),
                          (struct.pack("=i", -16), 16)):
        with pytest.raises(OSError) as exc:
            _parse(impl, fuzz_inputs.nlmsg(2, 1, payload))
        assert exc.value.errno == code
    # another dump's messages are ignored
    assert _parse(impl, ok, seq=2)[0] == 0


@pytest.mark.once
@pytest.mark.parametrize("impl", [_backend.reader, _fallback], ids=["active", "python"])
def test_ethtool_parse_bounds(impl):
    counts, out, status = array("I", [3, 2, 2]), array("Q", bytes(8 * 7)), array("i", [9, 9, 9])
    replies = [struct.pack("=II3Q", 0x1D, 3, 1, 2, 3),
               struct.pack("=II", 0x1D, 2) + struct.pack("=Q", 5),  # claims 2, carries 1
               b"\x1d\0\0"]  # not even a header
    assert impl.ethtool_parse(replies, counts, out, status) == 1
    assert out.tolist()[:3] == [1, 2, 3] and status.tolist() == [0, -1, 90]  # EMSGSIZE
    table = struct.pack("=III", 0x1B, 1, 1000) + b"rx".ljust(32, b"\0") + b"t" * 32 + b"z" * 7
    assert impl.ethtool_strings_parse(table) == ["rx", "t" * 32]  # len bounded by the buffer
    assert impl.ethtool_strings_parse(b"\0" * 11) == []


@pytest.mark.once
@pytest.mark.slow
def test_atheris_harness_coverage_guided(tmp_path):
    """fuzz/fuzz_parsers.py for 25 s: no crash, no hang, no disagreement, coverage grows."""
    if _backend.NAME != "C":
        pytest.skip("the coverage-guided harness fuzzes the C extension (fallback: the hypothesis test above)")
    stats = tmp_path / "stats.json"
    proc = subprocess.run([sys.executable, str(ROOT / "fuzz/fuzz_parsers.py"), "--seconds", "25",
                           "--stats", str(stats), "--artifacts", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(stats.read_text())
    assert result["runs"] > 10_000, result
    try:
        import atheris  # noqa: F401
    except ImportError:
        return  # the hypothesis engine: no C coverage figure
    # coverage reaches the fuzzer (how many edges 25 s find varies from run to run: 15-40 seen)
    assert result["edges"] and result["edges"] >= 5, result
    assert "Done" in proc.stderr and not list(tmp_path.glob("crash-*"))


# ---------------------------------------------------------------- config loader

SECTIONS = {
    "target": st.text(max_size=20),
    "interval": st.sampled_from(["100ms", "10ms", "1ms", "2s", "1m", "-1s", "0", "abc", "1e400ms"]),
}
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                    st.sampled_from(["100ms", "0660", "127.0.0.1:57400", "[::1]:9339", "*", "per-tick",
                                     "nokia", "/nonexistent", "-", "\x00", "é" * 3]))
KEYS = ["target", "interval", "sources", "netdev", "ethtool", "rdma", "system", "asic", "interfaces",
        "exclude", "counters", "include", "enabled", "per_queue", "root", "plugin", "config",
        "exporters", "jsonl", "path", "dialout", "address", "protocol", "tls", "insecure", "ca",
        "cert", "key", "server_name", "heartbeat", "queue", "notifications", "username",
        "password_file", "server", "listen", "tunnel", "control", "socket", "mode", "group",
        "health_grace", "log", "level", "format", "rate_limit", "insights", "history",
        "error_burst", "threshold", "window", "groups", "imbalance", "unknown_key"]
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)), max_leaves=25)


def _parse_bounded(text: str) -> list[str]:
    """Parse *text*: a config or a ConfigError, nothing else; return its problems (none if it
    parsed). What bounds the work is the loader's counting (yamlsafe: values after alias
    expansion, nesting, the file's size), checked by the pathological cases below by the error
    each one must meet, not by a stopwatch."""
    try:
        config.parse(text)
    except config.ConfigError as exc:
        assert exc.problems and all(isinstance(p, str) for p in exc.problems)
        return exc.problems
    return []


@settings(FAST, max_examples=300)
@given(st.dictionaries(st.sampled_from(KEYS), trees, max_size=6))
def test_config_shaped_yaml_only_config_errors(data):
    _parse_bounded(yaml.safe_dump(data, allow_unicode=True))


@settings(FAST, max_examples=300)
@given(st.one_of(st.text(max_size=400),
                 st.text(alphabet=":-[]{}&*!|>'\"%@`#,? \n\t0123456789abc", max_size=200)))
def test_config_any_text_only_config_errors(text):
    _parse_bounded(text)


def test_config_pathological_yaml_bounded():
    """A billion laughs, deep nesting, a huge document: rejected or parsed, quickly."""
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    for text, bound in ((laughs, f"too many values: more than {MAX_VALUES} after expanding aliases"),
                        ("[" * 5000 + "]" * 5000, f"nesting too deep (more than {MAX_DEPTH} levels)"),
                        ("{" * 100000, f"nesting too deep (more than {MAX_DEPTH} levels)"),
                        ("target: " + "x" * 5_000_000, f"larger than {config.MAX_FILE_BYTES // 1024} KiB")):
        problems = _parse_bounded(text)
        assert any(bound in p for p in problems), (text[:40], problems)


# ---------------------------------------------------------------- gNMI server

BAD_CODES = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


names = st.one_of(st.sampled_from(["interfaces", "interface", "state", "counters", "in-pkts", "*", "...",
                                   "qos", "agent", "rdma", "ethernet", "oper-status", ""]),
                  st.text(max_size=12), st.just("x" * 70_000))
keys = st.dictionaries(st.sampled_from(["name", "id", "*", ""]) | st.text(max_size=8),
                       st.sampled_from(["lo", "*", "eth0"]) | st.text(max_size=8) | st.just("k" * 100_000),
                       max_size=3)
paths = st.builds(
    lambda origin, target, elems, legacy: gnmi_pb2.Path(
        origin=origin, target=target, element=legacy,
        elem=[gnmi_pb2.PathElem(name=n, key=k) for n, k in elems]),
    st.sampled_from(["", "openconfig", "swtel", "openconfig-interfaces", "bogus"]) | st.text(max_size=6),
    st.sampled_from(["", "fuzz", "other"]),
    st.lists(st.tuples(names, keys), max_size=6),
    st.lists(st.text(max_size=6), max_size=2),
)
encodings = st.sampled_from([0, 1, 2, 3, 4, 5, 42, -1, 2**31 - 1])
modes = st.sampled_from([0, 1, 2, 3, -5, 99])


def test_fuzz_inputs_seeds_parse():
    """The harness' seeds are what they claim: a dump the parser reads."""
    (seed, *_rest) = fuzz_inputs.seeds()
    result = fuzz_inputs.run(_backend.reader, seed)
    assert result[0] == "netdev" and result[1] == 2  # 3 and 5; 9 is in another dump
    links = [fuzz_inputs.run(_backend.reader, s) for s in fuzz_inputs.seeds() if s[0] == 3]
    assert links[0] == ("links", ([(16, 3, 0x1043, "swp1", 6, "veth", 4), (17, 4, 0x1043, "swp2s1", 6, "", 4)], True))
    assert links[1] == ("links", "OSError", 1)  # NLMSG_ERROR -EPERM
    assert Path(ROOT / "fuzz/fuzz_cov.c").exists()
