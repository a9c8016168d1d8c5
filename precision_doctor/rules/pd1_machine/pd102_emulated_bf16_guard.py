"""PD102 emulated-bf16-guard: A `torch.cuda.is_bf16_supported()` guard answers True on pre-Ampere GPUs and picks
emulated bf16."""

from __future__ import annotations

from ...derive import decide, evidence_of
from ...knowledge import bf16_checks
from ...model.facts import KNOWN, MachineFacts, Predicate, ScriptFacts, StackFacts, Value
from ...model.findings import Applicability, Draft, Edit, Fix
from .._common import (
    gpu_phrase,
)
from ..registry import Example, rule
from ._hardware import HEAD, pre_ampere


def _emulating_guards(v: Value) -> list[Predicate]:
    out: list[Predicate] = []
    stack = [v]
    while stack:
        cur = stack.pop()
        if cur is None:
            continue
        if cur.predicate is not None:
            preds = [cur.predicate]
            while preds:
                p = preds.pop()
                if p.kind == "bf16_supported" and p.emulation:
                    out.append(p)
                preds.extend(p.parts)
        stack.extend([cur.if_true, cur.if_false])
    return out


def _native(text: str) -> str:
    if text.endswith("is_bf16_supported()"):
        return text[:-1] + "including_emulation=False)"
    return "torch.cuda.is_bf16_supported(including_emulation=False)"


@rule(
    "PD102",
    "emulated-bf16-guard",
    severity="warning",
    phase="first-step",
    summary="A `torch.cuda.is_bf16_supported()` guard answers True on pre-Ampere GPUs and picks emulated bf16.",
    what="A choice made with `torch.cuda.is_bf16_supported()` (or transformers' `is_torch_bf16_gpu_available()` / "
    "accelerate's `is_bf16_available()`, which call it), on a target GPU older than Ampere; also a recipe's "
    "`bf16: auto` (Axolotl), which its tool decides with transformers' check.",
    why="Since torch 2.3 `is_bf16_supported()` defaults to `including_emulation=True`: it only checks that a bf16 "
    "tensor can be created, which works on T4/V100/Titan RTX, so the guard chooses bf16 there — emulated, slow, "
    "with kernel gaps. transformers' `is_torch_bf16_gpu_available()` calls it from 4.35.0 (up to 4.34 it tested "
    'compute capability >= 8 itself). The usual "bf16 if supported else fp16" fix takes the wrong branch. A '
    "warning: the guard answers True only where nothing refuses bf16, so the job runs, slowly.",
    error="no refusal: bf16 runs emulated (slow), fused kernels fail with `... not implemented for 'BFloat16'`",
    fix="Ask the real question: `torch.cuda.is_bf16_supported(including_emulation=False)`, or "
    "`torch.cuda.get_device_capability()[0] >= 8`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the guard then answers what it was written to ask.",
    needs=("machine",),
    fires=[
        Example(
            HEAD + "bf16 = torch.cuda.is_bf16_supported()\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', "
            "dtype=torch.bfloat16 if bf16 else torch.float32)\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16, "
            "per_device_train_batch_size=4)).train()\n",
            target="t4",
            note="bf16 where supported, decided by a guard",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "bf16 = torch.cuda.is_bf16_supported(including_emulation=False)\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16 if bf16 else"
                " torch.float32)\n"
                "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16,"
                " per_device_train_batch_size=4)).train()\n"
            ),
        ),
        Example(
            HEAD + "from transformers.utils import is_torch_bf16_gpu_available\n"
            "bf16 = is_torch_bf16_gpu_available()\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', "
            "dtype=torch.bfloat16 if bf16 else torch.float32)\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16)).train()\n",
            target="t4",
            note="transformers >= 4.35 asks torch.cuda.is_bf16_supported(), which counts emulation",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "from transformers.utils import is_torch_bf16_gpu_available\n"
                "bf16 = torch.cuda.is_bf16_supported(including_emulation=False)\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16 if bf16 else"
                " torch.float32)\n"
                "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16)).train()\n"
            ),
        ),
    ],
    silent=[
        Example(
            HEAD + "bf16 = torch.cuda.is_bf16_supported(including_emulation=False)\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', "
            "dtype=torch.bfloat16 if bf16 else torch.float32)\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16, "
            "per_device_train_batch_size=4)).train()\n",
            target="t4",
        ),
        Example(
            HEAD + "bf16 = torch.cuda.is_bf16_supported()\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', "
            "dtype=torch.bfloat16 if bf16 else torch.float32)\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16, "
            "per_device_train_batch_size=4)).train()\n",
            target="a100",
        ),
        Example(
            HEAD + "from transformers.utils import is_torch_bf16_gpu_available\n"
            "bf16 = is_torch_bf16_gpu_available()\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', "
            "torch_dtype=torch.bfloat16 if bf16 else torch.float32)\n"
            "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16)).train()\n",
            target="t4",
            versions={"transformers": "4.34.1"},
            note="transformers < 4.35 answers for native bf16 only (compute capability >= 8)",
        ),
    ],
)
def emulated_bf16_guard(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    if not pre_ampere(machine):
        return
    seen = set()
    for call in script.calls:
        for name, v in list(call.kwargs.items()) + [(str(i), a) for i, a in enumerate(call.args)]:
            for p in _emulating_guards(v):
                if (p.text, call.location.path) in seen or not bf16_checks.answers(
                    machine.gpus[0], stack, p.asked, p.emulation
                ):
                    continue
                seen.add((p.text, call.location.path))
                decided = decide(v, machine, stack)
                chosen = decided.value if decided.state == KNOWN else "the bf16 branch"
                asker = "this guard" if p.location else f"`{v.text}`"
                yield Draft(
                    f"{p.text} answers True on {gpu_phrase(machine)} (emulated bf16), so {asker} picks {chosen!s}",
                    evidence=(evidence_of(v, f"{name}= chosen by {p.text}", call),),
                    fix=_native_fix(p),
                )


def _native_fix(p: Predicate) -> Fix:
    if p.location is None:  # a recipe tool's `bf16: auto`: the tool asks, the recipe decides
        return Fix(
            "write `bf16: false` in the recipe (with `fp16: true` for fp16 mixed precision on an adapter; a full "
            "fine-tune in fp16 weights then fails to unscale: PD201, train it in fp32)",
            applicability=Applicability.DISPLAY,
        )
    return Fix(
        "ask for native bf16: torch.cuda.is_bf16_supported(including_emulation=False)",
        applicability=Applicability.SAFE,
        edits=(
            Edit(
                "replace_value",
                p.location.path,
                p.location.line,
                old=p.text,
                new=_native(p.text),
                column=p.location.column,
            ),
        ),
    )
