"""Precision flags against the weights' dtype: Trainer / TRL / Accelerator setups (PD201-PD204, PD209-PD212)."""

from __future__ import annotations

from dataclasses import replace

from ..knowledge import dtypes
from ..derive import Setup, call_evidence, evidence_of, load_dtype_value
from .registry import Example, LogSignature, rule
from ..model.facts import ABSENT, KNOWN, MachineFacts, StackFacts, VersionSource, builds_from_config
from ..model.util import unique
from ..knowledge.families import overflows_fp16
from ..derive.live import live_evidence, live_summary, loss_history, scaler_on
from ..model.findings import Applicability, Confidence, Draft, Edit, Evidence, Fix, Phase
from ..probes.stack import at_least
from ._common import (PURE_FP16_WARNING, describe_trainable, fp16_optimizer_symptom, gpu_phrase, keep_shared_source,
                      native_bf16, present, pure_fp16_warning, set_kwarg, weights_source_edit)

_HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
NATIVE_BF16 = "torch.cuda.is_bf16_supported(including_emulation=False)"


def _trainer_script(load_kwargs: str, args_kwargs: str, extra: str = "") -> str:
    return (_HEAD + extra +
            f'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B"{load_kwargs})\n'
            f'args = TrainingArguments(output_dir="out"{args_kwargs})\n'
            "Trainer(model=model, args=args).train()\n")


_LORA = ("from peft import LoraConfig, get_peft_model\n")


def _lora_script(load_kwargs: str, args_kwargs: str, lora_kwargs: str = "", peft_kwargs: str = "") -> str:
    return (_HEAD + _LORA +
            f'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B"{load_kwargs})\n'
            f'config = LoraConfig(r=16, target_modules=["q_proj", "v_proj"]{lora_kwargs})\n'
            f"model = get_peft_model(model, config{peft_kwargs})\n"
            f'args = TrainingArguments(output_dir="out"{args_kwargs})\n'
            "Trainer(model=model, args=args).train()\n")


def _fp16_amp_on_gpu(setup: Setup, machine: MachineFacts) -> bool:
    """fp16 AMP creates a GradScaler, except on a CPU-only machine (accelerate skips it there)."""
    return setup.amp.value == "fp16" and not (machine.known and not machine.gpus)


def _trainable_under_scaler(setup: Setup, machine: MachineFacts, dtype: str):
    """The trainable-dtype fact when parameters of `dtype` get gradients under a GradScaler, else None."""
    if not setup.trains or not _fp16_amp_on_gpu(setup, machine):
        return None
    scaler = setup.sharding.loss_scaler  # DeepSpeed scales the loss itself; FSDP1's ShardedGradScaler takes fp16
    if scaler == "deepspeed" or (scaler == "sharded" and dtype == dtypes.FLOAT16):
        return None
    trainable = setup.trainable_dtypes()
    return trainable if trainable.known and dtype in trainable.value else None


def _live_claim(live, dtype: str, scaler: bool, message: str) -> Draft | None:
    """The same claim from the real objects: trainable parameters of `dtype`, with (or without) a scaler."""
    counts = live.model.trainable_by_prefix if live.model else {}
    holders = [f"{prefix}: {dtype} x{c[dtype]}" for prefix, c in counts.items() if c.get(dtype)]
    if not holders and dtype in live.trainable():
        holders = [f"{dtype} x{live.model.trainable_dtypes[dtype]}"]
    if not holders or scaler_on(live) != scaler:
        return None
    runs = "a GradScaler runs" if scaler else "no loss scaling runs"
    return Draft(f"{message} (live: {', '.join(holders[:4])}; {runs})",
                 evidence=(live_evidence(live, f"trainable {live_summary(live.model.trainable_dtypes)}"),),
                 confidence="certain")


