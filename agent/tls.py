"""TLS credentials for the gNMI roles (dial-out client, collector, dial-in server).

Files are read once when credentials are built; a missing or unreadable file raises
``TlsError`` naming it, so the caller can log one clear line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.credentials import SecretError, read_secret

if TYPE_CHECKING:  # imported where credentials are built: parsing a config stays light
    import grpc


MAX_PEM_BYTES = 1024 * 1024


class TlsError(RuntimeError):
    """A certificate, key or CA file could not be used."""


def read_pem(path: str | None, what: str, private: bool = False) -> bytes | None:
    """A PEM file (at most 1 MiB); a ``private`` key by the one secret reader's rules: a
    regular file no other user can read."""
    if not path:
        return None
    try:
        data = read_secret(path, what, max_bytes=MAX_PEM_BYTES, private=private, strip=False)
    except SecretError as exc:
        raise TlsError(str(exc)) from None
    if b"-----BEGIN" not in data:
        raise TlsError(f"{what} {path!r}: not a PEM file")
    return data


def pair_problem(cert: str, key: str) -> str | None:
    """Why ``cert`` and ``key`` cannot serve together (the key is not the certificate's), or
    None. gRPC would only say the listener or the handshake failed; OpenSSL names the cause."""
    import ssl

    try:
        with open(key, "rb") as fh:
            head = fh.read(65536)
    except OSError as exc:
        return f"key cannot be read: {exc.strerror}"
    if b"ENCRYPTED" in head:  # PKCS#8 "ENCRYPTED PRIVATE KEY" or PEM's "Proc-Type: 4,ENCRYPTED"
        return "key is encrypted: the agent needs an unencrypted key (openssl pkey -in KEY -out KEY.plain)"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        # password: an encrypted key must fail here, never prompt on a terminal
        ctx.load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError as exc:
        reason = (exc.reason or str(exc)).lower()
        if "mismatch" in reason:
            return "key does not match certificate (they are not a pair: check which key signed it)"
        return f"certificate and key cannot be loaded together: {exc.reason or exc}"
    except OSError as exc:
        return f"certificate and key cannot be read: {exc.strerror or exc}"
    return None


def channel_credentials(
    ca: str | None, cert: str | None = None, key: str | None = None
) -> grpc.ChannelCredentials:
    """Client side: verify the server against ``ca`` (system roots when None); mTLS with cert+key."""
    if bool(cert) != bool(key):
        raise TlsError("client cert and key go together")
    import grpc

    return grpc.ssl_channel_credentials(
        root_certificates=read_pem(ca, "CA"),
        private_key=read_pem(key, "client key", private=True),
        certificate_chain=read_pem(cert, "client cert"),
    )


def channel_options(server_name: str | None) -> list[tuple[str, object]]:
    """Check the server's certificate against ``server_name`` instead of the dialled host."""
    return [("grpc.ssl_target_name_override", server_name)] if server_name else []


def server_credentials(
    cert: str | None, key: str | None, client_ca: str | None = None
) -> grpc.ServerCredentials:
    """Server side: ``client_ca`` set means mTLS, clients must present a cert it signed."""
    if not (cert and key):
        raise TlsError("a server needs both a certificate and a key (or run insecure)")
    chain, pkey = read_pem(cert, "certificate"), read_pem(key, "key", private=True)
    root = read_pem(client_ca, "client CA")
    import grpc

    return grpc.ssl_server_credentials(
        [(pkey, chain)], root_certificates=root, require_client_auth=root is not None
    )
