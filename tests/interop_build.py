"""Build a reference implementation from ../shared/interop/<name>/build.sh once, into a cache
directory, for the interop tests (skipping, saying why, where it cannot be built)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("SWTEL_INTEROP_CACHE", "/var/tmp/swtel-interop"))


def build_reference(shared: Path, out: Path, binaries: tuple[str, ...], what: str) -> Path:
    """``out/bin`` holding ``binaries``, built by ``shared/build.sh out``; rebuilt when anything
    under ``shared`` changes. One build at a time, even across parallel runs."""
    if not (shared / "build.sh").exists():
        pytest.skip(f"{shared} is absent: {what} cannot be built")
    digest = hashlib.sha256()
    for p in sorted(shared.rglob("*")):
        if p.is_file():
            digest.update(str(p.relative_to(shared)).encode() + b"\0" + p.read_bytes())
    out.mkdir(parents=True, exist_ok=True)
    bin_dir, stamp = out / "bin", out / "stamp"
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fresh = stamp.exists() and stamp.read_text() == digest.hexdigest()
        if not (fresh and all((bin_dir / n).exists() for n in binaries)):
            if os.geteuid() != 0:
                pytest.skip(f"building {what} needs root (build.sh installs Debian's Go packages)")
            try:
                run = subprocess.run(["bash", str(shared / "build.sh"), str(out)], capture_output=True,
                                     text=True, timeout=900)
            except subprocess.TimeoutExpired:
                pytest.skip("build.sh took longer than 15 minutes")
            if run.returncode != 0 or not all((bin_dir / n).exists() for n in binaries):
                pytest.skip(f"build.sh failed ({run.returncode}): {(run.stderr or run.stdout)[-500:]}")
            stamp.write_text(digest.hexdigest())
    return bin_dir
