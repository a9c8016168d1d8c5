"""PD116 job-processes-exceed-gpus: The job starts more processes per node than the GPUs it asks each node for."""

from __future__ import annotations

from ...model.facts import JobFacts, LaunchFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._cluster import (
    LOOP,
    _job,
    _tasks,
    gpus_evidence,
    launch_evidence,
    n_squared,
    per_task_processes,
)


@rule(
    "PD116",
    "job-processes-exceed-gpus",
    severity="error",
    phase="launch",
    summary="The job starts more processes per node than the GPUs it asks each node for.",
    what="A job script whose tasks per node times the processes each launcher starts on its node "
    "(`--nproc_per_node`; accelerate's `--num_processes` over its `--num_machines`) is more than its `--gres=gpu:N` "
    "/ `--gpus-per-node`.",
    why="Under SLURM a job sees only the GPUs it was given; each rank selects GPU `LOCAL_RANK`, and the ranks past "
    "the granted count ask for a device that is not there.",
    error="RuntimeError: CUDA error: invalid device ordinal",
    fix="Ask for as many GPUs per node as processes per node (`#SBATCH --gres=gpu:N`), or start fewer processes.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    related=("PD111",),
    fires=[
        Example(
            LOOP,
            job=_job(
                "--nodes=1", "--ntasks-per-node=1", "--gres=gpu:2", body="srun torchrun --nproc_per_node 4 train.py\n"
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
        Example(
            LOOP,
            job=_job(
                "--nodes=4",
                "--ntasks-per-node=1",
                "--gres=gpu:4",
                body="srun accelerate launch --num_processes 16 --num_machines 4 train.py\n",
            ),
            note="accelerate's --num_processes counts every machine's: 4 per node",
        ),
    ],
)
def job_processes_exceed_gpus(job: JobFacts, launch: LaunchFacts):
    if job is None or not launch.known or job.gpus_per_node is None or n_squared(job, launch):
        return
    tasks, each = _tasks(job), per_task_processes(launch)
    if not tasks or not each or tasks * each <= job.gpus_per_node:
        return
    n, gpus = tasks * each, job.gpus_per_node
    yield Draft(
        f"{n} processes per node ({tasks} task{'s' if tasks > 1 else ''} × {each}) but the job asks for "
        f"{gpus} GPU{'s' if gpus != 1 else ''} per node",
        path=job.path,
        evidence=(launch_evidence(job, f"{each} processes per launcher"), gpus_evidence(job)),
        fix=Fix(f"ask for {n} GPUs per node (#SBATCH --gres=gpu:{n}) or start {gpus} processes"),
    )
