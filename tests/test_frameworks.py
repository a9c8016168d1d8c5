"""Frameworks on top of transformers, read as what they run: Lightning / Fabric's strategy and devices as launch facts
(processes per node, DeepSpeed / FSDP), Sentence Transformers' trainers and `model_kwargs`, Unsloth's loader with its
own defaults, diffusers-style accelerate scripts. Each fixture fires and its correct twin does not
(fixtures/configs/scripts/)."""

from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.derive import derive
from precision_doctor.derive.memory_plan import MemoryPlan, plan_memory
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import gather

from .conftest import check_code, machine_probes

SCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "scripts"


def run(path, target=None, launcher=None, args=(), machine=None, environ=None):
    facts = gather(
        [str(path)],
        target=target,
        launcher=launcher,
        script_args=tuple(args),
        stack_overrides=CURRENT,
        **machine_probes(machine, environ),
    )
    return engine.run(facts), facts


def fired(result) -> set[str]:
    return {f.rule_id for f in result.findings}


def errors(result) -> list[str]:
    return [f"{f.rule_id} {f.message}" for f in result.findings if f.severity == "error"]


# (fixture, target, script arguments, the rules it fires); its `_fixed` twin on the same machine has no error and
# none of those rules
CASES = [
    ("lightning/deepspeed.py", "a100:4", (), {"PD111"}),  # devices=8 on a 4-GPU node: Lightning refuses
    ("sentence_transformers/train.py", "t4", (), {"PD201"}),  # fp16 model_kwargs under fp16=True
    ("unsloth/train.py", "a100", (), {"PD404"}),  # Unsloth's default 4-bit load trained without adapters
    ("diffusers/train_text_to_image.py", "a10g", ("--mixed_precision", "fp16"), {"PD201"}),  # the UNet cast to fp16
    # LoRA by add_adapter takes the UNet's fp16; the twin's cast_training_params makes the adapters fp32
    ("diffusers/train_text_to_image_lora.py", "a10g", ("--mixed_precision", "fp16"), {"PD201"}),
]


@pytest.mark.parametrize("rel,target,args,must", CASES, ids=[c[0] for c in CASES])
def test_framework_fixture_fires_and_its_twin_is_clean(rel, target, args, must):
    result, _ = run(SCRIPTS / rel, target, args=args)
    assert must <= fired(result), f"missing {must - fired(result)}; got {sorted(fired(result))}"
    twin = SCRIPTS / rel.replace(".py", "_fixed.py")
    clean, _ = run(twin, target, args=args)
    assert not errors(clean), errors(clean)
    assert not must & fired(clean)


# --- Lightning / Fabric: strategy, devices, num_nodes ---------------------------------------------------------

LIT = (
    "import lightning as L\nimport torch\nfrom transformers import AutoModelForCausalLM\n\n"
    "class LitLM(L.LightningModule):\n    def __init__(self):\n        super().__init__()\n"
    "        self.model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B'{load})\n\n"
    "    def training_step(self, batch, batch_idx):\n        return self.model(**batch).loss\n\n"
    "    def configure_optimizers(self):\n        return torch.optim.AdamW(self.parameters(), lr=1e-5)\n\n"
    "trainer = L.Trainer({trainer})\ntrainer.fit(LitLM())\n"
)


def lit(tmp_path, trainer, load=", dtype=torch.bfloat16", **kw):
    return check_code(tmp_path, LIT.format(trainer=trainer, load=load), **kw)


@pytest.mark.parametrize(
    "devices,processes", [("8", 8), ("[0, 1]", 2), ("'0,1,2'", 3), ("-1", 4), ("'auto'", 4), (None, 4), ("1", None)]
)
def test_lightning_devices_are_the_processes_it_starts(tmp_path, devices, processes):
    arg = f"devices={devices}, " if devices else ""
    _, facts = lit(tmp_path, f"accelerator='gpu', {arg}strategy='ddp'", target="a100:4", launcher="python train.py")
    plan = derive(facts).plan_for(facts.scripts[0].path)
    if processes is None:
        assert plan.spawner == "" and plan.processes == 1  # one device: no process of its own
    else:
        assert (plan.spawner, plan.processes) == ("lightning", processes)


