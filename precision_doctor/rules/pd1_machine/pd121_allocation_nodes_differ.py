"""PD121 allocation-nodes-differ: The allocation's nodes have different GPU models, GPU memory, or driver / CUDA
versions."""

from __future__ import annotations

from ...model.facts import MachineFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule
from ._cluster import _NODE, TORCHRUN


@rule(
    "PD121",
    "allocation-nodes-differ",
    severity="warning",
    phase="launch",
    summary="The allocation's nodes have different GPU models, GPU memory, or driver / CUDA versions.",
    what="A multi-node snapshot whose nodes report different GPU names, memory sizes, NVIDIA driver versions or "
    "CUDA driver versions.",
    why="Every rank waits for the slowest GPU, a batch size tuned on the larger GPU runs out of memory on the "
    "smaller, a precision that one GPU model supports natively is emulated on another, and NCCL across "
    "different drivers is a common source of hangs.",
    error="no error of its own: out of memory on the smaller node, a slow job, or an NCCL hang",
    fix="Constrain the job to one node type (`#SBATCH --constraint=...` or a homogeneous partition), or exclude "
    "the odd node (`#SBATCH --exclude=NODE`).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a scheduling change.",
    fires=[Example(_NODE, facts="allocation_2x_mixed", launcher=TORCHRUN)],
    silent=[Example(_NODE, facts="allocation_2x_h100", launcher=TORCHRUN)],
)
def allocation_nodes_differ(machine: MachineFacts):
    known = [n for n in machine.nodes if n.known and n.gpus]
    differing = []
    for label, of in (
        ("GPU model", lambda n: n.gpus[0].name),
        ("GPU memory", lambda n: f"{n.gpus[0].memory_total_mib} MiB"),
        ("driver", lambda n: n.driver_version),
        ("CUDA driver", lambda n: n.cuda_driver_version),
    ):
        values = {}
        for n in known:
            if of(n):
                values.setdefault(of(n), []).append(n.node_name)
        if len(values) > 1:
            differing.append((label, values))
    if not differing:
        return
    text = "; ".join(
        f"{label}: " + ", ".join(f"{v} on {', '.join(ns)}" for v, ns in values.items()) for label, values in differing
    )
    yield Draft(
        f"the allocation's nodes differ: {text}",
        evidence=tuple(Evidence(None, n.node_name, n.describe(), "profile") for n in known),
        fix=Fix("ask for one node type: #SBATCH --constraint=FEATURE, or --exclude the odd node"),
    )
