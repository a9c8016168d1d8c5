"""PD212 pure-bf16-weights-no-master-copy: Full fine-tune with bf16 weights and bf16 optimizer state: tiny late
updates round away."""

from __future__ import annotations

from ...derive import Setup
from ...knowledge import dtypes
from ...model.facts import ScriptFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._precision import lora_script, trainer_script


@rule(
    "PD212",
    "pure-bf16-weights-no-master-copy",
    severity="info",
    phase="later-steps",
    summary="Full fine-tune with bf16 weights and bf16 optimizer state: tiny late updates round away.",
    what="All parameters trained in bfloat16 (`dtype=torch.bfloat16` + `bf16=True`, no adapters). A common, working "
    "setup: reported for the trade-off only.",
    why="bf16 keeps 8 bits of mantissa: updates smaller than the weight's resolution are rounded away late in "
    "training, which can stall the loss.",
    error="no exception: the loss may stall late in training",
    fix="If it matters: fp32 master weights with bf16 autocast (load fp32, bf16=True), fp32 LoRA adapters, or a "
    "Kahan-summation / stochastic-rounding optimizer.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    fires=[Example(trainer_script(", dtype=torch.bfloat16", ", bf16=True"))],
    silent=[
        Example(trainer_script(", dtype=torch.float32", ", bf16=True")),
        Example(lora_script(", dtype=torch.bfloat16", ", bf16=True")),
    ],
)
def pure_bf16_weights_no_master_copy(script: ScriptFacts, setup: Setup):
    if not setup.trains or setup.peft.value or setup.weights.value != dtypes.BFLOAT16:
        return
    if setup.amp.value == "fp16" or setup.quantized.value:
        return
    if setup.sharding.kind == "deepspeed":
        return  # DeepSpeed's optimizer keeps fp32 master partitions of bf16 weights
    kept = script.recipe.fp32_embeddings if script.recipe is not None else ""
    yield Draft(
        "every parameter is trained in bfloat16 with no fp32 master copy"
        if not kept
        else "the transformer blocks are trained in bfloat16 with no fp32 master copy (the embeddings, output layer "
        "and norms are kept in fp32)",
        evidence=setup.weights.evidence,
        fix=Fix(
            "optional: load in float32 and train with bf16 autocast (bf16=True), if memory allows",
            applicability=Applicability.UNSAFE,
        ),
    )
