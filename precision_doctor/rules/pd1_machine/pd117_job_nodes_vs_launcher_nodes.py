"""PD117 job-nodes-vs-launcher-nodes: The job's node count and the launcher's own (`--nnodes`, `--num_machines`)
disagree."""

from __future__ import annotations

from ...model.facts import JobFacts, LaunchFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._cluster import LOOP, SPAWNERS, _flag, _job, _tasks, directive, launch_evidence


@rule(
    "PD117",
    "job-nodes-vs-launcher-nodes",
    severity="error",
    phase="launch",
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
    fires=[
        Example(
            LOOP,
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:4",
                body="srun torchrun --nnodes 1 --nproc_per_node 4 train.py\n",
            ),
        ),
        Example(
            LOOP,
            job=_job("-N 2", "--gres=gpu:4", body="torchrun --nnodes 2 --nproc_per_node 4 train.py\n"),
            note="multi-node job launched without srun",
        ),
    ],
    silent=[
        Example(
            LOOP,
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:4",
                body="srun torchrun --nnodes $SLURM_NNODES --nproc_per_node 4 train.py\n",
            ),
        )
    ],
)
def job_nodes_vs_launcher_nodes(job: JobFacts, launch: LaunchFacts):
    if job is None or not launch.known or launch.launcher not in SPAWNERS:
        return
    nodes = job.nodes
    if nodes > 1 and not job.srun:
        yield Draft(
            f"the job has {nodes} nodes but runs `{launch.launcher}` once, without srun: it starts on the "
            f"first node only",
            path=job.path,
            evidence=(
                directive(job, "nodes", f"{nodes} nodes")
                if "nodes" in job.directives
                else launch_evidence(job, f"{nodes} nodes"),
                launch_evidence(job, "run once"),
            ),
            fix=Fix("start one launcher per node: srun --ntasks-per-node=1 " + launch.command),
        )
        return
    names = {"torchrun": ("--nnodes",), "accelerate": ("--num_machines",), "deepspeed": ("--num_nodes", "--num-nodes")}[
        launch.launcher
    ]
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
    yield Draft(
        f"the job starts {launch.launcher} on {nodes} node{'s' if nodes > 1 else ''} but "
        f"{launch.launcher} expects {want} node{'s' if want > 1 else ''} ({shown})",
        path=job.path,
        evidence=(launch_evidence(job, shown),)
        + ((directive(job, "nodes", f"{nodes} nodes"),) if "nodes" in job.directives else ()),
        fix=Fix(f"{names[0]} $SLURM_NNODES, one launcher per node (srun --ntasks-per-node=1)"),
    )
