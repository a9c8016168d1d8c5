"""A launch command's outer layers, as the shell and each layer would read them: `VAR=value` prefixes and `env`
(the job's environment), wrappers that start the next command unchanged (`nohup`, `time`, `exec`, `stdbuf`,
`uv run` ...), `bash -c "..."`, and the schedulers that start several copies of it (`srun`, `mpirun`), or queue a
job script (`sbatch FILE`). What is left is the launcher's own words (probes/launch.py reads them).

Nothing is run; the words are the ones the shell splits (knowledge/shell.py).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import field

from ..knowledge.launchers import (
    MPI_HOSTS,
    MPI_LAUNCHERS,
    MPI_OPTIONS,
    MPI_PER_NODE,
    MPI_TOTAL,
    RUNNERS,
    WRAPPERS,
    launch_variable,
    launcher_of,
    python_words,
)
from ..knowledge.shell import Operator, Redirection, shell_words
from ..model.errors import InputError
from ..model.redact import redact_text
from ..model.util import MAX_GPUS_PER_NODE, record, whole_number
from ..system.sources import Unreadable, read_text_bounded

ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
MAX_LAYERS = 32  # `nohup nohup nohup ...`: no real command has more
LAUNCHER_FILE_OPTIONS = {"--config_file", "--config-file", "--deepspeed_config_file", "--hostfile", "--fsdp_config"}
# what tells a training program from the others a job runs (`python download.py && torchrun train.py`, an evaluation
# after training): a call that trains or takes a step (a Trainer's or Lightning's, Keras' fit, a loop's backward and
# step; not a tokenizer's training), else a name that says so, or says it does something else
_TRAINING_CALL = re.compile(
    r"(?<!SentencePieceTrainer)(?<!okenizer)\.(?:train|fit|backward)\s*\(|\.step\s*\(\s*\)|^\s*train\s*\(", re.M
)
_TRAINING_NAME = re.compile(r"train|finetun|fine_tun|sft|dpo|orpo|kto|ppo|grpo|rlhf", re.I)
_OTHER_NAME = re.compile(
    r"eval|(?<![a-z])test|bench|infer|predict|generat|download|prep|convert|export|merge|score|tokeniz|collect_env|"
    r"(?<![a-z])pip(?![a-z])|install|setup|(?<![a-z])serve|upload|quantiz",
    re.I,
)
_MAX_SCRIPT_READ = 4 * 1024 * 1024
_SCRIPT_LAUNCHERS = ("python", "torchrun", "deepspeed", "accelerate", "fabric")  # run a script, not a recipe

# scheduler options (srun, sbatch): short letters to their long names, and options that take no value
SLURM_SHORT = {
    "N": "nodes",
    "n": "ntasks",
    "c": "cpus-per-task",
    "p": "partition",
    "C": "constraint",
    "G": "gpus",
    "J": "job-name",
    "t": "time",
    "o": "output",
    "e": "error",
    "A": "account",
    "q": "qos",
    "w": "nodelist",
    "D": "chdir",
}
SLURM_FLAGS = {
    "exclusive",
    "overlap",
    "label",
    "unbuffered",
    "kill-on-bad-exit",
    "verbose",
    "quiet",
    "no-kill",
    "requeue",
    "hold",
    "wait",
    "overcommit",
    "spread-job",
    "pty",
}
SLURM_SHORT_FLAGS = {"l", "u", "K", "v", "Q", "O", "H", "W"}


def slurm_options(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """Scheduler options (`--nodes=2`, `--nodes 2`, `-N2`, `-N 2`, `--exclusive`) and the words after them."""
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            return out, words[i + 1 :]
        if w.startswith("--"):
            name, eq, value = w[2:].partition("=")
            if eq or name in SLURM_FLAGS:
                out[name] = value if eq else "yes"
                i += 1
            else:
                out[name] = words[i + 1] if i + 1 < len(words) else ""
                i += 2
            continue
        if w.startswith("-") and len(w) > 1:
            letter = w[1]
            if letter in SLURM_SHORT_FLAGS:
                i += 1
                continue
            name = SLURM_SHORT.get(letter, letter)
            if len(w) > 2:
                out[name] = w[2:].lstrip("=")
                i += 1
            else:
                out[name] = words[i + 1] if i + 1 < len(words) else ""
                i += 2
            continue
        break
    return out, words[i:]


@record
class Peeled:
    """A command with its outer layers read: the launcher's words, and what the layers add."""

    words: list[str]
    env: dict[str, str] = field(default_factory=dict)  # set for the job (recorded names only, redacted)
    through: tuple[str, ...] = ()  # the layers, outermost first: "nohup", "srun (2 tasks per node)"
    # copies of the launcher each node starts (srun tasks, mpirun ranks); None: unknown, with the reason
    copies: int | None = 1
    copies_reason: str = ""
    srun: bool = False
    srun_options: dict[str, str] = field(default_factory=dict)
    job_file: str = ""  # `sbatch FILE`: the job script it queues
    job_options: dict[str, str] = field(default_factory=dict)  # sbatch's own options, over the #SBATCH lines
    job_args: tuple[str, ...] = ()
    # launch variables the line removes from the environment it inherits (`env -u NAME`, `unset NAME;`); "*": all
    # of them (`env -i`)
    unset: tuple[str, ...] = ()
    segment_start: int = 0  # the index, in the words read, where the command list's launching command starts
    folder: str = ""  # where the launching command runs: `cwd` after the list's `cd`s before it


