"""Gather every fact a check needs: scripts, machine, launch and stack. The only impure layer.

The machine comes from one of three places: this machine (NVML, processes, ports, environment,
accelerate config), a named `--target` profile, or a `--facts` snapshot taken on the cluster node.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from ..model.errors import InputError
from ..model.facts import (
    NOTHING_TO_CHECK,
    Allocation,
    Facts,
    JobFacts,
    JobSetting,
    LaunchFacts,
    MachineFacts,
    MachineOrigin,
    ScriptFacts,
    StackFacts,
    Unknown,
    _from_jsonable,
    _to_jsonable,
)
from ..model.util import MAX_GPUS_PER_NODE, record
from ..settings import excluded
from ..system import content_cache, progress, reads
from ..system.pool import FORKS
from ..system.reads import RecordedEnviron
from ..system.sources import EmptySource, Unreadable, os_reason, parse_json, read_text_bounded, status
from ..system.walk import CODE_SUFFIXES, JOB_SUFFIXES, python_files
from .checkpoint import lookup_options as probe_options
from .config_families import CONFIG_SUFFIXES, family_of, is_config_path, probe_config
from .config_files import ConfigError, parse_config
from .installed_signatures import with_installed_signatures
from .launch import launch_from_env, parse_launcher, with_accelerate_files
from .script import one_run, probe_script
from .stack import StackResolver, training_environment
from .target import find_profile, machine_from_target

SNAPSHOT_KIND = "precision-doctor-snapshot"
SNAPSHOT_VERSION = 1
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024  # a real one is a few KiB, even with many GPUs and processes


def _expand(paths: list[str], exclude: tuple[str, ...] = (), root: str = ".") -> list[tuple[Path, bool]]:
    """(path, named on the command line) pairs; a file found by walking a folder was not named. Folders are
    walked without running anything from them, skipping what git would ignore (walk.py); a folder the walk could
    not list comes back as an entry of its own, so that it is reported rather than silently missed."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        try:
            info = status(p)
        except Unreadable as exc:
            hint = "pass a training script (.py) or a folder of them"
            raise InputError(
                f"{raw}: {'no such file or directory' if exc.reason == 'no such file' else exc.reason}; {hint}"
            ) from None
        if not stat.S_ISDIR(info.st_mode):
            out.append((p, True))  # whatever it is, reading it says what is wrong with it
            continue
        walk = python_files(p, FOLDER_SUFFIXES)
        found = [f for f in walk.files if not excluded(f, exclude, root) and checked_in_folder(f)]
        unlisted = [d for d, _ in walk.unlisted if not excluded(d, exclude, root)]
        if not found and not unlisted:
            raise InputError(
                f"{raw}: a directory with no training code (Python files, notebooks, recipes); pass a training "
                f"script or a folder of them"
            )
        out.extend((f, False) for f in found + unlisted)
    return _once_each(out)


# what a folder run reads: code, and the recipes and job scripts among these files (recognised by content)
FOLDER_SUFFIXES = (*CODE_SUFFIXES, *CONFIG_SUFFIXES, *JOB_SUFFIXES)  # a shell script is a job by its #SBATCH lines
MAX_RECIPE_BYTES = 512 * 1024  # a recipe is a page of settings; larger YAML/JSON is data
# a key every recipe family the doctor knows writes (its detection reads more), LLaMA-Factory v1's included
RECIPE_KEYS = ("base_model", "model_name_or_path", "compute_environment", "distributed_type", "model_class")


def checked_in_folder(path: Path) -> bool:
    """Code, a recipe of a family the doctor knows (Axolotl, LLaMA-Factory, accelerate), or a SLURM job script.
    Any other YAML/JSON (`.github/` workflows, `environment.yml`, data) is no recipe and is passed over."""
    if path.suffix in CODE_SUFFIXES:
        return True
    return content_cache.cached("in-folder", (os.fspath(path),), None, lambda: _recipe_or_job(path), returns=bool)


def _recipe_or_job(path: Path) -> bool:
    try:  # (a file past MAX_RECIPE_BYTES is refused by the bounded read: data, not a recipe)
        text = read_text_bounded(path, MAX_RECIPE_BYTES, what="recipe", errors="replace")
        if not is_config_path(path):
            return "#SBATCH" in text
        if not any(key in text for key in RECIPE_KEYS):  # most YAML/JSON of a repository: not parsed at all
            return False
        doc = parse_config(text, str(path))
        return family_of(doc) is not None or (doc.has("model") and doc.has("model_class"))  # v1: "not checked"
    except (OSError, InputError, ConfigError):
        return False


def _once_each(entries: list[tuple[Path, bool]]) -> list[tuple[Path, bool]]:
    """Each file once, where it first came (`check helper.py .` names a file the walk finds again, as `x.py` or
    `./x.py` or by its absolute path); named when it was named anywhere."""
    first: dict[str, int] = {}
    out: list[tuple[Path, bool]] = []
    here = os.getcwd()
    for path, named in entries:
        key = os.path.normpath(os.path.join(here, _through_links(path)))
        if key in first:
            if named:
                out[first[key]] = (out[first[key]][0], True)
            continue
        first[key] = len(out)
        out.append((path, named))
    return out


