"""How the launch places processes: the per-node process count and the rendezvous port, each with where it
comes from; what a `device_map` does with the model. Derived once per run, read by every launch rule."""

from __future__ import annotations

import re
from dataclasses import field, replace
from typing import Any

from ..knowledge.launchers import (
    ACCELERATE_OPTIONS,
    ACCELERATE_SWITCHES,
    DEFAULT_PORT,
    FABRIC_DEFAULT_PORT,
    RECIPE_CLIS,
    TORCHRUN_FREE_PORT_FROM,
    launcher_of,
    llamafactory_env_enabled,
    torchrun_picks_free_port,
    tune_runs_standalone,
)
from ..knowledge.lightning import lightning_launch
from ..model.facts import (
    ABSENT,
    DYNAMIC,
    KNOWN,
    Call,
    LaunchFacts,
    Location,
    MachineFacts,
    Origin,
    StackFacts,
    Value,
)
from ..model.findings import Evidence
from ..model.util import MAX_PORT, record, shown_value, whole_number

SPREADING = ("auto", "balanced", "balanced_low_0", "sequential")
PER_RANK_HINTS = ("local_rank", "LOCAL_RANK", "process_index", "current_device", "get_kbit_device_map", "rank")


@record
class LaunchPlan:
    """Processes per node and the rendezvous port the launch will use."""

    processes: int | None  # None: no launch given
    processes_evidence: Evidence | None
    port: int
    port_explicit: bool  # written somewhere (flag, env, config) rather than the default
    port_source: str
    spawner: str = ""  # "lightning": the script's Lightning Trainer / Fabric starts the processes itself
    spawner_call: Call | None = None  # ... and that call
    free_port: bool = False  # the launcher finds a free port itself (llamafactory-cli with no MASTER_PORT)

    @property
    def multi_process(self) -> int:
        """The process count, counting an unknown launch as one process."""
        return self.processes or 1


@record
class Sharding:
    """DeepSpeed or FSDP as the job runs it, wherever it is set up (derive/sharding.py decides which applies)."""

    kind: str = ""  # "" (neither) | deepspeed | fsdp
    source: str = ""  # trainer | hf-deepspeed-config | launch | lightning | code
    config: dict[str, Any] | None = None  # DeepSpeed: the config the engine gets ("auto" kept); None: not readable
    stage: int | None = None  # ZeRO stage; None where the config cannot be read
    offload_optimizer: bool = False
    offload_params: bool = False
    fsdp: str = ""  # full_shard | shard_grad_op | hybrid_shard | no_shard
    fsdp_version: int | None = None
    use_orig_params: bool = False  # FSDP1's use_orig_params (accelerate's default False): units may mix requires_grad
    zero3_init: bool = True  # accelerate's zero3_init_flag (its default under ZeRO-3 is on)
    evidence: tuple[Evidence, ...] = ()  # where it is set up: the setting that turns it on first
    call: Call | None = None  # the call that registers it with transformers (TrainingArguments, Accelerator())
    unknown: str = ""  # why the config cannot be read

    @property
    def loss_scaler(self) -> str:
        """What scales an fp16 loss: "deepspeed" (DeepSpeed's own, over fp32 master partitions: no GradScaler
        exists), "sharded" (FSDP1's ShardedGradScaler, which accepts fp16 gradients) or "torch" (GradScaler)."""
        if self.kind == "deepspeed":
            return "deepspeed"
        if self.kind == "fsdp" and self.fsdp_version == 1:
            return "sharded"
        return "torch"


@record
class AccelerateConfigView:
    """The accelerate config a launch reads: its settings, their lines, where it is and how it was named."""

    settings: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    path: str = ""
    via: str = ""


