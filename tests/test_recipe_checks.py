"""Every check Axolotl and LLaMA-Factory run on a recipe that the doctor mirrors (knowledge/recipe_checks): its
firing recipe is reported by PD701 (refuses) or PD702 (warns) citing the framework's source, and its accepted
twin is not. Both recipes are checked as a user would: the YAML file alone, on the check's GPU."""

from pathlib import Path

import pytest

from precision_doctor.knowledge.recipe_checks import axolotl, llamafactory
from precision_doctor.knowledge.versions import CURRENT

from .conftest import check_code

CHECKS = list(axolotl.CHECKS) + list(llamafactory.CHECKS)
RULE = {"refuses": "PD701", "warns": "PD702"}


def _check(tmp_path, monkeypatch, check, recipe, target, versions):
    monkeypatch.chdir(tmp_path)
    for name, text in check.files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    result, _ = check_code(tmp_path, recipe, target=target, name="config.yml", versions={**CURRENT, **versions})
    return [f for f in result.findings if f.rule_id == RULE[check.action] and check.message[:40] in f.message]


@pytest.mark.parametrize("check", CHECKS, ids=[c.id.rsplit("/", 1)[-1] for c in CHECKS])
def test_the_firing_recipe_is_reported_with_the_frameworks_source(tmp_path, monkeypatch, check):
    found = _check(tmp_path, monkeypatch, check, check.fires, check.target, check.versions)
    assert found, f"{check.id} did not fire"
    finding = found[0]
    assert any(check.source in note for note in finding.fix.notes)
    assert finding.severity == ("error" if check.action == "refuses" else "warning")
    written = {e.location.line for e in finding.evidence if e.location and Path(e.location.path).name == "config.yml"}
    assert written, "the evidence points at the recipe lines that write the settings"


@pytest.mark.parametrize("check", CHECKS, ids=[c.id.rsplit("/", 1)[-1] for c in CHECKS])
def test_the_accepted_twin_is_not(tmp_path, monkeypatch, check):
    found = _check(tmp_path, monkeypatch, check, check.accepted, check.accepted_target or check.target, {})
    assert not found, found[0].message


def test_a_check_that_asks_the_gpu_is_silent_without_one(tmp_path, monkeypatch):
    sage = next(c for c in axolotl.CHECKS if c.message.startswith("SageAttention supports"))
    assert _check(tmp_path, monkeypatch, sage, sage.fires, None, {}) == []


@pytest.mark.parametrize("target,refused", [("t4", True), ("a100", False), ("b200", True), ("h100", False)])
def test_sage_attention_follows_axolotls_allow_list_and_says_where_it_is_wrong(tmp_path, monkeypatch, target, refused):
    """Axolotl's allow-list refuses B200 (sm_100), which SageAttention supports: the doctor reports what Axolotl
    will do, and says so."""
    sage = next(c for c in axolotl.CHECKS if c.message.startswith("SageAttention supports"))
    found = _check(tmp_path, monkeypatch, sage, sage.fires, target, {})
    assert bool(found) is refused
    if found:
        assert "stricter than the hardware" in found[0].message


def test_recipe_keys_given_on_the_launch_line_are_judged(tmp_path, monkeypatch):
    """`axolotl train config.yml --load-in-8bit` makes the QLoRA recipe one Axolotl refuses."""
    check = next(c for c in axolotl.CHECKS if "Require cfg.load_in_4bit" in c.message)
    monkeypatch.chdir(tmp_path)
    recipe = check.accepted.replace("load_in_4bit: true\n", "")
    for launch, refused in (("axolotl train config.yml", True), ("axolotl train config.yml --load-in-4bit", False)):
        result, _ = check_code(tmp_path, recipe, target="a100", name="config.yml", launcher=launch)
        assert bool([f for f in result.findings if f.rule_id == "PD701"]) is refused, launch
