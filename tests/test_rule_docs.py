"""docs/rules/ holds one page per rule, generated from the registry (SARIF's helpUri points at them); this
fails when a page is stale, missing or left over. Regenerate with `pytest tests/test_rule_docs.py --update-golden`."""

from pathlib import Path

from precision_doctor.report.ruledoc import DOCS_DIR, rule_pages
from precision_doctor.rules.catalog import rules

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / DOCS_DIR


def test_rule_pages_are_current(update_golden):
    pages = rule_pages(rules())
    if update_golden:
        DOCS.mkdir(parents=True, exist_ok=True)
        for stale in set(p.name for p in DOCS.glob("*.md")) - set(pages):
            (DOCS / stale).unlink()
        for name, text in pages.items():
            if not (DOCS / name).exists() or (DOCS / name).read_text(encoding="utf-8") != text:
                (DOCS / name).write_text(text, encoding="utf-8")
        return
    on_disk = {p.name for p in DOCS.glob("*.md")}
    assert on_disk == set(pages), "docs/rules/ is out of step: run pytest tests/test_rule_docs.py --update-golden"
    for name, text in pages.items():
        assert (DOCS / name).read_text(encoding="utf-8") == text, f"docs/rules/{name} is stale: --update-golden"


def test_every_rule_page_has_the_sections_and_its_error():
    for r in rules():
        page = (DOCS / f"{r.id}.md").read_text(encoding="utf-8")
        for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"):
            assert section in page, (r.id, section)
        assert r.error in page
