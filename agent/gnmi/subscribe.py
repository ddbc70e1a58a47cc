"""One gNMI Subscribe RPC: request validation, the per-subscriber queue and the response stream.

The engine's tick thread only *offers* changes (:meth:`Subscriber.offer_counters`,
``offer_states``, ``offer_delete``): each is filtered by the subscription's
cached per-table match and appended to a bounded queue. The RPC's own thread
renders and sends. A slow client loses the oldest queued changes; each loss is
counted and triggers a resync (current values of the on-change paths), so the
client's view heals without unbounded memory.

Modes: STREAM (ON_CHANGE; TARGET_DEFINED = ON_CHANGE for counters; SAMPLE with
``sample_interval``, ``suppress_redundant``, ``heartbeat_interval``;
``updates_only``), ONCE (snapshot, sync, close) and POLL (snapshot and sync on
every Poll; nothing before the first Poll).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2

from agent.counters import Container, StateUpdate
from agent.gnmi import encode
from agent.gnmi.get import (
    MAX_PATHS,
    TURN_WAIT_S,
    Counters,
    PathSet,
    Renderer,
    RequestError,
    check_encoding,
    read,
    refuse_denied,
    render_turn,
    replies,
    reply_key,
    request_pattern,
)
from agent.handoff import TICK_PASSES

STREAM, ONCE, POLL = (gnmi_pb2.SubscriptionList.STREAM, gnmi_pb2.SubscriptionList.ONCE,
                      gnmi_pb2.SubscriptionList.POLL)
_SYNC = encode.encode_sync()
_MISSING = object()


def _fmt_ns(ns: int) -> str:
    return f"{ns / 1e6:g}ms" if ns < 1_000_000_000 else f"{ns / 1e9:g}s"


@dataclass
class Entry:
    """One Subscription of the list, as the stream loop schedules it."""

    pathset: Any  # PathSet or one member of the list's PathSet
    sample_s: float = 0.0  # 0: on change
    suppress: bool = False
    heartbeat_s: float = 0.0
    next_sample: float = 0.0
    next_heartbeat: float = 0.0
    last_counters: dict[str, Counters] = field(default_factory=dict)  # suppress_redundant
    last_states: dict[tuple[Container, str], Any] = field(default_factory=dict)


def _advance(due: float, period: float, now: float) -> float:
    """Next deadline; a late one is skipped, never caught up in a burst."""
    due += period
    return due if due > now else now + period


class Subscriber:
    def __init__(
        self,
        request: gnmi_pb2.SubscriptionList,
        target: str,
        min_interval_s: float,
        queue_len: int,
        peer: str = "",
        per_tick: bool = False,
        access: Any = None,
    ):
        self.peer = peer
        self.mode = request.mode
        #: STREAM per tick: each engine pass's changes (open_pass .. close_pass) in one
        #: Notification per origin, snapshots packed the same way; ONCE, POLL and Get keep
        #: one Notification per container
        self.per_tick = per_tick and self.mode == STREAM
        self._pending: list[tuple] | None = None  # the open pass's offers (tick thread only)
        self.updates_only = request.updates_only
        self.renderer = Renderer(target, check_encoding(request.encoding))
        if self.mode not in (STREAM, ONCE, POLL):
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"unknown subscription mode {self.mode}")
        if not request.subscription:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "the subscription list is empty")
        if len(request.subscription) > MAX_PATHS:
            raise RequestError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{len(request.subscription)} subscriptions in one SubscriptionList (limit {MAX_PATHS})",
            )
        min_ns = round(min_interval_s * 1e9)
        self.entries: list[Entry] = []
        patterns, on_change = [], []
        for sub in request.subscription:
            pattern = request_pattern(request.prefix, sub.path, target)
            refuse_denied(pattern, access)
            patterns.append(pattern)
            entry = Entry(None, suppress=sub.suppress_redundant)
            if self.mode == STREAM:
                if sub.mode == gnmi_pb2.SAMPLE:
                    interval = sub.sample_interval or min_ns
                    if interval < min_ns:
                        raise RequestError(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            f"sample_interval {_fmt_ns(interval)} is below the agent's smallest "
                            f"source interval {_fmt_ns(min_ns)}",
                        )
                    entry.sample_s = interval / 1e9
                elif sub.mode in (gnmi_pb2.ON_CHANGE, gnmi_pb2.TARGET_DEFINED):
                    on_change.append(pattern)
                else:
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"unknown mode {sub.mode}")
                if sub.heartbeat_interval:
                    if sub.heartbeat_interval < min_ns:
                        raise RequestError(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            f"heartbeat_interval {_fmt_ns(sub.heartbeat_interval)} is below the "
                            f"agent's smallest source interval {_fmt_ns(min_ns)}",
                        )
                    entry.heartbeat_s = sub.heartbeat_interval / 1e9
            self.entries.append(entry)
        self.all_paths = PathSet(patterns, access)
        self.patterns, self.access = patterns, access
        for k, entry in enumerate(self.entries):  # each reads through the list's one pass per table
            entry.pathset = self.all_paths.member(k)
        #: Only on-change subscriptions take queued changes; SAMPLE reads the Store on its timer.
        self.on_change = PathSet(on_change, access) if on_change else None

        self._cond = threading.Condition()
        self._queue: deque[tuple] = deque()
        self._queue_len = queue_len
        self._resync = False
        self.error: RequestError | None = None  # why the stream must end (a bad later request)
        self.closed = False
        self.sent = 0
        self.dropped = 0

    def warm(self, store: Any) -> None:
        """Match the on-change paths against the current tables and states here, on the RPC
        thread, so the tick thread only pays for tables rebuilt later and leaves never seen:
        a spine's ~6,600 state leaves, walked cold by each of 40 new subscribers at the
        tick's offers, cost the tick loop missed ticks (bench/bench_server_load.py)."""
        if self.on_change is not None:
            for batch in store.snapshot_batches():
                self.on_change.table(batch.table)
            for k, u in enumerate(store.states()):
                if not k & 255:
                    TICK_PASSES.step_aside()
                self.on_change.matches_leaf(u.container, u.leaf)

    # ------------------------------------------------------------ tick thread

    def changed_indices(self, table, changed: list[int],
                        changed_mask: Callable[[], bytearray] | None = None) -> list[int] | None:
        """The changes this subscription takes; None if the table is new to it (ports changed):
        then the tick thread does not match it, :meth:`offer_unmatched` hands the changes on.
        ``changed_mask``: the changes by index, shared by the subscribers (PathSet.filter_changes)."""
        if self.on_change is None:
            return []
        if self.on_change.matched(table) is None:
            return None
        return self.on_change.filter_changes(table, changed, changed_mask)

    def open_pass(self) -> None:
        """The engine starts a pass: per tick, its offers are queued together at close_pass."""
        if self.per_tick:
            self._pending = []

    def close_pass(self) -> None:
        items, self._pending = self._pending, None
        if items:
            self._put(("p", items))

    def _offer(self, item: tuple) -> None:
        if self._pending is not None:
            self._pending.append(item)
        else:
            self._put(item)

    def offer_counters(self, counters: Counters) -> None:
        self._offer(("c", counters))

    def offer_unmatched(self, counters: Counters) -> None:
        """Changes of a table not yet matched: the RPC thread matches and filters them."""
        self._offer(("u", counters))

    def offer_states(self, updates: list[StateUpdate]) -> None:
        """The updates this subscription takes, by the leaves already matched; a leaf not yet
        seen (a new port's, at start or on a ports change: thousands at once, for each
        subscriber) is matched on the RPC thread (``su``), never walked here."""
        if self.on_change is None:
            return
        known = self.on_change.known_leaf
        kept: list[StateUpdate] = []  # in their order: two updates of one leaf never swap
        unseen = False
        for u in updates:
            hit = known(u.container, u.leaf)
            if hit is None:
                unseen = True
                kept.append(u)
            elif hit:
                kept.append(u)
        if kept:
            self._offer(("su" if unseen else "s", kept))

    def _unseen_states(self, updates: list[StateUpdate]) -> list[StateUpdate]:
        """(RPC thread.) The updates of an ``su`` offer this subscription takes (those already
        matched are looked up again, from the cache)."""
        assert self.on_change is not None
        return [u for u in updates if self.on_change.matches_leaf(u.container, u.leaf)]

    def offer_delete(self, ts_ns: int, containers: list[Container]) -> None:
        if self.on_change is None:
            return
        mine = [c for c in containers if self.on_change.touches(c)]
        if mine:
            self._offer(("d", ts_ns, mine))

    def _put(self, item: tuple) -> None:
        with self._cond:
            if self.closed:
                return
            if len(self._queue) >= self._queue_len:
                self._queue.popleft()
                self.dropped += 1
                self._resync = True
            self._queue.append(item)
            self._cond.notify()

    # ------------------------------------------------------------ RPC thread

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._queue.clear()
            self._cond.notify_all()

    def refuse(self, error: RequestError) -> None:
        """End the stream with ``error`` (raised from :meth:`responses`)."""
        with self._cond:
            if self.error is None:
                self.error = error
        self.close()

    def watch(self, requests: Iterator[gnmi_pb2.SubscribeRequest]) -> None:
        """STREAM and ONCE take one SubscribeRequest: read what else the client sends (on a
        thread of its own) and end the stream with INVALID_ARGUMENT at a second SubscriptionList
        or a Poll (gNMI: only a POLL subscription's later requests are meaningful, and those
        are Polls)."""

        def run() -> None:
            try:
                for req in requests:
                    if self.closed:
                        return
                    if req.HasField("subscribe"):
                        self.refuse(RequestError(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            "a second SubscriptionList on one Subscribe stream: only the first "
                            "SubscribeRequest may carry one (open another stream)"))
                        return
                    if req.HasField("poll"):
                        self.refuse(RequestError(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            f"a Poll on a {gnmi_pb2.SubscriptionList.Mode.Name(self.mode)} "
                            "subscription: only POLL subscriptions take Polls"))
                        return
            except Exception:  # noqa: S110 - the RPC ended (cancelled, closed): nothing to watch
                pass

        threading.Thread(target=run, name="gnmi-sub-watch", daemon=True).start()

    def _take(self, deadline: float | None) -> tuple[list[tuple], bool]:
        """Wait until something is queued, a resync is due, the deadline passes or we close."""
        with self._cond:
            while not (self._queue or self._resync or self.closed):
                timeout = 1.0 if deadline is None else deadline - time.monotonic()
                if timeout <= 0:
                    break
                self._cond.wait(min(timeout, 1.0))
            items = list(self._queue)
            self._queue.clear()
            resync, self._resync = self._resync, False
            return items, resync

    def responses(self, store: Any, requests: Iterator[gnmi_pb2.SubscribeRequest]) -> Iterator[bytes]:
        """Serialized SubscribeResponses for the whole life of the RPC."""
        # sync_response promises the full state: not before every source's first read is in.
        if self.mode != POLL and not store.wait_primed(lambda: self.closed):
            return
        if self.mode == ONCE:
            chunks = self._whole(store, None)
            yield from self._counted(chunks)
            yield from self._counted([_SYNC])
        elif self.mode == POLL:
            yield from self._poll(store, requests)
        else:
            self.watch(requests)
            yield from self._stream(store)
            if self.error is not None:
                raise self.error

    def _counted(self, chunks: list[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.sent += 1
            yield chunk

    def _poll(self, store: Any, requests: Iterator[gnmi_pb2.SubscribeRequest]) -> Iterator[bytes]:
        for req in requests:
            if self.closed:
                return
            if req.HasField("poll"):
                if not store.wait_primed(lambda: self.closed):
                    return
                chunks = self._whole(store, TURN_WAIT_S)  # a Poll is a Get: refused when no turn comes
                yield from self._counted(chunks)
                yield from self._counted([_SYNC])
            elif req.HasField("subscribe"):
                raise RequestError(
                    grpc.StatusCode.INVALID_ARGUMENT, "a POLL subscription takes only Poll requests"
                )

    def _whole(self, store: Any, wait_s: float | None) -> list[bytes]:
        """Everything the list matches, one Notification per container (ONCE, a Poll): a Get's
        rendering, so a fresh answer to the same list is reused as a Get's is (get.Replies)."""
        return replies.read(store, reply_key("whole", self.renderer, self.patterns, self.access),
                            lambda: self.renderer.snapshot(*read(store, self.all_paths)),
                            wait_s, lambda: self.closed)

    def _snapshot(self, counters: list[Counters], states: list[StateUpdate]) -> list[bytes]:
        """Current values: packed per tick, or one Notification per container."""
        return (self.renderer.packed if self.per_tick else self.renderer.snapshot)(counters, states)

    def _read_snapshot(self, store: Any, pathset: Any) -> list[bytes]:
        """:meth:`_snapshot` of what ``pathset`` matches now, read and rendered in its turn."""
        with render_turn(closed=lambda: self.closed):
            return self._snapshot(*read(store, pathset))

    def _pass(self, items: list[tuple]) -> list[bytes]:
        """One pass's offers, per tick: one Notification per origin, a delete in its turn."""
        r = self.renderer
        packer = r.packer()
        out: list[bytes] = []
        for item in items:
            if item[0] == "c":
                r.pack(packer, [item[1]], [])
            elif item[0] == "u":
                c = item[1]
                assert self.on_change is not None
                indices = self.on_change.filter_changes(c.table, c.indices)
                if indices:
                    r.pack(packer, [Counters(c.ts_ns, c.table, indices, c.values)], [])
            elif item[0] == "s":
                r.pack(packer, [], item[1])
            elif item[0] == "su":
                r.pack(packer, [], self._unseen_states(item[1]))
            else:  # what came before the delete goes out before it
                out += packer.messages()
                out += r.deletes(item[1], item[2])
        return out + packer.messages()

    def _stream(self, store: Any) -> Iterator[bytes]:
        r = self.renderer
        if not self.updates_only:
            yield from self._counted(self._read_snapshot(store, self.all_paths))
        for e in self.entries:  # suppress_redundant compares with the values as of subscribing
            if e.sample_s and e.suppress:
                self._sample(e, store, force=True)
        yield from self._counted([_SYNC])
        now = time.monotonic()
        for e in self.entries:
            e.next_sample = now + e.sample_s
            e.next_heartbeat = now + e.heartbeat_s
        while not self.closed:
            items, resync = self._take(self._next_due())
            if self.closed:
                return
            for item in items:
                if self.per_tick:  # a pass, or an offer made outside one (on its own)
                    yield from self._counted(self._pass(item[1] if item[0] == "p" else [item]))
                elif item[0] == "c":
                    yield from self._counted(r.counters(item[1]))
                elif item[0] == "u":  # a table the tick thread left to us: match it here
                    c = item[1]
                    assert self.on_change is not None
                    indices = self.on_change.filter_changes(c.table, c.indices)
                    if indices:
                        yield from self._counted(r.counters(Counters(c.ts_ns, c.table, indices, c.values)))
                elif item[0] == "s":
                    yield from self._counted(r.states(item[1]))
                elif item[0] == "su":
                    yield from self._counted(r.states(self._unseen_states(item[1])))
                else:
                    yield from self._counted(r.deletes(item[1], item[2]))
            if resync and self.on_change is not None:
                yield from self._counted(self._read_snapshot(store, self.on_change))
            yield from self._counted(self._timers(store))

    def _next_due(self) -> float | None:
        dues = [e.next_sample for e in self.entries if e.sample_s]
        dues += [e.next_heartbeat for e in self.entries if e.heartbeat_s]
        return min(dues) if dues else None

    def _timers(self, store: Any) -> list[bytes]:
        now = time.monotonic()
        out: list[bytes] = []
        due: list[int] = []  # entries whose whole current values go out now: read together
        for k, e in enumerate(self.entries):
            heartbeat = bool(e.heartbeat_s) and now >= e.next_heartbeat
            if heartbeat:
                e.next_heartbeat = _advance(e.next_heartbeat, e.heartbeat_s, now)
            if e.sample_s and now >= e.next_sample:
                e.next_sample = _advance(e.next_sample, e.sample_s, now)
                if e.suppress:
                    out += self._sample(e, store, force=heartbeat)
                else:
                    due.append(k)
            elif heartbeat and not e.sample_s:  # ON_CHANGE heartbeat: everything, changed or not
                due.append(k)
        if due:  # one read and one rendering for all of them, however many paths the list has
            out += self._read_snapshot(store, self.all_paths.member(*due))
        return out

    def _sample(self, e: Entry, store: Any, force: bool) -> list[bytes]:
        with render_turn(closed=lambda: self.closed):
            counters, states = read(store, e.pathset)
            if e.suppress:
                counters, states = self._suppress(e, counters, states, force)
            return self._snapshot(counters, states)

    @staticmethod
    def _suppress(
        e: Entry, counters: list[Counters], states: list[StateUpdate], force: bool
    ) -> tuple[list[Counters], list[StateUpdate]]:
        """suppress_redundant: keep only values that changed since the last sample."""
        out = []
        for c in counters:
            prev = e.last_counters.get(c.table.source)
            e.last_counters[c.table.source] = c  # c.values is the Store's copy: safe to keep
            if force or prev is None or prev.table is not c.table:
                out.append(c)
                continue
            old, new = prev.values, c.values
            changed = [i for i in c.indices if new[i] != old[i]]
            if changed:
                out.append(Counters(c.ts_ns, c.table, changed, new))
        fresh = []
        for u in states:
            key = (u.container, u.leaf)
            if force or e.last_states.get(key, _MISSING) != u.value:
                fresh.append(u)
            e.last_states[key] = u.value
        return out, fresh
