"""Memory of an Axolotl or LLaMA-Factory recipe: the job its framework builds from the recipe (batch, sequence,
LoRA, FSDP sharding and its activation checkpointing, a fused loss), estimated as the same job written as a script;
what the estimate does not model is an unknown with its reason, never a verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _doctor(tmp_path: Path, command: str, name: str, text: str, target: str) -> dict:
    """`precision-doctor COMMAND FILE --target T --format json` on a file written with `text`: its JSON."""
    path = tmp_path / name
    path.write_text(text)
    env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"), "PATH": "/usr/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", command, str(path), "--target", target, "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def _memory(tmp_path: Path, name: str, text: str, target: str) -> dict:
    return _doctor(tmp_path, "memory", name, text, target)["scripts"][0]


def _memory_findings(tmp_path: Path, name: str, text: str, target: str) -> list[dict]:
    return [f for f in _doctor(tmp_path, "check", name, text, target)["findings"] if f["id"].startswith("PD60")]


def _memory_ids(tmp_path: Path, name: str, text: str, target: str) -> set[str]:
    return {f["id"] for f in _memory_findings(tmp_path, name, text, target)}


AX_LORA = """base_model: meta-llama/Llama-3.1-8B
adapter: lora
lora_r: 16
lora_target_linear: true
micro_batch_size: 4
sequence_len: 4096
bf16: true
gradient_checkpointing: true
"""

SCRIPT_LORA = """import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", dtype=torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear"))
args = SFTConfig("out", bf16=True, per_device_train_batch_size={batch}, max_length={length},
                 gradient_checkpointing=True)
SFTTrainer(model=model, args=args, train_dataset=None).train()
"""


def test_an_axolotl_lora_recipe_is_estimated_as_the_same_job_written_as_a_script(tmp_path):
    recipe = _memory(tmp_path, "lora.yml", AX_LORA, "a100-80gb")
    script = _memory(tmp_path, "train.py", SCRIPT_LORA.format(batch=4, length=4096), "a100-80gb")
    assert recipe["shape"]["batch"] == 4 and recipe["shape"]["sequence"] == 4096
    assert recipe["shape"]["lora_rank"] == 16 and recipe["shape"]["lora_modules"] == "all-linear"
    assert recipe["per_gpu_bytes"] == script["per_gpu_bytes"]
    assert recipe["largest_batch_that_fits"] == script["largest_batch_that_fits"]


def test_axolotl_defaults_are_one_sample_of_512_tokens(tmp_path):
    entry = _memory(tmp_path, "lora.yml", "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nbf16: true\n", "a100")
    assert (entry["shape"]["batch"], entry["shape"]["sequence"], entry["shape"]["lora_rank"]) == (1, 512, 8)
    assert entry["shape"]["lora_modules"] == "default"  # peft's q/v without lora_target_linear


AX_FULL = """base_model: meta-llama/Llama-3.1-8B
micro_batch_size: 1
sequence_len: 2048
bf16: true
"""
FSDP2 = """fsdp_version: 2
fsdp_config:
  offload_params: {offload}
  reshard_after_forward: true
  activation_checkpointing: true
"""


def test_axolotl_fsdp_config_shards_the_full_fine_tune_over_the_gpus(tmp_path):
    """A full fine-tune of 8B in bf16 (8 bytes a parameter with AdamW) does not fit one 40 GB GPU per process under
    DDP; with `fsdp_config` Axolotl hands the Trainer fsdp=True (core/builders/base.py:684-686): sharded over 8 GPUs
    it fits, with FSDP's own activation checkpointing on."""
    unsharded = _memory(tmp_path, "full.yml", AX_FULL, "a100-40gb:8")
    assert unsharded["parallelism"]["kind"] == "ddp" and unsharded["verdict"] != "fits"
    assert _memory_ids(tmp_path, "full.yml", AX_FULL, "a100-40gb:8")
    sharded = _memory(tmp_path, "fsdp.yml", AX_FULL + FSDP2.format(offload="false"), "a100-40gb:8")
    assert sharded["parallelism"]["kind"] == "fsdp-full" and sharded["shape"]["checkpointing"] is True
    assert sharded["verdict"] == "fits"
    # an eighth of the weights, plus the layers gathered around the one computing
    assert sharded["per_gpu_bytes"]["weights"] < unsharded["per_gpu_bytes"]["weights"] / 3
    assert not _memory_ids(tmp_path, "fsdp.yml", AX_FULL + FSDP2.format(offload="false"), "a100-40gb:8")
    offloaded = _memory(tmp_path, "fsdp.yml", AX_FULL + FSDP2.format(offload="true"), "a100-40gb:8")
    assert offloaded["parallelism"]["offload_params"] is True
    assert offloaded["per_gpu_bytes"]["optimizer state"] < sharded["per_gpu_bytes"]["optimizer state"]


