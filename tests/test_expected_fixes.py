"""Fixit's expected fixes: a firing example that declares `fixed=` must become exactly that code once its
finding's edits are applied (safe and unsafe alike), and the result must check clean for that rule."""

from pathlib import Path

import pytest

pytest.importorskip("libcst")

from precision_doctor.fix.edits import apply_edits  # noqa: E402
from precision_doctor.rules.catalog import rules  # noqa: E402

CASES = [(r.id, i, ex) for r in rules() for i, ex in enumerate(r.fires) if ex.fixed is not None]


def test_expected_fixes_are_declared():
    assert len({rule_id for rule_id, _, _ in CASES}) >= 5


@pytest.mark.parametrize("rule_id,index,example", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_firing_example_becomes_its_declared_fix(run_check, rule_id, index, example):
    kw = dict(
        target=example.target,
        launcher=example.launcher,
        script_args=example.script_args,
        versions=example.versions,
        machine=example.machine,
        environ=example.env,
        files=example.files,
    )
    result, _ = run_check(example.code, **kw)
    finding = next(f for f in result.findings if f.rule_id == rule_id and f.fix and f.fix.edits)
    after = apply_edits(example.code, [e for e in finding.fix.edits if Path(e.path).name == "train.py"])
    assert after == example.fixed
    again, _ = run_check(after, **kw)
    assert rule_id not in {f.rule_id for f in again.findings}
