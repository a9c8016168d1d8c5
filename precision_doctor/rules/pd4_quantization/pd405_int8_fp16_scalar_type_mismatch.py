"""PD405 int8-fp16-scalar-type-mismatch: 8-bit LoRA with fp16=True on 2023-era peft/bitsandbytes: a Half/Float
mismatch in backward."""

from __future__ import annotations

from ...derive import Setup
from ...knowledge.versions import at_least
from ...model.facts import StackFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._quantization import qlora


@rule(
    "PD405",
    "int8-fp16-scalar-type-mismatch",
    severity="error",
    phase="first-step",
    summary="8-bit LoRA with fp16=True on 2023-era peft/bitsandbytes: a Half/Float mismatch in backward.",
    what="`load_in_8bit` + `prepare_model_for_int8_training` + `fp16=True` with peft <= 0.4 or bitsandbytes <= 0.39.",
    why="Old bitsandbytes' MatMul8bitLt.backward multiplied fp16 gradients with fp32 state.",
    error="RuntimeError: expected scalar type Half but found Float",
    fix="Upgrade peft and bitsandbytes; or drop fp16=True for int8 LoRA.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    fires=[
        Example(
            qlora()
            .replace("load_in_4bit=True, bnb_4bit_quant_type='nf4'", "load_in_8bit=True")
            .replace("bf16=True", "fp16=True"),
            versions={"bitsandbytes": "0.38.1", "peft": "0.3.0"},
        )
    ],
    silent=[
        Example(
            qlora()
            .replace("load_in_4bit=True, bnb_4bit_quant_type='nf4'", "load_in_8bit=True")
            .replace("bf16=True", "fp16=True")
        )
    ],
)
def int8_fp16_scalar_type_mismatch(setup: Setup, stack: StackFacts):
    if setup.quantized.value != "8bit" or setup.amp.value != "fp16":
        return
    old_peft = not at_least(stack, "peft", "0.5")
    old_bnb = not at_least(stack, "bitsandbytes", "0.40")
    if not (old_peft or old_bnb):
        return
    versions = ", ".join(stack.get(n).describe() for n in ("peft", "bitsandbytes"))
    yield Draft(
        f"8-bit training with fp16=True on {versions}: the old int8 backward mixes Half and Float",
        evidence=setup.quantized.evidence + setup.amp.evidence,
        fix=Fix(
            "pip install -U peft bitsandbytes",
            applicability=Applicability.UNSAFE,
            commands=("pip install -U peft bitsandbytes",),
        ),
    )
