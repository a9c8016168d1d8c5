"""Checkpoints stored quantized (config.json's quantization_config: GPTQ, AWQ, FP8, a saved bitsandbytes model)
load quantized with no quantization argument. The doctor reads the method from the config: the Trainer refuses
such a model without adapters (transformers trainer_utils.py validate_quantization_for_training), and the memory
estimate, which does not model packed weights, says so instead of counting them as float16."""

import json

import pytest

from precision_doctor.knowledge.versions import CURRENT

from .conftest import check_code

_LLAMA_1B = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 8192,
    "vocab_size": 128256,
    "torch_dtype": "float16",
}
_SCRIPT = (
    "from peft import LoraConfig, get_peft_model\n"
    "from transformers import AutoModelForCausalLM, FineGrainedFP8Config, GPTQConfig, Trainer, TrainingArguments\n\n"
    "model = AutoModelForCausalLM.from_pretrained('./ckpt', device_map={{'': 0}}{load})\n"
    "{adapters}"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True, per_device_train_batch_size=4)).train()\n"
)
_LORA = "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"


def _check(tmp_path, monkeypatch, method, adapters="", load="", target="a100"):
    monkeypatch.chdir(tmp_path)
    config = dict(_LLAMA_1B)
    if method:
        config["quantization_config"] = {"quant_method": method, "bits": 4}
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    result, _ = check_code(tmp_path, _SCRIPT.format(load=load, adapters=adapters), target=target)
    return result


@pytest.mark.parametrize("method", ["gptq", "awq", "bitsandbytes"])
def test_a_checkpoint_stored_quantized_and_trained_without_adapters_is_refused(tmp_path, monkeypatch, method):
    result = _check(tmp_path, monkeypatch, method)
    refused = [f for f in result.findings if f.rule_id == "PD404"]
    assert len(refused) == 1 and f"{method}-quantized" in refused[0].message
    assert any("quantization_config" in e.note for e in refused[0].evidence), "the config that says so is evidence"
    # its weights are not trainable fp16 parameters: no GradScaler error on top of the refusal
    assert "PD201" not in {f.rule_id for f in result.findings}


def test_with_adapters_it_trains(tmp_path, monkeypatch):
    result = _check(tmp_path, monkeypatch, "gptq", adapters=_LORA)
    assert "PD404" not in {f.rule_id for f in result.findings}


@pytest.mark.parametrize(
    "method, load",
    [
        ("fp8", ""),  # transformers dequantizes FP8 on GPUs below compute capability 8.9 (an A100): not judged
        ("mxfp4", ""),  # dequantized where its kernels are missing: not judged
        ("", ""),  # the same checkpoint stored in float16: a plain full fine-tune
    ],
)
def test_look_alikes_are_not_refused(tmp_path, monkeypatch, method, load):
    result = _check(tmp_path, monkeypatch, method, load=load)
    assert "PD404" not in {f.rule_id for f in result.findings}


def test_the_memory_verdict_says_it_does_not_model_packed_weights(tmp_path, monkeypatch):
    """Counted as float16, a 4-bit GPTQ checkpoint's weights would be 4x too large: the memory rules stay silent
    and the unknowns say why, at the load."""
    stored = _check(tmp_path, monkeypatch, "gptq", adapters=_LORA, target="t4")
    assert not {f.rule_id for f in stored.findings} & {"PD601", "PD602", "PD603"}
    said = [s for s in stored.silenced if s.fact == "memory"]
    assert said and "stored gptq-quantized" in said[0].reason and said[0].locations[0].line == 4
    plain = _check(tmp_path, monkeypatch, "", adapters=_LORA, target="t4")
    assert not [s for s in plain.silenced if s.fact == "memory"], "a float16 checkpoint is estimated"


_LF_RECIPE = (
    "model_name_or_path: ./ckpt\nstage: sft\ndo_train: true\ndataset: alpaca_en_demo\ntemplate: llama3\n"
    "output_dir: out\nper_device_train_batch_size: 2\nfp16: true\nfinetuning_type: lora\nlora_target: all\n"
)


