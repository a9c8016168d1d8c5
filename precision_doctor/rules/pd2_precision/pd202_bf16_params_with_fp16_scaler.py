"""PD202 bf16-params-with-fp16-scaler: bfloat16 trainable parameters under fp16 AMP: the CUDA unscale kernel has no
bf16 version."""

from __future__ import annotations

from dataclasses import replace

from ...derive import Setup
from ...knowledge import dtypes
from ...model.facts import MachineFacts, StackFacts, VersionSource
from ...model.findings import Applicability, Draft, Edit, Fix
from .._common import (
    describe_trainable,
    gpu_phrase,
    keep_shared_source,
    native_bf16,
    present,
    set_kwarg,
    weights_source_edit,
)
from ..registry import Example, rule
from ._precision import (
    _unique,
    live_claim,
    lora_script,
    trainable_under_scaler,
    trainer_script,
)

_FROM_CONFIG = (
    "import torch\nfrom transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "config = AutoConfig.from_pretrained('meta-llama/Llama-3.2-1B')\n"
    "model = AutoModelForCausalLM.from_config(config{dtype})\n"
    "args = TrainingArguments(output_dir='out', fp16=True, per_device_train_batch_size=4)\n"
    "Trainer(model=model, args=args, train_dataset=ds).train()\n"
)


_TRL_QLORA = (
    "import torch\nfrom peft import LoraConfig\nfrom transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
    "from trl import SFTConfig, SFTTrainer\n"
    "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16)\n"
    "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B', quantization_config=q, "
    "dtype=torch.float16)\n"
    "args = SFTConfig(output_dir='out', {flags}, per_device_train_batch_size=2, max_length=512)\n"
    "SFTTrainer(model=model, args=args, train_dataset=ds, peft_config=LoraConfig(r=16)).train()\n"
)