def accelerate_config_of(launch: LaunchFacts, machine: MachineFacts) -> AccelerateConfigView:
    """`--config_file`, else the machine's default config (`$ACCELERATE_CONFIG_FILE`, `$HF_HOME/accelerate/...`)."""
    if not launch.known or launch.launcher != "accelerate":
        return AccelerateConfigView()
    if launch.config_file:
        return AccelerateConfigView(
            launch.accelerate_config,
            launch.accelerate_config_lines,
            launch.accelerate_config_path,
            f"accelerate launch --config_file {launch.config_file}",
        )
    host = machine.host
    if host is None or not host.accelerate_config_path:
        return AccelerateConfigView()
    return AccelerateConfigView(
        host.accelerate_config,
        host.accelerate_config_lines,
        host.accelerate_config_path,
        "the accelerate config `accelerate launch` reads by default",
    )


def accelerate_settings(launch: LaunchFacts, machine: MachineFacts) -> dict[str, Value]:
    """`accelerate launch`'s DeepSpeed / FSDP settings as it applies them (`_validate_launch_command`): an option on
    its command line, else its config file's (`deepspeed_config.zero_stage` is `--zero_stage`, `fsdp_config.x` is
    `--fsdp_x`); `distributed_type` picks DeepSpeed or FSDP only when no mode flag is given. Each value keeps the
    line that writes it."""
    view = accelerate_config_of(launch, machine)
    if not launch.known or launch.launcher != "accelerate":
        return {}
    out: dict[str, Value] = {}

    def from_config(*keys: str) -> Value | None:
        node: Any = view.settings
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                return None
            node = node[k]
        if node is None:
            return None
        line = view.lines.get(".".join(keys))
        where = Location(view.path, line) if view.path and line else None
        return Value(
            state=KNOWN,
            value=node,
            text=f"{keys[-1]}: {shown_value(node)}",
            origins=(Origin("accelerate-config", view.via or view.path, where),),
            location=where,
        )

    if not any(n in launch.options for n in ACCELERATE_SWITCHES):
        kind = from_config("distributed_type")
        if kind is not None:
            mode = str(kind.value).upper()
            out["use_deepspeed"] = Value(
                state=KNOWN, value=mode == "DEEPSPEED", text=kind.text, origins=kind.origins, location=kind.location
            )
            out["use_fsdp"] = Value(
                state=KNOWN, value=mode == "FSDP", text=kind.text, origins=kind.origins, location=kind.location
            )
    for name in ACCELERATE_OPTIONS:
        if name.startswith("fsdp_"):
            found = from_config("fsdp_config", name) or from_config("fsdp_config", name[len("fsdp_") :])
        else:
            found = from_config("deepspeed_config", name)
        if found is not None:
            out[name] = found
    out.update(launch.options)  # the command line over the config file
    return out


def one_process(launch: LaunchFacts, plan: LaunchPlan) -> str:
    """Whether the job runs as one python process that sees every GPU: "yes" (launched so), "assumed" (no launch
    given) or "no" (a launcher, several copies of python under srun / mpirun, or a launcher the doctor does not
    know)."""
    if launch.unknown_launcher:
        return "no"
    if not launch.known:
        return "assumed"
    return "yes" if launch.launcher == "python" and plan.multi_process == 1 else "no"


def plan_launch(launch: LaunchFacts, machine: MachineFacts, stack: StackFacts) -> LaunchPlan:
    n, n_ev = _num_processes(launch, machine)
    port, explicit, source = _rendezvous_port(launch, machine)
    if launch.launcher == "llamafactory-cli" and not explicit:  # MASTER_PORT, else find_available_port()
        return LaunchPlan(n, n_ev, port, False, "a free port llamafactory-cli finds", free_port=True)
    tune = launch.shown.startswith("tune run")  # torchrun, started by torchtune's CLI (probes/launch.py)
    if (
        tune
        and launch.launcher == "torchrun"
        and "rdzv" not in launch.main_process_port.text
        and tune_runs_standalone(stack)
    ):
        torchtune = stack.get("torchtune").version or "0.5.0 or later"
        return LaunchPlan(
            n,
            n_ev,
            port,
            False,
            f"a free port: tune run starts torchrun standalone (torchtune {torchtune})",
            free_port=True,
        )
    if launch.launcher == "torchrun" and not explicit and launch.num_machines <= 1:
        torch = stack.get("torch")
        if torchrun_picks_free_port(stack):
            return LaunchPlan(
                n, n_ev, port, False, f"a free port torchrun picks on one node (torch {torch.version})", free_port=True
            )
        source = f"torchrun's default with torch {torch.version}; a free port from {TORCHRUN_FREE_PORT_FROM}"
    return LaunchPlan(n, n_ev, port, explicit, source)


