"""The job script and the allocation it runs on (PD116-PD126): processes per node against the GPUs the job asks for,
nodes against the launcher's own node count, a rendezvous port fixed in the script, one process driving several
GPUs; and, over a multi-node snapshot, nodes that differ, a busy port on the master node, GPUs already held on any
node, a MASTER_ADDR outside the allocation and a NCCL_SOCKET_IFNAME a node lacks."""

from __future__ import annotations

import shlex

from ..derive import LaunchPlan, Setup
from ..model.facts import KNOWN, BusyPort, JobFacts, LaunchFacts, Location, MachineFacts
from ..model.findings import Applicability, Draft, Evidence, Fix
from .registry import Example, rule

SPAWNERS = ("torchrun", "accelerate", "deepspeed")  # launchers that start one process per GPU themselves
_TRAIN = ("import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
          "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
          "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n")
_LOOP = ("import torch\nmodel = torch.nn.Linear(8, 8).cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
         "for _ in range(10):\n    model(torch.randn(4, 8, device='cuda')).sum().backward()\n    opt.step()\n")


def _job(*directives: str, body: str) -> str:
    return "#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body


def _at(job: JobFacts, line: int, excerpt: str, note: str) -> Evidence:
    return Evidence(Location(job.path, line), excerpt, note, "job-script")


def _directive(job: JobFacts, name: str, note: str) -> Evidence:
    s = job.directives[name]
    return _at(job, s.line, f"#SBATCH --{name}={s.value}", note)


def _launch_evidence(job: JobFacts, note: str) -> Evidence:
    return _at(job, job.launch_line, ("srun " if job.srun else "") + job.launch, note)


def _flag(command: str, *names: str) -> str | None:
    """The value of a launcher flag as written in the (expanded) command, or None when it is not given."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if name in names:
            return value if eq else (words[i + 1] if i + 1 < len(words) else "")
    return None


def per_task_processes(launch: LaunchFacts) -> int | None:
    """Processes one launcher invocation starts on its node; None when the launch does not say."""
    if launch.launcher == "python":
        return 1
    if launch.launcher in SPAWNERS:
        v = launch.num_processes
        if v.state == KNOWN and isinstance(v.value, int):
            return v.value
        if launch.launcher == "torchrun" and _flag(launch.command, "--nproc_per_node", "--nproc-per-node") is None:
            return 1  # torchrun's default
    return None


def _tasks(job: JobFacts) -> int | None:
    """Copies of the launch line on each node: srun's tasks per node, or one (the batch step) without srun."""
    return job.tasks_per_node if job.srun else 1


def _gpus_evidence(job: JobFacts) -> Evidence:
    name = next((n for n in ("gpus-per-node", "gres", "gpus-per-task") if n in job.directives), "")
    return _directive(job, name, f"{job.gpus_per_node} GPUs per node") if name else \
        _launch_evidence(job, f"{job.gpus_per_node} GPUs per node")


def _n_squared(job: JobFacts, launch: LaunchFacts) -> bool:
    tasks, each = _tasks(job), per_task_processes(launch)
    return bool(job.srun and tasks and tasks > 1 and launch.launcher in SPAWNERS and each and each > 1)


@rule(
    "PD116", "job-processes-exceed-gpus", severity="error", phase="launch",
    summary="The job starts more processes per node than the GPUs it asks each node for.",
    what="A job script whose tasks per node times the processes each launcher starts (`--nproc_per_node`, "
         "`--num_processes`) is more than its `--gres=gpu:N` / `--gpus-per-node`.",
    why="Under SLURM a job sees only the GPUs it was given; each rank selects GPU `LOCAL_RANK`, and the ranks past "
        "the granted count ask for a device that is not there.",
    error="RuntimeError: CUDA error: invalid device ordinal",
    fix="Ask for as many GPUs per node as processes per node (`#SBATCH --gres=gpu:N`), or start fewer processes.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    related=("PD111",),
    fires=[Example(_LOOP, job=_job("--nodes=1", "--ntasks-per-node=1", "--gres=gpu:2",
                                   body="srun torchrun --nproc_per_node 4 train.py\n"))],
    silent=[Example(_LOOP, job=_job("--nodes=1", "--ntasks-per-node=1", "--gres=gpu:4",
                                    body="srun torchrun --nproc_per_node 4 train.py\n"))],
)
def job_processes_exceed_gpus(job: JobFacts, launch: LaunchFacts):
    if job is None or not launch.known or job.gpus_per_node is None or _n_squared(job, launch):
        return
    tasks, each = _tasks(job), per_task_processes(launch)
    if not tasks or not each or tasks * each <= job.gpus_per_node:
        return
    n, gpus = tasks * each, job.gpus_per_node
    yield Draft(f"{n} processes per node ({tasks} task{'s' if tasks > 1 else ''} × {each}) but the job asks for "
                f"{gpus} GPU{'s' if gpus != 1 else ''} per node", path=job.path,
                evidence=(_launch_evidence(job, f"{each} processes per launcher"), _gpus_evidence(job)),
                fix=Fix(f"ask for {n} GPUs per node (#SBATCH --gres=gpu:{n}) or start {gpus} processes"))