def _through_links(path: Path) -> Path:
    """`link/../x.py` is the x.py beside link's target, not the one its text names: such a path with its folder
    resolved for real; any other path as it is."""
    if ".." not in path.parts:
        return path
    real = os.path.realpath(path.parent)
    return Path(real) / path.name if real != os.path.realpath(os.path.normpath(path.parent)) else path


def _probe(path: Path, named: bool, args: tuple[str, ...], environ: tuple = (None, "")) -> ScriptFacts:
    """A named file that cannot be read is bad input (exit 2) when it is the only one; one among several, or found
    in a folder, is reported and skipped. From the content cache while nothing the probe read has changed."""
    return content_cache.cached(
        "probe",
        _probe_question(path, named, args, environ),
        environ[0],
        lambda: _probe_file(path, named, args, environ),
        returns=ScriptFacts,
    )


def _probe_question(path: Path, named: bool, args: tuple[str, ...], environ: tuple) -> tuple:
    """What a probe's answer depends on besides what it reads (a cache key's part): the path, whether it was named,
    the launch's script arguments, the job environment's source, --model-config."""
    return (os.fspath(path), named, args, environ[0] is None, environ[1], probe_options())


def _probe_file(path: Path, named: bool, args: tuple[str, ...], environ: tuple) -> ScriptFacts:
    try:
        if not named and os.path.isdir(path) and not os.path.islink(path):  # a subfolder the walk could not list
            raise Unreadable(path, f"the folder cannot be listed ({_listing_problem(path)})")
        if is_config_path(path):  # `check recipe.yaml`: the config as its tool runs it, launch-line settings over it
            return probe_config(path, _display(path), args)
        return probe_script(path, args, display=_display(path), environ=environ)
    except EmptySource:  # a pre-commit run over a commit touching only an empty __init__.py passes
        return ScriptFacts(path=_display(path), unknowns=(Unknown(NOTHING_TO_CHECK, "the file is empty"),))
    except InputError as exc:
        if named:
            raise
        reason = exc.reason if isinstance(exc, Unreadable) else str(exc).split(": ", 1)[-1]
        return ScriptFacts(path=_display(path), unknowns=(Unknown("not checked", reason),))


def _listing_problem(folder: Path) -> str:
    try:
        os.scandir(folder).close()
    except OSError as exc:
        return os_reason(exc)
    return "it changed during the run"


@record
class System:
    """The outside world the machine probes read; tests pass fakes built from a machine fixture."""

    nvml: Any = None  # the pynvml module
    psutil: Any = None  # the psutil module
    check_ports: Callable | None = None  # ports -> (checked, busy)
    scheduler: Callable | None = None  # `scontrol` arguments -> its output ("" when unreachable)
    clock: Callable[[], float] = time.time  # when the machine is probed: process ages are measured from it


def this_machine(environ: Mapping[str, str], launch: LaunchFacts, system: System = System()) -> MachineFacts:
    from .gpu import probe_gpus
    from .host import describe_processes, probe_host

    reads.not_cacheable("this machine's GPUs, processes and ports are probed, not read from files")
    port = launch.main_process_port.value if launch.main_process_port.state == "known" else None
    host = probe_host(
        environ,
        ports=[port] if isinstance(port, int) else [],
        config_file=launch.config_file,
        psutil=system.psutil,
        check_ports=system.check_ports,
    )
    machine = probe_gpus(
        nvml=system.nvml,
        visible=environ.get("CUDA_VISIBLE_DEVICES"),
        processes=lambda pids: describe_processes(pids, psutil=system.psutil, me=host.user),
    )
    return replace(machine, host=host, probed_at=system.clock())


@record
class _SnapshotHeader:
    kind: Any = None
    version: Any = None


@record
class Snapshot:
    """A snapshot file's declared shape: the facts dataclasses themselves (typed.py checks a file against it)."""

    kind: str
    version: int
    machine: MachineFacts
    stack: StackFacts = field(default_factory=StackFacts)


def read_snapshot(path: str) -> tuple[MachineFacts, StackFacts]:
    """One snapshot file (of one node, or a multi-node one), or a folder of per-node snapshots gathered another way
    (`pdsh`, a loop of `ssh`): the folder's *.json files, one node each, merged in name order."""
    if os.path.isdir(path):
        files = sorted(Path(path).glob("*.json"))
        if not files:
            raise InputError(
                f"--facts {path}: a folder with no *.json snapshots; write one per node with "
                f"`precision-doctor snapshot -o {path}/NODE.json`"
            )
        read = [_read_one_snapshot(str(f)) for f in files]
        nodes = [n for machine, _ in read for n in (machine.nodes or (machine,))]
        return merge_nodes(nodes, None, f"snapshots in {Path(path).name}/"), read[0][1]
    return _read_one_snapshot(path)


