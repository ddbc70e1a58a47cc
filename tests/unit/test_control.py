"""Control socket: framing, errors, stale/live socket handling, isolation of clients, fuzzing."""

from __future__ import annotations

import grp
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config import Control, FileMode
from agent.control import client
from agent.control.protocol import MAX_REQUEST, pack
from agent.control.server import ControlServer, ControlServerError
from tests.helpers import wait_until


def status_handler(_req):
    return {"now_ns": time.time_ns(), "sources": {}}


def boom(_req):
    raise RuntimeError("handler exploded")


REPO = Path(__file__).resolve().parents[2]


def connect(path: str, timeout: float = 5.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def read_replies(s: socket.socket) -> list[dict]:
    """Every reply frame until the server closes the connection."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    replies = []
    while data:
        assert len(data) >= 4, f"truncated reply header {data!r}"
        (size,) = struct.unpack(">I", data[:4])
        assert len(data) >= 4 + size, "truncated reply body"
        reply = msgpack.unpackb(data[4 : 4 + size], raw=False)
        assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply
        if not reply["ok"]:
            assert isinstance(reply["error"], str) and reply["error"]
        replies.append(reply)
        data = data[4 + size :]
    return replies


def roundtrip(s: socket.socket, obj) -> dict:
    s.sendall(pack(obj))
    header = s.recv(4, socket.MSG_WAITALL)
    (size,) = struct.unpack(">I", header)
    return msgpack.unpackb(s.recv(size, socket.MSG_WAITALL), raw=False)


@pytest.fixture
def make_server(tmp_path):
    servers = []

    def make(handlers=None, sock_name="ctl/swtel.sock", **kw):
        cfg = Control(socket=str(tmp_path / sock_name), group=None)
        srv = ControlServer(cfg, handlers or {"status": status_handler, "boom": boom}, **kw)
        srv.start()
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        srv.stop()


# ---------------------------------------------------------------- basics


def test_status_roundtrip_and_several_requests_per_connection(make_server):
    srv = make_server()
    assert stat.S_ISSOCK(os.stat(srv.path).st_mode), "parent dir is created, socket bound"
    with connect(srv.path) as s:
        for _ in range(3):
            reply = roundtrip(s, {"cmd": "status"})
            assert reply["ok"] is True and "now_ns" in reply["result"]
        assert roundtrip(s, {"cmd": "ping"}) == {"ok": True, "result": "pong"}
    assert client.request(srv.path, "status")["sources"] == {}


def test_handler_error_is_reported_and_connection_survives(make_server):
    srv = make_server()
    with connect(srv.path) as s:
        reply = roundtrip(s, {"cmd": "boom"})
        assert reply == {"ok": False, "error": "boom failed: handler exploded", "kind": "agent"}
        assert roundtrip(s, {"cmd": "status"})["ok"] is True
    with pytest.raises(client.AgentError, match="answered with an error: boom failed: handler exploded"):
        client.request(srv.path, "boom")
    assert srv.stats_copy()["errors"] == 2


@pytest.mark.parametrize("verb", ["status", "top"])
def test_a_handler_that_raises_is_an_agent_error_exit_4_never_no_agent(make_server, verb):
    """`swtel status` and `swtel top` against an agent whose command raises: the agent's own
    error (exit 4, its message), not "no agent answered" (exit 2); the agent answers on."""
    import subprocess
    import sys

    srv = make_server({"status": boom, "ports": boom})
    args = ["status", "--socket", srv.path] if verb == "status" else \
        ["top", "--plain", "--iterations", "1", "--socket", srv.path]
    r = subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True, timeout=60,
                       cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == client.EXIT_AGENT_ERROR == 4, (r.returncode, r.stderr)
    assert "answered with an error" in r.stderr and "handler exploded" in r.stderr, r.stderr
    assert "no agent answered" not in r.stderr
    assert client.request(srv.path, "ping") == "pong"


def test_request_errors_say_whose_they_are(make_server):
    """An unknown command is the request's fault (kind request), a full house is busy; the
    client tells the three apart (exit 4, 3) and none of them is "no agent"."""
    srv = make_server()
    with connect(srv.path) as s:
        reply = roundtrip(s, {"cmd": "nope"})
    assert reply["ok"] is False and reply["kind"] == "request" and "unknown command" in reply["error"]
    with pytest.raises(client.AgentError) as err:
        client.request(srv.path, "nope")
    assert client.exit_code(err.value) == client.EXIT_AGENT_ERROR
    assert client.exit_code(client.AgentBusy("x")) == client.EXIT_BUSY
    assert client.exit_code(client.ControlError("no agent answered")) == client.EXIT_NO_AGENT


@pytest.mark.parametrize(
    "frame,fragment",
    [
        (pack({"cmd": "nope"}), "unknown command 'nope'"),
        (pack({"command": "status"}), "request needs a string 'cmd'"),
        (pack({"cmd": 7}), "request needs a string 'cmd'"),
        (pack([1, 2, 3]), "expected a msgpack map, got list"),
        (struct.pack(">I", 3) + b"\xc1\xc1\xc1", "malformed msgpack"),
        (struct.pack(">I", 0), "empty frame"),
        (struct.pack(">I", MAX_REQUEST + 1), f"exceeds the limit of {MAX_REQUEST}"),
        (struct.pack(">I", 0xFFFFFFFF), "exceeds the limit"),
        (struct.pack(">I", 10) + b"\x81", "closed in the middle of a frame"),
        (b"\x00\x00", "closed in the middle of a frame"),
    ],
)
def test_bad_frames_get_an_error_and_the_connection_is_closed(make_server, frame, fragment):
    srv = make_server()
    with connect(srv.path) as s:
        s.sendall(frame)
        s.shutdown(socket.SHUT_WR)
        replies = read_replies(s)  # returns only once the server closed the connection
    assert len(replies) == 1 and not replies[0]["ok"]
    assert fragment in replies[0]["error"]
    assert client.request(srv.path, "ping") == "pong"


def test_idle_and_trickling_clients_time_out(make_server):
    srv = make_server(timeout_s=0.4)
    with connect(srv.path) as idle:
        assert "timed out" in read_replies(idle)[0]["error"]
    # A client trickling one byte every 0.1 s would beat a per-recv timeout; the frame deadline stops it.
    body = msgpack.packb({"cmd": "status", "pad": "x" * 40})
    frame = struct.pack(">I", len(body)) + body
    with connect(srv.path) as slow:
        closed = False
        for byte in frame:
            try:
                slow.send(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
        try:
            replies = read_replies(slow)
        except ConnectionResetError:  # closed with our late bytes unread: the reply went with them
            closed, replies = True, []
    assert closed or (len(replies) == 1 and "timed out" in replies[0]["error"])


def test_reply_that_cannot_be_encoded_as_msgpack_is_still_answered(make_server):
    srv = make_server({"weird": lambda _r: {"obj": object(), "set": {1, 2}}})
    result = client.request(srv.path, "weird")
    assert result["obj"].startswith("<object object")  # unknown types are sent as str()


# ---------------------------------------------------------------- socket file handling


def test_mode_and_group_are_applied(tmp_path):
    gid = os.getgid() if os.getuid() != 0 else grp.getgrnam("daemon").gr_gid
    group = grp.getgrgid(gid).gr_name
    cfg = Control(socket=str(tmp_path / "m.sock"), mode=FileMode(0o640), group=group)
    srv = ControlServer(cfg, {"status": status_handler})
    srv.start()
    try:
        st_ = os.stat(cfg.socket)
        assert stat.S_IMODE(st_.st_mode) == 0o640 and st_.st_gid == gid
    finally:
        srv.stop()
    assert not os.path.exists(cfg.socket), "stop removes its own socket"


def test_missing_group_only_warns(tmp_path):
    cfg = Control(socket=str(tmp_path / "g.sock"), group="no-such-group-swtel-test")
    srv = ControlServer(cfg, {"status": status_handler})
    srv.start()
    try:
        assert client.request(cfg.socket, "ping") == "pong"
        assert os.stat(cfg.socket).st_gid == os.getgid()
    finally:
        srv.stop()


def test_stale_socket_is_replaced(tmp_path):
    path = str(tmp_path / "stale.sock")
    crashed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    crashed.bind(path)  # bound, never listening, then closed: what a killed agent leaves behind
    crashed.close()
    assert os.path.exists(path)
    srv = ControlServer(Control(socket=path, group=None), {"status": status_handler})
    srv.start()
    try:
        assert client.request(path, "ping") == "pong"
    finally:
        srv.stop()


def test_live_socket_is_not_taken_over(make_server):
    first = make_server()
    second = ControlServer(Control(socket=first.path, group=None), {"status": status_handler})
    with pytest.raises(ControlServerError, match="already listening"):
        second.start()
    assert client.request(first.path, "ping") == "pong", "the first agent keeps its socket"


def test_regular_file_in_the_way_is_not_deleted(tmp_path):
    path = tmp_path / "file.sock"
    path.write_text("precious")
    with pytest.raises(ControlServerError, match="not a socket"):
        ControlServer(Control(socket=str(path), group=None), {}).start()
    assert path.read_text() == "precious"


def test_stop_leaves_a_socket_that_replaced_ours(make_server, tmp_path):
    srv = make_server()
    os.unlink(srv.path)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(srv.path)
    try:
        srv.stop()
        assert os.path.exists(srv.path)
    finally:
        other.close()


# ---------------------------------------------------------------- isolation


def test_slow_handler_does_not_block_another_client(make_server):
    release = threading.Event()
    entered = threading.Event()

    def slow(_req):
        entered.set()
        release.wait(10)
        return "done"

    srv = make_server({"slow": slow, "status": status_handler})
    result: list = []
    t = threading.Thread(target=lambda: result.append(client.request(srv.path, "slow", timeout_s=15)))
    t.start()
    try:
        assert entered.wait(5)
        # While the first client's handler is still blocked, a second client is served.
        assert "now_ns" in client.request(srv.path, "status", timeout_s=5)
        assert not release.is_set() and result == []
    finally:
        release.set()
        t.join(15)
    assert result == ["done"]


def _held(release: threading.Event, answer: object = "done") -> tuple[Callable, list[int]]:
    """A handler that holds its slot until ``release``, and the list it marks on entering."""
    entered: list[int] = []

    def handler(_r: object) -> object:
        entered.append(1)
        return release.wait(60) and answer

    return handler, entered


def test_too_many_connections_get_busy(make_server):
    release = threading.Event()
    slow, entered = _held(release)
    srv = make_server({"slow": slow}, max_clients=2)
    holders = [connect(srv.path) for _ in range(2)]
    try:
        for h in holders:
            h.sendall(pack({"cmd": "slow"}))
        wait_until(lambda: len(entered) == 2, 30, "both holders in the handler")
        with connect(srv.path) as third:
            replies = read_replies(third)
        assert replies[0]["error"].startswith("busy")
    finally:
        release.set()
        for h in holders:
            h.close()
    deadline = time.monotonic() + 30
    while True:  # slots free up as the holders' workers finish
        try:
            assert client.request(srv.path, "ping") == "pong"
            break
        except client.ControlError:
            assert time.monotonic() < deadline, "slots were never released"
            time.sleep(0.05)
    assert srv.stats["rejected"] >= 1


# ---------------------------------------------------------------- fuzzing

KNOWN = ("status", "echo")


def model(data: bytes) -> list[bool]:
    """Expected sequence of reply ok-flags for a byte stream, then EOF."""
    out: list[bool] = []
    while data:
        if len(data) < 4:
            return out + [False]
        (size,) = struct.unpack(">I", data[:4])
        if size > MAX_REQUEST or size == 0 or len(data) < 4 + size:
            return out + [False]
        try:
            obj = msgpack.unpackb(data[4 : 4 + size], raw=False, strict_map_key=False)
        except Exception:
            return out + [False]
        if not isinstance(obj, dict) or obj.get("cmd") not in KNOWN:
            return out + [False]
        out.append(True)
        data = data[4 + size :]
    return out


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
chunks = st.one_of(
    st.sampled_from(KNOWN).map(lambda c: pack({"cmd": c})),  # valid requests
    st.builds(lambda c, v: pack({"cmd": c, "arg": v}), st.sampled_from(KNOWN), msgpack_values),
    st.builds(lambda c: pack({"cmd": c}), st.text(max_size=12) | st.integers() | st.none()),
    msgpack_values.map(lambda v: framed(msgpack.packb(v))),  # any value, usually not a map
    st.binary(max_size=64).map(framed),  # framed garbage
    st.binary(max_size=12),  # unframed garbage
    st.integers(MAX_REQUEST + 1, 2**32 - 1).map(lambda n: struct.pack(">I", n)),  # oversized
    st.builds(lambda b, cut: framed(b)[:cut], st.binary(min_size=1, max_size=40), st.integers(1, 40)),
)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fuzz") / "swtel.sock")
    srv = ControlServer(
        Control(socket=path, group=None),
        {"status": status_handler, "echo": lambda req: req},
        timeout_s=2.0,
    )
    srv.start()
    ticks = {"n": 0}
    stop = threading.Event()

    def tick_loop():  # stands in for the engine's tick thread
        while not stop.wait(0.01):
            ticks["n"] += 1

    t = threading.Thread(target=tick_loop, daemon=True)
    t.start()
    yield srv, ticks
    stop.set()
    t.join()
    srv.stop()


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(chunks, min_size=1, max_size=4))
def test_random_and_malformed_frames(fuzz_server, parts):
    srv, _ = fuzz_server
    data = b"".join(parts)
    with connect(srv.path) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server already answered an early bad frame and closed
        replies = read_replies(s)
    assert [r["ok"] for r in replies] == model(data)


def test_after_fuzzing_status_still_answers_and_ticks_went_on(fuzz_server):
    srv, ticks = fuzz_server
    n = ticks["n"]
    assert "now_ns" in client.request(srv.path, "status")
    wait_until(lambda: ticks["n"] > n, 30, "the tick thread to keep running")
    assert srv.stats["errors"] > 0 and srv.stats["requests"] > 0


# ---------------------------------------------------------------- the health rule of `swtel status`

NOW = 1_800_000_000 * 10**9
S = 10**9


def status_doc(sources=None, exporters=None, uptime_s=3600.0, grace_s=None):
    doc = {"now_ns": NOW, "uptime_s": uptime_s, "sources": sources or {}, "exporters": exporters or {},
           "config": {"path": "/etc/swtel/swtel.yaml", "last_reload": {"ok": None}}}
    if grace_s is not None:
        doc["config"]["health_grace_s"] = grace_s
    return doc


def dialout(down_for_s=None):
    return {"kind": "dialout", "state": "backoff" if down_for_s is not None else "connected",
            "down_since_ns": None if down_for_s is None else NOW - int(down_for_s * S)}


HEALTH = [
    # (status, grace, expected problem fragments; [] = healthy)
    (status_doc({"netdev": {"interval_s": 0.1, "last_ok_ns": NOW - S // 10}}), None, []),
    (status_doc({"netdev": {"interval_s": 0.1, "last_ok_ns": NOW - S // 2}}), None,
     ["source netdev: no successful poll for 0.5s (interval 100ms)"]),
    (status_doc({"system": {"interval_s": 5.0, "last_ok_ns": NOW - 14 * S}}), None, []),
    (status_doc({"netdev": {"interval_s": 0.1, "last_ok_ns": None}}, uptime_s=0.2), None, []),
    (status_doc({"netdev": {"interval_s": 0.1, "last_ok_ns": None}}, uptime_s=1.0), None,
     ["source netdev: no successful poll since start-up"]),
    (status_doc({"rdma": {"enabled": False, "interval_s": 0.1, "last_ok_ns": None}}), None, []),
    (status_doc(exporters={"dialout:a": dialout(None), "dialout:b": dialout(3600)}), None, []),
    (status_doc(exporters={"dialout:a": dialout(30), "dialout:b": dialout(3600)}), None, []),
    (status_doc(exporters={"dialout:a": dialout(61), "dialout:b": dialout(3600)}), None,
     ["every dial-out destination has been down for at least 61s (grace 60s)"]),
    (status_doc(exporters={"dialout:a": dialout(20)}, grace_s=10.0), None, ["every dial-out destination"]),
    (status_doc(exporters={"dialout:a": dialout(20)}, grace_s=10.0), 30.0, []),
    (status_doc(exporters={"jsonl": {"kind": "jsonl", "state": "running"}}), None, []),
    # an outage that a reconnect ended is history, not a problem
    (status_doc(exporters={"otlp": {"kind": "otlp", "state": "connected", "down_since_ns": None,
                                    "last_error": None, "previous_error": "UNAVAILABLE: refused"}}), None, []),
    (status_doc({"netdev": {"interval_s": 0.1, "last_ok_ns": NOW - 5 * S}},
                {"dialout:a": dialout(600)}), None, ["source netdev", "every dial-out"]),
]


@pytest.mark.parametrize("doc,grace,expected", HEALTH, ids=[f"health{i}" for i in range(len(HEALTH))])
def test_health_rule(doc, grace, expected):
    problems = client.health_problems(doc, grace)
    assert len(problems) == len(expected), problems
    for fragment, problem in zip(expected, problems, strict=True):
        assert fragment in problem


def test_summary_lists_every_section():
    doc = status_doc({"netdev": {"interval_s": 0.1, "last_ok_ns": NOW - S // 20, "last_duration_us": 35.2,
                                 "counters": 1250, "refresh_cadence_s": 1.0, "ports": 50, "errors": 0,
                                 "overruns": 2}},
                     {"dialout:c1": dict(dialout(90), queue=12, sent=100, dropped=3, reconnects=4,
                                         last_error="UNAVAILABLE: connection refused")})
    doc.update(version="0.1.0", pid=42, backend="C", tick={"ticks": 10, "overruns": 1,
                                                           "cpu_percent": 0.8, "rss_bytes": 31 << 20},
               events={"open": [{"id": 2, "start_ns": NOW - 2 * S, "type": "symbol-ber", "severity": "critical",
                                  "interfaces": ["swp11s1"], "message": "swp11s1: symbol BER 3.1e-10"}],
                       "recent": [{"id": 1, "start_ns": NOW - 90 * S, "cleared_ns": NOW - 30 * S,
                                   "type": "link-flap", "severity": "warning", "interfaces": ["swp2"],
                                   "message": "swp2: 4 carrier transitions"}]})
    doc["config"]["last_reload"] = {"ok": False, "ts_ns": NOW - 10 * S, "error": "a: bad\nb: worse"}
    text = client.render(doc, client.health_problems(doc))
    for fragment in ("pid 42", "reader C", "REJECTED: a: bad; b: worse", "netdev", "1250", "35.2us",
                     "dialout:c1", "down 90s ago", "UNAVAILABLE", "rss 31.0 MiB", "open events (1)",
                     "critical symbol-ber: swp11s1: symbol BER 3.1e-10",
                     "recently cleared (1", "cleared 30s ago",
                     "health: UNHEALTHY", "every dial-out destination"):
        assert fragment in text, (fragment, text)


def test_a_reconnected_destination_shows_its_previous_error_not_a_last_error():
    doc = status_doc(exporters={
        "dialout:c1": dict(dialout(None), last_error=None, previous_error="UNAVAILABLE: ipv4:10.0.0.9:57400: refused"),
        "dialout:c2": dict(dialout(None), last_error=None, previous_error=None)})
    text = client.render(doc, client.health_problems(doc))
    row = next(line for line in text.splitlines() if line.lstrip().startswith("dialout:c1") and "connected" in line)
    assert "UNAVAILABLE" not in row and row.rstrip().endswith("-"), row  # the last-error column
    assert "dialout:c1 previous error (before it reconnected): UNAVAILABLE: ipv4:10.0.0.9:57400: refused" in text
    assert "dialout:c2 previous error" not in text and "health: OK" in text


# ---------------------------------------------------------------- idle clients, odd sockets (issue 14)


def test_idle_connections_cannot_hold_the_health_check(make_server):
    # Idle clients would be timed out after 120 s; the status requests give up after 30 s:
    # an answer shows an idle client was evicted at once, not waited out.
    srv = make_server(max_clients=8, timeout_s=120.0)
    idle = [connect(srv.path) for _ in range(8)]  # a group member holding every slot, saying nothing
    idle[0].sendall(b"\x00")  # one even starts a request and stalls
    try:
        wait_until(lambda: srv.stats["connections"] >= 8, 30, "the idle clients accepted")
        for _ in range(3):
            assert "now_ns" in client.request(srv.path, "status", timeout_s=30.0)
        assert srv.stats["evicted"] >= 1
    finally:
        for s in idle:
            s.close()


def test_busy_is_a_distinct_answer(make_server):
    release = threading.Event()
    slow, entered = _held(release)
    srv = make_server({"slow": slow}, max_clients=2)
    holders = [connect(srv.path) for _ in range(2)]
    try:
        for h in holders:
            h.sendall(pack({"cmd": "slow"}))
        wait_until(lambda: len(entered) == 2, 30, "both holders in the handler")
        with pytest.raises(client.AgentBusy, match="busy"):
            client.request(srv.path, "ping", timeout_s=3.0)
    finally:
        release.set()
        for h in holders:
            h.close()


def test_status_names_what_is_wrong_with_the_socket(tmp_path):
    import subprocess
    import sys

    def status(path):
        return subprocess.run([sys.executable, "-m", "agent", "status", "--socket", path], capture_output=True,
                              text=True, timeout=30, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))

    stale = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(stale)
    s.close()  # bound, never listening: what a killed agent leaves
    regular = tmp_path / "file.sock"
    regular.write_text("x")
    other = str(tmp_path / "other.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(other)
    srv.listen()

    def answer_garbage():
        conn, _ = srv.accept()
        conn.recv(1024)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 4)
        conn.close()

    t = threading.Thread(target=answer_garbage, daemon=True)
    t.start()
    cases = [(str(tmp_path / "absent.sock"), "does not exist"), (stale, "is a stale socket"),
             (str(regular), "is not a socket"), (other, "answered, but not as a swtel agent")]
    try:
        for path, fragment in cases:
            r = status(path)
            assert r.returncode == 2 and fragment in r.stderr, (path, r.stderr)
    finally:
        srv.close()
    r = status("")
    assert r.returncode == 2 and "--socket: must not be empty" in r.stderr


# ---------------------------------------------------------------- busy is not absent


def test_40_simultaneous_requests_answered_or_busy(make_server):
    """40 clients at once against a real control server (8 slots, each status taking 20 ms):
    every one is answered, or told clearly that the agent is busy; none hears "no agent
    answered" (the listen backlog used to overflow into EAGAIN)."""

    def slow_status(_req):
        time.sleep(0.02)
        return {"now_ns": time.time_ns(), "sources": {}}

    srv = make_server({"status": slow_status})
    start = threading.Barrier(40)
    outcomes: list[str] = []
    lock = threading.Lock()

    def ask():
        start.wait(10)
        try:
            result = client.request(srv.path, "status", timeout_s=10)
            outcome = "ok" if "now_ns" in result else f"odd {result!r}"
        except client.AgentBusy as exc:
            outcome = f"busy {exc}"
        except client.ControlError as exc:
            outcome = f"error {exc}"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=ask) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(outcomes) == 40
    assert not [o for o in outcomes if "no agent answered" in o], outcomes
    assert all(o == "ok" or (o.startswith("busy") and "is busy" in o) for o in outcomes), outcomes
    assert outcomes.count("ok") == 40, outcomes  # 40 x 20 ms over 8 slots: all within the retries


