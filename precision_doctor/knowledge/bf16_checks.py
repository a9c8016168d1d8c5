"""What each library's "is bf16 available?" check answers on a GPU, per release: the one place scripts' guards,
recipe tools' `bf16: auto` and the libraries' start-up refusals are decided.

- torch `torch.cuda.is_bf16_supported(including_emulation=True)`: compute capability >= 8.0, else (torch >= 2.3,
  `torch/cuda/__init__.py`) whether a bfloat16 tensor can be created: True on every CUDA GPU, emulated.
  `including_emulation=False` is native bf16 only.
- transformers `is_torch_bf16_gpu_available()` (`utils/import_utils.py`): up to 4.34 its own test, compute
  capability >= 8 and CUDA >= 11; from 4.35.0 `torch.cuda.is_available() and torch.cuda.is_bf16_supported()`, so
  it emulates wherever torch does. `TrainingArguments(bf16=True)` refuses to start when it answers False.
- accelerate `is_bf16_available()` (`utils/imports.py`): `torch.cuda.is_bf16_supported()` on CUDA.
- Unsloth `is_bfloat16_supported()`: SUPPORTS_BFLOAT16, compute capability 8.0 or newer.
"""

from __future__ import annotations

from ..model.facts import Gpu, StackFacts
from .versions import at_least

TORCH_EMULATES_BF16 = "2.3"  # is_bf16_supported() counts emulation from this release
TRANSFORMERS_ASKS_TORCH = "4.35"  # is_torch_bf16_gpu_available() calls torch.cuda.is_bf16_supported() from 4.35.0

# Who answers: the check a script or a tool calls
TORCH = "torch"
TRANSFORMERS = "transformers"
CAPABILITY = "capability"


def answers(gpu: Gpu | None, stack: StackFacts, asked: str = TORCH, emulation: bool = True) -> bool:
    """What the check answers on `gpu` (None: no CUDA GPU) with the job's torch and transformers."""
    if gpu is None:
        return False
    if gpu.native_bf16:
        return True
    if asked == CAPABILITY or not emulation:
        return False
    if asked == TRANSFORMERS and not at_least(stack, "transformers", TRANSFORMERS_ASKS_TORCH):
        return False
    return at_least(stack, "torch", TORCH_EMULATES_BF16)


def emulated_note(asked: str) -> str:
    """Why a check answered True on a GPU without native bf16 (evidence notes carry it; PD101 reads it back)."""
    if asked == TRANSFORMERS:
        return f"{EMULATED}: transformers >= 4.35 asks torch.cuda.is_bf16_supported(), which counts emulation)"
    return f"{EMULATED}: the default including_emulation=True)"


EMULATED = "(emulated bf16"


def refusal(gpu: Gpu | None, stack: StackFacts, style: str) -> str:
    """Why the job's library refuses bf16 mixed precision at start-up on `gpu` ("" when nothing refuses it):
    Trainer through transformers' check, accelerate through torch's."""
    if gpu is None or gpu.native_bf16:
        return ""
    torch, transformers = (
        f"{p.name} {p.version} ({p.source})" for p in (stack.get("torch"), stack.get("transformers"))
    )
    if style == "trainer" and not answers(gpu, stack, TRANSFORMERS):
        if not at_least(stack, "transformers", TRANSFORMERS_ASKS_TORCH):
            return f"{transformers} refuses bf16 below compute capability 8.0 (its own check before 4.35)"
        return f"{torch} answers no bf16 there (emulation counts from 2.3), so transformers refuses it"
    if style == "accelerate" and not answers(gpu, stack, TORCH):
        return f"{torch} answers no bf16 there (emulation counts from 2.3), so accelerate refuses it"
    return ""