@rule(
    "PD117", "job-nodes-vs-launcher-nodes", severity="error", phase="launch",
    summary="The job's node count and the launcher's own (`--nnodes`, `--num_machines`) disagree.",
    what="`#SBATCH --nodes=N` with `srun torchrun --nnodes M` / `accelerate launch --num_machines M` where M is not N, "
         "or a multi-node job whose launcher runs once, on the first node only (no `srun`).",
    why="The rendezvous waits for the launcher's count of nodes: too few join and it times out; more join and the "
        "extra nodes are refused or run a job of their own. Without srun the batch step runs the launcher on the "
        "first node only and the other nodes sit idle (or it waits for them forever).",
    error="torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError (or the job trains on one node while "
          "the others idle)",
    fix="Pass the job's node count: `--nnodes $SLURM_NNODES` / `--num_machines $SLURM_NNODES`, and start the "
        "launcher once per node with `srun --ntasks-per-node=1`.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    fires=[Example(_LOOP, job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:4",
                                   body="srun torchrun --nnodes 1 --nproc_per_node 4 train.py\n")),
           Example(_LOOP, job=_job("-N 2", "--gres=gpu:4",
                                   body="torchrun --nnodes 2 --nproc_per_node 4 train.py\n"),
                   note="multi-node job launched without srun")],
    silent=[Example(_LOOP, job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:4",
                                    body="srun torchrun --nnodes $SLURM_NNODES --nproc_per_node 4 train.py\n"))],
)
def job_nodes_vs_launcher_nodes(job: JobFacts, launch: LaunchFacts):
    if job is None or not launch.known or launch.launcher not in SPAWNERS:
        return
    nodes = job.nodes
    if nodes > 1 and not job.srun:
        yield Draft(f"the job has {nodes} nodes but runs `{launch.launcher}` once, without srun: it starts on the "
                    f"first node only", path=job.path,
                    evidence=(_directive(job, "nodes", f"{nodes} nodes") if "nodes" in job.directives else
                              _launch_evidence(job, f"{nodes} nodes"), _launch_evidence(job, "run once")),
                    fix=Fix("start one launcher per node: srun --ntasks-per-node=1 " + launch.command))
        return
    names = {"torchrun": ("--nnodes",), "accelerate": ("--num_machines",),
             "deepspeed": ("--num_nodes", "--num-nodes")}[launch.launcher]
    written = _flag(launch.command, *names)
    if written is None and launch.launcher == "deepspeed":
        return  # deepspeed reads its hosts from the hostfile
    if written is not None and not written.isdigit():
        return  # a range (1:4) or a value set at run time
    if not job.srun or _tasks(job) != 1:
        return  # several launchers per node: PD118's finding
    launchers = nodes
    want = int(written) if written is not None else 1
    if want == launchers:
        return
    shown = f"{names[0]} {written}" if written is not None else f"{names[0]} not given (1)"
    yield Draft(f"the job starts {launch.launcher} on {nodes} node{'s' if nodes > 1 else ''} but "
                f"{launch.launcher} expects {want} node{'s' if want > 1 else ''} ({shown})", path=job.path,
                evidence=(_launch_evidence(job, shown),) +
                ((_directive(job, "nodes", f"{nodes} nodes"),) if "nodes" in job.directives else ()),
                fix=Fix(f"{names[0]} $SLURM_NNODES, one launcher per node (srun --ntasks-per-node=1)"))


