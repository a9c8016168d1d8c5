"""The launch command (`--launcher "accelerate launch --num_processes 2 ..."`) as facts."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from ..knowledge.launchers import ACCELERATE_OPTIONS, ACCELERATE_SWITCHES, BOOL_FLAGS, FLAGS, launcher_of
from ..model.errors import InputError
from ..model.facts import DYNAMIC, KNOWN, HostFacts, LaunchFacts, Location, Origin, Unknown, Value
from ..model.util import MAX_GPUS_PER_NODE, MAX_PORT, whole_number
from ..system.sources import Unreadable, is_regular_file
from .config_files import display, read_deepspeed_config
from .host import read_accelerate_config

LAUNCHER_OPTION = "--launcher"


def parse_launcher(command: str, source: str = LAUNCHER_OPTION) -> LaunchFacts:
    """The launch command as facts. `source` is where it is written: the user's --launcher (a number out of range
    there is a typo: one line, exit 2) or a job script's line (`job.sbatch:12`: the job's own values, judged, never
    refused). Either way a value set when the job runs (`$MASTER_PORT`, `$(shuf ...)`) is unknown."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise InputError(f"{source}: cannot split {command!r} ({exc}); quote it as one shell command") from None
    if not words:
        raise InputError(f'{source}: empty; give the launch command, e.g. "torchrun --nproc_per_node 4"')
    launcher, rest = launcher_of(words)
    if launcher is None:
        raise InputError(
            f"--launcher: '{words[0]}' is not a launcher the doctor knows; "
            f"use python, accelerate launch, torchrun or deepspeed"
        )
    values: dict[str, Value] = {}
    options: dict[str, Value] = {}
    flags = FLAGS.get(launcher, {})
    script_args: tuple[str, ...] = ()
    i = 0
    while i < len(rest):
        word = rest[i]
        name, eq, inline = word.partition("=")
        option = name[2:].replace("-", "_") if launcher == "accelerate" and name.startswith("--") else ""
        if option in ACCELERATE_SWITCHES:
            options[option] = Value(state=KNOWN, value=True, text=name, origins=(Origin("launcher", name),))
            i += 1
            continue
        if option in ACCELERATE_OPTIONS:
            raw = inline if eq else (rest[i + 1] if i + 1 < len(rest) else "")
            options[option] = Value(
                state=KNOWN,
                value=_option_value(raw),
                text=f"{name} {raw}",
                origins=(Origin("launcher", f"{name} {raw}"),),
            )
            i += 1 if eq else 2
            continue
        if name in flags:
            raw = inline if eq else (rest[i + 1] if i + 1 < len(rest) else "")
            values[flags[name]] = _flag_value(flags[name], name, raw, source)
            i += 1 if eq else 2
            continue
        if word.endswith(".py"):
            script_args = tuple(rest[i + 1 :])
            break
        if (
            word.startswith("-")
            and word not in BOOL_FLAGS
            and not eq
            and i + 1 < len(rest)
            and not rest[i + 1].startswith("-")
            and not rest[i + 1].endswith(".py")
        ):
            i += 2  # an option we do not model, with its value
            continue
        i += 1
    if launcher == "python":
        values.setdefault(
            "num_processes",
            Value(state=KNOWN, value=1, text="python", origins=(Origin("launcher", "plain python: one process"),)),
        )
    kw = {k: v for k, v in values.items() if k in ("num_processes", "mixed_precision", "main_process_port")}
    machines = values.get("num_machines")
    config = values.get("config_file")
    return LaunchFacts(
        known=True,
        launcher=launcher,
        command=command,
        script_args=script_args,
        num_machines=machines.value if machines and isinstance(machines.value, int) else 1,
        config_file=str(config.value) if config else "",
        standalone="--standalone" in rest,
        options=options,
        **kw,
    )


def _option_value(raw: str):
    """An accelerate option's value as its parser makes it: `--zero_stage 3` an int, `true`/`false` a bool."""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    number = whole_number(raw, 0, 1 << 20)
    return number if number is not None else raw


