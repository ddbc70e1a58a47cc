"""ASIC plugins: the C ABI (``swtel_asic.h``, beside this file) and the plugins swtel
builds itself (the simulated Spectrum switch, ``sim``).

``resolve(name_or_path)`` turns ``sources.asic.plugin`` into a file to ``dlopen``:
a built-in name (``sim``) or a path to a vendor's shared library, which must pass
``trust.check_plugin`` (the checks made before anything of it is loaded). The built-in
plugins are installed with the package and exempt. ``open_plugin`` is the same, with the
file held open: the agent loads the plugin through that descriptor (agent/asic/proxy.py).
"""

from __future__ import annotations

import glob
import importlib.machinery
import os

from agent.asic.trust import CheckedPlugin, PluginRefused, check_plugin, open_checked

__all__ = ["BUILTIN", "HEADER", "CheckedPlugin", "PluginRefused", "builtin_path", "check_plugin", "open_plugin",
           "resolve"]

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
    """The file to dlopen for ``sources.asic.plugin`` (a path: resolved and checked); raises
    OSError with the reason when there is none (:class:`PluginRefused` when the file may not
    be loaded)."""
    if plugin in BUILTIN:
        path = builtin_path(plugin)
        if path is None:
            raise OSError(f"asic plugin {plugin!r}: built-in plugin not built (run the package build)")
        return path
    if not os.path.isabs(plugin):
        raise OSError(f"asic plugin {plugin!r}: expected a built-in name ({', '.join(BUILTIN)}) or an absolute path")
    # Everything that can be decided without running the plugin's code is, before dlopen
    # (ownership, modes, the directories above it, ELF type, the entry symbol).
    return check_plugin(plugin)


def open_plugin(plugin: str) -> CheckedPlugin:
    """:func:`resolve`, with the file held open: for a path, the descriptor the checks were
    made on (``trust.open_checked``); for a built-in, its library opened as it is. Raises
    what :func:`resolve` raises."""
    if plugin not in BUILTIN:
        if not os.path.isabs(plugin):
            resolve(plugin)  # raises its refusal
        return open_checked(plugin)
    path = resolve(plugin)
    try:
        return CheckedPlugin(path, os.open(path, os.O_RDONLY | os.O_CLOEXEC))
    except OSError as exc:
        raise OSError(f"asic plugin {plugin!r}: cannot open {path}: {exc.strerror}") from None