def plan_script(plan: LaunchPlan, trainer: Call | None, launch: LaunchFacts, machine: MachineFacts) -> LaunchPlan:
    """The plan for one script: a Lightning Trainer / Fabric started as one process (plain `python`, or no launch
    given) starts one process per device itself (its subprocess launcher, DDP / FSDP / DeepSpeed alike); under
    torchrun, accelerate or srun the launcher's processes are the ranks."""
    found = lightning_launch(trainer) if trainer is not None else None
    if found is None or not found.on_gpu or found.strategy == "single":
        return plan
    spawns = not launch.known or (
        launch.launcher == "python"
        and plan.processes_evidence is not None
        and plan.processes_evidence.origin == "launcher"
    )
    n = found.devices if found.devices is not None else len(machine.gpus) if machine.known else None
    if not spawns or n is None or n <= 1:
        return plan  # the launcher's ranks, or one process on one device
    devices = trainer.kwarg("devices")
    name = trainer.callee.rsplit(".", 1)[-1]
    if devices.state == KNOWN and found.devices is not None:
        evidence = Evidence(
            devices.location or trainer.location,
            trainer.text,
            f"{n} processes: {name}(devices={devices.text}) starts one per device",
            "code",
        )
    else:
        shown = f"devices={devices.text}" if devices.state == KNOWN else "devices='auto' (the default)"
        evidence = Evidence(
            devices.location or trainer.location,
            trainer.text,
            f"{n} processes: {name}({shown}) starts one per visible GPU ({machine.describe()})",
            "profile",
        )
    return replace(plan, processes=n, processes_evidence=evidence, spawner="lightning", spawner_call=trainer)


def distributed(launch: LaunchFacts, plan: LaunchPlan, machine: MachineFacts) -> bool | None:
    """Whether the training process runs under a process group (transformers' ParallelMode.DISTRIBUTED: a
    launcher set LOCAL_RANK), even as one process: torchrun and deepspeed always; llamafactory-cli when it starts
    torchrun (FORCE_TORCHRUN or several GPUs); accelerate when it starts several processes; plain python, one
    process, never. None when the launch (or the machine a recipe's own CLI would see) is not known."""
    if not launch.known:  # a recipe's own CLI on several GPUs starts torchrun; otherwise the launch decides
        return True if plan.spawner else None
    if launch.unknown_launcher:
        return None
    if launch.launcher in ("torchrun", "deepspeed"):
        return True
    if launch.launcher == "llamafactory-cli":  # torchrun when forced or several GPUs are visible, whatever NPROC
        if forced_torchrun(job_env(launch, machine)):
            return True
        return len(machine.gpus) > 1 if machine.known else None
    if launch.launcher == "accelerate":
        return True if (plan.processes or 1) > 1 else None
    if launch.launcher == "python":
        return False if plan.multi_process == 1 and launch.copies == 1 else None
    return None