def test_lightning_under_an_external_launcher_does_not_spawn(tmp_path):
    _, facts = lit(
        tmp_path,
        "accelerator='gpu', devices=4, strategy='ddp'",
        target="a100:4",
        launcher="torchrun --nproc_per_node 2 train.py",
    )
    plan = derive(facts).plan_for(facts.scripts[0].path)
    assert (plan.spawner, plan.processes) == ("", 2)  # torchrun's ranks; Lightning checks devices against them


def test_lightning_devices_beyond_the_visible_gpus_is_lightnings_own_refusal(tmp_path):
    result, _ = lit(tmp_path, "accelerator='gpu', devices=8, strategy='ddp'", target="a100:4")
    pd111 = next(f for f in result.findings if f.rule_id == "PD111")
    assert pd111.error.startswith("MisconfigurationException: You requested gpu: [0, 1, 2, 3, 4, 5, 6, 7]")
    assert pd111.locations[0].path.endswith("train.py")
    clean, _ = lit(tmp_path, "accelerator='gpu', devices=4, strategy='ddp'", target="a100:4")
    assert "PD111" not in fired(clean)


@pytest.mark.parametrize(
    "strategy,applicability",
    [
        ("'ddp'", "safe"),
        ("'deepspeed_stage_3'", "unsafe"),
        ("'fsdp'", "unsafe"),
        ("DeepSpeedStrategy(stage=3)", "unsafe"),
    ],
)
def test_fewer_devices_is_safe_only_where_nothing_is_sharded_over_them(tmp_path, strategy, applicability):
    """devices='auto' keeps each GPU's memory under DDP (a full copy each); under ZeRO or FSDP each of the fewer
    processes holds a larger shard, so the fix is for review (the memory rules judge the result)."""
    result, _ = lit(tmp_path, f"accelerator='gpu', devices=8, strategy={strategy}", target="a100:4")
    pd111 = next(f for f in result.findings if f.rule_id == "PD111")
    assert pd111.fix.applicability == applicability
    assert ("more memory on each" in pd111.fix.description) is (applicability == "unsafe")


@pytest.mark.parametrize(
    "devices,refused",
    [("[0, 3]", "[0, 3]"), ("'0,3'", "[0, 3]"), ("[1, 2]", "[1, 2]"), ("[1]", None), ("[0, 1]", None)],
)
def test_lightning_gpu_ids_are_checked_against_the_visible_gpus(tmp_path, devices, refused):
    """A list (or "0,3") names GPU ids, which Lightning's `_sanitize_gpu_ids` checks against the visible ones: two
    ids on two GPUs can still ask for one that does not exist."""
    result, _ = lit(tmp_path, f"accelerator='gpu', devices={devices}", target="a100:2")
    pd111 = [f for f in result.findings if f.rule_id == "PD111"]
    if refused is None:
        assert not pd111, pd111[0].message
    else:
        assert pd111 and pd111[0].error.startswith(f"MisconfigurationException: You requested gpu: {refused}")


def test_lightning_ddp_with_a_spreading_device_map_is_a_multi_process_error(tmp_path):
    result, _ = lit(
        tmp_path,
        "accelerator='gpu', devices='auto', precision='bf16-mixed'",
        load=", dtype=torch.bfloat16, device_map='auto'",
        target="a100:4",
    )
    assert "PD302" in fired(result)
    one, _ = lit(
        tmp_path,
        "accelerator='gpu', devices='auto', precision='bf16-mixed'",
        load=", dtype=torch.bfloat16, device_map='auto'",
        target="a100:1",
    )
    assert "PD302" not in fired(one)


