"""What swtel agrees to load as an ASIC plugin, decided before ``dlopen``.

A plugin is native code run inside the agent (often as root), and ``dlopen`` runs a
library's constructors before swtel can ask it anything, so everything here is
decided from the file system and from the file's bytes, never by loading it:

* the path resolves (symlinks followed) to a **regular file** (not a directory, FIFO,
  socket or device; opened with ``O_NONBLOCK``, so a FIFO never blocks);
* the file is **owned by root or by the agent's own user** (its effective uid) and is
  **not writable by group or others**;
* **every directory** from the file up to ``/`` is owned by root or the agent's user and
  is not writable by group or others (sshd's StrictModes), except a **root-owned directory
  with the sticky bit** (``/tmp``): there only an entry's owner may rename or remove it,
  so the entries below it that pass these checks cannot be swapped;
* the file is an **ELF shared object** (``\\x7fELF`` magic, type ``ET_DYN``) whose dynamic
  symbol table (``.dynsym``, found through the section headers) **defines
  ``swtel_asic_plugin``** as a global function, so a library that is not a swtel plugin
  never has its constructors run.

The built-in ``sim`` is installed with the package and is not checked (agent/asic/__init__.py).
A refusal raises :class:`PluginRefused` (an ``OSError``) whose text names the file and
the problem. Its cause is the file (or a directory above it), so retrying cannot help
until that changes: :func:`signature` tells a caller when it has (docs/RELIABILITY.md,
"Plugin loader").
"""

from __future__ import annotations

import os
import stat
import struct

SYMBOL = b"swtel_asic_plugin"
#: bounds on what is read of a file's section headers and dynamic symbol table
MAX_SECTIONS = 65536
MAX_TABLE_BYTES = 64 * 1024 * 1024

_ET_DYN = 3
_SHT_DYNSYM = 11
_STB_OK = (1, 2, 10)  # GLOBAL, WEAK, GNU_UNIQUE
_STT_OK = (2, 10)  # FUNC, GNU_IFUNC
_STV_OK = (0, 3)  # DEFAULT, PROTECTED


class PluginRefused(OSError):
    """``path`` may not be loaded, for ``reason`` (a property of the file, not a passing state)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"asic plugin {path}: {reason}")
        self.path, self.reason = path, reason


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid())


def _who(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _owners() -> str:
    euid = os.geteuid()
    return "root" if euid == 0 else f"root or the agent's user ({_who(euid)})"


def _check_dirs(path: str, real: str) -> None:
    """Every directory above ``real`` (which has no symlinks left), up to ``/``."""
    d = os.path.dirname(real)
    while True:
        try:
            st = os.stat(d)
        except OSError as exc:
            raise PluginRefused(path, f"directory {d}: {exc.strerror}") from None
        if not _owner_ok(st):
            raise PluginRefused(path, f"directory {d} is owned by {_who(st.st_uid)}, not {_owners()}")
        if st.st_mode & 0o022 and not (st.st_mode & stat.S_ISVTX and st.st_uid == 0):
            who = "group and others" if st.st_mode & 0o022 == 0o022 else \
                "group" if st.st_mode & 0o020 else "others"
            raise PluginRefused(path, f"directory {d} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}); "
                                "anyone who can write there can replace the plugin")
        parent = os.path.dirname(d)
        if parent == d:
            return
        d = parent


class CheckedPlugin:
    """A plugin file that passed the checks, held open: ``fd`` is the very file that was
    checked (``fstat`` of it, its bytes read through it), ``path`` the resolved name it had.
    The helper loads it through this descriptor (``dlopen("/proc/self/fd/N")``), never
    through ``path`` again, so a file swapped in after the check is not the one loaded.
    The owner closes it (``close()``, or a ``with`` block)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> CheckedPlugin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


def check_plugin(path: str) -> str:
    """Check the file ``path`` names (see the module's text); return the resolved path it
    had. Raises :class:`PluginRefused` naming the problem. To load the plugin, use
    :func:`open_checked` (the path may name another file by then)."""
    with open_checked(path) as checked:
        return checked.path


