"""What the live run's facts mean for the rules: trainable dtypes, whether a GradScaler really ran, and what
happened to the loss and the loss scale over `--steps`."""

from __future__ import annotations

import math

from ..model.facts import LiveFacts
from ..model.findings import Evidence
from ..model.util import record

FLOATS = ("float16", "bfloat16", "float32", "float64")


def live_summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{d} x{n}" for d, n in sorted(counts.items()))


def scaler_on(live: LiveFacts) -> bool:
    """A GradScaler really runs: accelerate made one, the loop made one, or Trainer fp16 on a GPU."""
    if live.accelerator is not None:
        return live.accelerator.scaler
    if live.grad_scaler is not None:
        return live.grad_scaler.enabled
    on_gpu = live.model is not None and any(d.startswith("cuda") for d in live.model.devices)
    return live.trainer is not None and live.trainer.fp16 and on_gpu


def live_evidence(live: LiveFacts, what: str) -> Evidence:
    return Evidence(None, f"live model at {live.stopped_at or 'the end of the run'}", what, "live")


@record
class LossHistory:
    """The losses and GradScaler scales of a `--steps` run, read for the two ways fp16 training fails."""

    first_bad_step: int | None  # 1-based step of the first NaN/inf loss
    bad_loss: object = None
    scale_collapse: tuple[float, float, int] | None = (
        None  # (first scale, last scale, steps) when every step overflowed
    )


def loss_history(live: LiveFacts) -> LossHistory:
    bad = next((i for i, x in enumerate(live.losses) if not finite(x)), None)
    scales = [s for s in live.loss_scales if finite(s)]
    collapse = None
    if len(scales) >= 3 and scales[-1] < 1.0 and scales[-1] < scales[0]:
        collapse = (scales[0], scales[-1], len(scales))
    return LossHistory(None if bad is None else bad + 1, None if bad is None else live.losses[bad], collapse)


def finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False
