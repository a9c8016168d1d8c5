"""The Python files of a folder, found without running anything from it.

Inside a git work tree the walk skips what git ignores: `.gitignore` files at every level (read with pathspec's
git-flavoured spec: negations, directory-only and anchored patterns), and the repository's `info/exclude`.
git itself is never run: a repository's own config can name commands git executes (core.fsmonitor, hooks,
filters), and the tree being checked may have been written by a stranger. Everywhere, build output, caches and
virtual environments are skipped. Links to folders are not followed (git does not follow them either).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.util import record
from .sources import Unreadable, os_reason, read_text_bounded

SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".venv",
    "venv",
    "env",
    ".env",
    "site-packages",
    "node_modules",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    "build",
    "dist",
}
MAX_IGNORE_BYTES = 1024 * 1024  # a .gitignore or info/exclude file


@dataclass
class Walk:
    files: list[Path] = field(default_factory=list)  # entries with the suffixes asked for, in walk order
    unlisted: list[tuple[Path, str]] = field(default_factory=list)  # folders that could not be listed, and why


@record
class _Rules:
    """The patterns of one ignore file; they match paths relative to `base`."""

    base: str
    spec: Any  # pathspec.GitIgnoreSpec

    def verdict(self, path: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by a `!` pattern, None: no pattern here speaks about it."""
        rel = os.path.relpath(path, self.base).replace(os.sep, "/")
        return self.spec.check_file(rel + "/" if is_dir else rel).include


CODE_SUFFIXES = (".py", ".ipynb")  # scripts and notebooks
JOB_SUFFIXES = (".sbatch", ".slurm", ".sh", ".bash", ".job")  # a batch job script, by its name


def python_files(folder: Path, suffixes: tuple[str, ...] = CODE_SUFFIXES) -> Walk:
    """Every .py entry under `folder` (sorted, depth first) that git would list, skipping SKIP_DIRS, virtual
    environments and, outside a repository, hidden folders. Raises Unreadable when `folder` cannot be listed."""
    top = os.path.abspath(folder)
    repo = repository_root(top)
    rules = _inherited_rules(repo, top) if repo else []
    walk = Walk()
    pending: list[tuple[str, list[_Rules]]] = [(top, rules)]
    while pending:
        here, rules = pending.pop()
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            if here == top:
                raise Unreadable(folder, f"the folder cannot be listed ({os_reason(exc)})") from None
            walk.unlisted.append((Path(folder) / os.path.relpath(here, top), os_reason(exc)))
            continue
        if repo:
            rules = rules + _rules_in(here, ".gitignore")
        subfolders = []
        for entry in entries:
            is_dir = _is_real_dir(entry)
            if is_dir and _skipped_folder(entry, in_repo=bool(repo)):
                continue
            if not is_dir and not entry.name.endswith(suffixes):
                continue
            if _ignored(rules, entry.path, is_dir):
                continue
            shown = Path(folder) / os.path.relpath(entry.path, top)
            if is_dir:
                subfolders.append(entry.path)
            else:
                walk.files.append(shown)
        pending.extend((d, rules) for d in reversed(subfolders))
    return walk


def repository_root(path: str) -> str | None:
    """The nearest folder at or above `path` that holds a `.git` folder or file, or None."""
    here = os.path.abspath(path)
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _inherited_rules(repo: str, top: str) -> list[_Rules]:
    """info/exclude (lowest precedence), then the .gitignore of every folder from the repository root down to
    the parent of `top`: their patterns reach into the folder being walked."""
    rules = []
    git_dir = _git_dir(repo)
    if git_dir:
        rules.extend(_rules_in(os.path.join(git_dir, "info"), "exclude", base=repo))
    here = repo
    for part in Path(os.path.relpath(top, repo)).parts if top != repo else ():
        rules.extend(_rules_in(here, ".gitignore"))
        here = os.path.join(here, part)
    return rules


def _git_dir(repo: str) -> str | None:
    """The folder holding info/exclude: `.git` itself, or for a linked work tree or submodule (a `.git` file
    saying `gitdir: ...`) that folder's common directory."""
    dot_git = os.path.join(repo, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    try:
        first = read_text_bounded(dot_git, 64 * 1024, what="git file", errors="replace").strip()
    except Unreadable:
        return None
    if not first.startswith("gitdir:"):
        return None
    git_dir = os.path.join(repo, first[len("gitdir:") :].strip())
    try:
        common = read_text_bounded(
            os.path.join(git_dir, "commondir"), 64 * 1024, what="git file", errors="replace"
        ).strip()
    except Unreadable:
        return git_dir
    return os.path.join(git_dir, common)


def _rules_in(folder: str, name: str, base: str | None = None) -> list[_Rules]:
    """The patterns of `folder/name` as a one-element list; none when it is absent or unreadable (git too skips
    an ignore file it cannot read)."""
    path = os.path.join(folder, name)
    if not os.path.lexists(path):
        return []
    try:
        lines = read_text_bounded(path, MAX_IGNORE_BYTES, what="ignore file", errors="replace").splitlines()
    except Unreadable:
        return []
    import pathspec  # only for trees that have ignore files: a single-script check does not pay for it

    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    return [_Rules(base or folder, spec)]


def _ignored(rules: list[_Rules], path: str, is_dir: bool) -> bool:
    """git's precedence: a deeper ignore file overrides a shallower one, and info/exclude comes last."""
    for r in reversed(rules):
        verdict = r.verdict(path, is_dir)
        if verdict is not None:
            return verdict
    return False


def _is_real_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _skipped_folder(entry: os.DirEntry, in_repo: bool) -> bool:
    """Caches, build output and virtual environments; outside a repository also hidden folders (inside one,
    git decides: `.github/scripts/*.py` is code)."""
    if entry.name in SKIP_DIRS or (not in_repo and entry.name.startswith(".")):
        return True
    try:
        return stat.S_ISREG(os.stat(os.path.join(entry.path, "pyvenv.cfg")).st_mode)
    except OSError:
        return False
