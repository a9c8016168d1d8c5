"""What the hardware rules share: what the GPU can do: bf16, tf32, fp8, FlashAttention, fp16 AMP without a GPU
(PD101-PD107)."""

from __future__ import annotations

from ...model.facts import MachineFacts

HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


def _trainer(load: str, args: str) -> str:
    return (
        HEAD + f"model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B'{load})\n"
        f"Trainer(model=model, args=TrainingArguments('out'{args})).train()\n"
    )


def pre_ampere(machine: MachineFacts) -> bool:
    return machine.known and bool(machine.gpus) and not machine.gpus[0].native_bf16
