"""Build the C hot path (read, diff, encode) as one extension module: agent._swtel, the
simulated switch's plugin (agent.asic.sim_plugin) and the ASIC plugin's C helper process
(agent/asic/swtel-asic-host); with libgrpc-dev installed, dial-out's transport on grpc's C
core as a module of its own (agent._grpcstream), so that the rest builds without it."""
import os
import re
import shlex
from glob import glob
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The version lives in agent/__init__.py alone; the extension is built with it, and
# agent._backend refuses an extension built for another version.
VERSION = re.search(r'^__version__ = "([^"]+)"', Path("agent/__init__.py").read_text(), re.M).group(1)
# CI builds with SWTEL_WERROR=1 (.ci/setup): a warning fails the build there, not on a user's compiler.
WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter"] + (["-Werror"] if os.environ.get("SWTEL_WERROR") == "1" else [])
VERSION_MACRO = ("SWTEL_EXT_VERSION", f'"{VERSION}"')

# The plugin's helper process in C (agent/asic/swtel_asic_host.c): an executable beside the
# package's modules, where agent/asic/proxy.py looks for it. The ABI's rules are the
# extension's own file (agent/_ext/asic_abi.c).
HOST_NAME = "swtel-asic-host"
HOST_SOURCES = ["agent/asic/swtel_asic_host.c", "agent/_ext/asic_abi.c"]
HOST_DEPENDS = ["agent/_ext/asic_abi.h", "agent/asic/swtel_asic.h", "agent/__init__.py"]


class BuildExtAndHost(build_ext):
    """build_ext, then the C helper with the same compiler (and its flags: CFLAGS, CPPFLAGS;
    LDFLAGS for the link, so a Debian build's hardening applies to it as well)."""

    def run(self) -> None:
        super().run()
        self.build_host()

    def host_path(self) -> str:
        base = "" if self.inplace else self.build_lib
        return os.path.join(base, "agent", "asic", HOST_NAME)

    def build_host(self) -> None:
        out = self.host_path()
        objects = self.compiler.compile(
            HOST_SOURCES, output_dir=os.path.join(self.build_temp, "host"), macros=[VERSION_MACRO],
            extra_postargs=["-O2", "-std=gnu11", "-fPIE", *WARNINGS], depends=HOST_DEPENDS)
        # a position-independent executable, bound at load (full RELRO), no rpath
        self.compiler.link_executable(
            objects, HOST_NAME, output_dir=os.path.dirname(out), libraries=["dl"],
            extra_preargs=shlex.split(os.environ.get("LDFLAGS", "")),
            extra_postargs=["-pie", "-Wl,-z,relro", "-Wl,-z,now"])

    def get_outputs(self) -> list[str]:
        return [*super().get_outputs(), self.host_path()]

    def get_source_files(self) -> list[str]:  # what an sdist must carry to build it
        return [*super().get_source_files(), *HOST_SOURCES, *HOST_DEPENDS]


def grpc_core() -> list[Extension]:
    """agent._grpcstream, dial-out's transport on grpc's C core, when its headers are here
    (Debian 12: libgrpc-dev); without it the exporter uses grpcio (agent/exporters/dialout.py)."""
    import subprocess

    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc"], capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return []
    return [Extension(
        "agent._grpcstream", sources=["agent/_ext_grpc/grpcstream.c"],
        include_dirs=[f[2:] for f in flags if f.startswith("-I")],
        library_dirs=[f[2:] for f in flags if f.startswith("-L")],
        libraries=[f[2:] for f in flags if f.startswith("-l")] + ["pthread"],
        extra_compile_args=["-O2", "-std=gnu11", *WARNINGS],
    )]


setup(
    cmdclass={"build_ext": BuildExtAndHost},
    ext_modules=[*grpc_core(),
        Extension(
            "agent._swtel",
            sources=sorted(glob("agent/_ext/*.c")),
            depends=sorted(glob("agent/_ext/*.h")) + ["agent/__init__.py"],
            define_macros=[VERSION_MACRO],
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
