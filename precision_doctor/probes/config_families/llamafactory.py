"""LLaMA-Factory 0.9.6.dev0, recognised by `model_name_or_path` with `stage`/`finetuning_type`/`template`
(`hparams/parser.py`, `model/adapter.py`): `finetuning_type` defaults to lora; the weights load in the compute
dtype (bf16 > fp16); trainable parameters are upcast to float32 unless `pure_bf16` (or ZeRO-3 without
quantization), adapters included. How `llamafactory-cli train` launches is in knowledge/launchers.py (RECIPE_CLIS)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...knowledge import dtypes
from ...knowledge.recipe_checks.llamafactory import FLASH_ATTN, FLASH_ATTN_IF_INSTALLED, GPT_OSS_KERNEL, LIGER_PATCHED
from ...model.call_kinds import CallKind
from ...model.facts import Call, Origin, ScriptFacts, Value
from ..config_files import ConfigDoc
from ._builder import Builder, gpu_decides, model_load, trained_model, weights_dtype

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
    else:
        weights = _inferred_dtype(b)
    bits = f"load_in_{quant_bits}bit" if quant_bits in (4, 8) else ""
    quantized = (bits, b.written("quantization_bit", meaning=True), doc.location("quantization_bit")) if bits else None
    # 4-bit: the quantized weights are stored in the compute dtype, "crucial for fsdp+qlora"
    # (model/model_utils/quantization.py, BitsAndBytesConfig(bnb_4bit_quant_storage=compute_dtype))
    storage = {"bnb_4bit_quant_storage": weights} if quant_bits == 4 else None
    load = model_load(b, weights, quantized, extra=_attention(b), bnb_extra=storage)
    _checkpointing(b, load)
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
        model = trained_model(b, load, finetuning, {"autocast_adapter_dtype": upcast_note}, _lora_config(b))
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
    for key in ("gradient_checkpointing", "max_grad_norm", "ddp_find_unused_parameters"):
        if doc.has(key):
            args[key] = b.written(key)
    if finetuning == "lora" and not doc.has("ddp_find_unused_parameters"):  # hparams/parser.py:596-602, under DDP
        args["ddp_find_unused_parameters"] = b.default(
            "ddp_find_unused_parameters", False, f"{NAME} {VERSION} sets False for LoRA under DDP"
        )
    # the Trainer's own batch per GPU; samples are cut to cutoff_len (hparams/data_args.py:46: 2048)
    args["per_device_train_batch_size"] = b.setting("per_device_train_batch_size", 8)
    args["max_length"] = b.setting("cutoff_len", 2048)
    # packing fills every sequence to cutoff_len: on for `neat_packing` (data_args.py:185-186), by default only
    # for pre-training (hparams/parser.py:645); otherwise each batch is padded to its longest sample
    if doc.get("neat_packing") or doc.get("packing"):
        args["packing"] = replace(b.written("neat_packing" if doc.get("neat_packing") else "packing"), value=True)
    else:
        pre_training = str(doc.get("stage", default="sft")) == "pt" and doc.get("packing") is None
        args["packing"] = b.default("packing", pre_training, f"{NAME} {VERSION} packs only for stage: pt")
    b.memory_unmodelled = _unmodelled(b, finetuning)
    b.spelling = {"max_length": "cutoff_len"}
    # Liger with its fused linear cross-entropy for sft/pt (model/loader.py:142, liger_kernel.py:97), on the
    # architectures LLaMA-Factory patches (liger_kernel.py:41-95)
    liger = doc.get("enable_liger_kernel") and b.model_type() in LIGER_PATCHED
    b.chunked_loss = "enable_liger_kernel" if liger else ""
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


def _checkpointing(b: Builder, load: Call) -> None:
    """LLaMA-Factory turns gradient checkpointing on for every model it trains, reentrant unless use_reentrant_gc:
    false, off with disable_gradient_checkpointing (model/patcher.py:476-483, model_utils/checkpointing.py:184-196,
    hparams/model_args.py:145-152); Gemma 3n is never checkpointed (patcher.py:477-478), nor a model whose class
    does not support it: LLaMA-Factory warns and trains without (checkpointing.py:184-186), where transformers
    would raise (PD307)."""
    if b.doc.get("disable_gradient_checkpointing") or not b.doc.get("do_train") or b.model_type() == "gemma3n":
        return
    if b.doc.get("trust_remote_code") and _remote_class_lacks_checkpointing(b):
        return
    reentrant = b.setting("use_reentrant_gc", True)
    b.add(
        CallKind.GC_ENABLE,
        "model.gradient_checkpointing_enable",
        b.where("disable_gradient_checkpointing", "model_name_or_path"),
        kwargs={"gradient_checkpointing_kwargs": replace(reentrant, value={"use_reentrant": bool(reentrant.value)})},
        refs={"self": load.key},
        receiver="model",
    )
    # its checkpointing wrapper makes each trainable layer's first float input require grad (checkpointing.py:
    # 100-123), what enable_input_require_grads does for a frozen base under reentrant checkpointing
    b.add(
        CallKind.INPUT_GRADS,
        "model.enable_input_require_grads",
        b.where("disable_gradient_checkpointing", "model_name_or_path"),
        refs={"self": load.key},
        receiver="model",
    )


def _remote_class_lacks_checkpointing(b: Builder) -> bool:
    found = b.checkpoint(str(b.doc.get("model_name_or_path")))
    classes = found.remote_classes if found is not None else ()
    return any(c.auto_class == "AutoModelForCausalLM" and c.checkpointing == "no" for c in classes)


def _inferred_dtype(b: Builder) -> Value:
    """The load dtype with neither bf16 nor fp16 (model/patcher.py:375-379, extras/misc.py:241-248
    infer_optim_dtype): bfloat16 for a bfloat16 checkpoint where the GPU has it, else float16 (an fp32 checkpoint
    too); unknown where the checkpoint is."""
    found = b.checkpoint(str(b.doc.get("model_name_or_path")))
    if found is None or not found.known or not found.torch_dtype:
        return replace(b.default("infer_dtype", "auto"), value="auto")
    note = f"{NAME} {VERSION} infer_optim_dtype for a {found.torch_dtype} checkpoint (extras/misc.py:241-248)"
    half = weights_dtype("float16", b.default("compute_dtype", "float16", note))
    if found.torch_dtype != dtypes.BFLOAT16:
        return half
    return gpu_decides(
        "infer_optim_dtype", weights_dtype("bfloat16", b.default("compute_dtype", "bfloat16", note)), half
    )


def _lora_config(b: Builder) -> Call:
    """The LoraConfig LLaMA-Factory builds (model/adapter.py): r from lora_rank, lora_target (default `all`: every
    linear layer; finetuning_args.py:77-90)."""
    target = b.setting("lora_target", "all")  # a YAML list stays a list; a string is split at commas (:580-588)
    names = target.value if isinstance(target.value, list) else str(target.value).split(",")
    meaning = "all-linear" if [str(n).strip() for n in names] == ["all"] else [str(n).strip() for n in names]
    return b.add(
        CallKind.PEFT_CONFIG,
        "peft.LoraConfig",
        b.where("lora_rank", "finetuning_type"),
        kwargs={"r": b.setting("lora_rank", 8), "target_modules": replace(target, value=meaning), **_saved(b)},
        target="peft_config",
    )


# Settings that change what each GPU holds in ways the estimate does not model
UNMODELLED_MEMORY = {
    "use_galore": "GaLore's projected optimizer state",
    "use_apollo": "APOLLO's optimizer state",
    "use_badam": "BAdam's block-wise updates",
    "use_adam_mini": "Adam-mini's optimizer state",
    "use_muon": "the Muon optimizer",
    "use_dft_loss": "the DFT loss",
    "use_unsloth": "Unsloth's patched model",
    "use_kt": "KTransformers (MoE experts on the CPU, hparams/model_args.py:469)",
    "use_asft_loss": "ASFT's reference copy of the model (sft/workflow.py:55-56)",
    "use_hyper_parallel": "the hyper-parallel trainer (train/tuner.py:92-101)",
}


def _saved(b: Builder) -> dict[str, Value]:
    """`additional_target` becomes LoraConfig's modules_to_save (model/adapter.py), split at commas."""
    written = b.doc.get("additional_target")
    if not written:
        return {}
    names = written if isinstance(written, list) else str(written).split(",")
    return {"modules_to_save": b.written("additional_target", meaning=[str(n).strip() for n in names])}


