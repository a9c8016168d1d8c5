"""PD128 consumer-gpu-p2p-unsupported: NCCL ranks on several GeForce RTX 40 GPUs whose driver reports peer-to-peer
access the cards do not have, with P2P left on."""

from __future__ import annotations

from ...derive import LaunchPlan
from ...derive.launch import job_env
from ...derive.placement import AXOLOTL
from ...knowledge.versions import parse_version
from ...model.facts import JobFacts, LaunchFacts, MachineFacts, ScriptFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule
from ._cluster import env_value
from ._launch import ACC_GOOD

_LLAMAFACTORY = (
    "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    "dataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\nbf16: true\n"
)
_AXOLOTL = "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_target_linear: true\nbf16: true\n"

# accelerate's check_cuda_p2p_ib_support (utils/environment.py:197-220, since e8aaee5d, accelerate 0.29): more than
# one visible GPU whose name holds "RTX 40", on a driver before 550.40.07
_CARDS = "RTX 40"
_FIXED_DRIVER = (550, 40, 7)


def _p2p_disabled(env: dict[str, str]) -> bool:
    """NCCL_P2P_DISABLE=<non-zero>, or NCCL_P2P_LEVEL=LOC / 0 (NCCL reads both as "no peer-to-peer")."""
    disable = env.get("NCCL_P2P_DISABLE", "").strip()
    level = env.get("NCCL_P2P_LEVEL", "").strip().upper()
    return (disable.lstrip("-").isdigit() and int(disable) != 0) or level in ("LOC", "0")


def _launch_disables_p2p(launch: LaunchFacts, script: ScriptFacts | None) -> bool:
    """Whether the launcher turns P2P off by itself on such a node: `accelerate launch` (commands/launch.py
    multi_gpu_launcher / deepspeed_launcher: NCCL_P2P_DISABLE=1 and NCCL_IB_DISABLE=1 where unset) and Axolotl
    (utils/trainer.py prepare_optim_env: NCCL_P2P_DISABLE=1), both from the same check."""
    axolotl = script is not None and AXOLOTL in script.imports
    return axolotl or (launch.known and launch.launcher == "accelerate")


@rule(
    "PD128",
    "consumer-gpu-p2p-unsupported",
    severity="warning",
    phase="launch",
    summary="NCCL ranks on several GeForce RTX 40 GPUs with P2P left on, where the driver reports peer access the "
    "cards do not have.",
    what="A launch of two or more processes per node on GPUs named `RTX 40...` with a driver before 550.40.07 "
    "(or a target profile that names no driver), where neither `NCCL_P2P_DISABLE` nor `NCCL_P2P_LEVEL=LOC` is "
    "set and the launcher does not set it (`torchrun`, `deepspeed`, `python`, `llamafactory-cli`; `accelerate "
    "launch` and Axolotl set it themselves from the same check, accelerate utils/environment.py:197-220).",
    why="GeForce RTX 40 cards have no peer-to-peer path; drivers before 550.40.07 still report one, so NCCL moves "
    "data over it and the first all-reduce hangs (or, reported less often, returns wrong sums).",
    error="no error: the job hangs at its first collective until NCCL's watchdog times it out "
    "(`Watchdog caught collective operation timeout`)",
    fix="Update the NVIDIA driver to 550.40.07 or later, or launch with `NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1` "
    "(as `accelerate launch` does on such a node).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a change to the node's driver or the launch's environment.",
    needs=("machine",),
    fires=[
        Example(ACC_GOOD, machine="rtx4090_2x_driver535", launcher="torchrun --nproc_per_node 2 train.py"),
        Example(
            ACC_GOOD,
            target="rtx-4090:2",
            launcher="torchrun --nproc_per_node 2 train.py",
            note="a profile names no driver: reported as worth checking (info)",
        ),
        Example(
            ACC_GOOD,
            machine="rtx4090_2x_driver535",
            launcher="NCCL_P2P_DISABLE=0 torchrun --nproc_per_node 2 train.py",
            note="0 leaves P2P on",
        ),
        Example(
            _LLAMAFACTORY,
            machine="rtx4090_2x_driver535",
            name="train.yaml",
            note="llamafactory-cli starts torchrun over every visible GPU and leaves P2P as it is",
        ),
    ],
    silent=[
        Example(ACC_GOOD, machine="rtx4090_2x_driver550", launcher="torchrun --nproc_per_node 2 train.py"),
        Example(
            ACC_GOOD,
            machine="rtx4090_2x_driver535",
            launcher="NCCL_P2P_DISABLE=1 torchrun --nproc_per_node 2 train.py",
        ),
        Example(
            ACC_GOOD,
            machine="rtx4090_2x_driver535",
            launcher="NCCL_P2P_LEVEL=LOC torchrun --nproc_per_node 2 train.py",
        ),
        Example(ACC_GOOD, machine="rtx4090_2x_driver535", launcher="accelerate launch --num_processes 2 train.py"),
        Example(ACC_GOOD, machine="rtx4090_2x_driver535", launcher="python train.py"),
        Example(_AXOLOTL, machine="rtx4090_2x_driver535", name="config.yml", note="Axolotl turns P2P off itself"),
        Example(ACC_GOOD, target="a100:2", launcher="torchrun --nproc_per_node 2 train.py"),
    ],
)
def consumer_gpu_p2p_unsupported(
    machine: MachineFacts, launch: LaunchFacts, plan: LaunchPlan, script: ScriptFacts | None, job: JobFacts | None
):
    if (plan.processes or 1) < 2 or _launch_disables_p2p(launch, script):
        return
    env = job_env(launch, machine)
    for name in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"):
        value, _ = env_value(name, job, machine)
        if value and name not in launch.env:
            env[name] = value
    if _p2p_disabled(env):
        return
    for node in machine.nodes or (machine,):
        cards = [g for g in node.gpus if _CARDS in g.name]
        if len(node.gpus) < 2 or not cards:
            continue
        driver = parse_version(node.driver_version) if node.driver_version else None
        if driver is not None and driver >= _FIXED_DRIVER:
            continue
        where = f" on {node.node_name}" if machine.nodes else ""
        evidence = (plan.processes_evidence,) if plan.processes_evidence else ()
        if driver is None:
            yield Draft(
                f"{plan.processes} NCCL ranks on {len(node.gpus)}× {cards[0].name}{where}: peer-to-peer works there "
                "only on drivers from 550.40.07, and the target names no driver",
                evidence=evidence,
                severity="info",
                fix=Fix("check the node's driver (`nvidia-smi`); below 550.40.07 launch with NCCL_P2P_DISABLE=1"),
            )
        else:
            yield Draft(
                f"{plan.processes} NCCL ranks on {len(node.gpus)}× {cards[0].name}{where} with driver "
                f"{node.driver_version}, which reports peer-to-peer access these cards do not have; P2P is left on",
                evidence=(*evidence, Evidence(None, f"driver {node.driver_version}", f"on {node.source}", "profile")),
                fix=Fix(
                    "update the driver to 550.40.07 or later, or launch with NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1",
                    commands=(
                        f"NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1 {launch.command}"
                        if launch.command
                        else "export NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1",
                    ),
                ),
            )
        return
