"""No tracked file points at design notes or paper texts that only exist outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Built from parts so that this file does not name what it forbids.
OUTSIDE = re.compile(
    r"\b(?:" + "|".join(("FLOWER", "SCENARIOS", "ALGORITHMS", "DESIGN")) + r")\.md\b"
    r"|\.\./SCENARIOS\b"
    r"|\bpapers/[\w.-]+\." + "txt"
)
SKIPPED_PARTS = {".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "results"}


def tracked_files() -> list[Path]:
    """The files git tracks, or (no git checkout, as in an unpacked source tree) every file but caches."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
        ).stdout
        files = [ROOT / name for name in out.split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        files = []
    if not files:
        files = [p for p in ROOT.rglob("*") if p.is_file() and not SKIPPED_PARTS & set(p.relative_to(ROOT).parts)]
    return [p for p in files if p.is_file()]


def outside_refs(text: str) -> list[str]:
    return [m.group(0) for m in OUTSIDE.finditer(text)]


def test_the_pattern_catches_each_kind_of_outside_reference():
    names = ["FLOWER", "SCENARIOS", "ALGORITHMS", "DESIGN"]
    text = " ".join(f"({n}.md 3.8)" for n in names) + " see ../" + "SCENARIOS and papers/cflgt." + "txt"
    assert outside_refs(text) == [f"{n}.md" for n in names] + ["../" + "SCENARIOS", "papers/cflgt." + "txt"]
    # The scenario names tuple and a docs path are not references outside the repository.
    assert outside_refs("SCENARIOS: tuple = ...; see docs/running.md; MY_DESIGN.md.bak") == []


def test_the_scan_covers_code_docs_and_config():
    names = {p.relative_to(ROOT).as_posix() for p in tracked_files()}
    assert {"pyproject.toml", "README.md", "strategies/federation.py", "docs/extending.md"} <= names


def test_no_tracked_file_names_a_document_outside_the_repository():
    found = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{lineno}: {ref}" for ref in outside_refs(line)]
    assert not found, "Cite the paper or an in-repository doc instead of:\n" + "\n".join(found)
