"""`fix` keeps every byte it did not mean to change (CRLF, a BOM, no final newline, form feeds, U+2028), its
`--diff` patch applies with real `patch -p0` and `git apply -p0` wherever the files are, the patch stream holds
only the patch, and every run that changed a file can be undone byte for byte from any directory, however it
ended."""

import io
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from rich.console import Console  # noqa: E402

from precision_doctor.fix.session import run_engine_check, run_fix  # noqa: E402
from precision_doctor.model.findings import Applicability, Edit, Finding, Fix  # noqa: E402
from precision_doctor.probes.collect import gather  # noqa: E402

from .conftest import machine_probes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "fixtures/seed001_titan_fp16/buggy"
FIXED = "model_utility_configs.py"  # PD214's safe fix renames torch_dtype= to dtype= in it (on titan-rtx)


def _lines_after(data: bytes, after: int, extra: bytes) -> bytes:
    lines = data.split(b"\n")
    return b"\n".join(lines[:after] + [extra] + lines[after:])


VARIANTS = {
    "crlf": lambda b: b.replace(b"\n", b"\r\n"),
    "bom": lambda b: b"\xef\xbb\xbf" + b,
    "no-final-newline": lambda b: b.rstrip(b"\n"),
    "form-feed": lambda b: _lines_after(b, 9, b"\x0c"),  # inside the patch's context, before the edited line
    "u2028": lambda b: _lines_after(b, 9, "    # loaded once\u2028per run".encode()),
    "all-at-once": lambda b: (
        b"\xef\xbb\xbf"
        + _lines_after(_lines_after(b, 9, "    # a\u2028b".encode()), 9, b"\x0c").rstrip(b"\n").replace(b"\n", b"\r\n")
    ),
}


def doctor(*args, cwd, env=None):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env=env,
    )


def make_project(folder: Path, variant: str) -> bytes:
    folder.mkdir(parents=True)
    shutil.copyfile(SEED / "train.py", folder / "train.py")
    data = VARIANTS[variant]((SEED / FIXED).read_bytes())
    (folder / FIXED).write_bytes(data)
    return data


def expected_after(data: bytes) -> bytes:
    assert data.count(b"torch_dtype=") == 1
    return data.replace(b"torch_dtype=", b"dtype=")


@pytest.mark.parametrize("variant", VARIANTS)
def test_fix_yes_changes_only_what_it_meant_to(tmp_path, variant):
    data = make_project(tmp_path / "proj", variant)
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=tmp_path / "proj")
    assert b"applied 1 fix" in proc.stdout, proc.stderr
    assert (tmp_path / "proj" / FIXED).read_bytes() == expected_after(data)


@pytest.mark.parametrize("variant", VARIANTS)
def test_evidence_lines_are_pythons_lines(tmp_path, variant):
    data = make_project(tmp_path / "proj", variant)
    line = data[: data.index(b"torch_dtype")].count(b"\n") + 1
    proc = doctor("check", "train.py", "--target", "titan-rtx", "--no-color", cwd=tmp_path / "proj")
    assert re.search(rf"{FIXED}:{line}\s+torch_dtype=torch\.float16", proc.stdout.decode()), proc.stdout.decode()


def _apply(tool: list[str], patch: str, folder: Path) -> subprocess.CompletedProcess:
    if shutil.which(tool[0]) is None:
        pytest.skip(f"{tool[0]} is not installed")
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(folder.parent)}  # not inside any repository
    return subprocess.run(
        [*tool, "-i" if tool[0] == "patch" else "--", patch], cwd=folder, capture_output=True, env=env, timeout=60
    )


@pytest.fixture(scope="module")
def diffs(tmp_path_factory):
    """`fix --diff` once per variant: (the file's bytes, the patch)."""
    cache = {}

    def get(variant):
        if variant not in cache:
            project = tmp_path_factory.mktemp(variant) / "proj"
            data = make_project(project, variant)
            proc = doctor("fix", "train.py", "--target", "titan-rtx", "--diff", cwd=project)
            assert proc.returncode == 1 and proc.stdout.startswith(b"--- "), proc.stderr
            assert (project / FIXED).read_bytes() == data  # --diff changes nothing
            cache[variant] = data, proc.stdout
        return cache[variant]

    return get