@rule(
    "PD118", "srun-tasks-times-launcher-processes", severity="error", phase="launch",
    summary="srun starts one launcher per GPU and each launcher starts one process per GPU: N² processes per node.",
    what="`#SBATCH --ntasks-per-node=N` (one task per GPU) with `srun torchrun --nproc_per_node N` / "
         "`srun accelerate launch --num_processes N`: each of the N tasks starts N processes.",
    why="torchrun and accelerate already spawn one process per GPU; under an srun task per GPU the node runs N×N "
        "ranks on N GPUs, N launchers fight over one rendezvous port, and the world size is N times too big.",
    error="RuntimeError: The server socket has failed to listen on any local network address ... EADDRINUSE (or "
          "CUDA out of memory / invalid device ordinal from the extra ranks)",
    fix="One launcher per node: `#SBATCH --ntasks-per-node=1` with `srun torchrun --nproc_per_node N`; or one task "
        "per GPU with `srun python train.py` and no launcher.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    fires=[Example(_LOOP, job=_job("--nodes=1", "--ntasks-per-node=4", "--gres=gpu:4",
                                   body="srun torchrun --nproc_per_node 4 train.py\n"))],
    silent=[Example(_LOOP, job=_job("--nodes=1", "--ntasks-per-node=1", "--gres=gpu:4",
                                    body="srun torchrun --nproc_per_node 4 train.py\n")),
            Example(_LOOP, job=_job("--nodes=1", "--ntasks-per-node=4", "--gres=gpu:4",
                                    body="srun python train.py\n"))],
)
def srun_tasks_times_launcher_processes(job: JobFacts, launch: LaunchFacts):
    if job is None or not launch.known or not _n_squared(job, launch):
        return
    tasks, each = _tasks(job), per_task_processes(launch)
    gpus = job.gpus_per_node
    on = f" on {gpus} GPUs" if gpus else ""
    yield Draft(f"srun starts {tasks} {launch.launcher} per node and each starts {each} processes: {tasks * each} "
                f"processes per node{on}", path=job.path,
                evidence=(_launch_evidence(job, f"{each} processes per {launch.launcher}"),) +
                ((_directive(job, "ntasks-per-node", f"{tasks} tasks per node"),)
                 if "ntasks-per-node" in job.directives else ()),
                fix=Fix(f"#SBATCH --ntasks-per-node=1 (one {launch.launcher} per node, {each} processes each)"))


def _sweep(first: str, second: str) -> str:
    """A job that starts two runs of a sweep at once on one node, each launch with its own port options."""
    return _job("--nodes=1", "--gres=gpu:8", "--exclusive",
                body=f"CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc_per_node 4{first} train.py --lr 1e-5 &\n"
                     f"CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --nproc_per_node 4{second} train.py --lr 3e-5 &\nwait\n")


