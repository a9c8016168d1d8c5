"""How the launch places processes: the per-node process count and the rendezvous port, each with where it
comes from; what a `device_map` does with the model. Derived once per run, read by every launch rule."""

from __future__ import annotations

from dataclasses import dataclass

from .._util import MAX_PORT, whole_number
from ..facts import ABSENT, KNOWN, LaunchFacts, MachineFacts, Value
from ..findings import Evidence
from ..probes.host import DEFAULT_PORT
from ..probes.launch import launcher_of
SPREADING = ("auto", "balanced", "balanced_low_0", "sequential")
PER_RANK_HINTS = ("local_rank", "LOCAL_RANK", "process_index", "current_device", "get_kbit_device_map", "rank")


@dataclass(frozen=True)
class LaunchPlan:
    """Processes per node and the rendezvous port the launch will use."""

    processes: int | None  # None: no launch given
    processes_evidence: Evidence | None
    port: int
    port_explicit: bool  # written somewhere (flag, env, config) rather than the default
    port_source: str

    @property
    def multi_process(self) -> int:
        """The process count, counting an unknown launch as one process."""
        return self.processes or 1


def plan_launch(launch: LaunchFacts, machine: MachineFacts) -> LaunchPlan:
    n, n_ev = _num_processes(launch, machine)
    port, explicit, source = _rendezvous_port(launch, machine)
    return LaunchPlan(n, n_ev, port, explicit, source)


def _num_processes(launch: LaunchFacts, machine: MachineFacts) -> tuple[int | None, Evidence | None]:
    if not launch.known:
        return None, None
    v = launch.num_processes
    if v.state == KNOWN and isinstance(v.value, int):
        return v.value, Evidence(None, launch.command, f"{v.value} processes ({v.origins[0].detail})",
                                 v.origins[0].kind if v.origins else "launcher")
    config = machine.host.accelerate_config if machine.host else {}
    if launch.launcher == "accelerate" and isinstance(config.get("num_processes"), int):
        n = config["num_processes"]
        return n, Evidence(None, machine.host.accelerate_config_path, f"num_processes: {n} in the accelerate "
                                                                      f"config", "accelerate-config")
    return 1, Evidence(None, launch.command, "one process", "launcher")


def _rendezvous_port(launch: LaunchFacts, machine: MachineFacts) -> tuple[int, bool, str]:
    """In the launchers' order of precedence: the flag, MASTER_PORT, the accelerate config, the default."""
    v = launch.main_process_port
    if v.state == KNOWN and isinstance(v.value, int):
        return v.value, True, v.text
    env = machine.host.env if machine.host else {}
    port = whole_number(env.get("MASTER_PORT", ""), 1, MAX_PORT)
    if port is not None:
        return port, True, f"MASTER_PORT={env['MASTER_PORT']}"
    config = machine.host.accelerate_config if machine.host else {}
    if launch.launcher == "accelerate" and whole_number(str(config.get("main_process_port")), 1, MAX_PORT):
        return config["main_process_port"], True, "main_process_port in the accelerate config"
    return DEFAULT_PORT, False, f"the default port {DEFAULT_PORT}"


def device_map_kind(v: Value) -> str:
    """spread | single | per-rank | offload | unknown | none."""
    if v.state == ABSENT or v.is_(None):
        return "none"
    if v.state == KNOWN:
        if v.value in SPREADING:
            return "spread"
        if isinstance(v.value, dict):
            targets = {str(x) for x in v.value.values()}
            if targets & {"cpu", "disk"}:
                return "offload"
            return "single" if len(targets) <= 1 else "spread"
        if isinstance(v.value, (int, str)):
            return "single"
    if any(h in v.text for h in PER_RANK_HINTS):
        return "per-rank"
    return "unknown"


def command_with_option(launch: LaunchFacts, option: str) -> str:
    """The launch command with a launcher option set before the script, where the launcher reads its own
    options (`torchrun --nproc_per_node 2 --master_port 29501 finetune.py --lr 1e-4`); an earlier value of
    the same option is replaced."""
    import shlex

    try:
        words = shlex.split(launch.command)
    except ValueError:
        return f"{launch.command} {option}"
    _, rest = launcher_of(words)
    head, rest = words[:len(words) - len(rest)], list(rest)
    new = shlex.split(option)
    name = new[0]
    script = next((i for i, w in enumerate(rest) if w.endswith(".py") or w == "-m"), len(rest))
    options, tail = rest[:script], rest[script:]
    kept: list[str] = []
    i = 0
    while i < len(options):  # drop the option's earlier value: `--flag V` or `--flag=V`
        if options[i] == name:
            i += 2
            continue
        if not options[i].startswith(name + "="):
            kept.append(options[i])
        i += 1
    return shlex.join(head + kept + new + tail)
