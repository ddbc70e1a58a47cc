"""Coverage-guided fuzzing of the C netlink and ethtool parsers (agent/_ext/netdev.c's
parse_dump, ethtool.c's gstats_take and gstrings_list, links.c's link messages, reached
through netdev_parse, ethtool_parse, ethtool_strings_parse and link_parse; ethnl.c's generic
netlink replies through ethnl_family_parse, ethnl_fec_parse and ethnl_stats_parse, and
devlink.c's through devlink_parse and devlink_trap_parse, every input given to all five, seeded with
tests/fixtures/ethnl and tests/fixtures/devlink: the code the reader runs on what the
kernel returns), with the pure-Python fallback as a differential oracle: every input must give
the same result, outputs and errors in both backends (tests/fuzz_inputs.py).

    python fuzz/fuzz_parsers.py [--seconds 300] [--corpus DIR] [--plain]

With atheris and gcc (the default): builds a copy of the extension with AddressSanitizer
and UndefinedBehaviorSanitizer, its parser files instrumented with gcc's
-fsanitize-coverage=trace-pc,trace-cmp (fuzz/fuzz_cov.c turns those callbacks into
libFuzzer's inline 8-bit counters and compare hooks), then re-runs itself with libasan
preloaded and lets atheris' libFuzzer drive it. ``--plain`` fuzzes the ordinary build
(no sanitizers; coverage of the Python harness only). Without atheris: random and
mutated inputs through hypothesis, for the same time.

Exit 0: no crash, no hang (libFuzzer's -timeout), no disagreement. A last line
``fuzz: {...}`` gives runs, seconds and the parsers' edges covered.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from glob import glob
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import fuzz_inputs  # noqa: E402

# the parsers; the rest only gets the sanitizers
INSTRUMENTED = ("netdev.c", "ethtool.c", "links.c", "ethnl.c", "devlink.c")
BUILD_ENV = "SWTEL_FUZZ_BUILD"


def build(outdir: Path) -> Path:
    """The extension with ASan/UBSan, the parser files with coverage callbacks."""
    from agent import __version__  # the extension is built with it, as setup.py does

    name = "_swtel" + sysconfig.get_config_var("EXT_SUFFIX")
    inc = sysconfig.get_paths()["include"]
    common = ["-g", "-O1", "-fPIC", "-std=gnu11", "-fno-omit-frame-pointer", f"-I{inc}",
              f'-DSWTEL_EXT_VERSION="{__version__}"',
              "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    objs = []
    for src in sorted(glob(str(ROOT / "agent/_ext/*.c"))) + [str(HERE / "fuzz_cov.c")]:
        obj = outdir / (Path(src).stem + ".o")
        extra = ["-fsanitize-coverage=trace-pc,trace-cmp"] if Path(src).name in INSTRUMENTED else []
        subprocess.run(["gcc", *common, *extra, "-c", src, "-o", str(obj)], check=True)
        objs.append(str(obj))
    so = outdir / name
    subprocess.run(["gcc", "-shared", "-fsanitize=address,undefined", *objs, "-o", str(so)], check=True)
    return so


def load_build(path: str):
    loader = importlib.machinery.ExtensionFileLoader("_swtel", path)
    spec = importlib.util.spec_from_file_location("_swtel", path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class Stats:
    def __init__(self, path: str | None, cov: ctypes.CDLL | None):
        self.path, self.cov = path, cov
        self.runs = 0
        self.t0 = time.monotonic()
        self.next_write = 0.0

    def edges(self) -> int | None:
        return int(self.cov.swtel_cov_hit()) if self.cov is not None else None

    def tick(self) -> None:
        self.runs += 1
        now = time.monotonic()
        if now >= self.next_write:
            self.next_write = now + 1.0
            self.write()

    def summary(self) -> dict:
        return {"runs": self.runs, "seconds": round(time.monotonic() - self.t0, 1), "edges": self.edges()}

    def write(self) -> None:
        if self.path:
            Path(self.path).write_text(json.dumps(self.summary()))


ETHNL_PARSERS = ("ethnl_family_parse", "ethnl_fec_parse", "ethnl_stats_parse", "devlink_parse", "devlink_trap_parse")


def ethnl_run(impl, data: bytes) -> tuple:
    """The generic netlink parsers (ethtool netlink, devlink) on the whole input: each one's
    result or error."""
    out = []
    for name in ETHNL_PARSERS:
        try:
            out.append(("ok", getattr(impl, name)(data)))
        except OSError as exc:
            out.append(("OSError", exc.errno))
        except ValueError as exc:
            out.append(("ValueError", str(exc)))
    return tuple(out)


def all_seeds() -> list[bytes]:
    """fuzz_inputs' seeds and the ethnl and devlink fixtures (.hex: '#' lines are notes)."""
    ethnl = []
    for path in sorted((ROOT / "tests" / "fixtures" / "ethnl").glob("*.hex")) + sorted(
            (ROOT / "tests" / "fixtures" / "devlink").glob("*.hex")):
        lines = path.read_text().splitlines()
        ethnl.append(bytes.fromhex(" ".join(line for line in lines if not line.startswith("#"))))
    return fuzz_inputs.seeds() + ethnl


