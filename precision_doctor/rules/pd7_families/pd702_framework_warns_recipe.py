"""PD702 framework-warns-recipe: the recipe's framework warns, when it reads the recipe, that the run may fail."""

from __future__ import annotations

from ...derive import LaunchPlan, Setup
from ...knowledge.recipe_checks import axolotl
from ...model.facts import LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Severity
from ..registry import Example, LogSignature, rule
from ._recipe import holding

_PACKED_SDPA_BF16 = next(c for c in axolotl.CHECKS if c.message.startswith("sample_packing & torch sdpa"))
_QLORA_ZERO3 = next(c for c in axolotl.CHECKS if c.message.startswith("qlora + zero3"))


@rule(
    "PD702",
    "framework-warns-recipe",
    severity="warning",
    phase="first-step",
    summary="The recipe's framework warns, when it reads the recipe, that this combination may fail or mislead.",
    what="A combination Axolotl or LLaMA-Factory lets through with a warning in its start-up log that says the "
    "run may fail: sample packing through SDPA in bf16 off Hopper (the loss may read 0.0), QLoRA under ZeRO-3 "
    "with non-reentrant checkpointing (CheckpointError), SageAttention without padding or for a full fine-tune "
    "(loss explodes or drops to 0); and the advice it logs where the job runs other than the recipe reads: fp8 "
    "without torch_compile (no speed-up), Liger on a model it does not patch (not applied), Gemma 2 under SDPA (no "
    "soft-capping), FSDP1 and other deprecated settings; at info level, what it only notes (bf16 available but "
    "off). Each finding says what the job does if it goes ahead.",
    why="A warning among thousands of start-up lines is read after the run has failed or wasted its GPU hours. "
    "Each check is mirrored from the framework's source at the release its reader names.",
    error="<what the framework says may happen: a 0.0 loss, a CheckpointError, an exploding loss>",
    fix="Change the recipe as the finding says.",
    applicability=Applicability.DISPLAY,
    log=LogSignature(
        patterns=(
            r"sample_packing & torch sdpa with bf16 is unsupported",
            r"qlora \+ zero3 with use_reentrant: false may result in a CheckpointError",
        ),
        from_logs=False,
    ),
    fires=[
        Example(_PACKED_SDPA_BF16.fires, target=_PACKED_SDPA_BF16.target, name="config.yml"),
        Example(_QLORA_ZERO3.fires, target=_QLORA_ZERO3.target, name="config.yml"),
    ],
    silent=[
        Example(_PACKED_SDPA_BF16.accepted, target=_PACKED_SDPA_BF16.target, name="config.yml"),
        Example(_QLORA_ZERO3.accepted, target=_QLORA_ZERO3.target, name="config.yml"),
        Example(_PACKED_SDPA_BF16.fires, target="h100", name="config.yml", note="Hopper: Axolotl does not warn"),
    ],
)
def framework_warns_recipe(
    script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts, launch: LaunchFacts, plan: LaunchPlan
):
    # what the framework logs at info level is advice, reported as such
    for action, verb, severity in (("warns", "warns", None), ("advises", "notes", Severity.INFO)):
        for check, said, evidence, fix in holding(script, setup, machine, stack, launch, plan, action):
            yield Draft(
                f"{check.family} {verb} when it reads this recipe: {said}",
                evidence=evidence,
                error=check.consequence or said,
                fix=fix,
                severity=severity,
            )
