"""Gather every fact a check needs: scripts, machine, launch and stack. The only impure layer.

The machine comes from one of three places: this machine (NVML, processes, ports, environment,
accelerate config), a named `--target` profile, or a `--facts` snapshot taken on the cluster node.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from .config import excluded
from .errors import InputError
from .facts import (Facts, LaunchFacts, MachineFacts, MachineOrigin, ScriptFacts, StackFacts, Unknown, _from_jsonable,
                    _to_jsonable)
from .probes.launch import launch_from_env, parse_launcher
from .probes.script import one_run, probe_script
from .probes.stack import probe_stack
from .probes.target import machine_from_target
from .sources import Unreadable, os_reason, read_text_bounded, status
from .walk import python_files

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
            raise InputError(f"{raw}: {'no such file or directory' if exc.reason == 'no such file' else exc.reason}"
                             f"; {hint}") from None
        if not stat.S_ISDIR(info.st_mode):
            out.append((p, True))  # whatever it is, reading it says what is wrong with it
            continue
        walk = python_files(p)
        found = [f for f in walk.files if not excluded(f, exclude, root)]
        unlisted = [d for d, _ in walk.unlisted if not excluded(d, exclude, root)]
        if not found and not unlisted:
            raise InputError(f"{raw}: a directory with no Python files; pass a training script or a folder of them")
        out.extend((f, False) for f in found + unlisted)
    return list(dict.fromkeys(out))


def _probe(path: Path, named: bool, args: tuple[str, ...]) -> ScriptFacts:
    """A named file that cannot be read is bad input (exit 2); one found in a folder is reported and skipped."""
    try:
        if not named and os.path.isdir(path) and not os.path.islink(path):  # a subfolder the walk could not list
            raise Unreadable(path, f"the folder cannot be listed ({_listing_problem(path)})")
        return probe_script(path, args, display=_display(path))
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


@dataclass(frozen=True)
class System:
    """The outside world the machine probes read; tests pass fakes built from a machine fixture."""

    nvml: Any = None  # the pynvml module
    psutil: Any = None  # the psutil module
    check_ports: Callable | None = None  # ports -> (checked, busy)


def this_machine(environ: Mapping[str, str], launch: LaunchFacts, system: System = System()) -> MachineFacts:
    from .probes.gpu import probe_gpus
    from .probes.host import describe_processes, probe_host

    port = launch.main_process_port.value if launch.main_process_port.state == "known" else None
    host = probe_host(environ, ports=[port] if isinstance(port, int) else [], config_file=launch.config_file,
                      psutil=system.psutil, check_ports=system.check_ports)
    machine = probe_gpus(nvml=system.nvml, visible=environ.get("CUDA_VISIBLE_DEVICES"),
                         processes=lambda pids: describe_processes(pids, psutil=system.psutil, me=host.user))
    return replace(machine, host=host, probed_at=time.time())


def read_snapshot(path: str) -> tuple[MachineFacts, StackFacts]:
    try:
        data = json.loads(read_text_bounded(path, MAX_SNAPSHOT_BYTES, what="snapshot"))
    except Unreadable as exc:
        if exc.reason == "no such file":
            raise InputError(f"--facts {path}: no such file; write one with `precision-doctor snapshot -o {path}`") \
                from None
        raise InputError(f"--facts {path}: cannot be read ({exc.reason}); write one with "
                         f"`precision-doctor snapshot -o FILE`") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"--facts {path}: not a JSON snapshot ({type(exc).__name__}); write one with "
                         f"`precision-doctor snapshot -o FILE`") from None
    if not isinstance(data, dict) or data.get("kind") != SNAPSHOT_KIND:
        raise InputError(f"--facts {path}: not a precision-doctor snapshot (no \"kind\": \"{SNAPSHOT_KIND}\")")
    if data.get("version") != SNAPSHOT_VERSION:
        raise InputError(f"--facts {path}: snapshot version {data.get('version')!r}; this doctor reads "
                         f"version {SNAPSHOT_VERSION}")
    try:
        machine = _from_jsonable(MachineFacts, data["machine"])
        stack = _from_jsonable(StackFacts, data.get("stack", {"packages": {}}))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"--facts {path}: malformed snapshot ({type(exc).__name__}: {exc})") from None
    return replace(machine, source=f"snapshot {Path(path).name}", origin=MachineOrigin.SNAPSHOT), stack


def snapshot_json(machine: MachineFacts, stack: StackFacts) -> str:
    from .redact import redact_data

    return json.dumps({"kind": SNAPSHOT_KIND, "version": SNAPSHOT_VERSION,
                       "machine": redact_data(_to_jsonable(machine)),
                       "stack": _to_jsonable(stack)}, indent=2)


def gather_machine(target: str | None, facts_file: str | None, launch: LaunchFacts,
                   environ: Mapping[str, str] | None = None,
                   system: System = System()) -> tuple[MachineFacts, StackFacts | None]:
    if target and facts_file:
        raise InputError("--target and --facts both describe the machine; pass one of them")
    if facts_file:
        return read_snapshot(facts_file)
    if target:
        return machine_from_target(target), None
    return this_machine(os.environ if environ is None else environ, launch, system), None


PARALLEL_FROM = 32  # scripts; below this, starting workers costs more than it saves


def gather(paths: list[str], target: str | None = None, launcher: str | None = None,
           script_args: tuple[str, ...] = (), stack_overrides: dict[str, str] | None = None,
           facts_file: str | None = None, environ: Mapping[str, str] | None = None,
           system: System = System(), jobs: int = 1, exclude: tuple[str, ...] = (), root: str = ".",
           keep_going: bool = False) -> Facts:
    """Every fact of one run: the scripts (probed in worker processes when there are many), the machine, the
    launch and the stack. Collection runs no rule: the engine does, on these facts, whatever `jobs` was.
    `keep_going`: a file named in `paths` that cannot be checked is reported like one found in a folder."""
    entries = _expand(paths, exclude, root)
    if keep_going:
        entries = [(p, False) for p, _ in entries]
    files = [p for p, _ in entries]
    env = os.environ if environ is None else environ
    if launcher:
        launch = parse_launcher(launcher)
    elif not target and not facts_file:  # the doctor may itself run under torchrun / accelerate launch
        launch = launch_from_env(dict(env))
    else:
        launch = LaunchFacts(known=False)
    args = tuple(script_args) or launch.script_args
    machine, snapshot_stack = gather_machine(target, facts_file, launch, env, system)
    if stack_overrides is None and snapshot_stack is not None:  # the node's versions, not this laptop's
        stack = snapshot_stack
    else:
        stack = probe_stack(sorted({f.parent for f in files}), stack_overrides)
    with one_run():  # each file is read once per run, and afresh in the next
        scripts = _probe_all(entries, args, jobs)
    return Facts(scripts=scripts, machine=machine, launch=launch, stack=stack)


def _probe_all(entries: list[tuple[Path, bool]], args: tuple[str, ...], jobs: int) -> tuple[ScriptFacts, ...]:
    """Probe every script, in worker processes when there are many (each is parsed independently)."""
    if jobs <= 1 or len(entries) < PARALLEL_FROM:
        return tuple(_probe(f, named, args) for f, named in entries)
    from .pool import Lost, run_parallel

    chunk = max(1, len(entries) // (jobs * 4))
    done = run_parallel(_probe_entry, [(f, named, args) for f, named in entries], jobs, chunk=chunk)
    return tuple(ScriptFacts(path=_display(f), unknowns=(Unknown("not checked", r.reason),))
                 if isinstance(r, Lost) else r for (f, _), r in zip(entries, done))


def _probe_entry(item) -> ScriptFacts:
    path, named, args = item
    return _probe(path, named, args)


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)
