"""PD602 oom-at-first-forward: Weights and the first batch's activations do not fit: out of memory in the first
forward or backward."""

from __future__ import annotations

from collections.abc import Callable

from ...derive import Setup
from ...derive.memory_plan import MemoryPlan, first_failure
from ...model.findings import Draft
from ..registry import Example, rule
from ._memory import LOG, OOM, _evidence, advice, breakdown_text, gib, hedged, trained_plan, trainer


@rule(
    "PD602",
    "oom-at-first-forward",
    severity="error",
    phase="first-step",
    summary="Weights and the first batch's activations do not fit: out of memory in the first forward or backward.",
    what="The weights fit, but the activations saved for backward (batch x sequence x hidden x layers, times a "
    "per-architecture factor; gradient checkpointing keeps only each layer's input) do not, or do not with "
    "what backward adds as it starts (the loss's fp32 gradient, or a checkpointed layer recomputed).",
    why="The forward keeps every layer's intermediate tensors until backward frees them.",
    error=OOM,
    fix="Gradient checkpointing, a smaller per_device_train_batch_size with gradient accumulation, or shorter "
    "sequences.",
    log=LOG,
    fires=[
        Example(
            trainer(
                "meta-llama/Meta-Llama-3-8B",
                "per_device_train_batch_size=32, optim='adamw_bnb_8bit'",
                load="dtype=torch.bfloat16",
            ),
            target="h100",
            note="bf16 weights fit; 32 x 1024 tokens of activations do not",
        )
    ],
    silent=[
        Example(
            trainer(
                "meta-llama/Meta-Llama-3-8B",
                "per_device_train_batch_size=1, optim='adamw_bnb_8bit', gradient_checkpointing=True",
            ),
            target="h100",
        )
    ],
)
def oom_at_first_forward(setup: Setup, memory: Callable[[], MemoryPlan | str]):
    m = trained_plan(setup, memory())
    where = first_failure(m) if m is not None else ""
    if where not in ("forward", "backward"):
        return
    s = m.shape
    when = (
        "at the first forward"
        if where == "forward"
        else f"as the first backward starts (it adds {gib(m.breakdown.backward)})"
    )
    yield Draft(
        f"will not fit: out of memory {when}. {s.batch} x {s.sequence} tokens of activations "
        f"take {gib(m.breakdown.activations)}: {breakdown_text(m)}",
        evidence=_evidence(m, setup),
        fix=advice(m),
        **hedged(m, True),
    )
