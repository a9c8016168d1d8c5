"""PD204 pure-fp16-no-loss-scaling: float16 weights trained without loss scaling: gradients underflow; AdamW turns
NaN or oversteps."""

from __future__ import annotations

from dataclasses import replace

from ...derive import Setup
from ...derive.live import loss_history, scaler_on
from ...knowledge import dtypes
from ...model.facts import MachineFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import (
    fp16_optimizer_symptom,
    gpu_phrase,
    keep_shared_source,
    native_bf16,
    present,
    set_kwarg,
    weights_source_edit,
)
from ..registry import Example, LogSignature, rule
from ._precision import _unique, bad_loss, live_claim, lora_script, trainer_script


@rule(
    "PD204",
    "pure-fp16-no-loss-scaling",
    severity="error",
    phase="later-steps",
    summary="float16 weights trained without loss scaling: gradients underflow; AdamW turns NaN or oversteps.",
    what="Trainable parameters are float16 and no fp16 AMP loss scaling runs: Trainer with `fp16=False`, "
    '`Accelerator(mixed_precision="no")`, a plain loop without GradScaler, or bf16 autocast over fp16 '
    'weights. This is the popular "just turn AMP off" fix for PD201.',
    why="fp16's smallest normal is 6.1e-5: small gradients flush to zero. The for-each AdamW (torch.optim.AdamW's "
    "default, Trainer's `adamw_torch` before torch 2.8) computes in fp16, where eps=1e-8 rounds to 0, so the "
    "update divides by zero: NaN weights at the first step. The fused AdamW (Trainer's default "
    "`adamw_torch_fused` from torch 2.8) computes in fp32 but stores the squared-gradient average in fp16, "
    "where it underflows to 0: no NaN, but steps many times the learning rate (11x by step 10 in a test). "
    "Plain SGD just stops moving those weights.",
    error="no exception: weights turn nan at the first steps (for-each AdamW) or take steps far larger than the "
    "learning rate (fused AdamW), or training silently stalls",
    fix="Keep fp32 master weights and use fp16 AMP with loss scaling (Trainer `fp16=True` on an fp32 model), or "
    "bf16 weights with `bf16=True` on Ampere or newer. Raising Adam's eps only hides it.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: fp32 weights take twice the memory of fp16.",
    log=LogSignature(
        patterns=(r"['\"]?loss['\"]?\s*[:=]\s*['\"]?nan", r"['\"]?loss['\"]?\s*[:=]\s*['\"]?inf\b"), proven=0.45
    ),
    related=("PD210", "PD201"),
    fires=[
        Example(
            trainer_script(", dtype=torch.float16", ", fp16=False, bf16=False, gradient_checkpointing=True"),
            target="titan-rtx",
            note="turning fp16 AMP off on fp16 weights",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B",'
                " dtype=torch.float32)\n"
                'args = TrainingArguments(output_dir="out", fp16=True, bf16=False,'
                " gradient_checkpointing=True)\n"
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
        Example(
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2').half().cuda()\n"
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
            "for batch in loader:\n    model(**batch).loss.backward()\n    opt.step()\n"
        ),
    ],
    silent=[
        Example(
            trainer_script(", dtype=torch.float32", ", fp16=True").replace(
                "meta-llama/Llama-3.2-1B", "HuggingFaceTB/SmolLM2-135M"
            ),
            target="titan-rtx",
            note="fp32 weights under fp16 AMP, small enough to train in full on a Titan RTX",
        ),
        Example(lora_script(", dtype=torch.float16", ""), note="fp32 adapters on a frozen fp16 base"),
        Example(
            "import torch\nfrom peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
            "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments\n"
            "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16)\n"
            "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', quantization_config=q, "
            "dtype=torch.float16)\n"
            "model = prepare_model_for_kbit_training(model)\n"
            "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
            "Trainer(model=model, args=TrainingArguments('out', per_device_train_batch_size=4)).train()\n",
            target="t4",
            note="a 4-bit base with peft's fp32 adapters and no AMP: nothing trains in fp16",
        ),
    ],
)
def pure_fp16_no_loss_scaling(script, setup: Setup, machine: MachineFacts, stack: StackFacts, live):
    if live is not None and live.reached_training:
        d = live_claim(live, dtypes.FLOAT16, False, "float16 parameters are trained without loss scaling")
        if d:
            yield replace(
                d,
                fix=Fix(
                    "keep fp32 master weights with fp16 AMP (fp16=True), or bf16 on Ampere+",
                    applicability=Applicability.UNSAFE,
                ),
            )
        history = loss_history(live)
        if history.first_bad_step and dtypes.FLOAT16 in live.trainable() and not scaler_on(live):
            yield bad_loss(
                live, history, "keep fp32 master weights and use fp16 AMP with loss scaling, or bf16 on Ampere+"
            )
        return
    if not setup.trains or not setup.amp.known:
        return
    if setup.amp.value == "fp16" and not (machine.known and not machine.gpus):
        return
    trainable = setup.trainable_dtypes()
    if not trainable.known or dtypes.FLOAT16 not in trainable.value:
        return
    bf16 = native_bf16(machine)
    if machine.known and not machine.gpus:
        fix = Fix(
            "on a machine without a GPU, train fp32 weights (or bf16 autocast with use_cpu=True); fp16 AMP "
            "does not exist on the CPU",
            applicability=Applicability.UNSAFE,
            edits=present(weights_source_edit(setup, "torch.float32")),
        )
    elif bf16:
        fix = Fix(
            f"{gpu_phrase(machine)} has native bf16: load in bf16 and train with bf16=True",
            applicability=Applicability.UNSAFE,
            edits=present(weights_source_edit(setup, "torch.bfloat16")),
        )
    else:
        edits = list(present(weights_source_edit(setup, "torch.float32")))
        if setup.style == "trainer" and setup.training_args is not None:
            edits.extend(present(set_kwarg(setup.training_args, "fp16", "True")))
        fix = Fix(
            "Load the weights in float32 and train with fp16 AMP (fp16=True: autocast + GradScaler)",
            applicability=Applicability.UNSAFE,
            edits=tuple(edits),
        )
    mode = {
        "no": "no mixed precision",
        "bf16": "bf16 autocast without loss scaling",
        "autocast": "autocast without a GradScaler",
    }.get(setup.amp.value, "no loss scaling")
    symptom, shows = fp16_optimizer_symptom(setup, stack)
    yield Draft(
        f"float16 parameters are trained with {mode}: {symptom}",
        error=shows,
        evidence=_unique(setup.weights.evidence + setup.amp.evidence),
        fix=keep_shared_source(fix, setup, script),
        confidence="likely" if setup.amp.inferred or setup.weights.inferred else "certain",
    )
