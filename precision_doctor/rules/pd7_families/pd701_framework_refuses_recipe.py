"""PD701 framework-refuses-recipe: the recipe's own framework (Axolotl, LLaMA-Factory) refuses it when it reads it."""

from __future__ import annotations

from ...derive import LaunchPlan, Setup
from ...knowledge.recipe_checks import axolotl
from ...model.facts import LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft
from ..registry import Example, LogSignature, rule
from ._recipe import holding

_QLORA_8BIT = next(c for c in axolotl.CHECKS if "Require cfg.load_in_4bit" in c.message)
_DEEPSPEED_AND_FSDP = next(c for c in axolotl.CHECKS if c.message.startswith("deepspeed and fsdp"))


@rule(
    "PD701",
    "framework-refuses-recipe",
    severity="error",
    phase="config",
    summary="The recipe's framework refuses this combination of settings when it reads the recipe.",
    what="A setting combination Axolotl's or LLaMA-Factory's own validators reject before anything loads: "
    "`adapter: qlora` without `load_in_4bit`, DeepSpeed with FSDP, bitsandbytes' 8-bit AdamW under FSDP2, "
    "float8 all-gather without FSDP2, `pure_bf16` or PiSSA under ZeRO-3, quantization with resized vocabularies, "
    "LoRA options without LoRA, SageAttention on a GPU outside its allow-list ... Each check is mirrored from the "
    "framework's source at the release its reader names (knowledge/recipe_checks, docs/peer_checks.md).",
    why="The framework validates the recipe as the job starts, after the queue wait and the container start: the "
    "job dies with the framework's own exception (ValueError, NotImplementedError, ImportError ...). The "
    "combination is refused because it fails or silently misbehaves further on (8-bit bitsandbytes optimizer "
    "states cannot shard as DTensors, a 4-bit DeepSpeed partition cannot be resized, ...).",
    error="ValueError: <the framework's message for the refused combination>",
    fix="Change the recipe as the finding says; the framework's message names the setting.",
    applicability=Applicability.DISPLAY,
    log=LogSignature(
        patterns=(
            r"Require cfg\.load_in_4bit to be True for qlora",
            r"Can't (load|merge) qlora (in|if)",
            r"deepspeed and fsdp cannot be used together",
            r"FSDP2 not compatible with adamw_(bnb_)?8bit",
            r"fp8_enable_fsdp_float8_all_gather requires FSDP2",
            r"`pure_bf16` is incompatible with DeepSpeed ZeRO-3",
            r"Cannot use LoRA with GaLore, APOLLO or BAdam together",
            r"Only 4-bit quantized model can use fsdp\+qlora or auto device map",
        )
    ),
    fires=[
        Example(_QLORA_8BIT.fires, target=_QLORA_8BIT.target, name="config.yml"),
        Example(_DEEPSPEED_AND_FSDP.fires, target=_DEEPSPEED_AND_FSDP.target, name="config.yml"),
    ],
    silent=[
        Example(_QLORA_8BIT.accepted, target=_QLORA_8BIT.target, name="config.yml"),
        Example(_DEEPSPEED_AND_FSDP.accepted, target=_DEEPSPEED_AND_FSDP.target, name="config.yml"),
    ],
)
def framework_refuses_recipe(
    script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts, launch: LaunchFacts, plan: LaunchPlan
):
    for check, said, evidence, fix in holding(script, setup, machine, stack, launch, plan, "refuses"):
        message = f"{check.family} refuses this recipe when it reads it: {said}"
        if check.truth:
            message += f" (its check is stricter than the hardware: {check.truth})"
        # pydantic wraps an Axolotl validator's ValueError as "Value error, ..."; other exceptions pass through
        axolotl_value_error = check.family == axolotl.FAMILY and check.raises == "ValueError"
        error = f"Value error, {said}" if axolotl_value_error else f"{check.raises}: {said}"
        yield Draft(
            message,
            evidence=evidence,
            error=error,
            fix=fix,
        )
