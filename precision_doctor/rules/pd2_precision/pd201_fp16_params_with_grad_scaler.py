"""PD201 fp16-params-with-grad-scaler: Trainable parameters in float16 under fp16 AMP: GradScaler refuses to unscale
their gradients."""

from __future__ import annotations

from dataclasses import replace

from ...derive import Setup
from ...knowledge import dtypes
from ...model.facts import MachineFacts
from ...model.findings import Applicability, Draft, Edit, Fix
from .._common import (
    PURE_FP16_WARNING,
    describe_trainable,
    gpu_phrase,
    keep_shared_source,
    native_bf16,
    present,
    pure_fp16_warning,
    set_kwarg,
    weights_source_edit,
)
from ..registry import Example, LogSignature, rule
from ._precision import (
    _unique,
    live_claim,
    lora_script,
    trainable_under_scaler,
    trainer_script,
)

NATIVE_BF16 = "torch.cuda.is_bf16_supported(including_emulation=False)"


@rule(
    "PD201",
    "fp16-params-with-grad-scaler",
    severity="error",
    phase="first-step",
    summary="Trainable parameters in float16 under fp16 AMP: GradScaler refuses to unscale their gradients.",
    what="The model's trainable parameters are float16 (`dtype=torch.float16`, `.half()`, fp16 adapters, "
    '`modules_to_save` copies) while fp16 mixed precision (`fp16=True`, `mixed_precision="fp16"`, a '
    "GradScaler) is on.",
    why="AMP keeps fp32 master weights and computes in fp16; `GradScaler.unscale_` refuses fp16 gradients "
    "because they cannot hold the unscaled values. Trainer and Accelerate unscale before clipping and in "
    "`optimizer.step()`, so the first step fails.",
    error="ValueError: Attempting to unscale FP16 gradients.",
    fix="Keep trainable weights in fp32 and let fp16 AMP downcast (load with `dtype=torch.float32`), or train "
    "LoRA adapters (peft >= 0.12 keeps them fp32) on the fp16 base; on Ampere or newer prefer bf16 weights "
    "with `bf16=True`. Never drop `fp16=True` instead: pure fp16 training underflows (PD204).",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: fp32 weights take twice the memory of fp16.",
    log=LogSignature(tells=(r"grad_scaler\.py", r"unscale_")),
    related=("PD204", "PD210"),
    fires=[
        Example(
            trainer_script(", torch_dtype=torch.float16", ", fp16=True"),
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B",'
                " torch_dtype=torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False)"
                " else torch.float32)\n"
                'args = TrainingArguments(output_dir="out", fp16=not'
                " torch.cuda.is_bf16_supported(including_emulation=False),"
                " bf16=torch.cuda.is_bf16_supported(including_emulation=False))\n"
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
        Example(
            trainer_script(", dtype=torch.half", ", fp16=True, gradient_checkpointing=True"),
            target="titan-rtx",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B",'
                " dtype=torch.float32)\n"
                'args = TrainingArguments(output_dir="out", fp16=True, gradient_checkpointing=True)\n'
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
        Example(
            lora_script(", dtype=torch.float16", ", fp16=True", lora_kwargs=', modules_to_save=["lm_head"]'),
            note="modules_to_save copies stay fp16",
        ),
        Example(lora_script(", dtype=torch.float16", ", fp16=True", peft_kwargs=", autocast_adapter_dtype=False")),
        Example(lora_script(", dtype=torch.float16", ", fp16=True"), versions={"peft": "0.11.1"}),
        Example(
            "import torch\nfrom accelerate import Accelerator\nfrom transformers import AutoModelForCausalLM\n"
            'acc = Accelerator(mixed_precision="fp16")\n'
            'model = AutoModelForCausalLM.from_pretrained("gpt2").half()\n'
            "opt = torch.optim.AdamW(model.parameters())\n"
            "model, opt = acc.prepare(model, opt)\n"
        ),
    ],
    silent=[
        Example(trainer_script(", dtype=torch.float32", ", fp16=True")),
        Example(lora_script(", dtype=torch.float16", ", fp16=True"), note="peft >= 0.12 upcasts adapters"),
        Example(
            trainer_script(", dtype=torch.float16", ", fp16=True"),
            target="cpu",
            note="no GradScaler on a CPU-only machine",
        ),
        Example(trainer_script(", dtype=get_dtype()", ", fp16=True"), note="run-time dtype: unknown, no guess"),
        Example(
            trainer_script(
                ", dtype=torch.float16",
                ", fp16=True, deepspeed={'fp16': {'enabled': 'auto'}, 'zero_optimization': {'stage': 2}}",
            ),
            note="DeepSpeed scales the loss itself over fp32 master partitions: no GradScaler",
        ),
    ],
)
def fp16_params_with_grad_scaler(script, setup: Setup, machine: MachineFacts, live):
    if live is not None:  # a live fp16 trainable parameter beats a guessed one
        d = live_claim(live, dtypes.FLOAT16, True, "trainable parameters are float16 under a GradScaler")
        if d:
            yield replace(
                d,
                fix=Fix(
                    "keep trainable weights in fp32 (load in float32) or train fp32 LoRA adapters on the fp16 base",
                    applicability=Applicability.UNSAFE,
                    notes=(PURE_FP16_WARNING,),
                ),
            )
        return
    trainable = trainable_under_scaler(setup, machine, dtypes.FLOAT16)
    if trainable is None:
        return
    evidence = (
        setup.weights.evidence
        + setup.amp.evidence
        + (setup.peft.evidence if setup.peft.value else ())
        + trainable.evidence
    )
    edit = weights_source_edit(setup, "torch.float32") if not setup.peft.value else None
    notes = [pure_fp16_warning(setup)]
    bf16 = native_bf16(machine)
    if bf16 is False and machine.gpus:
        notes.append(f"Do not switch to bf16 on {gpu_phrase(machine)}: it has no native bf16 (emulated, slow).")
    if setup.peft.value and setup.modules_to_save.value:
        fix = Fix(
            "Upcast the trainable copies after get_peft_model: "
            "`for p in model.parameters(): p.data = p.data.float() if p.requires_grad else p.data` "
            "(or `peft.cast_mixed_precision_params(model, dtype=torch.float16)`)",
            applicability=Applicability.UNSAFE,
            notes=tuple(notes),
        )
    elif setup.peft.value:
        fix = Fix(
            "Create the adapters in fp32: drop `autocast_adapter_dtype=False` (peft >= 0.12 upcasts LoRA "
            "weights to fp32 by default) or upgrade peft",
            applicability=Applicability.UNSAFE,
            notes=tuple(notes),
        )
    elif bf16:
        flags = (
            present(
                None if setup.amp_from_launch else set_kwarg(setup.training_args, "fp16", "False"),
                set_kwarg(setup.training_args, "bf16", "True"),
            )
            if setup.training_args
            else ()
        )
        fix = Fix(
            f"{gpu_phrase(machine)} has native bf16: load the weights in bf16 and train with bf16=True "
            f"(no loss scaling needed), or keep fp32 weights under fp16 AMP",
            applicability=Applicability.UNSAFE,
            edits=present(weights_source_edit(setup, "torch.bfloat16")) + flags,
            notes=tuple(notes),
        )
    elif bf16 is None and setup.training_args is not None and weights_source_edit(setup, "x") is not None:
        # the machine is not known: the right dtype depends on the GPU, so the fix asks it (natively)
        fix = Fix(
            "Let the GPU decide: bf16 weights with bf16=True where bf16 is native, fp32 weights under fp16 "
            "AMP elsewhere (pass --target to get the one fix for your GPU)",
            applicability=Applicability.UNSAFE,
            edits=present(
                weights_source_edit(setup, f"torch.bfloat16 if {NATIVE_BF16} else torch.float32"),
                set_kwarg(setup.training_args, "fp16", f"not {NATIVE_BF16}"),
                set_kwarg(setup.training_args, "bf16", NATIVE_BF16),
            )
            + (Edit("add_import", setup.path, 1, new="import torch"),),
            notes=tuple(notes),
        )
    else:
        fix = Fix(
            "Load the weights in float32 and let fp16 AMP downcast the compute; if fp32 weights do not fit, "
            "train LoRA adapters (fp32 in peft >= 0.12) on the fp16 base",
            applicability=Applicability.UNSAFE,
            edits=(edit,) if edit else (),
            notes=tuple(notes),
        )
    yield Draft(
        f"trainable parameters are float16 ({describe_trainable(setup)}) while fp16 AMP's GradScaler "
        f"is on: it refuses to unscale fp16 gradients",
        evidence=_unique(evidence),
        fix=keep_shared_source(fix, setup, script),
        confidence="likely" if trainable.inferred or setup.weights.inferred else "certain",
    )
