"""Canonical names for the dtypes scripts spell in many ways (torch.half, "fp16", "float16")."""

from __future__ import annotations

FLOAT16 = "float16"
BFLOAT16 = "bfloat16"
FLOAT32 = "float32"
AUTO = "auto"

_TORCH_ATTRS = {
    "float16": FLOAT16,
    "half": FLOAT16,
    "bfloat16": BFLOAT16,
    "float32": FLOAT32,
    "float": FLOAT32,
    "float64": "float64",
    "double": "float64",
    "uint8": "uint8",
    "int8": "int8",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}

_STRINGS = {
    "float16": FLOAT16,
    "fp16": FLOAT16,
    "half": FLOAT16,
    "torch.float16": FLOAT16,
    "bfloat16": BFLOAT16,
    "bf16": BFLOAT16,
    "torch.bfloat16": BFLOAT16,
    "float32": FLOAT32,
    "fp32": FLOAT32,
    "float": FLOAT32,
    "torch.float32": FLOAT32,
    "auto": AUTO,
}


def from_torch_attr(name: str) -> str | None:
    """`float16` in `torch.float16` -> "float16"."""
    return _TORCH_ATTRS.get(name)


def from_string(text: object) -> str | None:
    """A dtype given as a string, the way from_pretrained and argparse options accept it."""
    if not isinstance(text, str):
        return None
    return _STRINGS.get(text.strip().lower())


def is_half(dtype: object) -> bool:
    return dtype in (FLOAT16, BFLOAT16)
