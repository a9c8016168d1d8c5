"""Inputs that are not what they seem: FIFOs, devices, link loops, unreadable files and folders, bad coding
cookies, endless log lines. Each is one line and exit 2 when named, "not checked" inside a folder run — never a
hang, unbounded memory, a traceback or exit 3."""

import ctypes
import io
import json
import os
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from precision_doctor.diagnose import diagnose
from precision_doctor.system.sources import Unreadable, read_source

ROOT = Path(__file__).resolve().parents[1]
MEMORY_CAP = 1536 * 2**20  # a run that tries to read /dev/zero whole dies here instead of eating the machine
SCRIPT = "import torch\nmodel = torch.nn.Linear(2, 2)\n"


def _capped():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def doctor(*args, cwd=ROOT, preexec=_capped, stdin=subprocess.DEVNULL):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=preexec,
        stdin=stdin,
    )


def one_line_error(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def not_checked(proc) -> dict[str, str]:
    """name -> reason of every file a JSON folder run lists as not checked (the run itself must have finished)."""
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr)
    doc = json.loads(proc.stdout)
    return {Path(u["path"]).name: u["reason"] for u in doc["unknowns"] if u["what"] == "not checked"}


# --- not a regular file --------------------------------------------------------------------------------------------


@pytest.fixture
def specials(tmp_path):
    """A folder with a good script beside a FIFO, .py links to a FIFO and to /dev/zero, and a link loop."""
    (tmp_path / "train.py").write_text(SCRIPT)
    os.mkfifo(tmp_path / "fifo.py")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "to_fifo.py").symlink_to(tmp_path / "pipe")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    (tmp_path / "loop.py").symlink_to("loop.py")
    (tmp_path / "folder.py").symlink_to(tmp_path / "sub", target_is_directory=True)
    (tmp_path / "sub").mkdir()
    return tmp_path


def test_a_folder_run_skips_what_is_not_a_regular_file(specials):
    skipped = not_checked(doctor("check", str(specials), "--format", "json", "--target", "cpu"))
    assert skipped == {
        "fifo.py": "not a regular file (a named pipe)",
        "to_fifo.py": "not a regular file (a named pipe)",
        "zero.py": "not a regular file (a character device)",
        "loop.py": "a symbolic link loop (or too many links)",
        "folder.py": "not a regular file (a directory)",
    }


@pytest.mark.parametrize(
    "name, what",
    [
        ("fifo.py", "named pipe"),
        ("to_fifo.py", "named pipe"),
        ("zero.py", "character device"),
        ("loop.py", "link loop"),
    ],
)
def test_a_named_special_file_is_one_line(specials, name, what):
    one_line_error(doctor("check", str(specials / name), "--target", "cpu"), name, what)


def test_a_device_given_as_path_is_not_called_a_folder():
    one_line_error(doctor("check", "/dev/null", "--target", "cpu"), "character device")


def test_a_device_as_facts_or_config_is_one_line(specials):
    one_line_error(
        doctor("check", str(specials / "train.py"), "--facts", str(specials / "zero.py")), "--facts", "character device"
    )
    one_line_error(
        doctor("check", str(specials / "train.py"), "--facts", str(specials / "fifo.py")), "--facts", "named pipe"
    )
    (specials / "pyproject.toml").symlink_to("/dev/zero")
    one_line_error(doctor("check", str(specials / "train.py"), "--target", "cpu"), "pyproject.toml", "character device")


def test_a_sibling_module_that_is_a_fifo_is_unknown_not_a_hang(tmp_path):
    (tmp_path / "train.py").write_text("import helpers\n" + SCRIPT)
    os.mkfifo(tmp_path / "helpers.py")
    proc = doctor("check", str(tmp_path / "train.py"), "--format", "json", "--target", "cpu")
    assert proc.returncode == 0, proc.stderr
    unknowns = json.loads(proc.stdout)["unknowns"]
    assert any(u["what"] == "local module helpers.py" and "named pipe" in u["reason"] for u in unknowns)


