"""A folder run on a terminal shows a progress bar on stderr while it reads and judges the files, and clears it
before the report; in a pipe, in CI or with --quiet it shows nothing (issue 32)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
)


@pytest.fixture
def folder(tmp_path):
    for i in range(25):
        (tmp_path / f"train{i}.py").write_text(SCRIPT)
    return tmp_path


def _run(folder: Path, *extra: str, terminal: bool, ci: bool = False) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", COLUMNS="100", **({"CI": "true"} if ci else {}))
    command = [sys.executable, "-m", "precision_doctor", "check", str(folder), "--target", "t4", *extra]
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        return done.stdout, done.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    err = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the doctor closed its end
                break
            if not chunk:
                break
            err += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read().decode()
    proc.wait(timeout=60)
    os.close(master)
    return out, err.decode(errors="replace")


def test_a_folder_run_on_a_terminal_shows_the_files_done(folder):
    out, err = _run(folder, terminal=True)
    assert "checking" in err and "25/25" in err  # the bar reached the end, on stderr
    assert "25 files checked" in out and "checking" not in out


@pytest.mark.parametrize("how", ["pipe", "ci", "quiet"])
def test_nothing_is_shown_in_a_pipe_in_ci_or_when_quiet(folder, how):
    out, err = _run(folder, *(("--quiet",) if how == "quiet" else ()), terminal=how != "pipe", ci=how == "ci")
    assert "checking" not in err and "/25" not in err
    assert "PD201" in out
