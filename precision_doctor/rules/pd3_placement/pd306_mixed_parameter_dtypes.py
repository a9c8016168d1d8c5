"""PD306 mixed-parameter-dtypes: The live model holds float parameters of several dtypes where one is expected."""

from __future__ import annotations

from ...derive.live import FLOATS, live_evidence
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule


@rule(
    "PD306",
    "mixed-parameter-dtypes",
    severity="warning",
    phase="first-step",
    summary="The live model holds float parameters of several dtypes where one is expected.",
    what="After loading, the model's (non-adapter) float parameters are of more than one dtype — e.g. an fp32 vision "
    "tower beside a bf16 language model, or modules a custom cast missed. LoRA adapters in fp32 on a half base "
    "are peft's design and are not counted.",
    why="Mixed dtypes make activations cross dtype boundaries: without autocast the matmul at the boundary fails, "
    "FSDP cannot flatten the unit, and a foreach optimizer keeps per-dtype groups whose state may drift.",
    error="RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16",
    fix="Load the whole model in one dtype (`dtype=` covers every submodule), cast the stragglers once before the "
    "optimizer is built, or train under autocast so the boundaries are cast for you.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    needs=("live",),
    fires=[
        Example(
            "import torch\n",
            live={
                "ended": "stopped",
                "stopped_at": "Trainer.train",
                "model": {
                    "param_dtypes": {
                        "visual.blocks": {"float32": 390},
                        "model.layers": {"bfloat16": 336},
                        "lm_head": {"bfloat16": 1},
                    },
                    "trainable_dtypes": {"bfloat16": 337},
                },
            },
        )
    ],
    silent=[
        Example(
            "import torch\n",
            live={
                "ended": "stopped",
                "stopped_at": "Trainer.train",
                "model": {
                    "param_dtypes": {"model.layers": {"bfloat16": 336}, "lm_head": {"bfloat16": 1}},
                    "adapter_dtypes": {"float32": 64},
                    "trainable_dtypes": {"float32": 64},
                },
            },
        )
    ],
)
def mixed_parameter_dtypes(live):
    by_dtype: dict[str, list[str]] = {}
    for prefix, counts in live.model.param_dtypes.items():
        for dtype, n in counts.items():
            if dtype in FLOATS and n:
                by_dtype.setdefault(dtype, []).append(f"{prefix}: {dtype} x{n}")
    if len(by_dtype) < 2:
        return
    parts = "; ".join(", ".join(v) for _, v in sorted(by_dtype.items()))
    yield Draft(
        f"the loaded model mixes {' and '.join(sorted(by_dtype))} parameters ({parts})",
        evidence=(live_evidence(live, parts),),
        fix=Fix(
            "load every submodule in one dtype (dtype=...), or cast the stragglers before building the optimizer",
            applicability=Applicability.UNSAFE,
        ),
    )