@pytest.mark.parametrize(
    "strategy,kind,stage,offload",
    [
        ("'deepspeed_stage_3'", "zero3", 3, False),
        ("'deepspeed'", "zero2", 2, False),
        ("'deepspeed_stage_2_offload'", "zero2", 2, True),
        ("DeepSpeedStrategy(stage=3, offload_optimizer=True)", "zero3", 3, True),
        ("'fsdp'", "fsdp-full", None, False),
        ("FSDPStrategy(sharding_strategy='SHARD_GRAD_OP')", "fsdp-grad-op", None, False),
        ("'ddp'", "ddp", None, False),
    ],
)
def test_lightning_strategies_shard_the_memory_plan(tmp_path, strategy, kind, stage, offload):
    code = LIT.format(
        trainer=f"accelerator='gpu', devices=4, strategy={strategy}, precision='bf16-mixed'",
        load=", dtype=torch.bfloat16",
    )
    code = "from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy\n" + code
    _, facts = check_code(tmp_path, code, target="a100:4")
    derived = derive(facts)
    path = facts.scripts[0].path
    setup = derived.setups[path]
    plan = plan_memory(setup, facts.scripts[0], facts.machine, facts.stack, facts.launch, derived.plan_for(path))
    assert isinstance(plan, MemoryPlan)
    assert (plan.shape.parallelism.kind, plan.shape.parallelism.gpus) == (kind, 4)
    assert plan.shape.parallelism.offload_optimizer == offload
    if stage is not None:
        assert setup.sharding.stage == stage and setup.sharding.config["bf16"] == {"enabled": True}


def test_lightning_deepspeed_fp16_owns_loss_scaling(tmp_path):
    """precision='16-mixed' under DeepSpeed is DeepSpeed's fp16 (fp32 master partitions, its own loss scaler), so
    fp16 weights are not a GradScaler error; under plain DDP they are."""
    ddp, _ = lit(
        tmp_path,
        "accelerator='gpu', devices=2, strategy='ddp', precision='16-mixed'",
        load=", dtype=torch.float16",
        target="v100:2",
    )
    assert "PD201" in fired(ddp)
    ds, _ = lit(
        tmp_path,
        "accelerator='gpu', devices=2, strategy='deepspeed_stage_2', precision='16-mixed'",
        load=", dtype=torch.float16",
        target="v100:2",
    )
    assert "PD201" not in fired(ds)


def test_lightning_port_only_matters_when_master_port_is_set(tmp_path):
    """Lightning's own launcher binds MASTER_PORT when it is set, else finds a free port itself."""
    code = LIT.format(
        trainer="accelerator='gpu', devices=2, strategy='ddp', precision='bf16-mixed'", load=", dtype=torch.bfloat16"
    )
    busy, _ = check_code(tmp_path, code, machine="l40s_2x_exclusive_stopped", environ={"MASTER_PORT": "29500"})
    assert "PD110" in fired(busy)
    free, _ = check_code(tmp_path, code, machine="l40s_2x_exclusive_stopped", environ={})
    assert "PD110" not in fired(free)


# --- Sentence Transformers -------------------------------------------------------------------------------------

ST = (
    "import torch\nfrom sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, "
    "SentenceTransformerTrainingArguments\n"
    "model = SentenceTransformer('BAAI/bge-base-en-v1.5'{kwargs})\n"
    "args = SentenceTransformerTrainingArguments(output_dir='out'{args})\n"
    "SentenceTransformerTrainer(model=model, args=args, train_dataset=None).train()\n"
)


def test_sentence_transformers_arguments_have_training_arguments_defaults(tmp_path):
    """No fp16/bf16 given: TrainingArguments' defaults (off), so fp16 weights train in pure fp16 (PD204)."""
    result, _ = check_code(
        tmp_path, ST.format(kwargs=", model_kwargs={'torch_dtype': torch.float16}", args=""), target="t4"
    )
    assert "PD204" in fired(result)
    scaled, _ = check_code(
        tmp_path, ST.format(kwargs=", model_kwargs={'torch_dtype': torch.float32}", args=", fp16=True"), target="t4"
    )
    assert not errors(scaled)


def test_sentence_transformers_dtype_comes_from_model_kwargs(tmp_path):
    _, facts = check_code(
        tmp_path, ST.format(kwargs=", model_kwargs={'dtype': 'bfloat16'}", args=", bf16=True"), target="a100"
    )
    setup = derive(facts).setups[facts.scripts[0].path]
    assert setup.style == "trainer" and setup.weights.value == "bfloat16"
    assert setup.weights.evidence[0].excerpt == "model_kwargs dtype: 'bfloat16'"


# --- Unsloth -------------------------------------------------------------------------------------------------------

