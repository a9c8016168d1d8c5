"""The README is a user guide: short enough to read, with a table of contents, every relative link (to a file or a
heading, in the README, CONTRIBUTING.md and docs/) resolving, and the test command CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 600


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as dashes."""
    found, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            heading = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", heading).replace(" ", "-"))
    return found


def test_the_readme_is_a_guide_with_contents():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"{len(lines)} lines: move detail to docs/ and link it"
    assert any(line.startswith("**Contents**") for line in lines[:30])


def test_every_relative_link_resolves():
    broken = []
    for guide in GUIDES:
        text = guide.read_text(encoding="utf-8")
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (guide.parent / path).resolve() if path else guide
            if not target.exists():
                broken.append(f"{guide.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target.read_text(encoding="utf-8")):
                broken.append(f"{guide.relative_to(ROOT)}: {link} (no such heading)")
    assert not broken, "\n".join(broken)


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