def test_explain_refuses_devices_and_reads_pipes(specials):
    one_line_error(doctor("explain", str(specials / "zero.py")), "character device")
    one_line_error(doctor("explain", "/dev/zero"), "character device")
    one_line_error(doctor("explain", str(specials / "loop.py")), "link loop")
    with open("/dev/zero", "rb") as zero:
        one_line_error(doctor("explain", stdin=zero), "stdin", "character device")
    assert doctor("explain", str(specials / "fifo.py")).returncode == 0  # no writer: an empty log, not a hang
    piped = subprocess.run(
        f"{sys.executable} -m precision_doctor explain <(printf 'ValueError: Attempting to "
        f"unscale FP16 gradients.\\n')",
        shell=True,
        executable="/bin/bash",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.returncode == 0 and "PD201" in piped.stdout


def test_explain_reads_an_endless_line_in_bounded_memory():
    """50 MB without a newline (a NUL-filled log, one giant dump), then the failure: found, in a few MiB."""

    class Endless(io.RawIOBase):
        def __init__(self):
            self.left = 50 * 2**20

        def readable(self):
            return True

        def readinto(self, buffer):
            if self.left <= 0:
                tail = b"\nValueError: Attempting to unscale FP16 gradients.\n"
                if self.left < 0:
                    return 0
                buffer[: len(tail)] = tail
                self.left = -1
                return len(tail)
            n = min(len(buffer), self.left)
            buffer[:n] = b"\0" * n
            self.left -= n
            return n

    tracemalloc.start()
    found = diagnose(io.BufferedReader(Endless()))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [d.rule.id for d in found][:1] == ["PD201"] and found[0].evidence[0][0] == 2
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB: the line was held whole"


def test_explain_counts_lines_as_python_does_from_any_source():
    """\\r\\n, bare \\r (progress bars) and \\n end lines alike, whether the log is a file, a pipe or a list."""
    log = (
        "step 1\r\n 10%| 1/10 [00:01<00:09]\r 20%| 2/10 [00:02<00:08]\rdone\n"
        "Traceback (most recent call last):\r\nValueError: Attempting to unscale FP16 gradients.\n"
    )
    from_lines = diagnose(log.splitlines(keepends=True))
    for source in (io.BytesIO(log.encode()), io.TextIOWrapper(io.BytesIO(log.encode()), encoding="utf-8")):
        got = diagnose(source)
        assert [(d.rule.id, d.evidence) for d in got] == [(d.rule.id, d.evidence) for d in from_lines]
    assert from_lines[0].evidence == [(6, "ValueError: Attempting to unscale FP16 gradients.")]


def test_a_chunk_boundary_inside_a_line_or_a_crlf_changes_nothing(monkeypatch):
    from precision_doctor import diagnose as module

    log = ("x" * 37 + "\r\n") * 50 + "ValueError: Attempting to unscale FP16 gradients.\r\n" + "tail\n"
    expected = [(d.rule.id, d.evidence) for d in diagnose(log.splitlines(keepends=True))]
    for size in (7, 38, 39, 64):
        monkeypatch.setattr(module, "CHUNK", size)
        assert [(d.rule.id, d.evidence) for d in diagnose(io.BytesIO(log.encode()))] == expected, size
    assert expected[0][1][0][0] == 51


# --- decoding the way Python does ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, python_reads",
    [
        (b"# -*- coding: xyz -*-\nx = 1\n", False),
        (b"#!/usr/bin/env python\n# vim: set fileencoding=nope :\nx = 1\n", False),
        (b"\xef\xbb\xbf# coding: latin-1\nx = 1\n", False),
        (b"# coding: rot13\nx = 1\n", False),
        (b"# coding: latin-1\nname = 'caf\xe9'\n", True),
        (b"\xef\xbb\xbfx = 'BOM'\n", True),
        (b"\n\n# coding: xyz\nx = 1\n", True),  # a cookie only counts on the first two lines
        (b"x = 'caf\xe9'\n", False),
    ],
)
def test_sources_are_read_as_python_reads_them(tmp_path, data, python_reads):
    path = tmp_path / "s.py"
    path.write_bytes(data)
    try:
        compile(data, str(path), "exec")
        refused_by_python = False
    except SyntaxError:
        refused_by_python = True
    assert refused_by_python is not python_reads
    if python_reads:
        assert compile(read_source(path), str(path), "exec")
    else:
        with pytest.raises(Unreadable):
            read_source(path)


