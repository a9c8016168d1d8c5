"""The doctor's own state (`fix`'s undo folders) lives in the user's state folder, is never written through a link
or into someone else's folder, never read from a FIFO or past a bound, and a fix run that wrote nothing keeps none."""

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from rich.console import Console  # noqa: E402

from precision_doctor.fix.session import run_engine_check, run_fix  # noqa: E402
from precision_doctor.probes.collect import gather  # noqa: E402

from .conftest import machine_probes  # noqa: E402
from .test_fix_bytes import FIXED, doctor, expected_after, make_project  # noqa: E402


def _undo_runs() -> list[str]:
    folder = Path(os.environ["XDG_STATE_HOME"]) / "precision-doctor" / "undo"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def test_undo_data_stays_out_of_the_checked_tree_even_where_it_plants_links(tmp_path):
    project, outside = tmp_path / "proj", tmp_path / "outside"
    outside.mkdir()
    original = make_project(project, "crlf")
    (project / ".precision-doctor").symlink_to(outside)  # what an old doctor wrote to; a repository may plant it
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    assert b"applied 1 fix" in proc.stdout, proc.stderr
    assert os.listdir(outside) == []
    assert sorted(p.name for p in project.iterdir()) == [".precision-doctor", FIXED, "train.py"]
    assert len(_undo_runs()) == 1
    undone = doctor("fix", "--undo", cwd=project)
    assert undone.returncode == 0, undone.stderr
    assert (project / FIXED).read_bytes() == original


@pytest.mark.parametrize("planted", ["precision-doctor", "precision-doctor/undo"])
def test_a_state_folder_that_is_a_link_is_refused_and_nothing_is_written(tmp_path, planted):
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    elsewhere.mkdir()
    original = make_project(project, "bom")
    link = Path(os.environ["XDG_STATE_HOME"]) / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere)
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and "is a link" in err, err
    assert os.listdir(elsewhere) == []
    assert (project / FIXED).read_bytes() == original  # no undo data, no fix


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user's takes root")
def test_a_state_folder_owned_by_someone_else_is_refused(tmp_path):
    project = tmp_path / "proj"
    original = make_project(project, "bom")
    theirs = Path(os.environ["XDG_STATE_HOME"]) / "precision-doctor"
    theirs.mkdir(parents=True)
    os.chown(theirs, 4242, 4242)
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "belongs to another user (uid 4242)" in err, err
    assert (project / FIXED).read_bytes() == original


def test_a_fix_run_that_wrote_nothing_keeps_no_undo_and_plain_undo_still_works(tmp_path, monkeypatch):
    """Two fix runs on one file at once: the second finds the file changed under it and writes nothing. It keeps
    no undo folder, so a plain `fix --undo` takes back the run that did write."""
    project = tmp_path / "proj"
    original = make_project(project, "no-final-newline")
    monkeypatch.chdir(project)
    check = run_engine_check(lambda: gather(["train.py"], target="titan-rtx", **machine_probes()), None)

    def ask(_question):  # while this session waits, another run fixes the same file
        other = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
        assert b"applied 1 fix" in other.stdout, other.stderr
        return "y"

    from precision_doctor.model.errors import InputError

    with pytest.raises(InputError, match="changed since it was checked"):
        run_fix(
            check, yes=False, diff_only=False, unsafe=False, select=None, console=Console(file=io.StringIO()), ask=ask
        )
    assert (project / FIXED).read_bytes() == expected_after(original)
    assert len(_undo_runs()) == 1  # the other run's only
    undone = doctor("fix", "--undo", cwd=project)
    assert undone.returncode == 0 and b"restored" in undone.stdout, undone.stderr
    assert (project / FIXED).read_bytes() == original


@pytest.mark.parametrize("what", ["manifest.json", "files/0"])
def test_a_fifo_in_the_undo_state_is_refused_without_waiting(tmp_path, what):
    project = tmp_path / "proj"
    make_project(project, "crlf")
    doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    (run,) = _undo_runs()
    planted = Path(os.environ["XDG_STATE_HOME"]) / "precision-doctor" / "undo" / run / what
    planted.unlink()
    os.mkfifo(planted)
    started = time.monotonic()
    proc = doctor("fix", "--undo", planted.parents[1 if "/" in what else 0], cwd=tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and "not a regular file" in err, err
    assert time.monotonic() - started < 30


def test_undo_folder_is_printed_and_undoes_from_anywhere(tmp_path):
    project = tmp_path / "proj"
    original = make_project(project, "u2028")
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    printed = re.search(r"^undo: precision-doctor fix --undo (\S+)$", proc.stdout.decode(), re.M)
    assert printed and printed.group(1).startswith(os.environ["XDG_STATE_HOME"]), proc.stdout
    (tmp_path / "elsewhere").mkdir()
    undone = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "fix", "--undo", printed.group(1)],
        cwd=tmp_path / "elsewhere",
        capture_output=True,
        timeout=60,
    )
    assert undone.returncode == 0, undone.stderr
    assert (project / FIXED).read_bytes() == original


