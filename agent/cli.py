"""``swtel`` command line: one verb per job; each verb's work lives in its own module."""

from __future__ import annotations

import argparse
import os
import sys

from agent import __version__


def _version() -> str:
    from agent import _backend

    return f"swtel {__version__} (reader: {_backend.NAME})"


def _duration(text: str) -> float:
    """A command-line duration, by the config's rule: ``2s``, ``100ms``, ``1.5``; finite, 0-24h."""
    from agent.config import Duration

    try:
        return float(Duration.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_duration(text: str) -> float:
    """A run length: a duration as above, more than 0 (``inf``, ``nan`` and negatives are refused)."""
    seconds = _duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return seconds


def _refresh(text: str) -> float:
    """``swtel top --interval``: a duration from 200ms to 1h."""
    seconds = _duration(text)
    if not 0.2 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"must be from 200ms to 1h, got {text!r}")
    return seconds


def _count(text: str) -> int:
    """A positive whole number (``--iterations``, ``--limit``)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
    if not 1 <= n <= 1_000_000:
        raise argparse.ArgumentTypeError(f"must be from 1 to 1000000, got {text[:40]!r}")
    return n


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="swtel", description="Switch-side streaming telemetry agent.")
    p.add_argument("--version", "-V", action="store_true",
                   help="print the version and the counter reader in use (C or python), then exit")
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    run = sub.add_parser("run", help="run the agent")
    run.add_argument("-c", "--config", default=None, help="config file (default /etc/swtel/swtel.yaml)")
    run.add_argument("--duration", type=_duration, default=None,
                     help="stop after this long (2s, 100ms, 1m or seconds)")

    val = sub.add_parser("validate", help="check a config file without running the agent")
    val.add_argument("file", nargs="?", default=None, help="config file (default /etc/swtel/swtel.yaml)")
    val.add_argument("-c", "--config", default=None, help="config file, as run, status and top take it")
    val.add_argument("--user", default=None,
                     help="when run as root: warn about files this user cannot read "
                          "(default swtel, the unit's User=)")

    st = sub.add_parser("status", help="ask a running agent over its control socket",
                        description="Exit 0 healthy, 1 unhealthy, 2 no agent answered, 3 the agent is busy, "
                                    "4 the agent answered with an error of its own.")
    st.add_argument("--socket", default=None, type=_nonempty,
                    help="control socket (default from config or /run/swtel/swtel.sock)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("-c", "--config", default=None, help="read the socket path from this config")

    pw = sub.add_parser(
        "passwd", help="add or change a user of the gNMI server's credentials file (salted hashes)",
        description="Write NAME's entry (a salted scrypt hash, never the password) into FILE, the "
                    "file exporters.server.users_file (or password_file) names; created 0640, an "
                    "existing file keeps its mode and owner. The password is asked twice on a "
                    "terminal, or read as one line from stdin with --stdin. A running agent picks "
                    "the change up at its next login check.")
    pw.add_argument("file", help="credentials file, e.g. /etc/swtel/gnmi-users")
    pw.add_argument("name", help="user name (1-64 of A-Z a-z 0-9 _ . @ + -)")
    pw.add_argument("--stdin", action="store_true", help="read the password from stdin (one line)")

    top = sub.add_parser(
        "top", help="live view of a running agent: ports by throughput, errors, drops, PFC, events",
        description="Ask a running agent over its control socket every second and show its ports "
                    "sorted by throughput (utilization bars, error, symbol-error, drop and PFC rates) "
                    "and its open insight events. q quits. Plain lines when stdout is not a terminal.")
    top.add_argument("--socket", default=None, type=_nonempty,
                     help="control socket (default from config or /run/swtel/swtel.sock)")
    top.add_argument("-c", "--config", default=None, help="read the socket path from this config")
    top.add_argument("--fabric", default=None, type=_nonempty, metavar="DIR",
                     help="swtel fabric's directory: its devices (up/down, open events), one picked to view")
    top.add_argument("--interval", type=_refresh, default=1.0,
                     help="time between refreshes, 200ms to 1h (1s, 500ms or seconds; default 1s)")
    top.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    top.add_argument("--iterations", "-n", type=_count, default=None, help="stop after this many refreshes")
    top.add_argument("--limit", type=_count, default=20, help="plain mode: ports per refresh (default 20)")

    col = sub.add_parser("collect", help="a gNMI dial-out collector for development, demos and tests")
    col.add_argument("--listen", required=True, metavar="HOST:PORT",
                     help="where agents dial out to (port 0: a free port)")
    col.add_argument("--insecure", action="store_true", help="plaintext gRPC")
    col.add_argument("--tls-cert", help="server certificate (PEM)")
    col.add_argument("--tls-key", help="server private key (PEM)")
    col.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    col.add_argument("--output", "-o", default="-", help="JSON-lines file ('-' is stdout)")
    col.add_argument("--prometheus", metavar="HOST:PORT", help="serve latest values for Prometheus")
    # agent/tools/prometheus.py NAMINGS (not imported here: the CLI parses without the exporters)
    col.add_argument("--prometheus-names", choices=("cumulus", "paths", "both"), default="cumulus",
                     help="cumulus (default): the names remote write and OTLP send (nvswitch_interface_*); "
                          "paths: names derived from the gNMI paths; both: each value under both")
    col.add_argument("--duration", type=_duration, default=None,
                     help="stop after this long (2s, 100ms, 1m or seconds)")
    col.add_argument("--incidents", action="store_true",
                     help="print on stderr the incidents the agents' events form: a host's RoCE retransmissions "
                          "with the link faults on its paths, by the LLDP neighbours the agents send")

    tun = sub.add_parser(
        "tunnel-server", help="a gRPC tunnel server (openconfig grpctunnel) for development and tests",
        description="Accept tunnel registrations (swtel exporters.tunnel, NVUE grpc-tunnel) and open a "
                    "local listener per registered target: a gNMI client dialing it reaches the target "
                    "through the tunnel. Events are printed as JSON lines.")
    tun.add_argument("--listen", required=True, metavar="HOST:PORT", help="where targets dial in")
    tun.add_argument("--insecure", action="store_true", help="plaintext gRPC")
    tun.add_argument("--tls-cert", help="server certificate (PEM)")
    tun.add_argument("--tls-key", help="server private key (PEM)")
    tun.add_argument("--tls-client-ca", help="require client certificates signed by this CA (mTLS)")
    tun.add_argument("--target-host", default="127.0.0.1",
                     help="address of the listener opened per registered target (default 127.0.0.1)")
    tun.add_argument("--target-port", action="append", default=[], metavar="NAME=PORT",
                     help="pin target NAME's listener to PORT (repeatable; others get a free port)")
    tun.add_argument("--duration", type=_positive_duration, default=None,
                     help="stop after this long (2s, 1m or seconds)")

    fab = sub.add_parser(
        "fabric", help="run a simulated fabric (spine-1, leaf-3, host-1, or a Clos of any size) streaming "
                       "to a local collector",
        description="Start one swtel agent per simulated device (the built-in sim ASIC plugin, one "
                    "shared clock and seed), all dialing out in plaintext to an in-process collector "
                    "on --listen; the collector writes every update as a JSON line. Needs no root.")
    fab.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                     help="collector address (default 127.0.0.1 and a free port)")
    fab.add_argument("--scenario", default="field",
                     help="field (default: symbol errors on spine-1 swp11s1, then leaf-3 uplink "
                          "imbalance), symbol-errors, imbalance, pfc-storm, microburst, link-flap, "
                          "counter-clear, fec-degrade, incast or clean")
    fab.add_argument("--seed", type=int, default=1, help="traffic model seed (default 1)")
    fab.add_argument("--interval", default="100ms", help="poll interval of every agent (default 100ms)")
    fab.add_argument("--duration", type=_positive_duration, default=None,
                     help="stop after this long (2s, 1m or seconds; at most 24h)")
    fab.add_argument("--dir", default=None, help="configs, sockets and logs (default: a new temporary directory)")
    fab.add_argument("--output", "-o", default=None, help="collector JSON lines (default DIR/collector.jsonl)")
    fab.add_argument("--spines", type=int, default=None, metavar="N",
                     help="a Clos fabric of N spines (spine-1...), with --leaves and --hosts; default: the "
                          "field cases' spine-1, leaf-3 and host-1")
    fab.add_argument("--leaves", type=int, default=None, metavar="N",
                     help="leaves (leaf-1...), uplinks spread over the spines")
    fab.add_argument("--hosts", type=int, default=None, metavar="N",
                     help="hosts (host-1...) on the leaves' server ports")
    fab.add_argument("--uplinks", type=int, choices=(4, 8), default=None,
                     help="uplinks per leaf (default 4, 8 with more than 4 spines)")
    fab.add_argument("--fault", action="append", default=[], metavar="DEVICE:SCENARIO",
                     help="a scenario on any device, e.g. leaf-2:microburst@3s:swp1 or "
                          "leaf-2:drops@3s-9s:swp1:ingress-vlan-filter (repeatable; the scenarios: "
                          "docs/asic-plugin.md)")

    demo = sub.add_parser(
        "demo", help="the two field cases on a simulated fabric, in one command (no root, no hardware)",
        description="Starts a local gNMI dial-out collector on 127.0.0.1 (a free port) and a simulated "
                    "fabric, one swtel agent per device, all reading the built-in simulated Spectrum "
                    "ASIC: spine-1, whose port swp11s1 gets a marginal cable (symbol errors, "
                    "throughput dips), host-1, whose RoCE retransmissions rise with it, and leaf-3, "
                    "which from 9 s on pushes about twice its share onto uplink swp62. Shows the "
                    "devices' busiest ports and the insight events as they arrive at the collector, "
                    "for --duration seconds or until Ctrl-C (q in the live view), then prints the "
                    "event timeline and where the raw data went (a temporary directory, or --dir). "
                    "Exit 0 when every agent ran and stopped cleanly.")
    demo.add_argument("--duration", type=_positive_duration, default=None,
                      help="how long to run, from the fabric's start, the time base of every line "
                           "(30s, 2m or seconds; default 30s, at most 24h)")
    demo.add_argument("--scenario", default="field",
                      help="field (default: both cases), symbol-errors, imbalance, pfc-storm, "
                           "microburst, link-flap, counter-clear, fec-degrade, incast (a queue a 1 s "
                           "poller calls calm, beside swtel's peaks) or clean")
    demo.add_argument("--no-tui", action="store_true",
                      help="plain lines (one per raised and cleared event) instead of the live view; "
                           "implied when stdout is not a terminal")
    demo.add_argument("--dir", default=None, help="where configs, sockets, logs and collector data go")
    demo.add_argument("--seed", type=int, default=1, help="traffic model seed (default 1)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # gRPC's own C-core log lines: off unless asked for
    if argv[:1] in (["--version"], ["-V"]):  # only before a verb: `swtel run --version` is an error
        print(_version())
        return 0
    args = _parser().parse_args(argv)
    if args.version:
        print(_version())
        return 0
    try:
        return _dispatch(args)
    except BrokenPipeError:
        # Our reader went away (`swtel demo | head -2`): the verb has cleaned up on its way
        # out; stop quietly, as other command-line tools do, without a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(args: argparse.Namespace) -> int:
    if args.verb == "run":
        # The daemon renders no terminal: keep structlog.dev from importing rich's traceback
        # and pretty-printer machinery (about 4 MiB of RSS, measured) for a console renderer
        # swtel never uses (agent/logs.py has its own). `swtel top`/`demo` are other processes.
        sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
        from agent.malloc import cap_arenas

        cap_arenas()  # before any thread: each would keep a malloc arena of its own
        from agent.runner import run_main

        return run_main(args)
    if args.verb == "validate":
        from agent.control.validate import validate_main

        return validate_main(args)
    if args.verb == "status":
        from agent.control.client import status_main

        return status_main(args)
    if args.verb == "passwd":
        return _passwd(args)
    if args.verb == "top":
        from agent.control.top import top_main

        return top_main(args)
    if args.verb == "collect":
        from agent.tools.collect import collect_main

        return collect_main(args)
    if args.verb == "tunnel-server":
        from agent.tools.tunnel_server import tunnel_server_main

        return tunnel_server_main(args)
    if args.verb == "fabric":
        from agent.tools.fabric import fabric_main

        return fabric_main(args)
    if args.verb == "demo":
        from agent.tools.demo import demo_main

        return demo_main(args)
    return 2


def _passwd(args: argparse.Namespace) -> int:
    from agent import credentials

    if args.stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        import getpass

        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            print("swtel passwd: the passwords differ; nothing written", file=sys.stderr)
            return 1
    if not password:
        print("swtel passwd: an empty password is refused; nothing written", file=sys.stderr)
        return 1
    try:
        replaced = credentials.write_user(args.file, args.name, password)
    except (OSError, credentials.SecretError) as exc:
        print(f"swtel passwd: {exc}", file=sys.stderr)
        return 1
    print(f"{'changed' if replaced else 'added'} {args.name} in {args.file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