def test_a_fused_loss_holds_no_logits(tmp_path):
    """Liger's fused linear cross-entropy (Axolotl's plugin setting) computes the loss in chunks: the batch's
    logits over the 128k vocabulary are never held."""
    plain = _memory(tmp_path, "lora.yml", AX_LORA, "a100-80gb")
    liger = "plugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_fused_linear_cross_entropy: true\n"
    fused = _memory(tmp_path, "lora.yml", AX_LORA + liger, "a100-80gb")
    tokens, vocabulary = 4 * 4096, 128256
    saved = plain["per_gpu_bytes"]["activations"] - fused["per_gpu_bytes"]["activations"]
    assert saved >= tokens * vocabulary * 4  # the logits kept when the forward ends, at least
    assert fused["largest_batch_that_fits"] > plain["largest_batch_that_fits"]


@pytest.mark.parametrize(
    "extra, reason",
    [
        ("tensor_parallel_size: 2\n", "tensor parallelism"),
        ("rl: dpo\n", "preference-training"),
        ("activation_offloading: true\n", "activation offloading"),
        ("gradient_checkpointing: offload\n", "activation offloading"),
    ],
)
def test_what_the_estimate_does_not_model_is_an_unknown_not_a_verdict(tmp_path, extra, reason):
    text = AX_FULL + extra
    entry = _memory(tmp_path, "full.yml", text, "a100-80gb")
    assert reason in entry["unknown"]
    assert not _memory_ids(tmp_path, "full.yml", text, "a100-80gb")  # it would not fit judged as plain DDP


LF_LORA = """model_name_or_path: meta-llama/Llama-3.1-8B
stage: sft
do_train: true
finetuning_type: lora
per_device_train_batch_size: 4
bf16: true
"""


def test_a_llamafactory_lora_recipe_is_estimated_as_the_same_job_written_as_a_script(tmp_path):
    """LLaMA-Factory's defaults: lora_target `all` (every linear layer), lora_rank 8 (here 16), cutoff_len 2048."""
    recipe = _memory(tmp_path, "lora.yaml", LF_LORA + "lora_rank: 16\n", "a100-80gb")
    script = _memory(tmp_path, "train.py", SCRIPT_LORA.format(batch=4, length=2048), "a100-80gb")
    assert recipe["shape"]["lora_modules"] == "all-linear" and recipe["shape"]["sequence"] == 2048
    assert recipe["per_gpu_bytes"] == script["per_gpu_bytes"]


@pytest.mark.parametrize(
    "model, weights",
    [
        ("allenai/OLMo-2-1124-7B", "float16"),  # stored in float32: infer_optim_dtype gives float16
        ("meta-llama/Llama-3.1-8B", "bfloat16"),  # stored in bfloat16, and the A100 has it
    ],
)
def test_llamafactory_without_bf16_or_fp16_loads_what_infer_optim_dtype_picks(tmp_path, model, weights):
    text = f"model_name_or_path: {model}\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    entry = _memory(tmp_path, "lora.yaml", text, "a100-80gb")
    assert entry["checkpoint"]["model_id"] == model
    assert entry["shape"]["weight_dtype"] == weights


def test_a_llamafactory_recipe_that_does_not_train_gets_no_training_estimate(tmp_path):
    text = LF_LORA.replace("do_train: true\n", "do_predict: true\n")
    entry = _memory(tmp_path, "predict.yaml", text, "t4")
    assert "does not train" in entry["unknown"]
    assert not _memory_ids(tmp_path, "predict.yaml", text, "t4")


def test_llamafactory_checkpoints_every_model_it_trains_unless_told_not_to(tmp_path):
    """LLaMA-Factory calls gradient_checkpointing_enable() on every model it trains (model/patcher.py:476-483,
    model_utils/checkpointing.py:184-196); `disable_gradient_checkpointing: true` keeps every activation."""
    on = _memory(tmp_path, "lora.yaml", LF_LORA, "a100-80gb")
    off = _memory(tmp_path, "lora.yaml", LF_LORA + "disable_gradient_checkpointing: true\n", "a100-80gb")
    assert on["shape"]["checkpointing"] is True and off["shape"]["checkpointing"] is False
    assert off["per_gpu_bytes"]["activations"] > 3 * on["per_gpu_bytes"]["activations"]


