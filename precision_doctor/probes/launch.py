"""The launch command (`--launcher "accelerate launch --num_processes 2 ..."`) as facts."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..knowledge.launchers import (
    ACCELERATE_OPTIONS,
    ACCELERATE_SWITCHES,
    BOOL_FLAGS,
    FLAGS,
    RECIPE_MODULES,
    launcher_of,
    other_subcommand,
    python_words,
)
from ..knowledge.shell import shell_words
from ..model.errors import InputError
from ..model.facts import DYNAMIC, KNOWN, HostFacts, LaunchFacts, Location, Origin, Unknown, Value
from ..model.util import MAX_GPUS_PER_NODE, MAX_PORT, whole_number
from ..system.sources import Unreadable, is_regular_file
from .command_words import peel
from .config_files import display, read_deepspeed_config
from .host import read_accelerate_config

LAUNCHER_OPTION = "--launcher"


def parse_launcher(command: str, source: str = LAUNCHER_OPTION) -> LaunchFacts:
    """The launch command as facts. `source` is where it is written: the user's --launcher (a number out of range
    there is a typo: one line, exit 2) or a job script's line (`job.sbatch:12`: the job's own values, judged, never
    refused). Either way a value set when the job runs (`$MASTER_PORT`, `$(shuf ...)`) is unknown. The layers in
    front of the launcher (`VAR=value`, `env`, `nohup`, `srun`, `mpirun`, `sbatch FILE`) are read first
    (command_words.py); a launcher the doctor does not know is reported by its name, never refused."""
    try:
        words = shell_words(command)  # a `#` starting a word begins a comment, as the shell reads it
    except ValueError as exc:
        raise InputError(f"{source}: cannot split {command!r} ({exc}); quote it as one shell command") from None
    if not words:
        raise InputError(f'{source}: empty; give the launch command, e.g. "torchrun --nproc_per_node 4 train.py"')
    peeled = peel(words)
    layers = {
        "env": peeled.env,
        "through": peeled.through,
        "copies": peeled.copies,
        "copies_reason": peeled.copies_reason,
        "env_unset": peeled.unset,
        "segment_start": peeled.segment_start,
    }
    if peeled.job_file or "sbatch" in peeled.through:
        if not peeled.job_file:
            raise InputError(f'{source}: sbatch with no job script; give it, e.g. "sbatch job.sbatch"')
        return LaunchFacts(
            known=True,
            launcher="sbatch",
            command=command,
            shown=f"sbatch {peeled.job_file}",
            job_file=peeled.job_file,
            job_options=peeled.job_options,
            script_args=peeled.job_args,
            **layers,
        )
    if not peeled.words:
        raise InputError(f"{source}: {command!r} starts no command; give the launch command after its prefixes")
    launch = _launcher_facts(peeled.words, command, source)
    launch = replace(launch, **layers) if launch.known or launch.unknown_launcher else launch
    if peeled.through:  # `nohup`, `srun (2 tasks per node)`, ...
        launch = replace(launch, shown=" ".join((*peeled.through, launch.shown)))
    return launch


def _launcher_facts(words: list[str], command: str, source: str) -> LaunchFacts:
    """The launcher's own words as facts (`torchrun --nproc_per_node 2 train.py --lr 1e-4`)."""
    launcher, rest = launcher_of(words)
    head = words[0].rsplit("/", 1)[-1]
    if launcher is None:
        other = other_subcommand(words)
        if other:
            what = f"`{other}`"
            why = (
                "not a training command: how it runs is not modelled (the rules that need the launch are silent); "
                "give the training command with --launcher"
            )
        else:
            what = f"launcher `{head}`"
            why = (
                "not a launcher the doctor knows: processes per node unknown (the rules that need them are silent); "
                "pass the command it runs with --launcher"
            )
        return LaunchFacts(
            known=False,
            command=command,
            unknown_launcher=other or head,
            not_training=bool(other),  # a tool the doctor knows, doing something other than training
            script=next((w for w in words[1:] if w.endswith((".py", ".yaml", ".yml"))), ""),  # still checked
            unknowns=(Unknown(what, why, launch=True),),
        )
    if launcher == "axolotl":
        return _axolotl(rest, command, source)
    if launcher == "trl":
        return _trl(rest, command, source)
    if launcher == "llamafactory-cli":
        launch = _read_flags("llamafactory-cli", rest, command, source, recipe=True)
        return replace(launch, shown=f"{'llamafactory-cli' if head.startswith('python') else head} train")
    if launcher == "tune":
        launch = _read_flags("tune", rest, command, source, recipe=True)
        ran = "torchrun" if launch.num_processes.state == KNOWN else "python"
        unknowns = launch.unknowns
        if not launch.script.endswith(".py"):  # a recipe torchtune ships (`lora_finetune_single_device`)
            reason = "a torchtune built-in recipe and its config are not modelled: not checked"
            unknowns += (Unknown(f"tune recipe {launch.script}", reason),)
        return replace(launch, launcher=ran, shown=f"tune run ({ran})", unknowns=unknowns)
    if launcher == "python":
        return _python(rest, command, source)
    launch = _read_flags(launcher, rest, command, source)
    shown = {"accelerate": "accelerate launch", "fabric": "fabric run"}.get(launcher, launcher)
    return replace(launch, shown=shown)


