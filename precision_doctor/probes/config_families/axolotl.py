"""Axolotl 0.18.0, recognised by `base_model` (`utils/config/__init__.py` `resolve_dtype`, `utils/schemas/config.py`
field defaults): `bf16: auto` (the default) becomes True where `is_torch_bf16_gpu_available()` answers True (on
pre-Ampere GPUs too with transformers >= 4.35 and torch >= 2.3: knowledge/bf16_checks.py), else False with `fp16`
turned on when unset; `bf16: true` turns `fp16` off; the weights load in
bfloat16 (bf16/bfloat16), float16 (fp16/float16/load_in_8bit) or float32; LoRA adapters through peft's default.
How `axolotl train` launches is in knowledge/launchers.py (RECIPE_CLIS)."""

from __future__ import annotations

from dataclasses import replace

from ...knowledge.families import LIGER_MODEL_TYPES
from ...knowledge.recipe_checks.axolotl import LEGACY_ATTENTION
from ...model.call_kinds import CallKind
from ...model.facts import KNOWN, Call, Origin, ScriptFacts, Unknown, Value
from ..config_files import ConfigDoc
from ._builder import Builder, gpu_decides, trained_model, weights_dtype

NAME = "Axolotl"
VERSION = "0.18.0"


def detects(doc: ConfigDoc) -> bool:
    return doc.has("base_model")