def test_a_recipe_on_a_stored_quantized_checkpoint_is_judged_as_llamafactory_loads_it(tmp_path, monkeypatch):
    """LLaMA-Factory ignores `quantization_bit` on a PTQ checkpoint (quantization.py:94-96) and refuses DoRA on it
    (adapter.py:239-244): both are read from the checkpoint's config, which is evidence."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    config = {**_LLAMA_1B, "quantization_config": {"quant_method": "gptq", "bits": 4}}
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    recipe = _LF_RECIPE + "quantization_bit: 4\nuse_dora: true\n"
    result, _ = check_code(tmp_path, recipe, target="a100", name="config.yml", versions=CURRENT)
    said = {f.rule_id: f for f in result.findings if f.rule_id in ("PD701", "PD702")}
    assert "DoRA is not compatible with PTQ-quantized models" in said["PD701"].message
    assert "`quantization_bit` will not affect" in said["PD702"].message
    assert any("quantization_config" in e.note for e in said["PD701"].evidence)


def test_a_quantization_config_given_at_load_does_not_undo_the_checkpoints(tmp_path, monkeypatch):
    """transformers keeps a stored GPTQ config and merges only the given one's loading attributes
    (quantizers/auto.py merge_quantization_configs): still quantized, still refused without adapters."""
    monkeypatch.chdir(tmp_path)
    result = _check(tmp_path, monkeypatch, "gptq", load=", quantization_config=GPTQConfig(bits=4, use_exllama=False)")
    assert [f.rule_id for f in result.findings if f.rule_id == "PD404"] == ["PD404"]


def test_fp8_loaded_with_dequantize_is_not_quantized(tmp_path, monkeypatch):
    load = ", quantization_config=FineGrainedFP8Config(dequantize=True)"
    result = _check(tmp_path, monkeypatch, "fp8", load=load, target="h100")
    assert "PD404" not in {f.rule_id for f in result.findings}


@pytest.mark.parametrize("target, refused", [("h100", True), ("l40s", True), ("a100", False), ("t4", False)])
def test_fp8_checkpoints_stay_quantized_where_the_gpu_has_fp8(tmp_path, monkeypatch, target, refused):
    """Below compute capability 8.9 transformers dequantizes FP8 to bf16 (quantizer_finegrained_fp8.py:49-57);
    from 8.9 on it stays FP8, which the Trainer refuses to train without adapters."""
    result = _check(tmp_path, monkeypatch, "fp8", target=target)
    assert bool([f for f in result.findings if f.rule_id == "PD404"]) is refused


def test_a_saved_bitsandbytes_checkpoint_is_the_4bit_model_it_was(tmp_path, monkeypatch):
    """A model saved after a 4-bit load keeps load_in_4bit in its quantization_config: judged and estimated as the
    4-bit model BitsAndBytesConfig would give, not as float16 weights."""
    monkeypatch.chdir(tmp_path)
    config = {**_LLAMA_1B, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    result, _ = check_code(tmp_path, _SCRIPT.format(load="", adapters=""), target="t4")
    refused = [f for f in result.findings if f.rule_id == "PD404"]
    assert refused and "4bit-quantized" in refused[0].message
    assert not [s for s in result.silenced if s.fact == "memory"], "a 4-bit model is estimated"


def test_llamafactory_dequantizes_fp8_so_dora_is_accepted(tmp_path, monkeypatch):
    """LLaMA-Factory loads FP8 with FineGrainedFP8Config(dequantize=True) (quantization.py:116-121), and
    transformers drops the model's quantization_method: its DoRA refusal (adapter.py:239-244) does not fire."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    config = {**_LLAMA_1B, "quantization_config": {"quant_method": "fp8"}}
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    result, _ = check_code(tmp_path, _LF_RECIPE + "use_dora: true\n", target="a100", name="config.yml")
    assert not [f for f in result.findings if f.rule_id == "PD701"]


def test_llamafactory_full_fine_tune_of_a_ptq_checkpoint_is_one_error_with_its_own_message(tmp_path, monkeypatch):
    """LLaMA-Factory refuses it while attaching adapters (adapter.py:330-332), before any Trainer: its message, and
    not the Trainer's refusal (PD404) on top."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    config = {**_LLAMA_1B, "quantization_config": {"quant_method": "gptq", "bits": 4}}
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    recipe = _LF_RECIPE.replace("finetuning_type: lora\nlora_target: all\n", "finetuning_type: full\n")
    result, _ = check_code(tmp_path, recipe, target="a100", name="config.yml")
    errors = [f for f in result.findings if f.severity == "error"]
    assert [f.rule_id for f in errors] == ["PD701"]
    assert "Quantized models can only be used for the LoRA or OFT tuning" in errors[0].message
