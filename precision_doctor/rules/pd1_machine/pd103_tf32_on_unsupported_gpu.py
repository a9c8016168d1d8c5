"""PD103 tf32-on-unsupported-gpu: `tf32=True` on a GPU older than Ampere, or without a GPU: TrainingArguments refuses
it."""

from __future__ import annotations

from ...derive import decide, evidence_of
from ...model.facts import MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import (
    gpu_phrase,
    present,
    set_kwarg,
)
from ..registry import Example, rule
from ._hardware import _trainer


@rule(
    "PD103",
    "tf32-on-unsupported-gpu",
    severity="error",
    phase="config",
    summary="`tf32=True` on a GPU older than Ampere, or without a GPU: TrainingArguments refuses it.",
    what="`TrainingArguments(tf32=True)` / `--tf32 True` on compute capability < 8.0 or a CPU-only machine.",
    why="TF32 is an Ampere tensor-core format; TrainingArguments validates it in `__post_init__`.",
    error="ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7",
    fix="`tf32=False` (or leave it unset) on pre-Ampere GPUs and CPUs.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: TF32 does not exist there.",
    needs=("machine",),
    fires=[
        Example(
            _trainer(", dtype=torch.float32", ", fp16=True, tf32=True"),
            target="t4",
            fixed=_trainer(", dtype=torch.float32", ", fp16=True, tf32=False"),
        )
    ],
    silent=[Example(_trainer(", dtype=torch.float32", ", bf16=True, tf32=True"), target="a100")],
)
def tf32_on_unsupported_gpu(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    if machine.gpus and machine.gpus[0].tf32:
        return
    for args in script.of("training_args"):
        v = decide(args.kwarg("tf32"), machine, stack)
        if v.is_(True):
            where = gpu_phrase(machine) or "a machine with no GPU"
            yield Draft(
                f"tf32=True on {where}: TF32 needs an Ampere or newer GPU",
                evidence=(evidence_of(v, "tf32=True", args),),
                fix=Fix(
                    "drop tf32=True", applicability=Applicability.SAFE, edits=present(set_kwarg(args, "tf32", "False"))
                ),
            )