def _unmodelled(b: Builder, finetuning: str) -> str:
    """Why the memory estimate cannot judge the recipe ("" when it can): a stage other than supervised or
    pre-training (a reference or value model), partial freezing, or an optimizer that replaces AdamW's state."""
    doc = b.doc
    stage = str(doc.get("stage", default="sft"))
    if stage not in ("sft", "pt"):
        return f"stage: {stage} in {doc.path} (a reference or reward model beside the trained one) is not modelled"
    if not doc.get("do_train"):  # the Trainer's default False: evaluation or prediction only (sft/workflow.py:120)
        return f"do_train is not set in {doc.path}: the recipe does not train"
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size"):
        degree = doc.get(key)
        if isinstance(degree, int) and not isinstance(degree, bool) and degree > 1:
            return f"{key} in {doc.path}: Megatron-Core parallelism is not modelled by the memory estimate"
    if finetuning not in ("lora", "full"):
        return f"finetuning_type: {finetuning} in {doc.path} is not modelled by the memory estimate"
    for key in UNMODELLED_MEMORY:
        if doc.get(key) and (key != "use_asft_loss" or finetuning == "full"):
            return f"{key} in {doc.path}: {UNMODELLED_MEMORY[key]} is not modelled by the memory estimate"
    return ""


def _attention(b: Builder) -> dict:
    """`flash_attn` as the attention implementation LLaMA-Factory asks transformers for (none for `auto`).
    gpt_oss always gets the FlashAttention-3 hub kernel, whatever `flash_attn` says (attention.py:34-44)."""
    found = b.checkpoint(str(b.doc.get("model_name_or_path")))  # the load is not built yet: b.model_type() is ""
    if found is not None and found.known and found.model_type == "gpt_oss":
        note = f"{NAME} {VERSION} loads gpt_oss with the {GPT_OSS_KERNEL} hub kernel, whatever flash_attn says"
        return {"attn_implementation": b.default("attn_implementation", GPT_OSS_KERNEL, note + " (attention.py:34-44)")}
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
