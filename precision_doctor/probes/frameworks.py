"""Trainers and loaders other than Hugging Face's, read as the facts the rules know.

PyTorch Lightning's `Trainer(precision=...)` and Fabric's `Fabric(precision=...)` play the part of accelerate's
`Accelerator(mixed_precision=...)`: "16-mixed" is fp16 autocast with a GradScaler, "bf16-mixed" bf16 autocast,
"transformer-engine" fp8, "32-true"/"64-true" no AMP. The mapping mirrors Lightning 2.x's precision connector
(`_check_config_and_set_final_flags` / `_init_precision`): legacy 16, "16" and "bf16" are the "-mixed" modes,
and an unset precision is "32-true" (Lightning reads no launcher's precision). "16-true" / "bf16-true" cast the
whole module to half with no AMP: recorded as no AMP, the cast left to the module (reported as unknown).
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ..model.call_kinds import LIGHTNING_CLASSES, SENTENCE_TRANSFORMERS_MODELS, CallKind
from ..model.facts import CONDITIONAL, DYNAMIC, KNOWN, Call, Origin, Predicate, Unknown, Value
from .scopes import literal, parse_quietly
from ..model.util import record

MIXED = {"16-mixed": "fp16", "16": "fp16", 16: "fp16", "bf16-mixed": "bf16", "bf16": "bf16",
         "transformer-engine": "fp8", "transformer-engine-float16": "fp8", "32-true": "no", "32": "no", 32: "no",
         "64-true": "no", "64": "no", 64: "no"}
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
        mode = Value(state=KNOWN, value="no", text=f"{name}()", origins=(Origin(
            "default", "Lightning's default precision '32-true'"),), location=call.location)
        return replace(call, kwargs={**call.kwargs, "mixed_precision": mode}), []
    if v.value in TRUE_HALF:
        return replace(call, kwargs={**call.kwargs, "mixed_precision": replace(v, value="no")}), [Unknown(
            f"precision={v.value!r} of {name}()", "the module is cast to half precision with no AMP: the doctor "
            "does not follow the cast into the model", v.location or call.location)]
    mode = MIXED.get(v.value)
    if mode is None:
        return call, [Unknown(f"precision={v.value!r} of {name}()", "a precision Lightning refuses "
                              "(MisconfigurationException) or the doctor does not know", v.location or call.location)]
    # the meaning, not the spelling: no fix may write accelerate's 'fp16' where Lightning wants '16-mixed'
    meaning = replace(v, value=mode, location=None, origins=v.origins + (
        Origin("code", f"Lightning precision={v.value!r} is {mode} mixed precision"),))
    return replace(call, kwargs={**call.kwargs, "mixed_precision": meaning}), []


# --- Lightning's launch: strategy, devices, num_nodes -----------------------------------------------------------
# Lightning 2.6's registered strategies (`register_strategies` of DDPStrategy, DeepSpeedStrategy, FSDPStrategy and
# Fabric's DataParallelStrategy): each name, how it spreads the job and what it shards.
_DDP_STARTS = ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook")
DDP_STRATEGIES = set(_DDP_STARTS) | {f"{s}_find_unused_parameters_{b}" for s in _DDP_STARTS for b in ("true", "false")}
DEEPSPEED_STRATEGIES = {"deepspeed": (2, False, False), "deepspeed_stage_1": (1, False, False),
                        "deepspeed_stage_2": (2, False, False), "deepspeed_stage_2_offload": (2, True, False),
                        "deepspeed_stage_3": (3, False, False), "deepspeed_stage_3_offload": (3, True, True),
                        "deepspeed_stage_3_offload_nvme": (3, True, True)}  # name -> (stage, offload optimizer, params)
FSDP_STRATEGIES = {"fsdp": False, "fsdp_cpu_offload": True}  # name -> cpu offload
ONE_PROCESS_STRATEGIES = {"single_device", "dp"}  # Fabric's "dp" is nn.DataParallel in one process
_STRATEGY_CLASSES = {"DDPStrategy": "ddp", "DeepSpeedStrategy": "deepspeed", "FSDPStrategy": "fsdp",
                     "ModelParallelStrategy": "ddp", "SingleDeviceStrategy": "single", "DataParallelStrategy": "single"}
_FSDP_NAMES = {"FULL_SHARD": "full_shard", "SHARD_GRAD_OP": "shard_grad_op", "NO_SHARD": "no_shard",
               "HYBRID_SHARD": "hybrid_shard", "_HYBRID_SHARD_ZERO2": "hybrid_shard"}


@record
class LightningLaunch:
    """How a Lightning Trainer / Fabric spreads the job, as its accelerator connector decides it."""

    strategy: str  # auto | ddp | deepspeed | fsdp | single | unknown
    devices: int | None  # per node; None: every visible GPU ("auto", -1)
    num_nodes: int = 1
    stage: int = 0  # DeepSpeed
    offload_optimizer: bool = False
    offload_params: bool = False
    fsdp: str = ""  # FSDP sharding strategy
    on_gpu: bool = True  # False: accelerator="cpu" / "tpu" / "mps": no GPU processes to place
    device_ids: tuple[int, ...] = ()  # the GPU ids a list or "0,3" names; () for a count or "auto"


def lightning_launch(call: Call) -> LightningLaunch | None:
    """`strategy=`, `devices=`, `num_nodes=` and `accelerator=` of a Lightning Trainer / Fabric call, mirroring
    `_AcceleratorConnector`: devices "auto" / -1 / "-1" are every visible GPU, an int N the first N, a list or "0,1"
    those ids; strategy "auto" is DDP over several devices or nodes, one device otherwise. None when the call is not
    Lightning's, a value is computed at run time, or Lightning refuses it (devices=0, num_nodes=0)."""
    if call.callee not in LIGHTNING_CLASSES:
        return None
    accelerator = call.kwarg("accelerator")
    if accelerator.state == KNOWN and str(accelerator.value).lower() not in ("auto", "gpu", "cuda"):
        return LightningLaunch("unknown", None, on_gpu=False)
    devices = _devices(call.kwarg("devices"))
    nodes_v = call.kwarg("num_nodes")
    nodes = nodes_v.value if nodes_v.state == KNOWN and isinstance(nodes_v.value, int) else 1
    if devices is False or nodes < 1 or nodes_v.state not in (KNOWN, "absent"):
        return None
    found = _strategy(call.kwarg("strategy"))
    return replace(found or LightningLaunch("unknown", None), devices=devices, num_nodes=nodes,
                   device_ids=_device_ids(call.kwarg("devices")))