def test_a_bad_cookie_is_exit_2_named_and_not_checked_in_a_folder(tmp_path):
    (tmp_path / "bad.py").write_bytes(b"# -*- coding: xyz -*-\nimport torch\n")
    (tmp_path / "latin.py").write_bytes(b"# coding: latin-1\n# caf\xe9\nimport torch\n")
    one_line_error(doctor("check", str(tmp_path / "bad.py"), "--target", "cpu"), "bad.py", "encoding", "xyz")
    skipped = not_checked(doctor("check", str(tmp_path), "--format", "json", "--target", "cpu"))
    assert list(skipped) == ["bad.py"] and "xyz" in skipped["bad.py"]


# --- the text report never says both ---------------------------------------------------------------------------


def test_a_file_not_checked_is_never_also_no_problems_found(specials):
    (specials / "broken.py").write_text("def (\n")
    proc = doctor("check", str(specials), "--target", "cpu", "--no-color", "-v")  # -v: clean files listed too
    assert proc.returncode == 0, proc.stderr
    lines = {
        line.split("  ", 1)[0]: line for line in proc.stdout.splitlines() if line.endswith(".py") or ".py  " in line
    }
    for name in ("fifo.py", "to_fifo.py", "zero.py", "loop.py", "folder.py", "broken.py"):
        line = next(text for head, text in lines.items() if head.endswith(name))
        assert "not checked" in line and "no problems found" not in line, line
    assert "no problems found" in next(text for head, text in lines.items() if head.endswith("train.py"))
    assert proc.stdout.count("not checked:") == 6  # once per file (the summary counts them too)


# --- permissions ---------------------------------------------------------------------------------------------------


def _without_root_override():
    """Root reads every file whatever its mode; drop the two capabilities that let it, so modes count."""
    _capped()
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def unprivileged(tmp_path):
    """A runner for the doctor under which mode 000 really means unreadable (skips where that cannot be had)."""
    probe = tmp_path / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        readable = (
            subprocess.run(
                [sys.executable, "-c", f"open({str(probe)!r}).read()"],
                capture_output=True,
                preexec_fn=_without_root_override,
                timeout=60,
            ).returncode
            == 0
        )
    except subprocess.SubprocessError:
        readable = True
    probe.unlink()
    if readable:
        pytest.skip("file modes do not apply to this user here")
    yield lambda *args, cwd=ROOT: doctor(*args, cwd=cwd, preexec=_without_root_override)
    for path in tmp_path.rglob("*"):  # let pytest clean up
        if not path.is_symlink():
            path.chmod(0o755)


def test_a_named_unreadable_script_is_one_line(tmp_path, unprivileged):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    script.chmod(0)
    one_line_error(unprivileged("check", str(script), "--target", "cpu"), "train.py", "permission denied")


def test_unreadable_files_and_folders_in_a_folder_run_are_reported_and_the_run_goes_on(tmp_path, unprivileged):
    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(2, 2).half()\nscaler = torch.cuda.amp.GradScaler()\n"
    )
    (tmp_path / "secret.py").write_text(SCRIPT)
    (tmp_path / "secret.py").chmod(0)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "inside.py").write_text(SCRIPT)
    (tmp_path / "locked").chmod(0)
    proc = unprivileged("check", str(tmp_path), "--format", "json", "--target", "cpu")
    skipped = not_checked(proc)
    assert skipped == {"secret.py": "permission denied", "locked": "the folder cannot be listed (permission denied)"}
    assert any(f["path"].endswith("train.py") for f in json.loads(proc.stdout)["findings"])


def test_an_unreadable_sibling_module_is_unknown_for_that_import(tmp_path, unprivileged):
    (tmp_path / "train.py").write_text("import helpers\n" + SCRIPT)
    (tmp_path / "helpers.py").write_text("x = 1\n")
    (tmp_path / "helpers.py").chmod(0)
    proc = unprivileged("check", str(tmp_path / "train.py"), "--format", "json", "--target", "cpu")
    assert proc.returncode == 0, proc.stderr
    unknowns = json.loads(proc.stdout)["unknowns"]
    assert any(u["what"] == "local module helpers.py" and "permission denied" in u["reason"] for u in unknowns)


def test_an_unreadable_pyproject_is_one_line(tmp_path, unprivileged):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "pyproject.toml").write_text("[tool.precision-doctor]\nfail-on = 'warning'\n")
    (tmp_path / "pyproject.toml").chmod(0)
    one_line_error(
        unprivileged("check", str(tmp_path / "train.py"), "--target", "cpu"), "pyproject.toml", "permission denied"
    )
