"""PD120 job-one-process-several-gpus: The job runs one plain-python process per node on a node it asks several GPUs
of."""

from __future__ import annotations

from ...derive import Setup
from ...model.facts import JobFacts, LaunchFacts, MachineFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._cluster import LOOP, _job, _tasks, gpus_evidence, launch_evidence


@rule(
    "PD120",
    "job-one-process-several-gpus",
    severity="warning",
    phase="wrap",
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
    fires=[Example(LOOP, job=_job("--nodes=1", "--gres=gpu:4", body="python train.py\n"))],
    silent=[
        Example(LOOP, job=_job("--nodes=1", "--gres=gpu:1", body="python train.py\n")),
        Example(LOOP, job=_job("--nodes=1", "--gres=gpu:4", body="srun torchrun --nproc_per_node 4 train.py\n")),
    ],
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
    yield Draft(
        f"one python process per node with {gpus} GPUs per node: {what}",
        path=job.path,
        evidence=(launch_evidence(job, "one process per node"), gpus_evidence(job)),
        fix=Fix(f"srun torchrun --nproc_per_node {gpus} {setup.path}"),
    )
