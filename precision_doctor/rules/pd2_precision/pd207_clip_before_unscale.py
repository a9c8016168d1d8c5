"""PD207 clip-before-unscale: Gradients clipped while still multiplied by the loss scale."""

from __future__ import annotations

from ...derive import Setup, call_evidence
from ...model.facts import ScriptFacts
from ...model.findings import Applicability, Draft, Edit, Fix
from .._common import exclusive, runs_whenever
from ..registry import Example, rule
from ._amp_loop import LOOP_HEAD


def _scaler_targets(script: ScriptFacts) -> set[str]:
    return {c.target for c in script.of("grad_scaler") if c.target}


@rule(
    "PD207",
    "clip-before-unscale",
    severity="warning",
    phase="later-steps",
    summary="Gradients clipped while still multiplied by the loss scale.",
    what="`clip_grad_norm_` after `scaler.scale(loss).backward()` without `scaler.unscale_(optimizer)` in between.",
    why="Until unscale_, every gradient is multiplied by the loss scale (65536 at first): the norm is never what "
    "max_norm means, so clipping either always or never triggers.",
    error="no exception: clipping has no effect (or clips everything); flat learning curves",
    fix="Call `scaler.unscale_(optimizer)` right before clipping, then `scaler.step(optimizer)`; `scaler.update()`. "
    "With accelerate use `accelerator.clip_grad_norm_` (it unscales).",
    applicability=Applicability.SAFE,
    fix_safety="Safe: unscale_ before clipping is what GradScaler documents.",
    fires=[
        Example(
            LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
            "    scaler.scale(loss).backward()\n"
            "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "    scaler.step(opt)\n    scaler.update()\n",
            fixed=LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
            "    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n"
            "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "    scaler.step(opt)\n    scaler.update()\n",
        ),
        Example(
            LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor step, x in enumerate(loader):\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
            "    scaler.scale(loss).backward()\n    if step % 2 == 0:\n        scaler.unscale_(opt)\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)\n"
            "    scaler.step(opt)\n    scaler.update()\n",
            note="the unscale_ runs on even steps only: the second clip sees scaled gradients on odd ones",
        ),
    ],
    silent=[
        Example(
            LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
            "    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n"
            "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "    scaler.step(opt)\n    scaler.update()\n"
        ),
        Example(
            LOOP_HEAD + "import sys\nuse_amp = sys.argv[1] == 'amp'\nscaler = torch.amp.GradScaler('cuda')\n"
            "for x in loader:\n    loss = model(x).sum()\n    if use_amp:\n"
            "        scaler.scale(loss).backward()\n        scaler.unscale_(opt)\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "        scaler.step(opt)\n        scaler.update()\n    else:\n        loss.backward()\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        opt.step()\n",
            note="the clip in the else branch has no scaler on its path",
        ),
    ],
)
def clip_before_unscale(script: ScriptFacts, setup: Setup):
    scalers = _scaler_targets(script)
    if not scalers:
        return
    scale_calls = [m for m in setup.methods if m.receiver in scalers and m.callee.endswith(".scale")]
    unscales = [m for m in setup.methods if m.receiver in scalers and m.callee.endswith(".unscale_")]
    accelerators = {c.target for c in script.of("accelerator")}
    for clip in setup.clips:
        if clip.receiver in accelerators:
            continue
        before = [
            s
            for s in scale_calls
            if s.scope == clip.scope and s.location.line < clip.location.line and not exclusive(s, clip)
        ]  # a clip on the branch without the scaler clips true gradients
        if not before:
            continue
        last_scale = max(before, key=lambda s: s.location.line)
        between = [
            u
            for u in unscales
            if u.scope == clip.scope
            and last_scale.location.line < u.location.line < clip.location.line
            and not exclusive(u, clip)
        ]
        if any(runs_whenever(u, clip) for u in between):
            continue
        # an unscale_ only on some of the clip's paths (`if step % 2 == 0:`): a second one before the clip would
        # raise on the paths that have both ("unscale_() has already been called ... since the last update()")
        partly = between[0] if between else None
        scaler = last_scale.receiver
        # the optimizer as this scope writes it (`self.optimizer`), from its own scaler.step(...) call
        steps = [
            m
            for m in setup.methods
            if m.receiver == scaler and m.callee.endswith(".step") and m.scope == clip.scope and m.args
        ]
        optimizer = (
            steps[0].args[0].text
            if steps
            else setup.optimizers[0].target
            if setup.optimizers and setup.optimizers[0].target
            else "optimizer"
        )
        if partly is not None:
            yield Draft(
                "gradients are clipped while still multiplied by the loss scale on the paths that skip the "
                f"unscale_ at line {partly.location.line}",
                evidence=(
                    call_evidence(last_scale, "loss scaled"),
                    call_evidence(partly, "unscaled on some paths only"),
                    call_evidence(clip, "clipped, on every path"),
                ),
                fix=Fix(
                    f"call {scaler}.unscale_({optimizer}) once, on every path, before the first clip (move it out of "
                    "its if): a second call before update() raises",
                    applicability=Applicability.DISPLAY,
                ),
            )
            continue
        yield Draft(
            "gradients are clipped while still multiplied by the loss scale (no unscale_ before clipping)",
            evidence=(call_evidence(last_scale, "loss scaled"), call_evidence(clip, "clipped before unscale_")),
            fix=Fix(
                f"call {scaler}.unscale_({optimizer}) right before clipping",
                applicability=Applicability.SAFE,
                edits=(
                    Edit(
                        "insert_before", clip.location.path, clip.location.line, new=f"{scaler}.unscale_({optimizer})"
                    ),
                ),
            ),
        )