@rule(
    "PD202",
    "bf16-params-with-fp16-scaler",
    severity="error",
    phase="first-step",
    summary="bfloat16 trainable parameters under fp16 AMP: the CUDA unscale kernel has no bf16 version.",
    what='Trainable parameters are bfloat16 (`dtype=torch.bfloat16`, `dtype="auto"` on a bf16 checkpoint, '
    "`.bfloat16()`, `from_config` of a bf16 checkpoint's config) while fp16 AMP (`fp16=True`, "
    '`mixed_precision="fp16"`, a CUDA GradScaler) is on.',
    why="GradScaler's `_amp_foreach_non_finite_check_and_unscale_` is implemented for float and half on CUDA, not "
    "bfloat16; loss scaling is pointless for bf16 anyway (it has fp32's exponent range).",
    error="RuntimeError: \"_amp_foreach_non_finite_check_and_unscale_cuda\" not implemented for 'BFloat16'",
    fix='Train bf16 weights with bf16 mixed precision (`bf16=True` / `mixed_precision="bf16"`, no scaler) on '
    "Ampere or newer; for fp16 AMP load the weights in fp32.",
    applicability=Applicability.SAFE,
    fix_safety="Unsafe on pre-Ampere GPUs (bf16 is emulated there); safe on Ampere or newer.",
    related=("PD211",),
    fires=[
        Example(
            trainer_script(", dtype=torch.bfloat16", ", fp16=True"),
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B",'
                " dtype=torch.bfloat16)\n"
                'args = TrainingArguments(output_dir="out", fp16=False, bf16=True)\n'
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
        Example(
            trainer_script(', torch_dtype="bfloat16"', ", fp16=True"),
            target="a100",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B",'
                ' torch_dtype="bfloat16")\n'
                'args = TrainingArguments(output_dir="out", fp16=False, bf16=True)\n'
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
        Example(
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16).cuda()\n"
            "opt = torch.optim.AdamW(model.parameters())\n"
            "scaler = torch.amp.GradScaler('cuda')\n"
            "for batch in loader:\n"
            "    scaler.scale(model(**batch).loss).backward()\n"
            "    scaler.step(opt)\n    scaler.update()\n"
        ),
        Example(
            _FROM_CONFIG.format(dtype=""),
            target="a100",
            note="pretraining from scratch: from_config builds in the config's dtype (transformers >= 4.49)",
            fixed=(
                "import torch\n"
                "from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "config = AutoConfig.from_pretrained('meta-llama/Llama-3.2-1B')\n"
                "model = AutoModelForCausalLM.from_config(config)\n"
                "args = TrainingArguments(output_dir='out', fp16=False, per_device_train_batch_size=4,"
                " bf16=True)\n"
                "Trainer(model=model, args=args, train_dataset=ds).train()\n"
            ),
        ),
        Example(
            _TRL_QLORA.format(flags="fp16=True"),
            target="t4",
            versions={"trl": "0.26.0"},
            note="TRL >= 0.26 casts a quantized model's adapters to bf16 when the trainer is built",
        ),
    ],
    silent=[
        Example(trainer_script(", dtype=torch.bfloat16", ", bf16=True")),
        Example(lora_script(", dtype=torch.bfloat16", ", fp16=True"), note="fp32 adapters: bf16 base has no grads"),
        Example(_FROM_CONFIG.format(dtype=", dtype=torch.float32"), target="a100"),
        Example(
            _FROM_CONFIG.format(dtype=""),
            target="a100",
            versions={"transformers": "4.48.3"},
            note="from_config built in float32 through 4.48",
        ),
        Example(
            _TRL_QLORA.format(flags="fp16=True"),
            target="t4",
            versions={"trl": "0.25.1"},
            note="TRL 0.25 left the adapters in float32",
        ),
        Example(_TRL_QLORA.format(flags="bf16=True"), target="a100", versions={"trl": "1.16.0"}),
        Example(
            _TRL_QLORA.format(flags="fp16=True").replace(
                "SFTTrainer(model=model, args=args, train_dataset=ds, peft_config=LoraConfig(r=16)).train()\n",
                "trainer = SFTTrainer(model=model, args=args, train_dataset=ds, peft_config=LoraConfig(r=16))\n"
                "for p in trainer.model.parameters():\n    if p.requires_grad:\n        p.data = p.data.float()\n"
                "trainer.train()\n",
            ),
            target="t4",
            versions={"trl": "1.16.0"},
            note="the adapters cast back to fp32 after the trainer is built",
        ),
    ],
)
def bf16_params_with_fp16_scaler(script, setup: Setup, machine: MachineFacts, stack: StackFacts, live):
    if live is not None:
        d = live_claim(live, dtypes.BFLOAT16, True, "trainable parameters are bfloat16 under fp16 AMP's GradScaler")
        if d:
            yield replace(
                d,
                fix=Fix(
                    "use bf16 mixed precision for bf16 weights (bf16=True / mixed_precision='bf16')",
                    applicability=Applicability.UNSAFE,
                ),
            )
        return
    trainable = trainable_under_scaler(setup, machine, dtypes.BFLOAT16)
    if trainable is None:
        return
    edits: list[Edit] = []
    if native_bf16(machine) is not False and setup.style == "trainer" and setup.training_args is not None:
        edits = list(
            present(set_kwarg(setup.training_args, "fp16", "False"), set_kwarg(setup.training_args, "bf16", "True"))
        )
        fix = Fix(
            "Train the bf16 weights with bf16 mixed precision: fp16=False, bf16=True (no loss scaling)",
            applicability=Applicability.SAFE if native_bf16(machine) is True else Applicability.UNSAFE,
            edits=tuple(edits),
        )
    elif native_bf16(machine) is False and setup.peft.value and setup.adapter_dtype.call is setup.trainer:
        fix = Fix(
            f"{gpu_phrase(machine)} has no native bf16: the trainer casts the adapters of a quantized model to "
            f"bf16 when it is built, so cast them back to float32 before training (`for p in "
            f"trainer.model.parameters(): p.data = p.data.float() if p.requires_grad else p.data`) and keep "
            f"fp16 AMP",
            applicability=Applicability.UNSAFE,
        )
    elif native_bf16(machine) is False:
        edit = weights_source_edit(setup, "torch.float32")
        fix = Fix(
            f"{gpu_phrase(machine) or 'This machine'} has no native bf16: load the weights in float32 and "
            f"keep fp16 AMP",
            applicability=Applicability.UNSAFE,
            edits=(edit,) if edit else (),
        )
    else:
        fix = Fix(
            'Use bf16 mixed precision for bf16 weights (`mixed_precision="bf16"` or no GradScaler with '
            "`torch.autocast(..., dtype=torch.bfloat16)`)",
            applicability=Applicability.UNSAFE,
        )
    by_trl = setup.peft.value and setup.adapter_dtype.call is setup.trainer
    assumed = by_trl and stack.get("trl").source == VersionSource.ASSUMED  # the cast is TRL >= 0.26's: not certain
    yield Draft(
        f"trainable parameters are bfloat16 ({describe_trainable(setup)}) under fp16 AMP's GradScaler, "
        f"which cannot unscale bf16 gradients on CUDA"
        + (" (if the job runs the trl release assumed: earlier ones keep the adapters in float32)" if assumed else ""),
        evidence=_unique(setup.weights.evidence + trainable.evidence + setup.amp.evidence),
        fix=keep_shared_source(fix, setup, script),
        severity="warning" if assumed else None,
        confidence="likely" if setup.weights.inferred or trainable.inferred else "certain",
    )
