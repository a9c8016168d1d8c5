"""The five seed stories: each buggy script gets the diagnosis, each fixed twin stays clean of errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import gather

from .conftest import machine_probes

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures"

# (script, target, script args, rule ids that must fire, rule ids that must not)
CASES = [
    ("seed000_accelerate_implicit_bf16/train.py", None, (), {"PD203"}, {"PD212"}),
    ("seed000_accelerate_implicit_bf16/train_fixed.py", None, (), set(), {"PD203"}),
    ("seed001_titan_fp16/buggy/train.py", "titan-rtx", (), {"PD201"}, {"PD204"}),
    ("seed001_titan_fp16/fixed/train.py", "titan-rtx", (), set(), {"PD201", "PD204"}),
    ("seed001_titan_fp16/ultimate_fix/train.py", "titan-rtx", (), {"PD204"}, {"PD201"}),
    ("seed002_fp16_device_map/simple_finetune.py", "t4", (), {"PD201", "PD216"}, set()),
    ("seed002_fp16_device_map/simple_finetune.py", "cpu", (), {"PD204"}, {"PD201"}),
    ("seed002_fp16_device_map/simple_finetune_fixed.py", "t4", (), set(), {"PD201", "PD202", "PD209"}),
    ("seed002_fp16_device_map/simple_finetune_fixed.py", "a100", (), set(), {"PD201", "PD202", "PD209"}),
    ("seed003_qwen2vl_two_stage/train_recipe.py", "rtx-6000-ada:2", (), set(), {"PD201", "PD202"}),
    ("seed003_qwen2vl_two_stage/train_recipe_fixed.py", "rtx-6000-ada", (), set(), {"PD201", "PD202"}),
    ("seed004_h100_amp_guide/train.py", "h100", ("--mixed_precision", "bf16"), {"PD206", "PD207", "PD213"}, set()),
    ("seed004_h100_amp_guide/train.py", "h100", ("--mixed_precision", "fp16"), {"PD207", "PD213"}, {"PD206"}),
    ("seed004_h100_amp_guide/train_fixed.py", "h100", ("--mixed_precision", "bf16"), set(), {"PD206", "PD207"}),
]


def _run(rel, target, args):
    facts = gather([str(FIX / rel)], target=target, script_args=args, stack_overrides=CURRENT, **machine_probes())
    return engine.run(facts)


@pytest.mark.parametrize("rel,target,args,must,must_not", CASES, ids=[f"{c[0]}@{c[1]}" for c in CASES])
def test_seed_fixture(rel, target, args, must, must_not):
    result = _run(rel, target, args)
    fired = {f.rule_id for f in result.findings}
    assert must <= fired, f"missing {must - fired}; got {sorted(fired)}"
    assert not (must_not & fired), f"false alarm {must_not & fired}"
    if "fixed" in rel or "_fixed" in rel:
        assert not [f for f in result.findings if f.severity == "error"], [f.message for f in result.findings]


def test_seed001_report_points_at_the_fp16_load_in_the_helper_module():
    result = _run("seed001_titan_fp16/buggy/train.py", "titan-rtx", ())
    pd201 = next(f for f in result.findings if f.rule_id == "PD201")
    where = {(Path(e.location.path).name, e.location.line) for e in pd201.evidence if e.location}
    assert ("model_utility_configs.py", 12) in where  # torch_dtype=torch.float16
    assert ("train.py", 15) in where  # --fp16 defaults to True
    assert pd201.error == "ValueError: Attempting to unscale FP16 gradients."
    edit = pd201.fix.edits[0]
    assert (Path(edit.path).name, edit.line, edit.old, edit.new) == (
        "model_utility_configs.py",
        12,
        "torch.float16",
        "torch.float32",
    )
    assert any("PD204" in n for n in pd201.fix.notes)  # never the pure-fp16 "fix"
    assert any("no native bf16" in n for n in pd201.fix.notes)


def test_seed001_fix_prefers_bf16_where_the_gpu_has_it():
    result = _run("seed001_titan_fp16/buggy/train.py", "a100", ())
    pd201 = next(f for f in result.findings if f.rule_id == "PD201")
    assert "native bf16" in pd201.fix.description
    assert pd201.fix.edits[0].new == "torch.bfloat16"


def test_seed002_guard_with_emulation_is_decided_per_gpu():
    """The write-up's own guard: is_bf16_supported() answers True on a T4 (emulated), so bf16 is picked."""
    code = (FIX / "seed002_fp16_device_map/simple_finetune_fixed.py").read_text()
    code = code.replace("torch.cuda.is_bf16_supported(including_emulation=False)", "torch.cuda.is_bf16_supported()")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.py"
        p.write_text(code)
        for target, expected in (("t4", "bfloat16"), ("a100", "bfloat16"), ("cpu", "float32")):
            facts = gather([str(p)], target=target, stack_overrides=CURRENT, **machine_probes())
            from precision_doctor.derive import derive_setup

            setup = derive_setup(facts.scripts[0], facts)
            assert setup.weights.value == expected, target
        facts = gather([str(p)], target="t4", stack_overrides={**CURRENT, "torch": "2.2.2"}, **machine_probes())
        assert derive_setup(facts.scripts[0], facts).weights.value == "float32"  # no emulation before 2.3


def test_readme_first_command_output():
    """The README's first command: check the seed-001 fixture, exit 1, PD201 on top."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "precision_doctor",
            "check",
            "fixtures/seed001_titan_fp16/buggy/train.py",
            "--target",
            "titan-rtx",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "PD201 fp16-params-with-grad-scaler" in out
    assert "ValueError: Attempting to unscale FP16 gradients." in out
    assert "model_utility_configs.py:12" in out
    assert "\x1b[" not in out  # plain when piped
    assert out.index("PD201") < out.index("PD214")  # errors before warnings


def test_json_output_is_stable_and_complete():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "precision_doctor",
            "check",
            "--format",
            "json",
            "fixtures/seed001_titan_fp16/buggy/train.py",
            "--target",
            "titan-rtx",
            "--include-facts",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = json.loads(proc.stdout)
    assert doc["version"] == 1
    first = doc["findings"][0]
    assert set(first) >= {"id", "name", "severity", "message", "locations", "error", "fix"}
    assert first["id"] == "PD201" and first["severity"] == "error"
    assert {"path", "line", "column"} <= set(first["locations"][0])
    assert {"description", "safe"} <= set(first["fix"])
    assert isinstance(doc["unknowns"], list) and "scripts" in doc["facts"]


def test_seed002_trainer_construction_fails_before_the_first_step_on_transformers_5():
    result = _run("seed002_fp16_device_map/simple_finetune.py", "t4", ())
    errors = [f.rule_id for f in result.findings if f.severity == "error"]
    assert errors[:2] == ["PD216", "PD201"]  # Trainer(tokenizer=...) raises before any step runs
