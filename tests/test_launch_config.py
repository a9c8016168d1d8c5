"""DeepSpeed and FSDP set up by `accelerate launch`: its --config_file (or the machine's default config), the
DeepSpeed JSON that names, and the options on its command line, which override the file in accelerate's order.
Each shape fires on its fixture and stays silent on the correct twin (fixtures/configs/accelerate/launch/)."""

import shutil
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.derive import derive
from precision_doctor.derive.memory_plan import MemoryPlan, plan_memory
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import gather

from .conftest import machine_probes

LAUNCH = Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "accelerate" / "launch"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A copy of the launch fixtures to run in: accelerate reads relative paths from the folder it runs in."""
    for path in LAUNCH.iterdir():
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(script, launcher, target=None, machine=None, environ=None):
    facts = gather(
        [script], target=target, launcher=launcher, stack_overrides=CURRENT, **machine_probes(machine, environ)
    )
    return engine.run(facts), facts


def rules(result) -> set[str]:
    return {f.rule_id for f in result.findings}


def finding(result, rule_id):
    return next(f for f in result.findings if f.rule_id == rule_id)


# (script, accelerate config, target, the rule its fixture fires); the twin (script or config with `_fixed`) is clean
CASES = [
    ("sft.py", "zero3.yaml", "h100:8", "PD502"),  # device_map under ZeRO-3 from the config's zero_stage: 3
    ("train_loop.py", "ds_file.yaml", "a100:4", "PD501"),  # bf16 Accelerator, fp16 hard-coded in the JSON it names
    ("qlora.py", "fsdp.yaml", "a100:2", "PD504"),  # QLoRA under the config's FSDP, uint8 quant storage
]


@pytest.mark.parametrize("script,config,target,rule_id", CASES, ids=[c[3] for c in CASES])
def test_launch_config_fires_and_its_twin_is_clean(folder, script, config, target, rule_id):
    fired, _ = check(script, f"accelerate launch --config_file {config} {script}", target)
    assert rule_id in rules(fired)
    fixed_script = script.replace(".py", "_fixed.py")
    fixed_config = config.replace(".yaml", "_fixed.yaml")
    twin = fixed_script if (folder / fixed_script).exists() else script
    twin_config = fixed_config if (folder / fixed_config).exists() else config
    clean, _ = check(twin, f"accelerate launch --config_file {twin_config} {twin}", target)
    assert rule_id not in rules(clean)
    assert not [f for f in clean.findings if f.severity == "error"], [f.message for f in clean.findings]


def test_evidence_points_at_the_config_line_and_names_the_launch(folder):
    result, _ = check("sft.py", "accelerate launch --config_file zero3.yaml sft.py", "h100:8")
    pd502 = finding(result, "PD502")
    stage = next(
        e for e in pd502.evidence if e.location and e.location.path == "zero3.yaml" and e.excerpt == "zero_stage: 3"
    )
    assert stage.location.line == 9
    assert "accelerate launch --config_file zero3.yaml" in stage.note
    assert pd502.locations[0].path == "sft.py"  # the fix goes to the script: the device_map


def test_the_deepspeed_json_is_read_from_the_folder_the_launch_runs_in(folder):
    result, _ = check("train_loop.py", "accelerate launch --config_file ds_file.yaml train_loop.py", "a100:4")
    pd501 = finding(result, "PD501")
    assert "`--mixed_precision` arg cannot be set to `bf16` when `fp16` is set" in pd501.error
    assert any(e.excerpt == "deepspeed_config_file: ds_fp16.json" for e in pd501.evidence)


def test_a_missing_deepspeed_json_is_listed_as_unknown_not_guessed(folder):
    (folder / "ds_fp16.json").unlink()
    result, facts = check("train_loop.py", "accelerate launch --config_file ds_file.yaml train_loop.py", "a100:4")
    assert "PD501" not in rules(result)
    assert any("ds_fp16.json" in u.what for u in facts.scripts[0].unknowns)


def test_command_line_options_override_the_config_file(folder):
    """`--zero_stage 2` beats `zero_stage: 3`; `--use_fsdp` beats `distributed_type: DEEPSPEED`."""
    stage2, _ = check("sft.py", "accelerate launch --config_file zero3.yaml --zero_stage 2 sft.py", "h100:8")
    assert "PD502" not in rules(stage2)
    _, facts = check("sft.py", "accelerate launch --config_file zero3.yaml --use_fsdp sft.py", "h100:8")
    sharding = derive(facts).setups["sft.py"].sharding
    assert sharding.kind == "fsdp"
    assert sharding.evidence[0].note == "FSDP (--use_fsdp)"


def test_flags_alone_set_up_deepspeed(folder):
    fired, _ = check("sft.py", "accelerate launch --use_deepspeed --zero_stage 3 --num_processes 8 sft.py", "h100:8")
    assert "PD502" in rules(fired)
    plain, _ = check("sft.py", "accelerate launch --num_processes 8 sft.py", "h100:8")
    assert "PD502" not in rules(plain)


def test_the_default_config_of_this_machine_is_read_with_its_lines(folder, tmp_path_factory):
    home = tmp_path_factory.mktemp("hf")
    (home / "accelerate").mkdir()
    shutil.copy(folder / "zero3.yaml", home / "accelerate" / "default_config.yaml")
    result, _ = check("sft.py", "accelerate launch sft.py", machine="h100_8x", environ={"HF_HOME": str(home)})
    pd502 = finding(result, "PD502")
    stage = next(e for e in pd502.evidence if e.excerpt == "zero_stage: 3")
    assert stage.location.path.endswith("default_config.yaml") and stage.location.line == 9
    assert "reads by default" in stage.note


def test_a_job_script_reads_the_config_relative_to_its_folder(folder):
    (folder / "configs").mkdir()
    shutil.move(folder / "zero3.yaml", folder / "configs" / "zero3.yaml")
    job = folder / "job.sbatch"
    job.write_text(
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:h100:8\n#SBATCH --ntasks-per-node=1\n"
        f"cd {folder}\nsrun accelerate launch --config_file configs/zero3.yaml sft.py\n",
        encoding="utf-8",
    )
    facts = gather([str(job)], stack_overrides=CURRENT, **machine_probes())
    result = engine.run(facts)
    assert "PD502" in rules(result)
    assert facts.launch.accelerate_config_path.endswith("configs/zero3.yaml")


def test_the_memory_plan_shards_as_the_config_says(folder):
    _, facts = check("sft_fixed.py", "accelerate launch --config_file zero3.yaml sft_fixed.py", "h100:8")
    derived = derive(facts)
    setup = derived.setups["sft_fixed.py"]
    plan = plan_memory(
        setup, facts.scripts[0], facts.machine, facts.stack, facts.launch, derived.plan_for("sft_fixed.py")
    )
    assert isinstance(plan, MemoryPlan)
    assert (plan.shape.parallelism.kind, plan.shape.parallelism.gpus) == ("zero3", 8)
    flagged = check("sft_fixed.py", "accelerate launch --config_file zero3.yaml --zero_stage 1 sft_fixed.py", "h100:8")[
        1
    ]
    assert derive(flagged).setups["sft_fixed.py"].sharding.stage == 1


def test_auto_precision_in_the_json_follows_the_launch_mixed_precision(folder):
    """ "auto" is resolved as accelerate resolves it: from the mixed precision the job runs (here fp16, on a model
    pre-trained in bf16, so DeepSpeed's loss scale collapses: PD503)."""
    (folder / "gemma.py").write_text(
        "import torch\nfrom accelerate import Accelerator\nfrom transformers import AutoModelForCausalLM\n"
        "accelerator = Accelerator()\n"
        "model = AutoModelForCausalLM.from_pretrained('google/gemma-2-9b', dtype=torch.float32)\n"
        "optimizer = torch.optim.AdamW(model.parameters())\n"
        "model, optimizer = accelerator.prepare(model, optimizer)\n",
        encoding="utf-8",
    )
    base = "accelerate launch --config_file ds_file_fixed.yaml --mixed_precision {} gemma.py"
    assert "PD503" in rules(check("gemma.py", base.format("fp16"), "v100:4")[0])
    assert "PD503" not in rules(check("gemma.py", base.format("bf16"), "a100:4")[0])


def test_deepspeed_owns_loss_scaling_so_fp16_weights_are_not_a_grad_scaler_error(folder):
    """DeepSpeed fp16 keeps fp32 master partitions and scales the loss itself: no GradScaler refuses fp16 grads."""
    (folder / "fp16.py").write_text(
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "args = TrainingArguments('out', fp16=True)\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
        "Trainer(model=model, args=args).train()\n",
        encoding="utf-8",
    )
    plain, _ = check("fp16.py", "accelerate launch --num_processes 4 fp16.py", "v100:4")
    assert "PD201" in rules(plain)
    sharded, _ = check("fp16.py", "accelerate launch --use_deepspeed --num_processes 4 fp16.py", "v100:4")
    assert "PD201" not in rules(sharded)


def test_the_config_num_processes_and_mixed_precision_apply_without_flags(folder):
    (folder / "loop.py").write_text(
        "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
        "model = torch.nn.Linear(8, 8)\noptimizer = torch.optim.AdamW(model.parameters())\n"
        "model, optimizer = accelerator.prepare(model, optimizer)\n",
        encoding="utf-8",
    )
    result, facts = check("loop.py", "accelerate launch --config_file zero3.yaml loop.py", "v100:4")
    assert facts.launch.num_processes.value == 8 and facts.launch.mixed_precision.value == "bf16"
    assert {"PD101", "PD111", "PD113"} <= rules(result)  # bf16 on a V100, 8 processes on 4 GPUs, implicit bf16
    overridden, _ = check(
        "loop.py",
        "accelerate launch --config_file zero3.yaml --num_processes 4 --mixed_precision fp16 loop.py",
        "v100:4",
    )
    assert not {"PD101", "PD111"} & rules(overridden)


def test_zero3_init_flag_off_registers_zero3_only_from_accelerate_1(folder):
    """Before accelerate 1.0.0 the plugin hands ZeRO-3 to transformers only under zero3_init_flag; from 1.0.0 always."""
    config = (
        (folder / "zero3.yaml").read_text(encoding="utf-8").replace("zero3_init_flag: true", "zero3_init_flag: false")
    )
    (folder / "zero3.yaml").write_text(config, encoding="utf-8")

    def fired(version):
        facts = gather(
            ["sft.py"],
            target="h100:8",
            launcher="accelerate launch --config_file zero3.yaml sft.py",
            stack_overrides={**CURRENT, "accelerate": version},
            **machine_probes(),
        )
        return rules(engine.run(facts))

    assert "PD502" not in fired("0.34.2")
    assert "PD502" in fired("1.0.0")


# TrainingArguments (which registers ZeRO-3 under DeepSpeed) built before a device_map load
ARGS_THEN_MAPPED_LOAD = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "args = TrainingArguments('out', bf16=True)\n"
    "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16, device_map='auto')\n"
    "Trainer(model=model, args=args).train()\n"
)


