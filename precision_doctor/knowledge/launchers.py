"""The launchers' vocabulary: which command starts training, the flags each takes and the fact each sets, and
their defaults (the rendezvous port)."""

from __future__ import annotations

import re

from ..model.facts import StackFacts
from ..model.util import record
from .versions import at_least

DEFAULT_PORT = 29500  # torchrun's, deepspeed's and a multi-process accelerate launch's rendezvous port

# torchrun on one node with no port given (no --master_port, PET_MASTER_PORT or --rdzv_endpoint; it never reads
# MASTER_PORT): a static rendezvous on 29500 up to torch 2.11; from 2.12.0 (pytorch#175699, `run()` in
# torch/distributed/run.py) a c10d store on a port the OS picks. Read from the 2.11.0 and 2.12.0 wheels.
TORCHRUN_FREE_PORT_FROM = "2.12"
# `tune run` with no --rdzv_endpoint starts torchrun standalone (a c10d store on a port the OS picks, whatever
# --master_port says) from torchtune 0.5.0 (pytorch/torchtune#2015, ac14e96, `_run_distributed` in _cli/run.py);
# before, torchrun's own defaults.
TUNE_STANDALONE_FROM = "0.5.0"
TORCHRUN_DEFAULT = "torchrun-default"  # a job script's launch with no port written: decided by the job's torch


def address_in_use(port: int | str) -> str:
    """What c10d's store says when its rendezvous port is taken (torch/csrc/distributed/c10d/socket.cpp)."""
    return (
        f"RuntimeError: The server socket has failed to listen on any local network address. port: {port}, "
        "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"
    )


# flag spellings each launcher accepts, mapped to the fact they set
FLAGS = {
    "accelerate": {
        "--num_processes": "num_processes",
        "--mixed_precision": "mixed_precision",
        "--main_process_port": "main_process_port",
        "--config_file": "config_file",
        "--num_machines": "num_machines",
        "--gpu_ids": "gpu_ids",
    },
    "torchrun": {
        "--nproc_per_node": "num_processes",
        "--nproc-per-node": "num_processes",
        "--master_port": "main_process_port",
        "--master-port": "main_process_port",
        "--nnodes": "num_machines",
        "--rdzv_endpoint": "rdzv_endpoint",
        "--rdzv-endpoint": "rdzv_endpoint",
    },
    "fabric": {
        "--devices": "num_processes",
        "--main-port": "main_process_port",
        "--main_port": "main_process_port",
        "--num-nodes": "num_machines",
        "--num_nodes": "num_machines",
        "--precision": "fabric_precision",
        "--accelerator": "fabric_accelerator",
        "--strategy": "fabric_strategy",
    },
    "deepspeed": {
        "--num_gpus": "num_processes",
        "--num-gpus": "num_processes",
        "--master_port": "main_process_port",
        "--num_nodes": "num_machines",
        "--include": "include",
    },
}
FLAGS["tune"] = FLAGS["torchrun"]  # `tune run --nproc_per_node 2 RECIPE`: torchrun's own options
BOOL_FLAGS = {"--multi_gpu", "--cpu", "--standalone", "--use_deepspeed", "--use_fsdp", "--debug", "-m"}

# accelerate launch's DeepSpeed / FSDP options, which override its config file (derive/sharding.py reads them)
ACCELERATE_SWITCHES = ("use_deepspeed", "use_fsdp", "multi_gpu", "cpu")
ACCELERATE_OPTIONS = (
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "zero3_init_flag",
    "deepspeed_config_file",
    "fsdp_sharding_strategy",
    "fsdp_offload_params",
    "fsdp_version",
    "fsdp_reshard_after_forward",
    "fsdp_use_orig_params",
)