@pytest.mark.parametrize("tool", [["patch", "-p0", "--batch"], ["git", "apply", "-p0"]], ids=["patch", "git-apply"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_diff_applies_with_real_tools(tmp_path, diffs, variant, tool):
    data, patch = diffs(variant)
    (tmp_path / "proj").mkdir()
    shutil.copyfile(SEED / "train.py", tmp_path / "proj" / "train.py")
    (tmp_path / "proj" / FIXED).write_bytes(data)
    (tmp_path / "fix.patch").write_bytes(patch)
    applied = _apply(tool, str(tmp_path / "fix.patch"), tmp_path / "proj")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (tmp_path / "proj" / FIXED).read_bytes() == expected_after(data)


@pytest.mark.parametrize("tool", [["patch", "-p0", "--batch"], ["git", "apply", "-p0"]], ids=["patch", "git-apply"])
def test_diff_of_files_outside_the_working_directory(tmp_path, tool):
    data = make_project(tmp_path / "proj", "crlf")
    (tmp_path / "elsewhere").mkdir()
    proc = doctor("fix", "../proj/train.py", "--target", "titan-rtx", "--diff", cwd=tmp_path / "elsewhere")
    headers = [line for line in proc.stdout.decode().splitlines() if line.startswith(("--- ", "+++ "))]
    assert headers and all(not h[4:].startswith(("../", "/")) for h in headers), headers
    root = os.path.realpath(tmp_path / "proj")
    assert f"relative to {root}" in proc.stderr.decode()
    (tmp_path / "fix.patch").write_bytes(proc.stdout)
    applied = _apply(tool, str(tmp_path / "fix.patch"), Path(root))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (tmp_path / "proj" / FIXED).read_bytes() == expected_after(data)


def test_diff_stream_holds_only_the_patch(tmp_path, monkeypatch, capsys):
    script = tmp_path / "train.py"
    script.write_text("x = f(a=1)\n")
    edit = Edit("set_kwarg", str(script), 1, call="g", name="b", new="2")  # no call to g(): it cannot apply
    stale = Finding(
        "PD999", "stale-edit", "error", "m", str(script), fix=Fix("set b", Applicability.SAFE, edits=(edit,))
    )
    monkeypatch.chdir(tmp_path)
    run_fix(lambda: [stale], yes=False, diff_only=True, unsafe=False, select=None, console=Console(file=sys.stdout))
    out, err = capsys.readouterr()
    assert out == "" and "PD999 not in the patch" in err and "no call to g" in err


# --- undo -----------------------------------------------------------------------------------------------


def _interactive(project: Path, monkeypatch, last_answer) -> tuple[int, str]:
    """Answer y to the first question, then end the session with `last_answer` (an answer or an exception)."""
    monkeypatch.chdir(project)
    check = run_engine_check(lambda: gather(["train.py"], target="titan-rtx", **machine_probes()), None)
    asked = []

    def ask(question):
        asked.append(question)
        if len(asked) == 1:
            return "y"
        if isinstance(last_answer, str):
            return last_answer
        raise last_answer

    screen = io.StringIO()
    code = run_fix(check, yes=False, diff_only=False, unsafe=False, select=None, console=Console(file=screen), ask=ask)
    assert len(asked) == 2
    return code, screen.getvalue()


@pytest.mark.parametrize(
    "ending,code", [(KeyboardInterrupt, 130), (EOFError, 0), ("q", 0)], ids=["ctrl-c", "ctrl-d", "quit"]
)
def test_undo_after_an_interrupted_session_from_another_directory(tmp_path, monkeypatch, ending, code):
    project = tmp_path / "proj"
    original = make_project(project, "all-at-once")
    got, screen = _interactive(project, monkeypatch, ending)
    assert got == code
    assert (project / FIXED).read_bytes() != original  # the first fix was applied
    assert re.search(r"left\s+PD214 .*\n\s+not applied: (you quit|the session ended before it)", screen), screen
    undo = re.search(r"^undo: (precision-doctor fix --undo .+)$", screen, re.M)
    assert undo, screen
    (tmp_path / "elsewhere").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", *undo.group(1).split()[1:]],
        cwd=tmp_path / "elsewhere",
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0 and b"restored" in proc.stdout, proc.stderr
    assert (project / FIXED).read_bytes() == original


def test_undo_after_the_doctor_is_killed_mid_session(tmp_path):
    project = tmp_path / "proj"
    original = make_project(project, "crlf")
    killed_on_second_question = (
        "import os, signal\n"
        "from rich.console import Console\n"
        "from precision_doctor.probes.collect import gather\n"
        "from precision_doctor.fix.session import run_engine_check, run_fix\n"
        "from tests.fake_nvml import NO_NVML\n"
        "asked = []\n"
        "def ask(q):\n"
        "    asked.append(q)\n"
        "    if len(asked) == 2: os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return 'y'\n"
        "check = run_engine_check(lambda: gather(['train.py'], target='titan-rtx', environ={}, system=NO_NVML), None)\n"
        "run_fix(check, yes=False, diff_only=False, unsafe=False, select=None, console=Console(), ask=ask)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", killed_on_second_question], cwd=project, capture_output=True, env=env, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert (project / FIXED).read_bytes() != original
    (tmp_path / "elsewhere").mkdir()
    undone = doctor("fix", "--undo", project / "train.py", cwd=tmp_path / "elsewhere")
    assert undone.returncode == 0, undone.stderr
    assert (project / FIXED).read_bytes() == original


def test_yes_lists_what_it_left_and_undo_restores_two_fixes_on_one_line(tmp_path):
    project = tmp_path / "proj"
    original = make_project(project, "bom")
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    out = proc.stdout.decode()
    assert re.search(r"applied\s+PD214 torch-dtype-kwarg-renamed", out), out
    assert re.search(r"left\s+PD201 .*\n\s+needs review: add --unsafe", out), out
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", "--unsafe", cwd=project)
    assert b"applied  PD201" in proc.stdout  # line 12 again: torch.float16 -> torch.float32
    (tmp_path / "elsewhere").mkdir()
    for _ in range(2):  # each --undo takes back the latest run not yet undone
        undone = doctor("fix", "--undo", project, cwd=tmp_path / "elsewhere")
        assert undone.returncode == 0 and b"restored" in undone.stdout, undone.stderr
    assert (project / FIXED).read_bytes() == original
    again = doctor("fix", "--undo", project, cwd=tmp_path / "elsewhere")
    assert again.returncode == 2 and b"nothing to undo" in again.stderr


def test_undo_refuses_a_file_changed_since_the_fix_unless_forced(tmp_path):
    project = tmp_path / "proj"
    original = make_project(project, "no-final-newline")
    doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    with open(project / FIXED, "ab") as handle:
        handle.write(b"\n# my own edit\n")
    edited = (project / FIXED).read_bytes()
    refused = doctor("fix", "--undo", cwd=project)
    err = refused.stderr.decode()
    assert refused.returncode == 2 and "changed since `fix` wrote it" in err and err.count("\n") == 1, err
    assert (project / FIXED).read_bytes() == edited
    forced = doctor("fix", "--undo", "--force", cwd=project)
    assert forced.returncode == 0, forced.stderr
    assert (project / FIXED).read_bytes() == original


def test_a_planted_manifest_restores_nothing(tmp_path):
    """Undo data lives in the user's state folder: a manifest planted in the checked tree is never read."""
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    run = tmp_path / "proj" / ".precision-doctor" / "backup" / "20990101T000000.000000Z-1"
    (run / "files").mkdir(parents=True)
    (run / "files" / "x").write_text("evil\n")
    from precision_doctor.system.safe_io import digest

    (run / "manifest.json").write_text(
        '{{"version": 2, "roots": ["{}"], "files": [{{"path": "{}", "backup": "files/x", "original_sha256": "{}", '
        '"written_sha256": ["{}"]}}]}}'.format(tmp_path, outside, digest(b"evil\n"), digest(b"mine\n"))
    )
    for named in ((), (str(run),)):
        proc = doctor("fix", "--undo", *named, cwd=tmp_path / "proj")
        assert proc.returncode == 2 and b"nothing to undo" in proc.stderr, proc.stderr
    assert outside.read_text() == "mine\n"
