"""TLS credentials for the gNMI roles (dial-out client, collector, dial-in server).

Files are read when credentials are built; a missing or unreadable file raises ``TlsError``
naming it, so the caller can log one clear line. The dial-in server's files are held by a
:class:`ServerMaterial`: read again on SIGHUP when they changed (their content's hash), and
handed to gRPC through its certificate-config fetcher, which gRPC asks at every new
handshake: the next connection gets the new certificate, without a restart. Its CRL is checked
on each RPC (gRPC's Python server takes none): :meth:`ServerMaterial.revoked`.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

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


def client_pems(ca: str | None, cert: str | None = None,
                key: str | None = None) -> tuple[bytes | None, bytes | None, bytes | None]:
    """A client's (CA, cert, key) PEMs: the CA to verify the server against (None: the system's
    roots), cert and key for mTLS (both or neither). For grpcio and for grpc's C core alike."""
    if bool(cert) != bool(key):
        raise TlsError("client cert and key go together")
    root, private = read_pem(ca, "CA"), read_pem(key, "client key", private=True)
    return root, read_pem(cert, "client cert"), private


def channel_credentials(
    ca: str | None, cert: str | None = None, key: str | None = None
) -> grpc.ChannelCredentials:
    """Client side: verify the server against ``ca`` (system roots when None); mTLS with cert+key."""
    root, chain, private = client_pems(ca, cert, key)
    import grpc

    return grpc.ssl_channel_credentials(root_certificates=root, private_key=private, certificate_chain=chain)


def check_server_crl(address: str, ca: str | None, crl: str, server_name: str | None = None,
                     timeout: float = 10.0) -> None:
    """Before a gRPC client connects: a TLS handshake of its own (stdlib ssl, ALPN h2) that
    verifies the server's certificate against ``ca`` and the ``crl``; TlsError if the CRL
    revokes it. gRPC's Python channels take no CRL, so this is how ``tls.crl`` reaches
    dial-out, the tunnel and OTLP; each new channel checks again (a CRL renewed in place is
    read at the next connection)."""
    import socket
    import ssl

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    try:
        ctx.load_verify_locations(cafile=crl)
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(f"CRL {crl!r}: cannot be loaded: {exc}") from None
    ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=server_name or host):
            pass
    except ssl.SSLCertVerificationError as exc:
        if exc.verify_code == 23:  # X509_V_ERR_CERT_REVOKED
            raise TlsError(f"server certificate revoked (CRL {os.path.basename(crl)})") from None
        if exc.verify_code in (3, 12):  # unable to get CRL / CRL has expired... of its issuer
            raise TlsError(f"CRL {os.path.basename(crl)}: {exc.verify_message}") from None
        # any other failure is gRPC's to report, as without a CRL
    except (OSError, ValueError):
        pass  # unreachable now: gRPC reports it


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


# ---------------------------------------------------------------- rotation and CRL


def stamp(*paths: str | None) -> tuple:
    """What tells a file changed: the SHA-256 of each (None: missing or unreadable). Content,
    not mtime: a certificate rewritten in place within the same clock tick, or copied with
    its old mtime (cp -p, rsync), is still seen; the files are small (at most 1 MiB each)."""
    import hashlib

    out: list[str | None] = []
    for path in paths:
        try:
            with open(path, "rb") as fh:  # type: ignore[arg-type]
                out.append(hashlib.sha256(fh.read(MAX_PEM_BYTES + 1)).hexdigest())
        except (OSError, TypeError):  # TypeError: no path
            out.append(None)
    return tuple(out)


