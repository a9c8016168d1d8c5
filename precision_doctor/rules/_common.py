"""Shared helpers for checks: target-aware precision advice and edits of written values."""

from __future__ import annotations

import os
from dataclasses import replace

from ..derive import Fact, Setup
from ..derive.optimizer import FP32_MATH, FUSED_MATH, optimizer_of
from ..model.facts import CONDITIONAL, KNOWN, Call, MachineFacts, ScriptFacts, StackFacts, Value
from ..model.findings import Edit, Fix
from ..model.util import is_config_path

_PURE_FP16 = (
    "fp16 weights trained without loss scaling underflow (PD204): NaN with a for-each AdamW, steps far "
    "past the learning rate with a fused one."
)
PURE_FP16_WARNING = f"Do not turn fp16 AMP off to silence this: {_PURE_FP16}"


def pure_fp16_warning(setup) -> str:
    """PURE_FP16_WARNING in the words of where fp16 AMP was asked for: the script, or the launch."""
    if setup.amp_from_launch:
        return f"Do not launch without fp16 mixed precision to silence this: {_PURE_FP16}"
    return PURE_FP16_WARNING


def gpu_phrase(machine: MachineFacts) -> str:
    if not machine.known or not machine.gpus:
        return ""
    g = machine.gpus[0]
    return f"{g.name} ({g.sm})"


def native_bf16(machine: MachineFacts) -> bool | None:
    """True on Ampere+, False on older GPUs or no GPU, None when the machine is unknown."""
    if not machine.known:
        return None
    return bool(machine.gpus) and machine.gpus[0].native_bf16


def literal_edit(value: Value | None, new: str) -> Edit | None:
    """Replace a value where it is written: the variable, dict entry or argparse/dataclass default that holds
    it, not the call it reaches. None where that is a recipe or config file, which `fix` never writes."""
    edit = _literal_edit(value, new)
    return None if edit is None or is_config_path(edit.path) else edit


def _literal_edit(value: Value | None, new: str) -> Edit | None:
    if value is None or value.state != KNOWN or not value.origins:
        return None
    literal = value.origins[-1]
    if literal.kind == "code" and literal.location is not None:
        return Edit(
            "replace_value",
            literal.location.path,
            literal.location.line,
            old=literal.detail,
            new=new,
            column=literal.location.column,
        )
    if literal.kind == "default" and value.location is not None and isinstance(value.value, (bool, int, float, str)):
        old = value.value if isinstance(value.value, str) and value.value.startswith("torch.") else repr(value.value)
        return Edit(
            "replace_value", value.location.path, value.location.line, old=old, new=new, column=value.location.column
        )
    return None


def set_kwarg(call: Call, name: str, new: str) -> Edit | None:
    """Set a keyword where its value is written; add it to the call only when the call shows no value for it
    (a value that arrives through **kwargs or the command line cannot be edited at the call)."""
    existing = call.kwargs.get(name)
    if existing is not None:
        if existing.state == KNOWN:
            return literal_edit(existing, new)
        if (
            existing.state == CONDITIONAL
            and existing.location is not None
            and not is_config_path(existing.location.path)
        ):
            # replace the hardware check itself
            return Edit(
                "replace_value",
                existing.location.path,
                existing.location.line,
                old=existing.text,
                new=new,
                column=existing.location.column,
            )
        return None
    if any(v.text.startswith("**") for v in call.kwargs.values()) or call.text.startswith("(parsed"):
        return None
    return Edit(
        "set_kwarg", call.location.path, call.location.line, call=call.callee.rsplit(".", 1)[-1], name=name, new=new
    )


def remove_kwarg(call: Call, name: str) -> Edit | None:
    """Take a keyword out of the call that writes it; None where the call shows none (it arrives through **kwargs,
    or the call is a recipe's or a parser's, which `fix` does not edit)."""
    written = call.kwargs.get(name)
    if written is None or written.text.startswith("**") or call.text.startswith("(parsed"):
        return None
    return Edit("remove_kwarg", call.location.path, call.location.line, call=call.callee.rsplit(".", 1)[-1], name=name)


def present(*maybe: Edit | None) -> tuple[Edit, ...]:
    """The edits that could be made (an edit is None where the value cannot be changed in place)."""
    return tuple(e for e in maybe if e is not None)


def weights_source_edit(setup: Setup, new_dtype: str) -> Edit | None:
    """Change the dtype the trained model is loaded in, where that dtype is written."""
    w: Fact = setup.weights
    if w.source is not None:
        edit = literal_edit(w.source, new_dtype)
        if edit is not None:
            return edit
    if setup.model_load is not None and w.call is setup.model_load:
        name = next((k for k in ("dtype", "torch_dtype") if k in setup.model_load.kwargs), setup.dtype_keyword)
        return set_kwarg(setup.model_load, name, new_dtype)
    return None


def _edit_target(edit: Edit) -> tuple:
    return (edit.path, edit.line, edit.column, edit.old)


def _readers(script: ScriptFacts, setup: Setup, target: tuple) -> list[Call]:
    """The recorded calls, other than the trained model's load and what casts or wraps that model, that read the
    value an edit at `target` would change."""
    own = {c.key for c in (setup.model_load, *setup.casts, *setup.chain) if c is not None}
    found = []
    for call in script.calls:
        if call.key in own:
            continue
        for value in (*call.args, *call.kwargs.values()):
            edit = literal_edit(value, "x")
            if edit is not None and _edit_target(edit) == target:
                found.append(call)
                break
    return found


def _call_phrase(call: Call) -> str:
    where = f"{os.path.basename(call.location.path)}:{call.location.line}"
    if call.kind == "model_load" and call.target:
        return f"the load of `{call.target}` at {where}"
    return f"`{call.callee}(...)` at {where}"