def test_plain_undo_from_a_folder_above_the_project_restores_its_latest_fix(tmp_path):
    project = tmp_path / "work" / "proj"
    original = make_project(project, "crlf")
    (project / ".git").mkdir()
    doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    assert (project / FIXED).read_bytes() != original
    (tmp_path / "elsewhere").mkdir()
    beside = doctor("fix", "--undo", cwd=tmp_path / "elsewhere")  # no project under it: one line, nothing touched
    assert beside.returncode == 2 and b"nothing to undo" in beside.stderr
    undone = doctor("fix", "--undo", cwd=tmp_path / "work")
    assert undone.returncode == 0, undone.stderr
    assert (project / FIXED).read_bytes() == original


def test_a_state_folder_inside_the_checked_repository_is_refused(tmp_path):
    project = tmp_path / "proj"
    original = make_project(project, "crlf")
    (project / ".git").mkdir()
    env = {**os.environ, "XDG_STATE_HOME": str(project / ".state")}  # undo data the repository could have written
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project, env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and "inside the repository" in err, err
    assert not (project / ".state").exists() and (project / FIXED).read_bytes() == original


def _tamper(entry_change) -> Path:
    (run,) = _undo_runs()
    manifest = Path(os.environ["XDG_STATE_HOME"]) / "precision-doctor" / "undo" / run / "manifest.json"
    data = json.loads(manifest.read_text())
    entry_change(data["files"][0])
    manifest.write_text(json.dumps(data))
    return manifest.parent


@pytest.mark.parametrize("change", ["outside the roots", "backup outside files", "NUL in the path", "a long name"])
def test_a_tampered_manifest_restores_nothing_and_says_so_in_one_line(tmp_path, change):
    project, victim = tmp_path / "proj", tmp_path / "victim.txt"
    make_project(project, "crlf")
    victim.write_text("kept\n")
    doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    edits = {
        "outside the roots": lambda e: e.update(path=str(victim)),
        "backup outside files": lambda e: e.update(backup="files/../../x"),
        "NUL in the path": lambda e: e.update(path=str(project / "a\x00b")),
        "a long name": lambda e: e.update(path=str(project / ("n" * 5000))),
    }
    run = _tamper(edits[change])
    fixed_now = (project / FIXED).read_bytes()
    proc = doctor("fix", "--undo", run, cwd=tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and "never writes; nothing restored" in err, err
    assert victim.read_text() == "kept\n" and (project / FIXED).read_bytes() == fixed_now


def test_undo_of_an_impossible_name_is_one_line(tmp_path, monkeypatch):
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "fix", "--undo", "x" * 5000],
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and "no such file or folder" in err and len(err) < 400, err
    from precision_doctor.fix.undo import undo
    from precision_doctor.model.errors import InputError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no such file or folder"):  # a NUL cannot come through argv, only a manifest
        undo(["a\x00b"], force=False, say=print)


def test_a_write_that_fails_midway_keeps_the_backup_it_recorded(tmp_path, monkeypatch):
    """A write refused before it began keeps no undo; one that failed on its way (a full disk) may have changed the
    file, so its backup stays and `fix --undo` can restore it."""
    project = tmp_path / "proj"
    original = make_project(project, "crlf")
    monkeypatch.chdir(project)
    check = run_engine_check(lambda: gather(["train.py"], target="titan-rtx", **machine_probes()), None)
    from precision_doctor.model.errors import InputError
    from precision_doctor.system import safe_io

    def full_disk(fd, data, at=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safe_io, "_write_all", full_disk)
    with pytest.raises(InputError, match="No space left"):
        run_fix(check, yes=True, diff_only=False, unsafe=False, select=None, console=Console(file=io.StringIO()))
    assert (project / FIXED).read_bytes() == original  # the temporary file never replaced it
    assert len(_undo_runs()) == 1
