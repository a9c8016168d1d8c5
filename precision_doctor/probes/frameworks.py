"""Trainers and loaders other than Hugging Face's, read as the facts the rules know.

PyTorch Lightning's `Trainer(precision=...)` and Fabric's `Fabric(precision=...)` play the part of accelerate's
`Accelerator(mixed_precision=...)`: "16-mixed" is fp16 autocast with a GradScaler, "bf16-mixed" bf16 autocast,
"transformer-engine" fp8, "32-true"/"64-true" no AMP. The mapping mirrors Lightning 2.x's precision connector
(`_check_config_and_set_final_flags` / `_init_precision`): legacy 16, "16" and "bf16" are the "-mixed" modes,
and an unset precision is "32-true" (Lightning reads no launcher's precision). "16-true" / "bf16-true" cast the
whole module to half with no AMP: recorded as no AMP, the cast left to the module (reported as unknown).
"""

from __future__ import annotations

from dataclasses import replace

from ..knowledge import bf16_checks
from ..knowledge.lightning import (
    MIXED,
)
from ..model.call_kinds import LIGHTNING_CLASSES, SENTENCE_TRANSFORMERS_MODELS, CallKind
from ..model.facts import CONDITIONAL, DYNAMIC, KNOWN, Call, Origin, Predicate, Unknown, Value

TRUE_HALF = {"16-true", "bf16-true"}


def lightning_as_accelerator(call: Call) -> tuple[Call, list[Unknown]]:
    """A Lightning Trainer / Fabric call with `mixed_precision` set to what its `precision` means."""
    if call.callee not in LIGHTNING_CLASSES or "mixed_precision" in call.kwargs:
        return call, []
    v = call.kwarg("precision")
    name = call.callee.rsplit(".", 1)[-1]
    if v.state != KNOWN and v.state != "absent":
        return call, [Unknown(f"precision= of {name}()", v.reason or "depends on the GPU", v.location)]
    if v.state != KNOWN:
        mode = Value(
            state=KNOWN,
            value="no",
            text=f"{name}()",
            origins=(Origin("default", "Lightning's default precision '32-true'"),),
            location=call.location,
        )
        return replace(call, kwargs={**call.kwargs, "mixed_precision": mode}), []
    if v.value in TRUE_HALF:
        return replace(call, kwargs={**call.kwargs, "mixed_precision": replace(v, value="no")}), [
            Unknown(
                f"precision={v.value!r} of {name}()",
                "the module is cast to half precision with no AMP: the doctor does not follow the cast into the model",
                v.location or call.location,
            )
        ]
    mode = MIXED.get(v.value)
    if mode is None:
        return call, [
            Unknown(
                f"precision={v.value!r} of {name}()",
                "a precision Lightning refuses (MisconfigurationException) or the doctor does not know",
                v.location or call.location,
            )
        ]
    # the meaning, not the spelling: no fix may write accelerate's 'fp16' where Lightning wants '16-mixed'
    meaning = replace(
        v,
        value=mode,
        location=None,
        origins=v.origins + (Origin("code", f"Lightning precision={v.value!r} is {mode} mixed precision", v.location),),
    )
    return replace(call, kwargs={**call.kwargs, "mixed_precision": meaning}), []


# --- other libraries' model loads, read as the transformers load they make ------------------------------------


def read_frameworks(calls: list[Call]) -> tuple[list[Call], list[Unknown]]:
    """The calls of libraries built on transformers, as the facts the rules know: Lightning's precision as
    accelerate's, Sentence Transformers' `model_kwargs` dtype, Unsloth's and diffusers' loads with their own
    defaults. Calls of other libraries pass unchanged."""
    out: list[Call] = []
    unknowns: list[Unknown] = []
    for call in calls:
        if call.callee in LIGHTNING_CLASSES:
            call, found = lightning_as_accelerator(call)
            unknowns.extend(found)
        elif call.kind == CallKind.MODEL_LOAD and call.callee in SENTENCE_TRANSFORMERS_MODELS:
            call = sentence_transformers_load(call)
        elif call.kind == CallKind.MODEL_LOAD and call.callee.startswith("unsloth."):
            call, quantization = unsloth_load(call)
            out.extend(quantization)
        elif call.kind == CallKind.MODEL_LOAD and call.callee.startswith("diffusers."):
            call = diffusers_load(call)
        out.append(call)
    return out, unknowns


