"""The mutation run's figures from mutmut's ``mutants/`` folder: each module's counts and every survivor's edit.

``python -m benchmarks.mutation [--mutants DIR] [--survivors]`` reads what ``mutmut run`` left (each
module's ``.meta`` file: the exit code of its tests on each mutant) and the mutated sources beside
them, and prints the per-module table of docs/mutation.md, then, with ``--survivors``, each
survivor's edit (the lines of its function that differ from the original) and its kind:

- ``message``: only a string inside a ``raise``, a log or warning call, a ``check_*`` call (the
  parameter's and owner's names its error gives) or an f-string changed (an error's or log's
  wording, or a name in it);
- ``string``: only another string changed (a value: a metric's or linkage's name, a key);
- ``code``: anything else.

Exit codes as mutmut 3 reads them: 1 killed, 0 survived, 33 no tests, 34 skipped, 36, 24 and -24
timeout, None not run.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

KILLED, SURVIVED = 1, 0
TIMEOUTS = frozenset({36, 24, -24, -9})
NO_TESTS = 33
MUTANT = re.compile(r"^(?P<base>.+)__mutmut_(?P<n>\d+)$")
LOGGING = frozenset({"log", "warn", "warning", "info", "debug", "error", "exception", "critical"})


@dataclass(frozen=True)
class Survivor:
    """One surviving mutant: ``name`` as mutmut names it, the ``edit`` (changed lines) and its ``kind``."""

    module: str
    name: str
    edit: tuple[str, ...]
    kind: str


def status(code: int | None) -> str:
    """``killed``, ``timeout``, ``survived``, ``no tests``, ``not run`` or ``other`` for a mutmut exit code."""
    if code is None:
        return "not run"
    if code == KILLED:
        return "killed"
    if code in TIMEOUTS:
        return "timeout"
    if code == SURVIVED:
        return "survived"
    return "no tests" if code == NO_TESTS else "other"


def module_counts(mutants: Path) -> dict[str, Counter[str]]:
    """Each mutated module's (``common/clustering/x.py``) count of mutants by :func:`status`."""
    out: dict[str, Counter[str]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if codes:
            out[str(meta.relative_to(mutants))[: -len(".meta")]] = Counter(status(c) for c in codes.values())
    return out


def kill_rate(counts: Counter[str]) -> float | None:
    """(killed + timeout) / (killed + timeout + survived), or None when none of them was run."""
    caught = counts["killed"] + counts["timeout"]
    judged = caught + counts["survived"]
    return caught / judged if judged else None


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and "__mutmut_" in n.name}


def _blank_strings(node: ast.AST) -> str:
    class Blank(ast.NodeTransformer):
        def visit_Constant(self, c: ast.Constant) -> ast.Constant:
            return ast.Constant("") if isinstance(c.value, str) else c

    copy = Blank().visit(ast.parse(ast.unparse(node)))
    for n in ast.walk(copy):
        if isinstance(n, ast.FunctionDef):
            n.name = ""
    return ast.dump(copy)


def _message_lines(node: ast.AST) -> set[int]:
    """Line numbers inside a raise, a log, warning or ``check_*`` call, or an f-string (where a message is written)."""
    lines: set[int] = set()
    for n in ast.walk(node):
        inside = isinstance(n, ast.Raise | ast.JoinedStr)
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            inside = name in LOGGING or name.startswith("check_")
        if inside and isinstance(n, ast.stmt | ast.expr):
            lines.update(range(n.lineno, (n.end_lineno or n.lineno) + 1))
    return lines


