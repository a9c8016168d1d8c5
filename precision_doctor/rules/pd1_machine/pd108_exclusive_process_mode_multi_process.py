"""PD108 exclusive-process-mode-multi-process: GPUs in Exclusive_Process mode refuse a second CUDA context: busy GPUs
or ranks sharing one fail."""

from __future__ import annotations

from ...derive import LaunchPlan, call_evidence
from ...model.facts import MachineFacts, ScriptFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, LogSignature, rule
from ._launch import ACC_GOOD, describe_process, fixed_placements


@rule(
    "PD108",
    "exclusive-process-mode-multi-process",
    severity="error",
    phase="launch",
    summary="GPUs in Exclusive_Process mode refuse a second CUDA context: busy GPUs or ranks sharing one fail.",
    what="A visible GPU in Exclusive_Process compute mode (`nvidia-smi -c 3`, common on SLURM/SGE) that another "
    "process already holds, or a multi-process launch whose ranks all create a context on the same GPU.",
    why="In Exclusive_Process mode a GPU accepts one CUDA context at a time; the next process to touch it fails.",
    error="RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
    fix="One process per GPU, each touching only its own device: `torch.cuda.set_device(local_rank)` first, "
    "`cuda:{local_rank}` / `accelerator.device` everywhere; clear the processes that hold the GPUs (PD109).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    needs=("machine",),
    log=LogSignature(
        patterns=(r"CUDA-capable device\(s\) is/are busy or unavailable", r"all CUDA-capable devices are busy"),
        proven=0.6,
    ),
    related=("PD109", "PD112"),
    fires=[
        Example(
            ACC_GOOD,
            machine="l40s_2x_exclusive_stopped",
            launcher="accelerate launch --num_processes 2 train.py",
            note="a cluster node: exclusive GPUs held by a stopped run",
        )
    ],
    silent=[Example(ACC_GOOD, machine="h100_8x", launcher="accelerate launch --num_processes 2 train.py")],
)
def exclusive_process_mode(script: ScriptFacts, machine: MachineFacts, plan: LaunchPlan):
    exclusive = [g for g in machine.gpus if g.compute_mode == "Exclusive_Process"]
    if not exclusive:
        return
    n, n_ev = plan.processes, plan.processes_evidence
    for g in exclusive:
        if g.processes:
            holders = ", ".join(describe_process(p, machine) for p in g.processes)
            yield Draft(
                f"GPU {g.index} ({g.name}) is in Exclusive_Process mode and already held by {holders}: "
                f"the job cannot create its CUDA context there",
                evidence=(Evidence(None, f"GPU {g.index} compute mode", "Exclusive_Process", "profile"),),
                fix=Fix(
                    "free the GPU first (see PD109), or make the job use only free GPUs with CUDA_VISIBLE_DEVICES",
                    applicability=Applicability.UNSAFE,
                ),
            )
    placements = fixed_placements(script)
    if n and n > 1 and placements:
        c, what = placements[0]
        yield Draft(
            f"{n} processes on Exclusive_Process GPUs, and every rank creates its context with {what}: "
            f"the second rank to touch GPU 0 fails",
            evidence=(n_ev, call_evidence(c, f"{what} in every rank")),
            fix=Fix(
                "give each rank its own GPU: torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) "
                "before any CUDA work, or use accelerator.device",
                applicability=Applicability.UNSAFE,
            ),
        )
