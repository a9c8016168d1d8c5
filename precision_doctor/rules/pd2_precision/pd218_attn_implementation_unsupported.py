"""PD218 attn-implementation-unsupported: `attn_implementation=` names a kernel the model's architecture does not
implement: the load fails."""

from __future__ import annotations

from ...derive import call_evidence, decide, evidence_of
from ...derive.checkpoint import describe_source
from ...model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import literal_edit, present
from ..registry import Example, LogSignature, rule
from ._loading import HEAD, _unsupported

_KERNEL_NAME = {
    "flash_attention_2": "Flash Attention 2",
    "flash_attention_3": "Flash Attention 3",
    "sdpa": "an attention implementation through torch.nn.functional.scaled_dot_product_attention",
}


@rule(
    "PD218",
    "attn-implementation-unsupported",
    severity="error",
    phase="load",
    summary="`attn_implementation=` names a kernel the model's architecture does not implement: the load fails.",
    what='`from_pretrained(..., attn_implementation="flash_attention_2" | "sdpa")` on an architecture whose '
    "transformers class does not declare that kernel (T5 and BLOOM have no FlashAttention-2; Gemma-2 has no "
    "sdpa), judged from the checkpoint's `model_type` on transformers 5.x.",
    why="transformers checks `_supports_flash_attn` / `_supports_sdpa` of the model class while building it and "
    "refuses a kernel the class does not implement, before any weight is loaded.",
    error="ValueError: T5ForConditionalGeneration does not support Flash Attention 2 yet. Please request to add "
    "support where the model is hosted, on its model hub page",
    fix='Pick a kernel the architecture implements: `attn_implementation="sdpa"` where it has one, else `"eager"`.',
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same attention computed by another kernel.",
    log=LogSignature(
        patterns=(
            r"does not support Flash Attention \d",
            r"does not support an attention implementation through torch\.nn\.functional",
        )
    ),
    fires=[
        Example(
            HEAD.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM")
            + "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base', dtype=torch.bfloat16, "
            "attn_implementation='flash_attention_2')\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n",
            target="a100",
            fixed=HEAD.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM")
            + "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base', dtype=torch.bfloat16, "
            "attn_implementation='sdpa')\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n",
        )
    ],
    silent=[
        Example(
            HEAD.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM")
            + "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base', dtype=torch.bfloat16, "
            "attn_implementation='sdpa')\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n",
            target="a100",
        ),
        Example(
            HEAD + "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', "
            "dtype=torch.bfloat16, attn_implementation='flash_attention_2')\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n",
            target="a100",
        ),
        Example(
            HEAD.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM")
            + "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base', dtype=torch.bfloat16, "
            "attn_implementation='flash_attention_2')\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n",
            target="a100",
            versions={"transformers": "4.46.3"},
            note="the support table is read from transformers 5.x",
        ),
    ],
)
def attn_implementation_unsupported(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    for load in script.of("model_load"):
        impl = decide(load.kwarg("attn_implementation"), machine, stack)
        if impl.state != KNOWN or not isinstance(impl.value, str):
            continue
        ckpt = _unsupported(script, load, impl.value, stack)
        if ckpt is None:
            continue
        better = "sdpa" if "sdpa" in ckpt.attention else "eager"
        name = ckpt.architecture or ckpt.model_type
        yield Draft(
            f"{name} does not implement attn_implementation={impl.value!r} "
            f"(it has: {', '.join(ckpt.attention)}): the load fails",
            evidence=(
                evidence_of(impl, f"attn_implementation={impl.value}", load),
                call_evidence(load, f"checkpoint {describe_source(ckpt)}, model_type {ckpt.model_type}"),
            ),
            error=f"ValueError: {name} does not support {_KERNEL_NAME.get(impl.value, impl.value)} yet.",
            fix=Fix(
                f"attn_implementation={better!r}", Applicability.SAFE, edits=present(literal_edit(impl, repr(better)))
            ),
        )