UNSLOTH = (
    "from unsloth import FastLanguageModel\n"
    "model, tokenizer = FastLanguageModel.from_pretrained('unsloth/Meta-Llama-3.1-8B', 2048{kwargs})\n"
    "model = FastLanguageModel.get_peft_model(model, r=16)\n"
)


@pytest.mark.parametrize(
    "kwargs,target,dtype",
    [
        ("", "t4", "float16"),
        ("", "a100", "bfloat16"),
        (", dtype=None", "v100", "float16"),
        (", dtype=torch.bfloat16", "t4", "float16"),
        (", dtype=torch.bfloat16", "l4", "bfloat16"),
        (", None", "a10g", "bfloat16"),
    ],
)
def test_unsloth_dtype_none_is_bf16_only_where_the_gpu_has_it(tmp_path, kwargs, target, dtype):
    """Unsloth's SUPPORTS_BFLOAT16 is compute capability >= 8 (no emulation: T4/V100 get fp16), and bf16 asked on a
    GPU without it silently becomes fp16."""
    code = "import torch\n" + UNSLOTH.format(kwargs=kwargs)
    _, facts = check_code(tmp_path, code, target=target)
    setup = derive(facts).setups[facts.scripts[0].path]
    assert setup.weights.value == dtype


@pytest.mark.parametrize(
    "kwargs,quantized",
    [
        ("", "4bit"),
        (", load_in_4bit=False", False),
        (", load_in_8bit=True", "8bit"),
        (", full_finetuning=True", False),
        (", None, False", False),
    ],
)
def test_unsloth_loads_4bit_unless_told_otherwise(tmp_path, kwargs, quantized):
    _, facts = check_code(tmp_path, UNSLOTH.format(kwargs=kwargs), target="a100")
    setup = derive(facts).setups[facts.scripts[0].path]
    assert setup.quantized.value == quantized
    assert setup.peft.value is True  # FastLanguageModel.get_peft_model attaches LoRA adapters


def test_unsloth_keywords_are_not_judged_as_transformers_keywords(tmp_path):
    code = UNSLOTH.format(kwargs=", dtype=None, load_in_4bit=True")
    result, _ = check_code(tmp_path, code, target="a100", versions={"transformers": "4.46.0"})
    assert not {"PD406", "PD214", "PD211"} & fired(result)


def test_unsloth_bf16_flag_on_a_gpu_without_bf16_and_the_notebook_idiom(tmp_path):
    base = (
        "from unsloth import FastLanguageModel, is_bfloat16_supported\nfrom trl import SFTConfig, SFTTrainer\n"
        "model, tokenizer = FastLanguageModel.from_pretrained('unsloth/Meta-Llama-3.1-8B', dtype=None)\n"
        "model = FastLanguageModel.get_peft_model(model, r=16)\n"
        "SFTTrainer(model=model, args=SFTConfig(output_dir='o', {flags})).train()\n"
    )
    assert "PD101" in fired(check_code(tmp_path, base.format(flags="bf16=True"), target="t4")[0])
    idiom = base.format(flags="fp16=not is_bfloat16_supported(), bf16=is_bfloat16_supported()")
    for target in ("t4", "a100"):
        assert not fired(check_code(tmp_path, idiom, target=target)[0]) & {"PD101", "PD201", "PD202", "PD209"}


# --- diffusers-style accelerate scripts ----------------------------------------------------------------------------


def test_diffusers_frozen_modules_in_weight_dtype_keep_the_trained_unet_fp32():
    """weight_dtype follows accelerator.mixed_precision; the VAE and text encoder are cast to it, the UNet is not."""
    for precision in ("fp16", "bf16", "no"):
        result, facts = run(
            SCRIPTS / "diffusers" / "train_text_to_image_fixed.py", "a10g", args=("--mixed_precision", precision)
        )
        assert not fired(result) & {"PD201", "PD204", "PD211", "PD212"}, precision
        setup = derive(facts).setups[facts.scripts[0].path]
        assert setup.weights.value == "float32" and setup.model_load.callee.endswith(
            "UNet2DConditionModel.from_pretrained"
        )