def test_full_backlog_is_busy_not_absent(tmp_path, monkeypatch):
    """A socket whose backlog is full (EAGAIN on connect) is a running but busy agent:
    request() raises AgentBusy after its retries and `swtel status` exits 3, saying busy."""
    import subprocess
    import sys

    path = str(tmp_path / "full.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(0)
    held = []
    try:
        while True:  # fill the backlog: nobody accepts
            s = socket.socket(socket.AF_UNIX)
            s.setblocking(False)
            try:
                s.connect(path)
            except BlockingIOError:
                s.close()
                break
            held.append(s)
            assert len(held) < 100
        # retried, then gave up: a busy answer within its own timeout (30 s), tries counted
        tries: list[str] = []
        once = client._request_once

        def counted(*a: object) -> object:
            tries.append("try")
            return once(*a)

        monkeypatch.setattr(client, "_request_once", counted)
        with pytest.raises(client.AgentBusy, match="busy: its listen backlog is full"):
            client.request(path, "status", timeout_s=30)
        assert len(tries) >= 2, tries
        monkeypatch.undo()
        r = subprocess.run([sys.executable, "-m", "agent", "status", "--socket", path], capture_output=True,
                           text=True, timeout=30, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert r.returncode == client.EXIT_BUSY == 3, (r.returncode, r.stderr)
        assert "is busy" in r.stderr and "no agent answered" not in r.stderr, r.stderr
    finally:
        for s in held:
            s.close()
        listener.close()


def test_all_slots_running_is_exit_3(make_server, tmp_path):
    import subprocess
    import sys

    release = threading.Event()
    held, entered = _held(release, {})
    srv = make_server({"status": held}, max_clients=1)
    holder = connect(srv.path)
    try:
        holder.sendall(pack({"cmd": "status"}))
        wait_until(lambda: entered, 30, "the holder in the handler")
        r = subprocess.run([sys.executable, "-m", "agent", "status", "--socket", srv.path], capture_output=True,
                           text=True, timeout=30, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert r.returncode == 3 and "is busy" in r.stderr, (r.returncode, r.stderr)
    finally:
        release.set()
        holder.close()


# ---------------------------------------------------------------- swtel top: a fabric's devices


def _ports_reply(target: str, open_events: int) -> dict:
    """What an agent's `ports` command answers (agent/runner.py): a port, its open events."""
    return {"target": target, "now_ns": time.time_ns(),
            "ports": {"swp1": {"ts_ns": time.time_ns(), "rx_octets": 1, "tx_octets": 2}},
            "events": {"open": [{"id": i, "type": "symbol-ber", "severity": "warning", "message": "m",
                                 "interfaces": ["swp1"]} for i in range(open_events)], "recent": []}}


@pytest.fixture
def fabric_dir(tmp_path, make_server):
    """A fabric's directory as `swtel fabric` writes it (its topology with each device's socket),
    spine-1 and host-1 answering on real control sockets, leaf-3's agent not running."""
    from agent.control.top import fabric_socket
    from agent.tools.topology import Topology

    topo = Topology.field()
    topo.write(tmp_path / "topology.yaml", {n.name: fabric_socket(tmp_path, n.name).name for n in topo.nodes})
    for name, opened in (("spine-1", 2), ("host-1", 0)):
        make_server({"ports": lambda _req, n=name, k=opened: _ports_reply(n, k)}, sock_name=f"{name}.sock")
    return tmp_path


def test_top_lists_a_fabric_s_devices_up_down_and_their_open_events(fabric_dir):
    from agent.control.top import fabric_lines, fabric_of, load_fabric, poll_fabric

    devices = load_fabric(fabric_dir)
    assert [(d.name, d.role, d.socket) for d in devices] == [
        ("spine-1", "spine", fabric_dir / "spine-1.sock"), ("leaf-3", "leaf", fabric_dir / "leaf-3.sock"),
        ("host-1", "host", fabric_dir / "host-1.sock")]
    poll_fabric(devices, timeout_s=2)
    assert [(d.name, d.up, d.open_events, d.ports) for d in devices] == [
        ("spine-1", True, 2, 1), ("leaf-3", False, 0, 0), ("host-1", True, 0, 1)]
    assert "no agent" in devices[1].error or "leaf-3.sock" in devices[1].error, devices[1].error
    lines = fabric_lines(fabric_dir, devices, selected=1)
    assert "3 devices, 2 up, 2 open events" in lines[0]
    rows = {line.split()[0 if not line.startswith(">") else 1]: line for line in lines[2:]}
    assert rows["spine-1"].split()[1:5] == ["spine", "up", "2", "1"]
    assert lines[3].startswith("> leaf-3") and rows["leaf-3"].split()[2:6] == ["leaf", "down", "-", "-"]
    assert rows["host-1"].endswith(str(fabric_dir / "host-1.sock"))
    # a socket of the fabric finds its fabric; a socket elsewhere none
    assert fabric_of(str(fabric_dir / "host-1.sock")) == fabric_dir
    assert fabric_of(str(fabric_dir / "other.sock")) is None
    assert fabric_of("/nonexistent/swtel.sock") is None


def test_top_fabric_shows_the_incident_its_agents_events_and_lldp_form(tmp_path, make_server):
    """`swtel top --fabric`: spine-1's symbol errors on swp11s1 and host-1's retransmissions form
    one incident by the LLDP neighbours each agent answers (command `states`), with leaf-3's agent
    down: its two neighbours' own reports still place it; an agent without `states` adds none."""
    from agent.control.top import fabric_lines, fabric_socket, load_fabric, poll_fabric
    from agent.sources.lldp import neighbor_states, parse_neighbors
    from agent.tools.topology import Topology

    topo = Topology.field()
    topo.write(tmp_path / "topology.yaml", {n.name: fabric_socket(tmp_path, n.name).name for n in topo.nodes})
    now = time.time_ns()
    events = {"spine-1": ("symbol-ber", "swp11s1", now - 2_000_000_000),
              "host-1": ("roce-retrans", "mlx5_0", now - 1_000_000_000)}
    asked: list[list[str]] = []

    def ports(name: str) -> dict:
        kind, port, start = events[name]
        reply = _ports_reply(name, 0)
        reply["events"]["open"] = [{"id": 1, "type": kind, "severity": "warning", "message": "m",
                                    "interfaces": [port], "start_ns": start, "end_ns": start, "state": "open"}]
        return reply

    def states(name: str, req: dict) -> dict:
        asked.append(req["prefixes"])
        lldp = neighbor_states(parse_neighbors(topo.lldp_document(name)))
        return {"target": name, "states": [[c.full(leaf), v] for (c, leaf), v in lldp.items()
                                           if c.full(leaf).startswith(tuple(req["prefixes"]))]}

    for name in ("spine-1", "host-1"):
        make_server({"ports": lambda _req, n=name: ports(n), "states": lambda req, n=name: states(n, req)},
                    sock_name=f"{name}.sock")
    devices = load_fabric(tmp_path)
    poll_fabric(devices, timeout_s=2)
    assert asked == [["/lldp/", "swtel:/rdma/"]] * 2
    lines = fabric_lines(tmp_path, devices)
    assert lines[-1].startswith("INCIDENT host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp11s1 (symbol "
                                "errors from "), lines
    assert lines[-1].endswith("on host-1's paths via leaf-3 swp61–64"), lines
    # without the neighbours (an agent that answers no `states`) the events stand alone
    for name in ("spine-1", "host-1"):
        make_server({"ports": lambda _req, n=name: ports(n)}, sock_name=f"old/{name}.sock")
    (tmp_path / "old" / "topology.yaml").write_text((tmp_path / "topology.yaml").read_text())
    old = load_fabric(tmp_path / "old")
    poll_fabric(old, timeout_s=2)
    assert [d.up for d in old] == [True, False, True]
    assert not any(line.startswith("INCIDENT") for line in fabric_lines(tmp_path / "old", old))


def test_top_refuses_a_directory_without_a_fabric(tmp_path):
    from agent.control.top import load_fabric

    with pytest.raises(ValueError, match="no fabric topology"):
        load_fabric(tmp_path)
    (tmp_path / "topology.yaml").write_text("devices: {a: 1}\n")
    with pytest.raises(ValueError, match="expected a list of devices"):
        load_fabric(tmp_path)


def test_top_fabric_keys_pick_open_and_go_back():
    from agent.control.top import fabric_key

    assert fabric_key("j", False, 0, 3) == ("", 1)
    assert fabric_key("\x1b[B", False, 2, 3) == ("", 2)  # the last stays the last
    assert fabric_key("\x1b[A", False, 2, 3) == ("", 1)
    assert fabric_key("k", False, 0, 3) == ("", 0)
    assert fabric_key("\r", False, 1, 3) == ("open", 1)
    assert fabric_key("j", True, 1, 3) == ("", 1)  # viewing a device, the list keys do nothing
    assert fabric_key("b", True, 1, 3) == ("back", 1) and fabric_key("\x1b", True, 1, 3) == ("back", 1)
    assert fabric_key("Q", False, 1, 3)[0] == "quit" and fabric_key("q", True, 1, 3)[0] == "quit"


def test_top_fabric_view_renders_the_list_with_the_selection(fabric_dir):
    import io

    from rich.console import Console

    from agent.control.top import FABRIC_HINT, _rich_fabric, load_fabric, poll_fabric

    devices = load_fabric(fabric_dir)
    poll_fabric(devices, timeout_s=2)
    buf = io.StringIO()
    Console(file=buf, width=100, height=24, color_system=None, force_terminal=False,
            legacy_windows=False).print(_rich_fabric(fabric_dir, devices, 1, 24, 100))
    text = buf.getvalue().splitlines()
    assert "3 devices, 2 up, 2 open events" in text[0]
    assert text[2].split()[:5] == ["spine-1", "spine", "up", "2", "1"]
    assert text[3].split()[:5] == ["leaf-3", "leaf", "down", "-", "-"]
    assert text[-1] == FABRIC_HINT
    # a long list scrolls to keep the selected device shown
    many = devices * 20
    buf = io.StringIO()
    Console(file=buf, width=100, height=10, color_system=None, force_terminal=False,
            legacy_windows=False).print(_rich_fabric(fabric_dir, many, 50, 10, 100))
    shown = buf.getvalue().splitlines()[2:-1]
    assert len(shown) == 7 and shown[-1].split()[0] == many[50].name
