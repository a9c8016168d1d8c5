"""The GPUs of this machine through NVML (nvidia-ml-py, imported as `pynvml`).

The NVML module is a parameter, so tests pass a fake built from a snapshot file. No NVML library or
no GPU is a fact with its reason, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model.facts import Gpu, GpuProcess, MachineFacts

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


NVML_LIBRARY = "libnvidia-ml.so.1"


def _load_pynvml() -> tuple[Any, str]:
    """(pynvml, "") or (None, why) when this machine has no NVML library the doctor will load (skips a 15 ms import
    on GPU-less hosts). The library is loaded by the absolute path programs.find_library trusts, never from an
    LD_LIBRARY_PATH entry in the working directory or the checked tree; pynvml's own load by name then takes it."""
    import sys

    if sys.platform.startswith("linux"):
        import ctypes

        from ..system.programs import find_library

        path, why = find_library(NVML_LIBRARY)
        if path is None:
            return None, why
        try:
            ctypes.CDLL(path)
        except OSError:
            return None, f"{NVML_LIBRARY} could not be loaded"
    import pynvml  # nvidia-ml-py

    return pynvml, ""


def probe_gpus(
    nvml: Any = None, visible: str | None = None, processes: Callable[[list[int]], dict[int, GpuProcess]] | None = None
) -> MachineFacts:
    """This machine's GPUs as the job will see them (`visible` is CUDA_VISIBLE_DEVICES)."""
    why = ""
    try:
        if nvml is None:
            nvml, why = _load_pynvml()
    except ImportError:
        return MachineFacts(known=False, source="this machine", reason="nvidia-ml-py is not installed")
    if nvml is None:
        return MachineFacts(known=False, source="this machine", reason=f"no NVIDIA driver ({why})")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ... : say which
        return MachineFacts(known=False, source="this machine", reason=f"NVML unavailable: {_nvml_reason(exc)}")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(nvml)
        count = nvml.nvmlDeviceGetCount()
        all_gpus = []
        for i in range(count):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            try:
                mig = nvml.nvmlDeviceGetMigMode(h)[0] == 1
            except Exception:  # not supported on this GPU
                mig = False
            procs = tuple(
                GpuProcess(pid=int(p.pid), used_mib=int((p.usedGpuMemory or 0) // 2**20))
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)
            )
            all_gpus.append(
                Gpu(
                    index=i,
                    name=_text(nvml.nvmlDeviceGetName(h)),
                    capability=tuple(nvml.nvmlDeviceGetCudaComputeCapability(h)),
                    memory_total_mib=int(mem.total // 2**20),
                    memory_used_mib=int(mem.used // 2**20),
                    uuid=_text(nvml.nvmlDeviceGetUUID(h)),
                    compute_mode=COMPUTE_MODES.get(nvml.nvmlDeviceGetComputeMode(h), "Default"),
                    mig=mig,
                    processes=procs,
                )
            )
    except Exception as exc:
        return MachineFacts(known=False, source="this machine", reason=f"NVML query failed: {_nvml_reason(exc)}")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    gpus = select_visible(all_gpus, visible)
    if processes is not None:
        details = processes(sorted({p.pid for g in gpus for p in g.processes}))
        gpus = [_with_process_details(g, details) for g in gpus]
    return MachineFacts(
        known=True, source="this machine", gpus=tuple(gpus), driver_version=driver, cuda_driver_version=cuda
    )


def select_visible(gpus: list[Gpu], visible: str | None) -> list[Gpu]:
    """Apply CUDA_VISIBLE_DEVICES (indices, UUIDs or UUID prefixes), renumbering as CUDA does."""
    if visible is None:
        return list(gpus)
    chosen: list[Gpu] = []
    for item in (x.strip() for x in visible.split(",")):
        if not item:
            break
        match = None
        if item.lstrip("-").isdigit():
            idx = int(item)
            if idx < 0:
                break  # CUDA stops at the first invalid entry
            match = next((g for g in gpus if g.index == idx), None)
        else:
            key = item if item.startswith(("GPU-", "MIG-")) else f"GPU-{item}"
            match = next((g for g in gpus if g.uuid.startswith(key)), None)
        if match is None:
            break
        chosen.append(match)
    return [
        Gpu(
            index=i,
            name=g.name,
            capability=g.capability,
            memory_total_mib=g.memory_total_mib,
            memory_used_mib=g.memory_used_mib,
            uuid=g.uuid,
            compute_mode=g.compute_mode,
            mig=g.mig,
            processes=g.processes,
        )
        for i, g in enumerate(chosen)
    ]


def _with_process_details(g: Gpu, details: dict[int, GpuProcess]) -> Gpu:
    procs = tuple(_merge(p, details.get(p.pid)) for p in g.processes)
    return Gpu(
        index=g.index,
        name=g.name,
        capability=g.capability,
        memory_total_mib=g.memory_total_mib,
        memory_used_mib=g.memory_used_mib,
        uuid=g.uuid,
        compute_mode=g.compute_mode,
        mig=g.mig,
        processes=procs,
    )


def _merge(p: GpuProcess, d: GpuProcess | None) -> GpuProcess:
    if d is None:
        return p
    return GpuProcess(
        pid=p.pid,
        used_mib=p.used_mib,
        status=d.status,
        user=d.user,
        mine=d.mine,
        command=d.command,
        started=d.started,
        parent_alive=d.parent_alive,
    )


def _cuda_version(nvml: Any) -> str:
    try:
        v = int(nvml.nvmlSystemGetCudaDriverVersion())
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return ""


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _nvml_reason(exc: Exception) -> str:
    name = type(exc).__name__.replace("NVMLError_", "")
    text = str(exc)
    return f"{name}: {text}" if text and text != name else name