def _read_one_snapshot(path: str) -> tuple[MachineFacts, StackFacts]:
    from ..model.typed import decode_json

    where = f"--facts {path}"
    try:
        raw = read_text_bounded(path, MAX_SNAPSHOT_BYTES, what="snapshot").encode("utf-8", "surrogatepass")
    except Unreadable as exc:
        if exc.reason == "no such file":
            raise InputError(f"{where}: no such file; write one with `precision-doctor snapshot -o {path}`") from None
        raise InputError(
            f"{where}: cannot be read ({exc.reason}); write one with `precision-doctor snapshot -o FILE`"
        ) from None
    try:
        header = decode_json(raw, _SnapshotHeader, where, malformed="not a JSON snapshot")
    except InputError as exc:
        raise InputError(f"{exc}; write one with `precision-doctor snapshot -o FILE`") from None
    if header.kind != SNAPSHOT_KIND:
        raise InputError(f'{where}: not a precision-doctor snapshot (no "kind": "{SNAPSHOT_KIND}")')
    if header.version != SNAPSHOT_VERSION:
        raise InputError(
            f"{where}: snapshot version {str(header.version)[:20]!r}; this doctor reads version {SNAPSHOT_VERSION}"
        )
    snapshot = decode_json(raw, Snapshot, where)
    machine = snapshot.machine
    if len(machine.gpus) > MAX_GPUS_PER_NODE:
        raise InputError(f"{where}: machine.gpus: {len(machine.gpus)} GPUs; a node has at most {MAX_GPUS_PER_NODE}")
    nodes = tuple(replace(n, origin=MachineOrigin.SNAPSHOT) for n in machine.nodes)
    return replace(
        machine, source=f"snapshot {Path(path).name}", origin=MachineOrigin.SNAPSHOT, nodes=nodes
    ), snapshot.stack


def merge_nodes(nodes: list[MachineFacts], allocation: Allocation | None, source: str) -> MachineFacts:
    """One machine record for a whole allocation. Its own GPUs are the first node's, without their processes (the
    per-node rules read `nodes` and name the node), and it has no host of its own: the master node's is in
    `nodes`. A single node is returned as it is."""
    if len(nodes) == 1 and allocation is None:
        return replace(nodes[0], source=source)
    hosts = allocation.hosts if allocation else tuple(n.node_name for n in nodes)
    first = nodes[0]
    gpus = tuple(replace(g, processes=(), memory_used_mib=0) for g in first.gpus)
    return MachineFacts(
        known=first.known,
        source=source,
        origin=first.origin,
        gpus=gpus,
        reason=first.reason,
        driver_version=first.driver_version,
        cuda_driver_version=first.cuda_driver_version,
        probed_at=first.probed_at,
        nodes=tuple(nodes),
        allocation=allocation or Allocation(scheduler="", hosts=hosts),
    )


def gather_allocation(
    environ: Mapping[str, str], launcher: str | None, run: Callable[..., Any] | None = None
) -> tuple[MachineFacts, StackFacts]:
    """Inside a SLURM allocation: one `precision-doctor snapshot` per node through srun (the scheduler's own
    launcher, `--overlap` so it runs beside a job step), one JSON line back from each, merged. A node that sends
    nothing back is recorded as unknown, with srun's reason."""
    import subprocess

    job_id = environ.get("SLURM_JOB_ID", "")
    if not job_id:
        raise InputError(
            "snapshot --all-nodes runs inside a SLURM allocation (SLURM_JOB_ID is not set): "
            "`salloc -N 2` first, or `srun -N 2 --ntasks-per-node=1 precision-doctor snapshot` per node"
        )
    from ..system.programs import doctor_python, find_program

    run = run or subprocess.run
    count = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1"
    child = doctor_python(
        "precision_doctor", "snapshot", "--node-json", *(["--launcher", launcher] if launcher else [])
    )
    srun, why = find_program("srun", environ)
    if srun is None:
        raise InputError(f"snapshot --all-nodes: {why}; run it where SLURM's srun is installed")
    command = [
        srun,
        f"--nodes={count}",
        "--ntasks-per-node=1",
        f"--ntasks={count}",
        "--overlap",
        "--label",
        "--kill-on-bad-exit=0",
        *child,
    ]
    try:
        done = run(command, capture_output=True, text=True, timeout=300)
    except OSError as exc:
        raise InputError(f"snapshot --all-nodes: {srun} cannot be run ({exc.strerror or exc})") from None
    except subprocess.TimeoutExpired:
        raise InputError("snapshot --all-nodes: srun (one snapshot per node) did not finish in 300 s") from None
    chunks: dict[int, list[str]] = {}
    for line in done.stdout.splitlines():  # srun --label cuts a long line into labelled chunks: join them per task
        label, _, payload = line.partition(": ")
        if label.strip().isdigit():
            chunks.setdefault(int(label), []).append(payload)
    by_task: dict[int, MachineFacts] = {}
    stack: StackFacts | None = None
    for label, parts in chunks.items():
        try:
            data = parse_json("".join(parts))
            by_task[label] = _from_jsonable(MachineFacts, data["machine"])
            stack = stack or _from_jsonable(StackFacts, data.get("stack", {"packages": {}}))
        except (ValueError, KeyError, TypeError):
            continue
    hosts = _allocation_hosts(environ, run)
    why = (done.stderr.strip().splitlines() or [f"srun exited {done.returncode}"])[-1][:200]
    nodes = [
        by_task.get(i)
        or MachineFacts(
            known=False,
            source=hosts[i] if i < len(hosts) else f"task {i}",
            reason=f"no snapshot came back from this node ({why})",
        )
        for i in range(max(int(count) if count.isdigit() else 1, len(by_task)))
    ]
    if not by_task:
        raise InputError(f"snapshot --all-nodes: no node sent a snapshot back ({why})")
    allocation = Allocation(scheduler="slurm", job_id=job_id, hosts=tuple(hosts) or tuple(n.node_name for n in nodes))
    return merge_nodes(nodes, allocation, f"SLURM job {job_id}, {len(nodes)} nodes"), stack or StackFacts()


