"""The exporters' base class, the registry they add themselves to, and the rules they share.
The contract the engine feeds them by (and the insights pipeline) is agent/listener.py.

All ``on_*`` methods run on the engine's tick thread: they must not block
(enqueue and return). ``start``/``stop``/``status`` run on the main thread.
"""

from __future__ import annotations

import importlib
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from agent import registry
from agent.config import ClientTls, check_files
from agent.credentials import SecretError, read_secret, secret_problem
from agent.listener import Listener  # noqa: F401 - re-exported: the contract exporters implement

MACHINERY = True  # the exporters' base class, not a plugin (agent/registry.py load_plugins)

REGISTRY: dict[str, type[Exporter]] = {}


def register(cls: type[Exporter]) -> type[Exporter]:
    """Class decorator: make an exporter available under its config section
    ``exporters.<cls.config_name>``, which the class carries (see :class:`Exporter`)."""
    REGISTRY[cls.config_name] = cls
    registry.EXPORTERS.add(registry.Section(
        cls.config_name, cls.config_class, check=cls.check, many=cls.many, optional=cls.optional,
        doc=cls.doc, doc_type=cls.doc_type, doc_default=cls.doc_default, plugin=cls))
    return cls


def lazy_imports(namespace: dict[str, Any], then: Callable[[], Mapping[str, Any]] | None = None,
                 **imports: str) -> Callable[[], None]:
    """An exporter's ``_load``: on its first call (when an exporter is built, not when a config
    is parsed: parsing imports every exporter's file, and an agent without, say, OTLP must not
    carry the gRPC stack) each ``name="package.module"`` or ``name="package.module:attribute"``
    is imported into ``namespace`` (the exporter module's ``globals()``, where each name is
    declared ``None`` until then), in the order given; ``then()`` returns more globals built
    from them (messages, constants). Later calls do nothing."""
    loaded = False

    def load() -> None:
        nonlocal loaded
        if loaded:
            return
        for name, spec in imports.items():
            module, _, attribute = spec.partition(":")
            value = importlib.import_module(module)
            namespace[name] = getattr(value, attribute) if attribute else value
        if then is not None:
            namespace.update(then())
        loaded = True

    return load


class Exporter(Listener):
    """What an exporter class carries besides being a :class:`Listener` (agent/listener.py,
    whose hooks it inherits with their no-op defaults): its config section and how the runner
    builds it from that section."""

    config_name: ClassVar[str]  # its section: exporters.<config_name>
    config_class: ClassVar[type]  # the dataclass of the section's keys
    many: ClassVar[bool] = False  # a list of destinations (exporters.dialout[])
    optional: ClassVar[bool] = False  # off until its section is present (exporters.jsonl)
    #: the section's row in docs/config.md
    doc: ClassVar[str] = ""
    doc_type: ClassVar[str] = "mapping"
    doc_default: ClassVar[str] = ""

    @classmethod
    def check(cls, section: Any, where: str, problems: list[str], cfg: Any) -> None:
        """The section's rules that its types cannot express: append one problem per broken
        rule, each starting with its YAML path (``where``: ``exporters.<name>``; for a list, the
        whole list)."""

    @classmethod
    def listeners_for(cls, section: Any, cfg: Any) -> dict[str, Listener]:
        """The listeners the section asks for (none when it is off), keyed by a name stable
        across reloads: ``<config_name>`` or, for a list, ``<config_name>:<item name>``.
        Default for ``many``: one per destination, built by :meth:`for_destination`; a single
        exporter (``many`` False) overrides this."""
        if not cls.many:
            raise NotImplementedError(f"{cls.__name__}.listeners_for")
        return {f"{cls.config_name}:{dest.name}": cls.for_destination(dest, cfg) for dest in section}

    @classmethod
    def for_destination(cls, dest: Any, cfg: Any) -> Listener:
        """(``many``) One destination's listener: ``cls(dest, cfg.target)``, logging at the
        config's rate limit (a ReconnectingSender's ``log_limiter``)."""
        listener = cls(dest, cfg.target)  # type: ignore[call-arg]
        listener.log_limiter.period_s = float(cfg.log.rate_limit)  # type: ignore[attr-defined]
        return listener

    @classmethod
    def built_from(cls, key: str, cfg: Any) -> Any:
        """What the listener under ``key`` was built from: a reload that leaves it equal keeps
        the running listener (no reconnect, no new snapshot)."""
        section = getattr(cfg.exporters, cls.config_name)
        if cls.many:
            name = key.partition(":")[2]
            section = next((item for item in section if item.name == name), None)
        return (section, cfg.target)

    @classmethod
    def shares_resources(cls, key: str, old: Any, new: Any) -> bool:
        """Whether the new listener under ``key`` needs what the running one holds (a port, a
        session), so that the running one must stop first."""
        return False