def build(b: Builder) -> ScriptFacts:
    doc = b.doc
    bf16_raw, fp16_raw = doc.get("bf16", default="auto"), doc.get("fp16")
    float16, bfloat16, load_8bit = doc.get("float16"), doc.get("bfloat16"), doc.get("load_in_8bit")

    def resolved(bf16_available: bool) -> tuple[Value, Value, Value]:
        """bf16, fp16 and the weights' dtype as resolve_dtype leaves them on a GPU with or without bf16."""
        bf16, fp16 = bf16_raw, fp16_raw
        bf16_v = b.setting("bf16", "auto")
        fp16_v = b.written("fp16") if doc.has("fp16") else b.default("fp16", None)
        if not fp16 and bf16 == "auto":
            bf16 = bf16_available
            bf16_v = replace(bf16_v, value=bf16)
            if not bf16_available and fp16 is None and not float16:
                fp16 = True
                fp16_v = replace(
                    bf16_v,
                    value=True,
                    text=bf16_v.text,
                    origins=bf16_v.origins
                    + (Origin("default", "Axolotl turns fp16 on when bf16: auto finds no bf16"),),
                )
        if fp16 and bf16 == "auto":
            bf16, bf16_v = False, replace(bf16_v, value=False)
        if bf16 is True:
            fp16, fp16_v = False, replace(bf16_v, value=False, text=bf16_v.text)
        fp16_v = replace(fp16_v, value=bool(fp16))
        bf16_v = replace(bf16_v, value=bool(bf16) if not isinstance(bf16, str) else bf16)
        if bf16 or bfloat16:
            weights = weights_dtype("bfloat16", bf16_v if bf16 else b.written("bfloat16"))
        elif load_8bit or fp16 or float16:
            source = b.written("load_in_8bit") if load_8bit else fp16_v if fp16 else b.written("float16")
            weights = weights_dtype("float16", source)
        else:
            weights = weights_dtype(
                "float32", b.default("torch_dtype", "float32", "Axolotl loads float32 without bf16/fp16")
            )
        return bf16_v, fp16_v, weights

    if bf16_raw == "auto" and not fp16_raw:
        on, off = resolved(True), resolved(False)
        bf16, fp16, weights = (gpu_decides("bf16: auto", t, f) for t, f in zip(on, off, strict=False))
    else:
        bf16, fp16, weights = resolved(False)

    base = b.written("base_model")
    load_kwargs = {"dtype": weights}
    attention = _attention(b)
    if attention is not None:
        load_kwargs["attn_implementation"] = attention
    refs = {}
    if doc.get("load_in_4bit") or doc.get("load_in_8bit"):
        flag = "load_in_4bit" if doc.get("load_in_4bit") else "load_in_8bit"
        bnb = b.add(
            CallKind.BNB_CONFIG,
            "transformers.BitsAndBytesConfig",
            doc.location(flag),
            kwargs={flag: b.written(flag), "bnb_4bit_compute_dtype": weights, **_axolotl_bnb_extras(b, flag)},
            target="bnb_config",
        )
        refs["quantization_config"] = bnb.key
        load_kwargs["quantization_config"] = Value(state=KNOWN, value="BitsAndBytesConfig", text=flag)
    if doc.has("device_map"):
        load_kwargs["device_map"] = b.written("device_map")
    if doc.has("trust_remote_code"):  # with it Axolotl always loads through its Auto class (loaders/model.py:929-945)
        load_kwargs["trust_remote_code"] = b.written("trust_remote_code")
    load = b.add(
        CallKind.MODEL_LOAD,
        "transformers.AutoModelForCausalLM.from_pretrained",
        doc.location("base_model"),
        kwargs=load_kwargs,
        args=(base,),
        refs=refs,
        target="model",
    )
    adapter = str(doc.get("adapter") or "")
    model = trained_model(b, load, adapter, {}, _lora_config(b) if adapter in ("lora", "qlora") else None)
    if adapter and adapter not in ("lora", "qlora"):
        b.unknowns.append(
            Unknown(f"adapter: {adapter}", "an adapter the doctor does not model", doc.location("adapter"))
        )
    args = {"fp16": fp16, "bf16": bf16}
    for key in ("tf32", "gradient_checkpointing", "gradient_checkpointing_kwargs", "optimizer", "max_grad_norm"):
        if doc.has(key) and doc.get(key) != "auto":
            args["optim" if key == "optimizer" else key] = b.written(key)
    if doc.get("gradient_checkpointing") in OFFLOADED_CHECKPOINTING:  # validation.py:1425-1442: on, and offloaded
        args["gradient_checkpointing"] = b.written("gradient_checkpointing", meaning=True)
    gemma4 = _gemma4(b)
    written_kwargs = doc.get("gradient_checkpointing_kwargs")
    reentrant = None
    if (
        doc.get("gradient_checkpointing")
        and doc.get("unfrozen_parameters") is None
        and written_kwargs is None
        and doc.get("rl") is None
    ):  # utils/config/__init__.py:377-383: reentrant checkpointing unless the recipe says otherwise
        reentrant = True, "sets use_reentrant: True when gradient checkpointing is on and the recipe gives none"
    if (
        doc.get("gradient_checkpointing")
        and gemma4
        and not (isinstance(written_kwargs, dict) and written_kwargs.get("use_reentrant") is False)
    ):  # utils/config/__init__.py:390-399: Gemma 4 is forced non-reentrant
        reentrant = False, "forces use_reentrant: False for Gemma 4"
    if reentrant is not None:
        forced = b.default(
            "gradient_checkpointing_kwargs",
            {**(written_kwargs if isinstance(written_kwargs, dict) else {}), "use_reentrant": reentrant[0]},
            f"{NAME} {VERSION} {reentrant[1]}",
        )  # shown at the line that turns checkpointing on
        args["gradient_checkpointing_kwargs"] = replace(
            forced, location=doc.location("gradient_checkpointing"), text="gradient_checkpointing: true"
        )
    # under DDP Axolotl passes bool(ddp_find_unused_parameters): False unless the recipe sets it
    # (core/builders/causal.py, "handle ddp")
    args["ddp_find_unused_parameters"] = (
        replace(b.written("ddp_find_unused_parameters"), value=bool(doc.get("ddp_find_unused_parameters")))
        if doc.has("ddp_find_unused_parameters")
        else b.default(
            "ddp_find_unused_parameters",
            True,
            f"{NAME} {VERSION} turns ddp_find_unused_parameters on for Gemma 4 (utils/config/__init__.py:400-415)",
        )
        if gemma4 and not doc.get("activation_offloading")
        else b.default("ddp_find_unused_parameters", False, "Axolotl passes False under DDP unless the recipe sets it")
    )
    if doc.get("fp8"):  # AxolotlTrainingArguments.fp8: the Accelerator gets mixed_precision="fp8"
        args["fp8"] = b.written("fp8")
    if doc.has("deepspeed"):
        args["deepspeed"] = b.written("deepspeed")
    fsdp = _fsdp(b)
    if fsdp is not None:
        args["fsdp"] = fsdp
        if isinstance(doc.get("fsdp_config"), dict):
            args["fsdp_config"] = b.written("fsdp_config")
    # core/builders/base.py:668 and causal.py:237: micro_batch_size per GPU, sequence_len (schemas/config.py:77,
    # 665: defaults 1 and 512); a batch is padded or packed up to sequence_len at most
    args["per_device_train_batch_size"] = b.setting("micro_batch_size", 1)
    args["max_length"] = b.setting("sequence_len", 512)
    args["packing"] = _full_length(b)
    b.memory_unmodelled = _unmodelled(b)
    b.chunked_loss = _chunked_loss(b)
    b.fp32_embeddings = _fp32_embeddings(b)
    b.spelling = {
        "per_device_train_batch_size": "micro_batch_size",
        "optim": "optimizer",
        "max_length": "sequence_len",
    }
    training = b.add(
        CallKind.TRAINING_ARGS,
        "transformers.TrainingArguments",
        b.where("bf16", "fp16", "base_model"),
        kwargs=args,
        target="training_args",
    )
    b.add(
        CallKind.TRAINER,
        "transformers.Trainer",
        b.last,
        refs={"model": model.key, "args": training.key},
        target="trainer",
    )
    return b.facts()