def sentence_transformers_load(call: Call) -> Call:
    """`SentenceTransformer(name, model_kwargs={"torch_dtype": ...})` loads `AutoModel.from_pretrained(name,
    **model_kwargs)`: the dtype is the model_kwargs entry (absent: transformers' own default)."""
    kwargs = {k: v for k, v in call.kwargs.items() if k not in ("model_name_or_path", "dtype", "torch_dtype")}
    args = call.args[:1] or ((call.kwargs["model_name_or_path"],) if "model_name_or_path" in call.kwargs else ())
    given = call.kwargs.get("model_kwargs")
    if given is not None and given.state == KNOWN and isinstance(given.value, dict):
        key = next((k for k in ("dtype", "torch_dtype") if k in given.value), None)
        if key is not None:
            kwargs["dtype"] = _entry(given, key)
    elif given is not None and given.state != "absent":
        kwargs["dtype"] = Value(
            state=DYNAMIC,
            text=given.text,
            location=given.location,
            reason=f"model_kwargs={given.text} is computed at run time",
        )
    return replace(call, args=args, kwargs=kwargs)


def _entry(mapping: Value, key: str) -> Value:
    """One entry of a dict literal as a value of its own, pointing at the dict (no fix edits inside it)."""
    value = mapping.value[key]
    text = value if isinstance(value, str) and value.startswith("torch.") else repr(value)
    return Value(
        state=KNOWN,
        value=value,
        text=f"model_kwargs {key}: {text}",
        location=mapping.location,
        origins=(Origin("code", f"model_kwargs[{key!r}]"),),
    )


# Unsloth's `is_bfloat16_supported()`: SUPPORTS_BFLOAT16, set from the compute capability (major >= 8), no emulation
UNSLOTH_BF16 = Predicate(
    "bf16_supported",
    "Unsloth's is_bfloat16_supported() (compute capability 8.0 or newer)",
    emulation=False,
    asked=bf16_checks.CAPABILITY,
)
_UNSLOTH_POSITIONAL = ("model_name", "max_seq_length", "dtype", "load_in_4bit")


def unsloth_load(call: Call) -> tuple[Call, list[Call]]:
    """`FastLanguageModel.from_pretrained` (and FastModel / FastVisionModel) as Unsloth runs it (models/loader.py,
    llama.py): `dtype=None` is bfloat16 where `is_bfloat16_supported()` else float16, and bfloat16 asked on a GPU
    without it becomes float16; `load_in_4bit` defaults to True (QLoRA), `load_in_8bit` wins over it, and
    `full_finetuning` / `load_in_16bit` load unquantized. The quantization becomes the BitsAndBytesConfig Unsloth
    builds, so no transformers keyword rule judges Unsloth's own keywords."""
    kwargs = dict(call.kwargs)
    for name, arg in zip(_UNSLOTH_POSITIONAL, call.args, strict=False):
        kwargs.setdefault(name, arg)
    name = kwargs.pop("model_name", None)
    args = (name,) if name is not None else ()
    dtype = _unsloth_dtype(kwargs.get("dtype"), call)
    kwargs["dtype"] = dtype
    flags = {k: kwargs.pop(k, None) for k in ("load_in_4bit", "load_in_8bit", "load_in_16bit", "full_finetuning")}
    if "quantization_config" in kwargs:  # Unsloth respects a user's BitsAndBytesConfig
        return replace(call, args=args, kwargs=kwargs), []
    if any(v is not None and v.state != KNOWN for v in flags.values()):
        kwargs["quantization_config"] = Value(
            state=DYNAMIC,
            text=call.text,
            location=call.location,
            reason="Unsloth's load_in_4bit / load_in_8bit are set at run time",
        )
        return replace(call, args=args, kwargs=kwargs), []
    if _on(flags["full_finetuning"]):
        kwargs["dtype"] = _unsloth_full_finetuning_dtype(dtype, kwargs.pop("float32_mixed_precision", None))
        return replace(call, args=args, kwargs=kwargs), []
    if _on(flags["load_in_16bit"]):
        return replace(call, args=args, kwargs=kwargs), []
    prequantized = name is not None and name.state == KNOWN and str(name.value).lower().endswith("-bnb-4bit")
    if _on(flags["load_in_8bit"]):
        flag, written = "load_in_8bit", flags["load_in_8bit"]
    elif flags["load_in_4bit"] is None or _on(flags["load_in_4bit"]) or prequantized:
        flag = "load_in_4bit"
        written = (
            flags["load_in_4bit"]
            if _on(flags["load_in_4bit"])
            else Value(
                state=KNOWN,
                value=True,
                text=call.text,
                location=call.location,
                origins=(
                    Origin(
                        "default",
                        f"Unsloth loads {'a pre-quantized 4-bit checkpoint' if prequantized else 'in 4-bit'}"
                        f" unless load_in_4bit=False (its default is True)",
                    ),
                ),
            )
        )
    else:
        return replace(call, args=args, kwargs=kwargs), []
    config = Call(
        kind=CallKind.BNB_CONFIG,
        callee=f"{call.callee}.{flag}",
        location=call.location,
        scope=call.scope,
        kwargs={flag: written, "bnb_4bit_compute_dtype": dtype},
        text=call.text,
        in_loop=call.in_loop,
        in_branch=call.in_branch,
        branches=call.branches,
    )
    kwargs["quantization_config"] = Value(
        state=KNOWN,
        value="BitsAndBytesConfig",
        text=f"{flag}=True",
        origins=(Origin("default", f"Unsloth builds the BitsAndBytesConfig for {flag}"),),
    )
    return replace(call, args=args, kwargs=kwargs, refs={**call.refs, "quantization_config": config.key}), [config]