def _allocation_hosts(environ: Mapping[str, str], run: Callable[..., Any]) -> list[str]:
    """The allocation's node names in the scheduler's order (`scontrol show hostnames`), [] when it will not say."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
    from ..system.programs import find_program

    scontrol, _ = find_program("scontrol", environ)
    if not nodelist or scontrol is None:
        return []
    try:
        done = run([scontrol, "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    except Exception:  # noqa: BLE001 - the names are a convenience: the nodes name themselves
        return []
    return [h.strip() for h in done.stdout.splitlines() if h.strip()] if done.returncode == 0 else []


def snapshot_json(machine: MachineFacts, stack: StackFacts) -> str:
    from ..model.redact import redact_data
    from ..model.strict_json import dumps

    return dumps(
        {
            "kind": SNAPSHOT_KIND,
            "version": SNAPSHOT_VERSION,
            "machine": redact_data(_to_jsonable(machine)),
            "stack": _to_jsonable(stack),
        },
        indent=2,
    )


def gather_machine(
    target: str | None,
    facts_file: str | None,
    launch: LaunchFacts,
    environ: Mapping[str, str] | None = None,
    system: System = System(),
    job: JobFacts | None = None,
) -> tuple[MachineFacts, StackFacts | None]:
    """The machine the job runs on: the --facts snapshot, the --target profile, the job script's partition, or this
    machine. A job script is checked for its partition's nodes, not for the host it is submitted from."""
    if target and facts_file:
        raise InputError("--target and --facts both describe the machine; pass one of them")
    if facts_file:
        return read_snapshot(facts_file)
    if target:
        if job is not None and ":" not in target and job.gpus_per_node:  # the GPUs the job asks each node for
            target = f"{target}:{job.gpus_per_node}"
        return machine_from_target(target), None
    if job is not None:
        if not job.partition_gpu:
            return MachineFacts(known=False, source=f"job {job.path}", reason=job.partition_source), None
        count = job.gpus_per_node
        if find_profile(job.partition_gpu) is None:
            return MachineFacts(
                known=False,
                source=f"job {job.path}",
                reason=f"GPU type {job.partition_gpu!r} ({job.partition_source}) is not a profile "
                f"the doctor knows; name one with --target (`precision-doctor targets`)",
            ), None
        machine = machine_from_target(f"{job.partition_gpu}:{count}" if count else job.partition_gpu)
        return replace(machine, source=f"{machine.source}, {job.partition_source}"), None
    return this_machine(os.environ if environ is None else environ, launch, system), None


def job_of(
    paths: list[str],
    partitions: Mapping[str, Mapping],
    system: System = System(),
    submitted_with: Mapping[str, str] | None = None,
) -> tuple[list[str], JobFacts | None, LaunchFacts]:
    """The job script among `paths` (at most one), read, with the training script it runs put in its place.
    `submitted_with`: the options of the `sbatch` line that queues it, which override its #SBATCH lines."""
    from .jobscript import is_job_script, partition_gpu, read_job

    if submitted_with is not None and paths and not os.path.isfile(paths[0]):
        raise InputError(f"sbatch {paths[0]}: no such job script here; run the check where you run sbatch")
    queued = paths[0] if submitted_with is not None and paths else None  # whatever sbatch is given is a job
    jobs = [p for p in paths if os.path.isfile(p) and (p == queued or is_job_script(p))]
    if not jobs:
        return paths, None, LaunchFacts(known=False)
    if len(jobs) > 1:
        raise InputError(f"{jobs[0]} and {jobs[1]}: check one job script at a time")
    job, launch = read_job(jobs[0], display=_display(Path(jobs[0])))
    if submitted_with:
        given = {k: JobSetting(v, 0) for k, v in submitted_with.items()}
        job = replace(job, directives={**job.directives, **given})
    gpu, _, source = partition_gpu(job, partitions, system.scheduler)
    job = replace(job, partition_gpu=gpu, partition_source=source)
    rest = [p for p in paths if p != jobs[0]]
    if job.script.endswith(".py") and not any(os.path.realpath(p) == os.path.realpath(job.script) for p in rest):
        rest.append(job.script)
    return rest, job, launch


