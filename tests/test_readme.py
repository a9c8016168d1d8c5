"""The README's rule table is generated from the registry; this fails when it is stale.
Regenerate with `python -m pytest tests/test_readme.py --update-golden`."""

import re
from pathlib import Path

from precision_doctor.report.ruledoc import rules_markdown
from precision_doctor.rules.catalog import rules

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START, END = "<!-- rules:start -->", "<!-- rules:end -->"


def test_rule_table_is_current(update_golden):
    text = README.read_text(encoding="utf-8")
    table = rules_markdown(rules())
    current = text[text.index(START) + len(START) : text.index(END)].strip()
    if update_golden and current != table:
        README.write_text(text.replace(current, table), encoding="utf-8")
        return
    assert current == table, "README rule table is stale: run pytest tests/test_readme.py --update-golden"


def test_ci_runs_the_readme_test_command():
    readme = README.read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(.*?)```", readme, re.S)
    test_command = next(c.strip() for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci


def test_readme_documents_every_exit_code_and_json_key():
    readme = README.read_text(encoding="utf-8")
    for fragment in ("`0`", "`1`", "`2`", "`3`", '"version": 1', '"findings"', '"unknowns"', '"facts"'):
        assert fragment in readme
