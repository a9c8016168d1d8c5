"""torch values a script spells: dtypes (`torch.float16`, `getattr(torch, name)`), devices, and the float
tensors it builds and casts (so a half model fed fp32 inputs can be recognised)."""

from __future__ import annotations

import ast

from ...knowledge import dtypes
from ...model.call_kinds import TENSOR_CREATORS as _ALL_CREATORS
from ...model.facts import Origin, TensorValue
from ..symbols import Cond, Dyn, Known, ObjSym

# the factories whose tensor is float32 unless told otherwise (randint/arange make integers, *_like copy their input)
TENSOR_CREATORS = _ALL_CREATORS - {
    "torch.randint",
    "torch.arange",
    "torch.zeros_like",
    "torch.ones_like",
    "torch.empty_like",
}
CAST_METHODS = {
    "half": dtypes.FLOAT16,
    "bfloat16": dtypes.BFLOAT16,
    "float": dtypes.FLOAT32,
    "to": None,
    "cuda": None,  # a move keeps the dtype
    "cpu": None,
}

CALLS = {"getattr", "torch.device", *TENSOR_CREATORS}
METHODS = set(CAST_METHODS)
VALUES = {"torch.*"}


def resolve(r, node, scope, ctx, depth):
    if isinstance(node, ast.Attribute):  # torch.float16
        dtype = dtypes.from_torch_attr(node.attr)
        if not dtype:
            return None
        return Known(f"torch.{dtype}", (Origin("code", r.text(node), r.loc(node)),), r.loc(node))
    if isinstance(node, ast.Subscript):
        return None
    callee = r.qualified(node.func)
    if callee == "getattr":
        return _getattr(r, node, scope, ctx, depth)
    if callee == "torch.device":
        return _device(r, node, scope, ctx, depth)
    if callee in TENSOR_CREATORS:
        return _created(r, node, callee, scope, ctx, depth)
    return _cast(r, node, scope, ctx, depth)


def _getattr(r, node, scope, ctx, depth):
    """getattr(torch, "bfloat16")."""
    if len(node.args) < 2 or r.qualified(node.args[0]) != "torch":
        return None
    attr = r.sym(node.args[1], scope, ctx, depth)
    if isinstance(attr, Known) and isinstance(attr.value, str) and dtypes.from_torch_attr(attr.value):
        return Known(f"torch.{dtypes.from_torch_attr(attr.value)}", attr.origins, attr.location)
    if isinstance(attr, Cond):
        return Cond(attr.predicate, _torch_attr(attr.if_true), _torch_attr(attr.if_false))
    return Dyn(f"{r.text(node)} names a dtype only known at run time")


def _torch_attr(s):
    if isinstance(s, Known) and isinstance(s.value, str) and dtypes.from_torch_attr(s.value):
        return Known(f"torch.{dtypes.from_torch_attr(s.value)}", s.origins, s.location)
    return s


def _device(r, node, scope, ctx, depth):
    """torch.device("cuda", 0) is its string form "cuda:0"."""
    if not node.args:
        return None
    given = list(node.args[:2]) + [k.value for k in node.keywords if k.arg == "index"][: 2 - len(node.args[:2])]
    parts = [r.sym(a, scope, ctx, depth) for a in given]
    if all(isinstance(p, Known) for p in parts):
        text = ":".join(str(p.value) for p in parts)
        # the index's origins too: torch.device("cuda", local_rank) is written per rank
        extra = tuple(o for p in parts[1:] for o in p.origins if o.kind != "code")
        return Known(text, extra + parts[0].origins, parts[0].location)
    reason = next((getattr(p, "reason", "") for p in parts if not isinstance(p, Known)), "")
    return Dyn(f"{r.text(node)} names a device only known at run time" + (f" ({reason})" if reason else ""))


