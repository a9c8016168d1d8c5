"""`check CONFIG.yaml`: Axolotl, LLaMA-Factory and accelerate configs checked as their tools run them. The five
seed stories re-expressed in each family's config, each with its correct twin."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.model.errors import InputError
from precision_doctor.probes.collect import gather

from .conftest import machine_probes

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "fixtures" / "configs"

# The stack of the seeds' era: torch.cuda.is_bf16_supported() answers for native bf16 only before torch 2.3
TORCH_2_2 = {"torch": "2.2.2"}

# (config, target, rules that must fire[, versions]); the `_fixed` twin on the same target fires no error
CASES = [
    ("axolotl/seed000_deepspeed_precision.yml", "a100", {"PD501"}),
    # bf16: auto falls back to fp16 weights + AMP where transformers' check answers False
    ("axolotl/seed001_titan_full_ft.yml", "titan-rtx", {"PD201"}, TORCH_2_2),
    # ... and picks emulated bf16 where it counts emulation (torch >= 2.3, transformers >= 4.35)
    ("axolotl/seed001_titan_full_ft.yml", "titan-rtx", {"PD102"}),
    ("axolotl/seed002_fp16_device_map.yml", "t4", {"PD201"}),
    ("axolotl/seed003_qwen2vl_4bit.yml", "rtx-6000-ada:2", {"PD404"}),
    ("axolotl/seed004_v100_bf16.yml", "v100", {"PD101", "PD103", "PD106"}),
    ("llamafactory/seed000_deepspeed_precision.yaml", "h100", {"PD501"}),
    ("llamafactory/seed001_titan_bf16_lora.yaml", "titan-rtx", {"PD101"}),
    ("llamafactory/seed002_fp16_bf16_both.yaml", "a100:8", {"PD209"}),
    ("llamafactory/seed003_qlora_full.yaml", "rtx-6000-ada:2", {"PD404"}),
    ("llamafactory/seed004_h100_pure_bf16.yaml", "h100:8", {"PD212"}),
    ("accelerate/v100_bf16.yaml", "v100:4", {"PD101"}),
]


def run(rel, target, versions=None):
    stack = {**CURRENT, **(versions or {})}
    facts = gather([str(CONFIGS / rel)], target=target, stack_overrides=stack, **machine_probes())
    return engine.run(facts)


def twin(rel: str) -> str:
    path = Path(rel)
    return str(path.with_name(path.stem + "_fixed" + path.suffix))


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{'-'.join(sorted(c[2]))}" for c in CASES])
def test_config_story_fires_and_its_twin_is_clean(case):
    rel, target, must, versions = (*case, None) if len(case) == 3 else case
    fired = {f.rule_id for f in run(rel, target, versions).findings}
    assert must <= fired, f"missing {must - fired}; got {sorted(fired)}"
    clean = run(twin(rel), target, versions)
    assert not [f for f in clean.findings if f.severity == "error"], [f.message for f in clean.findings]
    assert not must & {f.rule_id for f in clean.findings}


def test_findings_point_at_the_yaml_lines_that_cause_them():
    result = run("axolotl/seed002_fp16_device_map.yml", "t4")
    pd201 = next(f for f in result.findings if f.rule_id == "PD201")
    lines = {e.location.line for e in pd201.evidence if e.location and e.location.path.endswith(".yml")}
    assert lines == {14}  # fp16: true: Axolotl loads float16 weights for it, and runs fp16 AMP
    assert any("Axolotl config" in e.note for e in pd201.evidence)


def test_axolotl_bf16_auto_is_decided_by_the_gpu():
    """bf16: auto (Axolotl's default) is bf16 on an A100: the same config that breaks on a Titan RTX is fine."""
    assert not [f for f in run("axolotl/seed001_titan_full_ft.yml", "a100").findings if f.severity == "error"]


def test_bf16_true_turns_fp16_off_as_axolotl_does(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text("base_model: m\nadapter: lora\nbf16: true\nfp16: true\n")
    facts = gather([str(path)], target="a100", stack_overrides=CURRENT, **machine_probes())
    assert "PD209" not in {f.rule_id for f in engine.run(facts).findings}


def test_a_config_the_doctor_does_not_know_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "other.yaml"
    path.write_text("learning_rate: 1e-4\n")
    with pytest.raises(InputError, match="not a config the doctor recognises"):
        gather([str(path)], target="a100", stack_overrides=CURRENT, **machine_probes())
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(path), "--target", "a100"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_fix_never_edits_a_config_with_python_edits(tmp_path):
    path = tmp_path / "c.yml"
    original = (CONFIGS / "axolotl" / "seed004_v100_bf16.yml").read_text()
    path.write_text(original)
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "fix", str(path), "--target", "v100", "--yes", "--unsafe"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr
    assert path.read_text() == original


STATIC_PROBE = """
import sys, io, contextlib
from precision_doctor.cli.app import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["check", sys.argv[1], "--target", "t4"])
heavy = ("torch", "transformers", "lightning", "pytorch_lightning", "sentence_transformers", "axolotl",
         "llamafactory", "omegaconf", "ruamel", "yaml")
print(__import__("json").dumps(sorted(m for m in heavy if m in sys.modules)))
"""


@pytest.mark.parametrize(
    "path,allowed",
    [
        ("fixtures/seed001_titan_fp16/buggy/train.py", []),
        ("fixtures/configs/axolotl/seed001_titan_full_ft.yml", ["yaml"]),
    ],
)
def test_static_mode_imports_no_framework_and_yaml_only_for_yaml(path, allowed):
    proc = subprocess.run(
        [sys.executable, "-c", STATIC_PROBE, path], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == allowed, proc.stderr


QLORA_FSDP = """base_model: NousResearch/Meta-Llama-3-8B
load_in_4bit: true
adapter: qlora
lora_r: 16
bf16: auto
tf32: true
fsdp:
  - full_shard
  - auto_wrap
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
"""


def test_axolotl_qlora_under_fsdp_gets_the_storage_dtype_axolotl_sets(tmp_path):
    """Axolotl builds QLoRA's BitsAndBytesConfig with bnb_4bit_quant_storage=bfloat16 itself, so its FSDP QLoRA
    examples are fine where bf16 is on; on a GPU where `bf16: auto` falls back to fp16 the bf16 storage sits
    beside fp16 weights (torch < 2.3, where transformers' check answers for native bf16 only), which FSDP cannot
    flatten into one FlatParameter."""
    path = tmp_path / "qlora-fsdp.yml"
    path.write_text(QLORA_FSDP)
    on_a100 = engine.run(gather([str(path)], target="a100", stack_overrides=CURRENT, **machine_probes()))
    assert "PD504" not in {f.rule_id for f in on_a100.findings}
    on_t4 = engine.run(gather([str(path)], target="t4", stack_overrides=CURRENT, **machine_probes()))
    assert "PD504" not in {f.rule_id for f in on_t4.findings}  # auto picks (emulated) bf16 on current stacks
    stack = {**CURRENT, **TORCH_2_2}
    on_t4 = engine.run(gather([str(path)], target="t4", stack_overrides=stack, **machine_probes()))
    pd504 = next(f for f in on_t4.findings if f.rule_id == "PD504")
    assert "bnb_4bit_quant_storage=bfloat16 beside float16 weights" in pd504.message
    assert "uniform dtype" in pd504.error and "uint8" not in pd504.message
    # the user's own bnb_config_kwargs win over Axolotl's choice
    path.write_text(
        QLORA_FSDP.replace("bf16: auto", "bf16: false\nfp16: true")
        + "bnb_config_kwargs:\n  bnb_4bit_quant_storage: float16\n"
    )
    fp16 = engine.run(gather([str(path)], target="t4", stack_overrides=CURRENT, **machine_probes()))
    assert "PD504" not in {f.rule_id for f in fp16.findings}


def test_a_llamafactory_v1_config_is_named_as_such_and_refused_with_exit_2(tmp_path):
    path = tmp_path / "train_lora_sft.yaml"
    path.write_text(
        "model: Qwen/Qwen3-4B\nmodel_class: llm\npeft_config:\n  name: lora\n  r: 16\n"
        "dist_config:\n  name: fsdp2\noutput_dir: ./out\nmicro_batch_size: 1\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(path), "--target", "a100"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "LLaMA-Factory v1 config" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("extra", [["--keep-going"], ["SCRIPT"]], ids=["keep-going", "beside-a-script"])
def test_a_named_config_is_read_as_its_tool_runs_it_among_other_paths(tmp_path, extra):
    """`check cfg.yml train.py` or `check --keep-going cfg.yml` (pre-commit): the config is still a config, not
    a Python file that does not parse."""
    config = CONFIGS / "axolotl/seed002_fp16_device_map.yml"
    script = tmp_path / "train.py"
    script.write_text("print('no training here')\n")
    args = [str(script) if a == "SCRIPT" else a for a in extra]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "precision_doctor",
            "check",
            str(config),
            *args,
            "--target",
            "t4",
            "--format",
            "concise",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "PD201" in proc.stdout and "syntax error" not in proc.stdout


def test_llamafactory_cli_starts_a_process_per_gpu():
    """`llamafactory-cli train recipe.yaml` on a node with several GPUs starts torchrun itself, one process per GPU
    (LLaMA-Factory 0.9.5 launcher.py:59-66): no DataParallel warning, and the recipe is planned as that many ranks."""
    from precision_doctor.derive import derive

    rel = "llamafactory/seed004_h100_pure_bf16_fixed.yaml"
    facts = gather([str(CONFIGS / rel)], target="a100:8", stack_overrides=CURRENT, **machine_probes())
    assert "PD114" not in {f.rule_id for f in engine.run(facts).findings}
    plan = derive(facts).plan_for(facts.scripts[0].path)
    assert plan.processes == 8 and "llamafactory-cli" in plan.processes_evidence.note
    one = gather([str(CONFIGS / rel)], target="a100:1", stack_overrides=CURRENT, **machine_probes())
    assert derive(one).plan_for(one.scripts[0].path).processes in (None, 1)
    # `axolotl train` starts `accelerate launch`, which takes every GPU with no config of its own
    axolotl = gather(
        [str(CONFIGS / "axolotl/seed001_titan_full_ft.yml")],
        target="a100:8",
        stack_overrides=CURRENT,
        **machine_probes(),
    )
    assert "PD114" not in {f.rule_id for f in engine.run(axolotl).findings}
    assert derive(axolotl).plan_for(axolotl.scripts[0].path).processes == 8


AXOLOTL_FP8 = "base_model: meta-llama/Llama-3.2-1B\nbf16: true\nfp8: true\ntorch_compile: true\n"
LLAMAFACTORY_FP8 = (
    "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\nfinetuning_type: full\nbf16: true\nfp8: true\n"
)


@pytest.mark.parametrize(
    "text,target,expected",
    [
        (AXOLOTL_FP8, "a100", "error"),  # Axolotl's check_fp8: capability >= 9.0, before anything loads
        (AXOLOTL_FP8, "l40s", "error"),  # ... so an Ada card is refused too, although it has fp8 tensor cores
        (AXOLOTL_FP8, "h100", None),
        (AXOLOTL_FP8.replace("fp8: true", "fp8: false"), "a100", None),
        (LLAMAFACTORY_FP8, "a100", "warning"),  # accelerate falls back to fp16 with a warning below 8.9
        (LLAMAFACTORY_FP8, "l40s", None),
        (LLAMAFACTORY_FP8.replace("fp8: true\n", ""), "t4", None),
    ],
    ids=["axolotl-a100", "axolotl-l40s", "axolotl-h100", "axolotl-off", "lf-a100", "lf-l40s", "lf-off"],
)
def test_fp8_in_a_recipe_is_judged_by_its_tool_s_own_gpu_check(tmp_path, text, target, expected):
    path = tmp_path / ("recipe.yml" if "base_model" in text else "recipe.yaml")
    path.write_text(text)
    result = engine.run(gather([str(path)], target=target, stack_overrides=CURRENT, **machine_probes()))
    found = [f for f in result.findings if f.rule_id == "PD104"]
    assert [f.severity for f in found] == ([expected] if expected else [])
    if found:
        assert found[0].evidence[0].location.line == (3 if "base_model" in text else 5)  # the fp8 line
    if expected == "error":
        assert found[0].error == "ValueError: fp8 requested, but fp8 is not supported on this GPU"


@pytest.mark.parametrize(
    "line,fires",
    [
        ("attn_implementation: flash_attention_2", True),
        ("flash_attention: true", True),  # the legacy flag Axolotl maps to flash_attention_2
        ("attn_implementation: sdpa", False),
        ("sdp_attention: true", False),
    ],
)
def test_axolotl_attention_setting_reaches_the_model_load(tmp_path, line, fires):
    path = tmp_path / "recipe.yml"
    path.write_text(f"base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nbf16: false\nfp16: true\n{line}\n")
    result = engine.run(gather([str(path)], target="t4", stack_overrides=CURRENT, **machine_probes()))
    found = [f for f in result.findings if f.rule_id == "PD106"]
    assert bool(found) == fires
    if fires:
        assert found[0].evidence[0].location.line == 5


AX_DDP = (
    "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nbf16: true\ndevice_map: auto\ngradient_checkpointing: true\n"
    "gradient_checkpointing_kwargs:\n  use_reentrant: true\n"
)


def _run_recipe(tmp_path, name, text, launcher=None, target="a100:2"):
    path = tmp_path / name
    path.write_text(text)
    facts = gather([str(path)], target=target, launcher=launcher, stack_overrides=CURRENT, **machine_probes())
    return {f.rule_id for f in engine.run(facts).findings if f.severity == "error"}


def test_axolotl_places_each_rank_and_turns_unused_parameter_search_off(tmp_path):
    """Under several processes Axolotl replaces device_map by {"": LOCAL_RANK} (normalize_config) and passes
    ddp_find_unused_parameters=False (core/builders/causal.py): no spread-model error, no reentrant-DDP error.
    The recipe that turns the search on gets PD303 back."""
    assert not _run_recipe(tmp_path, "ax.yml", AX_DDP) & {"PD302", "PD303", "PD114"}
    assert "PD303" in _run_recipe(tmp_path, "ax.yml", AX_DDP + "ddp_find_unused_parameters: true\n")


def test_llamafactory_qlora_stores_4bit_weights_in_the_compute_dtype_for_fsdp(tmp_path):
    """LLaMA-Factory builds QLoRA's BitsAndBytesConfig with bnb_4bit_quant_storage=compute_dtype, so FSDP can
    flatten it (model/model_utils/quantization.py): no PD504 under an FSDP launch."""
    text = (
        "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\nfinetuning_type: lora\nquantization_bit: 4\n"
        "bf16: true\n"
    )
    launcher = "accelerate launch --use_fsdp --num_processes 2 -m llamafactory.cli train lf.yaml"
    assert "PD504" not in _run_recipe(tmp_path, "lf.yaml", text, launcher)


LF_ATTENTION = (
    "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    "lora_target: all\ndataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\nfp16: true\n"
    "flash_attn: {attn}\n"
)


@pytest.mark.parametrize(
    "attn,target,severity",
    [
        ("fa2", "t4", "warning"),  # fails where flash-attn is installed; LLaMA-Factory falls back without it
        ("fa3", "t4", "warning"),
        ("fa2", "a10g", None),  # Ampere: FlashAttention runs
        ("sdpa", "t4", None),
        ("disabled", "t4", None),
        ("auto", "t4", None),  # transformers' own default
    ],
)
def test_llamafactory_flash_attn_is_the_attention_it_asks_for(tmp_path, attn, target, severity):
    path = tmp_path / "lf.yaml"
    path.write_text(LF_ATTENTION.format(attn=attn))
    facts = gather([str(path)], target=target, stack_overrides=CURRENT, **machine_probes())
    load = next(c for c in facts.scripts[0].calls if c.kind == "model_load")
    expected = {"fa2": "flash_attention_2", "fa3": "flash_attention_3", "sdpa": "sdpa", "disabled": "eager"}
    assert load.kwarg("attn_implementation").value == expected.get(attn, None)
    pd106 = [f for f in engine.run(facts).findings if f.rule_id == "PD106"]
    assert [f.severity for f in pd106] == ([severity] if severity else [])
    if pd106:
        assert "attention.py:77-90" in " ".join(e.note for e in pd106[0].evidence)


AXOLOTL_DDP_GC = (
    "base_model: {base}\nadapter: lora\nlora_r: 16\nlora_target_linear: true\nbf16: true\nmicro_batch_size: 2\n"
    "gradient_accumulation_steps: 4\ngradient_checkpointing: true\n{extra}"
)


@pytest.mark.parametrize(
    "base,extra,fires",
    [
        # Axolotl sets use_reentrant: True itself (utils/config/__init__.py:377-383); with find_unused on, LoRA under
        # DDP dies marking parameters ready twice
        ("meta-llama/Llama-3.2-1B", "ddp_find_unused_parameters: true\n", True),
        # Axolotl passes find_unused False under DDP unless the recipe sets it: reentrant then trains
        ("meta-llama/Llama-3.2-1B", "", False),
        (
            "meta-llama/Llama-3.2-1B",
            "ddp_find_unused_parameters: true\ngradient_checkpointing_kwargs:\n  use_reentrant: false\n",
            False,
        ),
        # Gemma 4 is forced non-reentrant (and find_unused on): utils/config/__init__.py:390-415
        ("google/gemma-4-26B-A4B", "ddp_find_unused_parameters: true\n", False),
        ("google/gemma-4-26B-A4B", "", False),
    ],
)
def test_axolotl_checkpointing_defaults_under_ddp(tmp_path, monkeypatch, base, extra, fires):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "cfg.yml"
    path.write_text(AXOLOTL_DDP_GC.format(base=base, extra=extra))
    facts = gather(
        [str(path)], target="a100:2", launcher="axolotl train cfg.yml", stack_overrides=CURRENT, **machine_probes()
    )
    found = [f for f in engine.run(facts).findings if f.rule_id == "PD303"]
    assert bool(found) is fires, [f.message for f in found]
    if found:
        assert any("sets use_reentrant: True" in e.note and e.location.line == 8 for e in found[0].evidence)


def test_axolotl_replaces_a_recipes_device_map_under_several_processes(tmp_path, monkeypatch):
    """`device_map: {"": 0}` in a recipe is replaced by each rank's own GPU when Axolotl runs several processes."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "cfg.yml"
    path.write_text(AXOLOTL_DDP_GC.format(base="meta-llama/Llama-3.2-1B", extra='device_map:\n  "": 0\n'))
    facts = gather(
        [str(path)], target="a100:2", launcher="axolotl train cfg.yml", stack_overrides=CURRENT, **machine_probes()
    )
    assert not [f for f in engine.run(facts).findings if f.rule_id in ("PD112", "PD302")]


GEMMA2_CONFIG = (
    '{"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "torch_dtype": "bfloat16", "hidden_size": 2304, '
    '"intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, '
    '"vocab_size": 256000, "head_dim": 256}'
)
LF_GEMMA2 = (
    "model_name_or_path: {ckpt}\nstage: sft\ndo_train: true\nfinetuning_type: lora\ntemplate: gemma\n"
    "dataset: alpaca_en_demo\noutput_dir: out\n{extra}"
)


def _lf_gemma2(tmp_path, extra, target):
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    (tmp_path / "ckpt" / "config.json").write_text(GEMMA2_CONFIG)
    path = tmp_path / "lf.yaml"
    path.write_text(LF_GEMMA2.format(ckpt=tmp_path / "ckpt", extra=extra))
    facts = gather([str(path)], target=target, stack_overrides=CURRENT, **machine_probes())
    return {(f.rule_id, f.severity) for f in engine.run(facts).findings}


@pytest.mark.parametrize(
    "attn,refused",
    [("sdpa", True), ("disabled", False), ("auto", False)],  # Gemma2PreTrainedModel._supports_sdpa = False
)
def test_llamafactory_sdpa_on_gemma_2_is_refused_by_transformers(tmp_path, attn, refused):
    """LLaMA-Factory passes `flash_attn: sdpa` on as attn_implementation="sdpa" (attention.py:92-93); transformers
    5.x refuses it for Gemma 2 while building the model, where LLaMA-Factory only warns (attention.py:55-58)."""
    found = _lf_gemma2(tmp_path, f"bf16: true\nflash_attn: {attn}\n", "a100")
    assert (("PD218", "error") in found) is refused


@pytest.mark.parametrize("target,emulated", [("t4", True), ("v100", True), ("a100", False)])
def test_llamafactory_without_a_precision_loads_bf16_where_the_guard_counts_emulation(tmp_path, target, emulated):
    """No bf16/fp16: infer_optim_dtype loads a bf16 checkpoint in bf16 where is_torch_bf16_gpu_available() answers
    True (extras/misc.py:241-248), which on torch >= 2.3 counts emulation: a T4 or V100 trains in emulated bf16."""
    found = _lf_gemma2(tmp_path, "flash_attn: disabled\n", target)
    assert (("PD102", "warning") in found) is emulated


def test_a_recipe_fix_is_a_step_in_the_recipes_words_never_an_edit_of_the_yaml(tmp_path):
    """`fix` writes Python only: a finding on a recipe value says which key to write and is display only (it once
    carried a "safe" edit of `'flash_attention_2'` on the YAML line `flash_attn: fa2`, which `fix` then refused)."""
    path = tmp_path / "lf.yaml"
    path.write_text(LF_ATTENTION.format(attn="fa2"))
    before = path.read_bytes()
    facts = gather([str(path)], target="t4", stack_overrides=CURRENT, **machine_probes())
    pd106 = next(f for f in engine.run(facts).findings if f.rule_id == "PD106")
    assert pd106.fix.edits == () and not pd106.fix.safe
    assert "`flash_attn: sdpa`" in pd106.fix.description
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "fix", str(path), "--target", "t4", "--yes", "--no-cache"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert "does not parse" not in done.stdout + done.stderr
    assert path.read_bytes() == before


@pytest.mark.parametrize("target,refused", [("t4", True), ("v100", True), ("a100", False), ("h100", False)])
def test_llamafactory_loads_gpt_oss_with_its_hub_kernel_whatever_flash_attn_says(tmp_path, target, refused):
    """configure_attn_implementation gives gpt_oss the vllm-flash-attn3 hub kernel before reading `flash_attn`
    (attention.py:34-44): `flash_attn: sdpa` does not avoid it, and below Ampere it is FlashAttention on a GPU
    it is not built for."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(
        '{"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "torch_dtype": "bfloat16"}'
    )
    path = tmp_path / "lf.yaml"
    path.write_text(LF_GEMMA2.format(ckpt=tmp_path / "ckpt", extra="bf16: true\nflash_attn: sdpa\n"))
    facts = gather([str(path)], target=target, stack_overrides=CURRENT, **machine_probes())
    load = next(c for c in facts.scripts[0].calls if c.kind == "model_load")
    assert load.kwarg("attn_implementation").value == "kernels-community/vllm-flash-attn3"
    pd106 = [f for f in engine.run(facts).findings if f.rule_id == "PD106"]
    assert [f.severity for f in pd106] == (["error"] if refused else [])
    if pd106:
        assert "whatever `flash_attn` says" in pd106[0].fix.description and not pd106[0].fix.edits


@pytest.mark.parametrize("tf32,target,refused", [("auto", "t4", False), ("true", "t4", True), ("auto", "a100", False)])
def test_axolotl_tf32_auto_is_its_own_guard(tmp_path, tf32, target, refused):
    """`tf32: auto` becomes `is_torch_tf32_available()` (config.py:1778-1782): off below Ampere, so nothing fails;
    `tf32: true` on a T4 is refused."""
    recipe = (
        "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 16\nlora_target_linear: true\nfp16: true\n"
        f"micro_batch_size: 2\ntf32: {tf32}\n"
    )
    assert ("PD103" in _run_recipe(tmp_path, "ax.yml", recipe, target=target)) is refused


ACCELERATE_FP16 = (
    "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nmixed_precision: fp16\nnum_processes: 2\n"
)


def test_axolotl_sets_accelerates_precision_from_the_recipe_itself(tmp_path, monkeypatch):
    """Axolotl exports ACCELERATE_MIXED_PRECISION from the recipe (utils/trainer.py:684-691), so an accelerate
    config saying fp16 does not reach a bf16 recipe; the same config under a plain Accelerator() script does."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acc.yaml").write_text(ACCELERATE_FP16)
    recipe = (
        "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 16\nlora_target_linear: true\nbf16: true\n"
        "micro_batch_size: 2\n"
    )
    (tmp_path / "r.yml").write_text(recipe)
    launch = "accelerate launch --config_file acc.yaml -m axolotl.cli.train r.yml"
    facts = gather(["r.yml"], target="a100:2", launcher=launch, stack_overrides=CURRENT, **machine_probes())
    assert not {"PD113", "PD202"} & {f.rule_id for f in engine.run(facts).findings}
    script = (
        "import torch\nfrom accelerate import Accelerator\nfrom transformers import AutoModelForCausalLM\n"
        "acc = Accelerator()\nmodel = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
        "opt = torch.optim.AdamW(model.parameters())\nmodel, opt = acc.prepare(model, opt)\n"
        "for batch in range(3):\n    acc.backward(model(**batch).loss)\n    opt.step()\n"
    )
    path = tmp_path / "train.py"
    path.write_text(script)
    facts = gather(
        [str(path)],
        target="a100:2",
        launcher="accelerate launch --config_file acc.yaml train.py",
        stack_overrides=CURRENT,
        **machine_probes(),
    )
    assert {"PD113", "PD202"} <= {f.rule_id for f in engine.run(facts).findings}


@pytest.mark.parametrize("target,refused", [("t4", True), ("a100", False)])
def test_a_flash_attention_hub_kernel_a_recipe_names_needs_ampere(tmp_path, target, refused):
    """Axolotl's gpt-oss examples name `attn_implementation: kernels-community/vllm-flash-attn3`: below Ampere it
    has no build; the step is eager attention (gpt_oss implements no SDPA), in the recipe's own key."""
    recipe = (
        "base_model: openai/gpt-oss-20b\nadapter: lora\nlora_r: 8\nlora_target_linear: true\nbf16: true\n"
        "micro_batch_size: 1\nattn_implementation: kernels-community/vllm-flash-attn3\n"
    )
    path = tmp_path / "ax.yml"
    path.write_text(recipe)
    facts = gather([str(path)], target=target, stack_overrides=CURRENT, **machine_probes())
    pd106 = [f for f in engine.run(facts).findings if f.rule_id == "PD106"]
    assert bool(pd106) is refused
    if pd106:
        assert "`attn_implementation: eager`" in pd106[0].fix.description and not pd106[0].fix.edits