def test_zero3_with_device_map_gets_pd502s_fix_not_a_per_rank_map(run_check):
    """Under ZeRO-3 any device_map is refused at load; PD302's per-rank map would still be refused, so only PD502
    (drop the map) speaks. Under ZeRO-2 the same launch is DDP-like and PD302's per-rank map is the cure."""
    zero3, _ = run_check(
        ARGS_THEN_MAPPED_LOAD,
        target="a100:2",
        launcher="accelerate launch --use_deepspeed --zero_stage 3 --num_processes 2 train.py",
    )
    fired = {f.rule_id for f in zero3.findings}
    assert "PD502" in fired and "PD302" not in fired, fired
    zero2, _ = run_check(
        ARGS_THEN_MAPPED_LOAD,
        target="a100:2",
        launcher="accelerate launch --use_deepspeed --zero_stage 2 --num_processes 2 train.py",
    )
    assert "PD302" in {f.rule_id for f in zero2.findings}


def test_a_quoted_zero_stage_is_the_stage_accelerate_reads(run_check, tmp_path):
    """accelerate passes zero_stage through ACCELERATE_DEEPSPEED_ZERO_STAGE and int()s it: "3" is ZeRO-3."""
    (tmp_path / "zero3.yaml").write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
        "deepspeed_config:\n  zero_stage: '3'\n  zero3_init_flag: true\n"
        "mixed_precision: bf16\nnum_processes: 2\n"
    )
    result, _ = run_check(
        ARGS_THEN_MAPPED_LOAD, target="a100:2", launcher="accelerate launch --config_file zero3.yaml train.py"
    )
    fired = {f.rule_id for f in result.findings}
    assert "PD502" in fired and "PD302" not in fired, fired


