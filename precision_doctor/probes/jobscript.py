"""A batch job script (SLURM) as facts: its #SBATCH directives, the launch variables it exports, and its launch line
(`srun torchrun ...`, `srun accelerate launch ...`, `deepspeed --hostfile ...`, `srun python ...`).

Nothing in the script is run: lines are split as the shell splits them (knowledge/shell.py) and `$VAR` /
`${VAR}` / `${VAR:-default}` / `$((...))` are expanded here, only from values the script itself (or its #SBATCH
request) sets; anything else stays as written and the rules that need it stay silent. The partition's GPU type
comes from the project's config, else from the scheduler's own `scontrol` when it is reachable.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from ..knowledge.launchers import DEFAULT_PORT, TORCHRUN_DEFAULT, launch_variable, launcher_of
from ..knowledge.shell import shell_join, shell_words
from ..model.errors import InputError
from ..model.facts import KNOWN, JobFacts, JobSetting, LaunchFacts, Origin, Unknown, Value
from ..model.redact import redact_text
from ..system.sources import Unreadable, read_text_bounded, status
from ..system.walk import JOB_SUFFIXES
from .command_words import (
    ASSIGNMENT,
    Peeled,
    chosen_launch,
    command_segments,
    launch_rank,
    launched_file,
    peel,
    slurm_options,
)
from .launch import parse_launcher, with_accelerate_files
from .shell_arithmetic import MAX_EXPRESSION, evaluate

_VAR = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?:\[[@*]\])?(?::?-(?P<default>[^}]*))?\}|(?P<plain>[A-Za-z_]\w*))")
_QUOTED_ARRAY = re.compile(r'"\$\{([A-Za-z_]\w*)\[@\]\}"')  # `"${ARGS[@]}"`: each element a word of its own
_NAME = re.compile(r"(?<![#\w])\$?\b([A-Za-z_]\w*)\b")  # a name in arithmetic; `ff` in `16#ff` is digits


def is_job_script(path: str) -> bool:
    """A shell script to read as a job (by its suffix, or a shebang / #SBATCH line in a file that is not .py)."""
    p = Path(path)
    if p.suffix == ".py":
        return False
    if p.suffix in JOB_SUFFIXES:
        return True
    try:
        head = read_text_bounded(p, 64 * 1024, what="job script", errors="replace")
    except (Unreadable, InputError, OSError):
        return False
    first = head.split("\n", 1)[0]
    return (first.startswith("#!") and re.search(r"\b(ba|z|k|da)?sh\b", first) is not None) or "#SBATCH" in head


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if raw.endswith("\\") and not raw.lstrip().startswith("#"):
            pending += raw[:-1] + " "
            continue
        out.append((start, pending + raw))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _words(text: str) -> list[str] | None:
    try:
        return shell_words(_without_comment(text), comments=False)
    except ValueError:
        return None


def _directive_words(text: str) -> list[str]:
    """An `#SBATCH` line's options as sbatch reads them: no shell reads the line (`--constraint=a100|h100`)."""
    try:
        return shlex.split(_without_comment(text))
    except ValueError:
        return []


def _without_comment(text: str) -> str:
    """The line up to a `#` that starts a word outside quotes, as the shell reads it (`${#X}` and `a#b` are no
    comments; shlex's own comment handling cuts them)."""
    quote, escaped, word_start = "", False, True
    for i, c in enumerate(text):
        starts = word_start
        word_start = False
        if escaped:
            escaped = False
        elif c == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c.isspace():
            word_start = True
        elif c == "#" and starts:
            return text[:i]
    return text


MAX_VALUE = 64 * 1024  # characters one expansion may give; past it the value is unknown
MAX_LINE = 64 * 1024  # characters of one (joined) line of a job script that are read
MAX_EXPANSION_WORK = 16 * 1024 * 1024  # characters expanded in one job script, all lines together


class _Expander:
    """Values the script sets, for `$VAR` expansion; None: set at run time (unknown here). Expansion is bounded:
    a value past MAX_VALUE, or any once the script has expanded MAX_EXPANSION_WORK characters, is unknown (each line
    `V2="$V1$V1$V1$V1"` multiplies the text)."""

    def __init__(self, known: dict[str, str | None]):
        self.vars = dict(known)
        self.arrays: set[str] = set()  # names set as arrays (`ARGS=(--lr 1e-4)`): their value is the elements' text
        self.work = 0

    def expand(self, text: str) -> tuple[str, bool]:
        """The text with every variable the script sets replaced; False when something stays unknown."""
        text = _QUOTED_ARRAY.sub(lambda m: m.group(0)[1:-1] if m.group(1) in self.arrays else m.group(0), text)
        complete = "$(" not in text.replace("$((", "") and "`" not in text
        text, arithmetic_known = self._arithmetic(text)
        out, known = self._variables(text)
        if out is None:
            return text, False
        return out, complete and arithmetic_known and known

    def _variables(self, text: str) -> tuple[str | None, bool]:
        """(the text with `$VAR`, `${VAR}`, `${VAR:-default}` replaced, and whether all of them were known), or
        (None, False) past the bounds."""
        pieces, size, pos, known = [], 0, 0, True
        for m in _VAR.finditer(text):
            name = m.group("braced") or m.group("plain")
            value = self.vars.get(name)
            if value is None and m.group("default") is not None and name not in self.vars:
                value = m.group("default")
            if value is None:
                known = False
                value = m.group(0)
            pieces += (text[pos : m.start()], value)
            size += m.start() - pos + len(value)
            pos = m.end()
            if size > MAX_VALUE or self.work + size > MAX_EXPANSION_WORK:
                return None, False
        pieces.append(text[pos:])
        self.work += size + len(text) - pos
        return "".join(pieces), known

    def _arithmetic(self, text: str) -> tuple[str, bool]:
        """Each `$(( ... ))` (parentheses inside it included) replaced by its value where every name in it is known."""
        out, pos, known = [], 0, True
        while (start := text.find("$((", pos)) >= 0:
            end = _closing(text, start + 3)
            if end < 0:
                return text, False
            expr, ok = self._variables(text[start + 3 : end])
            if expr is not None:  # a bare name's value is an expression of its own: `PER=12-4; $((PER/2))` is 4
                expr = _NAME.sub(
                    lambda v: f"({self.vars[v.group(1)]})" if self.vars.get(v.group(1)) else v.group(0), expr
                )
            number = evaluate(expr) if expr is not None and ok else None
            out += (text[pos:start], text[start : end + 2] if number is None else str(number))
            known = known and number is not None
            pos = end + 2
        out.append(text[pos:])
        return "".join(out), known


def _closing(text: str, start: int) -> int:
    """Where the `))` that closes an arithmetic expansion begun before `start` is; -1 when it is not closed."""
    depth = 0
    for i in range(start, min(len(text), start + MAX_EXPRESSION + 2)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i if text.startswith("))", i) else -1
            depth -= 1
    return -1


def _slurm_variables(directives: dict[str, JobSetting], folder: str) -> dict[str, str | None]:
    """What SLURM sets in the batch step, as far as the request decides it; per-task values stay unknown."""
    job = JobFacts(path="", directives=directives)
    known: dict[str, str | None] = {
        "SLURM_SUBMIT_DIR": folder,
        "SLURM_NNODES": str(job.nodes),
        "SLURM_JOB_NUM_NODES": str(job.nodes),
    }
    if job.tasks_per_node:
        known["SLURM_NTASKS_PER_NODE"] = str(job.tasks_per_node)
        known["SLURM_NTASKS"] = str(job.tasks_per_node * job.nodes)
    if job.gpus_per_node is not None:
        known["SLURM_GPUS_ON_NODE"] = known["SLURM_GPUS_PER_NODE"] = str(job.gpus_per_node)
    if job.number("cpus-per-task"):
        known["SLURM_CPUS_PER_TASK"] = directives["cpus-per-task"].value
    for name in (
        "SLURM_JOB_ID",
        "SLURM_JOBID",
        "SLURM_PROCID",
        "SLURM_NODEID",
        "SLURM_LOCALID",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
        "SLURMD_NODENAME",
        "SLURM_STEP_ID",
        "HOSTNAME",
    ):
        known[name] = None
    return known


def read_job(path: str, display: str | None = None) -> tuple[JobFacts, LaunchFacts]:
    """The job script's facts and the launch they describe (the launcher part read by `parse_launcher`)."""
    try:
        text = read_text_bounded(path, what="job script")
    except Unreadable as exc:
        raise InputError(f"{path}: cannot be read ({exc.reason})") from None
    display = display or path
    folder = os.path.dirname(os.path.abspath(path))
    directives: dict[str, JobSetting] = {}
    lines = logical_lines(text)
    # a line no job needs (shlex and the regular expressions are not linear on a megabyte word): not read
    too_long = [number for number, line in lines if len(line) > MAX_LINE]
    lines = [(number, "" if len(line) > MAX_LINE else line) for number, line in lines]
    body_start = len(lines)
    for index, (number, line) in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            opts, _ = slurm_options(_directive_words(stripped[len("#SBATCH") :]))
            directives.update({k: JobSetting(v, number) for k, v in opts.items()})
        elif stripped and not stripped.startswith("#"):
            body_start = index
            break  # sbatch stops reading directives at the first command
    expander = _Expander(_slurm_variables(directives, folder))
    env: dict[str, JobSetting] = {}
    unknowns: list[Unknown] = [Unknown(f"line {n}", f"longer than {MAX_LINE // 1024} KiB: not read") for n in too_long]
    cwd = folder
    candidates: list[tuple[int, Peeled, dict[str, JobSetting]]] = []  # (line, its launch, the exports above it)
    shell = _Shell(expander, env)
    for number, line in lines[body_start:]:
        words = _words(line)
        if not words:
            continue
        segments = command_segments(words)
        settled = 0  # the line's leading commands that only set variables or change folder (`RUN=a; srun ...`)
        for segment in segments:
            export = segment[0] == "export"
            names = [w for w in segment[1:] if w not in ("-n", "-p")] if export else segment
            if segment.scope:  # in a subshell: what it sets stays there
                break
            if segment[:2] in (["set", "-a"], ["set", "-o"]) and segment[-1] in ("-a", "allexport"):
                shell.export_all = True  # every variable set from here on is exported
            elif export and "-n" in segment:  # `export -n NAME`: no longer exported
                for name in names:
                    shell.unexport(name.partition("=")[0])
            elif all(ASSIGNMENT.match(w) or (export and _NAME_ONLY.match(w)) for w in names):
                for word in names:  # a bare `export` lists the environment
                    shell.set(word, number, export)
            elif segment[0] == "cd" and len(segment) == 2:
                target, complete = expander.expand(segment[1])
                cwd = os.path.normpath(os.path.join(cwd, os.path.expanduser(target))) if complete else cwd
            else:
                break
            settled += 1
        if settled == len(segments):
            continue
        found = _launch_in(line, expander, cwd)
        if found is not None:  # the environment and folder it launches in: the lines above it only
            candidates.append((number, found, dict(env)))
    if candidates:  # the launch that trains (`launch_rank`, `chosen_launch`)
        ranks = [launch_rank(p, p.folder) for _, p, _ in candidates] if len(candidates) > 1 else []
        chosen = chosen_launch(ranks) if ranks else 0
        number, launch, env = candidates[chosen]
        for index, (other, peeled, _) in enumerate(candidates):
            if index != chosen and ranks[index][0] == 2 and ranks[index][1] >= 0:
                unknowns.append(
                    Unknown(
                        f"line {other}",
                        f"also trains ({redact_text(shlex.join(peeled.words))[:120]}), not judged with the launch "
                        f"at line {number}: check it with its own --launcher",
                    )
                )
        for name, value in launch.env.items():
            if launch_variable(name):
                env[name] = JobSetting(redact_text(value)[:200], number)
        job = JobFacts(
            path=display,
            directives=directives,
            env=env,
            launch=redact_text(shlex.join(launch.words)),
            launch_line=number,
            srun=launch.srun,
            srun_options={k: v for k, v in launch.srun_options.items() if k in _SRUN_KEPT},
            background=_background_launches(
                lines[body_start:],
                {n: peeled for n, peeled, _ in candidates},
                (JobFacts(path="", directives=directives).number("nodes") or 1) > 1,
            ),
        )
        return _with_script(job, launch.words, launch.folder, unknowns)
    unknowns.append(
        Unknown(
            "launch line",
            "the job script runs no launcher the doctor knows (python, torchrun, "
            "accelerate launch, deepspeed), directly or through srun",
        )
    )
    return (JobFacts(path=display, directives=directives, env=env, unknowns=tuple(unknowns)), LaunchFacts(known=False))


def _background_launches(
    lines: list[tuple[int, str]], launches: dict[int, Peeled], multi_node: bool
) -> tuple[tuple[int, str, int], ...]:
    """The launches from the first on that run at the same time as another (a sweep: `torchrun ... &` twice, then
    `wait`), each as (line, the rendezvous port it listens on, its group: launches of one group overlap). A `wait`,
    or a launch in the foreground, ends a group. The port is the one written (`--master_port`, `--main_process_port`,
    `--rdzv_endpoint`), else the launcher's fixed default (deepspeed's and a multi-process accelerate launch's 29500);
    "" where it picks a free one (single-node torchrun, port 0) or listens on none (one process, `srun` steps a
    multi-node job may place on different nodes)."""
    out, group, loops = [], 0, []  # loops: how often each enclosing `for` runs its body (2: "more than once")
    for number, line in lines:
        words = _words(line) or []
        if words[:1] == ["wait"]:
            group += 1
            continue
        if words[:1] == ["for"]:  # `for lr in 1e-5 3e-5; do`: a sweep starts its body once per item
            after = words[words.index("in") + 1 :] if "in" in words else []
            items = [w.rstrip(";") for w in after[: after.index("do") if "do" in after else len(after)]]
            loops.append(1 if len([w for w in items if w]) == 1 else 2)  # `for ((...))`, `$(seq ...)`: unknown
            continue
        if words[:1] == ["done"] and loops:
            loops.pop()
            continue
        found = launches.get(number)  # read with the variables as the script had set them there
        if found is None:
            continue
        background = bool(words) and (words[-1] == "&" or words[-1].endswith("&") and not words[-1].endswith("&&"))
        port = "" if found.srun and multi_node else _rendezvous_port(found.words)
        if loops and re.search(r"(--master[_-]port|--main_process_port|--rdzv[_-]endpoint)[= ]\S*\$", line):
            port = ""  # written from a variable: it may change from one iteration to the next
        out.extend([(number, port, group)] * (max(loops) if loops and background else 1))
        if not background:
            group += 1
    counts = {}
    for _, _, g in out:
        counts[g] = counts.get(g, 0) + 1
    return tuple(entry for entry in out if counts[entry[2]] > 1)


def _rendezvous_port(launch: list[str]) -> str:
    """The port a launch listens on as written, else its launcher's fixed default; "" for a free one or none."""
    words = [w for w in launch if w != "&"]
    values = {}
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if name in (
            "--master_port",
            "--master-port",
            "--main_process_port",
            "--rdzv_endpoint",
            "--rdzv-endpoint",
            "--num_processes",
            "--nproc_per_node",
            "--nproc-per-node",
        ):
            values[name] = value if eq else (words[i + 1] if i + 1 < len(words) else "")
    written = (
        values.get("--master_port")
        or values.get("--master-port")
        or values.get("--main_process_port")
        or (values.get("--rdzv_endpoint") or values.get("--rdzv-endpoint") or "").rpartition(":")[2]
    )
    if written:
        return written if written.isdigit() and written != "0" else ""
    launcher = words[0].rsplit("/", 1)[-1] if words else ""
    if launcher == "deepspeed":
        return str(DEFAULT_PORT)
    if launcher == "accelerate" and values.get("--num_processes", "1") not in ("", "1"):
        return str(DEFAULT_PORT)
    if launcher == "torchrun":
        return TORCHRUN_DEFAULT  # 29500 or a free port, by the job's torch (PD119 decides)
    return ""  # python listens on none


_NAME_ONLY = re.compile(r"^[A-Za-z_]\w*$")


class _Shell:
    """The variables the script sets, as the shell keeps them: `NAME=value` for the script's own expansion, and
    those a launch sees in its environment: exported (`export NAME=value`, `NAME=v; export NAME`, `set -a`) or
    assigned again once exported."""

    def __init__(self, expander: _Expander, env: dict[str, JobSetting]):
        self.expander, self.env = expander, env
        self.unexported: dict[str, JobSetting] = {}
        self.export_all = False

    def unexport(self, name: str) -> None:
        if name in self.env:
            self.unexported[name] = self.env.pop(name)

    def set(self, word: str, number: int, export: bool) -> None:
        """`NAME=value` (or a bare `NAME` after `export`): a value from a command (`$(...)`, backquotes) is known to
        be set but not its value; arithmetic and `${...}` are expanded from what the script set before, the rest
        kept as written."""
        name, eq, raw = word.partition("=")
        if not eq:
            if name in self.unexported:
                self.env[name] = self.unexported.pop(name)
            return
        self.expander.arrays.discard(name)
        if raw.startswith("(") and raw.endswith(")"):  # an array: its elements as written, expanded
            value, complete = self.expander.expand(raw[1:-1])
            self.expander.vars[name] = value
            self.expander.arrays.add(name)
        elif "$(" in raw.replace("$((", "") or "`" in raw:
            value, complete = raw, False
            self.expander.vars[name] = None
        else:  # what it refers to that is set at run time stays as written (`CMD="$LAUNCHER --main_process_ip $IP"`)
            value, complete = self.expander.expand(raw)
            self.expander.vars[name] = value
        if launch_variable(name):
            setting = JobSetting(redact_text(value if complete else raw)[:200], number)
            if export or self.export_all or name in self.env:
                self.env[name] = setting
            else:
                self.unexported[name] = setting


_SRUN_KEPT = ("nodes", "ntasks", "ntasks-per-node", "gpus-per-task", "gpus", "gres", "gpus-per-node")  # the rules'


def _launch_in(line: str, expander: _Expander, cwd: str) -> Peeled | None:
    """The line's launch, its layers read (`exec`, `nohup`, `env`, `srun`, `bash -c`: command_words.py) in the
    folder it runs in, when it launches training."""
    expanded, _ = expander.expand(line)
    words = _words(expanded)
    if not words:
        return None
    peeled = peel(words, cwd)
    if not peeled.words or launcher_of(peeled.words)[0] is None:
        return None
    return peeled


def _with_script(job: JobFacts, words: list[str], cwd: str, unknowns: list[Unknown]) -> tuple[JobFacts, LaunchFacts]:
    launch = parse_launcher(shell_join(words), source=f"{job.path}:{job.launch_line}")
    script = launched_file(words)
    resolved = ""
    if script:
        candidate = os.path.normpath(os.path.join(cwd, os.path.expanduser(script)))
        try:
            status(candidate)
            resolved = _display(candidate)
        except (Unreadable, InputError):
            unknowns.append(
                Unknown("training script", f"{script} is not in {_display(cwd)} (the folder the job runs it from)")
            )
    launch = with_accelerate_files(launch, None, cwd)  # the files accelerate reads, from the job's folder
    launch = _with_job_environment(job, launch)
    return replace(job, script=resolved, unknowns=tuple(unknowns)), launch


def _with_job_environment(job: JobFacts, launch: LaunchFacts) -> LaunchFacts:
    """What the exports add to the launch: the rendezvous port, the mixed precision, one process per srun task."""
    where = Origin("job-script", job.path)
    launch = replace(launch, env={**{k: v.value for k, v in job.env.items()}, **launch.env})
    port = job.env.get("MASTER_PORT")
    if launch.main_process_port.state != KNOWN and port and port.value.isdigit():
        launch = replace(
            launch,
            main_process_port=Value(
                state=KNOWN,
                value=int(port.value),
                text=f"MASTER_PORT={port.value}",
                origins=(replace(where, detail=f"{job.path}:{port.line}"),),
            ),
        )
    precision = job.env.get("ACCELERATE_MIXED_PRECISION")
    if launch.mixed_precision.state != KNOWN and precision:
        launch = replace(
            launch,
            mixed_precision=Value(
                state=KNOWN,
                value=precision.value,
                text=f"ACCELERATE_MIXED_PRECISION={precision.value}",
                origins=(where,),
            ),
        )
    if launch.launcher == "python" and job.srun and job.tasks_per_node:
        n = job.tasks_per_node
        launch = replace(
            launch,
            num_processes=Value(
                state=KNOWN,
                value=n,
                text=f"srun: {n} tasks per node",
                origins=(Origin("job-script", f"srun: {n} tasks per node"),),
            ),
        )
    return launch


def _display(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


# --- the partition's GPU ----------------------------------------------------------------------


def partition_gpu(
    job: JobFacts, partitions: Mapping[str, Mapping], scheduler: Callable[[list[str]], str] | None = None
) -> tuple[str, int | None, str]:
    """(GPU profile name, GPUs per node, where it came from) of the job's nodes; ("", None, why not) if unknown.
    In order: the type the job's --gres names, the project's [tool.precision-doctor.partitions], the scheduler."""
    partition = job.directives["partition"].value.split(",")[0] if "partition" in job.directives else ""
    count = job.gpus_per_node
    if job.gpu_type:
        return job.gpu_type, count, f"--gres of {job.path}:{job.line_of('gres', 'gpus-per-node')}"
    if partition and partition in partitions:
        entry = partitions[partition]
        return str(entry["gpu"]), count or entry.get("count"), f"partition {partition} (project config)"
    scheduler = scheduler or _Scontrol()
    gres = _scheduler_gres(partition, scheduler)
    if gres:
        kind, n = gres
        return kind, count or n, f"partition {partition or '(default)'} (scontrol)"
    where = f"partition {partition!r}" if partition else "the default partition"
    why_not = getattr(scheduler, "why_not", "")
    return (
        "",
        count,
        (
            f"the GPU type of {where} is unknown{f' ({why_not})' if why_not else ''}: add "
            f'[tool.precision-doctor.partitions.{partition or "NAME"}] gpu = "a100-80gb" to '
            f"pyproject.toml, or pass --target"
        ),
    )


class _Scontrol:
    """The scheduler's own `scontrol`, found by programs.find_program (never one in the checked tree or the working
    directory); `why_not` says why it could not be asked."""

    def __init__(self):
        self.why_not = ""

    def __call__(self, args: list[str]) -> str:
        from ..system.programs import find_program

        exe, self.why_not = find_program("scontrol")
        if exe is None:
            return ""
        import subprocess  # (here: only a job script on a SLURM login node asks scontrol)

        from ..system import reads

        reads.not_cacheable("the scheduler was asked (scontrol)")

        try:
            done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError) as exc:
            self.why_not = f"scontrol could not be run ({type(exc).__name__})"
            return ""
        return done.stdout if done.returncode == 0 else ""


def _scheduler_gres(partition: str, scheduler: Callable[[list[str]], str]) -> tuple[str, int] | None:
    """The GPU type and count of the partition's first node, from `scontrol show partition` and `show node`."""
    text = scheduler(["show", "partition", "-o"] + ([partition] if partition else []))
    chosen = next((ln for ln in text.splitlines() if not partition and "Default=YES" in ln or partition), "")
    nodes = re.search(r"\bNodes=(\S+)", chosen)
    if not nodes or nodes.group(1) == "(null)":
        return None
    first = scheduler(["show", "hostnames", nodes.group(1)]).split("\n", 1)[0].strip()
    node = scheduler(["show", "node", "-o", first]) if first else ""
    gres = re.search(r"\bGres=(\S+)", node)
    for item in gres.group(1).split(",") if gres else ():
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) == 3 and parts[2].isdigit():
            return parts[1], int(parts[2])
    return None
