"""PD123 master-node-port-in-use: The rendezvous port is taken on the node that will be the master."""

from __future__ import annotations

from ...derive import LaunchPlan
from ...knowledge.launchers import DEFAULT_PORT, address_in_use
from ...model.facts import BusyPort, JobFacts, LaunchFacts, MachineFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule
from ._cluster import _NODE, TORCHRUN, _names, env_value


def master_node(machine: MachineFacts, job: JobFacts | None) -> MachineFacts | None:
    """The node the rendezvous listens on: MASTER_ADDR's, else the allocation's first host."""
    addr, _ = env_value("MASTER_ADDR", job, machine)
    if addr:
        found = next((n for n in machine.nodes if addr in _names(n)), None)
        if found is not None:
            return found
    first = machine.allocation.hosts[0] if machine.allocation and machine.allocation.hosts else ""
    return next((n for n in machine.nodes if first and first in _names(n)), machine.nodes[0] if machine.nodes else None)


@rule(
    "PD123",
    "master-node-port-in-use",
    severity="error",
    phase="launch",
    summary="The rendezvous port is taken on the node that will be the master.",
    what="In a multi-node snapshot, the launch's rendezvous port (`--master_port`, `MASTER_PORT`, the accelerate "
    "config, else 29500) is in use on the master node (MASTER_ADDR's, else the allocation's first).",
    why="Rank 0's rendezvous store listens there; the port is taken, so it cannot listen, and every other node "
    "waits for it until the timeout.",
    error=address_in_use(DEFAULT_PORT),
    fix="Use a port that is free there (`--master_port`, `MASTER_PORT`), derived from the job id so that jobs "
    "differ; or end the process holding it if it is a leftover of yours.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a launch change.",
    related=("PD110",),
    fires=[Example(_NODE, facts="allocation_2x_mixed", launcher=TORCHRUN)],
    silent=[
        Example(_NODE, facts="allocation_2x_h100", launcher=TORCHRUN),
        Example(
            _NODE,
            facts="allocation_2x_mixed",
            launcher="torchrun --nnodes 2 --nproc_per_node 8 --master_port 29517 train.py",
        ),
    ],
)
def master_node_port_in_use(machine: MachineFacts, launch: LaunchFacts, plan: LaunchPlan, job: JobFacts):
    if not machine.nodes or not launch.known:
        return
    master = master_node(machine, job)
    if master is None or master.host is None:
        return
    state = master.host.port_state(plan.port)
    if not isinstance(state, BusyPort):
        return
    holder = f" by pid {state.pid}" + (f" ({state.command})" if state.command else "") if state.pid else ""
    yield Draft(
        f"rendezvous port {plan.port} ({plan.port_source}) is in use on the master node {master.node_name}{holder}",
        evidence=(
            Evidence(None, launch.command, f"rendezvous on port {plan.port}", "launcher"),
            Evidence(None, master.node_name, f"port {plan.port} busy{holder}", "profile"),
        ),
        error=address_in_use(plan.port),
        fix=Fix(
            "a port free on the master: export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000))",
            commands=(f"kill {state.pid}  # on {master.node_name}, if it is a leftover of yours",)
            if state.pid and state.user and state.user == master.host.user
            else (),
        ),
    )