def world_size(launch: LaunchFacts, plan: LaunchPlan, machine: MachineFacts) -> int | None:
    """WORLD_SIZE as the launcher gives each rank: processes per node times nodes. None where either is not read:
    no launch, a node count written as a variable, an elastic range (`--nnodes 1:4`, llamafactory-cli's
    MIN_NNODES/MAX_NNODES). One process without a process group is 1, as transformers'
    `TrainingArguments.world_size` says."""
    if distributed(launch, plan, machine) is False:
        return 1
    if plan.processes is None:
        return None
    if not launch.known:  # a recipe's own CLI on this machine's GPUs
        return plan.processes
    env = job_env(launch, machine)
    written = _written_nodes(launch)
    if launch.launcher == "accelerate":
        nodes = accelerate_machines(launch, machine)
    elif written is not None:  # the flag as typed wins over any default
        nodes = written
    elif launch.launcher == "llamafactory-cli":  # torchrun --nnodes NNODES, elastic with RDZV_ID (launcher.py)
        elastic = any(name in env for name in ("RDZV_ID", "MIN_NNODES", "MAX_NNODES"))
        nodes = 0 if elastic else whole_number(env.get("NNODES", "1"), 1, 1 << 20) or 0
    elif launch.launcher == "torchrun" and "PET_NNODES" in env:  # what --nnodes defaults to
        nodes = whole_number(env["PET_NNODES"], 1, 1 << 20) or 0
    else:
        nodes = launch.num_machines
    return plan.processes * nodes if nodes > 0 else None


def plan_of_script(
    plan: LaunchPlan, accelerator: Call | None, imports: tuple[str, ...], launch: LaunchFacts, machine: MachineFacts
) -> LaunchPlan:
    """The run's plan as one script sees it: a Lightning Trainer or llamafactory-cli may start the processes."""
    return plan_recipe(plan_script(plan, accelerator, launch, machine), imports, launch, machine)


def plan_recipe(plan: LaunchPlan, imports: tuple[str, ...], launch: LaunchFacts, machine: MachineFacts) -> LaunchPlan:
    """A recipe checked with no launch given runs as its family's CLI (knowledge/launchers.py RECIPE_CLIS), which
    starts one process per visible GPU where there are several."""
    cli = next((RECIPE_CLIS[tag] for tag in RECIPE_CLIS if tag in imports), None)
    if cli is None or launch.known or not machine.known or len(machine.gpus) < 2:
        return plan
    env = machine.host.env if machine.host is not None else {}
    asked = env.get(cli.processes_env, "") if cli.processes_env else ""
    n = int(asked) if asked.isdigit() else len(machine.gpus)
    how = f"{cli.processes_env}={asked}" if asked.isdigit() else f"one per visible GPU ({machine.describe()})"
    return replace(
        plan,
        processes=n,
        spawner=cli.command,
        port_explicit=False,
        port_source=cli.port_source or plan.port_source,
        processes_evidence=Evidence(
            None, f"{cli.command} train", f"{n} processes: {cli.command} starts {cli.starts}, {how}", "profile"
        ),
    )


def job_env(launch: LaunchFacts, machine: MachineFacts) -> dict[str, str]:
    """The launch variables the job starts with: this machine's (or the snapshot's) less those the launch line
    removes (`env -u X`, `unset X;`, all of them under `env -i`), under those it sets (`CUDA_VISIBLE_DEVICES=0,1
    torchrun ...`)."""
    inherited = machine.host.env if machine.host and "*" not in launch.env_unset else {}
    return {**{k: v for k, v in inherited.items() if k not in launch.env_unset}, **launch.env}


ALL_GPUS = ("gpu", "auto", "-1", "all")  # `--nproc_per_node gpu`, `fabric run --devices auto`


def _num_processes(launch: LaunchFacts, machine: MachineFacts) -> tuple[int | None, Evidence | None]:
    """Processes per node: what the launcher starts (its flag, its config, its variable, else its own default),
    times the copies srun / mpirun start of it."""
    if not launch.known:
        return None, None
    n, evidence = _launcher_processes(launch, machine)
    if n is None or launch.copies == 1:
        return n, evidence
    if launch.copies is None:
        return None, None
    layer = next((t for t in launch.through if t.startswith(("srun", "mpi", "orterun"))), "srun")
    note = f"{n * launch.copies} processes: {layer} starts {launch.copies} copies of {launch.shown or launch.launcher}"
    if evidence is not None:
        note += f", each {evidence.note}"
    return n * launch.copies, Evidence(None, launch.command, note, "launcher")