def launched_paths(launch: LaunchFacts) -> list[str]:
    """What a launch line runs, as a path to check: its script or recipe, else its module's file here."""
    if launch.script and (launch.script.endswith((".py", ".yaml", ".yml", ".json")) or os.path.isfile(launch.script)):
        return [launch.script]
    found = module_file(launch.module) if launch.module else None
    return [str(found)] if found is not None else []


def module_file(module: str, base: str = ".") -> Path | None:
    """`python -m pkg.train`'s file in this folder: pkg/train.py, or pkg/train/__main__.py."""
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module):
        return None
    stem = Path(base, *module.split("."))
    for candidate in (stem.with_suffix(".py"), stem / "__main__.py"):
        if os.path.isfile(candidate):
            return candidate
    return None


def with_module_found(launch: LaunchFacts) -> LaunchFacts:
    """A launch of `-m MODULE` (no recipe) whose module is not in this folder: listed as unknown."""
    if not launch.module or launch.script or module_file(launch.module) is not None:
        return launch
    reason = f"{launch.module} is not a module in this folder (run the check where the job runs)"
    return replace(launch, unknowns=(*launch.unknowns, Unknown(f"-m {launch.module}", reason)))


def visible_to_launch(machine: MachineFacts, launch: LaunchFacts) -> MachineFacts:
    """The GPUs the launch line's CUDA_VISIBLE_DEVICES leaves a --target or snapshot machine (this machine's
    probe applied it already)."""
    visible = launch.env.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not machine.known or machine.origin == MachineOrigin.THIS_MACHINE:
        return machine
    from .gpu import select_visible

    return replace(machine, gpus=tuple(select_visible(list(machine.gpus), visible)))


PARALLEL_FROM = 32  # scripts; below this, starting workers costs more than it saves


def gather(
    paths: list[str],
    target: str | None = None,
    launcher: str | None = None,
    script_args: tuple[str, ...] = (),
    stack_overrides: dict[str, str] | None = None,
    facts_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    system: System = System(),
    jobs: int = 1,
    exclude: tuple[str, ...] = (),
    root: str = ".",
    partitions: Mapping[str, Mapping] | None = None,
    python: str | None = None,
    keep_going: bool = False,
) -> Facts:
    """Every fact of one run: the scripts (probed in worker processes when there are many), the machine, the
    launch and the stack. Collection runs no rule: the engine does, on these facts, whatever `jobs` was.
    A file among several named (pre-commit, an editor), or any named file with `keep_going`, that cannot be
    checked is reported like one found in a folder, and the run goes on."""
    return _gather(
        paths,
        target,
        launcher,
        script_args,
        stack_overrides,
        facts_file,
        environ,
        system,
        jobs,
        exclude,
        root,
        partitions,
        python,
        keep_going,
    )[0]


def gather_judged(
    paths: list[str], judge_with: Callable[[Facts], Callable[[ScriptFacts], Any]], **options: Any
) -> tuple[Facts, tuple | None]:
    """`gather()`, where worker processes probe: each worker also judges the scripts it probed, with
    `judge_with(the run's facts, no script)`, and sends back the verdict with the script's facts less its calls
    (only the rules read those; they are nine tenths of the bytes). The verdicts are aligned with `scripts` (None
    for a script no worker judged), or None when no worker ran: the caller judges those scripts itself."""
    return _gather(paths, judge_with=judge_with, **options)