@rule(
    "PD119", "job-fixed-master-port", severity="warning", escalates_to="error", phase="launch",
    summary="The job script fixes the rendezvous port, and another job on a shared node can hold it.",
    what="`export MASTER_PORT=29500` or `--master_port 29500` written as a number in a job that does not ask for "
         "whole nodes (`--exclusive`); an error when the job itself starts two launches at once (`torchrun ... &`, "
         "a sweep) on one port: written, or deepspeed's and a multi-process accelerate launch's default 29500 "
         "(single-node torchrun with none given picks a free one).",
    why="Jobs that share a node share its ports: the second job with the same fixed port cannot listen and dies at "
        "the rendezvous; which job fails depends on where the scheduler puts it.",
    error="RuntimeError: The server socket has failed to listen on any local network address. port: 29500, "
          "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
    fix="Derive the port from the job id: `export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000))`, or ask for whole "
        "nodes with `#SBATCH --exclusive`.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    related=("PD110",),
    fires=[Example(_LOOP, job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:4",
                                   body="export MASTER_PORT=29500\n"
                                        "srun torchrun --nnodes 2 --nproc_per_node 4 train.py\n")),
           Example(_LOOP, job=_sweep(" --master_port 29500", " --master_port 29500"),
                   note="an error: a sweep's two runs start at once on one port"),
           Example(_LOOP, job=_job("--nodes=1", "--gres=gpu:8", "--exclusive",
                                   body="for lr in 1e-5 3e-5; do\n  torchrun --nproc_per_node 4 --master_port 29500 "
                                        "train.py --lr $lr &\ndone\nwait\n"),
                   note="a loop that starts its launches in the background")],
    silent=[Example(_LOOP, job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:4",
                                    body="export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000))\n"
                                         "srun torchrun --nnodes 2 --nproc_per_node 4 train.py\n")),
            Example(_LOOP, job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:4", "--exclusive",
                                    body="export MASTER_PORT=29500\n"
                                         "srun torchrun --nnodes 2 --nproc_per_node 4 train.py\n")),
            Example(_LOOP, job=_sweep(" --master_port 29500", " --master_port 29501")),
            Example(_LOOP, job=_sweep("", ""), note="torchrun on one node with no port given picks a free one"),
            Example(_LOOP, job=_job("--nodes=1", "--gres=gpu:8", "--exclusive",
                                    body="torchrun --nproc_per_node 8 --master_port 29500 train.py --stage 1 &\nwait\n"
                                         "torchrun --nproc_per_node 8 --master_port 29500 train.py --stage 2 &\nwait\n"),
                    note="each launch is waited for before the next"),
            Example(_LOOP, job=_job("--nodes=1", "--gres=gpu:8", "--exclusive",
                                    body="i=0\nfor lr in 1e-5 3e-5; do\n  torchrun --nproc_per_node 4 --master_port "
                                         "$((29500 + i)) train.py --lr $lr &\n  i=$((i + 1))\ndone\nwait\n"),
                    note="a port of its own per iteration")],
)
def job_fixed_master_port(job: JobFacts, launch: LaunchFacts):
    if job is None or not launch.known:
        return
    by_port: dict[tuple[str, int], list[int]] = {}
    for line, port, group in job.background:
        if port:
            by_port.setdefault((port, group), []).append(line)
    clash = next(((port, lines) for (port, _), lines in by_port.items() if len(lines) > 1), None)
    if clash:  # a sweep starting its runs at once: they share the node, whatever the job asks of the scheduler
        port, lines = clash
        what = f"launches at once (lines {', '.join(map(str, sorted(set(lines))))})" if len(set(lines)) > 1 else \
            f"the launch at line {lines[0]} once per loop iteration, all at once,"
        yield Draft(f"the job starts {what} on rendezvous port {port}: all but the first fail to listen",
                    path=job.path, severity="error",
                    evidence=tuple(_at(job, line, f"line {line}", f"started in the background on port {port}")
                                   for line in sorted(set(lines))),
                    fix=Fix("give each launch its own port (`--master_port $((MASTER_PORT + 1))` for the second), or "
                            "leave torchrun's unset on one node, where it picks a free one"))
        return
    if "exclusive" in job.directives:
        return
    exported = job.env.get("MASTER_PORT")
    if exported and exported.value.isdigit():
        where = _at(job, exported.line, f"export MASTER_PORT={exported.value}", "a fixed rendezvous port")
        port = exported.value
    else:
        written = _flag(launch.command, "--master_port", "--master-port", "--main_process_port")
        endpoint = _flag(launch.command, "--rdzv_endpoint", "--rdzv-endpoint") or ""
        port = written if written and written.isdigit() else endpoint.rpartition(":")[2]
        if not port.isdigit():
            return
        where = _launch_evidence(job, "a fixed rendezvous port")
    yield Draft(f"the job fixes the rendezvous port at {port} without --exclusive: another job on the same node "
                f"with that port makes one of them fail", path=job.path, evidence=(where,),
                fix=Fix("export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000)) (or #SBATCH --exclusive)"))


