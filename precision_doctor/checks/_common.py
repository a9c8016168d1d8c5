"""Shared helpers for checks: target-aware precision advice and edits of written values."""

from __future__ import annotations

from ..derive import Fact, Setup
from ..facts import KNOWN, Call, MachineFacts, Value
from ..findings import Edit

PURE_FP16_WARNING = ("Do not turn fp16 AMP off to silence this: fp16 weights trained without loss scaling "
                     "underflow and turn NaN (PD204).")


def gpu_phrase(machine: MachineFacts) -> str:
    if not machine.known or not machine.gpus:
        return ""
    g = machine.gpus[0]
    return f"{g.name} ({g.sm})"


def native_bf16(machine: MachineFacts) -> bool | None:
    """True on Ampere+, False on older GPUs or no GPU, None when the machine is unknown."""
    if not machine.known:
        return None
    return bool(machine.gpus) and machine.gpus[0].native_bf16


def literal_edit(value: Value | None, new: str) -> Edit | None:
    """Replace a value where it is written (the variable or dict entry that holds it, not the call)."""
    if value is None or value.state != KNOWN or not value.origins:
        return None
    literal = value.origins[-1]
    if literal.kind != "code" or literal.location is None:
        return None
    return Edit("replace_value", literal.location.path, literal.location.line, old=literal.detail, new=new)


def set_kwarg(call: Call, name: str, new: str) -> Edit:
    existing = call.kwargs.get(name)
    if existing is not None and existing.state == KNOWN:
        edit = literal_edit(existing, new)
        if edit is not None:
            return edit
    return Edit("set_kwarg", call.location.path, call.location.line, call=call.callee.rsplit(".", 1)[-1],
                name=name, new=new)


def weights_source_edit(setup: Setup, new_dtype: str) -> Edit | None:
    """Change the dtype the trained model is loaded in, where that dtype is written."""
    w: Fact = setup.weights
    if w.source is not None:
        edit = literal_edit(w.source, new_dtype)
        if edit is not None:
            return edit
    if setup.model_load is not None and w.call is setup.model_load:
        name = "torch_dtype" if "torch_dtype" in setup.model_load.kwargs else "dtype"
        return set_kwarg(setup.model_load, name, new_dtype)
    return None


def describe_trainable(setup: Setup) -> str:
    if not setup.peft.value:
        return "all parameters are trained"
    parts = []
    if setup.adapter_dtype.known:
        parts.append(f"LoRA adapters in {setup.adapter_dtype.value}")
    if setup.modules_to_save.value:
        parts.append(f"modules_to_save copies ({', '.join(map(str, setup.modules_to_save.value))}) "
                     f"in {setup.weights.value}")
    return " and ".join(parts) or "adapters are trained"
