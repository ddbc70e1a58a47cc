"""One benchmark, before and after a change, side by side in one run.

Runs the same benchmark script with the same arguments in another checkout (BEFORE: its
extension built in place) and in this one, alternately (before, after, before, after, ...
``--rounds`` times), and prints the lines that match ``--match`` from each run under its
label. Alternating in one session is what makes the two comparable on a shared machine:
neither side gets the quiet minutes alone. Figures only, nothing asserted.

    git worktree add /tmp/before e9b83a0 && (cd /tmp/before && python setup.py -q build_ext --inplace)
    python bench/before_after.py /tmp/before --match 'one runner alone' -- \\
        bench/bench_insights.py --passes 0 --sim-ports 1024
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.lifetime import exit_on_sigterm, with_parent_death  # noqa: E402 - after the path setup


def run(tree: Path, script: list[str], timeout_s: float) -> tuple[str, int]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(with_parent_death([sys.executable, str(tree / script[0]), *script[1:]]), cwd=tree, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    return proc.stdout + proc.stderr, proc.returncode


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path, help="the other checkout (its extension built in place)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--match", action="append", default=[], help="a regex; lines matching any are printed")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        ap.error("name the benchmark after --: before_after.py BEFORE [options] -- bench/SCRIPT.py [its arguments]")
    cut = argv.index("--")
    args, script = ap.parse_args(argv[:cut]), argv[cut + 1:]
    patterns = [re.compile(m) for m in args.match]
    trees = {"before": args.before.resolve(), "after": ROOT}
    print(f"{' '.join(script)}: before = {trees['before']}, after = {ROOT}; {args.rounds} rounds, alternating")
    for n in range(args.rounds):
        for label, tree in trees.items():
            out, code = run(tree, script, args.timeout)
            lines = [line for line in out.splitlines() if not patterns or any(p.search(line) for p in patterns)]
            print(f"[{label} {n + 1}]" + ("" if code == 0 else f" (exit {code})"))
            for line in lines or out.splitlines()[-5:]:
                print(f"  {line.strip()}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