def test_pd302_still_speaks_under_zero3_when_zero3_does_not_reach_the_load(run_check):
    """TrainingArguments built after from_pretrained: ZeRO-3 is not registered at load time, PD502 stays quiet, and
    the per-process device_map spread is PD302's again."""
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16, device_map='auto')\n"
        "args = TrainingArguments('out', bf16=True)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    result, _ = run_check(
        code, target="a100:2", launcher="accelerate launch --use_deepspeed --zero_stage 3 --num_processes 2 train.py"
    )
    fired = {f.rule_id for f in result.findings}
    assert "PD502" not in fired and "PD302" in fired, fired


ZERO3_FILE_CONFIG = (
    "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
    "  deepspeed_config_file: ds_z3.json\n  zero3_init_flag: true\nnum_processes: 2\n"
)
LOAD = "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16, device_map='auto')\n"
ARGS = "args = TrainingArguments('out', bf16=True)\n"
HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


@pytest.mark.parametrize("args_first", [True, False], ids=["args-then-load", "load-then-args"])
def test_zero3_named_by_the_accelerate_config_s_json_decides_the_device_map_verdict(tmp_path, monkeypatch, args_first):
    """ZeRO-3 from `deepspeed_config_file` in the accelerate config: built before the load, the arguments register
    it and from_pretrained refuses any device map (PD502); built after, accelerate refuses the spread model in a
    distributed mode (PD302). Either way the fix drops the map: a per-rank one is not what ZeRO-3 wants."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text(ZERO3_FILE_CONFIG)
    (tmp_path / "ds_z3.json").write_text('{"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}')
    body = ARGS + LOAD if args_first else LOAD + ARGS
    (tmp_path / "train.py").write_text(HEAD + body + "Trainer(model=model, args=args).train()\n")
    result, _ = check("train.py", "accelerate launch --config_file config.yaml train.py", target="a100:2")
    found = {f.rule_id: f for f in result.findings if f.severity == "error"}
    expected = "PD502" if args_first else "PD302"
    assert set(found) == {expected}
    assert "drop device_map=" in found[expected].fix.description
    assert "LOCAL_RANK" not in found[expected].fix.description


@pytest.mark.parametrize(
    "launcher,config,too_many",
    [
        ("accelerate launch --num_processes 8 --num_machines 2 loop.py", "", False),  # 4 per node on 4 GPUs
        ("accelerate launch --num_processes 16 --num_machines 2 loop.py", "", True),  # 8 per node on 4 GPUs
        ("accelerate launch --config_file two.yaml loop.py", "num_processes: 8\nnum_machines: 2\n", False),
        ("accelerate launch --config_file two.yaml loop.py", "num_processes: 8\nnum_machines: 1\n", True),
        ("accelerate launch --num_processes 8 --num_machines $NODES loop.py", "", False),  # per node not known
    ],
)
def test_accelerates_num_processes_is_the_total_over_its_machines(folder, launcher, config, too_many):
    """accelerate/utils/launch.py starts `num_processes // num_machines` processes on each machine: a two-machine
    launch of 8 on nodes of 4 GPUs is one process per GPU, not 8 on each."""
    (folder / "loop.py").write_text(
        "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
        "model = torch.nn.Linear(8, 8)\noptimizer = torch.optim.AdamW(model.parameters())\n"
        "model, optimizer = accelerator.prepare(model, optimizer)\n",
        encoding="utf-8",
    )
    if config:
        (folder / "two.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n" + config)
    result, _ = check("loop.py", launcher, "a100:4")
    assert ("PD111" in rules(result)) is too_many
