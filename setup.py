"""Build the C hot path (read, diff, encode) as one extension module: agent._swtel."""
import os
import re
from glob import glob
from pathlib import Path

from setuptools import Extension, setup

# The version lives in agent/__init__.py alone; the extension is built with it, and
# agent._backend refuses an extension built for another version.
VERSION = re.search(r'^__version__ = "([^"]+)"', Path("agent/__init__.py").read_text(), re.M).group(1)
# CI builds with SWTEL_WERROR=1 (.ci/setup): a warning fails the build there, not on a user's compiler.
WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter"] + (["-Werror"] if os.environ.get("SWTEL_WERROR") == "1" else [])

setup(
    ext_modules=[
        Extension(
            "agent._swtel",
            sources=sorted(glob("agent/_ext/*.c")),
            depends=sorted(glob("agent/_ext/*.h")) + ["agent/__init__.py"],
            define_macros=[("SWTEL_EXT_VERSION", f'"{VERSION}"')],
            extra_compile_args=["-O2", "-std=gnu11", *WARNINGS],
        ),
        # The simulated Spectrum switch: an ASIC plugin (dlopen'ed, no Python inside), one file
        # per job (agent/asic/sim/sim.h says which).
        Extension(
            "agent.asic.sim_plugin",
            sources=sorted(glob("agent/asic/sim/*.c")),
            depends=sorted(glob("agent/asic/sim/*.h")) + ["agent/asic/swtel_asic.h"],
            extra_compile_args=["-O2", "-std=gnu11", *WARNINGS],
        ),
    ]
)