def _gather(
    paths: list[str],
    target: str | None = None,
    launcher: str | None = None,
    script_args: tuple[str, ...] = (),
    stack_overrides: dict[str, str] | None = None,
    facts_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    system: System = System(),
    jobs: int = 1,
    exclude: tuple[str, ...] = (),
    root: str = ".",
    partitions: Mapping[str, Mapping] | None = None,
    python: str | None = None,
    keep_going: bool = False,
    judge_with: Callable | None = None,
) -> tuple[Facts, tuple | None]:
    from ..system.programs import distrust

    distrust(paths)  # before anything may start a program: none from these trees
    given = parse_launcher(launcher) if launcher else None
    if given is not None and given.launcher == "sbatch":  # `--launcher "sbatch job.sbatch"`: the job it queues
        paths = [given.job_file, *paths]
    elif given is not None and not paths:  # `--launcher "torchrun ... train.py"` alone: check what it runs,
        paths = launched_paths(given)  # reporting what it cannot judge as not checked, never refusing it
        keep_going = True
    queued = given.job_options if given is not None and given.launcher == "sbatch" else None
    distrust(paths)  # the job script or launched script the launch line names, before its job is read
    paths, job, job_launch = job_of(paths, partitions or {}, system, queued)
    distrust(paths)  # and the script the job runs: before the cache is opened, never one inside them
    content_cache.prepare()
    entries = _expand(paths, exclude, root) if paths or job is None else []
    job_runs: tuple[Facts, ...] = ()
    found_jobs = [p for p, named in entries if not named and p.suffix in JOB_SUFFIXES]
    if found_jobs:  # each job script a folder holds is its own run: its launch, its partition, what it runs
        job_runs = tuple(
            gather(
                [str(j)],
                target=target,
                stack_overrides=stack_overrides,
                facts_file=facts_file,
                environ=environ,
                system=system,
                exclude=exclude,
                root=root,
                partitions=partitions,
                python=python,
                keep_going=True,
            )
            for j in found_jobs
        )
        launched = {os.path.realpath(r.job.script) for r in job_runs if r.job is not None and r.job.script}
        entries = [(p, n) for p, n in entries if p not in found_jobs and os.path.realpath(p) not in launched]
    if keep_going or len(entries) > 1:
        entries = [(p, False) for p, _ in entries]
    files = [p for p, _ in entries]
    env = os.environ if environ is None else environ
    if given is not None and given.launcher != "sbatch":
        launch = with_module_found(given)
    elif job is not None:
        launch = job_launch
    elif not target and not facts_file:  # the doctor may itself run under torchrun / accelerate launch
        launch = launch_from_env(dict(env))
    else:
        launch = LaunchFacts(known=False)
    args = tuple(script_args) or launch.script_args
    machine_env = {**env, **launch.env} if launch.env else env  # `CUDA_VISIBLE_DEVICES=0,1 torchrun ...`
    machine, snapshot_stack = gather_machine(target, facts_file, launch, machine_env, system, job)
    machine = visible_to_launch(machine, launch)
    if job is None:  # a job's launch read its files from the job's folder already
        launch = with_accelerate_files(launch, machine.host)
    variables, source = script_environment(machine, machine_env)
    script_env = (None if variables is None else RecordedEnviron(variables), source)
    resolver = None
    if stack_overrides is not None or snapshot_stack is None:
        resolver = StackResolver(stack_overrides, training_environment(python, env))
    judge = None
    if judge_with is not None and FORKS and jobs > 1 and len(entries) >= PARALLEL_FROM:
        # every script carries its own project's stack (or, with a snapshot, judges by the node's)
        judge = judge_with(
            Facts(scripts=(), machine=machine, launch=launch, stack=snapshot_stack or StackFacts(), job=job)
        )
    with one_run():  # each file is read once per run, and afresh in the next
        if judge is None:
            # each folder's stack is read while worker processes probe (it needs only the paths)
            scripts = _probe_all(
                entries,
                args,
                jobs,
                script_env,
                meanwhile=lambda: [resolver.for_script(f) for f in files] if resolver else None,
            )
            verdicts, trains = None, [_trains(s) for s in scripts]
            if launch.unknowns:  # what the launch reads and the doctor could not: listed with each script it launches
                scripts = tuple(replace(s, unknowns=s.unknowns + launch.unknowns) for s in scripts)
        else:  # the workers read each folder's stack, as they need it to judge
            scripts, verdicts, trains, stacks = _judge_all(
                entries, args, jobs, script_env, _Finish(launch.unknowns, resolver), judge
            )
    if len(scripts) > 1:  # a recipe a script reads is judged with that script, not again alone
        driven = {c for s in scripts for c in s.configs_read}
        keep = [not (is_config_path(Path(s.path)) and os.path.normpath(s.path) in driven) for s in scripts]
        if not all(keep):
            scripts = tuple(s for s, k in zip(scripts, keep, strict=True) if k)
            trains = [t for t, k in zip(trains, keep, strict=True) if k]
            verdicts = None if verdicts is None else tuple(v for v, k in zip(verdicts, keep, strict=True) if k)
            files = [f for f, k in zip(files, keep, strict=True) if k]
            if judge is not None:
                stacks = [x for x, k in zip(stacks, keep, strict=True) if k]
    # nothing could be checked: the input was bad (exit 2), however many files it named, unless the run was asked to
    # go on (pre-commit staging only empty __init__.py files passes)
    # (an empty file is no input error, and no file checked either)
    failed = [s for s in scripts if _not_checked(s)]
    if not keep_going and failed and all(_not_checked(s) or _empty(s) for s in scripts):
        first = failed[0]
        raise InputError(f"{first.path}: {first.unknowns[0].reason}; nothing could be checked")
    named = [
        f
        for f, s, t in zip(files, scripts, trains, strict=False)
        if not _not_checked(s) and not t and any(p == str(f) or os.path.abspath(p) == os.path.abspath(f) for p in paths)
    ]
    extra = _importers(named, set(files))
    if extra:  # a helper module named alone is checked through the scripts that train with it
        entries, files = entries + [(f, False) for f in extra], files + extra
        with one_run():
            if judge is None:
                scripts = scripts + _probe_all([(f, False) for f in extra], args, jobs, script_env)
            else:
                more, more_verdicts, _, more_stacks = _judge_all(
                    [(f, False) for f in extra], args, jobs, script_env, _Finish((), resolver), judge
                )
                scripts, verdicts, stacks = scripts + more, verdicts + more_verdicts, stacks + more_stacks
    context = tuple(_display(f) for f in extra)
    if resolver is None:  # the node's versions, not this laptop's
        return Facts(
            scripts=scripts,
            machine=machine,
            launch=launch,
            stack=snapshot_stack,
            job=job,
            jobs=job_runs,
            context=context,
        ), verdicts
    if judge is None:
        scripts, stack = _stacks(scripts, files, resolver)
    else:  # the workers gave each script its stack
        stack = _run_stack(stacks, resolver)
    facts = Facts(scripts=scripts, machine=machine, launch=launch, stack=stack, job=job, jobs=job_runs, context=context)
    return facts, verdicts


