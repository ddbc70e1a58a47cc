"""What a caller may do: the gRPC authorization policy (gRPC proposal A43, the JSON gNSI authz
carries) for RPCs, and path rules in the spirit of gNSI pathz for what a Get or Subscribe reads.

grpcio (1.51 and current) has no Python API for authorization policies, so this module
evaluates the format itself; gRPC-free, so it is tested without a server. The server calls
:meth:`Policy.decide` from its guard, after the caller is named (agent/gnmi/auth.py), and
hands a :class:`Access` to Get and Subscribe, which leave out what it denies.

A43 as applied here: a principal is matched against the caller's name (the user, or the
certificate's CN/SAN as ``cert_identity`` says) and, when the caller has both, its
certificate's identity too; an anonymous caller's principal is ``""`` (A43's "no client
certificate"). ``*`` matches any non-empty value, ``abc*`` a prefix, ``*abc`` a suffix,
anything else exactly (principals, paths and header values alike). Unknown fields make the
policy invalid (A43: a newer field must never be ignored).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.pathgrammar import format_path, split, split_origin

MAX_POLICY_BYTES = 1 << 20  # a policy is a few KiB; a bigger file is a mistake, not a policy
OPENCONFIG, SWTEL = "openconfig", "swtel"  # agent.counters' origins (floor 0 would do; kept literal here)
_RESERVED_HEADERS = ("host", "connection", "keep-alive", "proxy-connection", "te", "transfer-encoding",
                     "upgrade")  # A43: Host and hop-by-hop headers are not matched

Elems = tuple[tuple[str, dict[str, str]], ...]


class PolicyError(ValueError):
    """An invalid policy: the message names the field (``allow_rules[1].request.paths[0]``)."""


def matches(pattern: str, value: str) -> bool:
    """A43's string match: ``*`` presence (non-empty), ``abc*`` prefix, ``*abc`` suffix, else exact."""
    if pattern == "*":
        return value != ""
    if pattern.startswith("*"):
        return value.endswith(pattern[1:])
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    return value == pattern


def _any(patterns: Iterable[str], values: Iterable[str]) -> bool:
    values = tuple(values)
    return any(matches(p, v) for p in patterns for v in values)


@dataclass(frozen=True)
class Rule:
    """One rule: ``principals``/``paths`` None when absent (no check); ``headers`` all must match."""

    name: str
    principals: tuple[str, ...] | None = None
    paths: tuple[str, ...] | None = None
    headers: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def match(self, principals: Sequence[str], method: str, headers: Mapping[str, str]) -> bool:
        if self.principals and not _any(self.principals, principals):
            return False
        if self.paths and not _any(self.paths, (method,)):
            return False
        for key, values in self.headers:
            value = headers.get(key)
            if value is None or not _any(values, (value,)):
                return False
        return True


