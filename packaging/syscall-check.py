#!/usr/bin/python3
"""Check an strace log of the agent against a unit's SystemCallFilter= lines.

    syscall-check.py UNIT_FILE STRACE_LOG

systemd is not PID 1 on the CI machine, so the unit's seccomp filter cannot be
exercised for real; instead the agent runs under strace and every syscall it
made is evaluated with systemd's own semantics: the first SystemCallFilter=
line decides allow- or deny-list, later lines add (allow) or remove (~) names,
and groups are expanded with "systemd-analyze syscall-filter". Syscalls made
before the agent's own execve (by setpriv, which systemd's User= replaces) are
ignored. Exits 1 if any syscall would be refused.
"""

import re
import subprocess
import sys


def groups() -> dict[str, list[str]]:
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True,
                         text=True, check=True).stdout
    table: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = line.split()[0]
            table[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            table[current].append(line.strip())
    return table


def expand(name: str, table: dict[str, list[str]], seen: set[str] | None = None) -> set[str]:
    if not name.startswith("@"):
        return {name}
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    names: set[str] = set()
    for member in table.get(name, []):
        names |= expand(member, table, seen)
    return names


def allowed(unit_file: str, table: dict[str, list[str]]) -> set[str]:
    lines = [ln.split("=", 1)[1].strip() for ln in open(unit_file)
             if ln.startswith("SystemCallFilter=")]
    if not lines or lines[0].startswith("~"):
        sys.exit(f"{unit_file}: expected an allow-list SystemCallFilter= first")
    result = expand("@default", table)  # always permitted
    for value in lines:
        deny = value.startswith("~")
        names = set().union(*(expand(n, table) for n in value.lstrip("~").split()))
        result = result - names if deny else result | names
    return result


def used(strace_log: str) -> set[str]:
    calls: set[str] = set()
    started = False
    for line in open(strace_log):
        m = re.match(r"^(?:\[pid\s+)?\d*\]?\s*([a-z0-9_]+)\(", line)
        if not m:
            continue
        if not started:
            # The agent starts at python3's execve (setpriv's exec of /usr/bin/swtel).
            started = 'execve("/usr/bin/swtel"' in line
            continue
        calls.add(m.group(1))
    if not started:
        sys.exit(f"{strace_log}: no execve of /usr/bin/swtel found")
    return calls


def main() -> int:
    unit_file, strace_log = sys.argv[1:3]
    table = groups()
    ok = allowed(unit_file, table)
    seen = used(strace_log)
    refused = sorted(seen - ok)
    print(f"{len(seen)} distinct syscalls made by the agent; refused by {unit_file}: {refused or 'none'}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