def _python(rest: list[str], command: str, source: str) -> LaunchFacts:
    """`python train.py ...`, `python -m pkg.train ...`: one process."""
    kind, name, args = python_words(rest)
    one = Value(state=KNOWN, value=1, text="python", origins=(Origin("launcher", "plain python: one process"),))
    launch = LaunchFacts(
        known=True, launcher="python", command=command, shown="python", num_processes=one, script_args=tuple(args)
    )
    if kind == "module" and name in RECIPE_MODULES:  # `python -m axolotl.cli.train x.yml`
        script = next((a for a in args if a.endswith((".yaml", ".yml"))), "")
        return replace(launch, shown=f"python -m {name}", module=name, script=script)
    if kind == "module":
        return replace(launch, shown=f"python -m {name}", module=name)
    if kind == "code":
        return replace(launch, unknowns=(Unknown("python -c", "the code is on the command line: not checked"),))
    return replace(launch, script=name)


def _axolotl(rest: list[str], command: str, source: str) -> LaunchFacts:
    """`axolotl train x.yml [--launcher accelerate|torchrun|python] [overrides] [-- launcher args]`: axolotl starts
    `accelerate launch [args] -m axolotl.cli.train x.yml` (its default), `torchrun [args] -m ...` or one python
    (axolotl cli/main.py `train`, cli/utils/train.py `launch_training`); `preprocess` runs in one process."""
    sub, args = rest[0], rest[1:]
    cut = args.index("--") if "--" in args else len(args)
    own, launcher_args = args[:cut], args[cut + 1 :]
    recipe = next((a for a in own if a.endswith((".yaml", ".yml")) or a.startswith(("http://", "https://"))), "")
    chosen = "accelerate"
    for i, w in enumerate(own):
        if w == "--launcher" and i + 1 < len(own):
            chosen = own[i + 1]
        elif w.startswith("--launcher="):
            chosen = w.split("=", 1)[1]
    if sub == "preprocess":
        chosen = "python"
    inner = {"accelerate": ["accelerate", "launch"], "torchrun": ["torchrun"]}.get(chosen, ["python"])
    launch = _launcher_facts([*inner, *launcher_args, "-m", f"axolotl.cli.{sub}", recipe], command, source)
    overrides, skip = [], False
    for a in own:  # its own --launcher is no recipe override
        if skip or a == recipe or a.startswith("--launcher"):
            skip = a == "--launcher"
            continue
        overrides.append(a)
    shown = f"axolotl {sub} ({'accelerate launch' if chosen == 'accelerate' else chosen})"
    return replace(launch, shown=shown, script=recipe, module=f"axolotl.cli.{sub}", script_args=tuple(overrides))


