"""PD104 fp8-unsupported: FP8 requested on a GPU below compute capability 8.9 (Ada/Hopper)."""

from __future__ import annotations

from ...derive import Setup, call_evidence, decide
from ...derive.placement import AXOLOTL
from ...model.facts import MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from .._common import (
    gpu_phrase,
    present,
    set_kwarg,
)
from ..registry import Example, LogSignature, rule

# Axolotl's own test: `compute_supports_fp8()` is capability >= (9, 0) (0.18 `cli/config.py:344`), checked by
# `check_fp8` (`utils/schemas/config.py:1785`) before anything loads: an Ada card (sm_89) is refused too.
AXOLOTL_FP8_FROM = (9, 0)

_FP8_LOOP = (
    "from accelerate import Accelerator\nimport torch\nacc = Accelerator(mixed_precision='fp8')\n"
    "model = torch.nn.Linear(8, 8)\nopt = torch.optim.AdamW(model.parameters())\n"
    "model, opt = acc.prepare(model, opt)\n"
)


@rule(
    "PD104",
    "fp8-unsupported",
    severity="error",
    phase="first-step",
    summary="FP8 requested on a GPU below compute capability 8.9 (Ada/Hopper).",
    what='`Accelerator(mixed_precision="fp8")`, `accelerate launch --mixed_precision fp8`, '
    "`transformer_engine.pytorch.fp8_autocast(enabled=True)` or `fp8: true` in a LLaMA-Factory recipe on A100, "
    "V100, T4 or RTX 30xx; `fp8: true` in an Axolotl recipe below compute capability 9.0 (Ada included).",
    why="FP8 tensor cores exist from compute capability 8.9. Transformer Engine asserts; current accelerate warns and "
    "silently trains in FP16 instead. Axolotl tests capability >= 9.0 itself and refuses the config.",
    error="AssertionError: Device compute capability 8.9 or higher required for FP8 execution.",
    fix="Use bf16 on Ampere; run FP8 only on sm_89+/sm_90 with transformer-engine or torchao installed.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: changes the training precision.",
    needs=("machine",),
    log=LogSignature(
        patterns=(
            r"compute capability 8\.9 or higher required for FP8",
            r"requires `transformer_engine` or `MS-AMP`",
            r"no FP8-compatible backend was installed",
        )
    ),
    fires=[
        Example(
            _FP8_LOOP,
            target="a100",
            fixed=(
                "from accelerate import Accelerator\n"
                "import torch\n"
                "acc = Accelerator(mixed_precision='bf16')\n"
                "model = torch.nn.Linear(8, 8)\n"
                "opt = torch.optim.AdamW(model.parameters())\n"
                "model, opt = acc.prepare(model, opt)\n"
            ),
        )
    ],
    silent=[Example(_FP8_LOOP, target="h100")],
)
def fp8_unsupported(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    if not machine.gpus:
        return
    g = machine.gpus[0]
    if setup.amp.value == "fp8" and AXOLOTL in script.imports and g.capability < AXOLOTL_FP8_FROM:
        yield Draft(
            f"fp8: true on {gpu_phrase(machine)}: Axolotl refuses fp8 below compute capability 9.0 when it "
            "validates the config",
            evidence=setup.amp.evidence
            + (Evidence(None, g.name, f"compute capability {g.capability[0]}.{g.capability[1]} < 9.0", "profile"),),
            error="ValueError: fp8 requested, but fp8 is not supported on this GPU",
            fix=Fix("remove `fp8: true` (bf16 on Ampere and Ada), or run it on Hopper", Applicability.DISPLAY),
        )
        return
    if g.fp8:
        return
    cap = Evidence(None, g.name, f"compute capability {g.capability[0]}.{g.capability[1]} < 8.9", "profile")
    if setup.amp.value == "fp8":
        yield Draft(
            f"fp8 mixed precision on {gpu_phrase(machine)}: accelerate falls back to FP16 with a warning",
            evidence=setup.amp.evidence + (cap,),
            severity="warning",
            error="The current device has compute capability of (8, 0) which is insufficient for FP8 mixed "
            "precision training (requires a GPU Hopper/Ada Lovelace or higher, compute capability of "
            "8.9 or higher). Will use FP16 instead.",
            fix=Fix(
                "use mixed_precision='bf16' on this GPU",
                applicability=Applicability.UNSAFE,
                edits=present(set_kwarg(setup.accelerator, "mixed_precision", "'bf16'"))
                if setup.accelerator is not None
                else (),
            ),
        )
    for c in script.of("fp8_autocast"):
        if not decide(c.kwarg("enabled"), machine, stack).is_(False):
            yield Draft(
                f"fp8_autocast on {gpu_phrase(machine)}: Transformer Engine needs compute capability 8.9",
                evidence=(call_evidence(c, "FP8 autocast"), cap),
                fix=Fix("run FP8 only on Ada/Hopper; use bf16 autocast here", applicability=Applicability.UNSAFE),
            )