@rule(
    "PD201", "fp16-params-with-grad-scaler", severity="error", phase="first-step",
    summary="Trainable parameters in float16 under fp16 AMP: GradScaler refuses to unscale their gradients.",
    what="The model's trainable parameters are float16 (`dtype=torch.float16`, `.half()`, fp16 adapters, "
         "`modules_to_save` copies) while fp16 mixed precision (`fp16=True`, `mixed_precision=\"fp16\"`, a "
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
    related=('PD204', 'PD210'),
    fires=[
        Example(_trainer_script(", torch_dtype=torch.float16", ", fp16=True")),
        Example(_trainer_script(", dtype=torch.half", ", fp16=True, gradient_checkpointing=True"),
                target="titan-rtx"),
        Example(_lora_script(", dtype=torch.float16", ", fp16=True", lora_kwargs=', modules_to_save=["lm_head"]'),
                note="modules_to_save copies stay fp16"),
        Example(_lora_script(", dtype=torch.float16", ", fp16=True", peft_kwargs=", autocast_adapter_dtype=False")),
        Example(_lora_script(", dtype=torch.float16", ", fp16=True"), versions={"peft": "0.11.1"}),
        Example("import torch\nfrom accelerate import Accelerator\nfrom transformers import AutoModelForCausalLM\n"
                "acc = Accelerator(mixed_precision=\"fp16\")\n"
                "model = AutoModelForCausalLM.from_pretrained(\"gpt2\").half()\n"
                "opt = torch.optim.AdamW(model.parameters())\n"
                "model, opt = acc.prepare(model, opt)\n"),
    ],
    silent=[
        Example(_trainer_script(", dtype=torch.float32", ", fp16=True")),
        Example(_lora_script(", dtype=torch.float16", ", fp16=True"), note="peft >= 0.12 upcasts adapters"),
        Example(_trainer_script(", dtype=torch.float16", ", fp16=True"), target="cpu",
                note="no GradScaler on a CPU-only machine"),
        Example(_trainer_script(", dtype=get_dtype()", ", fp16=True"), note="run-time dtype: unknown, no guess"),
        Example(_trainer_script(", dtype=torch.float16", ", fp16=True, deepspeed={'fp16': {'enabled': 'auto'}, "
                                "'zero_optimization': {'stage': 2}}"),
                note="DeepSpeed scales the loss itself over fp32 master partitions: no GradScaler"),
    ],
)
def fp16_params_with_grad_scaler(script, setup: Setup, machine: MachineFacts, live):
    if live is not None:  # a live fp16 trainable parameter beats a guessed one
        d = _live_claim(live, dtypes.FLOAT16, True, "trainable parameters are float16 under a GradScaler")
        if d:
            yield replace(d, fix=Fix("keep trainable weights in fp32 (load in float32) or train fp32 LoRA adapters "
                                     "on the fp16 base", applicability=Applicability.UNSAFE, notes=(PURE_FP16_WARNING,)))
        return
    trainable = _trainable_under_scaler(setup, machine, dtypes.FLOAT16)
    if trainable is None:
        return
    evidence = setup.weights.evidence + setup.amp.evidence + (
        setup.peft.evidence if setup.peft.value else ()) + trainable.evidence
    edit = weights_source_edit(setup, "torch.float32") if not setup.peft.value else None
    notes = [pure_fp16_warning(setup)]
    bf16 = native_bf16(machine)
    if bf16 is False and machine.gpus:
        notes.append(f"Do not switch to bf16 on {gpu_phrase(machine)}: it has no native bf16 (emulated, slow).")
    if setup.peft.value and setup.modules_to_save.value:
        fix = Fix("Upcast the trainable copies after get_peft_model: "
                  "`for p in model.parameters(): p.data = p.data.float() if p.requires_grad else p.data` "
                  "(or `peft.cast_mixed_precision_params(model, dtype=torch.float16)`)", applicability=Applicability.UNSAFE,
                  notes=tuple(notes))
    elif setup.peft.value:
        fix = Fix("Create the adapters in fp32: drop `autocast_adapter_dtype=False` (peft >= 0.12 upcasts LoRA "
                  "weights to fp32 by default) or upgrade peft", applicability=Applicability.UNSAFE, notes=tuple(notes))
    elif bf16:
        flags = present(None if setup.amp_from_launch else set_kwarg(setup.training_args, "fp16", "False"),
                        set_kwarg(setup.training_args, "bf16", "True")) if setup.training_args else ()
        fix = Fix(f"{gpu_phrase(machine)} has native bf16: load the weights in bf16 and train with bf16=True "
                  f"(no loss scaling needed), or keep fp32 weights under fp16 AMP",
                  applicability=Applicability.UNSAFE, edits=present(weights_source_edit(setup, "torch.bfloat16")) + flags,
                  notes=tuple(notes))
    elif bf16 is None and setup.training_args is not None and weights_source_edit(setup, "x") is not None:
        # the machine is not known: the right dtype depends on the GPU, so the fix asks it (natively)
        fix = Fix("Let the GPU decide: bf16 weights with bf16=True where bf16 is native, fp32 weights under fp16 "
                  "AMP elsewhere (pass --target to get the one fix for your GPU)", applicability=Applicability.UNSAFE,
                  edits=present(weights_source_edit(setup, f"torch.bfloat16 if {NATIVE_BF16} else torch.float32"),
                                set_kwarg(setup.training_args, "fp16", f"not {NATIVE_BF16}"),
                                set_kwarg(setup.training_args, "bf16", NATIVE_BF16))
                  + (Edit("add_import", setup.path, 1, new="import torch"),), notes=tuple(notes))
    else:
        fix = Fix("Load the weights in float32 and let fp16 AMP downcast the compute; if fp32 weights do not fit, "
                  "train LoRA adapters (fp32 in peft >= 0.12) on the fp16 base", applicability=Applicability.UNSAFE,
                  edits=(edit,) if edit else (), notes=tuple(notes))
    yield Draft(f"trainable parameters are float16 ({describe_trainable(setup)}) while fp16 AMP's GradScaler "
                f"is on: it refuses to unscale fp16 gradients", evidence=_unique(evidence),
                fix=keep_shared_source(fix, setup, script),
                confidence="likely" if trainable.inferred or setup.weights.inferred else "certain")