def _on(v: Value | None) -> bool:
    return v is not None and v.state == KNOWN and v.value is True


_UPCAST = Origin(
    "default",
    "Unsloth upcasts the trained weights to float32 for a full fine-tune outside bfloat16 "
    "(unsloth_zoo prepare_model_for_training; float32_mixed_precision)",
)


def _unsloth_full_finetuning_dtype(dtype: Value, fp32_mixed: Value | None) -> Value:
    """A full fine-tune trains every weight in float32 unless they are bfloat16 (then pure bf16), or in float32
    always under `float32_mixed_precision=True`."""
    fp32 = Value(
        state=KNOWN, value="torch.float32", text=dtype.text, location=dtype.location, origins=dtype.origins + (_UPCAST,)
    )
    if _on(fp32_mixed):
        return fp32
    if dtype.state == CONDITIONAL and dtype.if_false is not None:
        return replace(dtype, if_false=replace(fp32, origins=dtype.if_false.origins + (_UPCAST,)))
    if dtype.state == KNOWN and "float16" in str(dtype.value) and "bfloat16" not in str(dtype.value):
        return fp32
    return dtype


def _unsloth_dtype(v: Value | None, call: Call) -> Value:
    half = "torch.float16"
    if v is None or v.state == "absent" or v.is_(None):
        default = (Origin("default", "Unsloth's dtype=None: bfloat16 where the GPU supports it, else float16"),)
        where = v.location if v is not None else None
        return Value(
            state=CONDITIONAL,
            text=v.text if v is not None else "dtype=None (the default)",
            predicate=UNSLOTH_BF16,
            location=where,
            origins=default,
            if_true=Value(state=KNOWN, value="torch.bfloat16", text="torch.bfloat16", origins=default),
            if_false=Value(state=KNOWN, value=half, text=half, origins=default),
        )
    if v.state == KNOWN and str(v.value).replace("torch.", "") in ("bfloat16", "bf16"):
        changed = replace(
            v,
            value=half,
            origins=v.origins + (Origin("default", "Unsloth changes bfloat16 to float16 on a GPU without bf16"),),
        )
        return Value(
            state=CONDITIONAL,
            text=v.text,
            predicate=UNSLOTH_BF16,
            location=v.location,
            origins=v.origins,
            if_true=v,
            if_false=changed,
        )
    return v


def diffusers_load(call: Call) -> Call:
    """diffusers' `ModelMixin.from_pretrained` (a UNet, VAE, transformer): `dtype` and `torch_dtype` are one
    setting (`dtype` read first), and with neither the model is built and loaded in float32 (the default dtype),
    not transformers 5's checkpoint dtype."""
    kwargs = dict(call.kwargs)
    if "dtype" not in kwargs and "torch_dtype" in kwargs:
        kwargs["dtype"] = kwargs.pop("torch_dtype")
    if "dtype" not in kwargs or kwargs["dtype"].is_(None):
        kwargs["dtype"] = Value(
            state=KNOWN,
            value="torch.float32",
            origins=(Origin("default", "diffusers loads float32 when no torch_dtype is given"),),
        )
    return replace(call, kwargs=kwargs)