def test_llamafactory_lora_under_ddp_turns_unused_parameter_search_off(tmp_path):
    """Its reentrant checkpointing under DDP would mark parameters ready twice with find_unused_parameters=True;
    LLaMA-Factory sets it False for LoRA (hparams/parser.py:596-602), and a recipe that sets it True gets PD303."""
    from precision_doctor import engine
    from precision_doctor.knowledge.versions import CURRENT
    from precision_doctor.probes.collect import gather

    from .conftest import machine_probes

    def errors(text):
        path = tmp_path / "lora.yaml"
        path.write_text(text)
        facts = gather([str(path)], target="a100:2", stack_overrides=CURRENT, **machine_probes())
        return {f.rule_id for f in engine.run(facts).findings if f.severity == "error"}

    assert "PD303" not in errors(LF_LORA)
    assert "PD303" in errors(LF_LORA + "ddp_find_unused_parameters: true\n")


@pytest.mark.parametrize(
    "extra, severity",
    [
        ("", "warning"),  # padded to each batch's longest sample: sequence_len is a cap, the worst case
        ("sample_packing: true\n", "error"),  # packed full: every batch is sequence_len long
        ("pad_to_sequence_len: true\n", "error"),
    ],
)
def test_a_sequence_length_that_is_only_a_cap_makes_the_verdict_a_warning(tmp_path, extra, severity):
    text = AX_LORA.replace("micro_batch_size: 4", "micro_batch_size: 64") + extra
    found = [f for f in _memory_findings(tmp_path, "big.yml", text, "a100-80gb") if f["id"] == "PD602"]
    assert [f["severity"] for f in found] == [severity]


@pytest.mark.parametrize(
    "fsdp, kind, offload",
    [
        # Axolotl's FSDPConfig has no sharding-strategy field: the key is dropped, FSDP shards fully
        (
            "fsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_activation_checkpointing: true\n",
            "fsdp-full",
            False,
        ),
        # the legacy list with fsdp_config's offload_params: FSDP_OFFLOAD_PARAMS still reaches accelerate
        ("fsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n  offload_params: true\n", "fsdp-full", True),
        ("fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: false\n", "fsdp-grad-op", False),
    ],
)
def test_axolotl_fsdp_settings_as_axolotl_and_transformers_read_them(tmp_path, fsdp, kind, offload):
    entry = _memory(tmp_path, "fsdp.yml", AX_FULL + fsdp, "a100-40gb:8")
    assert (entry["parallelism"]["kind"], entry["parallelism"]["offload_params"]) == (kind, offload)


@pytest.mark.parametrize(
    "extra, fused",
    [
        ("liger_fused_linear_cross_entropy: true\n", False),  # the plugin's keys are read only with the plugin
        ("plugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_fused_linear_cross_entropy: true\n", True),
        ("plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\ncut_cross_entropy: true\n", True),
    ],
)
def test_axolotl_fuses_the_loss_only_through_its_plugin(tmp_path, extra, fused):
    assert _memory(tmp_path, "lora.yml", AX_LORA + extra, "a100-80gb")["shape"]["chunked_loss"] is fused


@pytest.mark.parametrize("model, fused", [("meta-llama/Llama-3.1-8B", True), ("HuggingFaceTB/SmolLM3-3B", False)])
def test_llamafactory_applies_liger_to_the_architectures_it_lists(tmp_path, model, fused):
    text = LF_LORA.replace("meta-llama/Llama-3.1-8B", model) + "enable_liger_kernel: true\n"
    assert _memory(tmp_path, "lora.yaml", text, "a100-80gb")["shape"]["chunked_loss"] is fused


@pytest.mark.parametrize("extra", ["use_kt: true\n", "use_hyper_parallel: true\n"])
def test_llamafactory_backends_the_estimate_does_not_model_are_unknown(tmp_path, extra):
    assert "not modelled" in _memory(tmp_path, "lora.yaml", LF_LORA + extra, "t4")["unknown"]


def test_modules_to_save_copies_are_trained_beside_the_frozen_originals(tmp_path):
    """Axolotl's lora_modules_to_save (LLaMA-Factory's additional_target) become peft's modules_to_save: trainable
    copies of the embedding and the output layer, each vocabulary x hidden, with their gradients and AdamW state."""
    plain = _memory(tmp_path, "lora.yml", AX_LORA, "a100-80gb")["per_gpu_bytes"]
    saved = _memory(
        tmp_path, "lora.yml", AX_LORA + "lora_modules_to_save:\n  - embed_tokens\n  - lm_head\n", "a100-80gb"
    )["per_gpu_bytes"]
    copies = 2 * 128256 * 4096  # Llama-3.1-8B's embedding and lm_head (untied)
    assert saved["weights"] - plain["weights"] == copies * 2  # bf16
    assert saved["gradients"] - plain["gradients"] == copies * 2
    assert saved["optimizer state"] - plain["optimizer state"] == copies * 4  # AdamW state in bf16
    lf = _memory(tmp_path, "lora.yaml", LF_LORA + "additional_target: embed_tokens,lm_head\n", "a100-80gb")
    lf_plain = _memory(tmp_path, "lora.yaml", LF_LORA, "a100-80gb")
    assert lf["per_gpu_bytes"]["weights"] - lf_plain["per_gpu_bytes"]["weights"] == copies * 2


