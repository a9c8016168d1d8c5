"""Gather every fact a check needs: scripts, machine, launch and stack. The only impure layer.

The machine comes from one of three places: this machine (NVML, processes, ports, environment,
accelerate config), a named `--target` profile, or a `--facts` snapshot taken on the cluster node.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from .config import excluded
from .errors import InputError
from .facts import (Facts, LaunchFacts, MachineFacts, MachineOrigin, ScriptFacts, StackFacts, Unknown, _from_jsonable,
                    _to_jsonable)
from .probes.launch import launch_from_env, parse_launcher
from .probes.script import probe_script
from .probes.stack import probe_stack
from .probes.target import machine_from_target

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".env", "site-packages", "node_modules",
             ".tox", ".nox", ".mypy_cache", ".pytest_cache", "build", "dist"}
SNAPSHOT_KIND = "precision-doctor-snapshot"
SNAPSHOT_VERSION = 1


def _expand(paths: list[str], exclude: tuple[str, ...] = (), root: str = ".") -> list[tuple[Path, bool]]:
    """(file, named on the command line) pairs; a file found by walking a folder was not named.
    Folders are walked the way git sees them (.gitignore respected) when they are in a repository."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise InputError(f"{raw}: no such file or directory; pass a training script (.py) or a folder of them")
        if p.is_file():
            out.append((p, True))
            continue
        found = _git_files(p)
        if found is None:
            found = _walk(p)
        found = [f for f in found if not excluded(f, exclude, root)]
        if not found:
            raise InputError(f"{raw}: a directory with no Python files; pass a training script or a folder of them")
        out.extend((f, False) for f in found)
    return list(dict.fromkeys(out))


def _walk(folder: Path) -> list[Path]:
    found = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")
                         and not (Path(here) / d / "pyvenv.cfg").exists())
        found.extend(Path(here) / f for f in sorted(files) if f.endswith(".py"))
    return found


def _git_files(folder: Path) -> list[Path] | None:
    """Tracked and untracked-but-not-ignored .py files under `folder`, or None outside a git work tree."""
    import shutil
    import subprocess

    if shutil.which("git") is None:
        return None
    try:
        proc = subprocess.run(["git", "-C", str(folder), "ls-files", "--cached", "--others", "--exclude-standard",
                               "-z", "--", "*.py"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    names = sorted({n for n in proc.stdout.decode("utf-8", "replace").split("\0") if n})
    files = [folder / n for n in names]
    return [f for f in files if f.is_file() and not any(part in SKIP_DIRS for part in f.relative_to(folder).parts)]


def _probe(path: Path, named: bool, args: tuple[str, ...]) -> ScriptFacts:
    """A named file that cannot be read is bad input (exit 2); one found in a folder is reported and skipped."""
    try:
        return probe_script(path, args, display=_display(path))
    except InputError as exc:
        if named:
            raise
        shown = _display(path)
        return ScriptFacts(path=shown, unknowns=(Unknown("not checked", str(exc).split(": ", 1)[-1]),))


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
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--facts {path}: no such file; write one with `precision-doctor snapshot -o {path}`") \
            from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
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
           system: System = System(), jobs: int = 1, exclude: tuple[str, ...] = (), root: str = ".") -> Facts:
    """Every fact of one run: the scripts (probed in worker processes when there are many), the machine, the
    launch and the stack. Collection runs no rule: the engine does, on these facts, whatever `jobs` was."""
    entries = _expand(paths, exclude, root)
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
    scripts = _probe_all(entries, args, jobs)
    return Facts(scripts=scripts, machine=machine, launch=launch, stack=stack)


def _probe_all(entries: list[tuple[Path, bool]], args: tuple[str, ...], jobs: int) -> tuple[ScriptFacts, ...]:
    """Probe every script, in worker processes when there are many (each is parsed independently)."""
    if jobs <= 1 or len(entries) < PARALLEL_FROM:
        return tuple(_probe(f, named, args) for f, named in entries)
    from concurrent.futures import ProcessPoolExecutor

    chunk = max(1, len(entries) // (jobs * 4))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return tuple(pool.map(_probe_entry, [(f, named, args) for f, named in entries], chunksize=chunk))


def _probe_entry(item) -> ScriptFacts:
    path, named, args = item
    return _probe(path, named, args)


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)