def script_environment(machine: MachineFacts, environ: Mapping[str, str]) -> tuple[dict | None, str]:
    """The environment the job's `os.environ` reads see, as far as the doctor knows it: a snapshot's recorded
    variables, this machine's when checking this machine, none for a bare --target profile."""
    if machine.origin == MachineOrigin.SNAPSHOT:
        return dict(machine.host.env if machine.host else {}), f"the {machine.source}"
    if machine.origin == MachineOrigin.THIS_MACHINE:
        return dict(environ), "this machine's environment"
    return None, ""


def _stacks(
    scripts: tuple[ScriptFacts, ...], files: list[Path], resolver: StackResolver
) -> tuple[tuple[ScriptFacts, ...], StackFacts]:
    """Each script with the versions of its own project, and the run's stack (`_run_stack`)."""
    out = tuple(replace(s, stack=resolver.for_script(f)) for s, f in zip(scripts, files, strict=False))
    run = _run_stack([s.stack for s in out], resolver)
    return with_installed_signatures(out, _site_dirs(resolver), resolver.installed), run


def _run_stack(stacks: list[StackFacts], resolver: StackResolver) -> StackFacts:
    """The scripts' projects' stack when they all agree, else the environment's (for the rules that judge the
    launch rather than a script)."""
    one = all(s is stacks[0] or s == stacks[0] for s in stacks)  # (one per folder; from workers, equal copies)
    return stacks[0] if one and stacks else resolver.environment_stack()


def _site_dirs(resolver: StackResolver) -> tuple[str, ...]:
    return resolver.environment.site_dirs if resolver.environment else ()


@record
class _Finish:
    """What the run adds to each script's own facts: the launch's unknowns, its project's stack, and the signatures
    its installed libraries declare (as `gather` adds them to every script after probing)."""

    launch_unknowns: tuple[Unknown, ...]
    resolver: StackResolver | None

    @property
    def key(self) -> tuple:
        """What the additions depend on besides the files they read."""
        return (self.launch_unknowns, self.resolver.identity if self.resolver is not None else None)

    def __call__(self, script: ScriptFacts, path: Path) -> tuple[ScriptFacts, StackFacts | None]:
        """The script finished, and its project's stack as read (before the signatures: the run's stack is
        decided on those)."""
        if self.launch_unknowns:
            script = replace(script, unknowns=script.unknowns + self.launch_unknowns)
        if self.resolver is None:
            return script, None
        stack = self.resolver.for_script(path)
        script = replace(script, stack=stack)
        return with_installed_signatures((script,), _site_dirs(self.resolver), self.resolver.installed)[0], stack


def _empty(s: ScriptFacts) -> bool:
    return any(u.what == NOTHING_TO_CHECK for u in s.unknowns)


def _not_checked(script: ScriptFacts) -> bool:
    return any(u.what == "not checked" for u in script.unknowns)


def _trains(script: ScriptFacts) -> bool:
    """The script starts training itself (a Trainer, an optimizer, a backward or step)."""
    return any(
        c.kind in ("trainer", "optimizer", "train", "prepare")
        or (c.kind == "method" and c.callee.endswith((".backward", ".step")))
        for c in script.calls
    )


MAX_IMPORTER_SCAN = 5000  # .py files of one repository read to find a helper's importers
MAX_IMPORTERS = 20


def _importers(helpers: list[Path], already: set[Path]) -> list[Path]:
    """The repository's scripts that import one of these modules and train: the entry scripts a change to a helper
    reaches. Read as text (bounded), never run."""
    import re

    from .versions import project_root

    found: list[Path] = []
    if not helpers:
        return found
    checked = {os.path.realpath(f) for f in already}  # named as given (relative), found under the root (absolute)
    for helper in helpers:
        module = helper.stem if helper.name != "__init__.py" else helper.parent.name
        pattern = re.compile(
            rf"^\s*(from\s+[\w.]*\b{re.escape(module)}\b\s+import|import\s+[\w.]*\b"
            rf"{re.escape(module)}\b|from\s+[\w.]+\s+import\s+.*\b{re.escape(module)}\b)",
            re.MULTILINE,
        )
        root = project_root(helper.parent)
        if root == Path(root.anchor):
            root = helper.parent  # no repository: its own folder
        try:
            candidates = python_files(root).files[:MAX_IMPORTER_SCAN]
        except Unreadable:
            continue
        checked.add(os.path.realpath(helper))
        for candidate in candidates:
            try:
                text = read_text_bounded(candidate, errors="replace")
            except Unreadable:
                continue
            if pattern.search(text) and re.search(r"\.train\(|Trainer\(|\.backward\(|optim\.", text):
                real = os.path.realpath(candidate)  # only for the few that match: resolving is a system call each
                if real not in checked:
                    found.append(candidate)
                    checked.add(real)
            if len(found) >= MAX_IMPORTERS:
                return found
    return found