def _per_machine(written: int, launch: LaunchFacts, machine: MachineFacts, detail: str) -> tuple[int | None, str]:
    """A written process count per node, with how it was read: accelerate's `num_processes` is the total over its
    machines (accelerate/utils/launch.py: `num_processes // num_machines` per node); other launchers' are per node.
    None where the machines are written but not as a count (`--num_machines $N`)."""
    machines = accelerate_machines(launch, machine) if launch.launcher == "accelerate" else 1
    if machines == 0:
        return None, ""
    if machines > 1:
        return (
            written // machines,
            f"{written // machines} processes ({written} in all over {machines} machines, {detail})",
        )
    return written, f"{written} processes ({detail})"


def _written_nodes(launch: LaunchFacts) -> int | None:
    """The node count the launch line writes (`--nnodes`, `--num_machines`, `--num_nodes`): None where it writes
    none, 0 where it is no count (`$NNODES`, `1:4`)."""
    written = launch.options.get("num_machines")
    if written is None:
        return None
    return written.value if written.state == KNOWN and isinstance(written.value, int) else 0


def accelerate_machines(launch: LaunchFacts, machine: MachineFacts | None = None) -> int:
    """`--num_machines`, else the accelerate config's `num_machines` (the launch's, else this host's), else 1; 0
    where written but not a count."""
    written = _written_nodes(launch)
    if written is not None:
        return written
    config = launch.accelerate_config or (machine.host.accelerate_config if machine and machine.host else {})
    found = config.get("num_machines", 1)
    return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else 0


def _launcher_processes(launch: LaunchFacts, machine: MachineFacts) -> tuple[int | None, Evidence | None]:
    env = job_env(launch, machine)
    gpus = len(machine.gpus) if machine.known else None
    every = f"one per visible GPU ({machine.describe()})" if machine.known else ""

    def all_gpus(why: str) -> tuple[int | None, Evidence | None]:
        if gpus is None:
            return None, None
        n = max(gpus, 1)
        return n, Evidence(None, launch.command, f"{n} processes: {why}, {every}", "profile")

    v = launch.num_processes
    if v.state == KNOWN and isinstance(v.value, int):
        origin = v.origins[0] if v.origins else Origin("launcher", launch.command)
        n, how = _per_machine(v.value, launch, machine, origin.detail)
        if n is None:
            return None, None
        if v.location is not None:  # written in the accelerate config the launch reads
            return n, Evidence(v.location, v.text, how, origin.kind)
        return n, Evidence(None, launch.command, how, origin.kind)
    if v.state == KNOWN and str(v.value).lower() in ALL_GPUS:
        return all_gpus(v.text)
    if v.state == KNOWN or v.state == DYNAMIC:
        return None, None  # `--nproc_per_node $N`, `--devices 0,3`: not a count the doctor can read
    config = machine.host.accelerate_config if machine.host else {}
    if launch.launcher == "accelerate" and isinstance(config.get("num_processes"), int):
        n, how = _per_machine(config["num_processes"], launch, machine, "num_processes in the accelerate config")
        if n is None:
            return None, None
        return n, Evidence(None, machine.host.accelerate_config_path, how, "accelerate-config")
    if launch.launcher == "torchrun" and whole_number(env.get("PET_NPROC_PER_NODE", ""), 1, 1 << 10):
        n = int(env["PET_NPROC_PER_NODE"])
        return n, Evidence(None, launch.command, f"{n} processes (PET_NPROC_PER_NODE={n})", "env")
    if launch.launcher == "accelerate" and not launch.config_file and not (machine.host and config):
        # no config and no --num_processes: every visible GPU (accelerate commands/launch.py
        # `_validate_launch_command`: `args.num_processes = torch.cuda.device_count()`)
        return all_gpus("accelerate launch with no config and no --num_processes")
    if launch.launcher == "deepspeed":
        include = launch.options.get("include")
        if include is not None and include.state == KNOWN:
            slots = str(include.value).partition(":")[2]
            if re.fullmatch(r"\d+(,\d+)*", slots):
                n = len(slots.split(","))
                return n, Evidence(None, launch.command, f"{n} processes (--include {include.value})", "launcher")
        # no --num_gpus: every GPU of the node (deepspeed launcher/runner.py: the local resource pool)
        return all_gpus("deepspeed with no --num_gpus")
    if launch.launcher == "llamafactory-cli":
        return _llamafactory_processes(launch, machine, env)
    return 1, Evidence(None, launch.command, "one process", "launcher")


