"""The control socket's permissions against a process of another user and group (needs root)."""

from __future__ import annotations

import grp
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.namespaces import AgentProcess
from tests.unit.test_security import STATUS_REQUEST


@pytest.mark.root
def test_control_socket_refuses_users_outside_its_group():
    """0660 and group G: a process of another user and group is refused by the kernel; the
    same user with group G gets an answer."""
    group = "swteltest"
    subprocess.run(["groupadd", "-f", "-r", group], check=True)
    gid = grp.getgrnam(group).gr_gid
    nobody = 65534
    # A directory everyone may traverse (pytest's tmp_path is 0700 and would refuse for
    # the wrong reason); the socket's own mode and group decide.
    work = Path(tempfile.mkdtemp(prefix="swtel-sec-"))
    work.chmod(0o755)
    try:
        sock = work / "swtel.sock"
        text = (
            "interval: 100ms\n"
            "sources:\n  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {interval: 100ms}\n"
            f"control: {{socket: {sock}, mode: '0660', group: {group}}}\n"
        )
        agent = AgentProcess(None, text, work)
        try:
            agent.wait_ready()
            st = sock.stat()
            assert (st.st_mode & 0o777, st.st_gid) == (0o660, gid)

            def ask_as(*ids: str) -> subprocess.CompletedProcess:
                # Debian's own python3 (the checkout may sit where the other user cannot read):
                # connect, send one status request frame, print the reply's first bytes.
                frame = struct.pack(">I", len(STATUS_REQUEST)) + STATUS_REQUEST
                code = ("import socket, sys\n"
                        "s = socket.socket(socket.AF_UNIX)\n"
                        f"s.connect({str(sock)!r})\n"
                        f"s.sendall({frame!r})\n"
                        "sys.stdout.write(repr(s.recv(65536)))\n")
                return subprocess.run(["setpriv", *ids, "--", "/usr/bin/python3", "-c", code],
                                      capture_output=True, text=True, timeout=20, cwd="/")

            outsider = ask_as(f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups")
            assert outsider.returncode == 1 and "PermissionError" in outsider.stderr, outsider
            member = ask_as(f"--reuid={nobody}", f"--regid={gid}", "--clear-groups")
            assert member.returncode == 0, member
            assert "version" in member.stdout and "backend" in member.stdout, member.stdout
        finally:
            assert agent.stop() == 0
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)
        subprocess.run(["groupdel", group], check=False)