def peel(words: list[str], cwd: str = "") -> Peeled:
    """Read the layers in front of the launcher, outermost first; `cwd`: the folder the command runs in (where its
    scripts are read to tell which of a list's commands trains)."""
    env: dict[str, str] = {}
    through: list[str] = []
    copies: int | None = 1
    reason = ""
    srun, srun_options = False, dict[str, str]()
    unset: set[str] = set()
    segments = command_segments(words)  # the commands of a list or pipeline, redirections left out
    at = 0
    if len(segments) > 1:  # `export VAR=1; torchrun ...`, `torchrun ... | tee log`
        words, at, cwd = _launching(segments, env, unset, cwd)
    else:
        words = segments[0] if segments else []
    start = segments[at].start if segments else 0
    for _ in range(MAX_LAYERS):
        if not words:
            break
        head = words[0].rsplit("/", 1)[-1]
        if ASSIGNMENT.match(words[0]):
            _assign(env, words.pop(0))
            continue
        if head == "env":
            words = _env_command(words[1:], env, unset)
            through.append("env")
            continue
        if head in WRAPPERS:
            takes, positional = WRAPPERS[head]
            words = _after_options(words[1:], takes, positional)
            through.append(head)
            continue
        if head in RUNNERS and len(words) > 1 and words[1] == "run":
            words = _after_options(words[2:], RUNNERS[head], 0)
            through.append(f"{head} run")
            continue
        if head in ("bash", "sh", "zsh") and len(words) > 2 and words[1] in ("-c", "-lc", "-l", "-ic"):
            script = words[2] if words[1] != "-l" else (words[3] if len(words) > 3 and words[2] == "-c" else "")
            try:
                inner = shell_words(script)
            except ValueError:
                break
            segments = command_segments(inner)
            if not segments:
                break
            words, _, _ = _launching(segments, env, unset, cwd)
            continue
        if head == "srun":
            srun = True
            srun_options, words = slurm_options(words[1:])
            n, why = _srun_tasks(srun_options)
            copies = None if copies is None or n is None else copies * n
            reason = reason or why
            through.append(f"srun ({n} task{'s' if n != 1 else ''} per node)" if n else "srun")
            continue
        if head in MPI_LAUNCHERS:
            n, why, words = _mpi(words[1:], env)
            copies = None if copies is None or n is None else copies * n
            reason = reason or why
            through.append(f"{head} ({n} process{'es' if n != 1 else ''} per node)" if n else head)
            continue
        if head == "sbatch":
            options, rest = slurm_options(words[1:])
            return Peeled(
                words=[],
                env=env,
                through=(*through, "sbatch"),
                job_file=rest[0] if rest else "",
                job_options=options,
                job_args=tuple(rest[1:]),
                unset=tuple(sorted(unset)),
                segment_start=start,
                folder=cwd,
            )
        break
    return Peeled(
        words,
        env,
        tuple(through),
        copies,
        reason,
        srun,
        srun_options,
        unset=tuple(sorted(unset)),
        segment_start=start,
        folder=cwd,
    )


