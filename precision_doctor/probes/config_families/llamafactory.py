"""LLaMA-Factory 0.9.6.dev0, recognised by `model_name_or_path` with `stage`/`finetuning_type`/`template`
(`hparams/parser.py`, `model/adapter.py`): `finetuning_type` defaults to lora; the weights load in the compute
dtype (bf16 > fp16); trainable parameters are upcast to float32 unless `pure_bf16` (or ZeRO-3 without
quantization), adapters included. How `llamafactory-cli train` launches is in knowledge/launchers.py (RECIPE_CLIS)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...knowledge.recipe_checks.llamafactory import FLASH_ATTN, FLASH_ATTN_IF_INSTALLED
from ...model.call_kinds import CallKind
from ...model.facts import Origin, ScriptFacts
from ..config_files import ConfigDoc
from ._builder import Builder, model_load, trained_model, weights_dtype

NAME = "LLaMA-Factory"
VERSION = "0.9.6.dev0"


def detects(doc: ConfigDoc) -> bool:
    return doc.has("model_name_or_path") and any(doc.has(k) for k in ("stage", "finetuning_type", "template"))


def build(b: Builder) -> ScriptFacts:
    doc = b.doc
    bf16, fp16, pure_bf16 = b.setting("bf16", False), b.setting("fp16", False), b.setting("pure_bf16", False)
    finetuning = str(doc.get("finetuning_type", default="lora"))
    quant_bits = doc.get("quantization_bit")
    if bf16.value or pure_bf16.value:
        weights = weights_dtype("bfloat16", bf16 if bf16.value else pure_bf16)
    elif fp16.value:
        weights = weights_dtype("float16", fp16)
    else:  # infer_optim_dtype: the checkpoint's dtype where the GPU supports it
        weights = replace(b.default("infer_dtype", "auto"), value="auto")
    bits = f"load_in_{quant_bits}bit" if quant_bits in (4, 8) else ""
    quantized = (bits, b.written("quantization_bit", meaning=True), doc.location("quantization_bit")) if bits else None
    # 4-bit: the quantized weights are stored in the compute dtype, "crucial for fsdp+qlora"
    # (model/model_utils/quantization.py, BitsAndBytesConfig(bnb_4bit_quant_storage=compute_dtype))
    storage = {"bnb_4bit_quant_storage": weights} if quant_bits == 4 else None
    load = model_load(b, weights, quantized, extra=_attention(b), bnb_extra=storage)
    zero3 = _zero3(doc)
    upcast = not pure_bf16.value and not doc.get("use_badam") and not (quant_bits is None and zero3)
    upcast_note = b.default(
        "cast_trainable_params_to_fp32",
        upcast,
        f"{NAME} {VERSION} "
        + (
            "upcasts trainable parameters to float32"
            if upcast
            else "keeps trainable parameters in the load dtype (pure_bf16 / BAdam / ZeRO-3)"
        ),
    )
    if finetuning in ("lora", "oft"):
        model = trained_model(b, load, finetuning, {"autocast_adapter_dtype": upcast_note})
    else:
        model = load
        if upcast and finetuning in ("full", "freeze") and quant_bits is None:  # quantized: refused before
            model = b.add(
                CallKind.CAST,
                "model.float",
                b.where("finetuning_type"),
                refs={"self": load.key},
                target="model",
                receiver="model",
            )
    args = {"fp16": fp16, "bf16": bf16}
    if pure_bf16.value and not bf16.value:  # pure bf16: the weights are bf16 and no AMP runs
        args["bf16"] = replace(pure_bf16, value=False)
    if doc.get("fp8"):  # Fp8Arguments.fp8: ACCELERATE_MIXED_PRECISION=fp8 (train/fp8_utils.py)
        args["fp8"] = b.written("fp8")
    if doc.has("deepspeed"):
        args["deepspeed"] = b.written("deepspeed")
    if doc.has("tf32"):
        args["tf32"] = b.written("tf32")
    if doc.has("optim"):
        args["optim"] = b.written("optim")
    training = b.add(
        CallKind.TRAINING_ARGS,
        "transformers.Seq2SeqTrainingArguments",
        b.where("bf16", "fp16", "model_name_or_path"),
        kwargs=args,
        target="training_args",
    )
    b.add(
        CallKind.TRAINER,
        "transformers.Seq2SeqTrainer",
        b.last,
        refs={"model": model.key, "args": training.key},
        target="trainer",
    )
    return b.facts()


def _attention(b: Builder) -> dict:
    """`flash_attn` as the attention implementation LLaMA-Factory asks transformers for (none for `auto`)."""
    written = b.doc.get("flash_attn")
    implementation = FLASH_ATTN.get(str(written)) if written is not None else None
    if implementation is None:
        return {}
    value = b.written("flash_attn", meaning=implementation)
    if implementation.startswith("flash_attention"):
        value = replace(value, origins=value.origins + (Origin("default", FLASH_ATTN_IF_INSTALLED),))
    return {"attn_implementation": value}


def _zero3(doc: ConfigDoc) -> bool:
    ds = doc.get("deepspeed")
    return isinstance(ds, str) and "z3" in Path(ds).name.lower() or "zero3" in str(ds).lower()