@rule(
    "PD120", "job-one-process-several-gpus", severity="warning", phase="wrap",
    summary="The job runs one plain-python process per node on a node it asks several GPUs of.",
    what="`python train.py` (or `srun python` with one task per node) in a job that asks each node for more than one "
         "GPU, with no launcher to start a process per GPU.",
    why="A Trainer started as one process over several GPUs wraps the model in nn.DataParallel (slow, batch size "
        "multiplied); any other script uses GPU 0 and leaves the rest of the allocation idle.",
    error="no error: `Training with DataParallel so batch size has been adjusted to: ...`, or idle GPUs",
    fix="Start one process per GPU: `srun torchrun --nproc_per_node N train.py` (one task per node), or "
        "`#SBATCH --ntasks-per-node=N` with `srun python train.py` for scripts that read SLURM's ranks.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    related=("PD114",),
    fires=[Example(_LOOP, job=_job("--nodes=1", "--gres=gpu:4", body="python train.py\n"))],
    silent=[Example(_LOOP, job=_job("--nodes=1", "--gres=gpu:1", body="python train.py\n")),
            Example(_LOOP, job=_job("--nodes=1", "--gres=gpu:4", body="srun torchrun --nproc_per_node 4 train.py\n"))],
)
def job_one_process_several_gpus(job: JobFacts, launch: LaunchFacts, setup: Setup, machine: MachineFacts):
    if job is None or not launch.known or launch.launcher != "python" or not setup.trains:
        return
    gpus = job.gpus_per_node
    if not gpus or gpus < 2 or _tasks(job) != 1:
        return
    if setup.placement.device_map in ("spread", "offload"):
        return  # one process that spreads its model over the GPUs uses them all
    trainer = setup.style == "trainer"
    if trainer and machine.known and len(machine.gpus) >= 2:
        return  # the node is known: PD114 reports the DataParallel wrap with the machine's GPUs
    what = "Trainer wraps the model in nn.DataParallel" if trainer else f"{gpus - 1} of them sit idle"
    yield Draft(f"one python process per node with {gpus} GPUs per node: {what}", path=job.path,
                evidence=(_launch_evidence(job, "one process per node"), _gpus_evidence(job)),
                fix=Fix(f"srun torchrun --nproc_per_node {gpus} {setup.path}"))


# --- the allocation: every node of a multi-node snapshot -------------------------------------------

_NODE = "import torch\n"
_TORCHRUN = "torchrun --nnodes 2 --nproc_per_node 8 --master_port 29500 train.py"


def _names(node: MachineFacts) -> set[str]:
    host = node.host
    if host is None:
        return {node.source}
    return {host.hostname, host.node_name, node.source} | {a for addrs in host.interfaces.values() for a in addrs}


def _env_value(name: str, job: JobFacts | None, machine: MachineFacts) -> tuple[str, Evidence | None]:
    """A launch variable's value: the job script's export (literal only), else the one the nodes were probed with."""
    if job is not None and name in job.env:
        s = job.env[name]
        if "$" in s.value or "`" in s.value:
            return "", None
        return s.value, _at(job, s.line, f"export {name}={s.value}", f"{name} in the job script")
    for node in machine.nodes:
        value = node.host.env.get(name, "") if node.host else ""
        if value:
            return value, Evidence(None, f"{name}={value}", f"in the environment on {node.node_name}", "env")
    return "", None


def master_node(machine: MachineFacts, job: JobFacts | None) -> MachineFacts | None:
    """The node the rendezvous listens on: MASTER_ADDR's, else the allocation's first host."""
    addr, _ = _env_value("MASTER_ADDR", job, machine)
    if addr:
        found = next((n for n in machine.nodes if addr in _names(n)), None)
        if found is not None:
            return found
    first = machine.allocation.hosts[0] if machine.allocation and machine.allocation.hosts else ""
    return next((n for n in machine.nodes if first and first in _names(n)), machine.nodes[0] if machine.nodes
                else None)


@rule(
    "PD121", "allocation-nodes-differ", severity="warning", phase="launch",
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
    fires=[Example(_NODE, facts="allocation_2x_mixed", launcher=_TORCHRUN)],
    silent=[Example(_NODE, facts="allocation_2x_h100", launcher=_TORCHRUN)],
)
def allocation_nodes_differ(machine: MachineFacts):
    known = [n for n in machine.nodes if n.known and n.gpus]
    differing = []
    for label, of in (("GPU model", lambda n: n.gpus[0].name), ("GPU memory", lambda n: f"{n.gpus[0].memory_total_mib} MiB"),
                      ("driver", lambda n: n.driver_version), ("CUDA driver", lambda n: n.cuda_driver_version)):
        values = {}
        for n in known:
            if of(n):
                values.setdefault(of(n), []).append(n.node_name)
        if len(values) > 1:
            differing.append((label, values))
    if not differing:
        return
    text = "; ".join(f"{label}: " + ", ".join(f"{v} on {', '.join(ns)}" for v, ns in values.items())
                     for label, values in differing)
    yield Draft(f"the allocation's nodes differ: {text}",
                evidence=tuple(Evidence(None, n.node_name, n.describe(), "profile") for n in known),
                fix=Fix("ask for one node type: #SBATCH --constraint=FEATURE, or --exclude the odd node"))