def launched_file(words: list[str]) -> str:
    """The file a launch runs: the first .py, else a recipe (`axolotl train x.yml`); never the value of a
    launcher's own file option (`--config_file accel.yaml`)."""
    options = {i + 1 for i, w in enumerate(words) if w in LAUNCHER_FILE_OPTIONS}
    candidates = [w for i, w in enumerate(words) if i and i not in options and "=" not in w]
    return next((w for w in candidates if w.endswith(".py")), "") or next(
        (w for w in candidates if w.endswith((".yaml", ".yml"))), ""
    )


def launch_rank(peeled: Peeled, cwd: str = "") -> tuple[int, int, int]:
    """How surely a launch trains, for choosing among a job's several: (2 a framework's training subcommand, a queued
    job script, or a script that calls train/fit/backward/step; 1 a script not read, or read and calling none (it
    may train through what it imports); 0 code on the command line), then its name (1 says it trains, -1 says it
    does something else: eval, download, prepare, ...), then a launcher that starts several processes."""
    launcher, rest = launcher_of(peeled.words)
    file = peeled.job_file or launched_file(peeled.words)
    names = [file]
    if launcher == "python":
        kind, module, _ = python_words(rest)
        if kind == "code":
            return 0, 0, 0
        names = [module] if kind == "module" else names
    elif launcher is not None and launcher not in _SCRIPT_LAUNCHERS:  # a framework's
        names = [w for w in rest[:8] if not w.startswith("-")]  # subcommand and recipe: `axolotl preprocess x.yml`
    base = " ".join(os.path.basename(n) for n in names)
    says = (1 if _TRAINING_NAME.search(base) else 0) - (1 if _OTHER_NAME.search(base) else 0)
    several = 1 if launcher != "python" or peeled.copies != 1 else 0
    if peeled.job_file:
        return 2, says, 1
    if launcher not in _SCRIPT_LAUNCHERS:  # a framework's subcommand
        return (1 if rest[:1] and rest[0] in ("preprocess", "evaluate") else 2), says, several  # axolotl's read it
    if not file.endswith(".py"):
        return 1, says, several
    return (2 if _calls_training(os.path.join(cwd, os.path.expanduser(file))) else 1), says, several


