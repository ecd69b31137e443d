"""The files written from the run-config keys (``common.schema.KEYS``), and the command that writes them.

``python -m common.derived`` rewrites ``pyproject.toml``'s ``[tool.flwr.app.config]`` table and
docs/parameters.md from the keys; ``--check`` writes nothing and exits 1 naming each file that
differs (``tests/test_run_config_schema.py`` runs the same comparison).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from pathlib import Path

import tomli_w

from . import schema
from .config import run_config_keys
from .params import spec_of

ROOT = Path(__file__).resolve().parent.parent
CONFIG_TABLE = "[tool.flwr.app.config]"
COMMAND = "python -m common.derived"


def pyproject_table(keys: tuple[schema.Key, ...], groups: tuple[str, ...]) -> str:
    """The ``[tool.flwr.app.config]`` table: each group's keys under its name, each after its help."""
    lines = [
        CONFIG_TABLE,
        f"# Every experiment knob, written by `{COMMAND}` from common/schema.py and each strategy's",
        "# parameters: edit those, not this table. `umbel run --help` lists them;",
        '# `flwr run . --run-config "k=v"` overrides.',
    ]
    for group in groups:
        lines += ["", f"# --- {group}"]
        for key in (k for k in keys if k.group == group):
            lines += textwrap.wrap(key.help, 118, initial_indent="# ", subsequent_indent="# ")
            lines.append(tomli_w.dumps({key.name: key.default}).strip())
    return "\n".join(lines) + "\n"


def with_table(pyproject: str, table: str) -> str:
    """``pyproject`` with its ``[tool.flwr.app.config]`` table (up to the next table) replaced by ``table``.

    Raises
    ------
    ValueError
        If ``pyproject`` has no such table.
    """
    lines = pyproject.splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == CONFIG_TABLE)
    except StopIteration:
        raise ValueError(
            f"The 'pyproject' parameter of with_table must hold {CONFIG_TABLE}. Got a file without it instead."
        ) from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    while end > start + 1 and lines[end - 1].lstrip().startswith("#") and lines[end - 2].strip() == "":
        end -= 1  # a comment block right above the next table belongs to it
    tail = lines[end:]
    return "".join(lines[:start]) + table + ("\n" if tail else "") + "".join(tail)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def parameters_page(registry: dict[str, type], keys: tuple[schema.Key, ...]) -> str:
    """docs/parameters.md: one table per strategy, of the parameters it reads, from their declarations."""
    by_name = {key.name: key for key in keys}
    out = [
        "# Strategy parameters",
        "",
        f"Written by `{COMMAND}` from each strategy's parameters dataclass (its fields' declarations,",
        "`common.params.param`) and the shared keys of `common/schema.py`: edit those, not this page.",
        "Every key is also a flag of `umbel run` and a key of `pyproject.toml`'s `[tool.flwr.app.config]`.",
        "A shared key (no strategy prefix) is read by several strategies; its allowed values are each",
        "strategy's own. Paper: the paper's value or rule where umbel's default departs from it.",
    ]
    for name, cls in registry.items():
        params = cls.params_type  # type: ignore[attr-defined]  # every registered class has one
        names = run_config_keys(params)
        rows = []
        for f in dataclasses.fields(params):
            spec = spec_of(f)
            if not f.init or spec is None:
                continue
            key = by_name[names[f.name]]
            allowed = spec.allowed(f.default) if spec.checked else "see the help"
            if key.choices and not spec.choices:
                allowed = "one of {" + ", ".join(repr(c) for c in sorted(key.choices)) + "}"
            rows.append(
                f"| `{key.name}` | `{key.default!r}` | {_cell(allowed)} | {_cell(key.help)} | {_cell(spec.paper)} |"
            )
        out += ["", f"## {name} ({cls.__name__})", ""]
        if not rows:
            out.append("No parameters of its own; it reads the run's keys only.")
            continue
        out += ["| key | default | allowed | meaning | paper |", "| --- | --- | --- | --- | --- |", *rows]
    return "\n".join(out) + "\n"


def derived_files() -> dict[Path, str]:
    """Each derived file's path and the text the registry gives it now."""
    from strategies import REGISTRY  # needs Flower; common itself does not

    pyproject = ROOT / "pyproject.toml"
    return {
        pyproject: with_table(pyproject.read_text(), pyproject_table(schema.KEYS, schema.GROUPS)),
        ROOT / "docs" / "parameters.md": parameters_page(dict(REGISTRY), schema.KEYS),
    }


def stale() -> list[Path]:
    """The derived files whose text differs from what the registry gives them."""
    return [path for path, text in derived_files().items() if not path.exists() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    """Write the derived files, or with ``--check`` name the stale ones (exit 1)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale file")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"{path.relative_to(ROOT)} differs from the registry: run `{COMMAND}`", file=sys.stderr)
        return 1 if old else 0
    for path, text in derived_files().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
