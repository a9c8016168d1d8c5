"""Questions a script asks the GPU at run time (`torch.cuda.is_bf16_supported()`, the compute capability,
the device count): they become hardware predicates, decided once the machine is known."""

from __future__ import annotations

import ast

from ...knowledge import bf16_checks
from ...model.facts import Predicate
from ...model.python_source import literal
from ..symbols import GpuQuery, predicate_sym

TRANSFORMERS_HELPER = "is_torch_bf16_gpu_available"
BF16_HELPERS = {"is_torch_bf16_gpu_available", "is_bf16_available", "is_torch_bf16_available_on_device"}
CAPABILITY = "torch.cuda.get_device_capability"
DEVICE_COUNT = "torch.cuda.device_count"
# Unsloth's helper returns SUPPORTS_BFLOAT16: compute capability 8.0 or newer, emulation never counts
NATIVE_BF16_HELPERS = {"unsloth.is_bfloat16_supported", "unsloth.models._utils.is_bfloat16_supported"}

CALLS = {
    "torch.cuda.is_available",
    "torch.cuda.is_bf16_supported",
    "torch.backends.mps.is_available",
    CAPABILITY,
    DEVICE_COUNT,
} | NATIVE_BF16_HELPERS
CALL_NAMES = BF16_HELPERS
VALUES = {f"{CAPABILITY}()"}  # torch.cuda.get_device_capability()[0]: the major version
COMPARES = (GpuQuery,)


def resolve(r, node, scope, ctx, depth):
    if isinstance(node, ast.Compare):
        return _compare(r, node, r.sym(node.left, scope, ctx, depth))
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Constant) and key.value == 0:
            return GpuQuery("capability_major", node.value, CAPABILITY)
        return None
    if not isinstance(node, ast.Call):
        return None
    callee = r.qualified(node.func)
    if callee == CAPABILITY:
        return GpuQuery("capability", node, callee)
    if callee == DEVICE_COUNT:
        return GpuQuery("device_count", node, callee)
    pred = _predicate(r, node, callee)
    return predicate_sym(pred) if pred is not None else None


def _predicate(r, node: ast.Call, callee: str) -> Predicate | None:
    text = r.text(node)
    if callee == "torch.cuda.is_available":
        return Predicate("cuda_available", text)
    if callee == "torch.backends.mps.is_available":
        return Predicate("mps_available", text)
    if callee in NATIVE_BF16_HELPERS:
        return Predicate("bf16_supported", text, emulation=False, asked=bf16_checks.CAPABILITY, location=r.loc(node))
    if callee == "torch.cuda.is_bf16_supported" or callee.rsplit(".", 1)[-1] in BF16_HELPERS:
        emulation = True  # torch's default: including_emulation=True
        for kw in node.keywords:
            if kw.arg == "including_emulation" and isinstance(kw.value, ast.Constant):
                emulation = bool(kw.value.value)
        if node.args and isinstance(node.args[0], ast.Constant) and callee == "torch.cuda.is_bf16_supported":
            emulation = bool(node.args[0].value)
        asked = bf16_checks.TRANSFORMERS if callee.rsplit(".", 1)[-1] == TRANSFORMERS_HELPER else bf16_checks.TORCH
        return Predicate("bf16_supported", text, emulation=emulation, asked=asked, location=r.loc(node))
    return None


def _compare(r, node: ast.Compare, left: GpuQuery):
    """`capability[0] >= 8`, `capability >= (8, 0)`, `device_count() > 1` against a literal."""
    if len(node.ops) != 1 or not isinstance(left, GpuQuery):
        return None
    op, right = node.ops[0], node.comparators[0]
    if not isinstance(right, (ast.Constant, ast.Tuple)):
        return None
    try:
        number = literal(right)
    except Exception:
        return None
    text = f"{r.text(node.left)} {r.text(node)[len(r.text(node.left)) :]}".strip()
    pred = None
    if left.what in ("capability_major", "capability"):
        if left.what == "capability_major" and isinstance(number, int):
            major = (number, 0)
        elif left.what == "capability" and isinstance(number, tuple):
            major = tuple(number) + (0,) * (2 - len(number))
        else:
            return None
        if isinstance(op, ast.GtE):
            pred = Predicate("capability_at_least", text, number=major)
        elif isinstance(op, ast.Gt):
            bumped = (major[0] + 1, 0) if isinstance(number, int) else (major[0], major[1] + 1)
            pred = Predicate("capability_at_least", text, number=bumped)
        elif isinstance(op, ast.Lt):
            pred = Predicate("not", text, parts=(Predicate("capability_at_least", text, number=major),))
    elif left.what == "device_count" and isinstance(number, int):
        threshold = {ast.Gt: number + 1, ast.GtE: number}.get(type(op))
        if threshold is not None:
            pred = Predicate("gpu_count_at_least", text, number=(threshold,))
    return predicate_sym(pred) if pred is not None else None
