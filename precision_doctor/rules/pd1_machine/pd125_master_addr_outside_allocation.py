"""PD125 master-addr-outside-allocation: MASTER_ADDR names a host that is not one of the allocation's nodes."""

from __future__ import annotations

from ...model.facts import JobFacts, MachineFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._cluster import _NODE, _job, _names, env_value


@rule(
    "PD125",
    "master-addr-outside-allocation",
    severity="error",
    phase="launch",
    summary="MASTER_ADDR names a host that is not one of the allocation's nodes.",
    what="A MASTER_ADDR (exported by the job script or set on the nodes) that is neither a node name, a host name "
    "nor an address of any node in the allocation; or localhost in a multi-node job.",
    why="Every rank connects to MASTER_ADDR for the rendezvous; a host outside the job (a login node, last week's "
    "allocation) never answers, and localhost makes each node wait for itself.",
    error="torch.distributed.DistNetworkError: ... Connection refused (or a rendezvous timeout)",
    fix='Take it from the allocation: `export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | '
    "head -n 1)`.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    fires=[
        Example(
            _NODE,
            facts="allocation_2x_h100",
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:8",
                body="export MASTER_ADDR=gpu17\nsrun torchrun --nnodes 2 --nproc_per_node 8 train.py\n",
            ),
        )
    ],
    silent=[
        Example(
            _NODE,
            facts="allocation_2x_h100",
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:8",
                body="export MASTER_ADDR=gpu02\nsrun torchrun --nnodes 2 --nproc_per_node 8 train.py\n",
            ),
        ),
        Example(
            _NODE,
            facts="allocation_2x_h100",
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:8",
                body="export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)\n"
                "srun torchrun --nnodes 2 --nproc_per_node 8 train.py\n",
            ),
        ),
    ],
)
def master_addr_outside_allocation(machine: MachineFacts, job: JobFacts):
    if len(machine.nodes) < 2:
        return
    addr, where = env_value("MASTER_ADDR", job, machine)
    if not addr:
        return
    local = addr in ("localhost", "127.0.0.1", "::1")
    if not local and any(addr in _names(n) for n in machine.nodes):
        return
    if not local and machine.allocation and addr in machine.allocation.hosts:
        return
    hosts = ", ".join(
        machine.allocation.hosts
        if machine.allocation and machine.allocation.hosts
        else [n.node_name for n in machine.nodes]
    )
    yield Draft(
        f"MASTER_ADDR={addr} "
        + (
            "is this node itself: each node waits for its own rendezvous"
            if local
            else f"is not one of the allocation's nodes ({hosts})"
        ),
        path=job.path if job else "",
        evidence=(where,),
        fix=Fix('export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'),
    )
