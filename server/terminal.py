"""Flower's log lines as umbel relays them: colour codes only on a terminal."""

from __future__ import annotations

import re
import sys

ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def for_terminal(line: str) -> str:
    """``line`` as is on a terminal; without its colour codes when stdout is a file or a pipe."""
    return line if sys.stdout.isatty() else ANSI_COLOUR.sub("", line)