def _probe_all(
    entries: list[tuple[Path, bool]],
    args: tuple[str, ...],
    jobs: int,
    environ: tuple = (None, ""),
    meanwhile: Callable[[], Any] | None = None,
) -> tuple[ScriptFacts, ...]:
    """Probe every script, in worker processes when there are many (each is parsed independently).
    `meanwhile()` is this process's own work while the workers probe (here, before probing with none)."""
    from ..system.pool import Lost, run_parallel

    progress.expect(len(entries))
    parallel = jobs > 1 and len(entries) >= PARALLEL_FROM  # else run_parallel calls _probe here, in order
    done = run_parallel(
        _probe_entry,
        [(f, named, args, environ) for f, named in entries],
        jobs if parallel else 1,
        chunk=max(1, len(entries) // (jobs * 4)),
        meanwhile=meanwhile,
        weights=[_size(f) for f, _ in entries] if parallel else None,
        groups=[f.parent for f, _ in entries] if parallel else None,
        on_done=progress.advance,
    )
    return tuple(
        ScriptFacts(path=_display(f), unknowns=(Unknown("not checked", r.reason),)) if isinstance(r, Lost) else r
        for (f, _), r in zip(entries, done, strict=False)
    )


def _judge_all(
    entries: list[tuple[Path, bool]],
    args: tuple[str, ...],
    jobs: int,
    environ: tuple,
    finish: _Finish,
    judge: Callable[[ScriptFacts], Any],
) -> tuple[tuple[ScriptFacts, ...], tuple, list[bool], list[StackFacts | None]]:
    """Probe, finish and judge every script in worker processes: each script's facts without their calls, its
    verdict, whether it trains, and its project's stack. A script whose worker died is reported not checked and
    judged here."""
    from ..system.pool import Lost, run_parallel

    progress.expect(len(entries))
    each = _ProbeAndJudge(args, environ, finish, judge)
    done = [each.known(e) for e in entries]  # what the cache answers needs no worker
    todo = [i for i, d in enumerate(done) if d is content_cache.MISS]
    for _ in range(len(entries) - len(todo)):
        progress.advance()
    if len(todo) < PARALLEL_FROM:  # starting workers would cost more than it saves
        for i in todo:
            done[i] = each(entries[i])
            progress.advance()
    else:
        computed = run_parallel(
            each,
            [entries[i] for i in todo],
            jobs,
            chunk=max(1, len(todo) // (jobs * 4)),
            weights=[_size(entries[i][0]) for i in todo],
            groups=[entries[i][0].parent for i in todo],
            on_done=progress.advance,
        )
        for i, r in zip(todo, computed, strict=True):
            done[i] = r
    scripts, verdicts, trains, stacks = [], [], [], []
    for (f, _), r in zip(entries, done, strict=False):
        if isinstance(r, Lost):
            lost, stack = finish(ScriptFacts(path=_display(f), unknowns=(Unknown("not checked", r.reason),)), f)
            r = lost, None, False, stack
        scripts.append(r[0])
        verdicts.append(r[1])
        trains.append(r[2])
        stacks.append(r[3])
    return tuple(scripts), tuple(verdicts), trains, stacks


class _ProbeAndJudge:
    """One script of a judged run, probed, finished and judged: in a forked worker (never pickled), or here for a
    few. With the content cache open the whole answer is one entry, found by the script's probe, the run's
    additions and the judge's context, and trusted while nothing any of them read has changed; `known` gives it
    without computing (MISS: a worker's job)."""

    def __init__(self, args: tuple[str, ...], environ: tuple, finish: _Finish, judge: Callable):
        self.args, self.environ, self.finish, self.judge = args, environ, finish, judge
        context = getattr(judge, "key", lambda: None)() if content_cache.is_open() else None
        self.context = (context, finish.key) if context is not None else None

    def known(self, entry: tuple[Path, bool]) -> Any:
        if self.context is None:
            return content_cache.MISS
        return content_cache.peek("judged", self._asked(entry), self.environ[0], tuple)

    def __call__(self, entry: tuple[Path, bool]) -> tuple[ScriptFacts, Any, bool, StackFacts | None]:
        if self.context is None:
            return self._judged(entry)
        return content_cache.cached("judged", self._asked(entry), self.environ[0], lambda: self._judged(entry), tuple)

    def _asked(self, entry: tuple[Path, bool]) -> tuple:
        path, named = entry
        return (*_probe_question(path, named, self.args, self.environ), self.context)

    def _judged(self, entry: tuple[Path, bool]) -> tuple[ScriptFacts, Any, bool, StackFacts | None]:
        path, named = entry
        script, stack = self.finish(_probe(path, named, self.args, self.environ), path)
        return replace(script, calls=()), self.judge(script), _trains(script), stack


def _size(path: Path) -> int:
    """A file's size, the measure of its probe's cost that the pool balances (0 when it cannot be read: the probe
    reports that quickly)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _probe_entry(item) -> ScriptFacts:
    path, named, args, environ = item
    return _probe(path, named, args, environ)


def _display(path: Path) -> str:
    path = _through_links(path)
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)