_FROM_CONFIG = ("import torch\nfrom transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "config = AutoConfig.from_pretrained('meta-llama/Llama-3.2-1B')\n"
                "model = AutoModelForCausalLM.from_config(config{dtype})\n"
                "args = TrainingArguments(output_dir='out', fp16=True, per_device_train_batch_size=4)\n"
                "Trainer(model=model, args=args, train_dataset=ds).train()\n")


_TRL_QLORA = ("import torch\nfrom peft import LoraConfig\nfrom transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
              "from trl import SFTConfig, SFTTrainer\n"
              "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16)\n"
              "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B', quantization_config=q, "
              "dtype=torch.float16)\n"
              "args = SFTConfig(output_dir='out', {flags}, per_device_train_batch_size=2, max_length=512)\n"
              "SFTTrainer(model=model, args=args, train_dataset=ds, peft_config=LoraConfig(r=16)).train()\n")


@rule(
    "PD202", "bf16-params-with-fp16-scaler", severity="error", phase="first-step",
    summary="bfloat16 trainable parameters under fp16 AMP: the CUDA unscale kernel has no bf16 version.",
    what="Trainable parameters are bfloat16 (`dtype=torch.bfloat16`, `dtype=\"auto\"` on a bf16 checkpoint, "
         "`.bfloat16()`, `from_config` of a bf16 checkpoint's config) while fp16 AMP (`fp16=True`, `mixed_precision=\"fp16\"`, a CUDA GradScaler) is on.",
    why="GradScaler's `_amp_foreach_non_finite_check_and_unscale_` is implemented for float and half on CUDA, not "
        "bfloat16; loss scaling is pointless for bf16 anyway (it has fp32's exponent range).",
    error="RuntimeError: \"_amp_foreach_non_finite_check_and_unscale_cuda\" not implemented for 'BFloat16'",
    fix="Train bf16 weights with bf16 mixed precision (`bf16=True` / `mixed_precision=\"bf16\"`, no scaler) on "
        "Ampere or newer; for fp16 AMP load the weights in fp32.",
    applicability=Applicability.SAFE,
    fix_safety="Unsafe on pre-Ampere GPUs (bf16 is emulated there); safe on Ampere or newer.",
    related=('PD211',),
    fires=[
        Example(_trainer_script(", dtype=torch.bfloat16", ", fp16=True")),
        Example(_trainer_script(', torch_dtype="bfloat16"', ", fp16=True"), target="a100"),
        Example("import torch\nfrom transformers import AutoModelForCausalLM\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16).cuda()\n"
                "opt = torch.optim.AdamW(model.parameters())\n"
                "scaler = torch.amp.GradScaler('cuda')\n"
                "for batch in loader:\n"
                "    scaler.scale(model(**batch).loss).backward()\n"
                "    scaler.step(opt)\n    scaler.update()\n"),
        Example(_FROM_CONFIG.format(dtype=""), target="a100",
                note="pretraining from scratch: from_config builds in the config's dtype (transformers >= 4.49)"),
        Example(_TRL_QLORA.format(flags="fp16=True"), target="t4", versions={"trl": "0.26.0"},
                note="TRL >= 0.26 casts a quantized model's adapters to bf16 when the trainer is built"),
    ],
    silent=[
        Example(_trainer_script(", dtype=torch.bfloat16", ", bf16=True")),
        Example(_lora_script(", dtype=torch.bfloat16", ", fp16=True"), note="fp32 adapters: bf16 base has no grads"),
        Example(_FROM_CONFIG.format(dtype=", dtype=torch.float32"), target="a100"),
        Example(_FROM_CONFIG.format(dtype=""), target="a100", versions={"transformers": "4.48.3"},
                note="from_config built in float32 through 4.48"),
        Example(_TRL_QLORA.format(flags="fp16=True"), target="t4", versions={"trl": "0.25.1"},
                note="TRL 0.25 left the adapters in float32"),
        Example(_TRL_QLORA.format(flags="bf16=True"), target="a100", versions={"trl": "1.16.0"}),
        Example(_TRL_QLORA.format(flags="fp16=True").replace(
            "SFTTrainer(model=model, args=args, train_dataset=ds, peft_config=LoraConfig(r=16)).train()\n",
            "trainer = SFTTrainer(model=model, args=args, train_dataset=ds, peft_config=LoraConfig(r=16))\n"
            "for p in trainer.model.parameters():\n    if p.requires_grad:\n        p.data = p.data.float()\n"
            "trainer.train()\n"), target="t4", versions={"trl": "1.16.0"},
            note="the adapters cast back to fp32 after the trainer is built"),
    ],
)
def bf16_params_with_fp16_scaler(script, setup: Setup, machine: MachineFacts, stack: StackFacts, live):
    if live is not None:
        d = _live_claim(live, dtypes.BFLOAT16, True, "trainable parameters are bfloat16 under fp16 AMP's GradScaler")
        if d:
            yield replace(d, fix=Fix("use bf16 mixed precision for bf16 weights (bf16=True / mixed_precision='bf16')",
                                     applicability=Applicability.UNSAFE))
        return
    trainable = _trainable_under_scaler(setup, machine, dtypes.BFLOAT16)
    if trainable is None:
        return
    edits: list[Edit] = []
    if native_bf16(machine) is not False and setup.style == "trainer" and setup.training_args is not None:
        edits = list(present(set_kwarg(setup.training_args, "fp16", "False"), set_kwarg(setup.training_args, "bf16", "True")))
        fix = Fix("Train the bf16 weights with bf16 mixed precision: fp16=False, bf16=True (no loss scaling)",
                  applicability=Applicability.SAFE if native_bf16(machine) is True else Applicability.UNSAFE, edits=tuple(edits))
    elif native_bf16(machine) is False and setup.peft.value and setup.adapter_dtype.call is setup.trainer:
        fix = Fix(f"{gpu_phrase(machine)} has no native bf16: the trainer casts the adapters of a quantized model to "
                  f"bf16 when it is built, so cast them back to float32 before training (`for p in "
                  f"trainer.model.parameters(): p.data = p.data.float() if p.requires_grad else p.data`) and keep "
                  f"fp16 AMP", applicability=Applicability.UNSAFE)
    elif native_bf16(machine) is False:
        edit = weights_source_edit(setup, "torch.float32")
        fix = Fix(f"{gpu_phrase(machine) or 'This machine'} has no native bf16: load the weights in float32 and "
                  f"keep fp16 AMP", applicability=Applicability.UNSAFE, edits=(edit,) if edit else ())
    else:
        fix = Fix("Use bf16 mixed precision for bf16 weights (`mixed_precision=\"bf16\"` or no GradScaler with "
                  "`torch.autocast(..., dtype=torch.bfloat16)`)", applicability=Applicability.UNSAFE)
    by_trl = setup.peft.value and setup.adapter_dtype.call is setup.trainer
    assumed = by_trl and stack.get("trl").source == VersionSource.ASSUMED  # the cast is TRL >= 0.26's: not certain
    yield Draft(f"trainable parameters are bfloat16 ({describe_trainable(setup)}) under fp16 AMP's GradScaler, "
                f"which cannot unscale bf16 gradients on CUDA" + (" (if the job runs the trl release assumed: earlier "
                                                                  "ones keep the adapters in float32)" if assumed else ""),
                evidence=_unique(setup.weights.evidence + trainable.evidence + setup.amp.evidence),
                fix=keep_shared_source(fix, setup, script), severity="warning" if assumed else None,
                confidence="likely" if setup.weights.inferred or trainable.inferred else "certain")


