"""Golden reports: the whole ranked result for each seed fixture on its target, so any change in wording,
evidence, ranking or fixes shows up in review. Regenerate with `pytest tests/test_golden_reports.py
--update-golden` and read the diff."""

import json
import re
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.collect import gather
from precision_doctor.probes.stack import CURRENT
from precision_doctor.report.json_report import finding_json

from .conftest import machine_probes
from .test_seed_fixtures import CASES, FIX

GOLDEN = Path(__file__).parent / "golden"


def _name(rel, target, args):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{rel}@{target}{'_' + '_'.join(args) if args else ''}") + ".json"


@pytest.mark.parametrize("rel,target,args", [(c[0], c[1], c[2]) for c in CASES],
                         ids=[f"{c[0]}@{c[1]}" for c in CASES])
def test_golden_report(rel, target, args, update_golden, monkeypatch):
    monkeypatch.chdir(FIX)
    facts = gather([rel], target=target, script_args=args, stack_overrides=CURRENT, **machine_probes())
    result = engine.run(facts)
    got = [finding_json(f) for f in result.findings]
    path = GOLDEN / _name(rel, target, args)
    if update_golden or not path.exists():
        path.write_text(json.dumps(got, indent=2) + "\n", encoding="utf-8")
        if not update_golden:
            pytest.fail(f"wrote missing golden file {path.name}; review and commit it")
    assert got == json.loads(path.read_text(encoding="utf-8"))
