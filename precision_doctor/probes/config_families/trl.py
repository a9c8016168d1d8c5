"""TRL 1.10 recipes (`trl sft --config recipe.yaml`, alignment-handbook recipes), recognised by
`model_name_or_path` with a dataset key (`dataset_name`, `dataset_mixture`, `datasets`) and none of
LLaMA-Factory's keys. The recipe is read as TRL's own script reads it (trl `scripts/sft.py`,
`trainer/model_config.py`, `trainer/utils.py` `get_quantization_config` / `get_peft_config`): the model loads in
ModelConfig's `dtype` (default "float32"; `torch_dtype` is the older spelling), 4-/8-bit through
`load_in_4bit`/`load_in_8bit` with the load dtype as compute dtype, LoRA when `use_peft`, and the rest of the
recipe is SFTConfig, whose own defaults (bf16 unless fp16, gradient checkpointing on) the derivation applies as
for a script. `trl dpo`/`grpo`/... recipes are read as SFT: their trainers share these settings."""

from __future__ import annotations

from dataclasses import replace

from ...model.call_kinds import CallKind
from ...model.facts import KNOWN, ScriptFacts, Value
from ..config_files import ConfigDoc
from ._builder import Builder, model_load, trained_model, weights_dtype

NAME = "TRL"
VERSION = "1.10.0"
DATASET_KEYS = ("dataset_name", "dataset_mixture", "datasets")
# SFTConfig fields the rules read; the rest of a recipe changes no verdict
TRAINING_KEYS = (
    "bf16",
    "fp16",
    "tf32",
    "gradient_checkpointing",
    "gradient_checkpointing_kwargs",
    "deepspeed",
    "fsdp",
    "fsdp_config",
    "optim",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "max_seq_length",
    "packing",
    "learning_rate",
)


def detects(doc: ConfigDoc) -> bool:
    return (
        doc.has("model_name_or_path")
        and any(doc.has(k) for k in DATASET_KEYS)
        and not any(doc.has(k) for k in ("stage", "finetuning_type", "template"))
    )


def build(b: Builder) -> ScriptFacts:
    doc = b.doc
    key = "dtype" if doc.has("dtype") else "torch_dtype" if doc.has("torch_dtype") else ""
    written = str(doc.get(key)) if key else "float32"
    if written in ("auto", "None"):
        weights = Value(state=KNOWN, value="auto", text=f"{key}: {written}", origins=b.written(key).origins)
    else:
        weights = weights_dtype(written, b.written(key) if key else b.default("dtype", "float32"))
    extra = {"attn_implementation": b.written("attn_implementation")} if doc.has("attn_implementation") else {}
    bits = "load_in_4bit" if doc.get("load_in_4bit") else "load_in_8bit" if doc.get("load_in_8bit") else ""
    load = model_load(b, weights, (bits, b.written(bits), doc.location(bits)) if bits else None, extra)
    model = trained_model(b, load, "lora", {}) if doc.get("use_peft") else load
    training = b.add(
        CallKind.TRAINING_ARGS,
        "trl.SFTConfig",
        b.where("bf16", "fp16", "model_name_or_path"),
        kwargs={k: b.written(k) for k in TRAINING_KEYS if doc.has(k)},
        target="training_args",
    )
    b.add(
        CallKind.TRAINER,
        "trl.SFTTrainer",
        b.last,
        refs={"model": model.key, "args": training.key},
        target="trainer",
    )
    facts = b.facts()
    return replace(facts, imports=(*facts.imports, "trl recipe"))  # launched by `trl` (knowledge RECIPE_CLIS)
