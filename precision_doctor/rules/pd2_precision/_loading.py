"""What the loading rules share: loading and construction APIs: renamed keywords, and attention kernels against the
weights' dtype and the."""

from __future__ import annotations

from ...derive.checkpoint import checkpoint_of
from ...knowledge.families import ALL_ATTENTION
from ...knowledge.versions import at_least
from ...model.facts import ScriptFacts, StackFacts

HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


FLASH = ("flash_attention_2", "flash_attention_3")


def _unsupported(script: ScriptFacts, load, impl: str, stack: StackFacts):
    """The checkpoint's architecture, when it is known not to implement `impl` on this transformers (the support
    table is read from transformers 5.x's modeling files: `_supports_sdpa`, `_supports_flash_attn`)."""
    if not at_least(stack, "transformers", "5.0"):
        return None
    ckpt = checkpoint_of(load, script)
    if ckpt is None or not ckpt.attention:
        return None
    wanted = "flash_attention_2" if impl in FLASH else impl
    if wanted not in ALL_ATTENTION or wanted in ckpt.attention:
        return None
    return ckpt