def one_input(c_impl, py_impl, stats: Stats):
    def test(data: bytes) -> None:
        got = (fuzz_inputs.run(c_impl, data), ethnl_run(c_impl, data))
        want = (fuzz_inputs.run(py_impl, data), ethnl_run(py_impl, data))
        if got != want:
            raise AssertionError(f"C and Python parsers disagree on {data!r}:\nC:  {got!r}\nPy: {want!r}")
        stats.tick()

    return test


def register_coverage(cov: ctypes.CDLL) -> None:
    """Hand the parsers' counters to atheris' libFuzzer, and its compare hooks to the shim."""
    import atheris

    core = sys.modules.get("atheris.core_with_libfuzzer")
    path = core.__file__ if core else glob(os.path.join(os.path.dirname(atheris.__file__),
                                                        "core_with_libfuzzer*.so"))[0]
    fz = ctypes.CDLL(path)  # the already loaded copy: the same libFuzzer
    n = cov.swtel_cov_size()
    counters = ctypes.addressof(ctypes.c_uint8.in_dll(cov, "swtel_cov_counters"))
    pcs = ctypes.addressof(ctypes.c_size_t.in_dll(cov, "swtel_cov_pcs"))
    fz.__sanitizer_cov_8bit_counters_init(ctypes.c_void_p(counters), ctypes.c_void_p(counters + n))
    fz.__sanitizer_cov_pcs_init(ctypes.c_void_p(pcs), ctypes.c_void_p(pcs + 2 * n * ctypes.sizeof(ctypes.c_size_t)))
    hooks = [ctypes.cast(getattr(fz, f"__sanitizer_cov_trace_{h}"), ctypes.c_void_p)
             for h in ("cmp1", "cmp2", "cmp4", "cmp8", "const_cmp1", "const_cmp2", "const_cmp4",
                       "const_cmp8", "switch")]
    cov.swtel_cov_hooks(*hooks)


def fuzz_atheris(args, c_impl, cov: ctypes.CDLL | None) -> int:
    import atheris

    from agent import _fallback

    corpus = Path(args.corpus or tempfile.mkdtemp(prefix="swtel-fuzz-"))
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(all_seeds()):
        (corpus / f"seed-{i}").write_bytes(seed)
    stats = Stats(args.stats, cov)
    argv = [sys.argv[0], f"-max_total_time={args.seconds}", "-timeout=5", "-rss_limit_mb=4096",
            "-max_len=4096", "-print_final_stats=1", f"-artifact_prefix={args.artifacts}/", str(corpus)]
    atheris.Setup(argv, one_input(c_impl, _fallback, stats))
    if cov is not None:
        register_coverage(cov)
    print(f"fuzz: corpus {corpus}, {args.seconds} s, instrumented={cov is not None}", file=sys.stderr)
    atheris.Fuzz()  # exits the process when the time is up
    return 0


def fuzz_hypothesis(args, c_impl) -> int:
    """No atheris: hypothesis' binary strategies (random, then mutations of the seeds)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from agent import _fallback

    stats = Stats(args.stats, None)
    check = one_input(c_impl, _fallback, stats)
    seeds = all_seeds()
    mutated = st.tuples(st.sampled_from(seeds), st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)),
                                                         max_size=8)).map(_mutate)

    @settings(max_examples=500, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(st.binary(max_size=4096), mutated))
    def batch(data: bytes) -> None:
        check(data)

    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        batch()
    stats.write()
    print(f"fuzz: {json.dumps(stats.summary())}")
    return 0


def _mutate(arg: tuple[bytes, list[tuple[int, int]]]) -> bytes:
    seed, edits = arg
    data = bytearray(seed)
    for pos, value in edits:
        data[pos % len(data)] = value
    return bytes(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--corpus", help="corpus directory (kept; default: a temporary one)")
    ap.add_argument("--artifacts", default=".", help="where libFuzzer writes a crashing input")
    ap.add_argument("--stats", help="write {runs, seconds, edges} here every second (JSON)")
    ap.add_argument("--plain", action="store_true", help="the ordinary build: no sanitizers, no C coverage")
    ap.add_argument("--engine", choices=("atheris", "hypothesis"), default=None)
    args = ap.parse_args()
    try:
        import atheris  # noqa: F401

        engine = args.engine or "atheris"
    except ImportError:
        engine = "hypothesis"
    if engine == "hypothesis":
        from agent import _swtel

        return fuzz_hypothesis(args, _swtel)

    built = os.environ.get(BUILD_ENV)
    if built is None and not args.plain and shutil.which("gcc"):
        libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                 text=True).stdout.strip()
        workdir = Path(tempfile.mkdtemp(prefix="swtel-fuzz-build-"))
        try:
            so = build(workdir)
            env = {**os.environ, BUILD_ENV: str(so), "LD_PRELOAD": libasan,
                   "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:allocator_may_return_null=1",
                   "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
            return subprocess.run([sys.executable, *sys.argv], env=env).returncode
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    if built:
        c_impl = load_build(built)
        cov = ctypes.CDLL(built)
    else:
        from agent import _swtel as c_impl

        cov = None
    return fuzz_atheris(args, c_impl, cov)


if __name__ == "__main__":
    sys.exit(main())
