"""``swtel`` command line: one verb per job; each verb's work lives in its own module."""

from __future__ import annotations

import argparse
import sys

from agent import __version__


def _version() -> str:
    from agent import _backend

    return f"swtel {__version__} (reader: {_backend.NAME})"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="swtel", description="Switch-side streaming telemetry agent.")
    p.add_argument("--version", action="version", version="%(prog)s")  # replaced in main()
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    run = sub.add_parser("run", help="run the agent")
    run.add_argument("-c", "--config", default=None, help="config file (default /etc/swtel/swtel.yaml)")
    run.add_argument("--duration", type=float, default=None, help="stop after this many seconds")

    val = sub.add_parser("validate", help="check a config file without running the agent")
    val.add_argument("file", nargs="?", default=None)

    st = sub.add_parser("status", help="ask a running agent over its control socket")
    st.add_argument("--socket", default=None, help="control socket (default from config or /run/swtel/swtel.sock)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("-c", "--config", default=None, help="read the socket path from this config")

    col = sub.add_parser("collect", help="a gNMI dial-out collector for development, demos and tests")
    col.add_argument("--listen", required=True, metavar="HOST:PORT")
    col.add_argument("--insecure", action="store_true", help="plaintext gRPC")
    col.add_argument("--tls-cert")
    col.add_argument("--tls-key")
    col.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    col.add_argument("--output", "-o", default="-", help="JSON-lines file ('-' is stdout)")
    col.add_argument("--prometheus", metavar="HOST:PORT", help="serve latest values for Prometheus")
    col.add_argument("--duration", type=float, default=None, help="stop after this many seconds")

    demo = sub.add_parser("demo", help="run against the built-in simulated switch")
    demo.add_argument("--duration", type=float, default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--version" in argv or "-V" in argv:
        print(_version())
        return 0
    args = _parser().parse_args(argv)
    if args.verb == "run":
        from agent.runner import run_main

        return run_main(args)
    if args.verb == "validate":
        from agent.control.validate import validate_main

        return validate_main(args)
    if args.verb == "status":
        from agent.control.client import status_main

        return status_main(args)
    if args.verb == "collect":
        from agent.gnmi.collector import collect_main

        return collect_main(args)
    if args.verb == "demo":
        from agent.runner import demo_main

        return demo_main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