@rule(
    "PD204", "pure-fp16-no-loss-scaling", severity="error", phase="later-steps",
    summary="float16 weights trained without loss scaling: gradients underflow; AdamW turns NaN or oversteps.",
    what="Trainable parameters are float16 and no fp16 AMP loss scaling runs: Trainer with `fp16=False`, "
         "`Accelerator(mixed_precision=\"no\")`, a plain loop without GradScaler, or bf16 autocast over fp16 "
         "weights. This is the popular \"just turn AMP off\" fix for PD201.",
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
    log=LogSignature(patterns=(r"['\"]?loss['\"]?\s*[:=]\s*['\"]?nan", r"['\"]?loss['\"]?\s*[:=]\s*['\"]?inf\b"), proven=0.45),
    related=('PD210', 'PD201'),
    fires=[
        Example(_trainer_script(", dtype=torch.float16", ", fp16=False, bf16=False, gradient_checkpointing=True"),
                target="titan-rtx", note="turning fp16 AMP off on fp16 weights"),
        Example("import torch\nfrom transformers import AutoModelForCausalLM\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2').half().cuda()\n"
                "opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
                "for batch in loader:\n    model(**batch).loss.backward()\n    opt.step()\n"),
    ],
    silent=[
        Example(_trainer_script(", dtype=torch.float32", ", fp16=True")
                .replace("meta-llama/Llama-3.2-1B", "HuggingFaceTB/SmolLM2-135M"), target="titan-rtx",
                note="fp32 weights under fp16 AMP, small enough to train in full on a Titan RTX"),
        Example(_lora_script(", dtype=torch.float16", ""), note="fp32 adapters on a frozen fp16 base"),
    ],
)
def pure_fp16_no_loss_scaling(script, setup: Setup, machine: MachineFacts, stack: StackFacts, live):
    if live is not None and live.reached_training:
        d = _live_claim(live, dtypes.FLOAT16, False, "float16 parameters are trained without loss scaling")
        if d:
            yield replace(d, fix=Fix("keep fp32 master weights with fp16 AMP (fp16=True), or bf16 on Ampere+",
                                     applicability=Applicability.UNSAFE))
        history = loss_history(live)
        if history.first_bad_step and dtypes.FLOAT16 in live.trainable() and not scaler_on(live):
            yield _bad_loss(live, history, "keep fp32 master weights and use fp16 AMP with loss scaling, or bf16 "
                                           "on Ampere+")
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
        fix = Fix("on a machine without a GPU, train fp32 weights (or bf16 autocast with use_cpu=True); fp16 AMP "
                  "does not exist on the CPU", applicability=Applicability.UNSAFE, edits=present(weights_source_edit(setup, "torch.float32")))
    elif bf16:
        fix = Fix(f"{gpu_phrase(machine)} has native bf16: load in bf16 and train with bf16=True", applicability=Applicability.UNSAFE,
                  edits=present(weights_source_edit(setup, "torch.bfloat16")))
    else:
        edits = list(present(weights_source_edit(setup, "torch.float32")))
        if setup.style == "trainer" and setup.training_args is not None:
            edits.extend(present(set_kwarg(setup.training_args, "fp16", "True")))
        fix = Fix("Load the weights in float32 and train with fp16 AMP (fp16=True: autocast + GradScaler)",
                  applicability=Applicability.UNSAFE, edits=tuple(edits))
    mode = {"no": "no mixed precision", "bf16": "bf16 autocast without loss scaling",
            "autocast": "autocast without a GradScaler"}.get(setup.amp.value, "no loss scaling")
    symptom, shows = fp16_optimizer_symptom(setup, stack)
    yield Draft(f"float16 parameters are trained with {mode}: {symptom}", error=shows,
                evidence=_unique(setup.weights.evidence + setup.amp.evidence), fix=keep_shared_source(fix, setup, script),
                confidence="likely" if setup.amp.inferred or setup.weights.inferred else "certain")