# the variables a launch line, a job script or this machine sets that the derivation reads (the rest of an
# environment is never recorded: ACCELERATE_*, NCCL_*, MASTER_ADDR and the like can hold hosts and credentials,
# so what is kept is redacted). PET_*: torchrun reads each of its options from PET_<OPTION> (torch
# distributed/argparse_util.py `env`); FORCE_TORCHRUN / NPROC_PER_NODE / NNODES / USE_MCA / USE_MEGATRON_BRIDGE:
# llamafactory-cli's (the last two force torchrun).
LAUNCH_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "MASTER_PORT",
    "MASTER_ADDR",
    "LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NNODES",
    "NODE_RANK",
    "RDZV_ID",  # llamafactory-cli's elastic launch, with MIN_NNODES and MAX_NNODES (launcher.py)
    "MIN_NNODES",
    "MAX_NNODES",
    "FORCE_TORCHRUN",
    "USE_MCA",
    "USE_MEGATRON_BRIDGE",
    "ALLOW_EXTRA_ARGS",  # llamafactory-cli's parser then takes keys no dataclass has (hparams/parser.py)
    "DISABLE_VERSION_CHECK",  # LLaMA-Factory's start-up version check skipped (PD703)
    "NPROC_PER_NODE",
    "NCCL_SOCKET_IFNAME",
    "ACCELERATE_MIXED_PRECISION",
    "PET_NPROC_PER_NODE",
    "PET_MASTER_PORT",
    "PET_NNODES",
)
LAUNCH_VARIABLE_PREFIXES = ("ACCELERATE_", "NCCL_", "HF_", "PET_", "LT_")


def launch_variable(name: str) -> bool:
    """A variable the doctor records where a launch sets it."""
    return name in LAUNCH_VARIABLES or name.startswith(LAUNCH_VARIABLE_PREFIXES)


# commands that start the command after them unchanged: {name: (options that take a value, positional words
# before the command)}; any other option word is a flag
WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-o", "-f", "--output", "--format"}), 0),
    "exec": (frozenset({"-a"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "--class", "--classdata"}), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "numactl": (
        frozenset({"-N", "-m", "-C", "-p", "-i", "--cpunodebind", "--membind", "--physcpubind", "--preferred"}),
        0,
    ),
    "taskset": (frozenset(), 1),
    "caffeinate": (frozenset({"-t", "-w"}), 0),
    "xvfb-run": (frozenset({"-n", "-s", "-e", "-f", "-p", "--server-args"}), 0),
    "unbuffer": (frozenset(), 0),
    "sudo": (frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-U", "-r", "-t", "--user", "--group"}), 0),
}
# environment managers that run the command after `run`: {name: options of `run` that take a value}
RUNNERS: dict[str, frozenset[str]] = {
    "uv": frozenset(
        {"--with", "--python", "-p", "--group", "--extra", "--env-file", "--directory", "--project", "--package"}
    ),
    "poetry": frozenset({"-C", "--directory", "-P", "--project"}),
    "pipenv": frozenset(),
    "conda": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}),
    "mamba": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}),
    "micromamba": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}),
    "pixi": frozenset({"-e", "--environment", "--manifest-path"}),
    "hatch": frozenset(),
    "pdm": frozenset(),
}
# mpirun / mpiexec (Open MPI, MPICH Hydra, Intel MPI): options and how many words each takes; an option not
# listed is a flag. The process count per node is a per-node option, else -np on one node.
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "mpiexec.hydra")
MPI_OPTIONS = {
    **dict.fromkeys(("-np", "-n", "-c", "--np", "--n"), 1),
    **dict.fromkeys(("-N", "--npernode", "-npernode", "-ppn", "--ppn", "-perhost", "--perhost"), 1),
    **dict.fromkeys(("--map-by", "-map-by", "--bind-to", "-bind-to", "--rank-by", "-rank-by"), 1),
    **dict.fromkeys(("-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile"), 1),
    **dict.fromkeys(("-f", "--default-hostfile", "-x", "-genvlist", "--prefix", "-wdir", "--wdir", "-wd"), 1),
    **dict.fromkeys(("--output-filename", "-output-filename", "--tag-output-file", "-iface", "-bootstrap"), 1),
    **dict.fromkeys(("--mca", "-mca", "--gmca", "-gmca", "-genv", "-env", "--env"), 2),
}
MPI_PER_NODE = ("-N", "--npernode", "-npernode", "-ppn", "--ppn", "-perhost", "--perhost")
MPI_TOTAL = ("-np", "-n", "-c", "--np", "--n")
MPI_HOSTS = ("-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile", "-f")

