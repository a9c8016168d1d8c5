"""PD115 gpu-memory-in-use: A visible GPU already has memory in use by another live process."""

from __future__ import annotations

from ...model.facts import MachineFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, LogSignature, rule
from ._launch import describe_process


@rule(
    "PD115",
    "gpu-memory-in-use",
    severity="warning",
    phase="load",
    summary="A visible GPU already has memory in use by another live process.",
    what="A GPU the job will use on which a running process (an inference server, a notebook, another job) holds "
    "more than 1 GiB.",
    why="The job gets only what is left: an OOM at load or at the first large batch, and contended compute.",
    error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...",
    fix="Use free GPUs (`CUDA_VISIBLE_DEVICES`) or wait for the other process; ask its owner before ending it.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    needs=("machine",),
    log=LogSignature(from_logs=False),
    fires=[Example("import torch\n", machine="h100_8x")],
    silent=[
        Example("import torch\n", machine="titan_rtx"),
        Example("import torch\n", machine="h100_8x", env={"CUDA_VISIBLE_DEVICES": "0,1,2"}),
    ],
)
def gpu_memory_in_use(machine: MachineFacts):
    for g in machine.gpus:
        live = [p for p in g.processes if not p.stale and p.used_mib >= 1024]
        if not live:
            continue
        used = sum(p.used_mib for p in live) / 1024
        free_gpus = [str(x.index) for x in machine.gpus if not x.processes]
        yield Draft(
            f"GPU {g.index} ({g.name}) has {used:.1f} GiB of {g.memory_total_mib / 1024:.0f} GiB in use by "
            + ", ".join(describe_process(p, machine) for p in live),
            evidence=(Evidence(None, f"GPU {g.index}", f"{used:.1f} GiB in use", "profile"),),
            fix=Fix(
                "use the free GPUs" + (f": CUDA_VISIBLE_DEVICES={','.join(free_gpus)}" if free_gpus else ""),
                applicability=Applicability.UNSAFE,
            ),
        )