# Settings that change the memory per GPU in ways the estimate does not model: the memory rules stay silent (with
# this reason) rather than judge the recipe as if they were absent.
UNMODELLED_MEMORY = {
    "tensor_parallel_size": "tensor parallelism",
    "context_parallel_size": "context parallelism",
    "sequence_parallel_degree": "sequence parallelism",
    "expert_parallel_size": "expert parallelism",
    "dp_shard_size": "a data-parallel sharding mesh",
    "activation_offloading": "activation offloading",
    "unfrozen_parameters": "training only some parameters",
    "rl": "a preference-training trainer (reference model, paired batches)",
    "reward_model": "a reward-model trainer",
    "process_reward_model": "a reward-model trainer",
    "relora": "ReLoRA",
}


# `gradient_checkpointing: offload` / `offload_disk` (deprecated) become checkpointing with activation offloading
OFFLOADED_CHECKPOINTING = ("offload", "offload_disk")


def _unmodelled(b: Builder) -> str:
    if b.doc.get("gradient_checkpointing") in OFFLOADED_CHECKPOINTING:
        return f"gradient_checkpointing: offload in {b.doc.path}: activation offloading is not modelled"
    for key, what in UNMODELLED_MEMORY.items():
        value = b.doc.get(key)
        sized = isinstance(value, int) and not isinstance(value, bool)  # a parallel degree: 1 is none
        if (value > 1) if sized else bool(value):
            return f"{key} in {b.doc.path}: {what} is not modelled by the memory estimate"
    if b.doc.get("adapter") not in (None, "", "lora", "qlora"):
        return f"adapter: {b.doc.get('adapter')} is not modelled by the memory estimate"
    return ""


# The plugin each fused-loss setting belongs to: its keys are read only when the recipe lists the plugin
# (utils/config/__init__.py:447-451); Liger patches the architectures it knows (integrations/liger/plugin.py).
FUSED_LOSS_PLUGINS = {"liger_fused_linear_cross_entropy": "LigerPlugin", "cut_cross_entropy": "CutCrossEntropyPlugin"}


def _chunked_loss(b: Builder) -> str:
    """The setting that fuses the output layer with the loss (Liger, Apple's Cut Cross-Entropy), where its plugin
    is listed and patches this architecture; "" otherwise."""
    for key in FUSED_LOSS_PLUGINS:
        if _with_plugin(b, key) and b.model_type() in LIGER_MODEL_TYPES:
            return key
    return ""


def _with_plugin(b: Builder, key: str) -> bool:
    """A fused-loss setting turned on with its plugin listed (utils/config/__init__.py:447-451)."""
    plugins = b.doc.get("plugins")
    listed = " ".join(str(p) for p in plugins) if isinstance(plugins, list) else str(plugins or "")
    return bool(b.doc.get(key)) and FUSED_LOSS_PLUGINS[key] in listed


def _fp32_embeddings(b: Builder) -> str:
    """Axolotl's loader casts the embeddings, the output layer and every norm to fp32 before training unless FSDP is
    on (loaders/model.py:422-436, 1025-1047), and back to the load dtype for an adapter, an attention other than
    eager or sdpa, or Cut Cross-Entropy (444-476). DeepSpeed casts the whole module to half when it wraps it."""
    doc = b.doc
    if doc.get("adapter") or _fsdp(b) is not None or doc.get("deepspeed"):
        return ""
    written = _written_attention(doc)
    if written is not None and written[1] not in ("", "eager", "sdpa"):  # attn_needs_dtype_cast (config.py:1498-1503)
        return ""
    if _with_plugin(b, "cut_cross_entropy"):
        return ""
    return (
        f"{NAME} {VERSION} keeps the embeddings, output layer and norms of a full fine-tune in fp32 "
        "(loaders/model.py:422-476)"
    )


def _full_length(b: Builder) -> Value:
    """Whether every batch is sequence_len long: sample packing fills it (and turns pad_to_sequence_len on unless
    the recipe says false, schemas/validation.py:229-242), pad_to_sequence_len pads to it (core/builders/causal.py:
    387-390); otherwise the collator pads each batch to its longest sample, and sequence_len is only a cap."""
    for key in ("pad_to_sequence_len", "sample_packing"):
        if b.doc.get(key):
            return replace(b.written(key), value=True)
    return b.default("sample_packing", False, f"{NAME} {VERSION} pads each batch to its longest sample")


