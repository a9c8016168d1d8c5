"""The derivation layer: what the facts mean for training, computed once per run and read by every rule.

`setup` answers which model is trained, in which dtype, with which trainable parameters, under which precision;
`placement` where the model ends up and how Trainer wraps it; `launch` the processes and the rendezvous port;
`live` what the live run's losses and scaler say. Everything here is a pure function of `Facts`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..facts import Facts, ScriptFacts
from .launch import LaunchPlan, device_map_kind, plan_launch
from .placement import Checkpointing, Placement, derive_placement, trainer_exempts_4bit
from .setup import (Fact, Setup, accelerate_precision, call_evidence, decide, dtype_of_cast, evaluate, evidence_of,
                    load_dtype_value)
from .setup import derive_setup as _derive_core

__all__ = ["Checkpointing", "Derived", "Fact", "LaunchPlan", "Placement", "Setup", "accelerate_precision",
           "call_evidence", "decide", "derive", "derive_setup", "device_map_kind", "dtype_of_cast", "evaluate",
           "evidence_of", "load_dtype_value", "plan_launch", "trainer_exempts_4bit"]


def derive_setup(script: ScriptFacts, facts: Facts) -> Setup:
    core = _derive_core(script, facts)
    return replace(core, placement=derive_placement(core, script, facts.machine, script.stack or facts.stack))


@dataclass(frozen=True)
class Derived:
    """Everything derived from one run's facts: the launch plan and each script's setup."""

    plan: LaunchPlan
    setups: dict[str, Setup]


def derive(facts: Facts) -> Derived:
    return Derived(plan_launch(facts.launch, facts.machine),
                   {s.path: derive_setup(s, facts) for s in facts.scripts})
