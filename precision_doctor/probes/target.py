"""Named GPU profiles for `--target NAME[:COUNT]`, so a laptop can check a script for the cluster."""

from __future__ import annotations

from ..model.errors import InputError, did_you_mean
from ..model.facts import Gpu, MachineFacts, MachineOrigin
from ..model.util import MAX_GPUS_PER_NODE, record, whole_number


@record
class Profile:
    name: str
    gpu_name: str
    capability: tuple[int, int]
    memory_mib: int  # the total NVML (nvidia-smi) reports on R510 and later drivers, ECC as the card ships
    aliases: tuple[str, ...] = ()


# Totals as nvidia-smi prints them on R510+ drivers, from its output quoted in public threads: A100-40GB
# bottlerocket-os/bottlerocket-core-kit#834, A100-80GB allenai/PeerRead#40, RTX 3090 noonghunna/club-3090#1127, A10
# mayooot/detect-gpu#3, A10G NVIDIA/DCGM#232, RTX 4090 RLinf/RLinf#255, L40S gpustack/gpustack#301, V100-32GB
# Wan-Video/Wan2.1#5, RTX 5090 noonghunna/club-3090#617 (driver 595.71.05; 32607MiB in its later reports too); the
# others from published training logs (B200: nvidia-smi tables on drivers 570 and 595 in public experiment logs,
# 183359MiB each; A40: a public SLURM job log on driver 535.161.08, 46068MiB; L40: several public logs, 46068MiB
# with ECC on as the card ships, 49140MiB with it off); the H200 read here (2026-11-27). Drivers before
# R510 print the total less the driver's reserve (T4 15109, A100-40GB 40536); the A10 with ECC off, the A6000
# and RTX 6000 Ada with ECC on print other figures (24564, 46068).
PROFILES: tuple[Profile, ...] = (
    Profile("p100", "Tesla P100-PCIE-16GB", (6, 0), 16384),
    Profile("v100-16gb", "Tesla V100-SXM2-16GB", (7, 0), 16384),
    Profile("v100-32gb", "Tesla V100-SXM2-32GB", (7, 0), 32768, aliases=("v100",)),
    Profile("t4", "Tesla T4", (7, 5), 15360),
    Profile("titan-rtx", "NVIDIA TITAN RTX", (7, 5), 24576),
    Profile("rtx-2080-ti", "NVIDIA GeForce RTX 2080 Ti", (7, 5), 11264),
    Profile("a100-40gb", "NVIDIA A100-SXM4-40GB", (8, 0), 40960),
    Profile("a100-80gb", "NVIDIA A100-SXM4-80GB", (8, 0), 81920, aliases=("a100",)),
    Profile("rtx-3090", "NVIDIA GeForce RTX 3090", (8, 6), 24576),
    Profile("a10", "NVIDIA A10", (8, 6), 23028),
    Profile("a10g", "NVIDIA A10G", (8, 6), 23028),
    Profile("a6000", "NVIDIA RTX A6000", (8, 6), 49140),
    Profile("a40", "NVIDIA A40", (8, 6), 46068),
    Profile("rtx-4090", "NVIDIA GeForce RTX 4090", (8, 9), 24564),
    Profile("l4", "NVIDIA L4", (8, 9), 23034),
    Profile("l40", "NVIDIA L40", (8, 9), 46068),
    Profile("l40s", "NVIDIA L40S", (8, 9), 46068),
    Profile("rtx-6000-ada", "NVIDIA RTX 6000 Ada Generation", (8, 9), 49140),
    Profile("h100", "NVIDIA H100 80GB HBM3", (9, 0), 81559),
    Profile("h200", "NVIDIA H200", (9, 0), 143771),
    Profile("b200", "NVIDIA B200", (10, 0), 183359),
    Profile("rtx-5090", "NVIDIA GeForce RTX 5090", (12, 0), 32607),
)

CPU_TARGET = "cpu"


def find_profile(name: str) -> Profile | None:
    key = name.strip().lower()
    for p in PROFILES:
        if key == p.name or key in p.aliases:
            return p
    return None


def machine_from_target(spec: str) -> MachineFacts:
    """`l40s:2` -> two L40S GPUs; `cpu` -> a machine with no GPU."""
    name, _, count_text = spec.partition(":")
    if name.strip().lower() == CPU_TARGET:
        return MachineFacts(known=True, source="target cpu", origin=MachineOrigin.TARGET, gpus=())
    profile = find_profile(name)
    if profile is None:
        known = ", ".join(p.name for p in PROFILES)
        names = [CPU_TARGET] + [n for p in PROFILES for n in (p.name, *p.aliases)]
        raise InputError(
            f"--target {_short(spec)}: unknown GPU '{_short(name)}'{did_you_mean(name, names) or ';'} "
            f"known: cpu, {known} "
            f"(see `precision-doctor targets`)"
        )
    count = 1
    if count_text:
        count = whole_number(count_text, 1, MAX_GPUS_PER_NODE)
        if count is None:
            raise InputError(
                f"--target {_short(spec)}: the count after ':' must be a whole number from 1 to "
                f"{MAX_GPUS_PER_NODE} (GPUs per node), e.g. {_short(name)}:2"
            )
    gpus = tuple(
        Gpu(index=i, name=profile.gpu_name, capability=profile.capability, memory_total_mib=profile.memory_mib)
        for i in range(count)
    )
    return MachineFacts(
        known=True,
        source=f"target {profile.name}" + (f":{count}" if count_text else ""),
        origin=MachineOrigin.TARGET,
        gpus=gpus,
    )


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def unknown_machine() -> MachineFacts:
    return MachineFacts(known=False, source="", origin=MachineOrigin.TARGET, reason="no --target given")