def _fsdp(b: Builder) -> Value | None:
    """What Axolotl hands the Trainer as `fsdp` (core/builders/base.py:684-686): the recipe's `fsdp` list, else True
    (full sharding) whenever `fsdp_config` is set. fsdp_config goes to the Trainer beside it and decides the rest
    (derive/sharding.py): its `offload_params` reaches accelerate through FSDP_OFFLOAD_PARAMS (utils/trainer.py:600).
    Axolotl's FSDPConfig has no sharding-strategy field: a written one is dropped (schemas/fsdp.py)."""
    doc = b.doc
    if doc.get("fsdp"):
        written = doc.get("fsdp")
        return b.written("fsdp", meaning=" ".join(written) if isinstance(written, list) else written)
    if not isinstance(doc.get("fsdp_config"), dict) or not doc.get("fsdp_config"):
        return None
    return b.written("fsdp_config", meaning="full_shard")


def _lora_config(b: Builder) -> Call:
    """The LoraConfig Axolotl builds (loaders/adapter.py): r from lora_r (peft's 8 when unset), every linear layer
    with lora_target_linear, else lora_target_modules, else peft's default for the architecture."""
    kwargs = {"r": b.setting("lora_r", 8)}
    if b.doc.get("lora_modules_to_save"):  # loaders/adapter.py: LoraConfig(modules_to_save=...)
        kwargs["modules_to_save"] = b.written("lora_modules_to_save")
    if b.doc.get("lora_target_linear"):
        kwargs["target_modules"] = b.written("lora_target_linear", meaning="all-linear")
    elif b.doc.get("lora_target_modules"):
        kwargs["target_modules"] = b.written("lora_target_modules")
    elif not b.doc.get("lora_model_dir") and not b.doc.get("lora_target_parameters"):
        # never peft's per-architecture default: Axolotl passes an empty list (a saved adapter brings its own)
        kwargs["target_modules"] = b.default(
            "lora_target_modules",
            [],
            f"{NAME} {VERSION} builds LoraConfig(target_modules=cfg.lora_target_modules or []) "
            "(loaders/adapter.py:171-190)",
        )
    if b.doc.get("lora_target_parameters"):
        kwargs["target_parameters"] = b.written("lora_target_parameters")
    if b.doc.get("lora_exclude_modules"):  # loaders/adapter.py: exclude_modules=cfg.lora_exclude_modules or None
        kwargs["exclude_modules"] = b.written("lora_exclude_modules")
    return b.add(
        CallKind.PEFT_CONFIG, "peft.LoraConfig", b.where("lora_r", "adapter"), kwargs=kwargs, target="peft_config"
    )


def _gemma4(b: Builder) -> bool:
    """Whether the base model is Gemma 4, whose `model_config_type` Axolotl special-cases: by the checkpoint's
    model_type where the doctor knows it, else by its id (the hub config is not read offline)."""
    base = b.doc.get("base_model")
    if not isinstance(base, str):
        return False
    model_type = b.model_type()
    if model_type:
        return model_type in ("gemma4", "gemma4_unified")
    name = base.rsplit("/", 1)[-1].lower().replace("_", "-")
    return name.startswith(("gemma-4", "gemma4"))


def _written_attention(doc) -> tuple[str, str] | None:
    """The key that names the attention and the implementation it names, as Axolotl reads them: attn_implementation,
    else the first legacy flag set (LEGACY_ATTENTION's order)."""
    written = doc.get("attn_implementation")
    if isinstance(written, str) and written:
        return "attn_implementation", written
    return next(((flag, name) for flag, name in LEGACY_ATTENTION.items() if doc.get(flag)), None)


def _attention(b: Builder) -> Value | None:
    """The attention from_pretrained is asked for ("fp8" loads as sdpa)."""
    written = _written_attention(b.doc)
    if written is None:
        return None
    key, name = written
    return b.written(key, meaning="sdpa" if name == "fp8" else name)


def _axolotl_bnb_extras(b: Builder, flag: str) -> dict[str, Value]:
    """What Axolotl adds to the BitsAndBytesConfig it builds for `adapter: qlora` with 4-bit loading
    (`loaders/model.py`, since axolotl#1428, 2024-03): double quantization, nf4 and a bfloat16 storage dtype, so
    FSDP can flatten the 4-bit weights; `bnb_config_kwargs` entries win."""
    extras: dict[str, Value] = {}
    if flag == "load_in_4bit" and b.doc.get("adapter") == "qlora":
        for key, value in (
            ("bnb_4bit_use_double_quant", True),
            ("bnb_4bit_quant_type", "nf4"),
            ("bnb_4bit_quant_storage", "bfloat16"),
        ):
            extras[key] = b.default(key, value, f"{NAME} {VERSION} sets {key}={value} for qlora")
    overrides = b.doc.get("bnb_config_kwargs")
    if isinstance(overrides, dict):
        for key in overrides:
            if isinstance(key, str) and key.startswith(("bnb_4bit_", "llm_int8_")):
                extras[key] = b.doc.value("bnb_config_kwargs", key, via=b.via)
    return extras
