"""PD107 bnb-bf16-compute-on-pre-ampere: QLoRA with `bnb_4bit_compute_dtype=torch.bfloat16` on a GPU without native
bf16."""

from __future__ import annotations

from ...derive import decide, evidence_of
from ...knowledge import dtypes
from ...model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import (
    gpu_phrase,
    present,
    set_kwarg,
)
from ..registry import Example, rule
from ._hardware import pre_ampere

_QLORA_LOAD = (
    "import torch\nfrom transformers import BitsAndBytesConfig, AutoModelForCausalLM\n"
    "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.{compute})\n"
    "m = AutoModelForCausalLM.from_pretrained('gpt2', quantization_config=q)\n"
)


@rule(
    "PD107",
    "bnb-bf16-compute-on-pre-ampere",
    severity="warning",
    phase="first-step",
    summary="QLoRA with `bnb_4bit_compute_dtype=torch.bfloat16` on a GPU without native bf16.",
    what="`BitsAndBytesConfig(bnb_4bit_compute_dtype=torch.bfloat16)` copied from an Ampere recipe onto a "
    "T4 / V100 / Titan RTX.",
    why="Every 4-bit matmul dequantises to the compute dtype; bf16 there is emulated (very slow), and paired with "
    "bf16=True it hits PD101. A warning: the compute dtype alone is refused by no release (the refusal of "
    "`bf16=True` on torch < 2.3 is PD101's error).",
    error="no refusal on current stacks: emulated bf16 matmuls, or the bf16 errors of PD101 with bf16=True",
    fix="`bnb_4bit_compute_dtype=torch.float16` with fp32 LoRA adapters and `fp16=True` (the usual T4 recipe).",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the compute dtype is not stored in the weights.",
    needs=("machine",),
    fires=[
        Example(
            _QLORA_LOAD.format(compute="bfloat16"),
            target="t4",
            fixed=(
                "import torch\n"
                "from transformers import BitsAndBytesConfig, AutoModelForCausalLM\n"
                "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16)\n"
                "m = AutoModelForCausalLM.from_pretrained('gpt2', quantization_config=q)\n"
            ),
        )
    ],
    silent=[Example(_QLORA_LOAD.format(compute="float16"), target="t4")],
)
def bnb_bf16_compute_on_pre_ampere(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    if not pre_ampere(machine):
        return
    for cfg in script.of("bnb_config"):
        v = decide(cfg.kwarg("bnb_4bit_compute_dtype"), machine, stack)
        if v.state == KNOWN and dtypes.from_string(v.value) == dtypes.BFLOAT16:
            yield Draft(
                f"bnb_4bit_compute_dtype=bfloat16 on {gpu_phrase(machine)}: every 4-bit matmul runs in emulated bf16",
                evidence=(evidence_of(v, "4-bit compute dtype bfloat16", cfg),),
                fix=Fix(
                    "bnb_4bit_compute_dtype=torch.float16",
                    applicability=Applicability.SAFE,
                    edits=present(set_kwarg(cfg, "bnb_4bit_compute_dtype", "torch.float16")),
                ),
            )