def keep_shared_source(fix: Fix, setup: Setup, script: ScriptFacts | None) -> Fix:
    """A fix that changes the trained model's dtype where it is written, when that written value is also read by
    another call (a frozen reference model's load, a tokenizer, an eval path): the keyword is set at the trained
    load instead, so the other reader keeps its value; the edit of the written value stays as a later variant."""
    load, source = setup.model_load, setup.weights.source
    if script is None or load is None or source is None or setup.weights.call is not load:
        return fix
    at_source = literal_edit(source, "x")
    if at_source is None:
        return fix
    target = _edit_target(at_source)
    index = next((i for i, e in enumerate(fix.edits) if e.kind == "replace_value" and _edit_target(e) == target), None)
    name = next((k for k in ("dtype", "torch_dtype") if k in load.kwargs and load.kwargs[k] is source), None)
    if name is None:
        name = next(
            (k for k in ("dtype", "torch_dtype") if k in load.kwargs and load.kwargs[k].location == source.location),
            None,
        )
    readers = _readers(script, setup, target) if index is not None and name is not None else []
    if not readers:
        return fix
    old = fix.edits[index]
    at_call = Edit(
        "set_kwarg", load.location.path, load.location.line, call=load.callee.rsplit(".", 1)[-1], name=name, new=old.new
    )
    origin = source.origins[-1] if source.origins else None
    what = (
        f"the {origin.detail}"
        if origin is not None and origin.kind == "default"
        else f"`{origin.detail if origin is not None else source.text}`"
    )
    where = f"{os.path.basename(old.path)}:{old.line}"
    why = (
        f"{what} ({where}) is also read by {', '.join(map(_call_phrase, readers))}: {name}= is set at the "
        f"trained model's load instead, so {'that call keeps' if len(readers) == 1 else 'those calls keep'} "
        f"its value (changing {what} itself is the fallback)"
    )
    edits = fix.edits[:index] + (at_call,) + fix.edits[index + 1 :]
    return replace(
        fix,
        description=f"{fix.description.rstrip('.')}. {why[0].upper()}{why[1:]}",
        edits=edits,
        variants=(fix.edits, *fix.variants),
    )


def describe_trainable(setup: Setup) -> str:
    if not setup.peft.value:
        return "all parameters are trained"
    parts = []
    if setup.adapter_dtype.known:
        parts.append(f"LoRA adapters in {setup.adapter_dtype.value}")
    if setup.modules_to_save.value:
        parts.append(
            f"modules_to_save copies ({', '.join(map(str, setup.modules_to_save.value))}) in {setup.weights.value}"
        )
    return " and ".join(parts) or "adapters are trained"


def fp16_optimizer_symptom(setup: Setup, stack: StackFacts) -> tuple[str, str]:
    """What the optimizer does to fp16 parameters without loss scaling, as (message tail, what the job shows);
    the measurements behind each case are in derive/optimizer.py."""
    opt = optimizer_of(setup, stack)
    if opt is None or not opt.math:
        return (
            "small gradients underflow to zero",
            "no exception: the loss stalls, or turns nan with an Adam-type optimizer",
        )
    label = f"Trainer's {opt.name}" if setup.style == "trainer" else opt.name
    if opt.math == FUSED_MATH:
        label = label if "fused" in label else f"{label} (fused)"
        return (
            f"small gradients and the second-moment state of {label} underflow, so its steps grow "
            f"far past the learning rate",
            "no exception: no NaN at first (the fused AdamW computes in fp32), but steps many times the "
            "learning rate make the loss jump or diverge",
        )
    if opt.math == FP32_MATH:
        return (
            f"gradients too small for fp16 flush to zero and {label} never sees them",
            f"no exception: {label} computes in fp32 with its own state, so no NaN, but every gradient below "
            f"fp16's range (6e-8) is lost and the loss stalls or trains worse",
        )
    if opt.adam:
        return (
            f"small gradients underflow and {label}'s update turns NaN",
            "no exception: the weights turn nan at the first optimizer step, then loss: nan",
        )
    return (
        f"small gradients underflow to zero, so {label} stops updating those parameters",
        "no exception: the loss stalls while the weights stop changing",
    )


# --- path-sensitive severity: an error claims the job dies on every path to training -------------------------


def exclusive(a: Call, b: Call) -> bool:
    """The two calls never run together: they sit on opposite sides of one `if`."""
    sides = {br.line: br.taken for br in a.branches}
    return any(br.line in sides and sides[br.line] != br.taken for br in b.branches)


def runs_whenever(a: Call, b: Call) -> bool:
    """`a` runs on every path `b` runs on (inside the same loop body): each `if` side `a` sits in, `b` sits in too."""
    return {(br.line, br.taken) for br in a.branches} <= {(br.line, br.taken) for br in b.branches}


def only_on_some_paths(bug: tuple[Call | None, ...], entry: Call | None) -> str:
    """How the path the bug sits on is chosen, when it is only some of the paths to the training entry: the first
    `if` a bug call sits in that the entry does not ("" when every path to training passes the bug)."""
    shared = {(br.line, br.taken) for br in entry.branches} if entry is not None else set()
    for call in bug:
        if call is None:
            continue
        for br in call.branches:
            if (br.line, br.taken) not in shared:
                return br.describe()
    return ""


def path_severity(severity: str, path: str) -> str:
    """An error on only some paths is at most a warning."""
    return "warning" if path and severity in ("", "error") else severity


def setup_entry(setup: Setup) -> Call | None:
    """The call that starts training: the Trainer, else the first optimizer."""
    return setup.trainer or (setup.optimizers[0] if setup.optimizers else None)