class Crl:
    """A PEM CRL, checked signed by one of the ``ca`` certificates when given. Needs the
    ``cryptography`` package (python3-cryptography), imported only when a CRL is set."""

    def __init__(self, path: str, ca_pem: bytes | None) -> None:
        try:
            from cryptography import x509
        except ImportError:
            raise TlsError("tls.crl needs the cryptography package (python3-cryptography)") from None
        data = read_pem(path, "CRL")
        assert data is not None
        try:
            self.crl = x509.load_pem_x509_crl(data)
        except ValueError as exc:
            raise TlsError(f"CRL {path!r}: not a PEM CRL ({exc})") from None
        if ca_pem is not None:
            cas = _certificates(ca_pem)
            if not any(ca.subject == self.crl.issuer and self.crl.is_signature_valid(ca.public_key())
                       for ca in cas):
                raise TlsError(f"CRL {path!r}: not signed by the CA (issuer {self.crl.issuer.rfc4514_string()})")
        self.path = path
        self._x509 = x509

    def revoked(self, cert_pem: bytes) -> str | None:
        """Why the certificate is revoked (its serial listed by this CRL's issuer), or None."""
        try:
            cert = self._x509.load_pem_x509_certificate(cert_pem)
        except ValueError:
            return "client certificate unreadable"
        if cert.issuer != self.crl.issuer:
            return None  # another CA's certificate: not this CRL's to judge
        if self.crl.get_revoked_certificate_by_serial_number(cert.serial_number) is not None:
            return f"client certificate revoked (serial {cert.serial_number:x}, CRL {os.path.basename(self.path)})"
        return None


def _certificates(pem: bytes) -> list[Any]:
    from cryptography import x509

    out = []
    for block in pem.split(b"-----END CERTIFICATE-----")[:-1]:
        start = block.find(b"-----BEGIN CERTIFICATE-----")
        if start >= 0:
            try:
                out.append(x509.load_pem_x509_certificate(block[start:] + b"-----END CERTIFICATE-----\n"))
            except ValueError:
                continue
    return out


class ServerMaterial:
    """The dial-in server's certificate, key, client CA and CRL; :meth:`reload` re-reads them
    when they changed, and every new connection after it uses them (gRPC's fetcher)."""

    def __init__(self, cert: str, key: str, ca: str | None = None, crl: str | None = None) -> None:
        if not (cert and key):
            raise TlsError("a server needs both a certificate and a key (or run insecure)")
        self.paths = (cert, key, ca, crl)
        self._lock = threading.Lock()
        self._pending: Any = None  # a certificate config gRPC has not picked up yet
        self.reloads = 0  # times new files were taken
        self._stamp, self._config, self._crl, self._mtls = self._read()

    def _read(self) -> tuple[tuple, Any, Crl | None, bool]:
        """Read and check every file; TlsError when one cannot serve (the old ones stay)."""
        import grpc

        cert, key, ca, crl = self.paths
        stamped = stamp(*self.paths)  # before reading: a change while reading shows next time
        problem = pair_problem(cert, key)
        if problem:
            raise TlsError(f"certificate {cert!r}: {problem}")
        chain, pkey = read_pem(cert, "certificate"), read_pem(key, "key", private=True)
        root = read_pem(ca, "client CA")
        revocations = Crl(crl, root) if crl else None
        config = grpc.ssl_server_certificate_configuration([(pkey, chain)], root_certificates=root)
        return stamped, config, revocations, root is not None

    def credentials(self) -> grpc.ServerCredentials:
        """Credentials whose certificate can change under a running server."""
        import grpc

        return grpc.dynamic_ssl_server_credentials(self._config, self._fetch,
                                                   require_client_authentication=self._mtls)

    def _fetch(self) -> Any:
        # gRPC's thread, at every new handshake: the new config once, else None (no change)
        with self._lock:
            config, self._pending = self._pending, None
        return config

    def changed(self) -> bool:
        return stamp(*self.paths) != self._stamp

    def reload(self) -> bool:
        """Take the files again if they changed: True if they did. TlsError (the running
        material kept) when the new ones cannot serve, e.g. a key that is not the certificate's."""
        if not self.changed():
            return False
        stamped, config, revocations, _mtls = self._read()
        with self._lock:
            self._stamp, self._config, self._crl, self._pending = stamped, config, revocations, config
            self.reloads += 1
        return True

    def revoked(self, auth_context: dict[str, list[bytes]]) -> str | None:
        """Why the RPC's client certificate is refused (revoked by the CRL), or None."""
        crl = self._crl
        if crl is None:
            return None
        certs = auth_context.get("x509_pem_cert") or []
        return crl.revoked(certs[0]) if certs else None
