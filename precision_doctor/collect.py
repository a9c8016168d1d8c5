"""Gather every fact a check needs: scripts, machine, launch and stack. The only impure layer."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError
from .facts import Facts
from .probes.launch import no_launcher, parse_launcher
from .probes.script import probe_script
from .probes.stack import probe_stack
from .probes.target import machine_from_target, unknown_machine

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".env", "site-packages", "node_modules",
             ".tox", ".nox", ".mypy_cache", ".pytest_cache", "build", "dist"}


def expand_paths(paths: list[str]) -> list[Path]:
    """Files as given; directories walked for .py files (virtual environments and caches skipped)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise InputError(f"{raw}: no such file or directory; pass a training script (.py) or a folder of them")
        if p.is_file():
            out.append(p)
            continue
        found = []
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")
                             and not (Path(root) / d / "pyvenv.cfg").exists())
            found.extend(Path(root) / f for f in sorted(files) if f.endswith(".py"))
        if not found:
            raise InputError(f"{raw}: a directory with no Python files; pass a training script or a folder of them")
        out.extend(found)
    return list(dict.fromkeys(out))


def gather(paths: list[str], target: str | None = None, launcher: str | None = None,
           script_args: tuple[str, ...] = (), stack_overrides: dict[str, str] | None = None) -> Facts:
    files = expand_paths(paths)
    launch = parse_launcher(launcher) if launcher else no_launcher()
    args = tuple(script_args) or launch.script_args
    machine = machine_from_target(target) if target else unknown_machine()
    scripts = tuple(probe_script(f, args, display=_display(f)) for f in files)
    stack = probe_stack(sorted({f.parent for f in files}), stack_overrides)
    return Facts(scripts=scripts, machine=machine, launch=launch, stack=stack)


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)