def with_accelerate_files(launch: LaunchFacts, host: HostFacts | None, cwd: str = "") -> LaunchFacts:
    """`accelerate launch` with the files it reads: its `--config_file` (else the machine's default config, which the
    host probe read) and the DeepSpeed JSON that `--deepspeed_config_file` or the config's `deepspeed_config_file`
    names. Paths are relative to the folder the launch runs in (here, or the job script's). What cannot be read is
    listed as unknown."""
    if not launch.known or launch.launcher != "accelerate":
        return launch
    unknowns: list[Unknown] = []
    config, lines, shown = (
        (host.accelerate_config, host.accelerate_config_lines, host.accelerate_config_path)
        if host is not None
        else ({}, {}, "")
    )
    base = Path(cwd) if cwd else Path()
    if launch.config_file:
        path = base / Path(launch.config_file).expanduser()
        shown = display(path)
        if is_regular_file(path):
            found = read_accelerate_config(path, shown)
            config, lines = found.settings, found.lines
        else:
            config, lines = {}, {}
            unknowns.append(
                Unknown(
                    f"--config_file {launch.config_file}",
                    "the accelerate config file is not here (accelerate launch would stop with FileNotFoundError)",
                )
            )
        launch = replace(launch, accelerate_config=config, accelerate_config_lines=lines, accelerate_config_path=shown)
    via = (
        f"accelerate launch --config_file {launch.config_file}"
        if launch.config_file
        else "the accelerate config `accelerate launch` reads by default"
    )
    for name in ("mixed_precision", "num_processes"):  # the config's, where its flag is not given (the line is
        # kept in the detail for the evidence that shows the launch command, not the config)
        if (
            getattr(launch, name).state != KNOWN
            and config.get(name) is not None
            and (name != "num_processes" or whole_number(str(config[name]), 1, MAX_GPUS_PER_NODE) is not None)
        ):
            line = lines.get(name)
            where = Location(shown, line) if shown and line else None
            launch = replace(
                launch,
                **{
                    name: Value(
                        state=KNOWN,
                        value=config[name],
                        text=f"{name}: {config[name]}",
                        location=where,
                        origins=(
                            Origin(
                                "accelerate-config",
                                f"{where or shown}, {via}" if name == "mixed_precision" else via,
                                where,
                            ),
                        ),
                    )
                },
            )
    flag = launch.options.get("deepspeed_config_file")
    section = config.get("deepspeed_config") if isinstance(config.get("deepspeed_config"), dict) else {}
    named = str(flag.value) if flag is not None else str(section.get("deepspeed_config_file") or "")
    if named and named.lower() != "none":
        path = base / Path(named).expanduser()
        what = f"deepspeed_config_file {named}"
        try:
            launch = replace(launch, deepspeed_config=read_deepspeed_config(path), deepspeed_config_path=display(path))
        except Unreadable as exc:
            unknowns.append(
                Unknown(what, "the DeepSpeed config file is not here" if exc.reason == "no such file" else exc.reason)
            )
        except ValueError as exc:
            unknowns.append(Unknown(what, f"not valid JSON ({type(exc).__name__})"))
    return replace(launch, unknowns=launch.unknowns + tuple(unknowns)) if unknowns else launch


def launch_from_env(env: dict[str, str]) -> LaunchFacts:
    """The doctor itself runs under a launcher (`torchrun ... precision-doctor check`): read its variables."""
    world = env.get("WORLD_SIZE", "")
    processes = whole_number(world, 1, 1 << 24)
    if processes is None or "LOCAL_RANK" not in env:  # not set, or not a number: the doctor does not know
        return no_launcher()
    launcher = "accelerate" if any(k.startswith("ACCELERATE_") for k in env) else "torchrun"
    origin = (Origin("env", f"WORLD_SIZE={world}"),)
    mp = env.get("ACCELERATE_MIXED_PRECISION")
    return LaunchFacts(
        known=True,
        launcher=launcher,
        command=f"{launcher} (from the environment)",
        num_processes=Value(state=KNOWN, value=processes, text=f"WORLD_SIZE={world}", origins=origin),
        mixed_precision=Value(
            state=KNOWN,
            value=mp,
            text=f"ACCELERATE_MIXED_PRECISION={mp}",
            origins=(Origin("env", f"ACCELERATE_MIXED_PRECISION={mp}"),),
        )
        if mp
        else Value(state="absent"),
    )


# the range each numeric flag may take; a value outside it is a typo the job would fail on
_BOUNDS = {"main_process_port": (1, MAX_PORT), "num_processes": (1, MAX_GPUS_PER_NODE), "num_machines": (1, 1 << 20)}


def _flag_value(fact: str, flag: str, raw: str, source: str) -> Value:
    """A flag's value: a number within its range, or the text as written (`--nproc_per_node gpu`). A value the job
    computes when it runs is dynamic. A number out of range, or a port that is not a number, is a one-line error
    when the user typed it (--launcher), and unknown when a job script holds it: the doctor judges such a job, it does
    not refuse it."""
    text, origins = f"{flag} {raw}", (Origin("launcher", f"{flag} {raw}"),)
    if "$" in raw or "`" in raw:
        return Value(state=DYNAMIC, text=text, origins=origins, reason=f"{text}: set when the job runs")
    if fact not in _BOUNDS:
        return Value(state=KNOWN, value=raw, text=text, origins=origins)
    low, high = _BOUNDS[fact]
    number = whole_number(raw, low, high)
    if number is not None:
        return Value(state=KNOWN, value=number, text=text, origins=origins)
    if fact != "main_process_port" and not any(c.isdigit() for c in raw):
        return Value(state=KNOWN, value=raw, text=text, origins=origins)
    shown = raw if len(raw) <= 20 else f"{raw[:17]}..."
    problem = f"{flag} {shown!r}: expected a whole number from {low} to {high}"
    if source == LAUNCHER_OPTION:
        raise InputError(f"{source}: {problem}")
    return Value(state=DYNAMIC, text=text, origins=origins, reason=f"{problem} (the launcher would refuse it)")


def no_launcher() -> LaunchFacts:
    return LaunchFacts(known=False)
