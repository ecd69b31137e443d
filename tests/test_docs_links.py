"""Every relative link in README.md and docs/ leads to a file, and every #anchor to a heading."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.+)$", text, re.MULTILINE)}


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def test_anchor_rule_matches_github():
    assert github_anchor("FedClust, PACFL, FL+HC") == "fedclust-pacfl-flhc"
    assert github_anchor("Plain `flwr run`") == "plain-flwr-run"
    assert github_anchor("FLIC, FedMedian and Sattler's CFL") == "flic-fedmedian-and-sattlers-cfl"


def test_the_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# Top\n[x](missing.md) [y](#top) [z](#nowhere)\n```\n[not](a-link.md)\n```\n")
    assert links(page) == ["missing.md", "#top", "#nowhere"]
    assert anchors(page) == {"top"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert broken == []


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    headings = [line for line in lines if line.startswith("## ")]
    order = ["two commands", "Running a strategy", "Your own data", "Deploying", "Strategies"]
    positions = [next(i for i, h in enumerate(headings) if key in h) for key in order]
    assert positions == sorted(positions)