def open_checked(path: str) -> CheckedPlugin:
    """Check the file ``path`` names (see the module's text) and return it open (the
    descriptor that was checked). Raises :class:`PluginRefused` naming the problem."""
    if not os.path.isabs(path):
        raise PluginRefused(path, "expected an absolute path")
    try:
        real = os.path.realpath(path, strict=True)
    except FileNotFoundError:
        raise PluginRefused(path, "no such file" if not os.path.islink(path)
                            else f"no such file (a symlink to {os.readlink(path)})") from None
    except OSError as exc:
        raise PluginRefused(path, f"cannot resolve the path: {exc.strerror or exc}") from None
    shown = "it" if real == path else f"its target {real}"
    try:
        st = os.stat(real)
    except OSError as exc:
        raise PluginRefused(path, f"{real}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise PluginRefused(path, f"{shown} is {_kind(st.st_mode)}, not a shared library")
    if not _owner_ok(st):
        raise PluginRefused(path, f"{shown} is owned by {_who(st.st_uid)}, not {_owners()}")
    if st.st_mode & 0o022:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else "group" if st.st_mode & 0o020 else "others"
        raise PluginRefused(path, f"{shown} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}); "
                            "chmod go-w")
    _check_dirs(path, real)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise PluginRefused(path, f"cannot open {shown}: {exc.strerror}") from None
    try:
        # The verdict is the open file's: its own owner and mode (the path's stat above
        # only chose the words of a refusal), and the same inode the directories lead to.
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(fst.st_mode):
            raise PluginRefused(path, f"{shown} changed while it was checked")
        if not _owner_ok(fst):
            raise PluginRefused(path, f"{shown} is owned by {_who(fst.st_uid)}, not {_owners()}")
        if fst.st_mode & 0o022:
            raise PluginRefused(path, f"{shown} is writable by group or others "
                                f"(mode {stat.S_IMODE(fst.st_mode):04o}); chmod go-w")
        problem = elf_problem(fd, fst.st_size)
        if problem:
            raise PluginRefused(path, problem)
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, PluginRefused):
            raise
        raise PluginRefused(path, f"cannot read {shown}: {exc.strerror or exc}") from None
    return CheckedPlugin(real, fd)


def _read(fd: int, size: int, offset: int, length: int, what: str) -> bytes:
    if offset < 0 or length < 0 or offset + length > size:
        raise ValueError(f"{what} lies outside the file")
    if length > MAX_TABLE_BYTES:
        raise ValueError(f"{what} is larger than {MAX_TABLE_BYTES >> 20} MiB")
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise ValueError(f"{what}: short read")
    return data


def elf_problem(fd: int, size: int) -> str | None:
    """Why the open file ``fd`` (``size`` bytes) is not a swtel plugin as far as its bytes
    tell (not ELF, not a shared object, no ``swtel_asic_plugin``), or None."""
    head = os.pread(fd, 64, 0)
    if head[:4] != b"\x7fELF":
        text = head[:4].hex(" ") if head else "an empty file"
        return f"not an ELF shared object (no ELF magic: starts with {text})"
    if len(head) < 52 or head[4] not in (1, 2) or head[5] not in (1, 2):
        return "not an ELF shared object (malformed ELF header)"
    wide, end = head[4] == 2, "<" if head[5] == 1 else ">"
    e_type = struct.unpack_from(end + "H", head, 16)[0]
    if e_type != _ET_DYN:
        kinds = {0: "of no type", 1: "a relocatable object (.o)", 2: "an executable", 4: "a core dump"}
        return f"not a shared object: an ELF file {kinds.get(e_type, f'of type {e_type}')}"
    try:
        return None if _defines_symbol(fd, size, head, wide, end) else \
            f"not a swtel ASIC plugin: no symbol {SYMBOL.decode()} (checked in the file, before loading it)"
    except (ValueError, struct.error) as exc:
        return f"not a usable ELF shared object: {exc}"


