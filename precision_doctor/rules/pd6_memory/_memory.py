"""What the memory rules share: memory preflight: will the job fit on its GPUs, and where does it run out
(PD601-PD605)."""

from __future__ import annotations

import re

from ...derive import Setup, call_evidence
from ...derive.checkpoint import describe_source
from ...derive.memory import GIB, batch_ranges, cheapest_fit
from ...derive.memory_plan import MemoryPlan
from ...model.findings import Applicability, Evidence, Fix
from ..registry import LogSignature

HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"


LOG = LogSignature(from_logs=False, error_is_signature=False)


def trainer(model: str, args: str = "", load: str = "dtype=torch.bfloat16") -> str:
    return (
        HEAD + f"model = AutoModelForCausalLM.from_pretrained('{model}', {load})\n"
        f"args = TrainingArguments('out', bf16=True{', ' + args if args else ''})\n"
        "Trainer(model=model, args=args, train_dataset=ds).train()\n"
    )


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def breakdown_text(m: MemoryPlan) -> str:
    b = m.breakdown
    parts = ", ".join(f"{name} {gib(v)}" for name, v in b.rows() if v)
    return f"{parts} (per GPU, of {gib(m.budget)} on {m.gpu.name}; {m.shape.parallelism.describe()})"


def _evidence(m: MemoryPlan, setup: Setup) -> tuple[Evidence, ...]:
    c = m.checkpoint
    ev = [call_evidence(setup.model_load, f"{c.parameters / 1e9:.2f}B parameters: {describe_source(c)}")]
    ev.extend(Evidence(None, a, "assumed", "assumed") for a in m.shape.assumed)
    return tuple(ev)


def trained_plan(setup: Setup, memory: MemoryPlan | str) -> MemoryPlan | None:
    """The script's memory plan (derived once, injected), for a script that trains."""
    return memory if setup.trains and isinstance(memory, MemoryPlan) else None


def in_recipe_words(text: str, keys: dict[str, str]) -> str:
    """A fix written with the Trainer's keywords (`per_device_train_batch_size=16`), in a recipe's own keys and
    syntax (`micro_batch_size: 16`) where the recipe names them so; other keywords keep their names."""
    if not keys:
        return text

    def spelled(match: re.Match) -> str:
        name, value = match.group(1), match.group(2).strip('"')
        return f"`{keys.get(name, name)}: {value}`"

    return re.sub(r"\b([a-z_]+)=(\"[^\"]*\"|[\w.]+)", spelled, text)


def advice(m: MemoryPlan) -> Fix:
    safe, fits = batch_ranges(m.checkpoint, m.shape, m.budget)
    change = cheapest_fit(m.checkpoint, m.shape, m.budget)
    notes = []
    if safe:
        uncertain = (
            f" ({safe + 1}-{fits} only within the estimate's error)"
            if fits > safe + 1
            else (f" ({fits} only within the estimate's error)" if fits > safe else "")
        )
        batch = m.recipe_keys.get("per_device_train_batch_size", "per_device_train_batch_size")
        notes.append(f"the largest {batch} that fits is {safe}{uncertain}")
    elif fits:
        notes.append(
            in_recipe_words(f"per_device_train_batch_size={fits}", m.recipe_keys)
            + " fits only within the estimate's error"
        )
    text = (
        in_recipe_words(change.description, m.recipe_keys)
        if change
        else "a larger GPU, or more GPUs with ZeRO-3 / FSDP"
    )
    if change:
        notes.append(f"with it the peak is {gib(change.breakdown.peak)} of {gib(m.budget)}")
    return Fix(text, applicability=Applicability.DISPLAY, notes=tuple(notes))


def hedged(m: MemoryPlan, with_activations: bool) -> dict:
    """An assumed batch or sequence length decides a verdict that counts activations: a warning, likely."""
    if with_activations and m.shape.assumed:
        return {"severity": "warning", "confidence": "likely"}
    return {}


FIRES_7B_T4 = trainer("meta-llama/Llama-2-7b-hf")