# the training subcommands of the frameworks' own CLIs, and the module each runs
TRL_COMMANDS = ("sft", "dpo", "grpo", "kto", "reward", "rloo", "orpo", "cpo", "bco", "gkd", "ppo", "prm", "xpo")
LLAMAFACTORY_CLIS = ("llamafactory-cli", "lmf")
AXOLOTL_TRAINING = ("train", "preprocess", "evaluate")
# `fabric run` / `lightning run model` (lightning fabric/cli.py): --devices defaults to "1", the port to 29400
FABRIC_DEFAULT_PORT = 29400


@record
class RecipeCli:
    """How a config family's own CLI runs a recipe checked with no launch given: the processes it starts."""

    command: str  # as the report names it, "llamafactory-cli"
    starts: str  # what it starts, "torchrun"
    processes_env: str = ""  # the variable that sets its processes per node, "" when none does
    port_source: str = ""  # where its rendezvous port comes from, "" for the launcher's default


# keyed by the family's import tag in the facts (ScriptFacts.imports). With several visible GPUs each starts one
# process per GPU: `llamafactory-cli train` starts torchrun (NPROC_PER_NODE if set) on a free port (LLaMA-Factory
# 0.9.5 launcher.py:59-66); `axolotl train` starts `accelerate launch` (axolotl 0.19 cli/main.py:102), which with no
# config of its own takes every GPU.
RECIPE_CLIS = {
    "llama-factory": RecipeCli(
        "llamafactory-cli", "torchrun", processes_env="NPROC_PER_NODE", port_source="a free port"
    ),
    "axolotl": RecipeCli("axolotl", "accelerate launch"),
    # `trl sft --config x.yaml` (trl cli/accelerate_launcher.py); not "trl", which every TRL script imports
    "trl recipe": RecipeCli("trl", "accelerate launch"),
}


def llamafactory_env_enabled(env: dict[str, str], name: str) -> bool:
    """LLaMA-Factory's `is_env_enabled` (extras/misc.py): the variable is "true", "y" or "1", any case."""
    return env.get(name, "").lower() in ("true", "y", "1")


# The first LLaMA-Factory release whose parser (hparams/parser.py) reads each variable, from the released wheels:
# ALLOW_EXTRA_ARGS from 0.9.2, USE_MCA from 0.9.4; USE_MEGATRON_BRIDGE in no release up to 0.9.5 (its git tree).
LLAMAFACTORY_PARSER_VARIABLES = {"ALLOW_EXTRA_ARGS": "0.9.2", "USE_MCA": "0.9.4", "USE_MEGATRON_BRIDGE": "0.9.6"}


PYTHON_VALUE_OPTIONS = ("-X", "-W", "--check-hash-based-pycs")
PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?[mtd]?(\.exe)?")  # python, python3, python3.11, python3.13t
# modules `python -m` runs that are launchers themselves
LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate",
    "deepspeed.launcher.runner": "deepspeed",
    "llamafactory.cli": "llamafactory-cli",
    "llamafactory.launcher": "llamafactory-cli",
}
# modules that train from a recipe in one process (`accelerate launch -m axolotl.cli.train x.yml`)
RECIPE_MODULES = ("axolotl.cli.train", "axolotl.cli.preprocess", "axolotl.cli.evaluate")


def python_words(words: list[str]) -> tuple[str, str, list[str]]:
    """`python [options] (-m MODULE | SCRIPT | -c CODE) args` as (kind, name, args): kind is "module", "script",
    "code" or "" (an interactive python)."""
    i = 0
    while i < len(words):
        w = words[i]
        if w == "-m" or (w.startswith("-m") and len(w) > 2 and not w.startswith("--")):
            name = w[2:] if len(w) > 2 else (words[i + 1] if i + 1 < len(words) else "")
            return "module", name, words[i + (1 if len(w) > 2 else 2) :]
        if w == "-c" or (w.startswith("-c") and not w.startswith("--")):
            return "code", "", words[i + (1 if len(w) > 2 else 2) :]
        if w in PYTHON_VALUE_OPTIONS:
            i += 2
            continue
        if w == "--" or not w.startswith("-") or w == "-":
            start = i + 1 if w == "--" else i
            return ("script", words[start], words[start + 1 :]) if start < len(words) else ("", "", [])
        i += 1
    return "", "", []


