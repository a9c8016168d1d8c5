"""PD206 grad-scaler-with-bf16-autocast: GradScaler next to bf16 autocast: loss scaling bf16 does not need, and a
hard error on bf16 weights."""

from __future__ import annotations

from ...derive import Setup, call_evidence, decide, evidence_of
from ...knowledge import dtypes
from ...model.facts import ABSENT, KNOWN, Call, MachineFacts, StackFacts
from ...model.findings import Applicability, Draft, Edit, Fix
from ..registry import Example, rule
from ._amp_loop import LOOP_HEAD


def _enabled_scalers(setup: Setup, machine: MachineFacts, stack: StackFacts) -> list[Call]:
    """GradScalers that are always on: `enabled=False` is off; an `enabled=` expression, or creating it under an
    `if`, is the script's own switch."""
    out = []
    for s in setup.scalers:
        if s.in_branch:
            continue
        v = decide(s.kwarg("enabled"), machine, stack)
        if v.state == ABSENT or v.is_(True):
            out.append(s)
    return out


@rule(
    "PD206",
    "grad-scaler-with-bf16-autocast",
    severity="warning",
    phase="first-step",
    summary="GradScaler next to bf16 autocast: loss scaling bf16 does not need, and a hard error on bf16 weights.",
    what="A GradScaler that is always on, in a loop whose autocast runs in bfloat16.",
    why="bf16 has almost fp32's dynamic range, so scaling only adds work and occasionally skips steps; with bf16 "
    "parameters it becomes PD202's hard error.",
    error="no exception on fp32 weights: extra scale/unscale work and skipped steps",
    fix='Drop the scaler for bf16, or make it conditional: `GradScaler("cuda", enabled=(dtype == torch.float16))`.',
    applicability=Applicability.SAFE,
    fix_safety="Safe: bf16 autocast needs no loss scaling.",
    fires=[
        Example(
            LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
            "    with torch.autocast('cuda', dtype=torch.bfloat16):\n        loss = model(x).sum()\n"
            "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n",
            fixed=(
                "import torch\n"
                "model = torch.nn.Linear(16, 4).cuda()\n"
                "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
                "scaler = torch.amp.GradScaler('cuda', enabled=(torch.bfloat16 == torch.float16))\n"
                "for x in loader:\n"
                "    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
                "        loss = model(x).sum()\n"
                "    scaler.scale(loss).backward()\n"
                "    scaler.step(opt)\n"
                "    scaler.update()\n"
            ),
        ),
    ],
    silent=[
        Example(
            LOOP_HEAD + "dtype = torch.bfloat16\n"
            "scaler = torch.amp.GradScaler('cuda', enabled=(dtype == torch.float16))\nfor x in loader:\n"
            "    with torch.autocast('cuda', dtype=dtype):\n        loss = model(x).sum()\n"
            "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"
        ),
        Example(
            LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
            "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"
        ),
    ],
)
def grad_scaler_with_bf16_autocast(setup: Setup, machine: MachineFacts, stack: StackFacts):
    scalers = _enabled_scalers(setup, machine, stack)
    if not scalers:
        return
    for a in setup.autocasts:
        v = decide(a.kwarg("dtype"), machine, stack)
        together = [
            s
            for s in scalers
            if s.location.path == a.location.path and (s.scope == a.scope or "<module>" in (s.scope, a.scope))
        ]  # one training loop, not a library
        if together and v.state == KNOWN and dtypes.from_string(v.value) == dtypes.BFLOAT16:
            scalers = together
            yield Draft(
                "a GradScaler scales the loss of a bf16 autocast region, which needs no loss scaling",
                evidence=(
                    call_evidence(scalers[0], "GradScaler always enabled"),
                    evidence_of(v, "autocast dtype bfloat16", a),
                ),
                fix=Fix(
                    f"make the scaler conditional: enabled=({a.kwarg('dtype').text} == torch.float16)",
                    applicability=Applicability.SAFE,
                    edits=(
                        Edit(
                            "set_kwarg",
                            scalers[0].location.path,
                            scalers[0].location.line,
                            call="GradScaler",
                            name="enabled",
                            new=f"({a.kwarg('dtype').text} == torch.float16)",
                        ),
                    ),
                ),
            )
            return