def test_a_llamafactory_lora_target_list_is_kept_as_a_list(tmp_path):
    text = LF_LORA + "lora_target:\n  - gate_proj\n  - up_proj\n  - down_proj\n"
    assert _memory(tmp_path, "lora.yaml", text, "a100-80gb")["shape"]["lora_modules"] == "all-linear"
    text = LF_LORA + "lora_target: q_proj,v_proj\n"
    assert _memory(tmp_path, "lora.yaml", text, "a100-80gb")["shape"]["lora_modules"] == "default"


def test_a_recipe_s_memory_fix_names_the_recipe_s_own_keys(tmp_path):
    text = AX_LORA.replace("micro_batch_size: 4", "micro_batch_size: 64") + "sample_packing: true\n"
    (found,) = [f for f in _memory_findings(tmp_path, "big.yml", text, "a100-80gb") if f["id"] == "PD602"]
    assert (
        "`micro_batch_size: " in found["fix"]["description"]
        and "gradient_accumulation_steps: " in found["fix"]["description"]
    )
    assert "per_device_train_batch_size" not in json.dumps(found["fix"])


SCRIPT_FULL = """import torch
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B", dtype=torch.bfloat16{attention})
args = SFTConfig("out", bf16=True, per_device_train_batch_size=8, max_length=1024, gradient_checkpointing=False)
SFTTrainer(model=model, args=args, train_dataset=None).train()
"""
AX_FULL_1B = "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 8\nsequence_len: 1024\nbf16: true\n"


@pytest.mark.parametrize(
    "extra, kept_fp32",
    [
        ("", True),  # sdpa by default: Axolotl keeps embeddings, output layer and norms in fp32
        ("attn_implementation: eager\n", True),
        ("attn_implementation: flash_attention_2\n", False),  # cast back for flash attention
        ("flash_attention: true\n", False),  # the legacy flag, the same
        ("adapter: lora\nlora_r: 8\n", False),  # cast back for an adapter
        ("deepspeed: ds.json\n", False),  # DeepSpeed casts the whole module to half
        (
            "plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\ncut_cross_entropy: true\n",
            False,
        ),
    ],
)
def test_axolotl_full_fine_tunes_keep_embeddings_in_fp32_as_its_loader_does(tmp_path, extra, kept_fp32):
    """Axolotl's loader upcasts embed_tokens, lm_head and the norms of a full fine-tune (loaders/model.py:422-476);
    traced at full size (benchmarks/memory_trace.py) that is 14 % more memory for Llama-3.2-1B at 8x1024: the
    fp32 matrix, its gradient and AdamW state, the fp32 residual stream and the output layer's bf16 copy."""
    recipe = _memory(tmp_path, "full.yml", AX_FULL_1B + extra, "a100-80gb")
    assert recipe["shape"]["fp32_embeddings"] is kept_fp32
    if "adapter" in extra or "deepspeed" in extra or "cut_cross" in extra:
        return  # another job than the script twin below
    attention = ", attn_implementation='flash_attention_2'" if "flash" in extra else ""
    script = _memory(tmp_path, "train.py", SCRIPT_FULL.format(attention=attention), "a100-80gb")
    embedding = 128256 * 2048  # tied: one matrix
    weights = recipe["per_gpu_bytes"]["weights"] - script["per_gpu_bytes"]["weights"]
    state = recipe["per_gpu_bytes"]["optimizer state"] - script["per_gpu_bytes"]["optimizer state"]
    if kept_fp32:
        assert (weights, state) == (2 * embedding, 4 * embedding)  # fp32 vs bf16 bytes; AdamW's two fp32 states
        assert recipe["per_gpu_bytes"]["activations"] > script["per_gpu_bytes"]["activations"] * 1.1
    else:
        assert (weights, state) == (0, 0)
        assert recipe["per_gpu_bytes"] == script["per_gpu_bytes"]


def test_pure_bf16_advice_on_an_axolotl_full_fine_tune_names_what_stays_fp32(tmp_path):
    findings = _doctor(tmp_path, "check", "full.yml", AX_FULL_1B, "a100-80gb")["findings"]
    advice = [f["message"] for f in findings if f["id"] == "PD212"]
    assert advice and "embeddings, output layer and norms are kept in fp32" in advice[0]
