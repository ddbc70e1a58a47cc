"""`swtel collect --prometheus`: one render at a time, and a scrape never waits for one but the
first (agent/tools/prometheus.py, _Renderer)."""

from __future__ import annotations

import threading

from agent.tools.prometheus import _Renderer

WAIT = 30  # a bound on waiting for the render thread, never reached when things work


def _settle(r: _Renderer) -> None:
    with r._fresh:
        assert r._fresh.wait_for(lambda: not r._rendering, WAIT)


def test_a_scrape_gets_the_last_body_while_one_render_runs():
    gate, entered, calls = threading.Event(), threading.Event(), []

    def source():
        calls.append(len(calls) + 1)
        entered.set()
        assert gate.wait(WAIT)
        return [("leaf01", "/interfaces/interface[name=swp1]/state/counters/in-octets", len(calls))]

    r = _Renderer(source, "paths")
    gate.set()
    first = r.body()  # nothing rendered yet: the first scrape waits for its render
    assert b'in_octets{name="swp1",target="leaf01"} 1\n' in first
    _settle(r)
    gate.clear()
    # a render is started and blocked in the source: the scrapes meanwhile get the last body at
    # once, and start no second render
    entered.clear()
    assert r.body() is first
    assert entered.wait(WAIT)
    assert r.body() is first and r.body() is first
    assert calls == [1, 2]
    gate.set()
    _settle(r)
    assert b'in_octets{name="swp1",target="leaf01"} 2\n' in r.body()


def test_a_source_that_raises_gives_a_comment_not_a_dead_exposition():
    def source():
        raise RuntimeError("boom")

    body = _Renderer(source).body()
    assert body.startswith(b"# swtel: the exposition failed to render: RuntimeError")
