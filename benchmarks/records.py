"""Measured results as small JSON records, the source ``docs/RESULTS.md`` is generated from.

A benchmark that produces a figure for the docs writes one record per table with
``write_record``; ``docs/results/data/<name>.json`` is committed (a few kB of figures, never a
run's output folder). The record carries everything a reader needs to trust the table: the
command that produced it, the machine and its load while it ran, and when.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import KW_ONLY, asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RECORDS_DIR = Path(__file__).resolve().parent.parent / "docs" / "results" / "data"


@dataclass
class Table:
    """One measured table.

    Parameters
    ----------
    title : str
        A heading, without numbering.
    columns : sequence of str
        Column names.
    rows : sequence of sequence
        One row per line, ``len(columns)`` JSON values each (str, int, float or None).
    notes : str
        Markdown shown under the table: what each figure covers (how many clients, which rounds).
    """

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    notes: str = ""

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(
                    f"Row {i} of table {self.title!r} has {len(row)} values; the table has {len(self.columns)} columns."
                )


@dataclass
class Record:
    """A benchmark's measured tables with their provenance."""

    name: str
    section: str
    command: str
    tables: list[Table]
    _: KW_ONLY
    machine: str = field(default_factory=lambda: machine_description())
    load: str = ""
    date: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written to disk."""
        return asdict(self)


def machine_description() -> str:
    """Cores, memory and platform of this machine, in words."""
    mem = ""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages * size / 2**30:.0f} GiB memory"
    except (ValueError, OSError, AttributeError):
        pass
    return f"{os.cpu_count()} cores{mem}, {platform.system()} {platform.machine()}, Python {platform.python_version()}"


def load_average() -> str:
    """The 1-minute load average now, as text (empty where the platform has none)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (OSError, AttributeError):
        return ""


def cpu_ticks(stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """``(steal, total)`` CPU ticks of the machine so far (Linux's ``/proc/stat``); None where it has none.

    Steal is the time a hypervisor gave this machine's CPUs to others: the same work then takes more
    wall time than CPU time.
    """
    try:
        fields = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if fields[:1] != ["cpu"] or len(fields) < 9:
        return None
    ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the CPU time between two :func:`cpu_ticks` readings that was stolen; None if unknown."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def current_command() -> str:
    """The command line that is running, as a reader would retype it."""
    return "python -m " + shlex.join([_module_of(sys.argv[0]), *sys.argv[1:]])


def _module_of(path: str) -> str:
    p = Path(path).resolve()
    root = RECORDS_DIR.parent.parent.parent
    try:
        rel = p.relative_to(root).with_suffix("")
    except ValueError:
        return path
    return ".".join(rel.parts)


def write_record(record: Record, directory: Path | None = None) -> Path:
    """Write ``record`` as ``<directory>/<name>.json`` and return the path."""
    target = Path(directory or RECORDS_DIR)
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{record.name}.json"
    path.write_text(json.dumps(record.to_dict(), indent=1) + "\n")
    return path


def read_record(path: Path) -> Record:
    """Read a record written by ``write_record``; a malformed file names the field that is wrong."""
    data = json.loads(Path(path).read_text())
    try:
        tables = [Table(**t) for t in data.pop("tables")]
        return Record(tables=tables, **data)
    except (KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a results record ({err}).") from err


def merge_record(old: Record, new: Record, key: Callable[[Sequence[Any]], Hashable]) -> Record:
    """``old`` with ``new``'s rows in place of its rows of the same ``key`` (others kept, new ones
    appended), ``new``'s notes after its notes, and both commands and loads.

    Both records hold one table; the title and columns are ``old``'s.
    """
    kept, fresh = old.tables[0], {key(r): r for r in new.tables[0].rows}
    rows = [fresh.pop(key(r), r) for r in kept.rows] + list(fresh.values())
    notes = "\n\n".join(n for n in (kept.notes, new.tables[0].notes) if n)
    table = Table(kept.title, kept.columns, rows, notes)
    return Record(old.name, old.section, f"{old.command}; {new.command}", [table], load=f"{old.load}; {new.load}")
