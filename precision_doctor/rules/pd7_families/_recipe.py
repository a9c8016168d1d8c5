"""What PD701 and PD702 share: the recipe checks of a script's framework that hold, with their evidence."""

from __future__ import annotations

from collections.abc import Iterator

from ...derive import LaunchPlan, Setup, evidence_of
from ...derive.checkpoint import checkpoint_of
from ...derive.launch import distributed, job_env, world_size
from ...derive.setup import stored_quantization_says
from ...knowledge.recipe_checks import RecipeCheck, RecipeView, checks_for
from ...model.facts import LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Evidence, Fix


def holding(
    script: ScriptFacts,
    setup: Setup,
    machine: MachineFacts,
    stack: StackFacts,
    launch: LaunchFacts,
    plan: LaunchPlan,
    action: str,
) -> Iterator[tuple[RecipeCheck, str, tuple[Evidence, ...], Fix]]:
    """Each check of this action that holds on the recipe, with the framework's message for it, the settings it
    read as evidence (and the GPU where the check asks it) and the fix it names, citing the source mirrored. A check
    that asks the GPU is silent while no GPU is known."""
    recipe = script.recipe
    if recipe is None:
        return
    gpu = machine.gpus[0] if machine.gpus else None
    sharding = setup.sharding
    spread = distributed(launch, plan, machine)
    checkpoint = checkpoint_of(setup.model_load, script)
    view = RecipeView(
        recipe,
        gpu,
        stack,
        sharding.kind,
        sharding.stage if sharding.kind == "deepspeed" else None,
        distributed=spread,
        gpu_count=len(machine.gpus) if machine.known else 0,
        model_type=recipe.model_type,
        stored_quantization=checkpoint.quantization if checkpoint is not None else "",
        world_size=world_size(launch, plan, machine),
        env=job_env(launch, machine),
    )
    for check in checks_for(recipe.family):
        if check.action != action or (check.gpu and gpu is None) or not check.test(view):
            continue
        evidence = tuple(
            evidence_of(recipe.settings[key], f"{key}: {recipe.settings[key].value!r}")
            for key in check.keys
            if key in recipe.settings
        )
        if check.reads_checkpoint and checkpoint is not None and checkpoint.quantization:
            evidence += (stored_quantization_says(checkpoint),)
        if check.gpu and gpu is not None:
            evidence += (Evidence(None, gpu.name, f"compute capability {gpu.sm}", "profile"),)
        if check.reads_launch and launch.known:
            how = "one process, no process group" if spread is False else "a distributed launch"
            evidence += (Evidence(None, launch.command, f"{how} ({len(machine.gpus)} GPU(s) visible)", "launcher"),)
        if sharding.kind == "deepspeed" and sharding.stage is not None and "deepspeed" in check.keys:
            evidence += (Evidence(None, "DeepSpeed config", f"ZeRO stage {sharding.stage}", "config-file"),)
        mirrored = f"mirrored from {check.family} {recipe.version} {check.source}"
        yield check, check.message_for(view), evidence, Fix(check.fix, Applicability.DISPLAY, notes=(mirrored,))
