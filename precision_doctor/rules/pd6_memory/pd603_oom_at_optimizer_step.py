"""PD603 oom-at-optimizer-step: Gradients and optimizer state do not fit: out of memory at the first optimizer step."""

from __future__ import annotations

from collections.abc import Callable

from ...derive import Setup
from ...derive.memory_plan import MemoryPlan, first_failure
from ...model.findings import Draft
from ..registry import Example, rule
from ._memory import HEAD, LOG, OOM, _evidence, advice, breakdown_text, gib, hedged, trained_plan, trainer

_SILENT_7B_H100_LORA = (
    "import torch\nfrom peft import LoraConfig, get_peft_model\n"
    + HEAD.split("\n", 1)[1]
    + "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf', "
    "dtype=torch.bfloat16)\nmodel = get_peft_model(model, LoraConfig(r=16))\n"
    "args = TrainingArguments('out', bf16=True, per_device_train_batch_size=2, "
    "gradient_checkpointing=True)\nTrainer(model=model, args=args, train_dataset=ds).train()\n"
)


@rule(
    "PD603",
    "oom-at-optimizer-step",
    severity="error",
    phase="first-step",
    summary="Gradients and optimizer state do not fit: out of memory at the first optimizer step.",
    what="Weights and activations fit, but the trainable parameters' gradients and the optimizer's state (AdamW: two "
    "fp32 moments, 8 bytes per parameter; fp32 master weights under DeepSpeed mixed precision) do not.",
    why="AdamW allocates its state at the first step, while the gradients are still held.",
    error=OOM,
    fix="Train LoRA adapters, use an 8-bit optimizer, or shard the optimizer state with ZeRO / FSDP.",
    log=LOG,
    fires=[
        Example(
            trainer(
                "meta-llama/Llama-2-7b-hf",
                "per_device_train_batch_size=1, gradient_checkpointing=True",
                load="dtype=torch.float32",
            ),
            target="a100-80gb",
            note="7B full fine-tune in fp32 weights with AdamW: 16 bytes per parameter",
        )
    ],
    silent=[Example(_SILENT_7B_H100_LORA, target="a100-80gb")],
)
def oom_at_optimizer_step(setup: Setup, memory: Callable[[], MemoryPlan | str]):
    m = trained_plan(setup, memory())
    if m is None or first_failure(m) not in ("step", "second step"):
        return
    b = m.breakdown
    if b.at_step > m.budget:
        when = (
            f"at the first optimizer step. Gradients {gib(b.gradients)} and optimizer state "
            f"{gib(b.optimizer + b.master)} ({m.shape.optimizer}) on top of the weights"
        )
    else:  # the step fits; the next forward and backward run with the state it created
        when = (
            f"in the second step: the optimizer state the first step creates ({gib(b.optimizer + b.master)}, "
            f"{m.shape.optimizer}) stays while the next batch's activations and backward are added"
        )
    yield Draft(
        f"will not fit: out of memory {when}: {breakdown_text(m)}",
        evidence=_evidence(m, setup),
        fix=advice(m),
        **hedged(m, b.at_step <= m.budget),
    )
