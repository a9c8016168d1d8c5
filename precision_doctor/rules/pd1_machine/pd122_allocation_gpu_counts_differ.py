"""PD122 allocation-gpu-counts-differ: The allocation's nodes see different numbers of GPUs."""

from __future__ import annotations

from ...model.facts import MachineFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule
from ._cluster import _NODE, TORCHRUN


@rule(
    "PD122",
    "allocation-gpu-counts-differ",
    severity="error",
    phase="launch",
    summary="The allocation's nodes see different numbers of GPUs.",
    what="A multi-node snapshot in which the nodes' visible GPU counts differ (a node with a GPU down, a different "
    "node type, a CUDA_VISIBLE_DEVICES set on one node).",
    why="Launchers start the same number of processes on every node; on the node with fewer GPUs the extra ranks "
    "ask for a device that is not there.",
    error="RuntimeError: CUDA error: invalid device ordinal",
    fix="Ask for the GPUs per node explicitly (`#SBATCH --gpus-per-node=N`) and exclude the node that has fewer "
    "(`#SBATCH --exclude=NODE`).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a scheduling change.",
    fires=[Example(_NODE, facts="allocation_2x_mixed", launcher=TORCHRUN)],
    silent=[Example(_NODE, facts="allocation_2x_h100", launcher=TORCHRUN)],
)
def allocation_gpu_counts_differ(machine: MachineFacts):
    known = [n for n in machine.nodes if n.known]
    counts = {}
    for n in known:
        counts.setdefault(len(n.gpus), []).append(n.node_name)
    if len(counts) < 2:
        return
    yield Draft(
        "the nodes see different GPU counts: "
        + "; ".join(f"{c} on {', '.join(ns)}" for c, ns in sorted(counts.items())),
        evidence=tuple(Evidence(None, n.node_name, f"{len(n.gpus)} GPUs visible", "profile") for n in known),
        fix=Fix(f"#SBATCH --gpus-per-node={min(counts)} (or --exclude the nodes with fewer)"),
    )
