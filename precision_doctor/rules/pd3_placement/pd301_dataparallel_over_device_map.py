"""PD301 dataparallel-over-device-map: Trainer wraps a placed, quantized or offloaded model in nn.DataParallel, and
the replicas break it."""

from __future__ import annotations

from ...derive import LaunchPlan, Setup, call_evidence
from ...derive.launch import one_process
from ...derive.live import live_evidence
from ...model.facts import LaunchFacts, MachineFacts, MachineOrigin
from ...model.findings import Applicability, Draft, Evidence, Fix
from .._common import gpu_phrase
from ..registry import Example, LogSignature, rule
from ._placement import QLORA, per_rank


def _live_dataparallel(live):
    if live.trainer.wrap != "DataParallel" or live.model is None:
        return
    model = live.model
    reasons = []
    if model.quantized.get("Linear4bit"):
        reasons.append("4-bit bitsandbytes modules")
    if any(v in ("cpu", "disk") for v in (model.device_map or {}).values()):
        reasons.append("offloaded modules behind accelerate hooks")
    if live.trainer.bf16 and "bfloat16" in {d for c in model.param_dtypes.values() for d in c}:
        reasons.append("bf16 weights whose autocast dtype the replica threads lose")
    if not reasons:
        return
    devices = sorted(set((model.device_map or {}).values())) or list(model.devices)
    yield Draft(
        f"confirmed by the live Trainer: args.n_gpu={live.trainer.n_gpu}, is_model_parallel="
        f"{live.trainer.is_model_parallel}, so it wraps the model in nn.DataParallel over "
        f"{', '.join(reasons)}",
        evidence=(live_evidence(live, f"hf_device_map devices: {', '.join(map(str, devices)) or 'none'}"),),
        fix=Fix(
            "launch DDP (torchrun) with device_map={'': local_rank}, or CUDA_VISIBLE_DEVICES=0",
            applicability=Applicability.UNSAFE,
        ),
    )


