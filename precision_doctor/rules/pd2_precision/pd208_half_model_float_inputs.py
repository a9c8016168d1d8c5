"""PD208 half-model-float-inputs: A model cast to fp16/bf16 is fed float32 tensors with no autocast."""

from __future__ import annotations

from ...derive import Setup, call_evidence, evidence_of
from ...knowledge import dtypes
from ...model.facts import KNOWN, ScriptFacts, TensorValue
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, LogSignature, rule


@rule(
    "PD208",
    "half-model-float-inputs",
    severity="error",
    phase="first-step",
    summary="A model cast to fp16/bf16 is fed float32 tensors with no autocast.",
    what="`model.half()` / `.bfloat16()` / `.to(torch.float16)` in a hand-written loop, called on tensors the script "
    "builds as float32 (`torch.randn`, `.float()`, float `torch.tensor`) with no autocast around it. In a log, "
    "also the reverse (`expected scalar type Float but found Half`): float32 weights given half tensors — a "
    "`.half()` input, one module cast on its own, a half output fed to a float32 module outside autocast.",
    why="Linear and conv layers need input and weight in one dtype; only autocast casts the inputs for you.",
    error="RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half",
    fix="Don't hand-cast the model: keep fp32 weights and use autocast (or Trainer fp16/bf16); if a half model is "
    "intended, cast the inputs to the same dtype (`x.to(model.dtype)`).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    log=LogSignature(
        patterns=(
            r"mat1 and mat2 must have the same dtype",
            r"expected mat1 and mat2 to have the same dtype",
            r"Input type \(.*\) and (weight|bias) type \(.*\) should be the same",
            r"RNN input dtype \(.*\) does not match weight dtype",
            r"expected scalar type (Half|BFloat16) but found Float",
            r"expected scalar type Float but found (Half|BFloat16)",  # the reverse: fp32 weights, half inputs
        ),
        proven=0.6,
        yields_to=("PD301",),
    ),
    related=("PD301", "PD114"),
    fires=[
        Example(
            "import torch\nmodel = torch.nn.Linear(16, 4).cuda().half()\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "x = torch.randn(8, 16, device='cuda')\nloss = model(x).sum()\nloss.backward()\nopt.step()\n"
        ),
    ],
    silent=[
        Example(
            "import torch\nmodel = torch.nn.Linear(16, 4).cuda()\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nscaler = torch.amp.GradScaler('cuda')\n"
            "x = torch.randn(8, 16, device='cuda')\nwith torch.autocast('cuda', dtype=torch.float16):\n"
            "    loss = model(x).sum()\nscaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()\n"
        ),
        Example(
            "import torch\nmodel = torch.nn.Linear(16, 4).cuda().half()\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "x = torch.randn(8, 16, device='cuda').half()\nloss = model(x).sum()\nloss.backward()\nopt.step()\n"
        ),
        Example(
            "import torch\nmodel = torch.nn.Linear(16, 4).cuda().half()\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "x = torch.randn(8, 16, device='cuda')\nwith torch.autocast('cuda', dtype=torch.float16):\n"
            "    loss = model(x).sum()\nloss.backward()\nopt.step()\n"
        ),
    ],
)
def half_model_float_inputs(script: ScriptFacts, setup: Setup):
    if setup.style == "trainer" or setup.autocasts or not dtypes.is_half(setup.weights.value):
        return
    half = "Half" if setup.weights.value == dtypes.FLOAT16 else "BFloat16"
    # a torchvision network meets the input at a convolution (aten Convolution.cpp's parameter check), a
    # transformer at a matmul
    conv = any("torchvision.models" in c.text for c in script.of("cast") if c.target in setup.model_names)
    error = (
        f"RuntimeError: Input type (float) and weight type (c10::{half}) should be the same"
        if conv
        else f"RuntimeError: mat1 and mat2 must have the same dtype, but got Float and {half}"
    )
    for call in script.of("call_var"):
        if call.callee not in setup.model_names:
            continue
        for v in list(call.args) + list(call.kwargs.values()):
            if v.state == KNOWN and v.value == TensorValue(dtypes.FLOAT32):
                yield Draft(
                    f"{call.callee} holds {setup.weights.value} weights but is called on a float32 tensor "
                    f"with no autocast",
                    evidence=setup.weights.evidence
                    + (evidence_of(v, "float32 input", call), call_evidence(call, "forward call")),
                    error=error,
                    fix=Fix(
                        f"cast the input: {v.text}.to("
                        + (f"torch.{setup.weights.value}" if conv else f"{call.callee}.dtype")
                        + "), or keep fp32 weights and use torch.autocast",
                        applicability=Applicability.UNSAFE,
                    ),
                )
                return
