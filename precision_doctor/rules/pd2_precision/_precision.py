"""What the precision rules share: precision flags against the weights' dtype: Trainer / TRL / Accelerator setups
(PD201-PD204, PD209-PD212)."""

from __future__ import annotations

from ...derive import Setup
from ...derive.live import live_evidence, live_summary, scaler_on
from ...knowledge import dtypes
from ...model.facts import MachineFacts
from ...model.findings import Confidence, Draft, Evidence, Fix, Phase
from ...model.util import unique

HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


def trainer_script(load_kwargs: str, args_kwargs: str, extra: str = "") -> str:
    return (
        HEAD + extra + f'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B"{load_kwargs})\n'
        f'args = TrainingArguments(output_dir="out"{args_kwargs})\n'
        "Trainer(model=model, args=args).train()\n"
    )


LORA = "from peft import LoraConfig, get_peft_model\n"


def lora_script(load_kwargs: str, args_kwargs: str, lora_kwargs: str = "", peft_kwargs: str = "") -> str:
    return (
        HEAD + LORA + f'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B"{load_kwargs})\n'
        f'config = LoraConfig(r=16, target_modules=["q_proj", "v_proj"]{lora_kwargs})\n'
        f"model = get_peft_model(model, config{peft_kwargs})\n"
        f'args = TrainingArguments(output_dir="out"{args_kwargs})\n'
        "Trainer(model=model, args=args).train()\n"
    )


def fp16_amp_on_gpu(setup: Setup, machine: MachineFacts) -> bool:
    """fp16 AMP creates a GradScaler, except on a CPU-only machine (accelerate skips it there)."""
    return setup.amp.value == "fp16" and not (machine.known and not machine.gpus)


def trainable_under_scaler(setup: Setup, machine: MachineFacts, dtype: str):
    """The trainable-dtype fact when parameters of `dtype` get gradients under a GradScaler, else None."""
    if not setup.trains or not fp16_amp_on_gpu(setup, machine):
        return None
    scaler = setup.sharding.loss_scaler  # DeepSpeed scales the loss itself; FSDP1's ShardedGradScaler takes fp16
    if scaler == "deepspeed" or (scaler == "sharded" and dtype == dtypes.FLOAT16):
        return None
    trainable = setup.trainable_dtypes()
    return trainable if trainable.known and dtype in trainable.value else None


def live_claim(live, dtype: str, scaler: bool, message: str) -> Draft | None:
    """The same claim from the real objects: trainable parameters of `dtype`, with (or without) a scaler."""
    counts = live.model.trainable_by_prefix if live.model else {}
    holders = [f"{prefix}: {dtype} x{c[dtype]}" for prefix, c in counts.items() if c.get(dtype)]
    if not holders and dtype in live.trainable():
        holders = [f"{dtype} x{live.model.trainable_dtypes[dtype]}"]
    if not holders or scaler_on(live) != scaler:
        return None
    runs = "a GradScaler runs" if scaler else "no loss scaling runs"
    return Draft(
        f"{message} (live: {', '.join(holders[:4])}; {runs})",
        evidence=(live_evidence(live, f"trainable {live_summary(live.model.trainable_dtypes)}"),),
        confidence="certain",
    )


def bad_loss(live, history, fix: str) -> Draft:
    step = history.first_bad_step
    return Draft(
        f"the loss became {history.bad_loss} at step {step} of the live run",
        evidence=(live_evidence(live, f"losses: {list(live.losses[:step])[-5:]}"),),
        phase=Phase.LATER_STEPS,
        confidence=Confidence.LIKELY,
        fix=Fix(fix),
    )


def _unique(evidence: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
    return tuple(unique(evidence, key=lambda e: (e.location, e.note)))
