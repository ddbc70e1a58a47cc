"""Messages that keep the cause (issue 38 item 6): the mTLS hint names the client
certificate keys; the socket permission hint names the group to join."""

from __future__ import annotations

import os
import socket

from agent.config import ClientTls, HostPort
from agent.control import client
from agent.exporters.dialout import DialoutConfig, DialoutExporter


def exporter(**tls) -> DialoutExporter:
    cfg = DialoutConfig(name="c1", address=HostPort("192.0.2.10:57400"), protocol="nokia",
                        tls=ClientTls(ca="/etc/swtel/ca.pem", **tls))
    return DialoutExporter(cfg, "leaf01")


def test_a_handshake_failure_without_a_client_certificate_names_tls_cert_and_key():
    hint = exporter()._hint("StatusCode.UNAVAILABLE: SSL handshake failed", reached=False)
    assert "tls.ca='/etc/swtel/ca.pem'" in hint and "set tls.cert and tls.key" in hint
    hint = exporter()._hint("failed to connect to all addresses", reached=False)
    assert "tls.cert and tls.key" in hint


def test_with_a_client_certificate_the_mtls_advice_is_not_given():
    e = exporter(cert="/etc/swtel/client.pem", key="/etc/swtel/client.key")
    assert "tls.cert" not in e._hint("SSL handshake failed", reached=False)


def test_permission_denied_names_the_group_to_join(tmp_path):
    path = str(tmp_path / "s.sock")
    srv = socket.socket(socket.AF_UNIX)
    try:
        srv.bind(path)
        import grp

        group = grp.getgrgid(os.stat(path).st_gid).gr_name
        text = client._why_not(path, PermissionError(13, "Permission denied"))
        assert f"the socket is group {group}'s: add yourself to it (sudo usermod -aG {group} $USER" in text
    finally:
        srv.close()
