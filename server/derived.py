"""The files written from the run-config keys (``strategies.schema.KEYS``), and the command that writes them.

``python -m server.derived`` rewrites ``pyproject.toml``'s ``[tool.flwr.app.config]`` table,
docs/parameters.md and the parameter tables of docs/strategies/ (between ``<!-- parameters: NAME, ... -->``
and ``<!-- /parameters -->``) from the keys, and the ClientApp's query table (``client/signals/queries.py``)
from the strategies' declared ``queries``; ``--check`` writes nothing and exits 1 naming each file that
differs (``tests/test_run_config_schema.py`` runs the same comparison).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import tomli_w

from common import keys as protocol
from common.params import run_config_keys
from common.params import spec_of
from common.schema import Key
from strategies import REGISTRY
from strategies import schema
from strategies.queries import client_table

ROOT = Path(__file__).resolve().parent.parent
CONFIG_TABLE = "[tool.flwr.app.config]"
COMMAND = "python -m server.derived"


def pyproject_table(keys: tuple[Key, ...], groups: tuple[str, ...]) -> str:
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


def table(registry: Mapping[str, type], names: Iterable[str], keys: tuple[Key, ...]) -> list[str]:
    """The markdown table of the keys the strategies ``names`` read, each once, from their declarations.

    Columns: key, default, allowed values (the first reader's range), meaning, paper. Empty when
    the strategies read no key of their own.
    """
    by_name = {key.name: key for key in keys}
    rows: dict[str, str] = {}
    for name in names:
        params = registry[name].params_type  # type: ignore[attr-defined]  # every registered class has one
        keyed = run_config_keys(params)
        for f in dataclasses.fields(params):
            spec = spec_of(f)
            if not f.init or spec is None or keyed[f.name] in rows:
                continue
            key = by_name[keyed[f.name]]
            if key.choices:
                allowed = "one of {" + ", ".join(repr(c) for c in sorted(key.choices)) + "}"
            else:
                allowed = spec.allowed(f.default) if spec.checked else "see meaning"
            cells = (f"`{key.name}`", f"`{key.default!r}`", allowed, key.help, spec.paper)
            rows[key.name] = "| " + " | ".join(_cell(c) for c in cells) + " |"
    if not rows:
        return []
    return ["| key | default | allowed | meaning | paper |", "| --- | --- | --- | --- | --- |", *rows.values()]


def parameters_page(registry: Mapping[str, type], keys: tuple[Key, ...]) -> str:
    """docs/parameters.md: one table per strategy, of the parameters it reads, from their declarations."""
    out = [
        "# Strategy parameters",
        "",
        f"Written by `{COMMAND}` from each strategy's parameters dataclass (its fields' declarations,",
        "`common.params.param`) and the shared keys of `common.params.ClusteringParams`: edit those, not this page.",
        "Every key is also a flag of `umbel run` and a key of `pyproject.toml`'s `[tool.flwr.app.config]`.",
        "A shared key (no strategy prefix) is read by several strategies; its allowed values are each",
        "strategy's own. Paper: the paper's value or rule where umbel's default departs from it.",
    ]
    for name, cls in registry.items():
        rows = table(registry, [name], keys)
        out += ["", f"## {name} ({cls.__name__})", ""]
        out += rows or ["No parameters of its own; it reads the run's keys only."]
    return "\n".join(out) + "\n"


MARKED = re.compile(r"(<!-- parameters: (?P<names>[a-z0-9, -]+) -->\n)(?P<body>.*?)(<!-- /parameters -->)", re.DOTALL)


def with_tables(page: str, registry: Mapping[str, type], keys: tuple[Key, ...]) -> str:
    """``page`` with each ``<!-- parameters: a, b -->`` ... ``<!-- /parameters -->`` block's table rewritten.

    Raises
    ------
    ValueError
        If a block names a strategy the registry does not have.
    """

    def fill(match: re.Match[str]) -> str:
        names = [n.strip() for n in match["names"].split(",") if n.strip()]
        unknown = [n for n in names if n not in registry]
        if unknown:
            raise ValueError(
                f"The parameter block of a docs page must name registered strategies ({sorted(registry)}). "
                f"Got {unknown} instead."
            )
        return match[1] + "\n".join(table(registry, names, keys)) + "\n" + match[4]

    return MARKED.sub(fill, page)


HANDLERS = "client.signals"


def queries_module(table: Mapping[str, str]) -> str:
    """``client/signals/queries.py``: ``QUERIES``, action -> handler, for ``table`` (``client_table``'s).

    Raises
    ------
    ValueError
        If a handler is not a ``"client.signals.<module>:<function>"`` name.
    """
    constants = {v: k for k, v in vars(protocol).items() if k.endswith("_ACTION") and isinstance(v, str)}
    modules, rows = set(), []
    for action, handler in table.items():
        module, _, function = handler.partition(":")
        package, _, name = module.rpartition(".")
        if package != HANDLERS or not name or not function.isidentifier():
            raise ValueError(
                f"The handler of query '{action}' must be a '{HANDLERS}.<module>:<function>' name. "
                f"Got {handler!r} instead."
            )
        modules.add(name)
        key = f"keys.{constants[action]}" if action in constants else repr(action)
        rows.append(f"    {key}: {name}.{function},")
    return "\n".join(
        [
            '"""The signal queries the ClientApp answers, by action: every registered strategy\'s ``queries``.',
            "",
            f"Written by ``{COMMAND}`` from the strategies (``strategies.queries.client_table``):",
            "declare a signal in the ``queries`` of the strategy that asks for it, not here.",
            '"""',
            "",
            "from __future__ import annotations",
            "",
            "from common import keys",
            "",
            f"from . import {', '.join(sorted(modules))}",
            "from .messages import Handler",
            "",
            "QUERIES: dict[str, Handler] = {",
            *rows,
            "}",
            "",
        ]
    )


def derived_files() -> dict[Path, str]:
    """Each derived file's path and the text the registry gives it now."""
    pyproject = ROOT / "pyproject.toml"
    files = {
        pyproject: with_table(pyproject.read_text(), pyproject_table(schema.KEYS, schema.GROUPS)),
        ROOT / "docs" / "parameters.md": parameters_page(REGISTRY, schema.KEYS),
        ROOT / "client" / "signals" / "queries.py": queries_module(client_table(REGISTRY.values())),
    }
    for page in sorted((ROOT / "docs" / "strategies").glob("*.md")):
        files[page] = with_tables(page.read_text(), REGISTRY, schema.KEYS)
    return files


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