def _fields(obj: Any, where: str, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
    if not isinstance(obj, dict):
        raise PolicyError(f"{where}: expected an object")
    for key in obj:
        if key not in known:
            raise PolicyError(f"{where}: unknown field {key!r} (known: {', '.join(known)})")
    for key in required:
        if key not in obj:
            raise PolicyError(f"{where}: {key} is required")
    return obj


def _strings(obj: Any, where: str) -> tuple[str, ...]:
    if not isinstance(obj, list) or not all(isinstance(s, str) for s in obj):
        raise PolicyError(f"{where}: expected a list of strings")
    return tuple(obj)


def _rule(obj: Any, where: str) -> Rule:
    obj = _fields(obj, where, ("name", "source", "request"), ("name",))
    if not isinstance(obj["name"], str) or not obj["name"]:
        raise PolicyError(f"{where}.name: expected a non-empty string")
    principals = paths = None
    headers: list[tuple[str, tuple[str, ...]]] = []
    if "source" in obj:
        source = _fields(obj["source"], f"{where}.source", ("principals",))
        if "principals" in source:
            principals = _strings(source["principals"], f"{where}.source.principals")
    if "request" in obj:
        request = _fields(obj["request"], f"{where}.request", ("paths", "headers"))
        if "paths" in request:
            paths = _strings(request["paths"], f"{where}.request.paths")
        if "headers" in request:
            if not isinstance(request["headers"], list):
                raise PolicyError(f"{where}.request.headers: expected a list")
            for i, header in enumerate(request["headers"]):
                at = f"{where}.request.headers[{i}]"
                header = _fields(header, at, ("key", "values"), ("key", "values"))
                key = header["key"]
                if not isinstance(key, str) or not key:
                    raise PolicyError(f"{at}.key: expected a non-empty string")
                key = key.lower()  # HTTP/2 header names are lower-case on the wire
                if key.startswith((":", "grpc-")) or key in _RESERVED_HEADERS:
                    raise PolicyError(f"{at}.key: {key!r} cannot be matched (pseudo, grpc- and "
                                      "hop-by-hop headers and Host are not supported)")
                values = _strings(header["values"], f"{at}.values")
                if not values:
                    raise PolicyError(f"{at}.values: at least one value")
                headers.append((key, values))
    return Rule(obj["name"], principals, paths, tuple(headers))


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str | None  # the rule that decided; None: no allow rule matched (default deny)


@dataclass(frozen=True)
class Policy:
    """A parsed authorization policy: deny rules first, then allow rules, default deny."""

    name: str
    deny: tuple[Rule, ...]
    allow: tuple[Rule, ...]

    @classmethod
    def parse(cls, text: str | bytes) -> Policy:
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
            raise PolicyError(f"not JSON: {exc}") from None
        obj = _fields(obj, "policy", ("name", "deny_rules", "allow_rules"), ("name", "allow_rules"))
        if not isinstance(obj["name"], str) or not obj["name"]:
            raise PolicyError("name: expected a non-empty string")
        out: dict[str, tuple[Rule, ...]] = {}
        for key in ("deny_rules", "allow_rules"):
            rules = obj.get(key, [])
            if not isinstance(rules, list):
                raise PolicyError(f"{key}: expected a list of rules")
            out[key] = tuple(_rule(r, f"{key}[{i}]") for i, r in enumerate(rules))
        return cls(obj["name"], out["deny_rules"], out["allow_rules"])

    @classmethod
    def load(cls, path: str) -> Policy:
        """The policy in ``path``; :class:`PolicyError` (naming the file) when unreadable or invalid."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO never blocks the reload
        except OSError as exc:
            raise PolicyError(f"policy file {path}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PolicyError(f"policy file {path}: not a regular file")
            data = f.read(MAX_POLICY_BYTES + 1)
        if len(data) > MAX_POLICY_BYTES:
            raise PolicyError(f"policy file {path}: larger than {MAX_POLICY_BYTES} bytes")
        try:
            return cls.parse(data)
        except PolicyError as exc:
            raise PolicyError(f"policy file {path}: {exc}") from None

    def decide(self, principals: Sequence[str], method: str,
               metadata: Iterable[tuple[str, Any]] | None = ()) -> Decision:
        """``principals``: the caller's names (``[""]`` when anonymous); ``method`` the RPC's
        full name (``/gnmi.gNMI/Get``); ``metadata`` its headers (multi-valued joined by ``,``)."""
        headers: dict[str, str] = {}
        for key, value in metadata or ():
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            key = key.lower()
            headers[key] = f"{headers[key]},{text}" if key in headers else text
        for rule in self.deny:
            if rule.match(principals, method, headers):
                return Decision(False, rule.name)
        for rule in self.allow:
            if rule.match(principals, method, headers):
                return Decision(True, rule.name)
        return Decision(False, None)


# ---------------------------------------------------------------- path rules (pathz's spirit)


def parse_path(text: str) -> tuple[str, Elems]:
    """``/interfaces`` (OpenConfig) or ``swtel:/system`` -> (origin, elems); ValueError when malformed."""
    origin, path = split_origin(text.strip())
    origin = origin or OPENCONFIG
    if origin not in (OPENCONFIG, SWTEL):
        raise ValueError(f"unknown origin {origin!r} (openconfig or swtel)")
    if not path.startswith("/"):
        raise ValueError("expected an absolute path (/...)")
    elems = tuple(split(path))
    if any(name == "..." for name, _ in elems):
        raise ValueError("'...' is not allowed in a path rule")
    return origin, elems


def _under(rule: Elems, path: Elems) -> bool:
    """``path`` lies at or below ``rule`` (``*`` in a rule name or key value matches any)."""
    if len(path) < len(rule):
        return False
    for (rname, rkeys), (name, keys) in zip(rule, path, strict=False):
        if rname not in ("*", name):
            return False
        for k, v in rkeys.items():
            if v != "*" and keys.get(k) != v:
                return False
    return True


def _overlaps(rule: Elems, request: Elems) -> bool:
    """Some concrete path could lie under both ``rule`` and the request pattern (``*``, ``...``)."""
    for i, (rname, rkeys) in enumerate(rule):
        if i >= len(request):
            return True  # the rule lies below the request
        name, keys = request[i]
        if name == "...":
            return True
        if "*" not in (rname, name) and rname != name:
            return False
        for k, v in rkeys.items():
            other = keys.get(k)
            if other is not None and "*" not in (v, other) and v != other:
                return False
    return True


def _rank(elems: Elems) -> tuple[int, int]:
    """pathz's best match: the longest path, then the more definite keys."""
    return len(elems), sum(1 for _, keys in elems for v in keys.values() if v != "*")


@dataclass(frozen=True)
class PathRule:
    principals: tuple[str, ...]
    allow: tuple[tuple[str, Elems], ...]
    deny: tuple[tuple[str, Elems], ...]


class Access:
    """What one principal may read: the best-matching rule path decides (longest, then more
    definite keys, deny over allow on a tie); no rule path above a value: denied."""

    def __init__(self, rule: PathRule | None) -> None:
        self.rule = rule
        entries = [] if rule is None else [(o, e, True) for o, e in rule.allow] + [(o, e, False) for o, e in rule.deny]
        # best first: rank, then deny before allow
        self._entries = sorted(entries, key=lambda x: (_rank(x[1]), not x[2]), reverse=True)
        self._cache: dict[tuple[str, str, str], bool] = {}

    def allows(self, origin: str, elems: Elems) -> bool:
        """A concrete path (container elements + leaf elements) may be read."""
        for o, rule_elems, allow in self._entries:
            if o == origin and _under(rule_elems, elems):
                return allow
        return False

    def allows_leaf(self, origin: str, container: str, leaf: str) -> bool:
        """:meth:`allows` for a Store value, cached (bounded): the server asks once per leaf."""
        key = (origin, container, leaf)
        hit = self._cache.get(key)
        if hit is None:
            hit = self.allows(origin, tuple(split(container)) + tuple(split("/" + leaf)))
            if len(self._cache) < 100_000:
                self._cache[key] = hit
        return hit

    def sees_container(self, origin: str, container: str) -> bool:
        """Something at or below ``container`` may be read (a delete of it is worth sending)."""
        elems = tuple(split(container))
        return self.allows(origin, elems) or any(
            o == origin and allow and len(e) > len(elems) and _overlaps(e, elems) for o, e, allow in self._entries)

    def refuses(self, origin: str, request: Elems) -> bool:
        """Every path a request pattern could reach is denied: PERMISSION_DENIED rather than an
        empty answer. False when in doubt (wildcards): the reply is then filtered value by value."""
        if any(name == "..." for name, _ in request):
            return not any(o == origin and allow for o, _, allow in self._entries)
        decided = None
        for o, rule_elems, allow in self._entries:
            if o == origin and _under(rule_elems, request):
                decided = (rule_elems, allow)
                break
        if decided is not None and decided[1]:
            return False
        depth = len(decided[0]) if decided else -1
        # an allow deeper than the deciding deny (or than nothing) that the request could reach
        return not any(o == origin and allow and len(e) > depth and _overlaps(e, request)
                       for o, e, allow in self._entries)


EVERYTHING = None  # access_for's answer when no path rules are configured: no filtering


class PathRules:
    """The configured rules in order: the first whose principals match the caller applies."""

    def __init__(self, rules: Sequence[PathRule]) -> None:
        self.rules = tuple(rules)
        self._access: dict[tuple[str, ...], Access] = {}

    @classmethod
    def from_config(cls, entries: Iterable[Any]) -> PathRules:
        """``entries``: objects with ``principals``, ``allow``, ``deny`` (lists of strings); ValueError
        naming ``[i].allow[j]`` when a path is malformed."""
        out = []
        for i, entry in enumerate(entries):
            parsed: dict[str, tuple[tuple[str, Elems], ...]] = {}
            for key in ("allow", "deny"):
                items = []
                for j, text in enumerate(getattr(entry, key)):
                    try:
                        items.append(parse_path(text))
                    except ValueError as exc:
                        raise ValueError(f"[{i}].{key}[{j}]: {exc}") from None
                parsed[key] = tuple(items)
            out.append(PathRule(tuple(entry.principals), parsed["allow"], parsed["deny"]))
        return cls(out)

    def access_for(self, principals: Sequence[str]) -> Access | None:
        """None (read everything) without rules; else the first matching rule's Access, one
        that denies everything when no rule names the caller (pathz's implicit deny)."""
        if not self.rules:
            return EVERYTHING
        key = tuple(principals)
        access = self._access.get(key)
        if access is None:
            rule = next((r for r in self.rules if _any(r.principals, principals)), None)
            access = Access(rule)
            if len(self._access) < 4096:
                self._access[key] = access
        return access


def shown_path(origin: str, elems: Elems) -> str:
    text = format_path(elems)
    return text if origin == OPENCONFIG else f"{origin}:{text}"
