"""Writes only where asked: `-o FILE` and `fix` never follow a link planted at a temp name, write pipes, FIFOs and
devices in place, write a symlinked script through its link, keep hard links, owner and mode, and fail with one
line (exit 2) and no temp file left on a read-only folder, a full disk or an interrupted write."""

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from precision_doctor.model.errors import InputError
from precision_doctor.system import safe_io

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "fixtures/seed001_titan_fp16/buggy"
RENAMED = b"        dtype=torch.float16,  # BF16"  # PD214's safe fix on seed 001: torch_dtype= -> dtype=


def doctor(*args, cwd, stdout=subprocess.PIPE, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *map(str, args)],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def seed_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train.py", "model_utility_configs.py"):
        shutil.copyfile(SEED / name, folder / name)
    return folder


def temps(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.endswith(".tmp")]


@contextmanager
def read_only(folder: Path):
    """A folder nobody here can create files in: mode 555, or for root (who ignores modes) the immutable flag."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    if (
        shutil.which("chattr") is None
        or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0
    ):
        pytest.skip("running as root on a filesystem without the immutable flag: no folder is read-only to root")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


# --- -o FILE ------------------------------------------------------------------------------------------


def test_a_link_planted_at_the_old_temp_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / ".report.json.tmp").symlink_to(victim)
    proc = doctor("snapshot", "--target", "a100", "-o", "report.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "precious\n"
    assert json.loads((tmp_path / "report.json").read_text())["kind"] == "precision-doctor-snapshot"
    assert (tmp_path / ".report.json.tmp").is_symlink()  # left as it was, not written through


def test_report_to_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got = {}

    def read():
        with open(fifo, "rb") as handle:
            got["data"] = handle.read()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = doctor("snapshot", "--target", "a100", "-o", fifo, cwd=tmp_path)
    reader.join(20)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(got["data"])["kind"] == "precision-doctor-snapshot"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not a file renamed over it
    assert temps(tmp_path) == []


def full_device(tmp_path: Path) -> Path:
    """A node of the full device: root makes its own in tmp_path, so a regression that renames over the target
    ruins a copy, never the system's /dev/full; others cannot hurt /dev/full and use it."""
    if os.geteuid() == 0:
        node = tmp_path / "full"
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
            with open(node, "wb", buffering=0) as handle:
                handle.write(b"x")
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                return node
            pytest.skip(f"cannot make a device node here ({exc.strerror})")
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    return Path("/dev/full")


