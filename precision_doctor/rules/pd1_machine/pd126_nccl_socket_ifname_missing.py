"""PD126 nccl-socket-ifname-missing: NCCL_SOCKET_IFNAME names a network interface that a node of the allocation does
not have."""

from __future__ import annotations

from ...model.facts import JobFacts, MachineFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._cluster import _NODE, _job, env_value


def _matches_ifname(spec: str, interfaces: set[str]) -> bool | None:
    """NCCL's NCCL_SOCKET_IFNAME: comma-separated prefixes, `=` for exact names; `^` excludes (None: not judged)."""
    if spec.startswith("^"):
        return None
    exact = spec.startswith("=")
    wanted = [w for w in spec.lstrip("=").split(",") if w]
    return any((i == w) if exact else i.startswith(w) for w in wanted for i in interfaces)


@rule(
    "PD126",
    "nccl-socket-ifname-missing",
    severity="error",
    phase="launch",
    summary="NCCL_SOCKET_IFNAME names a network interface that a node of the allocation does not have.",
    what="NCCL_SOCKET_IFNAME (exported by the job script or set on the nodes) matching none of the interfaces of "
    "one or more nodes of a multi-node snapshot.",
    why="NCCL bootstraps over the named interface; on a node without it NCCL finds no socket interface and the "
    "process group never forms.",
    error="NCCL WARN Bootstrap : no socket interface found (ncclInternalError / ncclSystemError)",
    fix="Name an interface every node has (the snapshot lists them), or a prefix that matches on each "
    "(`NCCL_SOCKET_IFNAME=ib,eth`).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    fires=[
        Example(
            _NODE,
            facts="allocation_2x_mixed",
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:8",
                body="export NCCL_SOCKET_IFNAME=ib0\nsrun torchrun --nnodes 2 --nproc_per_node 8 train.py\n",
            ),
        )
    ],
    silent=[
        Example(
            _NODE,
            facts="allocation_2x_mixed",
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:8",
                body="export NCCL_SOCKET_IFNAME=eth0\nsrun torchrun --nnodes 2 --nproc_per_node 8 train.py\n",
            ),
        )
    ],
)
def nccl_socket_ifname_missing(machine: MachineFacts, job: JobFacts):
    spec, where = env_value("NCCL_SOCKET_IFNAME", job, machine)
    if not spec or not machine.nodes:
        return
    lacking = [
        n
        for n in machine.nodes
        if n.host and n.host.interfaces and _matches_ifname(spec, set(n.host.interfaces)) is False
    ]
    if not lacking:
        return
    common = set.intersection(*(set(n.host.interfaces) for n in machine.nodes if n.host and n.host.interfaces))
    common.discard("lo")
    yield Draft(
        f"NCCL_SOCKET_IFNAME={spec} matches no interface on "
        + "; ".join(f"{n.node_name} (has {', '.join(sorted(n.host.interfaces))})" for n in lacking),
        path=job.path if job else "",
        evidence=(where,) if where else (),
        fix=Fix(f"export NCCL_SOCKET_IFNAME={','.join(sorted(common)) or 'an interface every node has'}"),
    )