# tools that train through one of their subcommands (`accelerate launch`, `llamafactory-cli train`); their others
# train nothing (`llamafactory-cli chat`, `accelerate config`)
@record
class _SubcommandTool:
    launcher: str  # its name as the facts keep it
    training: tuple[str, ...]  # the subcommands that train
    keeps_subcommand: bool = False  # the launcher's own reader needs the subcommand word (axolotl, trl)


_SUBCOMMAND_TOOLS = {
    **{cli: _SubcommandTool("llamafactory-cli", ("train",)) for cli in LLAMAFACTORY_CLIS},
    "llamafactory.cli": _SubcommandTool("llamafactory-cli", ("train",)),  # `python -m llamafactory.cli`
    "accelerate": _SubcommandTool("accelerate", ("launch",)),
    "axolotl": _SubcommandTool("axolotl", tuple(AXOLOTL_TRAINING), keeps_subcommand=True),
    "trl": _SubcommandTool("trl", tuple(TRL_COMMANDS), keeps_subcommand=True),
    "tune": _SubcommandTool("tune", ("run",)),
    "fabric": _SubcommandTool("fabric", ("run",)),
}


def launcher_of(words: list[str]) -> tuple[str | None, list[str]]:
    """The launcher a command starts (its name as the facts keep it) and the words after its own name."""
    if not words:
        return None, words
    head = words[0].rsplit("/", 1)[-1]
    second = words[1] if len(words) > 1 else ""
    if head in ("torchrun", "deepspeed"):
        return head, words[1:]
    tool = _SUBCOMMAND_TOOLS.get(head)
    if tool is not None and second in tool.training:
        return tool.launcher, words[1:] if tool.keeps_subcommand else words[2:]
    if head == "lightning" and second == "run" and len(words) > 2 and words[2] == "model":
        return "fabric", words[3:]
    if PYTHON_NAME.fullmatch(head) or head in ("ipython",):
        kind, name, args = python_words(words[1:])
        tool = _SUBCOMMAND_TOOLS.get(name) if kind == "module" and "." in name else None
        if tool is not None:  # `python -m llamafactory.cli`: as the tool's own command, a subcommand first
            if not (args[:1] and args[0] in tool.training):
                return None, words
            return tool.launcher, args if tool.keeps_subcommand else args[1:]
        if kind == "module" and name in LAUNCHER_MODULES:
            return LAUNCHER_MODULES[name], args
        return "python", words[1:]
    return None, words


def other_subcommand(words: list[str]) -> str:
    """`llamafactory-cli eval` (also as `python -m llamafactory.cli eval`), `accelerate config`, `axolotl merge-lora`:
    a tool the doctor knows, told to do something other than train; "" for anything else."""
    head = words[0].rsplit("/", 1)[-1] if words else ""
    rest = words[1:]
    if PYTHON_NAME.fullmatch(head):
        kind, name, args = python_words(rest)
        if kind != "module" or name != "llamafactory.cli":
            return ""
        head, rest = name, args
    tool = _SUBCOMMAND_TOOLS.get(head)
    if tool is None or not rest or rest[0] in tool.training or rest[0].startswith("-"):
        return ""
    return f"{'python -m ' if head == 'llamafactory.cli' else ''}{head} {rest[0]}"


def tune_runs_standalone(stack: StackFacts) -> bool:
    """Whether `tune run` without --rdzv_endpoint is standalone: torchtune >= 0.5.0, or a release the stack does not
    name (every release since November 2024)."""
    return not stack.get("torchtune").version or at_least(stack, "torchtune", TUNE_STANDALONE_FROM)


def torchrun_picks_free_port(stack: StackFacts) -> bool:
    """Whether a single-node torchrun with no port given listens on a free port (else on 29500)."""
    return at_least(stack, "torch", TORCHRUN_FREE_PORT_FROM)
