"""PD205 autocast-default-fp16-no-scaler: CUDA autocast without dtype= runs in fp16, and no GradScaler protects it."""

from __future__ import annotations

from ...derive import Setup, call_evidence, decide
from ...model.facts import ABSENT, KNOWN, Call, MachineFacts, StackFacts
from ...model.findings import Applicability, Draft, Edit, Fix
from ..registry import Example, rule
from ._amp_loop import LOOP_HEAD


def _autocast_device(c: Call) -> str | None:
    if c.callee.startswith("torch.cuda.amp"):
        return "cuda"
    if c.callee.startswith("torch.cpu.amp"):
        return "cpu"
    v = c.args[0] if c.args else c.kwarg("device_type")
    return v.value if v.state == KNOWN and isinstance(v.value, str) else None


@rule(
    "PD205",
    "autocast-default-fp16-no-scaler",
    severity="warning",
    phase="later-steps",
    summary="CUDA autocast without dtype= runs in fp16, and no GradScaler protects it.",
    what='`torch.autocast("cuda")`, `torch.amp.autocast(device_type="cuda")` or `torch.cuda.amp.autocast()` '
    "with no `dtype=`, in a script that creates no GradScaler.",
    why="CUDA autocast defaults to float16; fp16 without loss scaling underflows (or overflows to NaN). A "
    "`--dtype bfloat16` option the script never passes to autocast has no effect.",
    error="no exception: loss plateaus early (underflowed gradients) or turns NaN",
    fix='Pass `dtype=torch.bfloat16` on Ampere or newer, or keep fp16 and add `torch.amp.GradScaler("cuda")`.',
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: bf16 needs an Ampere or newer GPU.",
    fires=[
        Example(
            LOOP_HEAD + "for x in loader:\n    with torch.autocast('cuda'):\n        loss = model(x).sum()\n"
            "    loss.backward()\n    opt.step()\n",
            fixed=(
                "import torch\n"
                "model = torch.nn.Linear(16, 4).cuda()\n"
                "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
                "for x in loader:\n"
                "    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
                "        loss = model(x).sum()\n"
                "    loss.backward()\n"
                "    opt.step()\n"
            ),
        ),
        Example(
            LOOP_HEAD + "for x in loader:\n    with torch.cuda.amp.autocast():\n        loss = model(x).sum()\n"
            "    loss.backward()\n    opt.step()\n",
            fixed=(
                "import torch\n"
                "model = torch.nn.Linear(16, 4).cuda()\n"
                "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
                "for x in loader:\n"
                "    with torch.cuda.amp.autocast(dtype=torch.bfloat16):\n"
                "        loss = model(x).sum()\n"
                "    loss.backward()\n"
                "    opt.step()\n"
            ),
        ),
    ],
    silent=[
        Example(
            LOOP_HEAD + "for x in loader:\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
            "        loss = model(x).sum()\n    loss.backward()\n    opt.step()\n"
        ),
        Example(
            LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
            "    with torch.autocast('cuda'):\n        loss = model(x).sum()\n"
            "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"
        ),
        Example(
            LOOP_HEAD + "for x in loader:\n    with torch.autocast('cpu'):\n        loss = model(x).sum()\n"
            "    loss.backward()\n    opt.step()\n"
        ),
    ],
)
def autocast_default_fp16_no_scaler(setup: Setup, machine: MachineFacts, stack: StackFacts):
    if setup.style in ("trainer", "accelerate") or setup.scalers:  # any scaler: the script handles scaling
        return
    for a in setup.autocasts:
        if _autocast_device(a) != "cuda" or a.kwarg("dtype").state != ABSENT:
            continue
        if decide(a.kwarg("enabled"), machine, stack).is_(False):
            continue
        new = a.callee.replace("torch.cuda.amp.autocast", "torch.amp.autocast")
        yield Draft(
            "CUDA autocast without dtype= computes in float16, and no GradScaler scales the loss",
            evidence=(call_evidence(a, "autocast dtype defaults to float16 on CUDA"),),
            fix=Fix(
                "pass dtype=torch.bfloat16 (Ampere or newer), or add torch.amp.GradScaler('cuda')",
                applicability=Applicability.UNSAFE,
                edits=(
                    Edit(
                        "set_kwarg",
                        a.location.path,
                        a.location.line,
                        call=new.rsplit(".", 1)[-1],
                        name="dtype",
                        new="torch.bfloat16",
                    ),
                ),
            ),
        )
