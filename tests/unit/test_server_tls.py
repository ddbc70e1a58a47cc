"""TLS material of the dial-in server (issue 33, item 5): a certificate replaced in place is
served to the next connection after a reload (SIGHUP's reload_tls), without a restart; new files
that cannot serve leave the running ones; a client certificate the CRL (``tls.crl``) revokes is
refused with UNAUTHENTICATED ``client certificate revoked``, and a CRL renewed in place is taken
on reload. A real server object over loopback; the served certificate read by a TLS handshake."""

from __future__ import annotations

import datetime
import shutil
import socket
import ssl
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from agent import config, tls
from agent.config import HostPort, ServerTls
from agent.exporters.server import GnmiServer, ServerConfig
from agent.store import Store
from tests.gnmi_helpers import CA

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def served_cert(port: int) -> bytes:
    """The certificate a new TLS connection to the server gets (DER), offering h2 as gRPC does."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # only the certificate is read here
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_of(path: Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(serialization.Encoding.DER)


def issue_server(ca: CA, directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return ca.issue(directory, "collector.test", dns=("localhost",), ips=("127.0.0.1",))


def write_crl(ca: CA, path: Path, *revoked: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateRevocationListBuilder().issuer_name(ca.cert.subject)
               .last_update(now - datetime.timedelta(minutes=1)).next_update(now + datetime.timedelta(days=1)))
    for cert_path in revoked:
        serial = x509.load_pem_x509_certificate(cert_path.read_bytes()).serial_number
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build())
    path.write_bytes(builder.sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))


def test_a_certificate_replaced_in_place_is_served_to_the_next_connection_after_reload(tmp_path):
    ca = CA.create(tmp_path)
    cert, key = issue_server(ca, tmp_path / "live")
    new_cert, new_key = issue_server(ca, tmp_path / "renewed")
    srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), tls=ServerTls(cert=str(cert), key=str(key))),
                     "leaf01")
    srv.start(Store())
    try:
        first = der_of(cert)
        assert served_cert(srv.port) == first
        assert srv.reload_tls() is False  # nothing changed: nothing re-read
        # renewed in place (same paths, same inodes: cp writes into the files)
        shutil.copyfile(new_key, key)
        shutil.copyfile(new_cert, cert)
        assert served_cert(srv.port) == first  # not before the reload (SIGHUP)
        assert srv.reload_tls() is True
        assert served_cert(srv.port) == der_of(new_cert) != first
        # gRPC clients too: the CA verifies the new certificate, the server answers
        creds = grpc.ssl_channel_credentials(ca.cert_path.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{srv.port}", creds) as channel:
            reply = gnmi_pb2_grpc.gNMIStub(channel).Capabilities(gnmi_pb2.CapabilityRequest(), timeout=10)
        assert reply.gNMI_version == "0.8.0"
        # a key that is not the certificate's: refused, the running pair kept
        other_cert, other_key = ca.issue(tmp_path / "renewed", "other", dns=("localhost",))
        shutil.copyfile(other_key, key)
        with pytest.raises(tls.TlsError, match="key does not match certificate"):
            srv.reload_tls()
        assert served_cert(srv.port) == der_of(new_cert)
    finally:
        srv.stop(1)


def _capabilities(port: int, ca: CA, client: tuple[Path, Path]) -> tuple[grpc.StatusCode, str]:
    creds = grpc.ssl_channel_credentials(ca.cert_path.read_bytes(), client[1].read_bytes(), client[0].read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{port}", creds,
                             options=[("grpc.ssl_target_name_override", "localhost")]) as channel:
        try:
            gnmi_pb2_grpc.gNMIStub(channel).Capabilities(gnmi_pb2.CapabilityRequest(), timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


def test_a_client_certificate_the_crl_revokes_is_refused_and_a_renewed_crl_is_taken_on_reload(tmp_path):
    ca = CA.create(tmp_path)
    cert, key = issue_server(ca, tmp_path)
    alice = ca.issue(tmp_path, "alice", client=True)
    mallory = ca.issue(tmp_path, "mallory", client=True)
    crl = tmp_path / "ca.crl"
    write_crl(ca, crl, mallory[0])
    cfg = ServerConfig(listen=HostPort("127.0.0.1:0"),
                       tls=ServerTls(cert=str(cert), key=str(key), ca=str(ca.cert_path), crl=str(crl)))
    srv = GnmiServer(cfg, "leaf01")
    srv.start(Store())
    try:
        assert _capabilities(srv.port, ca, alice) == (grpc.StatusCode.OK, "")
        code, details = _capabilities(srv.port, ca, mallory)
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert details.startswith("client certificate revoked (serial ") and details.endswith("CRL ca.crl)")
        assert srv.status()["auth_failures"] == 1
        # alice revoked too: the renewed CRL is taken on reload, for the next RPC
        write_crl(ca, crl, mallory[0], alice[0])
        assert srv.reload_tls() is True
        assert _capabilities(srv.port, ca, alice)[0] == grpc.StatusCode.UNAUTHENTICATED
        # a CRL another CA signed: refused, the running one kept
        write_crl(CA.create(tmp_path, "other-ca"), crl)
        with pytest.raises(tls.TlsError, match="not signed by the CA"):
            srv.reload_tls()
        assert _capabilities(srv.port, ca, alice)[0] == grpc.StatusCode.UNAUTHENTICATED
    finally:
        srv.stop(1)


def test_config_crl_rules(tmp_path):
    ca = CA.create(tmp_path)
    cert, key = issue_server(ca, tmp_path)
    crl = tmp_path / "ca.crl"
    write_crl(ca, crl)

    def problems(tls_yaml: str) -> list[str]:
        with pytest.raises(config.ConfigError) as info:
            config.parse(f"exporters: {{server: {{listen: '127.0.0.1:50051', tls: {{{tls_yaml}}}}}}}\n")
        return info.value.problems

    assert any("tls.crl: needs tls.ca" in p for p in problems(f"cert: {cert}, key: {key}, crl: {crl}"))
    assert any("tls.crl:" in p and "holds no PEM CRL" in p
               for p in problems(f"cert: {cert}, key: {key}, ca: {ca.cert_path}, crl: {cert}"))
    ok = config.parse(f"exporters: {{server: {{listen: '127.0.0.1:50051', tls: {{cert: {cert}, key: {key}, "
                      f"ca: {ca.cert_path}, crl: {crl}}}}}}}\n")
    assert ok.exporters.server.tls.crl == str(crl)


def test_grpc_clients_and_remote_write_refuse_a_server_certificate_the_crl_revokes(tmp_path):
    """tls.crl on the client side: dial-out, the tunnel and OTLP check it by a handshake of
    their own before gRPC connects (tls.check_server_crl, in sender.grpc_channel); remote
    write in its own handshake."""
    from agent.exporters import remote_write as rw
    from agent.exporters.sender import grpc_channel

    ca = CA.create(tmp_path)
    cert, key = issue_server(ca, tmp_path)
    crl = tmp_path / "ca.crl"
    write_crl(ca, crl)
    srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), tls=ServerTls(cert=str(cert), key=str(key))),
                     "leaf01")
    srv.start(Store())
    address = f"127.0.0.1:{srv.port}"
    client = config.ClientTls(ca=str(ca.cert_path), crl=str(crl), server_name="localhost")
    try:
        tls.check_server_crl(address, str(ca.cert_path), str(crl), "localhost")  # nothing revoked
        grpc_channel(address, False, client, []).close()
        write_crl(ca, crl, cert)
        with pytest.raises(tls.TlsError, match=r"server certificate revoked \(CRL ca.crl\)"):
            grpc_channel(address, False, client, [])
        ctx = rw.ssl_context(client)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw, \
                pytest.raises(ssl.SSLCertVerificationError, match="revoked"):
            ctx.wrap_socket(raw, server_hostname="localhost")
    finally:
        srv.stop(1)


def test_a_running_agent_serves_the_renewed_certificate_after_sighup(tmp_path):
    """The whole path: `swtel run` with a TLS server, its certificate and key renewed in
    place, SIGHUP: the next connection gets the new certificate, and the log says so."""
    import signal

    from tests.gnmi_helpers import free_port
    from tests.helpers import OFF, agent_yaml
    from tests.namespaces import AgentProcess

    ca = CA.create(tmp_path)
    cert, key = issue_server(ca, tmp_path / "live")
    new_cert, new_key = issue_server(ca, tmp_path / "renewed")
    port = free_port()
    text = agent_yaml(tmp_path, {"netdev": OFF, "ethtool": OFF, "system": "{interval: 100ms}"}, interval="100ms",
                      exporters=f"  server: {{listen: '127.0.0.1:{port}', tls: {{cert: {cert}, key: {key}}}}}\n")
    agent = AgentProcess(None, text, tmp_path)
    try:
        agent.wait_ready()
        first = der_of(cert)
        assert served_cert(port) == first
        shutil.copyfile(new_key, key)
        shutil.copyfile(new_cert, cert)
        assert served_cert(port) == first  # renewed files are not taken before the reload
        agent.proc.send_signal(signal.SIGHUP)
        agent.wait_for(lambda: "TLS files reloaded" in agent.log.read_text(), 30, "the reload")
        assert served_cert(port) == der_of(new_cert) != first
    finally:
        assert agent.stop() == 0
