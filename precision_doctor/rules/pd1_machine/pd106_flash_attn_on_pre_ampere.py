"""PD106 flash-attn-on-pre-ampere: FlashAttention-2 on a GPU older than Ampere."""

from __future__ import annotations

from ...derive import decide, evidence_of
from ...knowledge.recipe_checks.llamafactory import FLASH_ATTN_IF_INSTALLED, GPT_OSS_KERNEL
from ...model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import (
    gpu_phrase,
    present,
    set_kwarg,
)
from ..registry import Example, LogSignature, rule
from ._hardware import _trainer, pre_ampere

# the recipe key that asks for SDPA, in the framework's own words (`fix` never writes a recipe)
_SDPA_IN_RECIPE = {"LLaMA-Factory": "flash_attn: sdpa", "Axolotl": "attn_implementation: sdpa"}


def _flash_attention_hub_kernel(value: object) -> bool:
    """A kernel from the Hub (`org/name`) of the FlashAttention family: `kernels-community/vllm-flash-attn3`, which
    Axolotl's gpt-oss examples name and LLaMA-Factory loads for gpt_oss, `kernels-community/flash-attn` ..."""
    return isinstance(value, str) and "/" in value and "flash-attn" in value


def _hub_kernel_step(script: ScriptFacts, v) -> str:
    """The fix for a FlashAttention hub kernel below Ampere: eager attention (gpt_oss implements no SDPA), or for
    LLaMA-Factory's gpt_oss, which takes the kernel whatever the recipe says, another GPU."""
    if v.value == GPT_OSS_KERNEL and script.recipe is not None and script.recipe.family == "LLaMA-Factory":
        return (
            "train gpt_oss on an Ampere or newer GPU: LLaMA-Factory loads it with this kernel whatever `flash_attn` "
            "says (model_utils/attention.py:34-44)"
        )
    if script.recipe is not None:
        return f"replace `{v.text}` with `attn_implementation: eager` in the recipe"
    return "use attn_implementation='eager'"


def _sdpa_step(script: ScriptFacts, written: str) -> str:
    """The fix as a step: the script's keyword, or the recipe's key in place of the line that asks for FlashAttention
    (`flash_attention: true`, `flash_attn: fa2`)."""
    if script.recipe is None:
        return "use attn_implementation='sdpa'"
    key = _SDPA_IN_RECIPE.get(script.recipe.family, "attn_implementation: sdpa")
    return f"replace `{written}` with `{key}` in the recipe" if ":" in written else f"write `{key}` in the recipe"


@rule(
    "PD106",
    "flash-attn-on-pre-ampere",
    severity="error",
    phase="first-step",
    summary="FlashAttention-2 (or a FlashAttention kernel from the Hub) on a GPU older than Ampere.",
    what='`attn_implementation="flash_attention_2"` (or `"flash_attention_3"`, or a FlashAttention hub kernel such as '
    '`"kernels-community/vllm-flash-attn3"`, which LLaMA-Factory loads for gpt_oss whatever `flash_attn` says) '
    "with a target GPU of compute capability < 8.0.",
    why="FlashAttention-2 kernels are built for Ampere and newer only (Turing and Volta are not supported); the "
    "hub kernels of the family are built for Ampere and Hopper.",
    error="RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
    fix='Use `attn_implementation="sdpa"` (or `"eager"`) on V100/T4/Titan RTX/RTX 20xx; for a hub kernel, `"eager"` '
    "(gpt_oss implements no SDPA), or for LLaMA-Factory's gpt_oss an Ampere or newer GPU.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same attention, another kernel.",
    needs=("machine",),
    log=LogSignature(patterns=(r"FlashAttention only supports Ampere GPUs or newer",)),
    fires=[
        Example(
            _trainer(", dtype=torch.float16, attn_implementation='flash_attention_2'", ", fp16=True"),
            target="t4",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B',"
                " dtype=torch.float16, attn_implementation='sdpa')\n"
                "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
            ),
        ),
        Example(
            _trainer(", dtype=torch.float16, attn_implementation='kernels-community/vllm-flash-attn3'", ", fp16=True"),
            target="t4",
            note="a FlashAttention hub kernel: the step is shown, not written",
        ),
    ],
    silent=[
        Example(
            _trainer(
                ", dtype=torch.float32, attn_implementation='sdpa'", ", fp16=True, per_device_train_batch_size=4"
            ).replace("meta-llama/Llama-3.2-1B", "HuggingFaceTB/SmolLM2-135M"),
            target="t4",
            note="a model small enough for full fp32 training on a T4",
        ),
        Example(
            _trainer(", dtype=torch.bfloat16, attn_implementation='flash_attention_2'", ", bf16=True"), target="a10g"
        ),
        Example(
            _trainer(", dtype=torch.bfloat16, attn_implementation='kernels-community/vllm-flash-attn3'", ", bf16=True"),
            target="a100",
            note="a FlashAttention hub kernel on Ampere",
        ),
    ],
)
def flash_attn_on_pre_ampere(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    if not pre_ampere(machine):
        return
    for load in script.of("model_load"):
        v = decide(load.kwarg("attn_implementation"), machine, stack)
        if v.state == KNOWN and _flash_attention_hub_kernel(v.value):
            yield Draft(
                f"{v.value} on {gpu_phrase(machine)}: a FlashAttention hub kernel, built for Ampere or newer GPUs",
                evidence=(evidence_of(v, v.value, load),),
                fix=Fix(_hub_kernel_step(script, v), applicability=Applicability.DISPLAY),
            )
        elif v.state == KNOWN and v.value in ("flash_attention_2", "flash_attention_3"):
            # LLaMA-Factory falls back to the default attention where flash-attn is not installed
            if_installed = any(o.detail == FLASH_ATTN_IF_INSTALLED for o in v.origins)
            yield Draft(
                f"{v.value} on {gpu_phrase(machine)}: FlashAttention needs an Ampere or newer GPU"
                + (
                    " (the job fails where flash-attn is installed; without it LLaMA-Factory keeps the default)"
                    if if_installed
                    else ""
                ),
                severity="warning" if if_installed else None,
                evidence=(evidence_of(v, v.value, load),),
                fix=Fix(
                    _sdpa_step(script, v.text),
                    applicability=Applicability.SAFE,
                    edits=present(set_kwarg(load, "attn_implementation", "'sdpa'")),
                ),
            )
