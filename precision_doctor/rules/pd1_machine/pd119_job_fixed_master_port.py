"""PD119 job-fixed-master-port: The job script fixes the rendezvous port, and another job on a shared node can hold
it."""

from __future__ import annotations

from ...knowledge.launchers import DEFAULT_PORT, TORCHRUN_DEFAULT, address_in_use, torchrun_picks_free_port
from ...model.facts import JobFacts, LaunchFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._cluster import LOOP, _at, _flag, _job, launch_evidence


def _sweep(first: str, second: str) -> str:
    """A job that starts two runs of a sweep at once on one node, each launch with its own port options."""
    return _job(
        "--nodes=1",
        "--gres=gpu:8",
        "--exclusive",
        body=f"CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc_per_node 4{first} train.py --lr 1e-5 &\n"
        f"CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --nproc_per_node 4{second} train.py --lr 3e-5 &\nwait\n",
    )


@rule(
    "PD119",
    "job-fixed-master-port",
    severity="warning",
    escalates_to="error",
    phase="launch",
    summary="The job script fixes the rendezvous port, and another job on a shared node can hold it.",
    what="`export MASTER_PORT=29500` or `--master_port 29500` written as a number in a job that does not ask for "
    "whole nodes (`--exclusive`); an error when the job itself starts two launches at once (`torchrun ... &`, "
    "a sweep) on one port: written, or deepspeed's and a multi-process accelerate launch's default 29500 "
    "(single-node torchrun with none given picks a free one).",
    why="Jobs that share a node share its ports: the second job with the same fixed port cannot listen and dies at "
    "the rendezvous; which job fails depends on where the scheduler puts it.",
    error=address_in_use(DEFAULT_PORT),
    fix="Derive the port from the job id: `export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000))`, or ask for whole "
    "nodes with `#SBATCH --exclusive`.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the job script.",
    related=("PD110",),
    fires=[
        Example(
            LOOP,
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:4",
                body="export MASTER_PORT=29500\nsrun torchrun --nnodes 2 --nproc_per_node 4 train.py\n",
            ),
        ),
        Example(
            LOOP,
            job=_sweep(" --master_port 29500", " --master_port 29500"),
            note="an error: a sweep's two runs start at once on one port",
        ),
        Example(
            LOOP,
            job=_sweep("", ""),
            versions={"torch": "2.11.0"},
            note="no port given: both on torchrun's 29500 up to torch 2.11",
        ),
        Example(
            LOOP,
            job=_job(
                "--nodes=1",
                "--gres=gpu:8",
                "--exclusive",
                body="for lr in 1e-5 3e-5; do\n  torchrun --nproc_per_node 4 --master_port 29500 "
                "train.py --lr $lr &\ndone\nwait\n",
            ),
            note="a loop that starts its launches in the background",
        ),
    ],
    silent=[
        Example(LOOP, job=_sweep("", ""), note="no port given on torch >= 2.12: each picks a free one"),
        Example(
            LOOP,
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:4",
                body="export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000))\n"
                "srun torchrun --nnodes 2 --nproc_per_node 4 train.py\n",
            ),
        ),
        Example(
            LOOP,
            job=_job(
                "-N 2",
                "--ntasks-per-node=1",
                "--gres=gpu:4",
                "--exclusive",
                body="export MASTER_PORT=29500\nsrun torchrun --nnodes 2 --nproc_per_node 4 train.py\n",
            ),
        ),
        Example(LOOP, job=_sweep(" --master_port 29500", " --master_port 29501")),
        Example(LOOP, job=_sweep("", ""), note="torchrun on one node with no port given picks a free one"),
        Example(
            LOOP,
            job=_job(
                "--nodes=1",
                "--gres=gpu:8",
                "--exclusive",
                body="torchrun --nproc_per_node 8 --master_port 29500 train.py --stage 1 &\nwait\n"
                "torchrun --nproc_per_node 8 --master_port 29500 train.py --stage 2 &\nwait\n",
            ),
            note="each launch is waited for before the next",
        ),
        Example(
            LOOP,
            job=_job(
                "--nodes=1",
                "--gres=gpu:8",
                "--exclusive",
                body="i=0\nfor lr in 1e-5 3e-5; do\n  torchrun --nproc_per_node 4 --master_port "
                "$((29500 + i)) train.py --lr $lr &\n  i=$((i + 1))\ndone\nwait\n",
            ),
            note="a port of its own per iteration",
        ),
    ],
)
def job_fixed_master_port(job: JobFacts, launch: LaunchFacts, stack: StackFacts):
    if job is None or not launch.known:
        return
    by_port: dict[tuple[str, int], list[int]] = {}
    for line, port, group in job.background:
        if port == TORCHRUN_DEFAULT:
            port = "" if torchrun_picks_free_port(stack) else f"{DEFAULT_PORT} (torchrun's default before torch 2.12)"
        if port:
            by_port.setdefault((port, group), []).append(line)
    clash = next(((port, lines) for (port, _), lines in by_port.items() if len(lines) > 1), None)
    if clash:  # a sweep starting its runs at once: they share the node, whatever the job asks of the scheduler
        port, lines = clash
        what = (
            f"launches at once (lines {', '.join(map(str, sorted(set(lines))))})"
            if len(set(lines)) > 1
            else f"the launch at line {lines[0]} once per loop iteration, all at once,"
        )
        yield Draft(
            f"the job starts {what} on rendezvous port {port}: all but the first fail to listen",
            path=job.path,
            severity="error",
            error=address_in_use(port.split()[0]),
            evidence=tuple(
                _at(job, line, f"line {line}", f"started in the background on port {port}")
                for line in sorted(set(lines))
            ),
            fix=Fix(
                "give each launch its own port (`--master_port $((MASTER_PORT + 1))` for the second), or "
                "`torchrun --standalone` on one node, which picks a free one (torch >= 2.1)"
            ),
        )
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
        where = launch_evidence(job, "a fixed rendezvous port")
    yield Draft(
        f"the job fixes the rendezvous port at {port} without --exclusive: another job on the same node "
        f"with that port makes one of them fail",
        path=job.path,
        evidence=(where,),
        error=address_in_use(port),
        fix=Fix("export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000)) (or #SBATCH --exclusive)"),
    )
