"""PD402 bnb-compute-dtype-float32-default: 4-bit loading without `bnb_4bit_compute_dtype`: every matmul dequantizes
to float32."""

from __future__ import annotations

from ...derive import Setup, call_evidence, decide
from ...derive.checkpoint import checkpoint_of
from ...knowledge import dtypes
from ...model.facts import ABSENT, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import native_bf16, present, set_kwarg
from ..registry import Example, LogSignature, rule
from ._quantization import qlora


@rule(
    "PD402",
    "bnb-compute-dtype-float32-default",
    severity="warning",
    phase="first-step",
    summary="4-bit loading without `bnb_4bit_compute_dtype`: every matmul dequantizes to float32.",
    what="`BitsAndBytesConfig(load_in_4bit=True)` with no `bnb_4bit_compute_dtype` (default float32) while the "
    "training runs in fp16/bf16.",
    why="The 4-bit kernels dequantize to the compute dtype: float32 makes every matmul slow and mismatched with the "
    "half-precision activations.",
    error="UserWarning: Input type into Linear4bit is torch.float16, but bnb_4bit_compute_dtype=torch.float32 "
    "(default). This will lead to slow inference or training speed.",
    fix="Set `bnb_4bit_compute_dtype` to the training compute dtype: `torch.bfloat16` on Ampere or newer, "
    "`torch.float16` on T4/V100.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the compute dtype is not stored in the weights.",
    log=LogSignature(
        patterns=(r"Input type into Linear4bit is torch\.\w+, but bnb_4bit_compute_dtype=torch\.float32",)
    ),
    fires=[
        Example(
            qlora(compute=""),
            fixed=(
                "import torch\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4',"
                " bnb_4bit_compute_dtype=torch.bfloat16)\n"
                "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B',"
                " quantization_config=q, dtype=torch.bfloat16, device_map={'': 0})\n"
                "model = prepare_model_for_kbit_training(model)\n"
                "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
            ),
        )
    ],
    silent=[
        Example(qlora()),
        Example(
            qlora(compute="").replace("bf16=True", "bf16=False").replace("dtype=torch.bfloat16", "dtype=torch.float32"),
            note="fp32 training: float32 is right",
        ),
    ],
)
def bnb_compute_dtype_float32_default(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    if setup.quantized.value != "4bit" or not setup.trains:
        return
    stored = checkpoint_of(setup.model_load, script)
    if stored is not None and stored.quantization:
        return  # a checkpoint saved quantized: its own config's compute dtype wins over the one given at load
    half = setup.amp.value in ("fp16", "bf16") or dtypes.is_half(setup.weights.value)
    if not half:
        return
    for cfg in script.of("bnb_config"):
        if not decide(cfg.kwarg("load_in_4bit"), machine, stack).is_(True):
            continue
        if cfg.kwarg("bnb_4bit_compute_dtype").state != ABSENT:
            continue
        target = (
            "torch.bfloat16" if native_bf16(machine) is not False and setup.amp.value != "fp16" else "torch.float16"
        )
        yield Draft(
            "BitsAndBytesConfig(load_in_4bit=True) without bnb_4bit_compute_dtype computes in float32 while "
            "training runs in half precision",
            evidence=(call_evidence(cfg, "no bnb_4bit_compute_dtype (default float32)"),) + setup.amp.evidence,
            fix=Fix(
                f"bnb_4bit_compute_dtype={target}",
                applicability=Applicability.SAFE,
                edits=present(set_kwarg(cfg, "bnb_4bit_compute_dtype", target)),
            ),
        )
