"""A plugin's fault is contained (issue 24, item 2): plugins that crash or hang on purpose,
built here from C, run in their helper process (agent/asic/host.py, agent/asic/proxy.py).

The proxy alone: each fault becomes a PluginFault naming the plugin, the call and the
signal or the timeout, the helper is killed and reaped, abort() and close() are prompt,
and the helper dies with its parent. A real agent (``swtel run`` in a network namespace):
netdev keeps counting exact veth packets meanwhile, ``swtel status`` answers and names the
fault (unhealthy), the plugin is restarted with backoff, and SIGTERM ends the agent within
2 s whatever the plugin is doing. Both backends (the C loader, SWTEL_PUREPYTHON=1).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from array import array
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from agent.asic import HEADER, resolve
from agent.asic.proxy import CLOSE_TIMEOUT_S, READ_PENDING, Backoff, PluginFault, PluginProxy
from tests.helpers import FakeClock, wait_until

ROOT = Path(__file__).resolve().parents[2]

# One plugin, its misbehaviour chosen by the config string:
#   crash=open | crash=read (on the sixth read: five good ones first) | hang=open | hang=read
#   crash=layout (abort() in port_count) | exit=read (exit(3) in read) | slow_read_ms=N | ports=N
FAULTY_C = r"""
#include "swtel_asic.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct faulty { int ports, crash_read, hang_read, exit_read, crash_layout, slow_read_ms; uint64_t reads; };

static void crash(void) { raise(SIGSEGV); *(volatile int *)0 = 1; }
static void hang(void) { for (;;) pause(); }

static void *f_open(const char *config, char *err, size_t errlen)
{
    struct faulty f = {.ports = 2};
    if (strstr(config, "crash=open")) crash();
    if (strstr(config, "hang=open")) hang();
    const char *p = strstr(config, "ports=");
    if (p) f.ports = atoi(p + 6);
    f.crash_read = strstr(config, "crash=read") != NULL;
    f.hang_read = strstr(config, "hang=read") != NULL;
    f.exit_read = strstr(config, "exit=read") != NULL;
    f.crash_layout = strstr(config, "crash=layout") != NULL;
    const char *slow = strstr(config, "slow_read_ms=");
    if (slow) f.slow_read_ms = atoi(slow + 13);
    struct faulty *h = malloc(sizeof(*h));
    if (!h) { snprintf(err, errlen, "faulty: out of memory"); return NULL; }
    *h = f;
    return h;
}
static uint64_t f_generation(void *h) { (void)h; return 1; }
static int f_port_count(void *h)
{
    if (((struct faulty *)h)->crash_layout) abort();
    return ((struct faulty *)h)->ports;
}
static int f_port_info(void *h, int port, struct swtel_asic_port *out)
{
    if (port < 0 || port >= f_port_count(h)) return -1;
    snprintf(out->name, sizeof(out->name), "fp%d", port);
    out->speed_mbps = 100000;
    out->flags = SWTEL_ASIC_PORT_UP;
    return 0;
}
static int f_counter_count(void *h, int port) { return port >= 0 && port < f_port_count(h) ? 1 : -1; }
static int f_counter_info(void *h, int port, int counter, struct swtel_asic_counter *out)
{
    if (port < 0 || port >= f_port_count(h) || counter != 0) return -1;
    snprintf(out->name, sizeof(out->name), "HwIfInOctets");
    out->width = 64;
    return 0;
}
static int f_read(void *h, uint64_t gen, uint64_t *values, size_t n, int64_t *ts_ns, char *err, size_t errlen)
{
    struct faulty *f = h;
    (void)err; (void)errlen;
    if (f->hang_read) hang();
    if (f->slow_read_ms) usleep((useconds_t)f->slow_read_ms * 1000);
    if (f->exit_read) exit(3);
    if (f->crash_read && f->reads >= 5) crash();
    if (gen != 1 || n != (size_t)f->ports) return SWTEL_ASIC_ECHANGED;
    f->reads++;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    *ts_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    for (size_t i = 0; i < n; i++) values[i] = f->reads * 100 * (i + 1);
    return SWTEL_ASIC_OK;
}
static void f_close(void *h) { free(h); }

