"""`check CONFIG.yaml`: a training config checked as the tool that consumes it would run it.

The family is recognised by its keys, and the config becomes the calls that tool makes: a model load (with its
dtype, quantization and attention implementation), PEFT wrapping, TrainingArguments and a Trainer, each value
pointing at the YAML line that writes it (or named as the tool's default). Every existing rule then reads it
like a script. The defaults and silent changes mirrored are those of:

- Axolotl 0.18.0 (`utils/config/__init__.py` `resolve_dtype`, `utils/schemas/config.py` field defaults):
  `bf16: auto` (the default) becomes True where `is_torch_bf16_gpu_available()` (native bf16, no emulation),
  else False with `fp16` turned on when unset; `bf16: true` turns `fp16` off; the weights load in bfloat16
  (bf16/bfloat16), float16 (fp16/float16/load_in_8bit) or float32; LoRA adapters through peft's default.
- LLaMA-Factory 0.9.6.dev0 (`hparams/parser.py`, `model/adapter.py`): `finetuning_type` defaults to lora; the
  weights load in the compute dtype (bf16 > fp16); trainable parameters are upcast to float32 unless
  `pure_bf16` (or ZeRO-3 without quantization), adapters included.
- accelerate's own config file: its `mixed_precision` for a script that builds `Accelerator()`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..model.call_kinds import CallKind
from ..model.errors import InputError
from ..model.facts import CONDITIONAL, KNOWN, Call, Location, Origin, Predicate, ScriptFacts, Unknown, Value
from ..system.sources import Unreadable
from .config_files import ConfigDoc, ConfigError, read_config

AXOLOTL = "Axolotl"
LLAMA_FACTORY = "LLaMA-Factory"
ACCELERATE = "accelerate"
VERSIONS = {AXOLOTL: "0.18.0", LLAMA_FACTORY: "0.9.6.dev0", ACCELERATE: "1.x"}
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")

# transformers' is_torch_bf16_gpu_available(): native bf16 only (emulation does not count)
NATIVE_BF16 = Predicate("bf16_supported", "is_torch_bf16_gpu_available()", emulation=False)


def is_config_path(path: Path) -> bool:
    return path.suffix.lower() in CONFIG_SUFFIXES


def family_of(doc: ConfigDoc) -> str | None:
    if doc.has("base_model"):
        return AXOLOTL
    if doc.has("model_name_or_path") and any(doc.has(k) for k in ("stage", "finetuning_type", "template")):
        return LLAMA_FACTORY
    if doc.has("compute_environment") or (doc.has("distributed_type") and doc.has("mixed_precision")):
        return ACCELERATE
    return None


def probe_config(path: Path, shown: str) -> ScriptFacts:
    """A config's facts; InputError when it cannot be read or is no family the doctor knows."""
    try:
        doc = read_config(path, shown)
    except Unreadable:
        raise
    except ConfigError as exc:
        raise InputError(f"{shown}: {exc}; pass an Axolotl, LLaMA-Factory or accelerate config") from None
    family = family_of(doc)
    if family is None and doc.has("model") and doc.has("model_class"):
        raise InputError(
            f"{shown}: a LLaMA-Factory v1 config (model, model_class), a format the doctor does not "
            f"model yet; check a config in the 0.9 format (model_name_or_path, stage, finetuning_type) "
            f"or the training script"
        )
    if family is None:
        raise InputError(
            f"{shown}: not a config the doctor recognises (Axolotl: base_model; LLaMA-Factory: "
            f"model_name_or_path with stage/finetuning_type; accelerate: compute_environment); "
            f"pass a training script or one of those configs"
        )
    return _BUILDERS[family](_Builder(doc, family, path))


# --- building the calls the tool makes ---------------------------------------------------------


