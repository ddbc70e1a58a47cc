"""Shared test setup: report which backend runs, keep root-only tests out of unit/, and gate
them when not root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import agent.plugins  # noqa: F401  (fills the config registries: every test may read a config)

HERE = Path(__file__).resolve().parent

try:
    from hypothesis import settings
except ImportError:  # the suites that use it need it anyway
    pass
else:
    # No per-example deadline: it times each example, and a loaded machine fails it although
    # the code is right (docs/DEVELOPING.md, "Tests that load cannot break").
    settings.register_profile("swtel", deadline=None)
    settings.load_profile("swtel")


def pytest_report_header(config):
    from agent import _backend

    return f"swtel reader backend: {_backend.NAME} (fallback reason: {_backend.FALLBACK_REASON})"


def pytest_collection_modifyitems(config, items):
    # tests/ is split by what a test needs: unit/ runs as any user, netns/ needs root
    # (namespaces, veth, files of other users), interop/ runs third-party peers
    misplaced = [item.nodeid for item in items
                 if "root" in item.keywords and "unit" in Path(item.path).relative_to(HERE).parts[:1]]
    if misplaced:
        raise pytest.UsageError("tests that need root belong in tests/netns/, not tests/unit/: "
                                + ", ".join(misplaced))
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: network namespaces and veth pairs")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


def _threads_in_another_netns() -> dict[str, str]:
    """This process's threads whose network namespace is not the main thread's: tid -> name."""
    task = Path("/proc/self/task")
    try:
        home = os.readlink(task / str(os.getpid()) / "ns/net")
    except OSError:
        return {}
    out = {}
    for tid in os.listdir(task):
        try:
            if os.readlink(task / tid / "ns/net") != home:
                out[tid] = (task / tid / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
    return out


@pytest.fixture(autouse=True)
def _no_thread_left_in_a_namespace():
    """A test that leaves a thread of this process inside another network namespace fails at
    teardown, named. gRPC started on such a thread (or with such a thread forking) runs its
    event engine there, and every later connect of the process to 127.0.0.1 is refused: the
    blocks of dial-out and collector failures of issue 34. tests/namespaces.py's Forward is
    the way to reach this process's servers from a namespace."""
    yield
    from tests.helpers import wait_until

    try:  # a thread the test stopped may take a moment to end
        wait_until(lambda: not _threads_in_another_netns(), 10, "threads to leave other namespaces", interval=0.05)
    except AssertionError:
        pytest.fail(f"threads of the test process left in another network namespace: {_threads_in_another_netns()}")


_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A test that failed half-way can leave a gRPC server's worker in a handler that never
    returns (a stream from an exporter the test did not get to stop). Python joins such
    workers at exit (concurrent.futures), so a failed run hung after printing its summary and
    CI waited for its timeout. If the exit has not happened 60 s from here, name the threads
    left and leave with pytest's status (a daemon timer: a normal exit ends it first)."""
    import sys
    import threading

    def leave() -> None:
        names = sorted({t.name for t in threading.enumerate() if t is not threading.current_thread()})
        print(f"\nswtel tests: the run did not exit 60 s after its summary; threads left running: "
              f"{', '.join(names[:12])}: a test did not stop what it started", file=sys.stderr, flush=True)
        os._exit(_EXIT_STATUS[-1] if _EXIT_STATUS else 1)

    timer = threading.Timer(60.0, leave)
    timer.daemon = True
    timer.start()
