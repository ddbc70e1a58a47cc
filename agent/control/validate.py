"""``swtel validate [FILE]``: check a config file without running the agent."""

from __future__ import annotations

import sys
from typing import Any

from agent import config


def validate_main(args: Any) -> int:
    path = getattr(args, "file", None) or config.DEFAULT_PATH
    try:
        config.load(path)
    except config.ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{path}: {len(exc.problems)} problem(s)", file=sys.stderr)
        return 1
    print("OK")
    return 0
