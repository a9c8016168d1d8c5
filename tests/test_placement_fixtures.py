"""Placement, quantization and DeepSpeed fixtures in the shapes real scripts take: each buggy one gets its rule,
each correct recipe gets no error."""

from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import gather

from .conftest import machine_probes

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "placement"
V4 = {"transformers": "4.57.1"}

# (fixture, target, launcher, stack overrides, must fire, must not fire)
CASES = [
    ("qlora_sft_correct.py", "a100", "python qlora_sft_correct.py", {}, set(), None),
    ("qlora_sft_correct.py", "a100", "python qlora_sft_correct.py", V4, set(), None),
    ("qlora_ddp_correct.py", "a100:2", "torchrun --nproc_per_node 2 qlora_ddp_correct.py", {}, set(), None),
    ("qlora_ddp_correct.py", "a100:2", "torchrun --nproc_per_node 2 qlora_ddp_correct.py", V4, set(), None),
    ("qlora_ddp_auto.py", "a100:2", "torchrun --nproc_per_node 2 qlora_ddp_auto.py", {}, {"PD302"}, set()),
    ("train_deepspeed.py", "a100:8", "deepspeed --num_gpus 8 train_deepspeed.py", {}, set(), None),
    ("train_deepspeed_fp16.py", "a100:8", "deepspeed --num_gpus 8 train_deepspeed_fp16.py", {}, {"PD501"}, set()),
    ("raw_ddp_reentrant.py", "a100:2", "torchrun --nproc_per_node 2 raw_ddp_reentrant.py", V4, {"PD303"}, set()),
    ("raw_ddp_nonreentrant.py", "a100:2", "torchrun --nproc_per_node 2 raw_ddp_nonreentrant.py", V4, set(), None),
    ("raw_ddp_reentrant.py", "a100:2", "torchrun --nproc_per_node 2 raw_ddp_reentrant.py", {}, set(), {"PD303"}),
    (
        "qlora_cast_after_load.py",
        "a100:2",
        "accelerate launch --num_processes 2 qlora_cast_after_load.py",
        {},
        {"PD401"},
        set(),
    ),
    ("qlora_no_prepare.py", "a100", "python qlora_no_prepare.py", V4, {"PD403"}, set()),
    ("qlora_no_prepare.py", "a100", "python qlora_no_prepare.py", {}, set(), {"PD403"}),
    ("qlora_sft_correct.py", "t4", "python qlora_sft_correct.py", {}, {"PD107", "PD101"}, set()),
]


@pytest.mark.parametrize(
    "name,target,launcher,versions,must,must_not", CASES, ids=[f"{c[0]}@{c[1]}{'-v4' if c[3] else ''}" for c in CASES]
)
def test_placement_fixture(name, target, launcher, versions, must, must_not, monkeypatch):
    monkeypatch.chdir(FIX)
    facts = gather(
        [name], target=target, launcher=launcher, stack_overrides={**CURRENT, **versions}, **machine_probes()
    )
    findings = engine.run(facts).findings
    fired = {f.rule_id for f in findings}
    assert must <= fired, f"missing {must - fired}, got {sorted(fired)}"
    if must_not is None:  # a correct recipe: nothing at error level
        assert not [f for f in findings if f.severity == "error"], [(f.rule_id, f.message) for f in findings]
    else:
        assert not (must_not & fired)


def test_deepspeed_json_is_read_relative_to_the_script(tmp_path):
    (tmp_path / "train.py").write_text((FIX / "train_deepspeed_fp16.py").read_text())
    facts = gather([str(tmp_path / "train.py")], target="a100", stack_overrides=CURRENT, **machine_probes())
    assert not facts.scripts[0].deepspeed_configs  # ds_fp16.json is not there: unknown, not a crash
    assert any("DeepSpeed config file is not here" in u.reason for u in facts.scripts[0].unknowns)
    (tmp_path / "ds_fp16.json").write_text((FIX / "ds_fp16.json").read_text())
    facts = gather([str(tmp_path / "train.py")], target="a100", stack_overrides=CURRENT, **machine_probes())
    assert facts.scripts[0].deepspeed_configs["ds_fp16.json"]["fp16"]["enabled"] is True
    pd501 = next(f for f in engine.run(facts).findings if f.rule_id == "PD501")
    assert "ds fp16.enabled=True vs hf fp16" in pd501.error


def test_seed003_dataparallel_prediction_follows_the_transformers_version(monkeypatch):
    monkeypatch.chdir(FIX.parent / "seed003_qwen2vl_two_stage")
    kwargs = dict(target="rtx-6000-ada:2", launcher="python train_recipe.py", **machine_probes())
    old = engine.run(gather(["train_recipe.py"], stack_overrides={**CURRENT, **V4}, **kwargs)).findings
    new = engine.run(gather(["train_recipe.py"], stack_overrides=CURRENT, **kwargs)).findings
    pd301 = [f for f in old if f.rule_id == "PD301"]
    assert pd301 and pd301[0].confidence == "likely" and "single GPU" in pd301[0].message
    assert not [f for f in new if f.rule_id in ("PD301", "PD114")]  # 5.6+ never wraps 4-bit models
    placed = engine.run(gather(["train_recipe_fixed.py"], stack_overrides={**CURRENT, **V4}, **kwargs)).findings
    assert [f.severity for f in placed if f.rule_id == "PD301"] == ["error"]  # {"": 0} on 2 visible GPUs