def _trl(rest: list[str], command: str, source: str) -> LaunchFacts:
    """`trl sft --config x.yaml [args]`: TRL runs its own script trl/scripts/sft.py through `accelerate launch`,
    the arguments the script does not take going to accelerate (trl cli/commands/training.py)."""
    sub, args = rest[0], rest[1:]
    launch = _read_flags("accelerate", args, command, source, recipe=True)
    config = next((args[i + 1] for i, w in enumerate(args[:-1]) if w == "--config"), "")
    config = config or next((w.split("=", 1)[1] for w in args if w.startswith("--config=")), "")
    named = next((args[i + 1] for i, w in enumerate(args[:-1]) if w == "--accelerate_config"), "")
    unknowns = launch.unknowns
    if named:
        unknowns += (Unknown(f"--accelerate_config {named}", "an accelerate config shipped inside trl: not read"),)
    return replace(
        launch,
        shown=f"trl {sub} (accelerate launch)",
        module=f"trl.scripts.{sub}",
        script=config,
        script_args=tuple(args),
        unknowns=unknowns,
    )


def _read_flags(launcher: str, rest: list[str], command: str, source: str, recipe: bool = False) -> LaunchFacts:
    """A launcher's options up to what it runs: the script (`.py`), a module (`-m`), or with `recipe` the first
    word that is no option (a recipe, `tune run`'s recipe name); the words after it are the script's."""
    values: dict[str, Value] = {}
    options: dict[str, Value] = {}
    flags = FLAGS.get(launcher, {})
    script_args: tuple[str, ...] = ()
    script = module = ""
    i = 0
    while i < len(rest):
        word = rest[i]
        name, eq, inline = word.partition("=")
        if launcher == "accelerate" and name.startswith("--"):
            name = "--" + name[2:].replace("-", "_")  # accelerate takes `--num-processes` as `--num_processes`
        option = name[2:] if launcher == "accelerate" and name.startswith("--") else ""
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
        if word in ("-m", "--module") and i + 1 < len(rest):
            module, script_args = rest[i + 1], tuple(rest[i + 2 :])
            if module in RECIPE_MODULES:
                script = next((a for a in script_args if a.endswith((".yaml", ".yml"))), "")
            break
        if word.endswith(".py") or (recipe and not word.startswith("-")):
            script, script_args = word, tuple(rest[i + 1 :])
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
        if not word.startswith("-") and not recipe and launcher in ("torchrun", "deepspeed", "accelerate", "fabric"):
            script, script_args = word, tuple(rest[i + 1 :])  # a script without .py (`torchrun train`)
            break
        i += 1
    port = values.get("rdzv_endpoint")
    if port is not None and "main_process_port" not in values and port.state == KNOWN:
        tail = str(port.value).rpartition(":")[2]
        if tail.isdigit():
            values["main_process_port"] = _flag_value("main_process_port", port.text.split()[0], tail, source)
    for key in ("fabric_precision", "fabric_accelerator", "fabric_strategy", "include"):
        if key in values:
            options[key] = values[key]
    if "num_machines" in values:  # written: what a default (PET_NNODES, the accelerate config) does not override
        options["num_machines"] = values["num_machines"]
    kw = {k: v for k, v in values.items() if k in ("num_processes", "mixed_precision", "main_process_port")}
    machines = values.get("num_machines")
    config = values.get("config_file")
    return LaunchFacts(
        known=True,
        launcher=launcher,
        command=command,
        shown=launcher,
        script=script,
        module=module,
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
    if fact == "num_machines" and re.fullmatch(r"\d+:\d+", raw):  # `--nnodes 1:4`: an elastic range
        return Value(state=KNOWN, value=raw, text=text, origins=origins)
    if fact == "num_processes" and raw.lower() in ("gpu", "auto", "-1", "all"):  # every visible GPU
        return Value(state=KNOWN, value=raw.lower(), text=text, origins=origins)
    if fact == "num_processes" and re.fullmatch(r"\[?\d+(,\s*\d+)+,?\]?", raw):  # `--devices 0,1`: those GPUs
        count = len([x for x in raw.strip("[]").split(",") if x.strip()])
        return Value(state=KNOWN, value=count, text=text, origins=origins)
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
