"""PD209 fp16-and-bf16-both-enabled: fp16 and bf16 both on (or Trainer and Accelerator asking for different
precisions)."""

from __future__ import annotations

from ...derive import Setup, evidence_of
from ...model.facts import KNOWN, MachineFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import (
    native_bf16,
    present,
    set_kwarg,
)
from ..registry import Example, rule
from ._precision import trainer_script


@rule(
    "PD209",
    "fp16-and-bf16-both-enabled",
    severity="error",
    phase="config",
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
        Example(
            trainer_script(", dtype=torch.float32", ", fp16=True, bf16=True"),
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B",'
                " dtype=torch.float32)\n"
                'args = TrainingArguments(output_dir="out", fp16=True, bf16=False)\n'
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
        Example(
            trainer_script(", dtype=torch.float32", ", fp16=True, bf16=torch.cuda.is_bf16_supported()"),
            target="t4",
            note="emulated bf16 makes the guard answer True on a T4",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B",'
                " dtype=torch.float32)\n"
                'args = TrainingArguments(output_dir="out", fp16=True, bf16=False)\n'
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
        Example(
            "import argparse\nfrom trl import SFTConfig, SFTTrainer\n"
            "p = argparse.ArgumentParser()\np.add_argument('--bf16', action='store_true')\n"
            "a = p.parse_args()\n"
            "cfg = SFTConfig(output_dir='o', fp16=True, bf16=a.bf16)\n"
            "SFTTrainer(model='gpt2', args=cfg).train()\n",
            script_args=("--bf16",),
        ),
    ],
    silent=[
        Example(trainer_script(", dtype=torch.float32", ", fp16=True, bf16=False")),
        Example(
            trainer_script(
                ", dtype=torch.float32",
                ", fp16=not torch.cuda.is_bf16_supported(), bf16=torch.cuda.is_bf16_supported()",
            ),
            target="t4",
        ),
        Example(
            "from trl import SFTConfig, SFTTrainer\ncfg = SFTConfig(output_dir='o', fp16=True)\n"
            "SFTTrainer(model='gpt2', args=cfg).train()\n",
            note="TRL: bf16 defaults to not fp16",
        ),
    ],
)
def fp16_and_bf16_both_enabled(script, setup: Setup, machine: MachineFacts, stack: StackFacts):
    from ...derive import decide

    for args in script.of("training_args"):
        for fp, bf, what in (("fp16", "bf16", ""), ("fp16_full_eval", "bf16_full_eval", " for full eval")):
            vf = decide(args.kwarg(fp), machine, stack)
            vb = decide(args.kwarg(bf), machine, stack)
            if vf.state == KNOWN and vb.state == KNOWN and vf.value is True and vb.value is True:
                keep_bf16 = native_bf16(machine) is True
                off = fp if keep_bf16 else bf
                yield Draft(
                    f"{fp}=True and {bf}=True{what}: TrainingArguments refuses both",
                    evidence=(evidence_of(vf, f"{fp}=True", args), evidence_of(vb, f"{bf}=True", args)),
                    error=f"ValueError: At most one of fp16 and bf16 can be True{what}, but not both",
                    fix=Fix(
                        f"keep {'bf16' if keep_bf16 else 'fp16'}: set {off}=False",
                        applicability=Applicability.SAFE,
                        edits=present(set_kwarg(args, off, "False")),
                    ),
                )
    acc = setup.accelerator
    if acc is not None and setup.trainer is not None and setup.amp.known and setup.style == "trainer":
        v = decide(acc.kwarg("mixed_precision"), machine, stack)
        if v.state == KNOWN and str(v.value) != setup.amp.value:
            asks = "the launch gives the Trainer" if setup.amp_from_launch else "the Trainer's flags ask for"
            yield Draft(
                f"Accelerator(mixed_precision={v.value!r}) but {asks} "
                f"{setup.amp.value!r}: the accelerate state is already initialised",
                evidence=(evidence_of(v, f"mixed_precision={v.value!r}", acc),) + setup.amp.evidence,
                error="ValueError: AcceleratorState has already been initialized and cannot be changed, "
                f"restart your runtime completely and pass `mixed_precision='{setup.amp.value}'` "
                "to `Accelerator()`.",
                fix=Fix(
                    "Set precision in one place: drop the Accelerator() (Trainer creates its own) or make both agree",
                    applicability=Applicability.UNSAFE,
                ),
            )
