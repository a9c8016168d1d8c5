"""The programs the doctor starts, and how it finds them.

A CI gate runs the doctor in a repository nobody here wrote, often with `.`, an empty entry (`PATH=:$PATH`) or a
relative entry (`node_modules/.bin`) in PATH. So a program (the scheduler's `scontrol`, `srun`) is looked up only
in absolute PATH entries that lie outside the trees being checked and outside the working directory; a program
there that is a link into one of them is passed over too. When that leaves none, the caller goes on with the value
unknown and says why.

The doctor's own Python children (live mode's supervisor and child, `snapshot --all-nodes`' per-node snapshot) start
with the working directory off the import path: `python -m` would put it first, and a `precision_doctor/` folder or
a `pynvml.py` in the directory the user stands in would be imported instead of the installed package.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable, Mapping

_CHECKED: list[str] = []  # real paths of the trees this run checks (each path's repository, else its folder)


def distrust(paths: Iterable[str]) -> None:
    """The files and folders this run checks: no program in their trees is ever run."""
    from .walk import repository_root

    for path in paths:
        real = os.path.realpath(path)
        folder = real if os.path.isdir(real) else os.path.dirname(real)
        tree = repository_root(folder) or folder
        if tree not in _CHECKED:
            _CHECKED.append(tree)


def _untrusted() -> list[str]:
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:
        here = ""
    # the filesystem root as the working directory would rule out every program: it counts as no folder
    return [t for t in (here, *_CHECKED) if t and t != os.sep]


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def find_program(name: str, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """(the program's absolute path, "") or (None, why none can be run)."""
    environ = os.environ if environ is None else environ
    untrusted = _untrusted()
    passed_over = False
    for entry in environ.get("PATH", os.defpath).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            passed_over = True
            continue
        candidate = os.path.join(entry, name)
        if not os.path.isfile(candidate) or not os.access(candidate, os.X_OK):
            continue
        if _inside(os.path.realpath(entry), untrusted) or _inside(os.path.realpath(candidate), untrusted):
            passed_over = True
            continue
        return candidate, ""
    where = " outside the checked tree and the working directory" if passed_over else ""
    return None, f"{name} is not on PATH{where}"


def doctor_python(module: str, *args: str) -> list[str]:
    """The command that runs `python -m module args` with this interpreter, importing the doctor from where this
    process did and nothing from the working directory (the child's own code may put a folder back on the path:
    live mode's child puts the script's)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds precision_doctor/
    boot = ("import os, sys\n"
            "here = os.getcwd()\n"
            "sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != here]\n"
            f"sys.path.append({root!r}) if {root!r} not in sys.path else None\n"
            "module = sys.argv.pop(1)\n"
            "import runpy\n"
            "runpy.run_module(module, run_name='__main__', alter_sys=True)\n")
    return [sys.executable, "-c", boot, module, *args]