def _defines_symbol(fd: int, size: int, head: bytes, wide: bool, end: str) -> bool:
    if wide:
        shoff, shentsize, shnum = struct.unpack_from(end + "Q", head, 40)[0], *struct.unpack_from(end + "HH", head, 58)
        sh_fmt, sh_min, sym_fmt, sym_min = end + "IIQQQQIIQQ", 64, end + "IBBHQQ", 24
    else:
        shoff, shentsize, shnum = struct.unpack_from(end + "I", head, 32)[0], *struct.unpack_from(end + "HH", head, 46)
        sh_fmt, sh_min, sym_fmt, sym_min = end + "IIIIIIIIII", 40, end + "IIIBBH", 16
    if shoff == 0:
        raise ValueError("no section headers, so the dynamic symbol table cannot be checked")
    if shentsize < sh_min:
        raise ValueError(f"section header size {shentsize}, expected at least {sh_min}")
    if shnum == 0:  # more than 0xff00 sections: the count is section 0's sh_size
        shnum = struct.unpack_from(sh_fmt, _read(fd, size, shoff, shentsize, "section header 0"))[5]
    if shnum > MAX_SECTIONS:
        raise ValueError(f"{shnum} sections (at most {MAX_SECTIONS})")
    table = _read(fd, size, shoff, shnum * shentsize, "the section headers")
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize), either class
    sections = [struct.unpack_from(sh_fmt, table, i * shentsize) for i in range(shnum)]
    found = False
    for sh in sections:
        if sh[1] != _SHT_DYNSYM:
            continue
        offset, length, link, entsize = sh[4], sh[5], sh[6], sh[9]
        if entsize < sym_min or link >= shnum:
            raise ValueError("malformed dynamic symbol table")
        strtab = sections[link]
        strings = _read(fd, size, strtab[4], strtab[5], "the dynamic string table")
        names = _offsets(strings, SYMBOL)
        if not names:
            continue
        symbols = _read(fd, size, offset, length - length % entsize, "the dynamic symbol table")
        for i in range(0, len(symbols), entsize):
            sym = struct.unpack_from(sym_fmt, symbols, i)
            if wide:
                name, info, other, shndx = sym[0], sym[1], sym[2], sym[3]
            else:
                name, info, other, shndx = sym[0], sym[3], sym[4], sym[5]
            if name in names and shndx != 0 and info >> 4 in _STB_OK and info & 0xF in _STT_OK \
                    and other & 3 in _STV_OK:
                found = True
                break
    return found


def _offsets(strings: bytes, name: bytes) -> set[int]:
    """Offsets in a string table where the NUL-terminated string ``name`` starts."""
    out, needle, i = set(), name + b"\0", 0
    while True:
        i = strings.find(needle, i)
        if i < 0:
            return out
        if i == 0 or strings[i - 1] == 0:
            out.add(i)
        i += 1


def signature(path: str) -> tuple:
    """What :func:`check_plugin`'s verdict on ``path`` depends on: the resolved file's
    identity, size, times, mode and owner, and each directory's mode and owner. A caller
    that was refused need not check again (nor log again) until this changes. A built-in
    name (not a path) has only itself: it changes with the package, which restarts the agent."""
    if not os.path.isabs(path):
        return (path,)
    real = os.path.realpath(path)
    parts: list[tuple] = [(path, real)]
    d = real
    while True:
        try:
            st = os.stat(d)
            parts.append((st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_size if d == real else 0,
                          st.st_mtime_ns if d == real else 0, st.st_ctime_ns if d == real else 0))
        except OSError as exc:
            parts.append((exc.errno,))
        parent = os.path.dirname(d)
        if parent == d:
            return tuple(parts)
        d = parent


# What the loader says when dlopen succeeded (the library's constructors ran) but the file
# is no plugin of this swtel (agent/_ext/asic.c, agent/_fallback/asic.py): as permanent as a refusal.
_LOADER_VERDICTS = (": not a swtel ASIC plugin: ", "() returned NULL", ": ABI version ", ": incomplete ops table")


def refusal_signature(path: str, exc: BaseException) -> tuple | None:
    """When loading ``path`` failed with ``exc`` for what the file is (refused here, or no
    plugin of this ABI once loaded), the :func:`signature` to wait for a change of before
    trying again; None when it is worth trying again as it is (the plugin's own ``open``
    failed, the library could not be loaded, it crashed or hung)."""
    if isinstance(exc, PluginRefused) or (isinstance(exc, OSError) and any(v in str(exc) for v in _LOADER_VERDICTS)):
        try:
            return signature(path)
        except (OSError, ValueError):
            return None
    return None
