"""PD503 deepspeed-fp16-loss-scale-collapse: DeepSpeed fp16 on a model that overflows fp16: the loss scale collapses
to its minimum."""

from __future__ import annotations

from ...derive import Setup
from ...derive.sharding import precision_enabled
from ...knowledge.families import overflows_fp16
from ...model.facts import LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, LogSignature, rule
from ._distributed import _script, deepspeed_config, effective_precision


@rule(
    "PD503",
    "deepspeed-fp16-loss-scale-collapse",
    severity="warning",
    phase="later-steps",
    summary="DeepSpeed fp16 on a model that overflows fp16: the loss scale collapses to its minimum.",
    what='DeepSpeed fp16 (`"fp16": {"enabled": true}` or `"auto"` with fp16=True) on a model family '
    "pre-trained in bf16 (T5, Gemma, DeepSeek-V2), or with a static `loss_scale`.",
    why="Every step overflows, DeepSpeed halves the scale and skips the step until it reaches min_loss_scale and "
    "aborts.",
    error="Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
    fix='Use bf16 on Ampere or newer (`"bf16": {"enabled": "auto"}` + `bf16=True`); otherwise lower the learning '
    "rate or raise initial_scale_power / min_loss_scale.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: changes the precision.",
    log=LogSignature(
        patterns=(r"Current loss scale already at minimum",),
        tells=(r"Gradient overflow\. +Skipping step",),
        proven=0.9,
        tells_alone=0.6,
        tells_needed=5,
    ),
    related=("PD210",),
    fires=[
        Example(
            _script(
                "{'fp16': {'enabled': 'auto'}, 'zero_optimization': {'stage': 2}}",
                ", fp16=True",
                model="google/gemma-2-9b",
            )
        )
    ],
    silent=[
        Example(
            _script(
                "{'bf16': {'enabled': 'auto'}, 'zero_optimization': {'stage': 2}}",
                ", bf16=True",
                model="google/gemma-2-9b",
            )
        )
    ],
)
def deepspeed_fp16_loss_scale_collapse(
    script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts, launch: LaunchFacts
):
    config, where, _ = deepspeed_config(setup)
    if config is None or not precision_enabled(config, "fp16", effective_precision(setup)):
        return
    static = isinstance(config.get("fp16"), dict) and config["fp16"].get("loss_scale", 0) not in (0, "auto")
    if overflows_fp16(setup.family) or static:
        why = (
            f"{setup.family} was pre-trained in bf16"
            if not static
            else f"a static loss_scale={config['fp16']['loss_scale']}"
        )
        yield Draft(
            f"DeepSpeed fp16 with {why}: overflowing steps drive the loss scale to its minimum",
            evidence=where,
            fix=Fix('use "bf16": {"enabled": "auto"} with bf16=True', applicability=Applicability.UNSAFE),
        )