@rule(
    "PD301",
    "dataparallel-over-device-map",
    severity="error",
    phase="first-step",
    summary="Trainer wraps a placed, quantized or offloaded model in nn.DataParallel, and the replicas break it.",
    what="A Trainer started as one process on a node with several visible GPUs, whose model Trainer does not see as "
    'model-parallel (a single-device `device_map`, `.to("cuda")`, a PEFT/bitsandbytes model), so '
    "`_wrap_model` applies `nn.DataParallel` — to 4-bit modules (before transformers added the 4-bit "
    "exemption), to modules behind offload hooks, or (transformers < 4.30) to bf16 weights whose autocast dtype "
    "the replica threads do not inherit.",
    why="DataParallel replicates the module in worker threads. Quantized and dispatched modules are not replica-safe, "
    "and `parallel_apply` re-enters autocast with the enabled flag only, so bf16 autocast becomes fp16 in the "
    "replicas: activations and weights end up in different dtypes (the logged step count halves when the "
    "wrap begins, then a matmul such as lm_head's fails). Boundaries: from transformers 4.30.0 Trainer enters "
    "no autocast under DataParallel (it skips `accelerator.prepare(model)` for a wrapped model and its "
    "`autocast_smart_context_manager` is a nullcontext; read in the 4.29.2 and 4.30.0 trainer.py), so a "
    "non-quantized, non-offloaded bf16 model there is PD114 (slow, batch and loss doubled), not a crash; from "
    "5.6 (PR #45407) Trainer no longer wraps 4-bit models.",
    error="RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16",
    fix='Launch DDP instead (`torchrun --nproc_per_node N` / `accelerate launch`) with `device_map={"": '
    "local_rank}`, or restrict the job to one GPU (`CUDA_VISIBLE_DEVICES=0`); for genuine model parallelism let "
    '`device_map="auto"` span the GPUs. Setting `training_args._n_gpu = 1` also avoids the wrap but sets a '
    "private attribute.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a launch change.",
    needs=("machine",),
    log=LogSignature(
        patterns=(
            r"mat1 and mat2 must have the same dtype",
            r"expected mat1 and mat2 to have the same dtype",
            r"module must have its parameters and buffers on device cuda:0 \(device_ids\[0\]\)",
            r"Caught RuntimeError in replica \d+ on device \d+",
        ),
        tells=(r"torch/nn/parallel/data_parallel\.py", r"Training with DataParallel", r"parallel_apply\.py"),
        proven=0.35,
        both=0.95,
        tells_alone=0.5,
        halving_progress=True,
    ),
    related=("PD208", "PD114"),
    fires=[
        Example(
            QLORA.format(device_map=", device_map={'': 0}", args=""),
            target="rtx-6000-ada:2",
            launcher="python train.py",
            versions={"transformers": "4.57.1"},
            note="a stage-2 QLoRA load over two GPUs",
        ),
        Example(
            QLORA.format(device_map="", args="").replace("quantization_config=q, ", ""),
            target="a100:2",
            launcher="python train.py",
            versions={"transformers": "4.29.2"},
            note="bf16 weights: Trainer's own bf16 autocast is lost in the replicas",
        ),
    ],
    silent=[
        Example(
            per_rank(QLORA.format(device_map=", device_map={'': 0}", args=", ddp_find_unused_parameters=False")),
            target="rtx-6000-ada:2",
            launcher="torchrun --nproc_per_node 2 train.py",
            versions={"transformers": "4.57.1"},
        ),
        Example(
            QLORA.format(device_map=", device_map={'': 0}", args=""),
            target="rtx-6000-ada:2",
            launcher="python train.py",
            versions={"transformers": "5.23.0"},
        ),
        Example(
            QLORA.format(device_map=", device_map={'': 0}", args=""),
            target="rtx-6000-ada:1",
            launcher="python train.py",
            versions={"transformers": "4.57.1"},
        ),
        Example(
            QLORA.format(device_map="", args="").replace("quantization_config=q, ", ""),
            target="a100:2",
            launcher="python train.py",
            versions={"transformers": "4.30.0"},
            note="no autocast under DataParallel from 4.30: PD114's slow wrap, not a crash",
        ),
    ],
)
def dataparallel_over_device_map(setup: Setup, machine: MachineFacts, launch: LaunchFacts, live, plan: LaunchPlan):
    if live is not None and live.trainer and machine.origin == MachineOrigin.THIS_MACHINE:
        yield from _live_dataparallel(live)  # Trainer's own decision, on this machine's GPUs
        return
    if setup.style != "trainer" or len(machine.gpus) < 2 or one_process(launch, plan) == "no":
        return
    wrap = setup.placement.trainer_wrap
    if (
        wrap == "none"
        and setup.quantized.value == "4bit"
        and not setup.placement.exempts_4bit
        and setup.model_load is not None
    ):
        # A spreading device_map is model parallel only if it really spans GPUs; a 4-bit model often fits on one,
        # and then Trainer wraps it after all (a two-stage recipe whose second stage loads 4-bit). Only the live
        # model tells: say so, as a warning.
        dm = setup.model_load.kwarg("device_map")
        yield Draft(
            f"device_map={dm.text} may place this 4-bit model on a single GPU; Trainer then wraps it in "
            f"nn.DataParallel, which 4-bit modules do not survive on this transformers",
            evidence=(
                call_evidence(setup.model_load, "4-bit model with a device_map decided at load time"),
                Evidence(None, gpu_phrase(machine), f"{len(machine.gpus)} GPUs visible", "profile"),
            ),
            severity="warning",
            confidence="likely",
            fix=Fix(
                f"launch DDP (torchrun --nproc_per_node {len(machine.gpus)}) with device_map={{'': "
                f"local_rank}}, or CUDA_VISIBLE_DEVICES=0; `check --live` confirms the device map",
                applicability=Applicability.UNSAFE,
            ),
        )
        return
    if wrap != "DataParallel":
        return
    reasons = setup.placement.dataparallel_crash_reasons
    if not reasons:
        return  # DataParallel alone is slow, not broken: PD114
    n = len(machine.gpus)
    yield Draft(
        f"started as one process with {n} GPUs visible, Trainer wraps this model in nn.DataParallel, which breaks it",
        evidence=(
            Evidence(None, gpu_phrase(machine), f"{n} GPUs visible", "profile"),
            Evidence(
                None,
                launch.command or "python (no --launcher given)",
                "one process",
                "launcher" if launch.known else "assumed",
            ),
        )
        + tuple(reasons),
        confidence="certain" if launch.known else "likely",
        fix=Fix(
            f"launch DDP: torchrun --nproc_per_node {n} {setup.path} with device_map={{'': local_rank}}; "
            f"or CUDA_VISIBLE_DEVICES=0",
            applicability=Applicability.UNSAFE,
            commands=(f"torchrun --nproc_per_node {n} {setup.path}", f"CUDA_VISIBLE_DEVICES=0 python {setup.path}"),
            notes=(
                "`training_args._n_gpu = 1` avoids the wrap too, through a private "
                "attribute; model.is_parallelizable/model_parallel are lost under PEFT wrapping.",
            ),
        ),
    )
