"""PD213 deprecated-cuda-amp-api: torch.cuda.amp.autocast / GradScaler are deprecated (torch >= 2.4)."""

from __future__ import annotations

from ...derive import call_evidence
from ...knowledge.versions import at_least
from ...model.facts import ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Edit, Fix
from ..registry import Example, rule
from ._amp_loop import LOOP_HEAD


@rule(
    "PD213",
    "deprecated-cuda-amp-api",
    severity="warning",
    phase="config",
    summary="torch.cuda.amp.autocast / GradScaler are deprecated (torch >= 2.4).",
    what="`torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`, `torch.cpu.amp.*`, also imported by name.",
    why="torch 2.4 deprecated the device-specific AMP namespaces in favour of `torch.amp` with a device argument; "
    "they warn on every call and will be removed.",
    error="FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
    "`torch.amp.GradScaler('cuda', args...)` instead.",
    fix='`torch.amp.autocast("cuda", ...)`, `torch.amp.GradScaler("cuda", ...)`.',
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same behaviour under the new name.",
    fires=[
        Example(
            LOOP_HEAD + "scaler = torch.cuda.amp.GradScaler()\n",
            fixed=LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\n",
        ),
        Example(
            "import torch\nfrom torch.cuda.amp import autocast\nwith autocast(dtype=torch.bfloat16):\n    pass\n",
            fixed=(
                "import torch\n"
                "from torch.cuda.amp import autocast\n"
                "with torch.amp.autocast('cuda', dtype=torch.bfloat16):\n"
                "    pass\n"
            ),
        ),
    ],
    silent=[
        Example(LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\n"),
        Example(LOOP_HEAD + "scaler = torch.cuda.amp.GradScaler()\n", versions={"torch": "2.1.2"}),
    ],
)
def deprecated_cuda_amp_api(script: ScriptFacts, stack: StackFacts):
    if not at_least(stack, "torch", "2.4"):
        return
    for c in script.of("autocast", "grad_scaler"):
        for old in ("torch.cuda.amp.", "torch.cpu.amp."):
            if c.callee.startswith(old):
                device = "cuda" if "cuda" in old else "cpu"
                new = "torch.amp." + c.callee[len(old) :]
                yield Draft(
                    f"{c.callee} is deprecated since torch 2.4; use {new}({device!r}, ...)",
                    evidence=(call_evidence(c, f"deprecated {c.callee}"),),
                    error=f"FutureWarning: `{c.callee}(args...)` is deprecated. Please use "
                    f"`{new}('{device}', args...)` instead.",
                    fix=Fix(
                        f"{new}({device!r}, ...)",
                        applicability=Applicability.SAFE,
                        edits=(
                            Edit(
                                "replace_callee",
                                c.location.path,
                                c.location.line,
                                call=c.callee.rsplit(".", 1)[-1],
                                old=c.callee,
                                new=new,
                                name=repr(device),
                            ),
                        ),
                    ),
                )