def test_diffusers_loader_keeps_its_own_torch_dtype_keyword(tmp_path):
    code = (
        "import torch\nfrom accelerate import Accelerator\nfrom diffusers import UNet2DConditionModel\n"
        "accelerator = Accelerator(mixed_precision='fp16')\n"
        "unet = UNet2DConditionModel.from_pretrained('sd', subfolder='unet', torch_dtype=torch.float16)\n"
        "optimizer = torch.optim.AdamW(unet.parameters())\n"
        "unet, optimizer = accelerator.prepare(unet, optimizer)\n"
    )
    result, _ = check_code(tmp_path, code, target="a10g")
    assert "PD201" in fired(result)  # the trained UNet loaded in fp16 under fp16 AMP
    assert "PD214" not in fired(result)  # torch_dtype= is diffusers' keyword, not a renamed transformers one


UNSLOTH_FULL = """from unsloth import FastLanguageModel, is_bfloat16_supported
from trl import SFTConfig, SFTTrainer
model, tokenizer = FastLanguageModel.from_pretrained(model_name="unsloth/Llama-3.2-1B", max_seq_length=2048,
                                                     {extra})
trainer = SFTTrainer(model=model, tokenizer=tokenizer, train_dataset=ds,
                     args=SFTConfig(output_dir="o", fp16=not is_bfloat16_supported(), bf16=is_bfloat16_supported()))
trainer.train()
"""


def test_unsloth_full_finetuning_in_fp16_trains_float32_weights(tmp_path):
    """Unsloth upcasts every trained weight to float32 for a full fine-tune outside bf16, so fp16 AMP's scaler
    meets fp32 gradients on a T4; loaded unquantized in fp16 without full_finetuning, the same script is PD201."""
    full, _ = check_code(tmp_path, UNSLOTH_FULL.format(extra="full_finetuning=True"), target="t4")
    assert "PD201" not in fired(full)
    plain, _ = check_code(tmp_path, UNSLOTH_FULL.format(extra="load_in_4bit=False, dtype=torch.float16"), target="t4")
    assert "PD201" in fired(plain)


UNSLOTH_SFT = (
    "{imports}from trl import SFTConfig, SFTTrainer\n"
    "from transformers import AutoModelForCausalLM\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2')\n"
    "SFTTrainer(model=model, args=SFTConfig(output_dir='out'), max_seq_length=2048, train_dataset=None).train()\n"
)


def test_trl_keywords_under_unsloth_are_warnings_not_errors(run_check):
    """Unsloth rebuilds TRL's trainers and configs at import (unsloth/models/rl.py) and its notebooks pass
    `max_seq_length=` to SFTTrainer on TRL releases that dropped it: without Unsloth that is a TypeError."""
    plain, _ = run_check(UNSLOTH_SFT.format(imports=""), versions={"trl": "0.22.2"})
    assert [f.severity for f in plain.findings if f.rule_id == "PD217"] == ["error"]
    patched, _ = run_check(UNSLOTH_SFT.format(imports="import unsloth\n"), versions={"trl": "0.22.2"})
    found = [f for f in patched.findings if f.rule_id == "PD217"]
    assert found and all(f.severity == "warning" for f in found) and "Unsloth" in found[0].message


GRPO_LORA = (
    "from peft import LoraConfig, get_peft_model\nfrom transformers import AutoModelForCausalLM\n"
    "from trl import GRPOConfig, GRPOTrainer\n"
    "model = get_peft_model(AutoModelForCausalLM.from_pretrained('gpt2'), LoraConfig(r=16))\n"
    "GRPOTrainer(model=model, reward_funcs=[len], args=GRPOConfig(output_dir='out', bf16=True)).train()\n"
)


@pytest.mark.parametrize("trl,fires", [("0.14.0", False), ("0.22.0", True)])
def test_trl_turns_gradient_checkpointing_on_from_0_22(run_check, trl, fires):
    """TRL's configs default gradient_checkpointing to True from 0.22.0 (sft_config.py, grpo_config.py); on
    transformers 4.x that is the reentrant form, which finds no input requiring grad on a frozen base."""
    result, _ = run_check(GRPO_LORA, target="a100", versions={"trl": trl, "transformers": "4.56.2"})
    assert ("PD403" in {f.rule_id for f in result.findings}) is fires
