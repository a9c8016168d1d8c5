"""Folder runs: nothing from the checked repository runs, and the files found are the ones git would list.

Real git runs here only on repositories these tests build themselves, to compute what git would list and to
prove that the planted commands do fire when git is run in that repository; the doctor never runs it.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from precision_doctor.system.walk import SKIP_DIRS, python_files

ROOT = Path(__file__).resolve().parents[1]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str, home: Path, check: bool = True) -> str:
    """git with no system or user configuration: only what the test put in the repository."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, timeout=60, check=check
    ).stdout


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def committed_repo(repo: Path, files: dict[str, str], home: Path) -> Path:
    """A git repository holding `files`, all committed."""
    write(repo, files)
    git(repo, "init", "-q", home=home)
    git(repo, "add", "-A", home=home)
    git(repo, "commit", "-qm", "x", home=home)
    return repo


def doctor(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


# --- a hostile repository ------------------------------------------------------------------------------------------

HOOKS = (
    "pre-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
    "post-commit",
    "fsmonitor-watchman",
    "post-merge",
    "pre-push",
    "post-rewrite",
    "prepare-commit-msg",
    "commit-msg",
)


def plant(repo: Path, sentinels: Path) -> None:
    """A command writing a file into `sentinels` in every place a repository's config can name one."""
    sentinels.mkdir()

    def cmd(name: str) -> str:
        return f"sh -c 'touch {sentinels}/{name}; cat' #"  # `cat`: a filter or pager still passes data on

    hooks = repo / ".git" / "evil-hooks"
    hooks.mkdir()
    for hook in HOOKS:
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {sentinels}/hook-{hook}\n")
        (hooks / hook).chmod(0o755)
        shutil.copy(hooks / hook, repo / ".git" / "hooks" / hook)
    settings = {
        "core.fsmonitor": cmd("core.fsmonitor"),
        "core.hooksPath": str(hooks),
        "core.pager": cmd("core.pager"),
        "pager.ls-files": cmd("pager.ls-files"),
        "pager.status": cmd("pager.status"),
        "core.editor": cmd("core.editor"),
        "core.sshCommand": cmd("core.sshCommand"),
        "core.askPass": cmd("core.askPass"),
        "diff.external": cmd("diff.external"),
        "filter.evil.clean": cmd("filter.clean"),
        "filter.evil.smudge": cmd("filter.smudge"),
        "filter.evil.process": cmd("filter.process"),
        "filter.evil.required": "true",
        "diff.evil.textconv": cmd("diff.textconv"),
        "alias.ls-files": f"!{cmd('alias.ls-files')}",
        "alias.st": f"!{cmd('alias.st')}",
        "credential.helper": f"!{cmd('credential.helper')}",
        "gpg.program": cmd("gpg.program"),
        "sequence.editor": cmd("sequence.editor"),
        "uploadpack.packObjectsHook": cmd("packObjectsHook"),
        "core.untrackedCache": "true",
    }
    for key, value in settings.items():
        git(repo, "config", key, value, home=repo.parent)
    (repo / ".gitattributes").write_text("*.py filter=evil diff=evil\n")


@needs_git
def test_a_folder_run_runs_nothing_from_the_repository(tmp_path):
    repo = committed_repo(
        tmp_path / "repo",
        {"train.py": "import torch\nmodel = torch.nn.Linear(2, 2).half()\n", "src/util.py": "x = 1\n"},
        tmp_path,
    )
    sentinels = tmp_path / "ran"
    plant(repo, sentinels)
    (repo / "new.py").write_text("y = 2\n")  # untracked: what made the old walk ask git

    # control: the plants are live, so their silence below means something
    git(repo, "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.py", home=tmp_path, check=False)
    assert os.listdir(sentinels), "the command v0.1.0 ran fired no planted command: the test proves nothing"
    shutil.rmtree(sentinels)
    sentinels.mkdir()

    for args in (
        ["check", str(repo)],
        ["check", str(repo / "src")],
        ["check", str(repo), "--format", "json"],
        ["fix", "--diff", str(repo)],
    ):
        proc = doctor(*args, "--target", "cpu", cwd=repo)
        assert proc.returncode in (0, 1), proc.stderr
        assert os.listdir(sentinels) == [], f"{args}: a command from the repository ran"
    proc = doctor("check", str(repo), "--format", "json", "--include-facts", "--target", "cpu", cwd=repo)
    assert {Path(s["path"]).name for s in json.loads(proc.stdout)["facts"]["scripts"]} == {
        "train.py",
        "util.py",
        "new.py",
    }


def test_the_walk_starts_no_process(tmp_path, monkeypatch):
    """Belt and braces: whatever the folder holds, walking it asks no other program."""
    write(
        tmp_path,
        {
            ".git/config": "[core]\n\tfsmonitor = touch /nonexistent\n",
            ".gitignore": "skip.py\n",
            "a.py": "",
            "skip.py": "",
            "sub/b.py": "",
        },
    )

    def refuse(*_a, **_k):
        raise AssertionError("the walk started a process")

    for name in ("Popen",):
        monkeypatch.setattr(subprocess, name, refuse)
    for name in ("system", "posix_spawn", "posix_spawnp", "fork", "execv", "execve", "execvp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)
    assert [p.relative_to(tmp_path).as_posix() for p in python_files(tmp_path).files] == ["a.py", "sub/b.py"]


# --- the same files as git -----------------------------------------------------------------------------------------

TREE = {
    ".gitignore": "# comment\n*.gen.py\n!keep.gen.py\n/top_only.py\ndata/\n!data/rescued.py\nlogs\n"
    "**/scratch/*.py\nnotes/*.py\n!notes/kept.py\n\\#hash.py\nspace.py \n",
    "train.py": "",
    "model.gen.py": "",
    "keep.gen.py": "",
    "top_only.py": "",
    "#hash.py": "",
    "space.py": "",
    "data/loader.py": "",
    "data/rescued.py": "",
    "logs/run.py": "",
    "notes/a.py": "",
    "notes/kept.py": "",
    "notes/deeper/b.py": "",
    "pkg/top_only.py": "",
    "pkg/scratch/tmp.py": "",
    "pkg/scratch/deep/ok.py": "",
    "pkg/local.py": "",
    "pkg/anchored.py": "",
    "pkg/sub/anchored.py": "",
    "pkg/again.gen.py": "",
    "pkg/sub/logs": "",
    "pkg/.gitignore": "local.py\n/anchored.py\n!again.gen.py\n",
    "pkg/sub/.gitignore": "*\n!*.py\n!*/\n",
    "pkg/sub/deep/x.py": "",
    "pkg/sub/deep/.gitignore": "x.py\n",
    "pkg/sub/kept.py": "",
    "info_only.py": "",
    "ex/skipped_by_info/a.py": "",
    "ex/fine.py": "",
    ".github/scripts/ci_helper.py": "",
    "tools/readme.txt": "",
}
INFO_EXCLUDE = "info_only.py\nskipped_by_info/\n"


def git_lists(repo: Path, folder: Path, home: Path) -> set[str]:
    """What `git ls-files --cached --others --exclude-standard` lists under `folder`, relative to it, less the
    folders the doctor always skips (build output, caches, virtual environments)."""
    out = git(folder, "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.py", home=home)
    names = {n for n in out.split("\0") if n}
    return {n for n in names if not set(Path(n).parts[:-1]) & SKIP_DIRS}


def walked(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in python_files(folder).files}


@needs_git
@pytest.mark.parametrize("committed", [False, True], ids=["untracked", "committed"])
def test_the_walk_lists_what_git_lists(tmp_path, committed):
    repo = tmp_path / "repo"
    write(repo, TREE)
    git(repo, "init", "-q", home=tmp_path)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text(INFO_EXCLUDE)
    if committed:
        git(repo, "add", "-A", home=tmp_path)  # honours the ignore files: nothing ignored is tracked
        git(repo, "commit", "-qm", "x", home=tmp_path)
    expected = git_lists(repo, repo, tmp_path)
    # the tree exercises every rule: some files are ignored, some re-included, some stay ignored
    assert {
        "keep.gen.py",
        "notes/kept.py",
        "pkg/again.gen.py",
        "pkg/sub/anchored.py",
        "pkg/sub/kept.py",
        ".github/scripts/ci_helper.py",
        "pkg/scratch/deep/ok.py",
        "pkg/top_only.py",
    } <= expected
    assert (
        not {
            "model.gen.py",
            "data/rescued.py",
            "logs/run.py",
            "info_only.py",
            "ex/skipped_by_info/a.py",
            "pkg/local.py",
            "pkg/anchored.py",
            "pkg/sub/deep/x.py",
            "#hash.py",
        }
        & expected
    )
    assert walked(repo) == expected
    for sub in ("pkg", "pkg/sub", "notes", "ex"):
        assert walked(repo / sub) == git_lists(repo, repo / sub, tmp_path), sub


@needs_git
def test_a_linked_work_tree_reads_the_shared_info_exclude(tmp_path):
    repo = committed_repo(tmp_path / "repo", {"a.py": "", "b.py": ""}, tmp_path)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("local_*.py\n")
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked), home=tmp_path)
    write(linked, {"local_scratch.py": "", "new.py": ""})
    assert (linked / ".git").is_file()
    assert walked(linked) == git_lists(linked, linked, tmp_path) == {"a.py", "b.py", "new.py"}


