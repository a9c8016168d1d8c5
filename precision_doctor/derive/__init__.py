"""The derivation layer: what the facts mean for training, computed once per run and read by every rule.

`setup` answers which model is trained, in which dtype, with which trainable parameters, under which precision;
`placement` where the model ends up and how Trainer wraps it; `launch` the processes and the rendezvous port;
`live` what the live run's losses and scaler say; `memory_plan` what each GPU holds. Everything here is a pure
function of `Facts`. Imports model/ and knowledge/, never probes/ or the rules.
"""

from __future__ import annotations

from dataclasses import field, replace

from ..model.facts import Facts, ScriptFacts
from ..model.util import record
from .launch import LaunchPlan, device_map_kind, plan_launch, plan_of_script
from .memory_plan import MemoryPlan, plan_memory_for
from .placement import Checkpointing, Placement, derive_placement, trainer_exempts_4bit
from .setup import (
    Fact,
    Setup,
    accelerate_precision,
    call_evidence,
    decide,
    dtype_of_cast,
    evaluate,
    evidence_of,
    load_dtype_value,
    optimizer_steps,
)
from .setup import derive_setup as _derive_core
from .sharding import derive_sharding

__all__ = [
    "Checkpointing",
    "Derived",
    "Fact",
    "LaunchPlan",
    "Placement",
    "Setup",
    "accelerate_precision",
    "call_evidence",
    "decide",
    "derive",
    "derive_memory",
    "derive_setup",
    "device_map_kind",
    "dtype_of_cast",
    "evaluate",
    "evidence_of",
    "load_dtype_value",
    "optimizer_steps",
    "plan_launch",
    "trainer_exempts_4bit",
]


def derive_setup(script: ScriptFacts, facts: Facts) -> Setup:
    core = _derive_core(script, facts)
    stack = script.stack or facts.stack
    return replace(
        core,
        placement=derive_placement(core, script, facts.machine, stack),
        sharding=derive_sharding(core, script, facts.launch, facts.machine, stack),
    )


@record
class Derived:
    """Everything derived from one run's facts: the launch plan and each script's setup (and its own plan where the
    script starts its processes itself: Lightning)."""

    plan: LaunchPlan
    setups: dict[str, Setup]
    plans: dict[str, LaunchPlan] = field(default_factory=dict)

    def plan_for(self, path: str) -> LaunchPlan:
        return self.plans.get(path, self.plan)


def derive_memory(facts: Facts) -> dict[str, tuple[Setup, MemoryPlan | str]]:
    """Each script's setup and memory plan (or why there is none), for `precision-doctor memory`."""
    derived = derive(facts)
    return {
        s.path: (derived.setups[s.path], plan_memory_for(derived.setups[s.path], s, facts, derived.plan_for(s.path)))
        for s in facts.scripts
    }


def derive(facts: Facts) -> Derived:
    plan = plan_launch(facts.launch, facts.machine, facts.stack)
    setups = {s.path: derive_setup(s, facts) for s in facts.scripts}
    scripts = {s.path: s for s in facts.scripts}
    plans = {
        path: own
        for path, setup in setups.items()
        if (own := plan_of_script(plan, setup.accelerator, scripts[path].imports, facts.launch, facts.machine))
        is not plan
    }
    return Derived(plan, setups, plans)
