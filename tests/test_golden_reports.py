"""Golden reports: the whole ranked result for each seed fixture on its target — the findings JSON and the
text report a person reads — so any change in wording, evidence, ranking or fixes shows up in review.
Goldens are written only by `pytest tests/test_golden_reports.py --update-golden`; read the diff, then commit.
A missing golden file fails the test."""

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import gather
from precision_doctor.report.json_report import finding_json
from precision_doctor.report.text import render

from .conftest import machine_probes
from .test_seed_fixtures import CASES, FIX

GOLDEN = Path(__file__).parent / "golden"


def _name(rel, target, args):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{rel}@{target}{'_' + '_'.join(args) if args else ''}")


def _compare(path: Path, got: str, update: bool) -> None:
    if update:
        path.write_text(got, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path.name}: run pytest {Path(__file__).name} --update-golden, review, commit")
    assert got == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("rel,target,args", [(c[0], c[1], c[2]) for c in CASES], ids=[f"{c[0]}@{c[1]}" for c in CASES])
def test_golden_report(rel, target, args, update_golden, monkeypatch):
    monkeypatch.chdir(FIX)
    facts = gather([rel], target=target, script_args=args, stack_overrides=CURRENT, **machine_probes())
    result = engine.run(facts)
    name = _name(rel, target, args)
    _compare(
        GOLDEN / f"{name}.json", json.dumps([finding_json(f) for f in result.findings], indent=2) + "\n", update_golden
    )
    text = io.StringIO()
    render(result, facts, Console(file=text, no_color=True, highlight=False, width=120))
    _compare(GOLDEN / f"{name}.txt", text.getvalue(), update_golden)
