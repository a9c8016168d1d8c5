"""PD109 stale-cuda-context: Zombie, stopped or orphaned processes still hold CUDA contexts and GPU memory."""

from __future__ import annotations

from ...model.facts import MachineFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, LogSignature, rule
from ._launch import describe_process


@rule(
    "PD109",
    "stale-cuda-context",
    severity="error",
    phase="launch",
    summary="Zombie, stopped or orphaned processes still hold CUDA contexts and GPU memory.",
    what="A process that holds a context on a visible GPU but will not run again by itself: stopped (Ctrl-Z, `T` "
    "state), a zombie, an orphan of a crashed launcher, or a pid that no longer exists here.",
    why="Its memory stays allocated (OOM for the next job) and, in Exclusive_Process mode, the GPU refuses the next "
    "context. Crashed distributed runs leave these behind.",
    error="torch.OutOfMemoryError: CUDA out of memory, or CUDA error: CUDA-capable device(s) is/are busy or "
    "unavailable",
    fix="End your own stale processes (the exact commands are given); ask the owner or an admin about anyone "
    "else's. Never kill other users' processes.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: ends processes.",
    needs=("machine",),
    log=LogSignature(
        patterns=(r"CUDA-capable device\(s\) is/are busy or unavailable",), error_is_signature=False, proven=0.6
    ),
    related=("PD108", "PD112"),
    fires=[Example("import torch\n", machine="l40s_2x_exclusive_stopped")],
    silent=[Example("import torch\n", machine="h100_8x"), Example("import torch\n", machine="titan_rtx")],
)
def stale_cuda_context(machine: MachineFacts):
    for g in machine.gpus:
        for p in g.processes:
            if not p.stale:
                continue
            gib = p.used_mib / 1024
            commands: tuple[str, ...] = ()
            if p.mine and p.status == "stopped":
                commands = (f"kill -CONT {p.pid}  # let it finish, or end it:", f"kill -9 {p.pid}")
            elif p.mine and p.status == "zombie":
                commands = (f"kill -9 $(ps -o ppid= -p {p.pid})  # a zombie is cleared by ending its parent",)
            elif p.mine:
                commands = (f"kill -9 {p.pid}",)
            note = (
                ()
                if p.mine
                else (f"pid {p.pid} belongs to {p.user or 'another user'}: ask them or an admin; do not kill it",)
            )
            if p.status == "gone":
                note = (
                    f"NVML lists pid {p.pid} but no such process is visible here (another container, or a "
                    f"leaked context): `nvidia-smi` on the node; an admin can reset the GPU",
                )
            yield Draft(
                f"{describe_process(p, machine)} holds {gib:.1f} GiB on GPU {g.index} ({g.name})",
                evidence=(
                    Evidence(None, f"GPU {g.index}", f"{gib:.1f} GiB held by pid {p.pid} ({p.status})", "profile"),
                ),
                fix=Fix(
                    "end the stale process before launching"
                    if commands
                    else "the process is not yours: have it ended before launching",
                    applicability=Applicability.UNSAFE,
                    commands=commands,
                    notes=note,
                ),
            )
