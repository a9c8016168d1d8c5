"""Per-rule snapshots, as ruff keeps them: every firing example's finding rendered (severity, message, evidence,
the error the job would hit, the fix with its diff) into tests/snapshots/rules/PDxxx.snap. A change to what a rule
says shows up as a snapshot diff to review. Regenerate with `pytest tests/test_rule_snapshots.py --update-golden`,
read the diff, commit."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("libcst")

from precision_doctor.fix.edits import EditFailed, FileChange, apply_edits  # noqa: E402
from precision_doctor.model.findings import Finding  # noqa: E402
from precision_doctor.rules.catalog import rules  # noqa: E402

from .conftest import check_example  # noqa: E402

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots" / "rules"
RULES = [r for r in rules() if r.fires]


def _diff(finding: Finding, folder: Path) -> list[str]:
    """The fix's edits, file by file, as the unified diff `fix --diff` prints (FileChange.diff)."""
    by_file: dict[str, list] = {}
    for edit in finding.fix.edits:
        by_file.setdefault(edit.path, []).append(edit)
    out = []
    for path, edits in sorted(by_file.items()):
        before = Path(path).read_text(encoding="utf-8")
        try:
            after = apply_edits(before, edits)
        except EditFailed as exc:
            out.append(f"    (not applied: {exc})")
            continue
        name = str(Path(path).relative_to(folder)) if Path(path).is_absolute() else path
        out += ["    " + line for line in FileChange(path, before, after).diff(name).splitlines()]
    return out


def render(finding: Finding, folder: Path) -> str:
    lines = [f"{finding.severity} {finding.rule_id} [{finding.phase}, {finding.confidence}] {finding.message}"]
    for e in finding.evidence:
        where = f"{Path(e.location.path).name}:{e.location.line}" if e.location else "-"
        lines.append(f"  evidence {where} ({e.origin}) {e.excerpt!r}: {e.note}")
        lines += [f"    via {step}" for step in e.trail]
    lines.append(f"  error: {finding.error}")
    if finding.fix is not None:
        lines.append(f"  fix ({finding.fix.applicability}): {finding.fix.description}")
        lines += [f"    run: {c}" for c in finding.fix.commands]
        lines += [f"    note: {n}" for n in finding.fix.notes]
        if finding.fix.edits:
            lines += _diff(finding, folder)
    return "\n".join(lines).replace(str(folder), "<project>")


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_snapshot(run_check, tmp_path, rule, update_golden):
    parts = []
    for index, example in enumerate(rule.fires):
        result, _ = check_example(run_check, example)
        hits = [f for f in result.findings if f.rule_id == rule.id]
        header = f"## fires[{index}]" + (f": {example.note}" if example.note else "")
        parts.append("\n".join([header, *(render(f, tmp_path) for f in hits)]))
    text = f"# {rule.id} {rule.name}: what each firing example reports\n\n" + "\n\n".join(parts) + "\n"
    path = SNAPSHOTS / f"{rule.id}.snap"
    if update_golden:
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path.name}: run pytest {Path(__file__).name} --update-golden, review, commit")
    assert path.read_text(encoding="utf-8") == text, (
        f"{rule.id} reports differently: run pytest {Path(__file__).name} --update-golden and review the diff"
    )


def test_no_snapshot_outlives_its_rule():
    known = {f"{r.id}.snap" for r in RULES}
    stale = sorted(p.name for p in SNAPSHOTS.glob("*.snap") if p.name not in known)
    assert not stale, f"snapshots of rules that no longer exist: {stale}; delete them"
