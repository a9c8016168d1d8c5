"""PD215 flash-attn-fp32-weights: FlashAttention with float32 weights: the kernel takes only fp16/bf16."""

from __future__ import annotations

from ...derive import Setup, decide, evidence_of
from ...knowledge import dtypes
from ...model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import keep_shared_source, native_bf16, weights_source_edit
from ..registry import Example, LogSignature, rule
from ._loading import FLASH, HEAD, _unsupported


@rule(
    "PD215",
    "flash-attn-fp32-weights",
    severity="error",
    phase="first-step",
    summary="FlashAttention with float32 weights: the kernel takes only fp16/bf16.",
    what='`attn_implementation="flash_attention_2"` on a model whose weights are float32. An error in a loop '
    "without autocast; a warning under fp16/bf16 autocast (Trainer `bf16=True`), where inputs are cast.",
    why="FlashAttention kernels are written for fp16 and bf16 only.",
    error="RuntimeError: FlashAttention only support fp16 and bf16 data type",
    fix="Load with `dtype=torch.bfloat16` (or float16), or run under `torch.autocast(..., dtype=torch.bfloat16)`.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: bf16 weights change what is trained.",
    log=LogSignature(
        patterns=(
            r"FlashAttention only support fp16 and bf16 data type",
            r"Flash Attention 2\.0 only supports torch\.float16 and torch\.bfloat16",
        )
    ),
    fires=[
        Example(
            HEAD + "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32, "
            "attn_implementation='flash_attention_2').cuda()\n"
            "opt = torch.optim.AdamW(model.parameters())\nfor b in loader:\n"
            "    model(**b).loss.backward()\n    opt.step()\n",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16,"
                " attn_implementation='flash_attention_2').cuda()\n"
                "opt = torch.optim.AdamW(model.parameters())\n"
                "for b in loader:\n"
                "    model(**b).loss.backward()\n"
                "    opt.step()\n"
            ),
        ),
    ],
    silent=[
        Example(
            HEAD + "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16, "
            "attn_implementation='flash_attention_2').cuda()\n"
            "opt = torch.optim.AdamW(model.parameters())\nfor b in loader:\n"
            "    model(**b).loss.backward()\n    opt.step()\n"
        ),
        Example(
            HEAD + "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32, "
            "attn_implementation='sdpa')\nTrainer(model=model, args=TrainingArguments('o')).train()\n"
        ),
    ],
)
def flash_attn_fp32_weights(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    load = setup.model_load
    if load is None or not setup.trains or setup.weights.value != dtypes.FLOAT32:
        return
    impl = decide(load.kwarg("attn_implementation"), machine, stack)
    if impl.state != KNOWN or impl.value not in FLASH or _unsupported(script, load, str(impl.value), stack):
        return  # an architecture without the kernel fails at load instead: PD218
    autocast = setup.amp.value in ("fp16", "bf16", "autocast")
    target = "torch.bfloat16" if native_bf16(machine) is not False else "torch.float16"
    edit = weights_source_edit(setup, target)
    yield Draft(
        f"{impl.value} with float32 weights: the kernel takes only fp16/bf16"
        + (
            " (autocast casts the inputs, so it runs, with a warning)"
            if autocast
            else " and no autocast casts the inputs"
        ),
        evidence=(evidence_of(impl, impl.value, load),) + setup.weights.evidence + setup.amp.evidence,
        severity="warning" if autocast else "",
        error=(
            "Flash Attention 2.0 only supports torch.float16 and torch.bfloat16 dtypes, but the current "
            "dype in the model is torch.float32."
            if autocast
            else ""
        ),
        fix=keep_shared_source(
            Fix(
                f"load with dtype={target}" + ("" if autocast else " or wrap the forward in torch.autocast"),
                applicability=Applicability.UNSAFE,
                edits=(edit,) if edit else (),
            ),
            setup,
            script,
        ),
    )
