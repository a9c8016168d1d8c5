"""What only the live model shows: parameter dtypes mixed across modules (PD306), and what really happened in
`--live --steps N` — an exception mapped to the rule whose error it is, NaN losses."""

from __future__ import annotations

import math

from ..engine import Example, rule
from ..facts import Facts, LiveFacts
from ..findings import Draft, Evidence, Fix

FLOATS = ("float16", "bfloat16", "float32", "float64")


def live_summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{d} x{n}" for d, n in sorted(counts.items()))


def scaler_on(live: LiveFacts) -> bool:
    """A GradScaler really runs: accelerate made one, the loop made one, or Trainer fp16 on a GPU."""
    if live.accelerator:
        return bool(live.accelerator.get("scaler"))
    if live.grad_scaler:
        return bool(live.grad_scaler.get("enabled"))
    on_gpu = any(d.startswith("cuda") for d in live.model.get("devices", []))
    return bool(live.trainer.get("fp16")) and on_gpu


def live_evidence(live: LiveFacts, what: str) -> Evidence:
    return Evidence(None, f"live model at {live.stopped_at or 'the end of the run'}", what, "live")


@rule(
    "PD306", "mixed-parameter-dtypes", severity="warning", phase="first-step",
    summary="The live model holds float parameters of several dtypes where one is expected.",
    what="After loading, the model's (non-adapter) float parameters are of more than one dtype — e.g. an fp32 vision "
         "tower beside a bf16 language model, or modules a custom cast missed. LoRA adapters in fp32 on a half base "
         "are peft's design and are not counted.",
    why="Mixed dtypes make activations cross dtype boundaries: without autocast the matmul at the boundary fails, "
        "FSDP cannot flatten the unit, and a foreach optimizer keeps per-dtype groups whose state may drift.",
    error="RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16",
    fix="Load the whole model in one dtype (`dtype=` covers every submodule), cast the stragglers once before the "
        "optimizer is built, or train under autocast so the boundaries are cast for you.",
    fix_safety="Display only.",
    needs=("live",),
    fires=[Example("import torch\n", live={"ended": "stopped", "stopped_at": "Trainer.train", "model": {
        "param_dtypes": {"visual.blocks": {"float32": 390}, "model.layers": {"bfloat16": 336}, "lm_head": {
            "bfloat16": 1}}, "trainable_dtypes": {"bfloat16": 337}}})],
    silent=[Example("import torch\n", live={"ended": "stopped", "stopped_at": "Trainer.train", "model": {
        "param_dtypes": {"model.layers": {"bfloat16": 336}, "lm_head": {"bfloat16": 1}},
        "adapter_dtypes": {"float32": 64}, "trainable_dtypes": {"float32": 64}}})],
)
def mixed_parameter_dtypes(live):
    by_dtype: dict[str, list[str]] = {}
    for prefix, counts in live.model.get("param_dtypes", {}).items():
        for dtype, n in counts.items():
            if dtype in FLOATS and n:
                by_dtype.setdefault(dtype, []).append(f"{prefix}: {dtype} x{n}")
    if len(by_dtype) < 2:
        return
    parts = "; ".join(", ".join(v) for _, v in sorted(by_dtype.items()))
    yield Draft(f"the loaded model mixes {' and '.join(sorted(by_dtype))} parameters ({parts})",
                evidence=(live_evidence(live, parts),),
                fix=Fix("load every submodule in one dtype (dtype=...), or cast the stragglers before building the "
                        "optimizer", safe=False))


def outcome_drafts(facts: Facts) -> list[tuple[str, Draft]]:
    """Findings for what really happened: the exception of a --steps run, NaN losses."""
    from ..diagnose import diagnose

    live = facts.live
    out: list[tuple[str, Draft]] = []
    if live.ended == "raised" and live.error:
        lines = live.error.get("traceback", "").splitlines(keepends=True) or [live.error.get("message", "")]
        found = [d for d in diagnose(lines) if d.confidence >= 0.5]
        if found:
            d = found[0]
            where = tuple(Evidence(_loc(f), f.get("code", ""), f"{f.get('function')}() raised here" if i == 0 else
                                   f"in {f.get('function')}()", "live")
                          for i, f in enumerate(reversed(live.error.get("frames", [])[-4:])))
            step = live.optimizer_steps
            out.append((d.rule.id, Draft(
                f"the live run raised it {'before the first optimizer step' if not step else f'after {step} steps'}: "
                f"{live.error.get('type')}: {live.error.get('message', '')[:200]}",
                evidence=where or (live_evidence(live, "exception"),),
                error=f"{live.error.get('type')}: {live.error.get('message', '')[:400]}",
                phase="first-step" if not step else "later-steps",
                fix=Fix(d.rule.fix, safe=False))))
    scales = [s for s in live.loss_scales if _finite(s)]
    if len(scales) >= 3 and scales[-1] < 1.0 and scales[-1] < scales[0]:  # every step overflowed
        out.append(("PD210", Draft(f"GradScaler's loss scale fell from {scales[0]:g} to {scales[-1]:g} in "
                                   f"{len(scales)} steps: fp16 overflows on every step",
                                   evidence=(live_evidence(live, f"loss scales: {scales[:3]} ... {scales[-3:]}"),),
                                   phase="later-steps", confidence="likely",
                                   fix=Fix(REGISTRY_FIX["PD210"], safe=False))))
    bad = next((i for i, x in enumerate(live.losses) if not _finite(x)), None)
    if bad is not None:
        trainable = live.trainable()
        rule_id = "PD204" if "float16" in trainable and not scaler_on(live) else "PD210"
        out.append((rule_id, Draft(f"the loss became {live.losses[bad]} at step {bad + 1} of the live run",
                                   evidence=(live_evidence(live, f"losses: {list(live.losses[:bad + 1])[-5:]}"),),
                                   phase="later-steps", confidence="likely",
                                   fix=Fix(REGISTRY_FIX.get(rule_id, "see the rule"), safe=False))))
    return out


REGISTRY_FIX = {"PD204": "keep fp32 master weights and use fp16 AMP with loss scaling, or bf16 on Ampere+",
                "PD210": "stay on bf16 (Ampere+) or fp32 for models that overflow fp16"}


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _loc(frame: dict):
    from ..facts import Location

    return Location(frame.get("file", ""), int(frame.get("line") or 0)) if frame.get("file") else None