def _llamafactory_processes(
    launch: LaunchFacts, machine: MachineFacts, env: dict[str, str]
) -> tuple[int | None, Evidence | None]:
    """`llamafactory-cli train` starts torchrun with NPROC_PER_NODE (default: every GPU) when FORCE_TORCHRUN is
    set or more than one GPU is visible, else trains in its own process (LLaMA-Factory launcher.py `launch`)."""
    forced = forced_torchrun(env)
    gpus = len(machine.gpus) if machine.known else None
    if not forced and gpus is None:
        return None, None
    if not forced and gpus is not None and gpus <= 1:
        return 1, Evidence(None, launch.command, f"one process: llamafactory-cli on {gpus} GPU", "profile")
    asked = whole_number(env.get("NPROC_PER_NODE", ""), 1, 1 << 10)
    if asked is not None:
        how = f"NPROC_PER_NODE={asked}"
        n = asked
    elif gpus is not None:
        how, n = f"one per visible GPU ({machine.describe()})", max(gpus, 1)
    else:
        return None, None
    why = "FORCE_TORCHRUN is set" if forced else "more than one GPU is visible"
    return n, Evidence(None, launch.command, f"{n} processes: llamafactory-cli starts torchrun ({why}), {how}", "env")


def forced_torchrun(env: dict[str, str]) -> bool:
    """llamafactory-cli starts torchrun even on one GPU with FORCE_TORCHRUN (or USE_MCA / USE_MEGATRON_BRIDGE),
    read by its `is_env_enabled`: "true", "y" or "1" (launcher.py, extras/misc.py)."""
    return any(llamafactory_env_enabled(env, name) for name in ("FORCE_TORCHRUN", "USE_MCA", "USE_MEGATRON_BRIDGE"))


def _rendezvous_port(launch: LaunchFacts, machine: MachineFacts) -> tuple[int, bool, str]:
    """In the launchers' order of precedence: the flag, MASTER_PORT, the accelerate config, the default."""
    v = launch.main_process_port
    if v.state == KNOWN and isinstance(v.value, int):
        return v.value, True, v.text
    env = job_env(launch, machine)
    names = ("PET_MASTER_PORT",) if launch.launcher == "torchrun" else ("MASTER_PORT",)  # torchrun: its PET_ only
    for name in names:
        port = whole_number(env.get(name, ""), 1, MAX_PORT)
        if port is not None:
            return port, True, f"{name}={env[name]}"
    config = machine.host.accelerate_config if machine.host else {}
    if launch.launcher == "accelerate" and whole_number(str(config.get("main_process_port")), 1, MAX_PORT):
        return config["main_process_port"], True, "main_process_port in the accelerate config"
    if launch.launcher == "fabric":
        return FABRIC_DEFAULT_PORT, False, f"fabric run's default port {FABRIC_DEFAULT_PORT}"
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
            if len(targets) > 1:
                return "spread"
        elif not isinstance(v.value, (int, str)):
            return "unknown"
        return "per-rank" if written_per_rank(v) else "single"  # {"": local_rank} reads 0 with LOCAL_RANK unset
    if any(h in v.text for h in PER_RANK_HINTS):
        return "per-rank"
    return "unknown"


