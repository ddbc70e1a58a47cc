"""A repeated whole read answers from its last render while that is fresh (agent/gnmi/get.py
``Replies``): the same reply while nothing was written; after a write, a costly render's reply
for REUSE_FACTOR times its CPU time (at most REUSE_MAX_S); a cheap one is rendered anew.
Clocks are injected: nothing here depends on how fast the machine is."""

from __future__ import annotations

import gc
import threading

from pygnmi.spec.v080 import gnmi_pb2

from agent.gnmi import get as gnmi_get
from agent.gnmi import paths
from agent.gnmi.get import REUSE_FACTOR, REUSE_MAX_S, REUSE_MIN_COST_S, Replies
from agent.store import Store
from tests.helpers import wait_until
from tests.unit.test_server import TARGET, Feed, oper


class Clocks:
    """The wall clock and the rendering thread's CPU clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 0.0

    def wall(self) -> float:
        return self.now

    def thread(self) -> float:
        return self.cpu


class Renders:
    """A render that costs ``cost`` s of (fake) CPU and says which call it was."""

    def __init__(self, clocks: Clocks, cost: float) -> None:
        self.clocks, self.cost, self.count = clocks, cost, 0

    def __call__(self) -> list[bytes]:
        self.count += 1
        self.clocks.cpu += self.cost
        return [b"render %d" % self.count]


def _replies(cost: float) -> tuple[Replies, Clocks, Renders]:
    clocks = Clocks()
    return Replies(clock=clocks.wall, cpu=clocks.thread), clocks, Renders(clocks, cost)


def test_nothing_written_the_same_reply_is_answered_again():
    replies, clocks, render = _replies(cost=0.001)
    store = Store()
    assert replies.read(store, ("k",), render) == [b"render 1"]
    clocks.now += 3600  # however long after: the store is as it was rendered
    assert replies.read(store, ("k",), render) == [b"render 1"]
    assert render.count == 1


def test_a_cheap_read_after_a_write_is_rendered_anew():
    replies, clocks, render = _replies(cost=REUSE_MIN_COST_S / 2)
    store = Store()
    replies.read(store, ("k",), render)
    store.set_states([oper("v0", "DOWN", 1)])
    assert replies.read(store, ("k",), render) == [b"render 2"]


def test_a_costly_read_is_reused_for_ten_times_its_cost_then_rendered_anew():
    cost = 0.08  # a spine's whole tree on a fast machine
    replies, clocks, render = _replies(cost=cost)
    store = Store()
    replies.read(store, ("k",), render)
    store.set_states([oper("v0", "DOWN", 1)])  # written since: only the window keeps it
    clocks.now += REUSE_FACTOR * cost * 0.99
    assert replies.read(store, ("k",), render) == [b"render 1"]
    clocks.now += REUSE_FACTOR * cost * 0.02
    assert replies.read(store, ("k",), render) == [b"render 2"]


def test_the_window_is_at_most_reuse_max_s():
    replies, clocks, render = _replies(cost=REUSE_MAX_S)  # a render of seconds
    store = Store()
    replies.read(store, ("k",), render)
    store.set_states([oper("v0", "DOWN", 1)])
    clocks.now += REUSE_MAX_S * 0.99
    assert replies.read(store, ("k",), render) == [b"render 1"]
    clocks.now += REUSE_MAX_S * 0.02
    assert replies.read(store, ("k",), render) == [b"render 2"]


def test_each_key_and_each_store_has_its_own_reply():
    replies, clocks, render = _replies(cost=0.001)
    one, two = Store(), Store()
    assert replies.read(one, ("a",), render) == [b"render 1"]
    assert replies.read(one, ("b",), render) == [b"render 2"]
    assert replies.read(two, ("a",), render) == [b"render 3"]
    assert replies.read(one, ("a",), render) == [b"render 1"]


def test_replies_kept_are_bounded_and_go_with_their_store():
    replies, clocks, render = _replies(cost=0.001)
    store = Store()
    for k in range(100):
        replies.read(store, (k,), render)
    assert len(replies._by_store[store]) == gnmi_get._REPLIES_KEPT
    assert replies.read(store, (99,), render) == [b"render 100"]  # the newest kept
    assert replies.read(store, (0,), render) == [b"render 101"]  # the oldest went
    del store
    gc.collect()
    assert len(replies._by_store) == 0


def test_a_read_waiting_for_its_turn_takes_the_reply_rendered_meanwhile():
    """Ten clients asking at once while one renders: one render, ten answers."""
    replies, clocks, _ = _replies(cost=0.0)
    store = Store()
    rendering, finish = threading.Event(), threading.Event()
    count = 0

    def slow() -> list[bytes]:
        nonlocal count
        count += 1
        rendering.set()
        assert finish.wait(30)
        return [b"the one render"]

    got: list[list[bytes]] = []
    first = threading.Thread(target=lambda: got.append(replies.read(store, ("k",), slow, 30)))
    first.start()
    assert rendering.wait(30)
    waiting = [threading.Thread(target=lambda: got.append(replies.read(store, ("k",), slow, 30)))
               for _ in range(9)]
    for t in waiting:
        t.start()
    wait_until(lambda: len(gnmi_get._turns._waiting) == 9, timeout=30, what="nine reads waiting their turn")
    finish.set()
    for t in [first, *waiting]:
        t.join(30)
    assert got == [[b"the one render"]] * 10
    assert count == 1


def test_a_get_answers_what_was_written_since_the_last_get():
    """Through get_bytes on a real Store: a cheap Get after a write sees the write."""
    feed = Feed(Store())
    request = gnmi_pb2.GetRequest(path=[paths.to_proto("/interfaces/interface[name=v0]/state/oper-status")],
                                  encoding=gnmi_pb2.JSON_IETF)

    def oper_status() -> str:
        reply = gnmi_get.get(feed.store, request, TARGET)
        return [u.val.json_ietf_val for n in reply.notification for u in n.update][0].decode()

    assert oper_status() == '"UP"'
    feed.set_oper("v0", "DOWN")
    assert oper_status() == '"DOWN"'
