"""Model families with behaviour the rules depend on, each defined once."""

from __future__ import annotations

import re

# Pre-trained in bf16 with activations beyond fp16's 65504: documented fp16 overflow (FAILURES.md #10).
# Llama, Mistral and Qwen are routinely fine-tuned in fp16 and are deliberately absent.
FP16_OVERFLOW_FAMILIES = re.compile(r"(^|[/_\-])(flan-t5|t5|mt5|umt5|byt5|gemma\d?|gemma-\d|deepseek-v2)"
                                    r"([/_\-.]|$)", re.I)


def overflows_fp16(family: str) -> bool:
    """A model id or `model_type` of a family that overflows fp16."""
    return bool(family) and FP16_OVERFLOW_FAMILIES.search(family) is not None