def written_per_rank(v: Value) -> bool:
    """A device read from the environment variable the launcher sets per process (`{"": local_rank}` with
    `local_rank = int(os.environ.get("LOCAL_RANK", 0))`): it reads 0 only where the variable is unset. A constant
    or an argparse default named `rank` is what it says (torchrun passes no --local_rank)."""
    return any(o.kind in ("env", "env-default") and any(h in o.detail for h in _RANK_VARIABLES) for o in v.origins)


_RANK_VARIABLES = ("LOCAL_RANK", "RANK", "LOCAL_PROCESS_INDEX", "SLURM_LOCALID", "SLURM_PROCID")
# the rank among every process of the job (torchrun, accelerate, srun, Open MPI, Intel MPI / MPICH): GPU ids only on
# the first node; the per-node ranks are LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID
GLOBAL_RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_ENV_NAMED = re.compile(r"^(\w+)=|^with (\w+) unset|environment variable (\w+) \(")


def environment_variables(v: Value) -> tuple[str, ...]:
    """The environment variables a value is read from: its origins (`RANK=3 in ...`, `with RANK unset ...`) or,
    for a read with no default, the reason it is unknown (`environment variable RANK (unknown until ...`)."""
    texts = [o.detail for o in v.origins if o.kind in ("env", "env-default")] + ([v.reason] if v.reason else [])
    found: list[str] = []
    for text in texts:
        for match in _ENV_NAMED.finditer(text) if "environment variable" in text else [_ENV_NAMED.match(text)]:
            if match:
                found.append(next(g for g in match.groups() if g))
    return tuple(dict.fromkeys(found))


def command_with_option(launch: LaunchFacts, option: str) -> str:
    """The launch command with a launcher option set before the script, where the launcher reads its own
    options (`torchrun --nproc_per_node 2 --master_port 29501 finetune.py --lr 1e-4`); an earlier value of
    the same option is replaced. The layers in front (`CUDA_VISIBLE_DEVICES=0,1 srun ...`) are kept; a launcher
    that takes no options of its own (`llamafactory-cli`) gets a `MASTER_PORT=N`-style option as a prefix."""
    import shlex

    from ..knowledge.shell import Operator, shell_join, shell_words

    try:  # split as the shell splits it: `cd /w && torchrun ... 2>&1 | tee log` keeps its operators
        words = shell_words(launch.command)
    except ValueError:
        return f"{launch.command} {option}"
    begin = min(launch.segment_start, len(words))  # the command judged, not the list's first launcher
    end = next((j for j in range(begin, len(words)) if isinstance(words[j], Operator)), len(words))
    # a launcher is told by its first few words (`python -m llamafactory.cli train`): no suffix copied per word
    start = next((i for i in range(begin, end) if launcher_of(words[i : min(end, i + 32)])[0] is not None), None)
    if start is None:
        return f"{launch.command} {option}"
    if "=" in option.split()[0] and not option.startswith("-"):  # `MASTER_PORT=29501`: over an earlier one
        name = option.split("=", 1)[0] + "="
        return shell_join([w for w in words[:start] if not w.startswith(name)] + [option] + words[start:])
    new = shlex.split(option)
    if words[start].rsplit("/", 1)[-1] == "axolotl":  # its launcher's options go after `--`
        cut = words.index("--") + 1 if "--" in words else len(words)
        return shell_join(words[:cut] + ([] if "--" in words else ["--"]) + new + words[cut:])
    _, rest = launcher_of(words[start:])
    head, rest = words[: len(words) - len(rest)], list(rest)
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
    return shell_join(head + kept + new + tail)
