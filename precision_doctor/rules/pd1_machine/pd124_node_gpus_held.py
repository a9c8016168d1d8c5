"""PD124 node-gpus-held: A GPU on one of the allocation's nodes is held: a stale context, an exclusive GPU in use, or
memory in use."""

from __future__ import annotations

from ...model.facts import MachineFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule
from ._cluster import _NODE, TORCHRUN


@rule(
    "PD124",
    "node-gpus-held",
    severity="error",
    phase="launch",
    summary="A GPU on one of the allocation's nodes is held: a stale context, an exclusive GPU in use, or memory in "
    "use.",
    what="In a multi-node snapshot, a node whose GPUs hold stale CUDA contexts (stopped, zombie or orphaned "
    "processes), Exclusive_Process GPUs that a process already uses, or more than 1 GiB used by a live process.",
    why="The job's rank on that node cannot create its context (exclusive mode) or finds the memory gone, and a "
    "multi-node job dies when any one rank does.",
    error="RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable (or CUDA out of memory on "
    "that node)",
    fix="End the stale processes on that node (they are yours: `srun -w NODE --overlap kill PID`), or exclude it "
    "(`#SBATCH --exclude=NODE`) and tell the admins.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: processes on another node.",
    escalates_to="error",
    fires=[Example(_NODE, facts="allocation_2x_mixed", launcher=TORCHRUN)],
    silent=[Example(_NODE, facts="allocation_2x_h100", launcher=TORCHRUN)],
)
def node_gpus_held(machine: MachineFacts):
    for node in machine.nodes:
        problems, fatal = [], False
        for g in node.gpus:
            stale = [p for p in g.processes if p.stale]
            live = [p for p in g.processes if not p.stale]
            if stale:
                fatal = True
                problems.append(
                    f"GPU {g.index}: stale context of pid "
                    + ", ".join(
                        f"{p.pid} ({p.status}{', parent gone' if p.parent_alive is False else ''})" for p in stale
                    )
                )
            if g.compute_mode == "Exclusive_Process" and live:
                fatal = True
                problems.append(f"GPU {g.index}: Exclusive_Process and in use by pid {live[0].pid}")
            elif sum(p.used_mib for p in live) >= 1024:
                problems.append(
                    f"GPU {g.index}: {sum(p.used_mib for p in live) / 1024:.1f} GiB in use by pid "
                    + ", ".join(str(p.pid) for p in live)
                )
        if problems:
            yield Draft(
                f"node {node.node_name}: " + "; ".join(problems),
                severity=None if fatal else "warning",
                evidence=(Evidence(None, node.node_name, "; ".join(problems), "profile"),),
                fix=Fix(f"clear node {node.node_name} or exclude it: #SBATCH --exclude={node.node_name}"),
            )