@rule(
    "PD209", "fp16-and-bf16-both-enabled", severity="error", phase="config",
    summary="fp16 and bf16 both on (or Trainer and Accelerator asking for different precisions).",
    what="`TrainingArguments`/`SFTConfig` with `fp16=True` and `bf16=True` (often one hard-coded, one from "
         "argparse or `is_bf16_supported()`), the same for `fp16_full_eval`/`bf16_full_eval`, or an "
         "`Accelerator(mixed_precision=...)` that disagrees with the Trainer's precision flags.",
    why="TrainingArguments validates in `__post_init__` and refuses both; the accelerate state is a process-wide "
        "singleton that cannot change precision once created.",
    error="ValueError: At most one of fp16 and bf16 can be True, but not both",
    fix="Choose one: bf16=True on Ampere or newer, otherwise fp16=True (with fp32 weights).",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the training arguments could never be constructed.",
    fires=[
        Example(_trainer_script(", dtype=torch.float32", ", fp16=True, bf16=True")),
        Example(_trainer_script(", dtype=torch.float32", ", fp16=True, bf16=torch.cuda.is_bf16_supported()"),
                target="t4", note="emulated bf16 makes the guard answer True on a T4"),
        Example("import argparse\nfrom trl import SFTConfig, SFTTrainer\n"
                "p = argparse.ArgumentParser()\np.add_argument('--bf16', action='store_true')\n"
                "a = p.parse_args()\n"
                "cfg = SFTConfig(output_dir='o', fp16=True, bf16=a.bf16)\n"
                "SFTTrainer(model='gpt2', args=cfg).train()\n", script_args=("--bf16",)),
    ],
    silent=[
        Example(_trainer_script(", dtype=torch.float32", ", fp16=True, bf16=False")),
        Example(_trainer_script(", dtype=torch.float32",
                                ", fp16=not torch.cuda.is_bf16_supported(), bf16=torch.cuda.is_bf16_supported()"),
                target="t4"),
        Example("from trl import SFTConfig, SFTTrainer\ncfg = SFTConfig(output_dir='o', fp16=True)\n"
                "SFTTrainer(model='gpt2', args=cfg).train()\n", note="TRL: bf16 defaults to not fp16"),
    ],
)
def fp16_and_bf16_both_enabled(script, setup: Setup, machine: MachineFacts, stack: StackFacts):
    from ..derive import decide

    for args in script.of("training_args"):
        for fp, bf, what in (("fp16", "bf16", ""), ("fp16_full_eval", "bf16_full_eval", " for full eval")):
            vf = decide(args.kwarg(fp), machine, stack)
            vb = decide(args.kwarg(bf), machine, stack)
            if vf.state == KNOWN and vb.state == KNOWN and vf.value is True and vb.value is True:
                keep_bf16 = native_bf16(machine) is True
                off = fp if keep_bf16 else bf
                yield Draft(f"{fp}=True and {bf}=True{what}: TrainingArguments refuses both",
                            evidence=(evidence_of(vf, f"{fp}=True", args), evidence_of(vb, f"{bf}=True", args)),
                            error=f"ValueError: At most one of fp16 and bf16 can be True{what}, but not both",
                            fix=Fix(f"keep {'bf16' if keep_bf16 else 'fp16'}: set {off}=False", applicability=Applicability.SAFE,
                                    edits=present(set_kwarg(args, off, "False"))))
    acc = setup.accelerator
    if acc is not None and setup.trainer is not None and setup.amp.known and setup.style == "trainer":
        v = decide(acc.kwarg("mixed_precision"), machine, stack)
        if v.state == KNOWN and str(v.value) != setup.amp.value:
            asks = "the launch gives the Trainer" if setup.amp_from_launch else "the Trainer's flags ask for"
            yield Draft(f"Accelerator(mixed_precision={v.value!r}) but {asks} "
                        f"{setup.amp.value!r}: the accelerate state is already initialised",
                        evidence=(evidence_of(v, f"mixed_precision={v.value!r}", acc),) + setup.amp.evidence,
                        error="ValueError: AcceleratorState has already been initialized and cannot be changed, "
                              f"restart your runtime completely and pass `mixed_precision='{setup.amp.value}'` "
                              "to `Accelerator()`.",
                        fix=Fix("Set precision in one place: drop the Accelerator() (Trainer creates its own) or "
                                "make both agree", applicability=Applicability.UNSAFE))




