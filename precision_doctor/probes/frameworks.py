"""Trainers other than Hugging Face's, read as the precision facts the rules know.

PyTorch Lightning's `Trainer(precision=...)` and Fabric's `Fabric(precision=...)` play the part of accelerate's
`Accelerator(mixed_precision=...)`: "16-mixed" is fp16 autocast with a GradScaler, "bf16-mixed" bf16 autocast,
"transformer-engine" fp8, "32-true"/"64-true" no AMP. The mapping mirrors Lightning 2.x's precision connector
(`_check_config_and_set_final_flags` / `_init_precision`): legacy 16, "16" and "bf16" are the "-mixed" modes,
and an unset precision is "32-true" (Lightning reads no launcher's precision). "16-true" / "bf16-true" cast the
whole module to half with no AMP: recorded as no AMP, the cast left to the module (reported as unknown).
"""

from __future__ import annotations

from dataclasses import replace

from ..call_kinds import LIGHTNING_CLASSES
from ..facts import KNOWN, Call, Origin, Unknown, Value

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