def test_outside_a_repository_caches_hidden_folders_and_environments_are_skipped(tmp_path):
    write(
        tmp_path,
        {
            "train.py": "",
            ".hidden/x.py": "",
            "build/y.py": "",
            "myenv/pyvenv.cfg": "",
            "myenv/lib/z.py": "",
            "pkg/__pycache__/c.py": "",
            "pkg/m.py": "",
            ".gitignore": "pkg/m.py\n",
        },
    )  # no repository: an ignore file means nothing
    assert walked(tmp_path) == {"train.py", "pkg/m.py"}


def test_links_to_folders_are_not_followed(tmp_path):
    write(tmp_path, {"real/a.py": ""})
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "real" / "up").symlink_to(tmp_path, target_is_directory=True)
    assert walked(tmp_path) == {"real/a.py"}


def test_a_folder_the_walk_cannot_list_is_reported(tmp_path, monkeypatch):
    write(tmp_path, {"a.py": "", "locked/b.py": ""})
    real = os.scandir

    def scandir(path):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    walk = python_files(tmp_path)
    assert [p.name for p in walk.files] == ["a.py"]
    assert [(p.name, why) for p, why in walk.unlisted] == [("locked", "permission denied")]


def test_ignore_files_that_are_not_regular_files_are_passed_over(tmp_path):
    """A FIFO planted as .gitignore must not hang the walk (git, too, reads no patterns from it)."""
    write(tmp_path, {".git/HEAD": "ref: refs/heads/main\n", "a.py": ""})
    os.mkfifo(tmp_path / ".gitignore")
    assert stat.S_ISFIFO(os.stat(tmp_path / ".gitignore").st_mode)
    assert walked(tmp_path) == {"a.py"}
