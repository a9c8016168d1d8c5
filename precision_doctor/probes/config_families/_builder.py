"""What every family's reader shares: the builder that turns a config into the calls its tool makes, each value
pointing at the line that writes it or named as the tool's default."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ...knowledge import bf16_checks
from ...model.call_kinds import CallKind
from ...model.facts import (
    CONDITIONAL,
    KNOWN,
    Call,
    CheckpointFacts,
    Location,
    Origin,
    Predicate,
    RecipeFacts,
    ScriptFacts,
    Unknown,
    Value,
)
from ..config_files import ConfigDoc

# The check recipe tools ask (`bf16: auto`): transformers' is_torch_bf16_gpu_available(), which emulates on
# transformers >= 4.35 with torch >= 2.3 (knowledge/bf16_checks.py)
TRANSFORMERS_BF16 = Predicate("bf16_supported", "is_torch_bf16_gpu_available()", asked=bf16_checks.TRANSFORMERS)


class Builder:
    def __init__(self, doc: ConfigDoc, family: str, version: str, path: Path):
        self.doc = doc
        self.family = family
        self.version = version
        self.path = path
        self.calls: list[Call] = []
        self.unknowns: list[Unknown] = []
        self.via = f"{family} config"
        self.first = Location(doc.path, min(doc.lines.values(), default=1))
        self.last = Location(doc.path, max(doc.lines.values(), default=1))  # training starts once all is read
        self._checkpoints: dict[str, CheckpointFacts] = {}
        self.memory_unmodelled = ""  # why the memory rules cannot judge this recipe ("" when they can)
        self.chunked_loss = ""  # the setting that fuses the output layer and the loss (no logits held)
        self.fp32_embeddings = ""  # why the framework keeps embeddings and norms in fp32 (RecipeFacts)
        self.spelling: dict[str, str] = {}  # the recipe's key for each Trainer keyword a fix names

    def written(self, key: str, meaning: Any = None) -> Value:
        return self.doc.value(key, via=self.via, meaning=meaning)

    def default(self, key: str, value: Any, note: str = "") -> Value:
        """A value the tool sets itself: no line to point at (and nothing in the file for a fix to edit)."""
        detail = note or f"{self.family} {self.version} default {key}: {value}"
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
        from ..script import _deepspeed_configs

        deepspeed, missing = _deepspeed_configs(self.path, self.calls)
        loaded = [c.args[0].value for c in self.calls if c.kind == CallKind.MODEL_LOAD and c.args]
        return ScriptFacts(
            path=self.doc.path,
            calls=tuple(self.calls),
            imports=(self.family.lower(),),
            unknowns=tuple(self.unknowns) + tuple(missing),
            files=(self.doc.path,),
            deepspeed_configs=deepspeed,
            checkpoints={m: c for m in loaded if isinstance(m, str) and (c := self.checkpoint(m)) is not None},
            recipe=RecipeFacts(
                self.family,
                self.version,
                self.settings(),
                self.model_type(),
                self.memory_unmodelled,
                self.chunked_loss,
                self.spelling,
                fp32_embeddings=self.fp32_embeddings,
            ),
        )

    def checkpoint(self, model_id: str) -> CheckpointFacts | None:
        """What the doctor knows of a checkpoint the recipe names (a local folder, the HF cache, the shipped
        table), looked up once."""
        if model_id not in self._checkpoints:
            from ..checkpoint import probe_checkpoints

            load = Call(CallKind.MODEL_LOAD, "", self.first, "<module>", args=(Value(KNOWN, model_id),))
            self._checkpoints.update(probe_checkpoints(self.path, [load]))
        return self._checkpoints.get(model_id)

    def model_type(self) -> str:
        """The trained checkpoint's model_type where it is known, "" otherwise: some of the framework's checks and
        defaults depend on it."""
        for call in self.calls:
            if call.kind == CallKind.MODEL_LOAD and call.args and isinstance(call.args[0].value, str):
                found = self.checkpoint(call.args[0].value)
                if found is not None and found.known and found.model_type:
                    return found.model_type
        return ""

    def settings(self) -> dict[str, Value]:
        """Every setting the recipe writes, by dotted key path (a mapping too, as a whole), as written (launch-line
        overrides included)."""
        out: dict[str, Value] = {}
        paths = set(self.doc.lines) | set(self.doc.given)
        for path in sorted(paths, key=lambda p: (len(p), p)):
            if all(isinstance(k, str) for k in path) and self.doc.has(*path):
                out[".".join(path)] = self.doc.value(*path, via=self.via)
        return out


def gpu_decides(text: str, if_true: Value, if_false: Value) -> Value:
    """A value decided by the GPU; no location, so no fix edits the YAML through it."""
    return Value(
        state=CONDITIONAL,
        text=text,
        predicate=TRANSFORMERS_BF16,
        if_true=if_true,
        if_false=if_false,
        origins=if_true.origins,
    )


def weights_dtype(name: str, because: Value) -> Value:
    """The weights' dtype the tool derives from a precision setting: evidence points at that setting."""
    origins = tuple(
        replace(o, detail=f"{o.detail}: the weights load in {name}") if o.kind == "config-file" else o
        for o in because.origins
    )
    return replace(because, value=f"torch.{name}", origins=origins)


def model_load(
    b: Builder,
    weights: Value,
    quantized: tuple[str, Value, Location] | None = None,
    extra: dict | None = None,
    bnb_extra: dict | None = None,
) -> Call:
    """The model load a recipe's tool makes from `model_name_or_path`: in `weights`' dtype, through a
    BitsAndBytesConfig (`load_in_4bit`/`load_in_8bit`: (flag, its value, where it is set), the load dtype as the
    compute dtype) when quantized."""
    kwargs: dict[str, Value] = {"dtype": weights, **(extra or {})}
    if b.doc.has("trust_remote_code"):  # each tool hands it to from_pretrained (the key is the same in all three)
        kwargs["trust_remote_code"] = b.written("trust_remote_code")
    refs = {}
    if quantized is not None:
        flag, value, where = quantized
        bnb = b.add(
            CallKind.BNB_CONFIG,
            "transformers.BitsAndBytesConfig",
            where,
            kwargs={flag: value, "bnb_4bit_compute_dtype": weights, **(bnb_extra or {})},
            target="bnb_config",
        )
        refs["quantization_config"] = bnb.key
        key = value.text.split(":", 1)[0]  # the recipe's own key: `quantization_bit`, `load_in_4bit`
        kwargs["quantization_config"] = Value(state=KNOWN, value="BitsAndBytesConfig", text=key)
    return b.add(
        CallKind.MODEL_LOAD,
        "transformers.AutoModelForCausalLM.from_pretrained",
        b.doc.location("model_name_or_path"),
        kwargs=kwargs,
        args=(b.written("model_name_or_path"),),
        refs=refs,
        target="model",
    )


def trained_model(
    b: Builder, load: Call, adapter: str, adapter_kwargs: dict[str, Value], config: Call | None = None
) -> Call:
    if adapter in ("lora", "qlora", "oft"):
        return b.add(
            CallKind.GET_PEFT_MODEL,
            "peft.get_peft_model",
            b.where("adapter", "finetuning_type"),
            kwargs=adapter_kwargs,
            refs={"0": load.key, **({"1": config.key} if config is not None else {})},
            target="model",
        )
    return load
