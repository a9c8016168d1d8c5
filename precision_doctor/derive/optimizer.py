"""Which optimizer updates the trainable parameters, and how it does its arithmetic.

Read by the memory plan (how many bytes of state per parameter) and by the pure-fp16 rule (what the update does
to float16 weights without loss scaling). Measured on torch 2.13 and bitsandbytes 0.50 (CPU), float16 weights:
- torch's for-each / for-loop Adam(W) computes in the parameter's dtype, where eps=1e-8 is 0: NaN at step 1;
- torch's fused Adam(W) computes in fp32 but keeps its moments in fp16, where the second one underflows: no NaN,
  steps many times the learning rate;
- bitsandbytes' optimizers (8-bit, 32-bit, paged) and Adafactor compute in fp32 with state of their own (uint8 or
  fp32): no NaN; what is lost is every gradient too small for fp16.
"""

from __future__ import annotations

from ..model.facts import KNOWN, StackFacts
from ..model.util import record
from .setup import Setup

# how the update treats float16 parameters
HALF_MATH = "half"  # computes in the parameter's dtype
FUSED_MATH = "fused"  # fp32 arithmetic, moments stored in the parameter's dtype
FP32_MATH = "fp32"  # fp32 arithmetic and fp32/8-bit state of its own

# Trainer `optim` names (transformers OptimizerNames) served by bitsandbytes or torchao low-bit optimizers
_LOW_BIT_MARKERS = ("bnb", "8bit", "32bit", "4bit", "paged", "lion", "ademamix")


@record
class Optimizer:
    name: str  # as the script writes it: "adamw_bnb_8bit", "AdamW8bit"; "" when not known
    kind: str  # the memory plan's kind: adamw, adamw-8bit, paged-adamw-8bit, adafactor, lion, sgd, sgd-momentum
    math: str  # HALF_MATH, FUSED_MATH, FP32_MATH, or "" when not known
    adam: bool  # an Adam-type update (divides by the second moment)


def trainer_default_optim(stack: StackFacts) -> str:
    """TrainingArguments' default `optim`: the fused AdamW from torch 2.8 on (transformers picks it when the
    installed torch has it)."""
    from ..knowledge.versions import at_least

    return "adamw_torch_fused" if at_least(stack, "torch", "2.8") else "adamw_torch"


def optimizer_of(setup: Setup, stack: StackFacts) -> Optimizer | None:
    """The optimizer that trains `setup`'s model; None when no optimizer is seen and none is implied."""
    if setup.style == "trainer":
        optim = setup.training_args.kwargs.get("optim") if setup.training_args is not None else None
        if optim is not None and optim.state != KNOWN:
            return Optimizer("", "adamw", "", True)
        name = str(optim.value) if optim is not None else trainer_default_optim(stack)
        return _trainer_optim(name)
    if setup.optimizers:
        opt = setup.optimizers[0]
        return _constructed(opt.callee, opt.kwargs.get("fused"), opt.kwargs.get("momentum"))
    return None


def _trainer_optim(name: str) -> Optimizer:
    low = name.lower()
    if any(m in low for m in _LOW_BIT_MARKERS):
        eight = "8bit" in low or "8_bit" in low
        kind = (
            ("paged-adamw-8bit" if "paged" in low else "adamw-8bit") if eight else "lion" if "lion" in low else "adamw"
        )
        return Optimizer(name, kind, FP32_MATH, "lion" not in low)
    if "adafactor" in low:
        return Optimizer(name, "adafactor", FP32_MATH, False)
    if low.startswith("sgd"):
        return Optimizer(name, "sgd", HALF_MATH, False)
    if low in ("adamw_torch_fused", "adamw_torch_npu_fused"):
        return Optimizer(name, "adamw", FUSED_MATH, True)
    if low in ("adamw_torch", "adamw_hf"):
        return Optimizer(name, "adamw", HALF_MATH, True)
    return Optimizer(name, "adamw", "", "adam" in low)


def _constructed(callee: str, fused, momentum) -> Optimizer:
    short = callee.rsplit(".", 1)[-1]
    low = short.lower()
    if callee.startswith(("bitsandbytes.", "bnb.")) or "8bit" in low or "32bit" in low:
        kind = (
            ("paged-adamw-8bit" if "paged" in low else "adamw-8bit")
            if "8bit" in low
            else "lion"
            if "lion" in low
            else "adamw"
        )
        return Optimizer(short, kind, FP32_MATH, "adam" in low)
    if "adafactor" in low:
        return Optimizer(short, "adafactor", FP32_MATH, False)
    if low == "sgd":
        on = momentum is not None and momentum.state == KNOWN and bool(momentum.value)
        return Optimizer(short, "sgd-momentum" if on else "sgd", HALF_MATH, False)
    if low in ("adam", "adamw") and callee.startswith("torch."):
        is_fused = fused is not None and fused.state == KNOWN and fused.value is True
        return Optimizer(short, "adamw", FUSED_MATH if is_fused else HALF_MATH, True)
    return Optimizer(short, "adamw", "", "adam" in low)
