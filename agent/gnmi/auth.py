"""Who is calling: the principal of a dial-in gNMI RPC, from its client certificate (mTLS)
and/or a username whose password is checked against the credentials file of salted hashes.

gRPC-free (the server maps :class:`AuthFailure` to ``UNAUTHENTICATED``), so it is tested
without a server. The password comes from ``username``/``password`` metadata (gnmic
``-u/-p``, pygnmi) or an ``authorization: Basic`` header (RFC 7617, as Cumulus' gNMI server
takes it); with both, the metadata wins. Empty ``username`` and ``password`` metadata (pygnmi
sends that pair when it has no credentials) count as none.
"""

from __future__ import annotations

import base64
import binascii
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.credentials import USER_NAME, LoginThrottle

MAX_PASSWORD_BYTES = 1024  # longer is refused unhashed: no one types that, and scrypt's input is ours to bound


class UserSource(Protocol):
    def check(self, name: str, password: bytes) -> bool: ...


@dataclass(frozen=True)
class Principal:
    """``name`` is the user (password login) or else the certificate's identity; None when the
    server admits anonymous clients. ``how``: ``password``, ``certificate`` or ``anonymous``."""

    name: str | None
    how: str
    certificate: str | None = None


class AuthFailure(Exception):
    """Refused: ``UNAUTHENTICATED`` with this message. ``login``: a failed login (slows the
    peer), as against an attempt refused unchecked while the peer waits out its delay."""

    def __init__(self, message: str, login: bool = True):
        super().__init__(message)
        self.message = message
        self.login = login


def peer_host(peer: str) -> str:
    """The address part of a gRPC peer (``ipv4:10.0.0.1:5555`` -> ``10.0.0.1``,
    ``ipv6:[::1]:5555`` -> ``::1``): what limits and slow-downs are kept per."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        host = rest.rpartition(":")[0] or rest
        return host.strip("[]")
    return peer


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def credentials(metadata: Iterable[tuple[str, Any]] | None) -> tuple[str | None, bytes | None]:
    """(username, password) from the metadata or a Basic header; None where absent. A
    malformed Basic header raises :class:`AuthFailure`."""
    meta: dict[str, Any] = {}
    for key, value in metadata or ():
        meta.setdefault(key.lower(), value)
    user = _text(meta.get("username") or "") or None
    password = meta.get("password")
    if isinstance(password, str):
        password = password.encode("utf-8")
    if user is not None or password:  # pygnmi sends both, empty, when it has none: as absent
        return user, password
    auth = meta.get("authorization")
    if auth is None:
        return None, None
    scheme, _, token = _text(auth).strip().partition(" ")
    if scheme.lower() != "basic":
        raise AuthFailure("authorization: only the Basic scheme is accepted")
    try:
        pair = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise AuthFailure("authorization: Basic credentials are not base64") from None
    name, sep, password = pair.partition(b":")
    if not sep:
        raise AuthFailure("authorization: Basic credentials are not user:password")
    return name.decode("utf-8", errors="replace"), password


def certificate_identity(auth_context: Mapping[str, Sequence[bytes]] | None, use: str) -> str | None:
    """The client certificate's identity (``use``: ``cn``, its subject CN; ``san``, its first
    subject alternative name), None when the connection carries no such certificate."""
    ctx = auth_context or {}
    key = "x509_common_name" if use == "cn" else "x509_subject_alternative_name"
    values = ctx.get(key) or ()
    return _text(values[0]) if values else None


class Authenticator:
    """``users``: the password check (None: no user source); ``mtls``: the TLS layer already
    required a certificate the client CA signed, whose identity (``cert_identity``) names the
    caller when no user source is configured. With both, a caller needs both."""

    def __init__(self, users: UserSource | None, *, mtls: bool, cert_identity: str = "cn",
                 throttle: LoginThrottle | None = None) -> None:
        self.users = users
        self.mtls = mtls
        self.cert_identity = cert_identity
        self.throttle = throttle or LoginThrottle()

    @property
    def anonymous(self) -> bool:
        return self.users is None and not self.mtls

    def authenticate(self, peer: str, metadata: Iterable[tuple[str, Any]] | None,
                     auth_context: Mapping[str, Sequence[bytes]] | None) -> Principal:
        cert = certificate_identity(auth_context, self.cert_identity) if self.mtls else None
        if self.mtls and cert is None:
            raise AuthFailure(f"the client certificate carries no {self.cert_identity.upper()} to name the caller")
        if self.users is None:
            return Principal(cert, "certificate", cert) if self.mtls else Principal(None, "anonymous")
        host = peer_host(peer)
        wait = self.throttle.wait_s(host)
        if wait > 0:
            raise AuthFailure(f"too many failed logins from this address: retry in {math.ceil(wait)} s",
                              login=False)
        try:
            name, password = credentials(metadata)
            if name is None and password is None:
                raise AuthFailure("credentials required: username and password metadata, "
                                  "or an authorization: Basic header")
            if not name:
                raise AuthFailure("a password without a username")
            if password is None:
                raise AuthFailure("a username without a password")
            if not password:
                raise AuthFailure("an empty password")
            if (len(password) > MAX_PASSWORD_BYTES or not USER_NAME.fullmatch(name)
                    or not self.users.check(name, password)):
                raise AuthFailure("bad username or password")
        except AuthFailure:
            self.throttle.failed(host)
            raise
        self.throttle.succeeded(host)
        return Principal(name, "password", cert)


class PamUsers:
    """The switch's own accounts through PAM (``pam_service``): Cumulus' NVUE users are
    local accounts, and a service that includes ``common-auth`` reaches TACACS+ or RADIUS
    too. python-pam (Debian ``python3-pampy``), one authenticator per thread (each loads
    libpam; its result fields are per call). A verified password is remembered, as a keyed
    hash, for ``remember_s``: a locked or changed account takes effect within that time."""

    def __init__(self, service: str, remember_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        import pam  # noqa: F401 - fail at start, not at the first login, when it is missing

        self.service = service
        self.remember_s = remember_s
        self._clock = clock
        self._local = threading.local()
        import secrets  # here, as hashlib and hmac below: an agent without PAM never loads them

        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._verified: dict[str, tuple[bytes, float]] = {}

    def _pam(self) -> Any:
        handle = getattr(self._local, "pam", None)
        if handle is None:
            import pam

            handle = self._local.pam = pam.pam()
        return handle

    def check(self, name: str, password: bytes) -> bool:
        import hashlib
        import hmac

        mark = hmac.new(self._key, name.encode() + b"\0" + password, hashlib.sha256).digest()
        now = self._clock()
        with self._lock:
            known = self._verified.get(name)
        if known is not None and known[1] > now and hmac.compare_digest(known[0], mark):
            return True
        try:
            text = password.decode("utf-8")
        except UnicodeDecodeError:
            return False
        ok = bool(self._pam().authenticate(name, text, service=self.service, resetcreds=False))
        with self._lock:
            if ok:
                self._verified[name] = (mark, now + self.remember_s)
                if len(self._verified) > 4096:  # bounded: the oldest entries go
                    for stale in list(self._verified)[:1024]:
                        del self._verified[stale]
            else:
                self._verified.pop(name, None)
        return ok
