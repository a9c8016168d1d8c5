"""The memory estimator next to figures published for well-known configurations.

    python benchmarks/memory_published.py

Each row: the configuration, the estimate per GPU (model states, then the peak with activations), and the
published figure with its source. Published figures are what their authors state; they differ in what they count
(model states only, or a measured peak), which the 'counts' column says.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from precision_doctor.derive.memory import GIB, Parallelism, TrainingShape, estimate  # noqa: E402
from precision_doctor.probes.checkpoint import checkpoint_facts  # noqa: E402

TRANSFORMERS_ANATOMY = "https://huggingface.co/docs/transformers/model_memory_anatomy"
QLORA_PAPER = "https://arxiv.org/abs/2305.14314 (QLoRA, Dettmers et al. 2023)"
DEEPSPEED_MEMORY = "https://deepspeed.readthedocs.io/en/latest/memory.html (estimate_zero3_model_states_mem_needs)"


@dataclass(frozen=True)
class Published:
    label: str
    model: str
    shape: TrainingShape
    figure_gb: float | None  # None: the source states a bound, given in `claim`
    claim: str
    counts: str
    source: str


ROWS = [
    Published(
        "7B full fine-tune, AdamW, mixed precision (fp32 weights)",
        "meta-llama/Llama-2-7b-hf",
        TrainingShape(weight_dtype="float32", compute_dtype="bfloat16", batch=1, sequence=512, checkpointing=True),
        7e9 * 18 / 1e9,
        "18 bytes per parameter (weights 4+2, gradients 4, AdamW 8); the estimate counts the half copy "
        "(autocast's cache) with the activations",
        "model states",
        TRANSFORMERS_ANATOMY,
    ),
    Published(
        "QLoRA 7B (4-bit NF4, LoRA r=64, paged 8-bit AdamW)",
        "meta-llama/Llama-2-7b-hf",
        TrainingShape(
            weight_dtype="bfloat16",
            compute_dtype="bfloat16",
            quantized="4bit",
            lora_rank=64,
            lora_modules="all-linear",
            optimizer="paged-adamw-8bit",
            batch=1,
            sequence=512,
            checkpointing=True,
        ),
        None,
        "fits a single consumer GPU",
        "peak",
        QLORA_PAPER,
    ),
    Published(
        "QLoRA 13B",
        "meta-llama/Llama-2-13b-hf",
        TrainingShape(
            weight_dtype="bfloat16",
            compute_dtype="bfloat16",
            quantized="4bit",
            lora_rank=64,
            lora_modules="all-linear",
            optimizer="paged-adamw-8bit",
            batch=1,
            sequence=512,
            checkpointing=True,
        ),
        None,
        "fits a single 24 GB GPU (33B does)",
        "peak",
        QLORA_PAPER,
    ),
    Published(
        "QLoRA 70B",
        "meta-llama/Llama-2-70b-hf",
        TrainingShape(
            weight_dtype="bfloat16",
            compute_dtype="bfloat16",
            quantized="4bit",
            lora_rank=64,
            lora_modules="all-linear",
            optimizer="paged-adamw-8bit",
            batch=1,
            sequence=512,
            checkpointing=True,
        ),
        48.0,
        "65B fine-tuned on a single 48 GB GPU",
        "peak",
        QLORA_PAPER,
    ),
    Published(
        "7B on 8xA100, ZeRO-3, bf16, no offload",
        "meta-llama/Llama-2-7b-hf",
        TrainingShape(
            weight_dtype="bfloat16",
            compute_dtype="bfloat16",
            master_weights=True,
            batch=1,
            sequence=512,
            checkpointing=True,
            parallelism=Parallelism(8, "zero3"),
        ),
        (18 * 6738415616 / 8 + 4 * 32000 * 4096) / 1e9,
        "18 bytes / parameter / GPU + 4 x largest layer",
        "model states",
        DEEPSPEED_MEMORY,
    ),
]


def main() -> int:
    print(f"{'configuration':58} {'states GB':>9} {'peak GB':>8} {'published':>10}  counts / claim / source")
    for row in ROWS:
        c = checkpoint_facts(row.model, (), {"HF_HUB_CACHE": "/nonexistent"})
        b = estimate(c, row.shape)
        states = (b.weights + b.gradients + b.optimizer + b.master) / 1e9
        figure = f"{row.figure_gb:.1f}" if row.figure_gb is not None else "-"
        print(f"{row.label:58} {states:9.1f} {b.peak / 1e9:8.1f} {figure:>10}  {row.counts}: {row.claim}; {row.source}")
    print(f"\n(1 GB = 1e9 bytes; peaks include the CUDA context and the allocator reserve; 1 GiB = {GIB / 1e9:.3f} GB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