def test_a_full_device_is_one_line_and_exit_2(tmp_path):
    device = full_device(tmp_path)
    proc = doctor("snapshot", "--target", "a100", "-o", device, cwd=tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert err.startswith(f"precision-doctor: error: -o {device}: cannot write (No space left on device)")
    assert "Traceback" not in err and err.count("\n") == 1
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def stdout_path(tmp_path: Path) -> Path:
    """/dev/stdout itself where a regression cannot replace it (not root); for root, a link to it in tmp_path."""
    if os.geteuid() != 0:
        return Path("/dev/stdout")
    link = tmp_path / "stdout"
    link.symlink_to("/dev/stdout")
    return link


def test_dev_stdout_is_this_process_stdout(tmp_path):
    target = stdout_path(tmp_path)
    piped = doctor("check", "--target", "a100", "--format", "json", "-o", target, cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert "findings" in json.loads(piped.stdout)
    log = tmp_path / "log.txt"
    log.write_text("earlier output\n")
    with open(log, "ab") as appended:  # `>> log.txt`: the report is appended, as a shell redirection would
        proc = doctor("snapshot", "--target", "a100", "-o", target, cwd=tmp_path, stdout=appended)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert text.startswith("earlier output\n{") and json.loads(text.split("\n", 1)[1])["kind"]
    if target.is_symlink():
        assert os.readlink(target) == "/dev/stdout"  # still the link, not a file renamed over it


def test_read_only_folder_is_exit_2_with_no_temp_left(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    with read_only(folder):
        proc = doctor("snapshot", "--target", "a100", "-o", folder / "report.json", cwd=tmp_path)
        err = proc.stderr.decode()
        assert proc.returncode == 2 and "not writable" in err and "Traceback" not in err, err
        assert os.listdir(folder) == []


# --- fix ----------------------------------------------------------------------------------------------


def test_fix_in_a_read_only_folder_is_exit_2_and_changes_nothing(tmp_path):
    project = seed_project(tmp_path / "proj")
    before = {p.name: p.read_bytes() for p in project.iterdir()}
    with read_only(project):  # the undo backup cannot be kept: nothing is written
        proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "not writable" in err and "internal error" not in err, err
    assert {p.name: p.read_bytes() for p in project.iterdir()} == before


def test_fix_where_only_the_scripts_folder_is_read_only(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # the backup goes to the project root
    src = seed_project(tmp_path / "src")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    with read_only(src):
        proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=src)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "not writable" in err and "internal error" not in err, err
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before  # no temp file, no change


def test_fix_writes_a_symlinked_script_through_its_link(tmp_path):
    real = seed_project(tmp_path / "shared")
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copyfile(SEED / "train.py", project / "train.py")
    link = project / "model_utility_configs.py"
    link.symlink_to("../shared/model_utility_configs.py")
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    assert "applied 1 fix" in proc.stdout.decode(), proc.stderr
    assert link.is_symlink() and os.readlink(link) == "../shared/model_utility_configs.py"
    assert RENAMED in (real / "model_utility_configs.py").read_bytes()


def test_fix_keeps_hard_links_mode_and_owner(tmp_path):
    project = seed_project(tmp_path / "proj")
    target = project / "model_utility_configs.py"
    other = tmp_path / "elsewhere.py"
    os.link(target, other)
    os.chmod(target, 0o640)
    if os.geteuid() == 0:
        os.chown(target, 65534, 65534)  # a file root fixes stays its owner's
    before = os.stat(target)
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    assert "applied 1 fix" in proc.stdout.decode(), proc.stderr
    after = os.stat(target)
    assert after.st_ino == before.st_ino == os.stat(other).st_ino and after.st_nlink == 2
    assert RENAMED in other.read_bytes()
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert temps(project) == []


def test_fix_as_root_keeps_the_owner_of_a_plain_file(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    project = seed_project(tmp_path / "proj")
    target = project / "model_utility_configs.py"
    os.chown(target, 65534, 65534)
    doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    assert RENAMED in target.read_bytes()
    assert (os.stat(target).st_uid, os.stat(target).st_gid) == (65534, 65534)


# --- the module's own guarantees ----------------------------------------------------------------------


def test_an_interrupted_write_leaves_the_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_bytes(b"old\n")

    def interrupt(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        safe_io.write_file(target, b"new\n")
    assert target.read_bytes() == b"old\n" and temps(tmp_path) == []


def test_an_edit_made_during_the_write_is_never_lost(tmp_path, monkeypatch):
    target = tmp_path / "train.py"
    target.write_bytes(b"x = 1\n")
    seen = safe_io.digest(b"x = 1\n")
    real_fsync = os.fsync

    def someone_edits(fd):  # after the new content is ready, before it replaces the file
        real_fsync(fd)
        with open(target, "ab") as handle:
            handle.write(b"# edited meanwhile\n")

    monkeypatch.setattr(os, "fsync", someone_edits)
    with pytest.raises(InputError, match="changed since it was checked"):
        safe_io.write_file(target, b"x = 2\n", unchanged_since=seen)
    assert target.read_bytes() == b"x = 1\n# edited meanwhile\n" and temps(tmp_path) == []


def test_a_killed_writers_temp_is_removed_by_the_next_write(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".report.json.{safe_io.TEMP_TAG}-{dead.pid}-abc123.tmp"
    stale.write_bytes(b"half a rep")
    running = tmp_path / f".report.json.{safe_io.TEMP_TAG}-{os.getppid()}-def456.tmp"  # a live writer's
    running.write_bytes(b"in progress")
    safe_io.write_file(tmp_path / "report.json", b"{}\n")
    assert not stale.exists() and running.exists()
    assert (tmp_path / "report.json").read_bytes() == b"{}\n"