def _calls_training(path: str) -> bool:
    try:
        stat = os.stat(path)
    except (OSError, ValueError):
        return False
    return _calls_training_read(os.path.realpath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _calls_training_read(path: str, _mtime: int, _size: int) -> bool:
    """Read once per version of the file (a job script may launch it on a thousand lines)."""
    try:
        text = read_text_bounded(path, _MAX_SCRIPT_READ, "script", "replace")
    except (Unreadable, InputError, OSError):
        return False
    return _TRAINING_CALL.search(text) is not None


def chosen_launch(ranks: list[tuple[int, int, int]]) -> int:
    """Of launches ranked in the order they run, the one judged: the best; of equals known to train the first (the
    job dies there first), of equals not known to train the last (what comes before it prepares)."""
    best = max(ranks)
    tied = [i for i, rank in enumerate(ranks) if rank == best]
    return tied[0] if best[0] == 2 else tied[-1]


class Segment(list[str]):
    """One command of a command list, its words; `piped`: its input is the previous command's output; `scope`: the
    subshells it runs in, outermost first (`( cd x && ... )`); `start`: the index of its first word in the line's
    words."""

    piped = False
    scope: tuple[int, ...] = ()
    start = 0


# words that open or close a compound command where a command would start (`if ...; then srun ...; fi`, `{ ...; }`,
# `while ...; do ...; done`): the command is what follows them; `for NAME in ...` and `case WORD in` start none
_OPENING = {"if", "then", "else", "elif", "do", "while", "until", "!", "{"}
_CLOSING = {"fi", "done", "}", "esac"}


def command_segments(words: list[str]) -> list[Segment]:
    """A command list and its pipelines split at their control operators (`&&`, `||`, `;`, `&`, `|`, `|&`, a
    subshell's parentheses: the shell_words `Operator`s, never a quoted `";"`), redirections and the words of
    compound commands left out."""
    out: list[Segment] = [Segment()]
    scope: list[int] = []
    opened = 0
    for i, w in enumerate(words):
        if isinstance(w, Operator):
            if w == "(":
                opened += 1
                scope.append(opened)
            elif w == ")" and scope:
                scope.pop()
            out.append(Segment())
            out[-1].piped = w in ("|", "|&") and bool(out[-2])
            out[-1].scope = tuple(scope)
        elif isinstance(w, Redirection):
            continue
        elif not out[-1] and w in _OPENING:
            continue
        else:
            if not out[-1]:
                out[-1].start = i
            out[-1].append(w)
    return [seg for seg in out if seg and seg[0] not in _CLOSING and seg[0] not in ("for", "case", "select")]


def _encloses(outer: Segment, inner: Segment) -> bool:
    """What `outer` sets (`export`, `cd`) is seen by `inner`: it ran in the same subshell or one around it."""
    return inner.scope[: len(outer.scope)] == outer.scope


def _launching(
    segments: list[Segment], env: dict[str, str], unset: set[str], cwd: str = ""
) -> tuple[list[str], int, str]:
    """Of a command list (`cd /work && export NCCL_DEBUG=INFO; torchrun ...`), the part that launches the training
    (`launch_rank`, `chosen_launch`; the last command when none launches), its index and its folder, with what an
    `export` before it puts in its environment and an `unset` takes out of it (a bare `VAR=1 &&` sets a shell
    variable the command does not see; a subshell's exports stay in it)."""
    launching, ranks = [], []
    folders = _folders(segments, cwd)
    for i, seg in enumerate(segments):
        peeled = peel(seg, folders[i])
        if peeled.job_file or launcher_of(peeled.words)[0] is not None:
            launching.append(i)
            ranks.append(launch_rank(peeled, folders[i]) if len(segments) > 1 else (1, 0, 0))
    chosen = launching[chosen_launch(ranks)] if launching else len(segments) - 1
    start = chosen  # a pipeline's launcher is its first command that launches (`torchrun ... | tee log`)
    while start > 0 and segments[start].piped:
        start -= 1
    at = next((i for i in range(start, chosen + 1) if i in launching), start)
    for seg in segments[:start]:
        if not _encloses(seg, segments[at]):
            continue
        if seg[0] == "export":
            for word in seg[1:]:
                if ASSIGNMENT.match(word):
                    _assign(env, word)
        elif seg[0] == "unset":
            for name in seg[1:]:
                if not name.startswith("-"):
                    env.pop(name, None)
                    unset.add(name)
    return segments[at], at, folders[at]


def _folders(segments: list[Segment], cwd: str) -> list[str]:
    """The folder each command of the list runs in: the `cd DIR` commands before it that it sees (`_encloses`),
    in one pass: a subshell starts in its parent's folder as it is when the subshell opens, and each subshell of a
    line has a scope of its own."""
    current: dict[tuple[int, ...], str] = {(): cwd}  # each scope's folder so far
    out = []
    for seg in segments:
        scope = seg.scope
        while scope not in current:  # (a subshell not yet seen: the innermost one around it that is)
            scope = scope[:-1]
        folder = current[scope]
        out.append(folder)
        if seg[0] == "cd" and len(seg) == 2 and "$" not in seg[1]:
            current[seg.scope] = os.path.join(folder, os.path.expanduser(seg[1]))
    return out


def _assign(env: dict[str, str], word: str) -> None:
    name, _, value = word.partition("=")
    if launch_variable(name):
        env[name] = redact_text(value)[:200]


def _env_command(words: list[str], env: dict[str, str], unset: set[str]) -> list[str]:
    """`env [-i] [-u NAME] [-C DIR] [NAME=value ...] command`."""
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string"):
            if w in ("-u", "--unset") and i + 1 < len(words):
                env.pop(words[i + 1], None)
                unset.add(words[i + 1])
            i += 2
            continue
        if w.startswith("--unset=") or (w.startswith("-u") and len(w) > 2):  # `--unset=X`, `-uX`
            name = w.partition("=")[2] if w.startswith("--") else w[2:]
            env.pop(name, None)
            unset.add(name)
            i += 1
            continue
        if w in ("-i", "--ignore-environment", "-"):
            env.clear()
            unset.clear()
            unset.add("*")
            i += 1
            continue
        if w.startswith("-") and not ASSIGNMENT.match(w):
            i += 1
            continue
        if ASSIGNMENT.match(w):
            _assign(env, w)
            i += 1
            continue
        break
    return words[i:]


def _own_options(words: list[str], arity) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """A command's own options, each with the words it takes (`arity(name)`, or its `=value`), and the words
    after them: the command it starts. `--` ends the options."""
    found: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            return found, words[i + 1 :]
        if not w.startswith("-") or w == "-":
            break
        name, eq, inline = w.partition("=")
        taken = 0 if eq else arity(name)
        found.append((name, [inline] if eq else words[i + 1 : i + 1 + taken]))
        i += 1 + taken
    return found, words[i:]


def _after_options(words: list[str], takes_value: frozenset[str], positional: int) -> list[str]:
    """The words after a wrapper's own options and its positional words (`timeout 2h`, `taskset 0-3`); an
    option with its value attached (`-oL`) is one word."""
    _, rest = _own_options(words, lambda name: 1 if name in takes_value else 0)
    return rest[positional:]


def _srun_tasks(options: dict[str, str]) -> tuple[int | None, str]:
    """Tasks srun starts on each node: --ntasks-per-node, else --ntasks over --nodes, else one."""
    per_node = options.get("ntasks-per-node", "")
    if per_node:
        n = whole_number(per_node, 1, MAX_GPUS_PER_NODE * 64)
        return (n, "") if n is not None else (None, f"srun --ntasks-per-node {per_node}: not a number")
    total = options.get("ntasks", "")
    if not total:
        return 1, ""
    nodes_raw = options.get("nodes", "1").split("-")[0]
    n_total = whole_number(total, 1, 1 << 20)
    nodes = whole_number(nodes_raw, 1, 1 << 20)
    if n_total is None or nodes is None:
        return None, f"srun --ntasks {total} --nodes {options.get('nodes', '1')}: not numbers"
    if n_total % nodes:
        return None, f"srun --ntasks {total} over {nodes} nodes: uneven tasks per node"
    return n_total // nodes, ""


def _mpi(words: list[str], env: dict[str, str]) -> tuple[int | None, str, list[str]]:
    """mpirun's ranks on each node and the program words: a per-node option (-N, -ppn, --map-by ppr:N:node),
    else -np on one node; -np over a host list, or no count (all slots), is unknown."""
    per_node = total = None
    hosts = False
    options, program = _own_options(words, lambda name: MPI_OPTIONS.get(name, 0))
    for name, values in options:
        if name in MPI_PER_NODE and values:
            per_node = values[0]
        elif name in MPI_TOTAL and values:
            total = values[0]
        elif name in ("--map-by", "-map-by") and values:
            match = re.match(r"ppr:(\d+):node", values[0])
            per_node = match.group(1) if match else per_node
        elif name in MPI_HOSTS:
            hosts = True
        elif name == "-x" and values and "=" in values[0]:
            _assign(env, values[0])
        elif name in ("-genv", "-env", "--env") and len(values) == 2:
            _assign(env, f"{values[0]}={values[1]}")
    if per_node is not None:
        n = whole_number(per_node, 1, MAX_GPUS_PER_NODE * 64)
        return n, "" if n is not None else f"mpirun ranks per node {per_node!r}: not a number", program
    if total is None:
        return None, "mpirun with no -np starts one rank per slot: ranks per node unknown", program
    if hosts:
        return None, f"mpirun -np {total} over a host list: ranks per node unknown", program
    n = whole_number(total, 1, MAX_GPUS_PER_NODE * 64)
    return n, "" if n is not None else f"mpirun -np {total!r}: not a number", program