@rule(
    "PD122", "allocation-gpu-counts-differ", severity="error", phase="launch",
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
    fires=[Example(_NODE, facts="allocation_2x_mixed", launcher=_TORCHRUN)],
    silent=[Example(_NODE, facts="allocation_2x_h100", launcher=_TORCHRUN)],
)
def allocation_gpu_counts_differ(machine: MachineFacts):
    known = [n for n in machine.nodes if n.known]
    counts = {}
    for n in known:
        counts.setdefault(len(n.gpus), []).append(n.node_name)
    if len(counts) < 2:
        return
    yield Draft("the nodes see different GPU counts: " + "; ".join(f"{c} on {', '.join(ns)}"
                                                                   for c, ns in sorted(counts.items())),
                evidence=tuple(Evidence(None, n.node_name, f"{len(n.gpus)} GPUs visible", "profile") for n in known),
                fix=Fix(f"#SBATCH --gpus-per-node={min(counts)} (or --exclude the nodes with fewer)"))


@rule(
    "PD123", "master-node-port-in-use", severity="error", phase="launch",
    summary="The rendezvous port is taken on the node that will be the master.",
    what="In a multi-node snapshot, the launch's rendezvous port (`--master_port`, `MASTER_PORT`, the accelerate "
         "config, else 29500) is in use on the master node (MASTER_ADDR's, else the allocation's first).",
    why="Rank 0's rendezvous store listens there; the port is taken, so it cannot listen, and every other node "
        "waits for it until the timeout.",
    error="RuntimeError: The server socket has failed to listen on any local network address. port: 29500, "
          "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
    fix="Use a port that is free there (`--master_port`, `MASTER_PORT`), derived from the job id so that jobs "
        "differ; or end the process holding it if it is a leftover of yours.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a launch change.",
    related=("PD110",),
    fires=[Example(_NODE, facts="allocation_2x_mixed", launcher=_TORCHRUN)],
    silent=[Example(_NODE, facts="allocation_2x_h100", launcher=_TORCHRUN),
            Example(_NODE, facts="allocation_2x_mixed",
                    launcher="torchrun --nnodes 2 --nproc_per_node 8 --master_port 29517 train.py")],
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
    yield Draft(f"rendezvous port {plan.port} ({plan.port_source}) is in use on the master node "
                f"{master.node_name}{holder}",
                evidence=(Evidence(None, launch.command, f"rendezvous on port {plan.port}", "launcher"),
                          Evidence(None, master.node_name, f"port {plan.port} busy{holder}", "profile")),
                error=f"RuntimeError: The server socket has failed to listen on any local network address. port: "
                      f"{plan.port}, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
                fix=Fix("a port free on the master: export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000))",
                        commands=(f"kill {state.pid}  # on {master.node_name}, if it is a leftover of yours",)
                        if state.pid and state.user and state.user == master.host.user else ()))


@rule(
    "PD124", "node-gpus-held", severity="error", phase="launch",
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
    fires=[Example(_NODE, facts="allocation_2x_mixed", launcher=_TORCHRUN)],
    silent=[Example(_NODE, facts="allocation_2x_h100", launcher=_TORCHRUN)],
)
def node_gpus_held(machine: MachineFacts):
    for node in machine.nodes:
        problems, fatal = [], False
        for g in node.gpus:
            stale = [p for p in g.processes if p.stale]
            live = [p for p in g.processes if not p.stale]
            if stale:
                fatal = True
                problems.append(f"GPU {g.index}: stale context of pid " + ", ".join(
                    f"{p.pid} ({p.status}{', parent gone' if p.parent_alive is False else ''})" for p in stale))
            if g.compute_mode == "Exclusive_Process" and live:
                fatal = True
                problems.append(f"GPU {g.index}: Exclusive_Process and in use by pid {live[0].pid}")
            elif sum(p.used_mib for p in live) >= 1024:
                problems.append(f"GPU {g.index}: {sum(p.used_mib for p in live) / 1024:.1f} GiB in use by pid "
                                + ", ".join(str(p.pid) for p in live))
        if problems:
            yield Draft(f"node {node.node_name}: " + "; ".join(problems), severity=None if fatal else "warning",
                        evidence=(Evidence(None, node.node_name, "; ".join(problems), "profile"),),
                        fix=Fix(f"clear node {node.node_name} or exclude it: #SBATCH --exclude={node.node_name}"))


@rule(
    "PD125", "master-addr-outside-allocation", severity="error", phase="launch",
    summary="MASTER_ADDR names a host that is not one of the allocation's nodes.",
    what="A MASTER_ADDR (exported by the job script or set on the nodes) that is neither a node name, a host name "
         "nor an address of any node in the allocation; or localhost in a multi-node job.",
    why="Every rank connects to MASTER_ADDR for the rendezvous; a host outside the job (a login node, last week's "
        "allocation) never answers, and localhost makes each node wait for itself.",
    error="torch.distributed.DistNetworkError: ... Connection refused (or a rendezvous timeout)",
    fix="Take it from the allocation: `export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | "
        "head -n 1)`.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    fires=[Example(_NODE, facts="allocation_2x_h100",
                   job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:8",
                            body="export MASTER_ADDR=gpu17\nsrun torchrun --nnodes 2 --nproc_per_node 8 train.py\n"))],
    silent=[Example(_NODE, facts="allocation_2x_h100",
                    job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:8",
                             body="export MASTER_ADDR=gpu02\nsrun torchrun --nnodes 2 --nproc_per_node 8 train.py\n")),
            Example(_NODE, facts="allocation_2x_h100",
                    job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:8",
                             body="export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)\n"
                                  "srun torchrun --nnodes 2 --nproc_per_node 8 train.py\n"))],
)
def master_addr_outside_allocation(machine: MachineFacts, job: JobFacts):
    if len(machine.nodes) < 2:
        return
    addr, where = _env_value("MASTER_ADDR", job, machine)
    if not addr:
        return
    local = addr in ("localhost", "127.0.0.1", "::1")
    if not local and any(addr in _names(n) for n in machine.nodes):
        return
    if not local and machine.allocation and addr in machine.allocation.hosts:
        return
    hosts = ", ".join(machine.allocation.hosts if machine.allocation and machine.allocation.hosts
                      else [n.node_name for n in machine.nodes])
    yield Draft(f"MASTER_ADDR={addr} " + ("is this node itself: each node waits for its own rendezvous" if local
                                           else f"is not one of the allocation's nodes ({hosts})"),
                path=job.path if job else "", evidence=(where,),
                fix=Fix('export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'))


