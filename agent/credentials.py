"""Secrets and the gNMI server's password checks: the one reader of password, token and key
files, the salted-hash credentials file (``swtel passwd``), and the per-peer slow-down of
failed logins.

The credentials file holds one user a line, ``name:$scrypt$ln=14,r=8,p=1$SALT$HASH``
(salt and hash in unpadded base64), written by ``swtel passwd``; ``#`` starts a comment.
No plaintext password is ever read from it: the agent keeps the hashes, and a password a
client sends is hashed with the entry's salt and parameters and compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

# hashlib (~0.7 MiB of OpenSSL's digests), hmac and secrets are imported where a password is
# hashed or checked: an agent without password authentication never loads them.

MAX_SECRET_BYTES = 64 * 1024  # a password, token or key file larger than this is refused unread
MAX_USERS_BYTES = 1024 * 1024  # a credentials file: thousands of entries fit
# scrypt's cost: 2**14 x 8 x 128 bytes = 16 MiB and ~50 ms per check (OWASP's scrypt floor is
# ln=17 at r=8; 14 keeps a Get with a password cheap enough on a switch CPU, and a verified
# password is remembered: see Users).
SCRYPT_LN, SCRYPT_R, SCRYPT_P = 14, 8, 1
_MAX_LN, _MAX_R, _MAX_P = 20, 32, 16  # what a (hand-edited) entry may ask for: bounded work
_SCRYPT_MAXMEM = 1024 * 1024 * 1024
USER_NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
_ENTRY = re.compile(r"\$scrypt\$ln=(\d{1,2}),r=(\d{1,2}),p=(\d{1,2})\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)")


class SecretError(ValueError):
    """A secret or credentials file cannot be used; the text names the file and why."""


# ---------------------------------------------------------------- the one secret reader


def read_secret(path: str, what: str = "secret file", *, max_bytes: int = MAX_SECRET_BYTES,
                private: bool = True, strip: bool = True) -> bytes:
    """The bytes of a password, token or key file: a regular file (a FIFO or device is refused
    without blocking) of at most ``max_bytes``, which other users cannot read when ``private``
    (a secret any local user can read is no secret), with surrounding whitespace stripped
    (``strip``: one rule for every secret: editors add a newline, nobody means a space)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise SecretError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise SecretError(f"{what} {path}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecretError(f"{what} {path}: not a regular file")
        if private and st.st_mode & 0o007:
            raise SecretError(f"{what} {path}: readable by other users (mode {st.st_mode & 0o777:04o}); "
                              "chmod 0640 (group swtel) or 0600")
        if st.st_size > max_bytes:
            raise SecretError(f"{what} {path}: larger than {max_bytes} bytes")
        chunks, total = [], 0
        while True:  # the file may grow while read: never past the bound
            chunk = os.read(fd, max_bytes + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise SecretError(f"{what} {path}: larger than {max_bytes} bytes")
    except OSError as exc:
        raise SecretError(f"{what} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data.strip() if strip else data


def secret_problem(path: str, what: str = "file", **kw) -> str | None:
    """Why ``path`` cannot serve as a secret (None when it can): for validate."""
    try:
        data = read_secret(path, what, **kw)
    except SecretError as exc:
        return str(exc).removeprefix(f"{what} {path}: ")
    return None if data else "empty (or only whitespace)"


# ---------------------------------------------------------------- salted hashes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def hash_password(password: str | bytes, *, ln: int = SCRYPT_LN, r: int = SCRYPT_R, p: int = SCRYPT_P,
                  salt: bytes | None = None) -> str:
    """``$scrypt$ln=14,r=8,p=1$SALT$HASH`` for ``password`` with a fresh 16-byte salt."""
    import hashlib
    import secrets

    pw = password.encode() if isinstance(password, str) else password
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = hashlib.scrypt(pw, salt=salt, n=1 << ln, r=r, p=p, maxmem=_SCRYPT_MAXMEM, dklen=32)
    return f"$scrypt$ln={ln},r={r},p={p}${_b64(salt)}${_b64(digest)}"


@dataclass(frozen=True)
class Entry:
    ln: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    @classmethod
    def parse(cls, text: str) -> Entry:
        m = _ENTRY.fullmatch(text)
        if not m:
            raise ValueError("not a $scrypt$ln=N,r=N,p=N$SALT$HASH entry (write it with `swtel passwd`)")
        ln, r, p = (int(g) for g in m.groups()[:3])
        if not (1 <= ln <= _MAX_LN and 1 <= r <= _MAX_R and 1 <= p <= _MAX_P):
            raise ValueError(f"scrypt parameters out of range (ln 1-{_MAX_LN}, r 1-{_MAX_R}, p 1-{_MAX_P})")
        try:
            salt, digest = _unb64(m.group(4)), _unb64(m.group(5))
        except (binascii.Error, ValueError):
            raise ValueError("salt or hash is not base64") from None
        if len(salt) < 8 or len(digest) < 16:
            raise ValueError("salt or hash too short")
        return cls(ln, r, p, salt, digest)

    def verify(self, password: bytes) -> bool:
        import hashlib
        import hmac

        got = hashlib.scrypt(password, salt=self.salt, n=1 << self.ln, r=self.r, p=self.p,
                             maxmem=_SCRYPT_MAXMEM, dklen=len(self.digest))
        return hmac.compare_digest(got, self.digest)


# An entry for names the file does not hold: checking a password against it costs what a real
# check costs, so the time of a refusal does not tell which user names exist.
_DUMMY = Entry(SCRYPT_LN, SCRYPT_R, SCRYPT_P, b"swtel-no-such-user", bytes(32))


def parse_users(text: str, path: str, what: str = "users file") -> dict[str, Entry]:
    """``name:$scrypt$...`` lines; every problem names the file and line."""
    users: dict[str, Entry] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, hashed = line.partition(":")
        if not sep or not USER_NAME.fullmatch(name):
            raise SecretError(f"{what} {path} line {n}: expected name:$scrypt$... (a plaintext password "
                              f"is never read: write entries with `swtel passwd {path} NAME`)")
        if name in users:
            raise SecretError(f"{what} {path} line {n}: user {name!r} listed twice")
        try:
            users[name] = Entry.parse(hashed)
        except ValueError as exc:
            raise SecretError(f"{what} {path} line {n}: {exc}") from None
    if not users:
        raise SecretError(f"{what} {path}: no user in it (add one with `swtel passwd {path} NAME`)")
    return users


def read_users(path: str, what: str = "users file") -> dict[str, Entry]:
    data = read_secret(path, what, max_bytes=MAX_USERS_BYTES, strip=False)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SecretError(f"{what} {path}: not UTF-8 (byte {exc.start})") from None
    return parse_users(text, path, what)


def write_user(path: str, name: str, password: str) -> bool:
    """Add or replace ``name``'s entry in the credentials file at ``path`` (created 0640, or
    keeping the mode of an existing file), atomically; returns whether it replaced one."""
    if not USER_NAME.fullmatch(name):
        raise SecretError(f"user name {name!r}: 1-64 of A-Z a-z 0-9 _ . @ + -")
    lines: list[str] = []
    mode, replaced = 0o640, False
    if os.path.exists(path):
        data = read_secret(path, "users file", max_bytes=MAX_USERS_BYTES, strip=False).decode("utf-8")
        mode = os.stat(path).st_mode & 0o777 & ~0o007
        for line in data.splitlines():
            if line.strip().partition(":")[0] == name and not line.strip().startswith("#"):
                replaced = True
                continue
            lines.append(line)
    lines.append(f"{name}:{hash_password(password)}")
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(path):
            st = os.stat(path)
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return replaced


class Users:
    """The credentials file as the server checks it: re-read when the file changes (inode,
    size, mtime), so ``swtel passwd`` takes effect without a reload; a password verified
    once is remembered (a keyed hash of it, never the password) until the file changes, so
    a client's every Get does not cost a scrypt."""

    def __init__(self, path: str, only: str | None = None) -> None:
        self.path = path
        self.only = only  # `username` + `password_file`: that user alone
        self._lock = threading.Lock()
        self._sig: tuple[int, int, int, int] | None = None
        self._users: dict[str, Entry] = {}
        import secrets

        self._key = secrets.token_bytes(32)
        self._verified: dict[str, bytes] = {}
        self.load()

    def load(self) -> None:
        st = os.stat(self.path)
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        users = read_users(self.path, "users file" if self.only is None else "password file")
        if self.only is not None:
            if self.only not in users:
                raise SecretError(f"password file {self.path}: holds no entry for {self.only!r} "
                                  f"(write it with `swtel passwd {self.path} {self.only}`)")
            users = {self.only: users[self.only]}
        with self._lock:
            self._sig, self._users, self._verified = sig, users, {}

    def _fresh(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return  # gone or unreadable: keep what was loaded (the file's fault is logged at load)
        if (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != self._sig:
            try:
                self.load()
            except (OSError, SecretError):
                pass  # a half-written or broken file: keep the last good one

    def check(self, name: str, password: bytes) -> bool:
        import hashlib
        import hmac

        self._fresh()
        with self._lock:
            entry = self._users.get(name)
            known = self._verified.get(name)
        mark = hmac.new(self._key, password, hashlib.sha256).digest()
        if entry is not None and known is not None and hmac.compare_digest(mark, known):
            return True
        ok = (entry or _DUMMY).verify(password) and entry is not None
        if ok:
            with self._lock:
                if self._users.get(name) is entry:
                    self._verified[name] = mark
        return ok


# ---------------------------------------------------------------- failed logins, per peer


class LoginThrottle:
    """Slows a peer that fails to log in, without sleeping on a shared gRPC worker: after its
    n-th consecutive failure the peer's next attempts are refused unchecked for
    ``min(base * 2**(n-1), cap)`` seconds. A success forgets the peer; so does ``forget_s``
    without a failure. Peers are bounded (least recently failed forgotten first)."""

    def __init__(self, base_s: float = 0.5, cap_s: float = 8.0, forget_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, max_peers: int = 4096) -> None:
        self.base_s, self.cap_s, self.forget_s = base_s, cap_s, forget_s
        self._clock = clock
        self._max = max_peers
        self._lock = threading.Lock()
        self._peers: OrderedDict[str, tuple[int, float, float]] = OrderedDict()  # failures, until, last

    def wait_s(self, peer: str) -> float:
        """Seconds ``peer`` must still wait before an attempt is checked (0: go ahead)."""
        now = self._clock()
        with self._lock:
            rec = self._peers.get(peer)
            if rec is None:
                return 0.0
            if now - rec[2] > self.forget_s:
                del self._peers[peer]
                return 0.0
            return max(0.0, rec[1] - now)

    def failed(self, peer: str) -> float:
        """Record a failure; returns the delay now imposed on ``peer``."""
        now = self._clock()
        with self._lock:
            n = self._peers.pop(peer, (0, 0.0, now))[0] + 1
            delay = min(self.base_s * 2 ** min(n - 1, 30), self.cap_s)
            self._peers[peer] = (n, now + delay, now)
            while len(self._peers) > self._max:
                self._peers.popitem(last=False)
        return delay

    def succeeded(self, peer: str) -> None:
        with self._lock:
            self._peers.pop(peer, None)
