"""PD105 half-precision-amp-on-cpu: fp16 mixed precision on a machine with no CUDA GPU: no scaler, no autocast,
silently fp32."""

from __future__ import annotations

from ...derive import Setup, call_evidence
from ...knowledge.versions import at_least
from ...model.facts import KNOWN, MachineFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import (
    present,
    set_kwarg,
)
from ..registry import Example, LogSignature, rule
from ._hardware import _trainer


@rule(
    "PD105",
    "half-precision-amp-on-cpu",
    severity="warning",
    escalates_to="error",
    phase="first-step",
    summary="fp16 mixed precision on a machine with no CUDA GPU: no scaler, no autocast, silently fp32.",
    what='`fp16=True`, `mixed_precision="fp16"` or `torch.autocast("cuda")` when the job runs on a machine '
    "with no visible CUDA GPU (a CPU node, a CI runner, an empty CUDA_VISIBLE_DEVICES).",
    why="On torch >= 2.3 / transformers >= 4.41 accelerate creates no GradScaler and no autocast for fp16 on CPU, and "
    "CUDA autocast disables itself: training runs in fp32 while the logs say fp16. Older stacks refused to start.",
    error="UserWarning: User provided device_type of 'cuda', but CUDA is not available. Disabling",
    fix='On CPU use bf16 autocast (`torch.autocast("cpu", dtype=torch.bfloat16)`, Trainer `bf16=True, '
    "use_cpu=True`) or fp32.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: changes the training precision.",
    needs=("machine",),
    log=LogSignature(
        patterns=(r"can only be used on CUDA", r"User provided device_type of 'cuda', but CUDA is not available")
    ),
    fires=[
        Example(
            _trainer(", dtype=torch.float32", ", fp16=True"),
            target="cpu",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B',"
                " dtype=torch.float32)\n"
                "Trainer(model=model, args=TrainingArguments('out', fp16=False)).train()\n"
            ),
        )
    ],
    silent=[
        Example(_trainer(", dtype=torch.float32", ", fp16=True"), target="a100"),
        Example(_trainer(", dtype=torch.float32", ", bf16=True, use_cpu=True"), target="cpu"),
    ],
)
def half_precision_amp_on_cpu(setup: Setup, machine: MachineFacts, stack: StackFacts):
    if machine.gpus or not setup.trains:
        return
    old_stack = not at_least(stack, "transformers", "4.41")
    if setup.amp.value == "fp16" and setup.amp_from_launch:  # TrainingArguments never sees it: nothing refuses
        yield Draft(
            "fp16 mixed precision from the launch on a machine with no CUDA GPU: accelerate creates no "
            "GradScaler and no autocast, so training silently runs in fp32",
            evidence=setup.amp.evidence,
            error="no error: the run is fp32 while launched as fp16",
            fix=Fix(
                "drop --mixed_precision fp16 from the launch (or mixed_precision: fp16 from the accelerate "
                "config); on CPU use bf16=True with use_cpu=True",
                applicability=Applicability.UNSAFE,
            ),
        )
    elif setup.amp.value == "fp16":
        yield Draft(
            "fp16 mixed precision on a machine with no CUDA GPU: no GradScaler and no autocast are created, "
            "so training silently runs in fp32",
            evidence=setup.amp.evidence,
            severity="" if not old_stack else "",
            error=(
                "ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half "
                "precision evaluation (`--fp16_full_eval`) can only be used on CUDA devices."
            )
            if old_stack
            else "no error: the run is fp32 while configured as fp16 (transformers < 4.41 refused to start)",
            fix=Fix(
                "on CPU use bf16=True with use_cpu=True, or drop fp16",
                applicability=Applicability.UNSAFE,
                edits=present(set_kwarg(setup.training_args, "fp16", "False"))
                if setup.training_args is not None
                else (),
            ),
        )
    for a in setup.autocasts:
        device = a.args[0] if a.args else a.kwarg("device_type")
        if a.callee.startswith("torch.cuda.amp") or (device.state == KNOWN and device.value == "cuda"):
            yield Draft(
                "CUDA autocast on a machine with no CUDA GPU disables itself: the region runs in fp32",
                evidence=(call_evidence(a, "autocast('cuda')"),),
                fix=Fix("use torch.autocast('cpu', dtype=torch.bfloat16) on CPU", applicability=Applicability.UNSAFE),
            )
