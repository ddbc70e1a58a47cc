"""Build the C hot path (read, diff, encode) as one extension module: agent._swtel."""
from glob import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "agent._swtel",
            sources=sorted(glob("agent/_ext/*.c")),
            depends=sorted(glob("agent/_ext/*.h")),
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        # The simulated Spectrum switch: an ASIC plugin (dlopen'ed, no Python inside).
        Extension(
            "agent.asic.sim_plugin",
            sources=["agent/asic/sim.c"],
            depends=["agent/asic/swtel_asic.h"],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
    ]
)
