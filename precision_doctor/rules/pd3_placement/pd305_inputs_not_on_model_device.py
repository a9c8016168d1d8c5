"""PD305 inputs-not-on-model-device: A hand-written loop moves the model to the GPU but feeds it batches left on the
CPU."""

from __future__ import annotations

from ...derive import Setup, call_evidence
from ...model.facts import KNOWN, Call, ScriptFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, LogSignature, rule


def _moved_to_gpu(script: ScriptFacts, setup: Setup) -> bool:
    for c in script.of("cast"):
        if c.receiver not in setup.model_names and c.callee != "<expr>.cuda" and c.target not in setup.model_names:
            continue
        method = c.callee.rsplit(".", 1)[-1]
        if method == "cuda" or (
            method == "to" and any(v.state == KNOWN and str(v.value).startswith("cuda") for v in c.args)
        ):
            return True
    return False


def _unmoved_loop_inputs(script: ScriptFacts) -> set[tuple[str, str]]:
    """(scope, name) of variables bound by a `for ... in <DataLoader>` header."""
    out = set()
    for c in script.of("loop_var"):
        if c.receiver != "dataloader":
            continue
        for name in c.target.split(","):
            out.add((c.scope, name))
    return out


def _moved_before(script: ScriptFacts, call: Call, name: str) -> bool:
    for c in script.of("cast"):
        if (
            c.scope == call.scope
            and c.location.line <= call.location.line
            and (c.receiver == name or name in c.target.split(","))
        ):
            return True
    return any(
        c.scope == call.scope and c.location.line < call.location.line and name in c.target.split(",")
        for c in script.calls
        if c.kind in ("cast", "flow")
    )


@rule(
    "PD305",
    "inputs-not-on-model-device",
    severity="error",
    phase="first-step",
    summary="A hand-written loop moves the model to the GPU but feeds it batches left on the CPU.",
    what='The model is moved with `.cuda()` / `.to("cuda")`, then called on the batches of a DataLoader loop that '
    "never moves them (`batch.to(device)`), with no `accelerator.prepare(loader)`.",
    why="Every tensor of an op must be on one device; DataLoader batches are created on the CPU.",
    error="RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
    "cpu!",
    fix="Move every batch tensor to `model.device` (or `accelerator.device`), or let `accelerator.prepare(loader)` "
    "do it.",
    # torch words it by the path that checks: "but found at least two devices" (TensorIterator), "but got mat1 is on
    # cpu, different from other tensors on cuda:0" (a kernel's device check, what a CUDA Linear raises on torch 2.11)
    log=LogSignature(patterns=(r"Expected all tensors to be on the same device",)),
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    fires=[
        Example(
            "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(dataset, batch_size=8)\n"
            "model = MyNet().cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
            "for x, y in loader:\n    loss = torch.nn.functional.mse_loss(model(x), y)\n"
            "    loss.backward()\n    opt.step()\n"
        )
    ],
    silent=[
        Example(
            "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(dataset, batch_size=8)\n"
            "model = MyNet().cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
            "for x, y in loader:\n    x, y = x.cuda(), y.cuda()\n"
            "    loss = torch.nn.functional.mse_loss(model(x), y)\n    loss.backward()\n    opt.step()\n"
        ),
        Example(
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "model = MyNet().cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
            "for batch in DataLoader(dataset):\n    batch = {k: v.to('cuda') for k, v in batch.items()}\n"
            "    model(**batch).loss.backward()\n    opt.step()\n"
        ),
    ],
)
def inputs_not_on_model_device(script: ScriptFacts, setup: Setup):
    if setup.style not in ("loop",) or not _moved_to_gpu(script, setup):
        return
    loop_vars = _unmoved_loop_inputs(script)
    for call in script.of("call_var"):
        if call.callee not in setup.model_names or not call.in_loop:
            continue
        names = [v.text.lstrip("*") for v in list(call.args) + list(call.kwargs.values())]
        stale = [n for n in names if (call.scope, n) in loop_vars and not _moved_before(script, call, n)]
        if stale:
            yield Draft(
                f"{call.callee} is on the GPU but {', '.join(stale)} {'comes' if len(stale) == 1 else 'come'} "
                f"from the data loader on the CPU",
                evidence=(call_evidence(call, f"called on {', '.join(stale)}"),),
                fix=Fix(f"move them first: {stale[0]} = {stale[0]}.to(device)", applicability=Applicability.UNSAFE),
            )
            return