@rule(
    "PD210", "fp16-overflow-bf16-pretrained", severity="warning", phase="later-steps",
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
    related=('PD204', 'PD201', 'PD503'),
    fires=[
        Example("import torch\nfrom transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, "
                "Seq2SeqTrainingArguments\n"
                "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-large', dtype=torch.float32)\n"
                "args = Seq2SeqTrainingArguments(output_dir='o', fp16=True)\n"
                "Seq2SeqTrainer(model=model, args=args).train()\n"),
        Example(_trainer_script(", dtype=torch.float32", ", fp16=True").replace("meta-llama/Llama-3.2-1B",
                                                                                  "google/gemma-2-2b")),
    ],
    silent=[
        Example(_trainer_script(", dtype=torch.float32", ", fp16=True")),
        Example("import torch\nfrom transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, "
                "Seq2SeqTrainingArguments\n"
                "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-large', dtype=torch.float32)\n"
                "args = Seq2SeqTrainingArguments(output_dir='o', bf16=True)\n"
                "Seq2SeqTrainer(model=model, args=args).train()\n"),
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
    yield Draft(f"{setup.family} was pre-trained in bf16 and overflows in fp16; train it with {advice}",
                evidence=(ev,) + (setup.amp.evidence if setup.amp.value == "fp16" else setup.weights.evidence),
                fix=Fix(f"switch to {advice}", applicability=Applicability.UNSAFE))


def _live_overflow(live):
    history = loss_history(live)
    fix = "stay on bf16 (Ampere+) or fp32 for models that overflow fp16"
    if history.scale_collapse:
        first, last, steps = history.scale_collapse
        yield Draft(f"GradScaler's loss scale fell from {first:g} to {last:g} in {steps} steps: fp16 overflows on "
                    f"every step", evidence=(live_evidence(live, f"loss scales: {list(live.loss_scales[:3])} ... "
                                                                f"{list(live.loss_scales[-3:])}"),),
                    phase=Phase.LATER_STEPS, confidence=Confidence.LIKELY, fix=Fix(fix))
    if history.first_bad_step and not (dtypes.FLOAT16 in live.trainable() and not scaler_on(live)):
        yield _bad_loss(live, history, fix)  # fp16 weights with no scaler are PD204's


def _bad_loss(live, history, fix: str) -> Draft:
    step = history.first_bad_step
    return Draft(f"the loss became {history.bad_loss} at step {step} of the live run",
                 evidence=(live_evidence(live, f"losses: {list(live.losses[:step])[-5:]}"),),
                 phase=Phase.LATER_STEPS, confidence=Confidence.LIKELY, fix=Fix(fix))


@rule(
    "PD211", "implicit-checkpoint-dtype-v5", severity="warning", phase="load",
    summary="No dtype passed to from_pretrained on transformers >= 5: the checkpoint's dtype is loaded, not fp32.",
    what="`from_pretrained(...)` without `dtype=`/`torch_dtype=` in a training script, on transformers 5 or newer.",
    why="transformers 5 changed the default to `dtype=\"auto\"`: scripts that relied on fp32 now train bf16/fp16 "
        "weights — PD202 with fp16=True on a bf16 checkpoint, PD201 on an fp16 one, or silent pure-bf16 training.",
    error="no exception by itself; with fp16=True on a bf16 checkpoint: RuntimeError: "
          "\"_amp_foreach_non_finite_check_and_unscale_cuda\" not implemented for 'BFloat16'",
    fix="Pass the dtype explicitly: `dtype=torch.float32` for fp16 AMP / fp32 master weights, or "
        "`dtype=torch.bfloat16` together with `bf16=True` when pure bf16 is intended.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: restores the transformers 4 behaviour the script was written for.",
    related=('PD202',),
    fires=[
        Example(_trainer_script("", ", fp16=True")),
    ],
    silent=[
        Example(_trainer_script(", dtype=torch.float32", ", fp16=True")),
        Example(_trainer_script("", ", fp16=True"), versions={"transformers": "4.46.0"}),
        Example("import torch\nfrom transformers import AutoModelForCausalLM\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2')\n"
                "student = torch.nn.Linear(8, 8)\nopt = torch.optim.AdamW(student.parameters())\n"
                "student.load_state_dict({k: v for k, v in model.state_dict().items() if k.startswith('lm')})\n"
                "opt.step()\n", note="the loaded model is only read: another module is trained"),
        Example(_lora_script("", ", fp16=True"), note="a frozen base under fp32 adapters"),
        Example("from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2').half()\n"
                "Trainer(model=model, args=TrainingArguments('out'), train_dataset=ds).train()\n",
                note="an fp32 checkpoint cast before training: the cast, not the load's default, decides (PD204's)"),
    ],
)
def implicit_checkpoint_dtype_v5(setup: Setup, stack: StackFacts):
    load = setup.model_load
    if not setup.trains or load is None or not setup.load_traced or not at_least(stack, "transformers", "5.0"):
        return  # only the model training starts from: an inference, export or teacher load is not trained
    if builds_from_config(load):
        return  # from_config took its config's dtype before transformers 5 too: nothing changed
    written = load_dtype_value(load)[1]
    if written.state != ABSENT and not written.is_(None):
        return
    if setup.quantized.value or setup.peft.value:
        return  # quantized loads pick their compute dtype from the quantization config; adapters train in fp32
    if setup.loaded.value == dtypes.FLOAT32 or setup.weights.call is not setup.loaded.call:
        return  # an fp32 checkpoint loads as fp32: nothing changed; a cast before training decides the dtype anyway
    version = stack.get("transformers")
    intended = "torch.bfloat16" if setup.amp.value == "bf16" else "torch.float32"
    loaded = setup.loaded.value or "unknown for a hub checkpoint"
    yield Draft(f"from_pretrained() without dtype loads the checkpoint's dtype ({loaded}) on transformers "
                f"{version.version} ({version.source}), not float32",
                evidence=(call_evidence(load, "no dtype= / torch_dtype="),) + setup.amp.evidence,
                fix=Fix(f"pass dtype={intended} explicitly", applicability=Applicability.SAFE,
                        edits=(Edit("set_kwarg", load.location.path, load.location.line, call="from_pretrained",
                                    name="dtype", new=intended),)),
                confidence="likely" if version.source == VersionSource.ASSUMED or not setup.weights.known else "certain")


@rule(
    "PD212", "pure-bf16-weights-no-master-copy", severity="info", phase="later-steps",
    summary="Full fine-tune with bf16 weights and bf16 optimizer state: tiny late updates round away.",
    what="All parameters trained in bfloat16 (`dtype=torch.bfloat16` + `bf16=True`, no adapters). A common, working "
         "setup: reported for the trade-off only.",
    why="bf16 keeps 8 bits of mantissa: updates smaller than the weight's resolution are rounded away late in "
        "training, which can stall the loss.",
    error="no exception: the loss may stall late in training",
    fix="If it matters: fp32 master weights with bf16 autocast (load fp32, bf16=True), fp32 LoRA adapters, or a "
        "Kahan-summation / stochastic-rounding optimizer.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    fires=[Example(_trainer_script(", dtype=torch.bfloat16", ", bf16=True"))],
    silent=[
        Example(_trainer_script(", dtype=torch.float32", ", bf16=True")),
        Example(_lora_script(", dtype=torch.bfloat16", ", bf16=True")),
    ],
)
def pure_bf16_weights_no_master_copy(setup: Setup):
    if not setup.trains or setup.peft.value or setup.weights.value != dtypes.BFLOAT16:
        return
    if setup.amp.value == "fp16" or setup.quantized.value:
        return
    if setup.sharding.kind == "deepspeed":
        return  # DeepSpeed's optimizer keeps fp32 master partitions of bf16 weights
    yield Draft("every parameter is trained in bfloat16 with no fp32 master copy",
                evidence=setup.weights.evidence,
                fix=Fix("optional: load in float32 and train with bf16 autocast (bf16=True), if memory allows",
                        applicability=Applicability.UNSAFE))


def _unique(evidence: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
    return tuple(unique(evidence, key=lambda e: (e.location, e.note)))