static const struct swtel_asic_ops ops = {
    .abi_version = SWTEL_ASIC_ABI_VERSION, .ops_size = sizeof(struct swtel_asic_ops), .name = "faulty",
    .open = f_open, .generation = f_generation, .port_count = f_port_count, .port_info = f_port_info,
    .counter_count = f_counter_count, .counter_info = f_counter_info, .read = f_read, .close = f_close,
};
const struct swtel_asic_ops *swtel_asic_plugin(void) { return &ops; }
"""


@pytest.fixture(scope="module")
def plugin_dir():
    d = Path(tempfile.mkdtemp(prefix="swtel-faulty-"))  # private: mode 0700
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def faulty(plugin_dir) -> str:
    src = plugin_dir / "faulty.c"
    src.write_text(textwrap.dedent(FAULTY_C))
    out = plugin_dir / "faulty.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", str(Path(HEADER).parent),
                    "-o", str(out), str(src)], check=True, capture_output=True, text=True)
    out.chmod(0o755)
    return str(out)


def _gone(pid: int | None, within: float = 30.0) -> bool:
    """The process no longer exists (reaped, or at least dead: a zombie) within ``within`` s."""
    if pid is None:
        return True
    try:
        wait_until(lambda: _dead(pid), within, f"process {pid} to end")
    except AssertionError:
        return False
    return True


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ---------------------------------------------------------------- the proxy alone

def test_crash_in_open_names_plugin_signal_and_call(faulty):
    proxy = PluginProxy()
    with pytest.raises(PluginFault) as err:
        proxy.open(faulty, "crash=open")
    assert str(err.value) == f"asic plugin {faulty} crashed with SIGSEGV in open"
    assert (err.value.call, err.value.reason) == ("open", "SIGSEGV")
    assert proxy.proc is None and not proxy.alive  # reaped


def test_crash_in_read_after_five_reads(faulty):
    proxy = PluginProxy()
    proxy.open(faulty, "ports=3 crash=read")
    gen, ports, counters = proxy.layout()
    assert gen == 1 and [p[0] for p in ports] == ["fp0", "fp1", "fp2"]
    assert counters == [[("HwIfInOctets", 64, 0, 0, ())]] * 3
    values = array("Q", bytes(24))
    for k in range(1, 6):
        status, ts = proxy.read(gen, values)
        assert status == 0 and ts > 1.6e18
        assert values.tolist() == [k * 100, k * 200, k * 300]  # straight from shared memory
    pid = proxy.pid
    with pytest.raises(PluginFault, match=re.escape(f"asic plugin {faulty} crashed with SIGSEGV in read")):
        proxy.read(gen, values)
    assert values.tolist() == [500, 1000, 1500]  # untouched by the failed read
    assert _gone(pid)
    with pytest.raises(ValueError, match="closed"):
        proxy.read(gen, values)


def test_crash_in_layout(faulty):
    proxy = PluginProxy()
    proxy.open(faulty, "crash=layout")
    with pytest.raises(PluginFault, match=re.escape(f"asic plugin {faulty} crashed with SIGABRT in layout")):
        proxy.layout()


def test_exit_in_read_is_reported(faulty):
    proxy = PluginProxy()
    proxy.open(faulty, "exit=read")
    gen, *_ = proxy.layout()
    with pytest.raises(PluginFault, match="its helper exited with status 3 in read"):
        proxy.read(gen, array("Q", bytes(16)))


def test_hang_in_open_times_out_and_is_killed(faulty):
    # The deadline is judged on the proxy's clock, stepped 50 ms per reading: it gives up at
    # its deadline however long the machine takes to run the polls between.
    clock = FakeClock(step=0.05)
    proxy = PluginProxy(open_timeout_s=0.8, clock=clock)
    t0 = clock.t
    with pytest.raises(PluginFault) as err:
        proxy.open(faulty, "hang=open")
    assert 0.8 <= clock.t - t0 <= 0.8 + 3 * clock.step, clock.t - t0
    assert str(err.value) == f"asic plugin {faulty}: open timed out after 0.8 s"
    assert err.value.reason == "timeout" and proxy.proc is None


def test_hang_in_read_times_out_and_is_killed(faulty):
    clock = FakeClock()  # still while the helper opens: a slow start is no timeout
    proxy = PluginProxy(read_timeout_s=0.5, clock=clock)
    proxy.open(faulty, "hang=read")
    gen, *_ = proxy.layout()
    pid = proxy.pid
    clock.step = 0.05
    t0 = clock.t
    with pytest.raises(PluginFault, match=re.escape(f"asic plugin {faulty}: read timed out after 0.5 s")):
        proxy.read(gen, array("Q", bytes(16)))
    assert 0.5 <= clock.t - t0 <= 0.5 + 3 * clock.step, clock.t - t0  # at its deadline
    assert _gone(pid)


def _raised_within(call: Callable[[], object], bound_s: float = 30.0) -> BaseException | None:
    """What ``call`` raised, run on a thread; an AssertionError if it has not returned within
    ``bound_s`` (a failure bound: the call has no other way out)."""
    box: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound_s)
    assert not thread.is_alive(), f"still blocked after {bound_s} s"
    return box[0] if box else None


def test_abort_from_another_thread_and_close_are_prompt(faulty):
    # The proxies' clocks stand still: their 30 s deadlines never pass, so a call that returns
    # was cut short by abort(), not timed out.
    proxy = PluginProxy(read_timeout_s=30.0, clock=FakeClock())
    proxy.open(faulty, "hang=read")
    gen, *_ = proxy.layout()
    pid = proxy.pid
    threading.Timer(0.3, proxy.abort).start()
    err = _raised_within(lambda: proxy.read(gen, array("Q", bytes(16))))
    assert isinstance(err, OSError) and "cut short" in str(err), err
    assert _gone(pid)
    # an open in flight on another thread (the tick thread) is cut short as promptly
    stuck = PluginProxy(open_timeout_s=30.0, clock=FakeClock())
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            stuck.open(faulty, "hang=open")
        except OSError as exc:
            errors.append(exc)

    thread = threading.Thread(target=opener)
    thread.start()
    wait_until(lambda: stuck._pending is not None, 30, "the open to be asked")  # in flight
    stuck.abort()
    thread.join(30.0)
    assert not thread.is_alive()
    assert len(errors) == 1 and "cut short" in str(errors[0])
    # close() of a helper stuck in read: killed when it has not answered within 0.5 s
    clock = FakeClock()
    hung = PluginProxy(read_timeout_s=30.0, clock=clock)
    hung.open(faulty, "hang=read")
    gen, *_ = hung.layout()
    pid = hung.pid
    clock.step = 0.01
    assert hung.read(gen, array("Q", bytes(16)), 0.05) == (READ_PENDING, 0)  # the tick thread goes on
    t0 = clock.t
    hung.close()
    assert CLOSE_TIMEOUT_S <= clock.t - t0 <= CLOSE_TIMEOUT_S + 3 * clock.step, clock.t - t0
    assert _gone(pid)


def test_a_slow_read_is_collected_at_a_later_pass(faulty):
    proxy = PluginProxy(read_timeout_s=5.0)
    proxy.open(faulty, "ports=2 slow_read_ms=150")
    try:
        gen, *_ = proxy.layout()
        values = array("Q", bytes(16))
        # pending: the caller was let go before the 150 ms read finished, and nothing was written
        assert proxy.read(gen, values, 0.02) == (READ_PENDING, 0)
        assert values.tolist() == [0, 0]
        # later passes collect the same read once it has finished
        status, ts = wait_until(lambda: (got := proxy.read(gen, values, 0.02))[0] != READ_PENDING and got,
                                30, "the slow read to finish")
        assert status == 0 and ts > 1.6e18 and values.tolist() == [100, 200]
        status, _ = proxy.read(gen, values)  # without wait_s: waits for the answer
        assert status == 0 and values.tolist() == [200, 400]
    finally:
        proxy.close()


def test_plugin_errors_pass_through_unchanged(faulty, tmp_path):
    proxy = PluginProxy()
    missing = str(tmp_path / "nope.so")
    with pytest.raises(OSError, match=re.escape(f"asic plugin {missing}: cannot load")) as err:
        proxy.open(missing, "")
    assert not isinstance(err.value, PluginFault)
    # the sim in its helper: the same layout and values as in process
    from agent import _backend

    sim = resolve("sim")
    start = time.time_ns()
    config = f"ports=4 start={start}"
    h = _backend.reader.asic_open(sim, config)
    proxy = PluginProxy()
    proxy.open(sim, config)
    try:
        assert proxy.layout() == _backend.reader.asic_layout(h)
        with pytest.raises(OSError, match="sim: unknown key"):
            PluginProxy().open(sim, "colour=red")
    finally:
        proxy.close()
        _backend.reader.asic_close(h)


def test_fifo_as_plugin_path_times_out(plugin_dir):
    fifo = str(plugin_dir / "proxy-fifo.so")
    os.mkfifo(fifo, 0o600)
    proxy = PluginProxy(open_timeout_s=0.5)
    with pytest.raises(PluginFault, match=re.escape(f"asic plugin {fifo}: open timed out after 0.5 s")):
        proxy.open(fifo, "")  # dlopen blocks in open(2) on the FIFO: only the helper is stuck


def test_helper_dies_with_its_parent(faulty, tmp_path):
    code = textwrap.dedent(f"""
        import sys, time
        from agent.asic.proxy import PluginProxy
        p = PluginProxy(read_timeout_s=60)
        p.open({faulty!r}, "ports=1")
        print(p.pid, flush=True)
        time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        helper = int(parent.stdout.readline())
        assert psutil.pid_exists(helper)
    finally:
        parent.kill()
        parent.wait()
    assert _gone(helper, 2.0)


def test_backoff_doubles_to_a_minute():
    clock = FakeClock()
    b = Backoff(clock=clock)
    assert [b.fault() for _ in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    clock.t += 60 + 59  # restarted after 60 s, then ran 59 s: not yet a full minute without a fault
    assert b.fault() == 60
    clock.t += 60 + 61  # ran more than a minute: back to short restarts
    assert b.fault() == 1


# ---------------------------------------------------------------- a real agent


CASES = {
    # name: (config, asic interval, what the fault says)
    "crash-open": ("crash=open", "100ms", "crashed with SIGSEGV in open"),
    "crash-read": ("crash=read", "100ms", "crashed with SIGSEGV in read"),
    "hang-open": ("hang=open", "100ms", "open timed out after 5 s"),
    # a 500 ms interval: reads time out after 5 s, so the helper is mostly stuck in read
    "hang-read": ("hang=read", "500ms", "read timed out after 5 s"),
    "fifo": ("", "100ms", None),
}