def _matches_ifname(spec: str, interfaces: set[str]) -> bool | None:
    """NCCL's NCCL_SOCKET_IFNAME: comma-separated prefixes, `=` for exact names; `^` excludes (None: not judged)."""
    if spec.startswith("^"):
        return None
    exact = spec.startswith("=")
    wanted = [w for w in spec.lstrip("=").split(",") if w]
    return any((i == w) if exact else i.startswith(w) for w in wanted for i in interfaces)


@rule(
    "PD126", "nccl-socket-ifname-missing", severity="error", phase="launch",
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
    fires=[Example(_NODE, facts="allocation_2x_mixed",
                   job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:8",
                            body="export NCCL_SOCKET_IFNAME=ib0\n"
                                 "srun torchrun --nnodes 2 --nproc_per_node 8 train.py\n"))],
    silent=[Example(_NODE, facts="allocation_2x_mixed",
                    job=_job("-N 2", "--ntasks-per-node=1", "--gres=gpu:8",
                             body="export NCCL_SOCKET_IFNAME=eth0\n"
                                  "srun torchrun --nnodes 2 --nproc_per_node 8 train.py\n"))],
)
def nccl_socket_ifname_missing(machine: MachineFacts, job: JobFacts):
    spec, where = _env_value("NCCL_SOCKET_IFNAME", job, machine)
    if not spec or not machine.nodes:
        return
    lacking = [n for n in machine.nodes if n.host and n.host.interfaces
               and _matches_ifname(spec, set(n.host.interfaces)) is False]
    if not lacking:
        return
    common = set.intersection(*(set(n.host.interfaces) for n in machine.nodes if n.host and n.host.interfaces))
    common.discard("lo")
    yield Draft(f"NCCL_SOCKET_IFNAME={spec} matches no interface on " + "; ".join(
                    f"{n.node_name} (has {', '.join(sorted(n.host.interfaces))})" for n in lacking),
                path=job.path if job else "", evidence=(where,) if where else (),
                fix=Fix(f"export NCCL_SOCKET_IFNAME={','.join(sorted(common)) or 'an interface every node has'}"))