def _device_ids(v: Value) -> tuple[int, ...]:
    """GPU ids as `_parse_gpu_ids` reads them: a list, or a string with a comma ("0,3"; "3" alone is a count)."""
    raw = v.value if v.state == KNOWN else None
    if isinstance(raw, str) and "," in raw:
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()
    if isinstance(raw, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        return tuple(raw)
    return ()


def _devices(v: Value) -> int | None | bool:
    """Devices per node, None for every visible GPU, False when not known statically (or refused: 0, [])."""
    if v.state == "absent":
        return None
    if v.state != KNOWN or isinstance(v.value, bool):
        return False
    raw = v.value
    if isinstance(raw, str):
        text = raw.strip()
        if text in ("auto", "-1"):
            return None
        if "," in text:
            return len([p for p in text.split(",") if p.strip()]) or False
        raw = int(text) if text.isdigit() else 0
    if isinstance(raw, int):
        return None if raw == -1 else raw if raw > 0 else False
    if isinstance(raw, (list, tuple)):
        return len(raw) or False
    return False


def _strategy(v: Value) -> LightningLaunch | None:
    if v.state == "absent":
        return LightningLaunch("auto", None)
    if v.state == KNOWN and isinstance(v.value, str):
        name = v.value.lower()
        if name == "auto":
            return LightningLaunch("auto", None)
        if name in DDP_STRATEGIES:
            return LightningLaunch("ddp", None)
        if name in DEEPSPEED_STRATEGIES:
            stage, optimizer, params = DEEPSPEED_STRATEGIES[name]
            return LightningLaunch("deepspeed", None, stage=stage, offload_optimizer=optimizer, offload_params=params)
        if name in FSDP_STRATEGIES:
            return LightningLaunch("fsdp", None, offload_params=FSDP_STRATEGIES[name], fsdp="full_shard")
        if name in ONE_PROCESS_STRATEGIES:
            return LightningLaunch("single", None)
        return LightningLaunch("unknown", None)  # a name Lightning refuses, or a strategy registered elsewhere
    return _strategy_object(v.text)


def _strategy_object(text: str) -> LightningLaunch | None:
    """`DeepSpeedStrategy(stage=3, offload_optimizer=True)` written in the call: its class and literal keywords
    (the source is parsed, never run)."""
    try:
        node = parse_quietly(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    kind = _STRATEGY_CLASSES.get(name)
    if kind is None:
        return None
    keywords = {}
    for kw in node.keywords:
        try:
            keywords[kw.arg] = literal(kw.value)
        except (ValueError, SyntaxError, TypeError, RecursionError):
            keywords[kw.arg] = None
    if kind == "deepspeed":
        stage = keywords.get("stage", 2)
        return LightningLaunch("deepspeed", None, stage=stage if isinstance(stage, int) else 2,
                               offload_optimizer=bool(keywords.get("offload_optimizer")),
                               offload_params=bool(keywords.get("offload_parameters")))
    if kind == "fsdp":
        sharding = str(keywords.get("sharding_strategy") or "FULL_SHARD").upper()
        return LightningLaunch("fsdp", None, fsdp=_FSDP_NAMES.get(sharding, "full_shard"),
                               offload_params=bool(keywords.get("cpu_offload")))
    return LightningLaunch(kind, None)


def lightning_precision_sections(call: Call) -> dict:
    """The precision section Lightning's DeepSpeed strategy writes into its config (`_format_precision_config`):
    fp16 for "16-mixed" / "16-true", bf16 for "bf16-mixed" / "bf16-true", none for "32-true"."""
    v = call.kwarg("precision")
    if v.state != KNOWN:
        return {} if v.state == "absent" else {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}
    mode = MIXED.get(v.value) or {"16-true": "fp16", "bf16-true": "bf16"}.get(v.value)
    return {"fp16": {"enabled": True}} if mode == "fp16" else {"bf16": {"enabled": True}} if mode == "bf16" else {}


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
        kwargs["dtype"] = Value(state=DYNAMIC, text=given.text, location=given.location,
                                reason=f"model_kwargs={given.text} is computed at run time")
    return replace(call, args=args, kwargs=kwargs)


def _entry(mapping: Value, key: str) -> Value:
    """One entry of a dict literal as a value of its own, pointing at the dict (no fix edits inside it)."""
    value = mapping.value[key]
    text = value if isinstance(value, str) and value.startswith("torch.") else repr(value)
    return Value(state=KNOWN, value=value, text=f"model_kwargs {key}: {text}", location=mapping.location,
                 origins=(Origin("code", f"model_kwargs[{key!r}]"),))


# Unsloth's `is_bfloat16_supported()`: SUPPORTS_BFLOAT16, set from the compute capability (major >= 8), no emulation
UNSLOTH_BF16 = Predicate("bf16_supported", "Unsloth's is_bfloat16_supported() (compute capability 8.0 or newer)",
                         emulation=False)
_UNSLOTH_POSITIONAL = ("model_name", "max_seq_length", "dtype", "load_in_4bit")


def unsloth_load(call: Call) -> tuple[Call, list[Call]]:
    """`FastLanguageModel.from_pretrained` (and FastModel / FastVisionModel) as Unsloth runs it (models/loader.py,
    llama.py): `dtype=None` is bfloat16 where `is_bfloat16_supported()` else float16, and bfloat16 asked on a GPU
    without it becomes float16; `load_in_4bit` defaults to True (QLoRA), `load_in_8bit` wins over it, and
    `full_finetuning` / `load_in_16bit` load unquantized. The quantization becomes the BitsAndBytesConfig Unsloth
    builds, so no transformers keyword rule judges Unsloth's own keywords."""
    kwargs = dict(call.kwargs)
    for name, arg in zip(_UNSLOTH_POSITIONAL, call.args):
        kwargs.setdefault(name, arg)
    name = kwargs.pop("model_name", None)
    args = (name,) if name is not None else ()
    dtype = _unsloth_dtype(kwargs.get("dtype"), call)
    kwargs["dtype"] = dtype
    flags = {k: kwargs.pop(k, None) for k in ("load_in_4bit", "load_in_8bit", "load_in_16bit", "full_finetuning")}
    if "quantization_config" in kwargs:  # Unsloth respects a user's BitsAndBytesConfig
        return replace(call, args=args, kwargs=kwargs), []
    if any(v is not None and v.state != KNOWN for v in flags.values()):
        kwargs["quantization_config"] = Value(state=DYNAMIC, text=call.text, location=call.location,
                                              reason="Unsloth's load_in_4bit / load_in_8bit are set at run time")
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
        written = flags["load_in_4bit"] if _on(flags["load_in_4bit"]) else Value(
            state=KNOWN, value=True, text=call.text, location=call.location, origins=(Origin(
                "default", f"Unsloth loads {'a pre-quantized 4-bit checkpoint' if prequantized else 'in 4-bit'}"
                           f" unless load_in_4bit=False (its default is True)"),))
    else:
        return replace(call, args=args, kwargs=kwargs), []
    config = Call(kind=CallKind.BNB_CONFIG, callee=f"{call.callee}.{flag}", location=call.location, scope=call.scope,
                  kwargs={flag: written, "bnb_4bit_compute_dtype": dtype}, text=call.text, in_loop=call.in_loop,
                  in_branch=call.in_branch, branches=call.branches)
    kwargs["quantization_config"] = Value(state=KNOWN, value="BitsAndBytesConfig", text=f"{flag}=True", origins=(
        Origin("default", f"Unsloth builds the BitsAndBytesConfig for {flag}"),))
    return replace(call, args=args, kwargs=kwargs, refs={**call.refs, "quantization_config": config.key}), [config]


def _on(v: Value | None) -> bool:
    return v is not None and v.state == KNOWN and v.value is True


_UPCAST = Origin("default", "Unsloth upcasts the trained weights to float32 for a full fine-tune outside bfloat16 "
                            "(unsloth_zoo prepare_model_for_training; float32_mixed_precision)")


def _unsloth_full_finetuning_dtype(dtype: Value, fp32_mixed: Value | None) -> Value:
    """A full fine-tune trains every weight in float32 unless they are bfloat16 (then pure bf16), or in float32
    always under `float32_mixed_precision=True`."""
    fp32 = Value(state=KNOWN, value="torch.float32", text=dtype.text, location=dtype.location,
                 origins=dtype.origins + (_UPCAST,))
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
        return Value(state=CONDITIONAL, text=v.text if v is not None else "dtype=None (the default)",
                     predicate=UNSLOTH_BF16, location=where, origins=default,
                     if_true=Value(state=KNOWN, value="torch.bfloat16", text="torch.bfloat16", origins=default),
                     if_false=Value(state=KNOWN, value=half, text=half, origins=default))
    if v.state == KNOWN and str(v.value).replace("torch.", "") in ("bfloat16", "bf16"):
        changed = replace(v, value=half, origins=v.origins + (Origin(
            "default", "Unsloth changes bfloat16 to float16 on a GPU without bf16"),))
        return Value(state=CONDITIONAL, text=v.text, predicate=UNSLOTH_BF16, location=v.location, origins=v.origins,
                     if_true=v, if_false=changed)
    return v


def diffusers_load(call: Call) -> Call:
    """diffusers' `ModelMixin.from_pretrained` (a UNet, VAE, transformer): `dtype` and `torch_dtype` are one
    setting (`dtype` read first), and with neither the model is built and loaded in float32 (the default dtype),
    not transformers 5's checkpoint dtype."""
    kwargs = dict(call.kwargs)
    if "dtype" not in kwargs and "torch_dtype" in kwargs:
        kwargs["dtype"] = kwargs.pop("torch_dtype")
    if "dtype" not in kwargs or kwargs["dtype"].is_(None):
        kwargs["dtype"] = Value(state=KNOWN, value="torch.float32", origins=(Origin(
            "default", "diffusers loads float32 when no torch_dtype is given"),))
    return replace(call, kwargs=kwargs)
