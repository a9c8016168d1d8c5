"""The programs the doctor starts (and the one library it loads), and how it finds them.

A CI gate runs the doctor in a repository nobody here wrote, often with `.`, an empty entry (`PATH=:$PATH`) or a
relative entry (`node_modules/.bin`) in PATH. So a program (the scheduler's `scontrol`, `srun`) is looked up only
in absolute PATH entries that lie outside the trees being checked and outside the working directory; a program
there that is a link into one of them is passed over too. When that leaves none, the caller goes on with the value
unknown and says why. The NVIDIA driver's NVML library is found the same way in LD_LIBRARY_PATH (an empty entry there
is the working directory to the dynamic linker) and loaded by its absolute path.

The doctor's own Python children (live mode's supervisor and child, `snapshot --all-nodes`' per-node snapshot) start
with the working directory off the import path: `python -m` would put it first, and a `precision_doctor/` folder or
a `pynvml.py` in the directory the user stands in would be imported instead of the installed package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping

_CHECKED: list[str] = []  # real paths of the trees this run checks (each path's repository, else its folder)
_REPOSITORIES: list[str] = []  # ... of those that are repositories


def distrust(paths: Iterable[str]) -> None:
    """The files and folders this run checks: no program in their trees is ever run. A path's tree is its outermost
    repository (a submodule's superproject too), found both from the path as named and from where its links lead;
    else its folder."""
    for named in paths:
        path = named.split("\0", 1)[0] or "."  # no file has such a name; what precedes it is where it points
        for seen in (os.path.abspath(path), os.path.realpath(path)):
            folder = seen if os.path.isdir(seen) else os.path.dirname(seen)
            repository = outermost_repository(folder)
            tree = os.path.realpath(repository or folder)
            if tree not in _CHECKED:
                _CHECKED.append(tree)
            if repository and tree not in _REPOSITORIES:
                _REPOSITORIES.append(tree)


def outermost_repository(folder: str) -> str | None:
    """The highest folder at or above `folder` that holds a `.git` (folder or file), or None."""
    found, here = None, os.path.abspath(folder)
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            found = here
        parent = os.path.dirname(here)
        if parent == here:
            return found
        here = parent


def untrusted_folders() -> list[str]:
    """The working directory's repository (else the directory itself) and the trees this run checks."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:
        here = ""
    mine = os.path.realpath(outermost_repository(here) or here) if here else ""
    # the filesystem root as the working directory would rule out every program: it counts as no folder
    return [t for t in dict.fromkeys((here, mine, *_CHECKED)) if t and t != os.sep]


def checked_trees() -> list[str]:
    """Every tree this run reads someone else's content from: the working directory's repository and each checked
    path's repository, else its folder."""
    return list(dict.fromkeys(untrusted_repositories() + _CHECKED))


def untrusted_repositories() -> list[str]:
    """The repositories of the working directory and of the paths this run checks: content someone else may have
    written, where the doctor keeps no state of its own."""
    try:
        here = outermost_repository(os.getcwd())
    except OSError:
        here = None
    return list(dict.fromkeys(([os.path.realpath(here)] if here else []) + _REPOSITORIES))


def inside(path: str, folders: list[str]) -> bool:
    """`path` (real) is one of `folders` or below one."""
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def find_program(name: str, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """(the program's absolute path, "") or (None, why none can be run)."""
    environ = os.environ if environ is None else environ
    untrusted = untrusted_folders()
    passed_over = False
    for entry in environ.get("PATH", os.defpath).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            passed_over = True
            continue
        candidate = os.path.join(entry, name)
        if not os.path.isfile(candidate) or not os.access(candidate, os.X_OK):
            continue
        if inside(os.path.realpath(entry), untrusted) or inside(os.path.realpath(candidate), untrusted):
            passed_over = True
            continue
        return candidate, ""
    where = " outside the checked tree and the working directory" if passed_over else ""
    return None, f"{name} is not on PATH{where}"


# where the dynamic linker finds a driver's libraries besides LD_LIBRARY_PATH: its default folders, the driver images'
# (NVIDIA's container runtime, WSL), and what /etc/ld.so.conf lists
LIBRARY_FOLDERS = (
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib",
    "/usr/lib/wsl/lib",
)


def find_library(name: str, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """(the shared library's absolute path, "") where the dynamic linker would find it, or (None, why not).
    LD_LIBRARY_PATH entries are taken as PATH's are: an empty, `.` or relative entry (the working directory to the
    linker), or one in the working directory or a checked tree, is passed over, so a library planted there is never
    loaded. Loading the one found by its path first makes a later load by name (pynvml's) take it."""
    environ = os.environ if environ is None else environ
    untrusted = untrusted_folders()
    passed_over = False
    folders = []
    for entry in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if environ.get("LD_LIBRARY_PATH") else []:
        if not entry or not os.path.isabs(entry) or inside(os.path.realpath(entry), untrusted):
            passed_over = True
            continue
        folders.append(entry)
    for folder in (*folders, *_ld_so_conf_folders(), *LIBRARY_FOLDERS):
        candidate = os.path.join(folder, name)
        if not os.path.isfile(candidate):
            continue
        if inside(os.path.realpath(candidate), untrusted):
            passed_over = True
            continue
        return candidate, ""
    where = " outside the checked tree and the working directory" if passed_over else ""
    return None, f"{name} not found{where}"


def _ld_so_conf_folders(conf: str = "/etc/ld.so.conf", depth: int = 0) -> list[str]:
    """The folders /etc/ld.so.conf lists, its `include` globs read in turn (bounded)."""
    import glob

    from .sources import Unreadable, read_text_bounded

    try:
        text = read_text_bounded(conf, 64 * 1024, what="ld.so.conf", errors="replace")
    except (Unreadable, OSError):
        return []
    out: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include") and depth < 2:
            for included in sorted(glob.glob(line[len("include") :].strip()))[:64]:
                out += _ld_so_conf_folders(included, depth + 1)
        elif line.startswith("/"):
            out.append(line)
    return out


def doctor_python(module: str, *args: str) -> list[str]:
    """The command that runs `python -m module args` with this interpreter, importing the doctor from where this
    process did and nothing from the working directory (the child's own code may put a folder back on the path:
    live mode's child puts the script's)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds precision_doctor/
    boot = (
        "import os, sys\n"
        "here = os.getcwd()\n"
        "sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != here]\n"
        f"sys.path.append({root!r}) if {root!r} not in sys.path else None\n"
        "module = sys.argv.pop(1)\n"
        "import runpy\n"
        "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
    )
    return [sys.executable, "-c", boot, module, *args]