def kind_of(original: ast.FunctionDef, mutant: ast.FunctionDef, source: list[str]) -> tuple[str, tuple[str, ...]]:
    """The survivor's kind (see the module's doc) and its changed lines (``-`` original, ``+`` mutant)."""
    before = source[original.lineno - 1 : original.end_lineno]
    after = source[mutant.lineno - 1 : mutant.end_lineno]
    after[0] = after[0].replace(mutant.name, original.name, 1)
    edit = tuple(
        line.rstrip()
        for line in difflib.unified_diff(before, after, n=0, lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )
    if _blank_strings(original) != _blank_strings(mutant):
        return "code", edit
    changed = {mutant.lineno + i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b}
    return ("message" if changed and changed <= _message_lines(mutant) else "string"), edit


def survivors(mutants: Path) -> list[Survivor]:
    """Every surviving mutant of every module, with its edit and kind, in file and mutant order."""
    out: list[Survivor] = []
    for meta in sorted(mutants.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        alive = [k for k, c in codes.items() if c == SURVIVED]
        if not alive:
            continue
        path = meta.with_suffix("")
        text = path.read_text()
        functions, lines = _functions(ast.parse(text)), text.splitlines()
        module = str(path.relative_to(mutants))
        for key in sorted(alive, key=_order):
            name = key.rsplit(".", 1)[-1]
            match = MUTANT.match(name)
            original = functions.get(f"{match['base']}__mutmut_orig") if match else None
            mutant = functions.get(name)
            if original is None or mutant is None:
                out.append(Survivor(module, key, (), "code"))
                continue
            kind, edit = kind_of(original, mutant, lines)
            out.append(Survivor(module, key, edit, kind))
    return out


def _order(key: str) -> tuple[str, int]:
    match = MUTANT.match(key.rsplit(".", 1)[-1])
    return (match["base"], int(match["n"])) if match else (key, 0)


def table(counts: dict[str, Counter[str]], kinds: dict[str, Counter[str]] | None = None) -> str:
    """The per-module table (markdown), with an ``all`` row; with ``kinds``, the survivors by kind."""
    head = ["module", "mutants", "not run", "killed", "timeout", "survived", "no tests", "kill rate"]
    if kinds is not None:
        head += ["survivors: message", "string", "code"]
    rows = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    total: Counter[str] = Counter()
    total_kinds: Counter[str] = Counter()
    for module, c in [*counts.items(), ("**all**", None)]:
        if c is None:
            c, k = total, total_kinds
        else:
            total.update(c)
            k = (kinds or {}).get(module, Counter())
            total_kinds.update(k)
        rate = kill_rate(c)
        cells = [
            f"`{module}`" if module != "**all**" else module,
            f"{sum(c.values()):,}",
            *(f"{c[s]:,}" for s in ("not run", "killed", "timeout", "survived", "no tests")),
            "–" if rate is None else f"{rate:.0%}",
        ]
        if kinds is not None:
            cells += [f"{k[s]:,}" for s in ("message", "string", "code")]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def listing(alive: list[Survivor]) -> str:
    """The survivors as a markdown page section: per module, one line each (name, kind, the first edit)."""
    lines: list[str] = []
    module = None
    for s in alive:
        if s.module != module:
            module = s.module
            lines += ["", f"### `{module}`", ""]
        old = next((e[1:].strip() for e in s.edit if e.startswith("-")), "")
        new = next((e[1:].strip() for e in s.edit if e.startswith("+")), "")
        edit = (f"`{old}` → `{new}`" if old or new else "(no edit found)").replace("|", "\\|")
        lines.append(f"- `{s.name.rsplit('.', 1)[-1]}` ({s.kind}): {edit}")
    return "\n".join(lines).lstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> None:
    """Print the table (and with ``--survivors`` each survivor) of a mutmut run's folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's folder (default: ./mutants)")
    parser.add_argument("--survivors", action="store_true", help="also list every survivor's edit and kind")
    parser.add_argument("--kinds", default="message,string,code", help="with --survivors: the kinds listed")
    parser.add_argument("--listing", type=Path, help="also write every survivor, one line each, to this markdown file")
    args = parser.parse_args(argv)
    counts = module_counts(args.mutants)
    alive = survivors(args.mutants)
    kinds: dict[str, Counter[str]] = {}
    for s in alive:
        kinds.setdefault(s.module, Counter())[s.kind] += 1
    print(table(counts, kinds))
    if args.listing:
        args.listing.write_text(listing(alive))
    if args.survivors:
        listed = set(args.kinds.split(","))
        for s in alive:
            if s.kind in listed:
                print(f"\n{s.module} {s.name} [{s.kind}]")
                print("\n".join(f"    {line}" for line in s.edit))


if __name__ == "__main__":
    main()
