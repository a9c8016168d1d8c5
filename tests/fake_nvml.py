"""Stand-ins for the `pynvml` and `psutil` functions the probes call, built from a machine fixture
(fixtures/machines/*.json): what NVML and the OS would report on that machine."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from types import SimpleNamespace

from precision_doctor.probes.collect import System

MACHINES = Path(__file__).resolve().parents[1] / "fixtures" / "machines"


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - the real class name
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    pass


class FakeNVML:
    def __init__(self, spec: dict):
        self.spec = spec
        self.initialised = False

    def nvmlInit(self):
        failure = self.spec.get("init_error")
        if failure == "library":
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        if failure == "driver":
            raise NVMLError_DriverNotLoaded("Driver Not Loaded")
        self.initialised = True

    def nvmlShutdown(self):
        self.initialised = False

    def nvmlSystemGetDriverVersion(self):
        return self.spec["driver"]

    def nvmlSystemGetCudaDriverVersion(self):
        return self.spec["cuda"]

    def nvmlDeviceGetCount(self):
        return len(self.spec["gpus"])

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.spec["gpus"][i]

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"]

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(h["capability"])

    def nvmlDeviceGetMemoryInfo(self, h):
        total, used = h["memory_total_mib"] * 2**20, h.get("memory_used_mib", 0) * 2**20
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetComputeMode(self, h):
        return h.get("compute_mode", 0)

    def nvmlDeviceGetMigMode(self, h):
        if "mig" not in h:
            raise NVMLError("Not Supported")
        return (h["mig"], h["mig"])

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_mib"] * 2**20) for p in h.get("processes", [])]


class FakePsutil:
    """psutil as the machine's OS would answer: process table and listening sockets."""

    class NoSuchProcess(Exception):
        pass

    class AccessDenied(Exception):
        pass

    def __init__(self, spec: dict):
        self.table = {int(k): v for k, v in spec.get("processes", {}).items()}
        self.listening = spec.get("listening", [])

    def pid_exists(self, pid):
        return pid in self.table

    def Process(self, pid):  # noqa: N802 - psutil's name
        if pid not in self.table:
            raise self.NoSuchProcess(pid)
        row = self.table[pid]
        if row.get("access_denied"):
            raise self.AccessDenied(pid)
        return _FakeProcess(row)

    def net_connections(self, kind="inet"):
        return [
            SimpleNamespace(laddr=SimpleNamespace(ip="0.0.0.0", port=c["port"]), status="LISTEN", pid=c.get("pid"))
            for c in self.listening
        ]


class _FakeProcess:
    def __init__(self, row):
        self.row = row

    def oneshot(self):
        import contextlib

        return contextlib.nullcontext()

    def status(self):
        return self.row.get("status", "sleeping")

    def username(self):
        user = self.row.get("user", "")
        return getpass.getuser() if user == "@me" else user

    def cmdline(self):
        return self.row.get("cmdline", [])

    def name(self):
        return (self.row.get("cmdline") or ["?"])[0]

    def create_time(self):
        return self.row.get("create_time", 0.0)

    def ppid(self):
        return self.row.get("ppid", 1)


# The moment every machine fixture is probed at, so process ages in reports never depend on today's date.
FIXTURE_PROBED_AT = 1764000000.0  # 2025-11-24 16:00 UTC


def load_machine(name: str) -> dict:
    return json.loads((MACHINES / f"{name}.json").read_text())


def fake_system(name: str) -> tuple[System, dict]:
    """The System a probe sees on that machine, and its environment variables."""
    spec = load_machine(name)
    psutil = FakePsutil(spec.get("os", {}))
    busy = [c["port"] for c in spec.get("os", {}).get("listening", [])]

    def check_ports(ports, _psutil=None):
        from precision_doctor.model.facts import BusyPort
        from precision_doctor.model.redact import describe_command

        ports = sorted(set(ports))
        holders = {c["port"]: c.get("pid") for c in spec.get("os", {}).get("listening", [])}
        found = []
        for p in ports:
            if p in busy:
                pid = holders.get(p)
                row = psutil.table.get(pid, {}) if pid else {}
                found.append(BusyPort(p, pid, describe_command(row.get("cmdline", [])), row.get("user", "")))
        return tuple(ports), tuple(found)

    return System(
        nvml=FakeNVML(spec["nvml"]),
        psutil=psutil,
        check_ports=check_ports,
        scheduler=NO_SCHEDULER,
        clock=lambda: FIXTURE_PROBED_AT,
    ), spec.get("env", {})


def NO_SCHEDULER(args):  # noqa: N802 - a constant: no scontrol answers
    return ""


NO_NVML = System(
    nvml=FakeNVML({"init_error": "library"}), check_ports=lambda ports, _p=None: ((), ()), scheduler=NO_SCHEDULER
)
