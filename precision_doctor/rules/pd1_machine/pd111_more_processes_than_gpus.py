"""PD111 more-processes-than-gpus: The launch starts more processes per node than there are visible GPUs."""

from __future__ import annotations

from ...derive import LaunchPlan
from ...knowledge.lightning import lightning_launch
from ...model.facts import LaunchFacts, MachineFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import gpu_phrase, present, set_kwarg
from ..registry import Example, LogSignature, rule
from ._launch import ACC_GOOD

_LIGHTNING = (
    "import lightning as L\nfrom my_model import LitModel\n"
    "trainer = L.Trainer(accelerator='gpu', devices={devices}, strategy='ddp', precision='bf16-mixed')\n"
    "trainer.fit(LitModel())\n"
)


@rule(
    "PD111",
    "more-processes-than-gpus",
    severity="error",
    phase="launch",
    summary="The launch starts more processes per node than there are visible GPUs.",
    what="`--nproc_per_node` / `--num_processes` larger than the GPUs the job can see (an 8-GPU command on a 4-GPU "
    "node, a narrower CUDA_VISIBLE_DEVICES), or a Lightning `Trainer(devices=8)` / `Fabric(devices=8)` started "
    "with plain python (Lightning starts one process per device itself).",
    why="Each rank selects GPU `local_rank`; ranks beyond the visible count ask for a device that does not exist. "
    "Lightning checks the device ids it is given against the visible GPUs and refuses at `Trainer(...)`.",
    error="RuntimeError: CUDA error: invalid device ordinal",
    fix="Set the process count to the visible GPU count (Lightning: `devices='auto'`).",
    applicability=Applicability.SAFE,
    fix_safety="Safe under DDP, where each GPU holds a full copy whatever their number. Under a strategy that shards "
    "over the processes (Lightning's DeepSpeed or FSDP), fewer processes hold larger shards: the fix is for review, "
    "and the memory rules judge the result.",
    needs=("machine",),
    log=LogSignature(patterns=(r"invalid device ordinal", r"You requested gpu: \[")),
    fires=[
        Example(ACC_GOOD, target="a100:4", launcher="torchrun --nproc_per_node 8 train.py"),
        Example(
            _LIGHTNING.format(devices="8"),
            target="a100:4",
            launcher="python train.py",
            note="Lightning starts one process per device itself",
            fixed=(
                "import lightning as L\n"
                "from my_model import LitModel\n"
                "trainer = L.Trainer(accelerator='gpu', devices='auto', strategy='ddp',"
                " precision='bf16-mixed')\n"
                "trainer.fit(LitModel())\n"
            ),
        ),
    ],
    silent=[
        Example(ACC_GOOD, target="a100:8", launcher="torchrun --nproc_per_node 8 train.py"),
        Example(_LIGHTNING.format(devices="'auto'"), target="a100:4", launcher="python train.py"),
    ],
)
def more_processes_than_gpus(machine: MachineFacts, launch: LaunchFacts, plan: LaunchPlan):
    n, n_ev = plan.processes, plan.processes_evidence
    if not n or not machine.gpus:
        return
    visible = len(machine.gpus)
    lightning = plan.spawner == "lightning" and plan.spawner_call is not None
    found = lightning_launch(plan.spawner_call) if lightning else None
    ids = list(found.device_ids) if found is not None and found.device_ids else list(range(n))
    fits = max(ids) < visible if lightning else n <= visible
    if fits or (not lightning and n <= 1):
        return
    if lightning:
        trainer = plan.spawner_call  # Lightning checks the ids it is given against the visible GPUs itself
        asked = f"GPUs {ids}" if found is not None and found.device_ids else f"{n} GPUs"
        # a strategy that shards the weights and optimizer state over the processes: fewer processes hold larger
        # shards, so the fix moves the job's memory (the memory rules judge the result)
        strategy = trainer.kwargs.get("strategy")
        sharded = strategy is not None and any(w in strategy.text.lower() for w in ("deepspeed", "fsdp"))
        yield Draft(
            f"{trainer.callee.rsplit('.', 1)[-1]}(devices=...) asks for {asked} but only {visible} "
            f"{'are' if visible != 1 else 'is'} visible ({gpu_phrase(machine)})",
            evidence=(n_ev,),
            error=f"MisconfigurationException: You requested gpu: {ids}\n But your machine only "
            f"has: {list(range(visible))}",
            fix=Fix(
                f"devices={visible}, or devices='auto' (every visible GPU)"
                + (f"; {strategy.text} then shards over {visible} GPU(s): more memory on each" if sharded else ""),
                applicability=Applicability.UNSAFE if sharded else Applicability.SAFE,
                edits=present(set_kwarg(trainer, "devices", "'auto'")),
            ),
        )
        return
    yield Draft(
        f"{n} processes per node but only {visible} GPU{'s' if visible != 1 else ''} visible ({gpu_phrase(machine)})",
        evidence=(n_ev,),
        fix=Fix(
            f"launch {visible} processes",
            applicability=Applicability.SAFE,
            commands=(
                f"--nproc_per_node {visible}" if launch.launcher == "torchrun" else f"--num_processes {visible}",
            ),
        ),
    )
