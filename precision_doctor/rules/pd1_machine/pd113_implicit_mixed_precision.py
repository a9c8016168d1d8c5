"""PD113 implicit-mixed-precision: `Accelerator()` without mixed_precision silently takes it from the launch flag,
env or accelerate config."""

from __future__ import annotations

from ...derive import Setup
from ...knowledge import dtypes
from ...model.facts import ABSENT, MachineFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import native_bf16, present, set_kwarg
from ..registry import Example, LogSignature, rule
from ._launch import ACC_GOOD


@rule(
    "PD113",
    "implicit-mixed-precision",
    severity="warning",
    escalates_to="error",
    phase="first-step",
    summary="`Accelerator()` without mixed_precision silently takes it from the launch flag, env or accelerate config.",
    what="`Accelerator()` with no `mixed_precision=` while `accelerate launch --mixed_precision`, "
    "`ACCELERATE_MIXED_PRECISION` or the accelerate config file (`mixed_precision: bf16`) turns it on.",
    why="The script reads as fp32, but Accelerator takes `ACCELERATE_MIXED_PRECISION`, which `accelerate launch` "
    "sets from its flag or the user's config: the precision changes with the machine's config file, not the "
    "code: a run written for fp32 silently trains in bf16.",
    error="no error by itself: training silently runs in another precision; with bf16 on a pre-Ampere GPU or fp16 "
    "over fp16 weights it becomes that rule's error",
    fix='Say it in code: `Accelerator(mixed_precision="bf16")` (or "fp16"/"no"), so the launch config cannot '
    "change it.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: makes the effective value explicit.",
    log=LogSignature(tells=(r"Mismatch dtype between input and weight",), tells_alone=0.4),
    fires=[
        Example(
            ACC_GOOD,
            launcher="accelerate launch --mixed_precision bf16 train.py",
            fixed=(
                "import torch\n"
                "from accelerate import Accelerator\n"
                "accelerator = Accelerator(mixed_precision='bf16')\n"
                "model = torch.nn.Linear(512, 512)\n"
                "optimizer = torch.optim.AdamW(model.parameters())\n"
                "model, optimizer = accelerator.prepare(model, optimizer)\n"
            ),
        ),
        Example(
            ACC_GOOD,
            env={"ACCELERATE_MIXED_PRECISION": "fp16"},
            fixed=(
                "import torch\n"
                "from accelerate import Accelerator\n"
                "accelerator = Accelerator(mixed_precision='fp16')\n"
                "model = torch.nn.Linear(512, 512)\n"
                "optimizer = torch.optim.AdamW(model.parameters())\n"
                "model, optimizer = accelerator.prepare(model, optimizer)\n"
            ),
        ),
    ],
    silent=[
        Example(
            ACC_GOOD.replace("Accelerator()", "Accelerator(mixed_precision='bf16')"),
            launcher="accelerate launch --mixed_precision bf16 train.py",
        ),
        Example(ACC_GOOD, launcher="accelerate launch --mixed_precision no train.py"),
    ],
)
def implicit_mixed_precision(setup: Setup, machine: MachineFacts):
    acc = setup.accelerator
    if acc is None or acc.kwarg("mixed_precision").state != ABSENT or setup.style != "accelerate":
        return
    mode = setup.amp.value
    if mode in (None, "no"):
        return
    source = next((e for e in setup.amp.evidence if e.origin != "code"), None)
    severity = "warning"
    if (mode == "bf16" and native_bf16(machine) is False and machine.gpus) or (
        mode == "fp16" and setup.weights.value == dtypes.FLOAT16
    ):
        severity = "error"
    yield Draft(
        f"Accelerator() has no mixed_precision, so it runs in {mode} from {source.note if source else 'the launch'}",
        evidence=setup.amp.evidence,
        severity=severity,
        confidence="likely" if setup.amp.inferred else "certain",
        fix=Fix(
            f"write it in code: Accelerator(mixed_precision={mode!r}) (or 'no')",
            applicability=Applicability.SAFE,
            edits=present(set_kwarg(acc, "mixed_precision", repr(mode))),
        ),
    )