class _Builder:
    def __init__(self, doc: ConfigDoc, family: str, path: Path):
        self.doc = doc
        self.family = family
        self.path = path
        self.calls: list[Call] = []
        self.unknowns: list[Unknown] = []
        self.via = f"{family} config"
        self.first = Location(doc.path, min(doc.lines.values(), default=1))
        self.last = Location(doc.path, max(doc.lines.values(), default=1))  # training starts once all is read

    def written(self, key: str, meaning: Any = None) -> Value:
        return self.doc.value(key, via=self.via, meaning=meaning)

    def default(self, key: str, value: Any, note: str = "") -> Value:
        """A value the tool sets itself: no line to point at (and nothing in the file for a fix to edit)."""
        detail = note or f"{self.family} {VERSIONS[self.family]} default {key}: {value}"
        return Value(state=KNOWN, value=value, text=f"{key} (not set)", origins=(Origin("default", detail),))

    def setting(self, key: str, default: Any) -> Value:
        return self.written(key) if self.doc.has(key) else self.default(key, default)

    def where(self, *keys: str) -> Location:
        for k in keys:
            if self.doc.has(k):
                return self.doc.location(k)
        return self.first

    def add(
        self,
        kind: CallKind,
        callee: str,
        at: Location,
        kwargs: dict[str, Value] | None = None,
        args: tuple[Value, ...] = (),
        refs: dict[str, str] | None = None,
        target: str = "",
        receiver: str = "",
    ) -> Call:
        call = Call(
            kind=kind,
            callee=callee,
            location=at,
            scope="<module>",
            target=target,
            receiver=receiver,
            args=args,
            kwargs=kwargs or {},
            text=f"(parsed from {self.doc.path} as {self.family} reads it)",
            refs=refs or {},
        )
        self.calls.append(call)
        return call

    def facts(self) -> ScriptFacts:
        from .script import _deepspeed_configs

        deepspeed, missing = _deepspeed_configs(self.path, self.calls)
        return ScriptFacts(
            path=self.doc.path,
            calls=tuple(self.calls),
            imports=(self.family.lower(),),
            unknowns=tuple(self.unknowns) + tuple(missing),
            files=(self.doc.path,),
            deepspeed_configs=deepspeed,
        )


def _cond(text: str, if_true: Value, if_false: Value) -> Value:
    """A value decided by the GPU; no location, so no fix edits the YAML through it."""
    return Value(
        state=CONDITIONAL, text=text, predicate=NATIVE_BF16, if_true=if_true, if_false=if_false, origins=if_true.origins
    )


def _dtype(name: str, because: Value) -> Value:
    """The weights' dtype the tool derives from a precision setting: evidence points at that setting."""
    origins = tuple(
        replace(o, detail=f"{o.detail}: the weights load in {name}") if o.kind == "config-file" else o
        for o in because.origins
    )
    return replace(because, value=f"torch.{name}", origins=origins)


def _trained_model(b: _Builder, load: Call, adapter: str, adapter_kwargs: dict[str, Value]) -> Call:
    if adapter in ("lora", "qlora", "oft"):
        return b.add(
            CallKind.GET_PEFT_MODEL,
            "peft.get_peft_model",
            b.where("adapter", "finetuning_type"),
            kwargs=adapter_kwargs,
            refs={"0": load.key},
            target="model",
        )
    return load


# --- Axolotl -------------------------------------------------------------------------------------


def _axolotl(b: _Builder) -> ScriptFacts:
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
            weights = _dtype("bfloat16", bf16_v if bf16 else b.written("bfloat16"))
        elif load_8bit or fp16 or float16:
            source = b.written("load_in_8bit") if load_8bit else fp16_v if fp16 else b.written("float16")
            weights = _dtype("float16", source)
        else:
            weights = _dtype("float32", b.default("torch_dtype", "float32", "Axolotl loads float32 without bf16/fp16"))
        return bf16_v, fp16_v, weights

    if bf16_raw == "auto" and not fp16_raw:
        on, off = resolved(True), resolved(False)
        bf16, fp16, weights = (_cond("bf16: auto", t, f) for t, f in zip(on, off, strict=False))
    else:
        bf16, fp16, weights = resolved(False)

    base = b.written("base_model")
    load_kwargs = {"dtype": weights}
    if doc.get("flash_attention"):
        load_kwargs["attn_implementation"] = b.written("flash_attention", meaning="flash_attention_2")
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
    model = _trained_model(b, load, adapter, {})
    if adapter and adapter not in ("lora", "qlora"):
        b.unknowns.append(
            Unknown(f"adapter: {adapter}", "an adapter the doctor does not model", doc.location("adapter"))
        )
    args = {"fp16": fp16, "bf16": bf16}
    for key in ("tf32", "gradient_checkpointing", "gradient_checkpointing_kwargs", "optimizer", "max_grad_norm"):
        if doc.has(key) and doc.get(key) != "auto":
            args["optim" if key == "optimizer" else key] = b.written(key)
    if doc.has("deepspeed"):
        args["deepspeed"] = b.written("deepspeed")
    if doc.get("fsdp"):
        fsdp = doc.get("fsdp")
        args["fsdp"] = b.written("fsdp", meaning=" ".join(fsdp) if isinstance(fsdp, list) else fsdp)
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


