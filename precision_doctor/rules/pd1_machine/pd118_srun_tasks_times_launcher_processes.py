"""PD118 srun-tasks-times-launcher-processes: srun starts one launcher per GPU and each launcher starts one process
per GPU: N² processes per node."""

from __future__ import annotations

from ...model.facts import JobFacts, LaunchFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._cluster import (
    LOOP,
    _job,
    _tasks,
    directive,
    launch_evidence,
    n_squared,
    per_task_processes,
)


@rule(
    "PD118",
    "srun-tasks-times-launcher-processes",
    severity="error",
    phase="launch",
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
    fires=[
        Example(
            LOOP,
            job=_job(
                "--nodes=1", "--ntasks-per-node=4", "--gres=gpu:4", body="srun torchrun --nproc_per_node 4 train.py\n"
            ),
        )
    ],
    silent=[
        Example(
            LOOP,
            job=_job(
                "--nodes=1", "--ntasks-per-node=1", "--gres=gpu:4", body="srun torchrun --nproc_per_node 4 train.py\n"
            ),
        ),
        Example(LOOP, job=_job("--nodes=1", "--ntasks-per-node=4", "--gres=gpu:4", body="srun python train.py\n")),
    ],
)
def srun_tasks_times_launcher_processes(job: JobFacts, launch: LaunchFacts):
    if job is None or not launch.known or not n_squared(job, launch):
        return
    tasks, each = _tasks(job), per_task_processes(launch)
    gpus = job.gpus_per_node
    on = f" on {gpus} GPUs" if gpus else ""
    yield Draft(
        f"srun starts {tasks} {launch.launcher} per node and each starts {each} processes: {tasks * each} "
        f"processes per node{on}",
        path=job.path,
        evidence=(launch_evidence(job, f"{each} processes per {launch.launcher}"),)
        + (
            (directive(job, "ntasks-per-node", f"{tasks} tasks per node"),)
            if "ntasks-per-node" in job.directives
            else ()
        ),
        fix=Fix(f"#SBATCH --ntasks-per-node=1 (one {launch.launcher} per node, {each} processes each)"),
    )
