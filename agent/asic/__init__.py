"""ASIC plugins: the C ABI (``swtel_asic.h``, beside this file) and the plugins swtel
builds itself (the simulated Spectrum switch, ``sim``).

``resolve(name_or_path)`` turns ``sources.asic.plugin`` into a file to ``dlopen``:
a built-in name (``sim``) or a path to a vendor's shared library.
"""

from __future__ import annotations

import glob
import importlib.machinery
import os

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "swtel_asic.h")

#: built-in plugin name -> module stem of the shared library setup.py builds
BUILTIN = {"sim": "sim_plugin"}


def builtin_path(name: str) -> str | None:
    """The built-in plugin's shared library, or None when it was not built."""
    stem = BUILTIN[name]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(HERE, stem + suffix)
        if os.path.exists(path):
            return path
    found = sorted(glob.glob(os.path.join(HERE, stem + ".*.so")))
    return found[0] if found else None


def resolve(plugin: str) -> str:
    """The file for ``sources.asic.plugin``; raises OSError with the reason when there is none."""
    if plugin in BUILTIN:
        path = builtin_path(plugin)
        if path is None:
            raise OSError(f"asic plugin {plugin!r}: built-in plugin not built (run the package build)")
        return path
    if not os.path.isabs(plugin):
        raise OSError(f"asic plugin {plugin!r}: expected a built-in name ({', '.join(BUILTIN)}) or an absolute path")
    if not os.path.exists(plugin):
        raise OSError(f"asic plugin {plugin}: no such file")
    return plugin
