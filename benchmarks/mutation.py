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

``--rerun DIR`` folds in a second run of the same mutants on a wider test selection (its decided
results win), and ``--verdicts DIR`` the triage of each survivor (:func:`read_verdicts`): the table
of survivors by verdict, and each listed survivor's verdict and reason.

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
VERDICTS = ("killed", "equivalent", "harmless", "open")
"""``killed``: a test (the reason names it) fails on it; ``equivalent``: no input changes a result;
``harmless``: a result changes only within rounding, or only a diagnostic; ``open``: a gap not closed."""
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


def results(mutants: Path, rerun: Path | None = None) -> dict[str, dict[str, int | None]]:
    """Each mutated module's (``common/clustering/x.py``) exit code by mutant key.

    With ``rerun``, a second mutmut folder of the same mutants (run again on a wider test selection),
    each of its decided codes replaces the first folder's.
    """
    out: dict[str, dict[str, int | None]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        again = rerun / meta.relative_to(mutants) if rerun is not None else None
        if again is not None and again.exists():
            later = json.loads(again.read_text())["exit_code_by_key"]
            codes = {k: later[k] if later.get(k) is not None else c for k, c in codes.items()}
        if codes:
            out[str(meta.relative_to(mutants))[: -len(".meta")]] = codes
    return out


def module_counts(codes: dict[str, dict[str, int | None]]) -> dict[str, Counter[str]]:
    """Each module's count of mutants by :func:`status`, from :func:`results`."""
    return {module: Counter(status(c) for c in by_key.values()) for module, by_key in codes.items()}


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


def survivors(mutants: Path, codes: dict[str, dict[str, int | None]] | None = None) -> list[Survivor]:
    """Every surviving mutant of every module (by ``codes``, default :func:`results`), with its edit and kind."""
    out: list[Survivor] = []
    for module, by_key in (results(mutants) if codes is None else codes).items():
        alive = [k for k, c in by_key.items() if c == SURVIVED]
        if not alive:
            continue
        text = (mutants / module).read_text()
        functions, lines = _functions(ast.parse(text)), text.splitlines()
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


def read_verdicts(folder: Path) -> dict[str, tuple[str, str]]:
    """The triage, by mutmut's full mutant name: one file per module, ``<dotted module>.tsv``
    (``common.clustering.cut.tsv``), each line ``name<TAB>verdict<TAB>reason``, ``#`` starts a comment.

    ``name`` is the mutant's name within its module (``x_cut__mutmut_3``) and ``verdict`` one of
    :data:`VERDICTS`.
    """
    out: dict[str, tuple[str, str]] = {}
    for path in sorted(folder.glob("*.tsv")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            cells = line.split("\t")
            if len(cells) != 3 or cells[1] not in VERDICTS or not cells[2].strip():
                raise ValueError(
                    f"{path}:{number} must be 'name<TAB>verdict<TAB>reason' with a verdict in {VERDICTS}"
                    f" and a reason. Got {line!r} instead."
                )
            name = f"{path.stem}.{cells[0]}"
            if name in out:
                raise ValueError(f"{path}:{number} judges {cells[0]!r} a second time.")
            out[name] = (cells[1], cells[2].strip())
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


def listing(alive: list[Survivor], verdicts: dict[str, tuple[str, str]] | None = None) -> str:
    """The survivors as a markdown page section: per module, one line each (name, kind, the first edit).

    With ``verdicts`` (:func:`read_verdicts`), each line ends with its verdict and reason, or *untriaged*.
    """
    lines: list[str] = []
    module = None
    for s in alive:
        if s.module != module:
            module = s.module
            lines += ["", f"### `{module}`", ""]
        old = next((e[1:].strip() for e in s.edit if e.startswith("-")), "")
        new = next((e[1:].strip() for e in s.edit if e.startswith("+")), "")
        edit = (f"`{old}` → `{new}`" if old or new else "(no edit found)").replace("|", "\\|")
        line = f"- `{s.name.rsplit('.', 1)[-1]}` ({s.kind}): {edit}"
        if verdicts is not None:
            verdict, reason = verdicts.get(s.name, ("untriaged", ""))
            line += f" — **{verdict}**" + (f": {reason}" if reason else "")
        lines.append(line)
    return "\n".join(lines).lstrip("\n") + "\n"


def verdict_table(alive: list[Survivor], verdicts: dict[str, tuple[str, str]]) -> str:
    """Each module's survivors by verdict (markdown), with an ``all`` row."""
    head = [*VERDICTS, "untriaged"]
    by_module: dict[str, Counter[str]] = {}
    for s in alive:
        by_module.setdefault(s.module, Counter())[verdicts[s.name][0] if s.name in verdicts else "untriaged"] += 1
    total = sum(by_module.values(), Counter())
    rows = ["| module | survivors | " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) + 1)]
    for module, c in [*((f"`{m}`", c) for m, c in by_module.items()), ("**all**", total)]:
        rows.append(f"| {module} | {sum(c.values()):,} | " + " | ".join(f"{c[v]:,}" for v in head) + " |")
    return "\n".join(rows)


HEADER = """# Survivors of the mutation run

Every mutant that survived its tests in the run that [mutation.md](mutation.md) describes, one line
each: mutmut's name, its kind (`message`, `string` or `code`), its first changed line and, where it
was triaged, the verdict and why. Written by `python -m benchmarks.mutation --listing`.

"""


def main(argv: list[str] | None = None) -> None:
    """Print the table (and with ``--survivors`` each survivor) of a mutmut run's folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's folder (default: ./mutants)")
    parser.add_argument("--survivors", action="store_true", help="also list every survivor's edit and kind")
    parser.add_argument("--kinds", default="message,string,code", help="with --survivors: the kinds listed")
    parser.add_argument("--listing", type=Path, help="also write every survivor, one line each, to this markdown file")
    parser.add_argument("--rerun", type=Path, help="a second folder of the same mutants whose decided results win")
    parser.add_argument("--verdicts", type=Path, help="a folder of triage files (see read_verdicts)")
    args = parser.parse_args(argv)
    codes = results(args.mutants, args.rerun)
    alive = survivors(args.mutants, codes)
    kinds: dict[str, Counter[str]] = {}
    for s in alive:
        kinds.setdefault(s.module, Counter())[s.kind] += 1
    print(table(module_counts(codes), kinds))
    verdicts = read_verdicts(args.verdicts) if args.verdicts else None
    if verdicts is not None:
        print("\n" + verdict_table(alive, verdicts))
    if args.listing:
        args.listing.write_text(HEADER + listing(alive, verdicts))
    if args.survivors:
        listed = set(args.kinds.split(","))
        for s in alive:
            if s.kind in listed:
                print(f"\n{s.module} {s.name} [{s.kind}]")
                print("\n".join(f"    {line}" for line in s.edit))


if __name__ == "__main__":
    main()
