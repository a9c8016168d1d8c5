"""PD601 oom-at-load: The weights alone do not fit in the GPU's memory: out of memory while loading."""

from __future__ import annotations

from collections.abc import Callable

from ...derive import Setup
from ...derive.memory_plan import MemoryPlan, first_failure
from ...model.findings import Draft
from ..registry import Example, rule
from ._memory import LOG, OOM, _evidence, advice, breakdown_text, gib, trained_plan, trainer


@rule(
    "PD601",
    "oom-at-load",
    severity="error",
    phase="load",
    summary="The weights alone do not fit in the GPU's memory: out of memory while loading.",
    what="The checkpoint's weights, in the dtype they are loaded in (4/8-bit where quantized), sharded as the launch "
    "implies, exceed what the GPU has free.",
    why="Every process puts its copy (or shard) of the weights on its GPU before anything else runs.",
    error=OOM,
    fix="Load in bf16/fp16 rather than fp32, quantize (QLoRA), shard with ZeRO-3 / FSDP, or use a larger GPU.",
    log=LOG,
    fires=[Example(trainer("meta-llama/Meta-Llama-3-70B", load="dtype=torch.bfloat16"), target="a100-80gb")],
    silent=[
        Example(
            trainer(
                "meta-llama/Meta-Llama-3-8B",
                "per_device_train_batch_size=1, gradient_checkpointing=True, optim='adamw_bnb_8bit'",
            ),
            target="h100",
        ),
        Example(
            "import torch\nimport torch_xla.core.xla_model as xm\n"
            "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
            "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B', dtype=torch.bfloat16)\n"
            "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n",
            target="t4",
            note="a TPU script (torch_xla): the GPU's memory is not its limit",
        ),
    ],
)
def oom_at_load(setup: Setup, memory: Callable[[], MemoryPlan | str]):
    m = trained_plan(setup, memory())
    if m is None or first_failure(m) != "load":
        return
    yield Draft(
        f"will not fit: out of memory at load. The weights of {m.checkpoint.model_id} take "
        f"{gib(m.breakdown.weights)} per GPU, {m.gpu.name} has {gib(m.budget)}: {breakdown_text(m)}",
        evidence=_evidence(m, setup),
        fix=advice(m),
    )
