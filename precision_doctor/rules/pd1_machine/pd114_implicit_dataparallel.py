"""PD114 implicit-dataparallel: A single-process Trainer on a node with several GPUs wraps the model in
nn.DataParallel."""

from __future__ import annotations

from ...derive import LaunchPlan, Setup, call_evidence
from ...derive.launch import one_process
from ...model.facts import LaunchFacts, MachineFacts, StackFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from .._common import gpu_phrase
from ..registry import Example, rule
from ._launch import TRAINER


@rule(
    "PD114",
    "implicit-dataparallel",
    severity="warning",
    phase="wrap",
    summary="A single-process Trainer on a node with several GPUs wraps the model in nn.DataParallel.",
    what="`Trainer` started with plain `python` where more than one GPU is visible and the model is neither spread "
    "over GPUs by `device_map` nor quantized: Trainer's `_wrap_model` applies `nn.DataParallel` "
    "(`args.n_gpu > 1`).",
    why="DataParallel replicates the model every step from one process: slow, GPU 0 overloaded, the effective batch "
    "size and the logged step count change with the GPU count, and autocast's dtype is not carried into its "
    "worker threads.",
    error="no error: log line `Training with DataParallel so batch size has been adjusted to: ...`",
    fix="Launch DDP (`accelerate launch` / `torchrun --nproc_per_node N`), or restrict the job to one GPU "
    "(`CUDA_VISIBLE_DEVICES=0`).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a launch change.",
    needs=("machine",),
    related=("PD208", "PD301"),
    fires=[
        Example(TRAINER.format(dm=""), target="a100:2", launcher="python train.py"),
        Example(TRAINER.format(dm=", device_map={'': 0}"), target="a100:2", launcher="python train.py"),
        Example(
            TRAINER.format(dm="").replace("fp16=True", "bf16=True").replace("torch.float32", "torch.bfloat16"),
            target="a100:2",
            launcher="python train.py",
            note="bf16 weights: no autocast under DataParallel from transformers 4.30, so slow, not a crash",
        ),
    ],
    silent=[
        Example(TRAINER.format(dm=""), target="a100:2", launcher="torchrun --nproc_per_node 2 train.py"),
        Example(TRAINER.format(dm=", device_map='auto'"), target="a100:2", launcher="python train.py"),
        Example(TRAINER.format(dm=""), target="a100:1", launcher="python train.py"),
    ],
)
def implicit_dataparallel(
    setup: Setup, machine: MachineFacts, launch: LaunchFacts, stack: StackFacts, plan: LaunchPlan
):
    if setup.style != "trainer" or len(machine.gpus) < 2 or plan.spawner:
        return  # (a tool that starts a process per GPU itself: llamafactory-cli, Lightning)
    if one_process(launch, plan) == "no":
        return  # another launcher, or several copies of python (`mpirun -np 2 python`): DDP ranks, if any
    if setup.placement.trainer_wrap != "DataParallel" or setup.placement.dataparallel_crash_reasons:
        return  # no wrap, or one that crashes: PD301 reports that
    n = len(machine.gpus)
    yield Draft(
        f"started as one process with {n} GPUs visible, Trainer wraps the model in nn.DataParallel",
        evidence=(
            Evidence(
                None,
                launch.command or "python (no --launcher given)",
                "a single process",
                "launcher" if launch.known else "assumed",
            ),
            Evidence(None, gpu_phrase(machine), f"{n} GPUs visible", "profile"),
        )
        + ((call_evidence(setup.model_load, "placed on one device"),) if setup.model_load else ()),
        confidence="certain" if launch.known else "likely",
        fix=Fix(
            f"run DDP instead: torchrun --nproc_per_node {n} train.py (or CUDA_VISIBLE_DEVICES=0 for one GPU)",
            applicability=Applicability.UNSAFE,
            commands=(f"torchrun --nproc_per_node {n} {setup.path}", f"CUDA_VISIBLE_DEVICES=0 python {setup.path}"),
        ),
    )
