"""Every rule's declared examples: each firing example fires, each look-alike stays silent, and a firing example
whose finding carries a fix `fix` can apply declares the code that fix must produce (`fixed=`), as Fixit refuses an
autofix without an expected result."""

from pathlib import Path

import pytest

from precision_doctor.model.findings import Applicability
from precision_doctor.rules.catalog import rules

from .conftest import check_example

CASES = [(r.id, "fires", i, ex) for r in rules() for i, ex in enumerate(r.fires)] + [
    (r.id, "silent", i, ex) for r in rules() for i, ex in enumerate(r.silent)
]


@pytest.mark.parametrize("rule_id,expect,index,example", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_rule_example(run_check, rule_id, expect, index, example):
    result, _ = check_example(run_check, example)
    assert not result.crashed, result.crashed
    hits = [f for f in result.findings if f.rule_id == rule_id]
    if expect == "fires":
        assert hits, f"{rule_id} did not fire on:\n{example.code}"
        for f in hits:
            assert f.evidence and all(e.location is None or e.location.line > 0 for e in f.evidence)
            assert f.error and f.fix is not None
        applicable = [
            f
            for f in hits
            if f.fix.applicability != Applicability.DISPLAY
            and any(Path(e.path).name == "train.py" for e in f.fix.edits)
        ]
        assert not applicable or example.fixed is not None, (
            f"{rule_id} fires[{index}] carries a fix `fix` applies: declare fixed= (the code it must produce)"
        )
    else:
        assert not hits, f"{rule_id} fired on its look-alike:\n{example.code}\n{[h.message for h in hits]}"


def test_every_rule_has_docs_and_examples():
    for r in rules():
        assert r.fires and r.silent
        for text in (r.summary, r.what, r.why, r.error, r.fix):
            assert text.strip(), r.id