def _axolotl_bnb_extras(b: _Builder, flag: str) -> dict[str, Value]:
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
            extras[key] = b.default(key, value, f"{AXOLOTL} {VERSIONS[AXOLOTL]} sets {key}={value} for qlora")
    overrides = b.doc.get("bnb_config_kwargs")
    if isinstance(overrides, dict):
        for key in overrides:
            if isinstance(key, str) and key.startswith(("bnb_4bit_", "llm_int8_")):
                extras[key] = b.doc.value("bnb_config_kwargs", key, via=b.via)
    return extras


# --- LLaMA-Factory --------------------------------------------------------------------------------


def _llamafactory(b: _Builder) -> ScriptFacts:
    doc = b.doc
    bf16, fp16, pure_bf16 = b.setting("bf16", False), b.setting("fp16", False), b.setting("pure_bf16", False)
    finetuning = str(doc.get("finetuning_type", default="lora"))
    quant_bits = doc.get("quantization_bit")
    if bf16.value or pure_bf16.value:
        weights = _dtype("bfloat16", bf16 if bf16.value else pure_bf16)
    elif fp16.value:
        weights = _dtype("float16", fp16)
    else:  # infer_optim_dtype: the checkpoint's dtype where the GPU supports it
        weights = replace(b.default("infer_dtype", "auto"), value="auto")
    load_kwargs = {"dtype": weights}
    refs = {}
    if quant_bits in (4, 8):
        flag = f"load_in_{quant_bits}bit"
        bnb = b.add(
            CallKind.BNB_CONFIG,
            "transformers.BitsAndBytesConfig",
            doc.location("quantization_bit"),
            kwargs={flag: b.written("quantization_bit", meaning=True), "bnb_4bit_compute_dtype": weights},
            target="bnb_config",
        )
        refs["quantization_config"] = bnb.key
        load_kwargs["quantization_config"] = Value(state=KNOWN, value="BitsAndBytesConfig", text="quantization_bit")
    load = b.add(
        CallKind.MODEL_LOAD,
        "transformers.AutoModelForCausalLM.from_pretrained",
        doc.location("model_name_or_path"),
        kwargs=load_kwargs,
        args=(b.written("model_name_or_path"),),
        refs=refs,
        target="model",
    )
    zero3 = _zero3(doc)
    upcast = not pure_bf16.value and not doc.get("use_badam") and not (quant_bits is None and zero3)
    upcast_note = b.default(
        "cast_trainable_params_to_fp32",
        upcast,
        f"LLaMA-Factory {VERSIONS[LLAMA_FACTORY]} "
        + (
            "upcasts trainable parameters to float32"
            if upcast
            else "keeps trainable parameters in the load dtype (pure_bf16 / BAdam / ZeRO-3)"
        ),
    )
    if finetuning in ("lora", "oft"):
        model = _trained_model(b, load, finetuning, {"autocast_adapter_dtype": upcast_note})
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


def _zero3(doc: ConfigDoc) -> bool:
    ds = doc.get("deepspeed")
    return isinstance(ds, str) and "z3" in Path(ds).name.lower() or "zero3" in str(ds).lower()


# --- accelerate config ------------------------------------------------------------------------------


def _accelerate(b: _Builder) -> ScriptFacts:
    """The script it launches builds `Accelerator()` and trains: its precision is the config's."""
    mp = b.setting("mixed_precision", "no")
    at = b.where("mixed_precision", "distributed_type")
    b.add(CallKind.ACCELERATOR, "accelerate.Accelerator", at, kwargs={"mixed_precision": mp}, target="accelerator")
    b.add(CallKind.METHOD, "accelerator.backward", at, target="")
    return b.facts()


_BUILDERS = {AXOLOTL: _axolotl, LLAMA_FACTORY: _llamafactory, ACCELERATE: _accelerate}
