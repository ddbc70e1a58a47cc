"""JSON encoding on the dial-in server: gnmic's default, and gnmi_cli's (which sends no encoding).

Counters are JSON numbers in ``json_val`` (JSON_IETF keeps RFC 7951's strings), strings are
JSON strings; paths carrying both ``elem`` and the deprecated ``element`` are read by ``elem``;
an encoding the server cannot produce is refused, never answered in another one. Both backends.
"""

from __future__ import annotations

import json

import grpc
import pytest
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from agent.gnmi.get import SUPPORTED_ENCODINGS, RequestError, check_encoding
from agent.store import Store
from tests.gnmi_helpers import PORT_LEAVES
from tests.unit.test_server import PORTS, Feed, _start, client, updates_by_leaf

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

COUNTERS = "/interfaces/interface[name=v0]/state/counters"


@pytest.fixture
def feed() -> Feed:
    return Feed(Store())


@pytest.fixture
def server(feed):
    srv = _start(feed, insecure=True)
    yield srv
    srv.stop(1)


def stub(srv) -> gnmi_pb2_grpc.gNMIStub:
    return gnmi_pb2_grpc.gNMIStub(grpc.insecure_channel(f"127.0.0.1:{srv.port}"))


def gnmi_cli_path(*names: str) -> gnmi_pb2.Path:
    """A path as gnmi_cli's -query sends it: structured elem and the deprecated string element."""
    return gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=n) for n in names], element=list(names))


def test_capabilities_list_json(server):
    with client(server) as gc:
        assert sorted(gc.capabilities()["supported_encodings"]) == ["json", "json_ietf", "proto"]


def test_pygnmi_get_json_numbers(server, feed):
    with client(server) as gc:
        got = gc.get(path=[COUNTERS], encoding="json")
        state = gc.get(path=["/interfaces/interface[name=v1]/state/oper-status"], encoding="json")
    (n,) = got["notification"]
    values = updates_by_leaf(n)
    assert values == {leaf: feed.value("v0", leaf) for leaf in PORT_LEAVES}
    assert all(type(v) is int for v in values.values())  # numbers, not RFC 7951 strings
    assert updates_by_leaf(state["notification"][0]) == {"oper-status": "UP"}


def test_json_on_the_wire_and_json_ietf_unchanged(server, feed):
    s = stub(server)
    leaf = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces"),
                               gnmi_pb2.PathElem(name="interface", key={"name": "v0"}),
                               gnmi_pb2.PathElem(name="state")])
    value = feed.value("v0", "in-octets")
    for encoding, field, counter in ((gnmi_pb2.JSON, "json_val", b"%d" % value),
                                     (gnmi_pb2.JSON_IETF, "json_ietf_val", b'"%d"' % value)):
        reply = s.Get(gnmi_pb2.GetRequest(path=[leaf], encoding=encoding))
        vals = {u.path.elem[-1].name: u.val for n in reply.notification for u in n.update}
        assert vals["in-octets"].WhichOneof("value") == field
        assert getattr(vals["in-octets"], field) == counter
        assert getattr(vals["oper-status"], field) == b'"UP"'
    proto = s.Get(gnmi_pb2.GetRequest(path=[leaf], encoding=gnmi_pb2.PROTO))
    vals = {u.path.elem[-1].name: u.val for n in proto.notification for u in n.update}
    assert vals["in-octets"].uint_val == value and vals["oper-status"].string_val == "UP"


def test_no_encoding_field_is_json_and_elem_with_element(server, feed):
    """gnmi_cli's Get: no encoding on the wire (0 = JSON), paths with elem and element."""
    req = gnmi_pb2.GetRequest(path=[gnmi_cli_path("interfaces", "interface", "state", "counters")])
    reply = stub(server).Get(req)
    got = {(n.prefix.elem[1].key["name"], u.path.elem[-1].name): json.loads(u.val.json_val)
           for n in reply.notification for u in n.update}
    assert got == {(p, leaf): feed.value(p, leaf) for p in PORTS for leaf in PORT_LEAVES}


def test_pygnmi_subscribe_stream_and_once_json(server, feed):
    with client(server) as gc:
        sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "json", "subscription": [
            {"path": "/interfaces/interface[name=v0]/state", "mode": "on_change"}]})
        first = sub.get_update(timeout=5)
        while "sync_response" not in first:
            first = sub.get_update(timeout=5)
        feed.bump({("v0", "in-octets"): 7})
        got = updates_by_leaf(sub.get_update(timeout=2)["update"])
        assert got == {"in-octets": feed.value("v0", "in-octets")} and type(got["in-octets"]) is int
        feed.set_oper("v0", "DOWN")
        assert updates_by_leaf(sub.get_update(timeout=2)["update"]) == {"oper-status": "DOWN"}
        sub.close()
        once = gc.subscribe_once(subscribe={"encoding": "json", "subscription": [
            {"path": "/interfaces/interface[name=*]/state/counters/out-octets"}]})
        messages = list(once)
        once.close()
    assert messages[-1] == {"sync_response": True}
    got = {m["update"]["prefix"]: updates_by_leaf(m["update"]) for m in messages[:-1]}
    assert got == {f"interfaces/interface[name={p}]/state/counters": {"out-octets": feed.value(p, "out-octets")}
                   for p in PORTS}


def test_subscribe_without_encoding_field(server, feed):
    """gnmi_cli's -query: no encoding (JSON), STREAM (0, absent), elem + element."""
    req = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
        prefix=gnmi_pb2.Path(), subscription=[gnmi_pb2.Subscription(
            path=gnmi_cli_path("interfaces", "interface", "state", "counters", "in-octets"))]))
    call = stub(server).Subscribe(iter([req]), timeout=5)
    vals = {}
    for resp in call:
        if resp.sync_response:
            break
        for u in resp.update.update:
            assert u.val.WhichOneof("value") == "json_val"
            vals[resp.update.prefix.elem[1].key["name"]] = json.loads(u.val.json_val)
    call.cancel()
    assert vals == {p: feed.value(p, "in-octets") for p in PORTS}


UNSUPPORTED = [(gnmi_pb2.ASCII, grpc.StatusCode.UNIMPLEMENTED, "ASCII"),
               (gnmi_pb2.BYTES, grpc.StatusCode.UNIMPLEMENTED, "BYTES"),
               (42, grpc.StatusCode.INVALID_ARGUMENT, "unknown encoding 42")]


@pytest.mark.parametrize(("encoding", "code", "text"), UNSUPPORTED, ids=["ascii", "bytes", "unknown"])
def test_unsupported_encoding_refused(server, encoding, code, text):
    s = stub(server)
    with pytest.raises(grpc.RpcError) as exc:
        s.Get(gnmi_pb2.GetRequest(path=[gnmi_cli_path("interfaces")], encoding=encoding))
    assert exc.value.code() == code and text in exc.value.details()
    assert "JSON, PROTO, JSON_IETF" in exc.value.details()
    req = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.ONCE, encoding=encoding,
        subscription=[gnmi_pb2.Subscription(path=gnmi_cli_path("interfaces"))]))
    with pytest.raises(grpc.RpcError) as exc:
        list(s.Subscribe(iter([req]), timeout=5))
    assert exc.value.code() == code and text in exc.value.details()


def test_check_encoding():
    for enc in SUPPORTED_ENCODINGS:
        assert check_encoding(enc) == enc
    for enc, code, _ in UNSUPPORTED:
        with pytest.raises(RequestError) as exc:
            check_encoding(enc)
        assert exc.value.code == code