# ---------------------------------------------------------------- rules the exporters share


def check_tls(problems: list[str], where: str, insecure: bool, tls: ClientTls) -> None:
    """A TLS client's files (unless ``insecure``): readable PEM files, cert and key together."""
    if not insecure:
        check_files(problems, f"{where}.tls", tls.ca, tls.cert, tls.key, tls.crl)
        if bool(tls.cert) != bool(tls.key):
            problems.append(f"{where}.tls: cert and key go together (mTLS)")


def read_text_secret(path: str, what: str) -> str:
    """The one reader of every password and token file an exporter sends (dial-out's
    password, remote write's password and token), on the rules of credentials.read_secret
    (a regular file of at most 64 KiB that no other user can read, surrounding whitespace
    stripped), and non-empty printable ASCII: all that gRPC metadata and HTTP headers carry.
    Raises SecretError naming ``what`` and the file."""
    data = read_secret(path, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SecretError(f"{what} {path}: not valid UTF-8 (byte {exc.start})") from None
    if not text:
        raise SecretError(f"{what} {path}: empty (or only whitespace)")
    if not (text.isascii() and text.isprintable()):
        raise SecretError(f"{what} {path}: printable ASCII only (gRPC metadata and HTTP headers carry nothing else)")
    return text


def check_secret(problems: list[str], where: str, path: str) -> None:
    """validate's side of the one secret reader: the same rules, the problem under ``where``."""
    problem = secret_problem(path)
    if problem:
        problems.append(f"{where}: {problem}")


def check_auth(problems: list[str], where: str, username: str | None, password_file: str | None) -> None:
    if password_file and not username:
        problems.append(f"{where}.password_file: needs username")
    if password_file:
        check_secret(problems, f"{where}.password_file", password_file)


def is_loopback(host: str) -> bool:
    """True for an address only this host reaches (127.0.0.0/8, ::1, localhost). A host name
    other than ``localhost`` is not: what it resolves to can change after validation."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_plaintext(problems: list[str], where: str, *, what: str, host: str, plaintext: bool,
                    opt_in: bool, credentials: tuple[str, ...] = (), listen: bool = False,
                    use_tls: str = "use TLS") -> None:
    """The one plaintext rule of every exporter and the server. Plaintext (``plaintext``) to
    or on a host other hosts can reach needs the explicit opt-in ``insecure_remote: true``
    (``opt_in``); credentials (``credentials``: the keys that carry them) never travel in
    plaintext beyond loopback, whatever the opt-in says. ``where``: the key naming the host."""
    if not plaintext or is_loopback(host):
        return
    shown = host or "*"
    place = f"on {shown}, which other hosts can reach" if listen else f"to {shown}, not a loopback address"
    if credentials:
        problems.append(f"{where}: {' and '.join(credentials)} would travel in plaintext {place}: "
                        f"{use_tls} (credentials never go in clear beyond loopback, whatever insecure_remote says)")
    elif not opt_in:
        problems.append(f"{where}: plaintext {what} {place}: {use_tls}"
                        f"{', listen on 127.0.0.1' if listen else ''}, or set insecure_remote: true")
