"""PD605 memory-headroom-low: The job fits with less to spare than the estimate's measured error: a longer batch or
fragmentation OOMs."""

from __future__ import annotations

from collections.abc import Callable

from ...derive import Setup
from ...derive.memory import HEADROOM_WARNING, MEASURED_UNDERESTIMATE
from ...derive.memory_plan import MemoryPlan, uncertain
from ...model.findings import Draft
from ..registry import Example, rule
from ._memory import LOG, OOM, _evidence, advice, breakdown_text, gib, trained_plan, trainer


@rule(
    "PD605",
    "memory-headroom-low",
    severity="warning",
    phase="first-step",
    summary="The job fits with less to spare than the estimate's measured error: a longer batch or fragmentation OOMs.",
    what="The estimated peak per GPU (weights, gradients, optimizer state, activations, CUDA context, what the "
    f"caching allocator reserves) is within {HEADROOM_WARNING:.1%} of what the GPU has free, or above it while the "
    f"tensors alone fit: the estimate was measured up to {MEASURED_UNDERESTIMATE:.0%} below what a GPU held "
    "(docs/memory.md).",
    why="Sequence lengths vary batch to batch and the caching allocator fragments; a plan with no margin dies at a "
    "random step. Past the GPU's memory with only the allocator's reserve, the allocator flushes its cache and "
    "retries before it fails: such jobs were measured both to train and to run out of memory.",
    error=OOM,
    fix="Leave a margin: a smaller per-device batch with gradient accumulation, or gradient checkpointing.",
    log=LOG,
    fires=[
        Example(
            trainer("Qwen/Qwen2.5-0.5B", "per_device_train_batch_size=8"),
            target="rtx-5090",
            note="bf16 weights, gradients and AdamW: 3.7 GiB; 8 x 1024 tokens of activations, the logits of "
            "a 152k vocabulary and the loss gradient: 24.5 GiB; peak 30.5 of the RTX 5090's 31.8 GiB",
        ),
        Example(
            trainer("meta-llama/Llama-3.2-1B", "per_device_train_batch_size=2"),
            target="t4",
            note="the tensors fit a T4; with what the caching allocator reserves beyond them, the peak does not",
        ),
    ],
    silent=[
        Example(
            trainer("meta-llama/Llama-3.2-1B", "per_device_train_batch_size=1", load="dtype=torch.float32"),
            target="a100-80gb",
        )
    ],
)
def memory_headroom_low(setup: Setup, memory: Callable[[], MemoryPlan | str]):
    m = trained_plan(setup, memory())
    if m is None or m.shape.parallelism.kind == "device-map" or not uncertain(m):
        return
    b = m.breakdown
    if b.peak > m.budget:
        said = (
            f"may run out of memory: the tensors need {gib(b.tensors_peak)} of {gib(m.budget)}, and with what the "
            f"caching allocator reserves beyond them the peak is {gib(b.peak)}; it flushes its cache before it "
            "fails, so the job may train or run out"
        )
    else:
        said = (
            f"fits with {m.headroom:.0%} to spare, less than the estimate's measured error (up to "
            f"{MEASURED_UNDERESTIMATE:.0%} below what a GPU held): peak {gib(b.peak)} of {gib(m.budget)}"
        )
    yield Draft(
        f"{said}: {breakdown_text(m)}",
        evidence=_evidence(m, setup),
        fix=advice(m),
        confidence="likely" if m.shape.assumed else "certain",
    )
