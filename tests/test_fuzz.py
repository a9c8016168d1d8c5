"""The fuzz harness in the suite: a few hundred generated and mutated scripts, mutated snapshots, job scripts,
recipes, model facts and requirements files through the whole command line (tests/fuzzing.py); benchmarks/fuzz.py
runs thousands. Zero exit 3, zero hangs, strict JSON every time, no crashed rule."""

from __future__ import annotations

import random
import time

import pytest

pytest.importorskip("hypothesmith")

from tests import fuzzing  # noqa: E402

SUITE_CASES = 240


def test_fuzzed_inputs_through_the_whole_cli():
    outcomes = fuzzing.run_cases(
        fuzzing.cases(SUITE_CASES, seed=18, generated_share=0.1, snapshot_share=0.2, repository_share=0.35),
        time_limit=10,
    )
    failures = [
        f"{o.case.kind} {' '.join(o.case.args)}: {o.problem}\n{o.case.source[:300]}" for o in outcomes if o.failed
    ]
    assert not failures, f"{len(failures)} of {len(outcomes)} cases failed:\n" + "\n\n".join(failures[:5])
    kinds = {o.case.kind for o in outcomes}
    assert kinds == {"generated", "mutated", "snapshot", "jobscript", "recipe", "model", "requirements"}
    assert {o.code for o in outcomes} >= {0, 1, 2}  # the cases reach past parsing into findings


def test_the_harness_reports_crashes_hangs_and_loose_json(monkeypatch, tmp_path):
    """The harness itself can fail: an exit 3, a case that never ends, and `NaN` in the output are each caught."""
    from precision_doctor.cli import app as cli

    case = fuzzing.Case("mutated", "x = 1\n")
    monkeypatch.setattr(cli, "main", lambda argv: 3)
    assert fuzzing.run_case(case, tmp_path).problem.startswith("exit 3")

    def loose(argv):
        print('{"findings": [], "value": NaN}')
        return 0

    monkeypatch.setattr(cli, "main", loose)
    assert "not strict JSON" in fuzzing.run_case(case, tmp_path).problem

    def hang(argv):
        try:
            time.sleep(30)
        except Exception:  # the CLI's own catch-all must not swallow the time limit
            return 3

    monkeypatch.setattr(cli, "main", hang)
    outcome = fuzzing.run_case(case, tmp_path, time_limit=0.3)
    assert outcome.code is None and outcome.seconds < 5


def test_mutations_change_the_source():
    rng = random.Random(0)
    texts = fuzzing.corpus()
    changed = sum(fuzzing.mutate_lines(rng, t, texts) != t + "\n" for t in texts[:50])
    assert changed >= 40
