"""The launch command (`--launcher "accelerate launch --num_processes 2 ..."`) as facts."""

from __future__ import annotations

import shlex

from .._util import MAX_GPUS_PER_NODE, MAX_PORT, whole_number
from ..errors import InputError
from ..facts import KNOWN, LaunchFacts, Origin, Value

# flag spellings each launcher accepts, mapped to the fact they set
_FLAGS = {
    "accelerate": {"--num_processes": "num_processes", "--mixed_precision": "mixed_precision",
                   "--main_process_port": "main_process_port", "--config_file": "config_file",
                   "--num_machines": "num_machines", "--gpu_ids": "gpu_ids"},
    "torchrun": {"--nproc_per_node": "num_processes", "--nproc-per-node": "num_processes",
                 "--master_port": "main_process_port", "--master-port": "main_process_port",
                 "--nnodes": "num_machines"},
    "deepspeed": {"--num_gpus": "num_processes", "--num-gpus": "num_processes", "--master_port": "main_process_port",
                  "--num_nodes": "num_machines"},
}
_BOOL_FLAGS = {"--multi_gpu", "--cpu", "--standalone", "--use_deepspeed", "--use_fsdp", "--debug", "-m"}


def parse_launcher(command: str) -> LaunchFacts:
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise InputError(f"--launcher: cannot split {command!r} ({exc}); quote it as one shell command") from None
    if not words:
        raise InputError("--launcher: empty; give the launch command, e.g. \"torchrun --nproc_per_node 4\"")
    launcher, rest = launcher_of(words)
    if launcher is None:
        raise InputError(f"--launcher: '{words[0]}' is not a launcher the doctor knows; "
                         f"use python, accelerate launch, torchrun or deepspeed")
    values: dict[str, Value] = {}
    flags = _FLAGS.get(launcher, {})
    script_args: tuple[str, ...] = ()
    i = 0
    while i < len(rest):
        word = rest[i]
        name, eq, inline = word.partition("=")
        if name in flags:
            raw = inline if eq else (rest[i + 1] if i + 1 < len(rest) else "")
            values[flags[name]] = Value(state=KNOWN, value=_number(flags[name], name, raw), text=f"{name} {raw}",
                                        origins=(Origin("launcher", f"{name} {raw}"),))
            i += 1 if eq else 2
            continue
        if word.endswith(".py"):
            script_args = tuple(rest[i + 1:])
            break
        if word.startswith("-") and word not in _BOOL_FLAGS and not eq and i + 1 < len(rest) \
                and not rest[i + 1].startswith("-") and not rest[i + 1].endswith(".py"):
            i += 2  # an option we do not model, with its value
            continue
        i += 1
    if launcher == "python":
        values.setdefault("num_processes", Value(state=KNOWN, value=1, text="python",
                                                 origins=(Origin("launcher", "plain python: one process"),)))
    kw = {k: v for k, v in values.items() if k in ("num_processes", "mixed_precision", "main_process_port")}
    machines = values.get("num_machines")
    config = values.get("config_file")
    return LaunchFacts(known=True, launcher=launcher, command=command, script_args=script_args,
                       num_machines=machines.value if machines and isinstance(machines.value, int) else 1,
                       config_file=str(config.value) if config else "", standalone="--standalone" in rest, **kw)


def launch_from_env(env: dict[str, str]) -> LaunchFacts:
    """The doctor itself runs under a launcher (`torchrun ... precision-doctor check`): read its variables."""
    world = env.get("WORLD_SIZE", "")
    processes = whole_number(world, 1, 1 << 24)
    if processes is None or "LOCAL_RANK" not in env:  # not set, or not a number: the doctor does not know
        return no_launcher()
    launcher = "accelerate" if any(k.startswith("ACCELERATE_") for k in env) else "torchrun"
    origin = (Origin("env", f"WORLD_SIZE={world}"),)
    mp = env.get("ACCELERATE_MIXED_PRECISION")
    return LaunchFacts(known=True, launcher=launcher, command=f"{launcher} (from the environment)",
                       num_processes=Value(state=KNOWN, value=processes, text=f"WORLD_SIZE={world}", origins=origin),
                       mixed_precision=Value(state=KNOWN, value=mp, text=f"ACCELERATE_MIXED_PRECISION={mp}",
                                             origins=(Origin("env", f"ACCELERATE_MIXED_PRECISION={mp}"),))
                       if mp else Value(state="absent"))


def launcher_of(words: list[str]) -> tuple[str | None, list[str]]:
    head = words[0].rsplit("/", 1)[-1]
    if head == "accelerate" and len(words) > 1 and words[1] == "launch":
        return "accelerate", words[2:]
    if head in ("torchrun",):
        return "torchrun", words[1:]
    if head == "deepspeed":
        return "deepspeed", words[1:]
    if head.startswith("python"):
        if len(words) > 2 and words[1] == "-m" and words[2] in ("torch.distributed.run", "torch.distributed.launch"):
            return "torchrun", words[3:]
        if len(words) > 2 and words[1] == "-m" and words[2] == "accelerate.commands.launch":
            return "accelerate", words[3:]
        return "python", words[1:]
    return None, words


# the range each numeric flag may take; a value outside it is a typo the job would fail on
_BOUNDS = {"main_process_port": (1, MAX_PORT), "num_processes": (1, MAX_GPUS_PER_NODE), "num_machines": (1, 1 << 20)}


def _number(fact: str, flag: str, raw: str):
    """A flag's value: a number within its range, or the text as written (`--nproc_per_node gpu`). A number out
    of range, or a port that is not a number, is a one-line error: the user typed it."""
    if fact not in _BOUNDS:
        return raw
    low, high = _BOUNDS[fact]
    number = whole_number(raw, low, high)
    if number is not None:
        return number
    if fact == "main_process_port" or any(c.isdigit() for c in raw):
        shown = raw if len(raw) <= 20 else f"{raw[:17]}..."
        raise InputError(f"--launcher: {flag} {shown!r}: expected a whole number from {low} to {high}")
    return raw


def no_launcher() -> LaunchFacts:
    return LaunchFacts(known=False)
