"""PD210 fp16-overflow-bf16-pretrained: fp16 on a model family pre-trained in bf16 whose activations overflow fp16
(T5, Gemma, DeepSeek-V2)."""

from __future__ import annotations

from ...derive import Setup, call_evidence
from ...derive.live import live_evidence, loss_history, scaler_on
from ...knowledge import dtypes
from ...knowledge.families import overflows_fp16
from ...model.facts import MachineFacts
from ...model.findings import Applicability, Confidence, Draft, Fix, Phase
from .._common import (
    native_bf16,
)
from ..registry import Example, LogSignature, rule
from ._precision import bad_loss, trainer_script


def _live_overflow(live):
    history = loss_history(live)
    fix = "stay on bf16 (Ampere+) or fp32 for models that overflow fp16"
    if history.scale_collapse:
        first, last, steps = history.scale_collapse
        yield Draft(
            f"GradScaler's loss scale fell from {first:g} to {last:g} in {steps} steps: fp16 overflows on every step",
            evidence=(
                live_evidence(live, f"loss scales: {list(live.loss_scales[:3])} ... {list(live.loss_scales[-3:])}"),
            ),
            phase=Phase.LATER_STEPS,
            confidence=Confidence.LIKELY,
            fix=Fix(fix),
        )
    if history.first_bad_step and not (dtypes.FLOAT16 in live.trainable() and not scaler_on(live)):
        yield bad_loss(live, history, fix)  # fp16 weights with no scaler are PD204's


@rule(
    "PD210",
    "fp16-overflow-bf16-pretrained",
    severity="warning",
    phase="later-steps",
    summary="fp16 on a model family pre-trained in bf16 whose activations overflow fp16 (T5, Gemma, DeepSeek-V2).",
    what="fp16 AMP or fp16 weights on T5 / Flan-T5 / mT5, Gemma / Gemma-2 / Gemma-3 or DeepSeek-V2, families with "
    "documented fp16 overflow. Llama, Mistral and Qwen are routinely fine-tuned in fp16 and are not flagged.",
    why="These models were pre-trained in bf16 and their activations exceed fp16's maximum of 65504; bf16 has "
    "fp32's exponent range.",
    error="no exception: loss: nan / grad_norm: nan after a few steps, GradScaler skipping every step",
    fix="Stay on the bf16 path: bf16=True on Ampere or newer; fp32 on older GPUs.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: the choice depends on the GPU.",
    log=LogSignature(patterns=(r"['\"]?(loss|grad_norm)['\"]?\s*[:=]\s*['\"]?nan",), proven=0.45),
    related=("PD204", "PD201", "PD503"),
    fires=[
        Example(
            "import torch\nfrom transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, "
            "Seq2SeqTrainingArguments\n"
            "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-large', dtype=torch.float32)\n"
            "args = Seq2SeqTrainingArguments(output_dir='o', fp16=True)\n"
            "Seq2SeqTrainer(model=model, args=args).train()\n"
        ),
        Example(
            trainer_script(", dtype=torch.float32", ", fp16=True").replace(
                "meta-llama/Llama-3.2-1B", "google/gemma-2-2b"
            )
        ),
    ],
    silent=[
        Example(trainer_script(", dtype=torch.float32", ", fp16=True")),
        Example(
            "import torch\nfrom transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, "
            "Seq2SeqTrainingArguments\n"
            "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-large', dtype=torch.float32)\n"
            "args = Seq2SeqTrainingArguments(output_dir='o', bf16=True)\n"
            "Seq2SeqTrainer(model=model, args=args).train()\n"
        ),
    ],
)
def fp16_overflow_bf16_pretrained(setup: Setup, machine: MachineFacts, live):
    if live is not None:  # what the live --steps run's losses and loss scale showed
        yield from _live_overflow(live)
    if not setup.trains or not overflows_fp16(setup.family):
        return
    fp16_weights = setup.weights.value == dtypes.FLOAT16
    if setup.amp.value != "fp16" and not fp16_weights:
        return
    advice = "bf16=True" if native_bf16(machine) is not False else "fp32 (this GPU has no native bf16)"
    ev = call_evidence(setup.model_load, f"model family: {setup.family}")
    yield Draft(
        f"{setup.family} was pre-trained in bf16 and overflows in fp16; train it with {advice}",
        evidence=(ev,) + (setup.amp.evidence if setup.amp.value == "fp16" else setup.weights.evidence),
        fix=Fix(f"switch to {advice}", applicability=Applicability.UNSAFE),
    )
