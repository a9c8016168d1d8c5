"""The interactive `fix` session in a pseudo-terminal, as a person sees it: `python -m precision_doctor fix COPY` on a
copy of a seed fixture, answered with y, n, a, q and Ctrl-D; the screen text and the files are checked."""

import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pty = pytest.importorskip("pty")
pytest.importorskip("libcst")

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Apply? [y]es / [n]o / [a]ll / [q]uit"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """The doctor on the slave end of a pseudo-terminal; the test types on the master end."""

    def __init__(self, cwd: Path, *args: str):
        master, slave = pty.openpty()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "COLUMNS": "240",
            "LINES": "50",
            "TERM": "xterm",
            "HF_HUB_OFFLINE": "1",
        }
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "precision_doctor", *args],
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
            start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.screen = ""

    def read_until(self, text: str, timeout: float = 60) -> str:
        """Everything shown until `text` appears (after the part already read)."""
        start = len(self.plain)
        deadline = time.monotonic() + timeout
        while text not in self.plain[start:]:
            if time.monotonic() > deadline or not self._read(deadline - time.monotonic()):
                raise AssertionError(f"{text!r} never shown; the screen:\n{self.plain}")
        return self.plain[start:]

    def read_until_any(self, *texts: str, timeout: float = 60) -> str:
        """Which of `texts` is shown first (after the part already read)."""
        start = len(self.plain)
        deadline = time.monotonic() + timeout
        while True:
            shown = [(self.plain.find(t, start), t) for t in texts if t in self.plain[start:]]
            if shown:
                return min(shown)[1]
            if time.monotonic() > deadline or not self._read(deadline - time.monotonic()):
                raise AssertionError(f"none of {texts!r} shown; the screen:\n{self.plain}")

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], max(wait, 0))
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the doctor exited and closed the terminal
            return False
        self.screen += data.decode("utf-8", "replace")
        return bool(data)

    @property
    def plain(self) -> str:
        return ANSI.sub("", self.screen).replace("\r\n", "\n")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def finish(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self._read(deadline - time.monotonic()):
            pass
        code = self.proc.wait(timeout=max(deadline - time.monotonic(), 1))
        os.close(self.master)
        return code


@pytest.fixture
def seed004(tmp_path):
    shutil.copytree(ROOT / "fixtures/seed004_h100_amp_guide", tmp_path / "seed004")
    return tmp_path / "seed004"


def session(folder: Path) -> Terminal:
    return Terminal(folder, "fix", "train.py", "--target", "h100", "--", "--mixed_precision", "bf16")


def test_yes_no_all(seed004):
    original = (seed004 / "train.py").read_text()
    term = session(seed004)
    first = term.read_until(PROMPT)
    assert "PD213 deprecated-cuda-amp-api" in first and "+    grad_scaler = torch.amp.GradScaler('cuda'" in first
    term.type("y\n")
    assert "PD213" in term.read_until(PROMPT)
    term.type("no\n")
    assert "PD206" in term.read_until(PROMPT)
    term.type("a\n")
    code = term.finish()
    text = (seed004 / "train.py").read_text()
    assert "torch.amp.GradScaler('cuda'" in text  # y
    assert "with torch.cuda.amp.autocast(" in text  # n: left as it was
    assert "grad_scaler.unscale_(optimizer)" in text and "enabled=(amp_dtype == torch.float16)" in text  # a
    screen = term.plain
    assert screen.count(PROMPT) == 3  # `a` answered the rest
    assert re.search(r"left\s+PD213 .*\n\s+not applied: you answered no", screen)
    assert "applied 3 fixes" in screen and "undo: precision-doctor fix --undo " in screen
    assert code == 0 and text != original


def test_quit_keeps_what_was_applied_and_lists_the_rest(seed004):
    term = session(seed004)
    term.read_until(PROMPT)
    term.type("Y\n")
    term.read_until(PROMPT)
    term.type("q\n")
    code = term.finish()
    screen = term.plain
    assert code == 0 and "Traceback" not in screen
    assert "applied 1 fix:" in screen
    assert re.search(r"left\s+PD213 .*\n\s+not applied: you quit", screen)
    assert re.search(r"left\s+PD20[67] .*\n\s+not applied: the session ended before it", screen)
    assert "torch.amp.GradScaler('cuda'" in (seed004 / "train.py").read_text()


def test_ctrl_d_ends_the_session_with_a_summary(seed004):
    original = (seed004 / "train.py").read_text()
    term = session(seed004)
    term.read_until(PROMPT)
    term.type("yes\n")
    term.read_until(PROMPT)
    term.type("\x04")  # Ctrl-D on an empty line: end of input
    code = term.finish()
    screen = term.plain
    assert code == 0 and "Traceback" not in screen
    assert "session ended (Ctrl-D)" in screen and "applied 1 fix:" in screen
    undo = re.search(r"^undo: precision-doctor (fix --undo \S+)", screen, re.M)
    assert undo
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", *undo.group(1).split()],
        cwd=seed004,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert (seed004 / "train.py").read_text() == original


def test_an_answer_it_does_not_know_is_asked_again(seed004):
    term = session(seed004)
    term.read_until(PROMPT)
    term.type("maybe\n")
    assert PROMPT in term.read_until(PROMPT)  # asked again, nothing applied
    assert (seed004 / "train.py").read_text() == (ROOT / "fixtures/seed004_h100_amp_guide/train.py").read_text()
    term.type("n\n")
    while term.read_until_any(PROMPT, "no code fix applied") == PROMPT:
        term.type("n\n")
    assert term.finish() == 0
    assert "no code fix applied" in term.plain
    assert (seed004 / "train.py").read_text() == (ROOT / "fixtures/seed004_h100_amp_guide/train.py").read_text()
