"""Shared helpers for the gNMI tests: a test CA (cryptography), free ports, synthetic tables.

``make_pki(dir)`` writes a CA, a server certificate for localhost/127.0.0.1, a
client certificate (for mTLS) and a second, unrelated CA (for "wrong CA" tests).
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
from array import array
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agent.counters import OPENCONFIG, Batch, Container, CounterSpec, CounterTable


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to 0); never 9339."""
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port != 9339:
            return port


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int,
             ca: bool) -> x509.CertificateBuilder:
    """What every test certificate shares: names, key, serial, validity, basic constraints."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )


@dataclass
class CA:
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    cert_path: Path

    @classmethod
    def create(cls, directory: Path, name: str = "swtel-test-ca") -> CA:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            _builder(_name(name), _name(name), key, days=2, ca=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        path = directory / f"{name}.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(name, key, cert, path)

    def issue(
        self, directory: Path, cn: str, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
        client: bool = False,
    ) -> tuple[Path, Path]:
        """Write ``<cn>.pem`` and ``<cn>.key`` signed by this CA; returns their paths."""
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = (
            _builder(_name(cn), self.cert.subject, key, days=1, ca=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = directory / f"{cn}.pem", directory / f"{cn}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        return cert_path, key_path


@dataclass
class PKI:
    """Everything a TLS test needs, as file paths."""

    ca: Path  # the CA that signed server and client
    server_cert: Path  # CN collector.test, SANs localhost, collector.test, 127.0.0.1, ::1
    server_key: Path
    client_cert: Path  # for mTLS
    client_key: Path
    wrong_ca: Path  # an unrelated CA: verification against it must fail


def make_pki(directory: Path | str) -> PKI:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = CA.create(directory)
    server_cert, server_key = ca.issue(
        directory, "collector.test", dns=("localhost", "collector.test"), ips=("127.0.0.1", "::1")
    )
    client_cert, client_key = ca.issue(directory, "swtel-agent", client=True)
    wrong = CA.create(directory, "unrelated-ca")
    return PKI(ca.cert_path, server_cert, server_key, client_cert, client_key, wrong.cert_path)


# ---------------------------------------------------------------- synthetic counters

PORT_LEAVES = ("in-octets", "in-unicast-pkts", "out-octets", "out-unicast-pkts", "in-errors")


def port_container(port: str) -> Container:
    return Container(OPENCONFIG, f"/interfaces/interface[name={port}]/state/counters")


def make_table(ports: list[str], leaves: tuple[str, ...] = PORT_LEAVES, source: str = "netdev") -> CounterTable:
    specs = [
        CounterSpec(port_container(p), leaf, port=p) for p in ports for leaf in leaves
    ]
    return CounterTable(source, specs)


def make_batch(table: CounterTable, values: list[int], ts_ns: int, indices: list[int] | None = None) -> Batch:
    """A change Batch over ``table`` (``indices`` None: every counter, as a snapshot would)."""
    idx = list(range(len(table))) if indices is None else indices
    return Batch(table.source, ts_ns, table, idx, array("Q", values), [0] * len(idx), bytes(len(idx)),
                 snapshot=indices is None)


# ---------------------------------------------------------------- raw Publish client

def publish(address: str, method: str, messages: list[bytes], metadata=(), credentials=None,
            server_name: str | None = None, timeout: float = 10.0) -> list[bytes]:
    """Send pre-encoded SubscribeResponses on one Publish stream; return the collector's replies."""
    import grpc

    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    channel = (grpc.secure_channel(address, credentials, options=options) if credentials
               else grpc.insecure_channel(address, options=options))
    try:
        call = channel.stream_stream(method, request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        return list(call(iter(messages), metadata=list(metadata), timeout=timeout))
    finally:
        channel.close()