def _created(r, node, callee, scope, ctx, depth):
    for kw in node.keywords:
        if kw.arg == "dtype":
            d = r.sym(kw.value, scope, ctx, depth)
            if isinstance(d, Known) and dtypes.from_string(d.value):
                return Known(TensorValue(dtypes.from_string(d.value)), (), r.loc(node))
            return Dyn("a tensor whose dtype is computed at run time")
    if callee == "torch.tensor":
        data = node.args[0] if node.args else None
        floats = data is not None and any(
            isinstance(n, ast.Constant) and isinstance(n.value, float) for n in ast.walk(data)
        )
        return Known(TensorValue(dtypes.FLOAT32), (), r.loc(node)) if floats else Dyn("a tensor of run-time dtype")
    return Known(TensorValue(dtypes.FLOAT32), (), r.loc(node))


def _cast(r, node, scope, ctx, depth):
    """x.half() / x.to(torch.bfloat16) on a tensor the script built."""
    inner = r.sym(node.func.value, scope, ctx, depth)
    if not (isinstance(inner, Known) and isinstance(inner.value, TensorValue)):
        return None
    method = node.func.attr
    target = CAST_METHODS[method] or inner.value.dtype  # .to(device), .cuda(), .cpu() keep the dtype
    if method == "to":
        for a in list(node.args) + [k.value for k in node.keywords if k.arg == "dtype"]:
            d = r.sym(a, scope, ctx, depth)
            if isinstance(d, Known) and dtypes.from_string(d.value):
                target = dtypes.from_string(d.value)
            elif not isinstance(d, Known) and not _looks_like_device(a):
                return Dyn("a tensor cast to a run-time dtype")
    # a move keeps the dtype and where it came from (a DataLoader's float32 images); a cast makes its own
    kept = inner.origins if target == inner.value.dtype else ()
    return Known(TensorValue(target), kept, r.loc(node))


def _looks_like_device(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "device" in text or "cuda" in text or "cpu" in text


# --- batches a data pipeline yields ------------------------------------------------------------------------------

DATALOADERS = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
# torchvision transforms that end in float32 images: ToTensor(), or v2's ToDtype(torch.float32)
_FLOAT_IMAGES = ("ToTensor()", "ToDtype(torch.float32")
_HALF_TEXT = ("float16", "half", "bfloat16")


def loop_item(r, loop: ast.For | ast.AsyncFor, index: int | None, scope, ctx, depth):
    """`for images, labels in loader:` over a DataLoader of a torchvision dataset whose transform ends in float32
    tensors (ToTensor()): the images are float32. None when the pipeline is anything else."""
    if index != 0:
        return None
    it = r.sym(loop.iter, scope, ctx, depth)
    if not (isinstance(it, ObjSym) and it.callee in DATALOADERS):
        return None
    given = it.call.args[0] if it.call.args else next((k.value for k in it.call.keywords if k.arg == "dataset"), None)
    if given is None:
        return None
    dataset = r.sym(given, it.scope, ctx, depth)
    if not (isinstance(dataset, ObjSym) and dataset.callee.startswith("torchvision.datasets.")):
        return None
    transform = next((k.value for k in dataset.call.keywords if k.arg == "transform"), None)
    if transform is None:
        return None
    text = _source_of(r, transform, dataset.scope, ctx, depth)
    if not any(t in text for t in _FLOAT_IMAGES) or any(t in text for t in _HALF_TEXT):
        return None
    where = r.loc(loop)
    name = dataset.callee.rsplit(".", 1)[-1]
    return Known(
        TensorValue(dtypes.FLOAT32),
        (Origin("code", f"{name} with {text[:60]}: float32 images from the DataLoader", r.loc(transform)),),
        where,
    )


def _source_of(r, node: ast.AST, scope, ctx, depth) -> str:
    """The transform as written, following one name to what it is assigned (`transform = transforms.Compose(...)`)."""
    if isinstance(node, ast.Name):
        events, end = scope.before(node.id, getattr(node, "lineno", 10**9))
        if end and events[end - 1].value is not None:
            return ast.unparse(events[end - 1].value)
    return ast.unparse(node)
