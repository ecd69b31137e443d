import json

import pytest

from benchmarks.records import Record, Table, write_record
from benchmarks.report import (
    RECORDS_DIR,
    RESULTS_PAGE,
    SECTION_ORDER,
    main,
    parse_markdown_table,
    read_records,
    render,
    save_tables,
    tables_from_markdown,
)


def test_docs_results_page_is_what_the_records_generate():
    assert RESULTS_PAGE.read_text() == render(read_records(RECORDS_DIR)), (
        "docs/RESULTS.md differs from the records in docs/results/data; run: python -m benchmarks.report"
    )


def record(name, section, rows, **kw):
    return Record(
        name=name,
        section=section,
        command=f"python -m benchmarks.{name}",
        tables=[Table(f"{name} table", ["a", "b"], rows, notes=kw.pop("notes", ""))],
        machine="2 cores",
        load="1.5",
        date="2026-11-25",
        **kw,
    )


def test_each_table_once_grouped_by_section_with_command_machine_and_load(tmp_path):
    write_record(record("zeta", "A new section", [["x", 1]]), tmp_path)
    write_record(record("alpha", SECTION_ORDER[1], [["y", 0.25], ["z", None]], notes="over 20 clients"), tmp_path)
    write_record(record("beta", SECTION_ORDER[1], [["w", True]]), tmp_path)
    page = render(read_records(tmp_path))
    assert page.count("### alpha table") == page.count("### beta table") == page.count("### zeta table") == 1
    # known sections first in their order, then the others; records by name within a section
    assert page.index(f"## {SECTION_ORDER[1]}") < page.index("### alpha table") < page.index("### beta table")
    assert page.index("### beta table") < page.index("## A new section") < page.index("### zeta table")
    assert page.count(f"## {SECTION_ORDER[1]}") == 1
    assert "| y | 0.25 |" in page and "| z | n/a |" in page and "| w | yes |" in page
    assert "over 20 clients" in page
    assert "Measured with `python -m benchmarks.alpha` on 2 cores; load average 1.5; 2026-11-25." in page


def test_check_fails_on_a_hand_edited_page_and_passes_once_regenerated(tmp_path, capsys):
    data = tmp_path / "data"
    write_record(record("alpha", "S", [["x", 1]]), data)
    page = tmp_path / "RESULTS.md"
    assert main(["--records", str(data), "--out", str(page)]) == 0
    assert main(["--check", "--records", str(data), "--out", str(page)]) == 0
    page.write_text(page.read_text().replace("| x | 1 |", "| x | 2 |"))
    assert main(["--check", "--records", str(data), "--out", str(page)]) == 1
    assert "run: python -m benchmarks.report" in capsys.readouterr().err
    write_record(record("beta", "S", [["y", 3]]), data)  # a new record makes the page stale too
    main(["--records", str(data), "--out", str(page)])
    assert "| y | 3 |" in page.read_text()


def test_markdown_tables_parse_to_columns_and_rows():
    text = "intro\n\n| loop | mean (s) |\n|---|---:|\n| umbel \\| FedAvg | 0.358 |\n| Flower | 0.359 |\n\nafter"
    assert parse_markdown_table(text) == (["loop", "mean (s)"], [["umbel | FedAvg", "0.358"], ["Flower", "0.359"]])
    with pytest.raises(ValueError, match="must hold a Markdown table"):
        parse_markdown_table("no table here")


def test_save_tables_records_the_command_and_the_load(tmp_path):
    path = save_tables("bench", "S", [Table("t", ["a"], [[1]])], "0.50", tmp_path)
    data = json.loads(path.read_text())
    assert data["command"].startswith("python -m ") and data["load"].startswith("0.50")
    assert data["tables"][0]["rows"] == [[1]]


def test_every_committed_record_has_provenance():
    for rec in read_records(RECORDS_DIR):
        assert rec.command and rec.machine and rec.date and rec.tables, rec.name


def test_a_benchmarks_markdown_becomes_one_table_per_heading_with_its_prose_as_notes():
    text = (
        "Command: `python -m benchmarks.compare`\n\n#### label-groups-1\n\n| strategy | acc |\n|---|---|\n"
        "| fedavg | 0.66 |\n\nover 100 clients\n\n#### rotation-4\n\n| strategy | acc |\n|---|---|\n| flic | 0.74 |\n"
    )
    first, second = tables_from_markdown("quick preset", text)
    assert (first.title, first.rows, first.notes) == (
        "quick preset: label-groups-1",
        [["fedavg", "0.66"]],
        "over 100 clients",
    )
    assert (second.title, second.rows, second.notes) == ("quick preset: rotation-4", [["flic", "0.74"]], "")
    (only,) = tables_from_markdown(
        "overhead", "Command: `x`\n\n| loop | s |\n|---|---|\n| umbel | 0.3 |\n\nRatio 1.0\n"
    )
    assert only.title == "overhead" and only.notes == "Ratio 1.0"
