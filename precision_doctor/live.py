"""`check --live`: run the script in a child process of the same interpreter up to the point where training
starts (or N real steps), with a status line, the child's output in a log file, and a hard timeout that ends
the child's whole process group."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from .errors import InputError
from .facts import LiveFacts

TAIL_LINES = 25


def run_live(script: str, script_args: tuple[str, ...], steps: int = 0, timeout: float = 600.0,
             status: Callable[[float, str], None] | None = None, env: dict | None = None) -> LiveFacts:
    path = Path(script)
    if not path.is_file():
        raise InputError(f"{script}: no such file; --live runs one training script")
    read_fd, write_fd = os.pipe()
    log = tempfile.NamedTemporaryFile(prefix="precision-doctor-live-", suffix=".log", delete=False)
    cmd = [sys.executable, "-m", "precision_doctor.live_child", str(write_fd), "steps" if steps else "stop",
           str(steps), str(path), *script_args]
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            pass_fds=(write_fd,), start_new_session=True, env=child_env)
    os.close(write_fd)
    facts: dict = {}
    outcome: dict = {}
    losses: list = []
    phase = "starting Python"
    timed_out = False
    buffer = b""
    eof = False
    try:
        while not eof:
            elapsed = time.monotonic() - started
            if elapsed > timeout:
                timed_out = True
                break
            ready, _, _ = select.select([read_fd], [], [], 0.2)
            if status:
                status(elapsed, phase)
            if not ready:
                continue
            chunk = os.read(read_fd, 65536)
            if not chunk:
                eof = True
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                phase = message.get("phase", phase)
                facts = message.get("facts", facts)
                outcome = message.get("outcome", outcome)
                if "loss" in message:
                    losses.append(message["loss"])
    finally:
        os.close(read_fd)
        if timed_out:
            _end_group(proc)
        _, code, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(code)
        log.close()
    wall = time.monotonic() - started
    tail = _tail(log.name)
    if timed_out:
        ended = "timed out"
    elif outcome:
        ended = outcome.get("ended", "crashed")
    else:
        ended = "crashed"  # killed by a signal, or the interpreter died before reporting
    return LiveFacts(ended=ended, stopped_at=facts.get("stopped_at", ""), model=facts.get("model", {}),
                     trainer=facts.get("trainer", {}), accelerator=facts.get("accelerator", {}),
                     optimizer=facts.get("optimizer", {}), grad_scaler=facts.get("grad_scaler", {}),
                     error=outcome.get("error", {}), exit_code=outcome.get("exit_code", proc.returncode
                                                                           if ended == "crashed" else None),
                     optimizer_steps=outcome.get("optimizer_steps", 0),
                     losses=tuple(outcome.get("losses", losses)), loss_scales=tuple(outcome.get("loss_scales", ())),
                     log_path=log.name, log_tail=tail if ended not in ("stopped", "steps done") else (),
                     wall_s=round(wall, 2), peak_rss_mib=round(usage.ru_maxrss / 1024, 1))


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left: no orphan keeps GPU memory."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)  # whatever ignored SIGTERM (the child is reaped by the caller)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _tail(path: str) -> tuple[str, ...]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ()
    return tuple(lines[-TAIL_LINES:])
