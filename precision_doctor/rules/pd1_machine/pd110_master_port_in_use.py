"""PD110 master-port-in-use: The rendezvous port is already taken (often by a crashed run's leftover launcher)."""

from __future__ import annotations

from ...derive import LaunchPlan
from ...derive.launch import command_with_option
from ...knowledge.launchers import DEFAULT_PORT, address_in_use
from ...knowledge.versions import at_least
from ...model.facts import BusyPort, LaunchFacts, MachineFacts, StackFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, LogSignature, rule
from ._launch import ACC_GOOD


@rule(
    "PD110",
    "master-port-in-use",
    severity="error",
    phase="launch",
    summary="The rendezvous port is already taken (often by a crashed run's leftover launcher).",
    what="A multi-process launch whose rendezvous port (`--main_process_port`, `--master_port`, `MASTER_PORT`, the "
    "accelerate config, else 29500) is in use on this node.",
    why="The rendezvous store listens on that port; a second listener fails. torchrun with an explicit port and "
    "multi-node jobs die; accelerate >= 1.8 on one node warns and falls back; torchrun on one node with no port "
    "given (no --master_port, PET_MASTER_PORT or --rdzv_endpoint) listens on 29500 up to torch 2.11 and picks a "
    "free port from torch 2.12 (pytorch#175699); it never reads MASTER_PORT.",
    error=address_in_use(DEFAULT_PORT),
    fix="Use another port: `accelerate launch --main_process_port 29501`, `torchrun --master_port 29501` (or "
    "`--standalone`), `MASTER_PORT=29501`; or end the process that holds it if it is a leftover of yours.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the launch command, which `fix` does not run (any free port works on a "
    "single node).",
    needs=("host",),
    log=LogSignature(
        patterns=(
            r"Address already in use",
            r"EADDRINUSE",
            r"another process is utilizing it",
            r"failed to bind to .*:\d+ \(errno: 98",
        )
    ),
    fires=[
        Example(
            ACC_GOOD,
            machine="l40s_2x_exclusive_stopped",
            launcher="torchrun --nproc_per_node 2 --master_port 29500 train.py",
        ),
        Example(
            ACC_GOOD,
            machine="l40s_2x_exclusive_stopped",
            launcher="torchrun --nproc_per_node 2 train.py",
            versions={"torch": "2.11.0"},
            note="no port given: a static rendezvous on 29500 up to torch 2.11",
        ),
        Example(
            ACC_GOOD,
            machine="l40s_2x_exclusive_stopped",
            launcher="MASTER_PORT=29501 torchrun --nproc_per_node 2 train.py",
            versions={"torch": "2.11.0"},
            note="torchrun reads PET_MASTER_PORT, never MASTER_PORT",
        ),
    ],
    silent=[
        Example(
            ACC_GOOD,
            machine="l40s_2x_exclusive_stopped",
            launcher="torchrun --nproc_per_node 2 train.py",
            note="no port given on torch >= 2.12: torchrun picks a free one",
        ),
        Example(
            ACC_GOOD,
            machine="l40s_2x_exclusive_stopped",
            launcher="PET_MASTER_PORT=29501 torchrun --nproc_per_node 2 train.py",
            versions={"torch": "2.11.0"},
        ),
        Example(
            ACC_GOOD,
            machine="l40s_2x_exclusive_stopped",
            launcher="torchrun --nproc_per_node 2 --master_port 29501 train.py",
        ),
        Example(ACC_GOOD, machine="l40s_2x_exclusive_stopped", launcher="python train.py"),
    ],
)
def master_port_in_use(machine: MachineFacts, launch: LaunchFacts, stack: StackFacts, plan: LaunchPlan):
    lightning = plan.spawner == "lightning"  # Lightning's own launcher: MASTER_PORT, else a free port it finds
    if machine.host is None or launch.standalone or plan.free_port:
        return
    if not lightning and (not launch.known or launch.launcher == "python"):
        return
    if plan.multi_process <= 1 and launch.num_machines <= 1:
        return
    port, explicit, source = plan.port, plan.port_explicit, plan.port_source
    state = machine.host.port_state(port)
    if not isinstance(state, BusyPort) or (lightning and not explicit):
        return
    multi_node = launch.num_machines > 1
    recovers = launch.launcher == "accelerate" and not multi_node and at_least(stack, "accelerate", "1.8")
    holder = ""
    commands = []
    if state.pid:
        holder = f" by pid {state.pid}" + (f" ({state.command})" if state.command else "")
        if state.user and machine.host.user and state.user == machine.host.user:
            commands.append(f"kill {state.pid}  # if it is a leftover of a crashed run")
    free = next((p for p in machine.host.ports_checked if p != port and machine.host.port_state(p) is True), port + 1)
    flag = {
        "accelerate": f"--main_process_port {free}",
        "torchrun": f"--master_port {free}",
        "deepspeed": f"--master_port {free}",
        "fabric": f"--main-port {free}",
    }.get(launch.launcher, f"MASTER_PORT={free}")
    if lightning:
        flag = f"MASTER_PORT={free}"
        commands.insert(0, f"export MASTER_PORT={free}  # or unset MASTER_PORT: Lightning then finds a free port")
    else:
        commands.insert(0, command_with_option(launch, flag))
    yield Draft(
        f"rendezvous port {port} ({source}) is in use{holder}"
        + (": accelerate will warn and fall back to a standalone-like launch" if recovers else ""),
        evidence=(
            (Evidence(None, source, f"Lightning's rendezvous on port {port}", "env"), plan.processes_evidence)
            if lightning
            else (Evidence(None, launch.command, f"rendezvous on port {port}", "launcher"),)
        ),
        severity="warning" if recovers else "",
        error=(
            f"ConnectionError: Tried to launch distributed communication on port `{port}`, but another "
            f"process is utilizing it."
            if launch.launcher == "accelerate"
            else address_in_use(port)
        ),
        fix=Fix(f"launch on a free port: {flag}", applicability=Applicability.DISPLAY, commands=tuple(commands)),
    )
