"""`check --live`: run the script in a child process of the same interpreter up to the point where training
starts (or N real steps), with a status line, the child's output in a capped log file, and a hard timeout.

The doctor owns the child's whole process tree: the script runs under `precision_doctor.system.supervisor`, which
ends every process the script started when the script exits, at the timeout, when the doctor gets
SIGINT/SIGTERM/SIGHUP (then the doctor exits 128 + the signal), and when the doctor dies, even by SIGKILL."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ...model.errors import InputError
from ...model.facts import LiveFacts
from ...model.redact import MIN_ENVIRONMENT_SECRET, REDACTED, environment_secrets, without_values
from ...system.programs import doctor_python
from ...system.sources import parse_json
from ...system.supervisor import FORWARD_WAIT, GRACE, KILL_WAIT, become_subreaper, descendants, end_orphans

TAIL_LINES = 25
LOG_HEAD = LOG_TAIL = 1 << 20  # bytes of the script's output kept from its start and from its end
END_BOUND = FORWARD_WAIT + GRACE + KILL_WAIT  # the supervisor's longest ending; past it, it is killed itself
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STEP_MARK = " · step "  # status lines: a log prints each phase once, not each step
SUCCEEDED = ("stopped", "steps done")  # the log of such a run is removed


def run_live(
    script: str,
    script_args: tuple[str, ...],
    steps: int = 0,
    timeout: float = 600.0,
    status: Callable[[float, str], None] | None = None,
    env: dict | None = None,
) -> LiveFacts:
    path = Path(script)
    if not path.is_file():
        raise InputError(f"{script}: no such file; --live runs one training script")
    report_r, report_w = os.pipe()
    output_r, output_w = os.pipe()
    watch_r, watch_w = os.pipe()  # the doctor keeps watch_w (not inherited): its end of file means we are gone
    cmd = doctor_python(
        "precision_doctor.system.supervisor",
        str(watch_r),
        str(report_w),
        "--",
        *doctor_python(
            "precision_doctor.probes.live.child",
            str(report_w),
            "steps" if steps else "stop",
            str(steps),
            str(path),
            *script_args,
        ),
    )
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    secrets = environment_secrets(child_env)  # printed or raised by the script, they are redacted everywhere
    log = _CappedLog(secrets)
    reports = _Reports(steps)
    # the doctor is a subreaper while the script runs: whatever escapes the supervisor (setsid(), then the supervisor
    # killed) is re-parented here, and ended below
    subreaper = become_subreaper()
    spared = descendants() if subreaper else frozenset()
    with _Caught() as caught:
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd,
                stdout=output_w,
                stderr=output_w,
                stdin=subprocess.DEVNULL,
                pass_fds=(watch_r, report_w),
                start_new_session=True,
                env=child_env,
            )
        except BaseException:
            for fd in (report_r, output_r, watch_w):
                os.close(fd)
            log.discard()
            raise
        finally:
            for fd in (report_w, output_w, watch_r):
                os.close(fd)
        try:
            timed_out, wait_status, usage = _supervise(
                proc, timeout, started, caught, status, {report_r: reports.feed, output_r: log.write}, reports
            )
            wall = time.monotonic() - started  # the script's time: ending what escaped it comes after
        except BaseException:  # a failure of ours (stderr gone under the status line, ...): end the tree first
            _stop(proc)
            raise
        finally:
            for fd in (report_r, output_r, watch_w):
                os.close(fd)
            log.close()
            if subreaper:
                end_orphans(spared)
                become_subreaper(False)
    if caught.signum:
        log.discard()
        _interrupted(caught.signum)
    code = os.waitstatus_to_exitcode(wait_status)
    facts, outcome = reports.facts, reports.outcome
    if timed_out:
        ended = "timed out"
    elif outcome:
        ended = outcome.get("ended", "crashed")
    else:
        ended = "crashed"  # killed by a signal, or the interpreter died before reporting
    if ended in SUCCEEDED:
        log.discard()
        tail: tuple[str, ...] = ()
    else:
        tail = _tail(log.path)
    return LiveFacts.from_json(
        without_values(
            {
                "ended": ended,
                "stopped_at": facts.get("stopped_at", ""),
                "model": facts.get("model"),
                "trainer": facts.get("trainer"),
                "accelerator": facts.get("accelerator"),
                "optimizer": facts.get("optimizer"),
                "grad_scaler": facts.get("grad_scaler"),
                "error": outcome.get("error"),
                "exit_code": outcome.get("exit_code", code if ended == "crashed" else None),
                "optimizer_steps": outcome.get("optimizer_steps", 0),
                "losses": outcome.get("losses", reports.losses),
                "loss_scales": outcome.get("loss_scales", ()),
                "log_path": log.path,
                "log_tail": tail,
                "wall_s": round(wall, 2),
                "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            },
            secrets,
        )
    )


def _supervise(
    proc: subprocess.Popen, timeout: float, started: float, caught: _Caught, status, streams: dict, reports: _Reports
):
    """Read the child's pipes until the supervisor exits; never wait on end of file (a script may close its
    descriptors, or leave a process holding them), only on the process and the deadlines."""
    deadline = started + timeout
    ending_since = None
    timed_out = False
    while True:
        pid, wait_status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.monotonic()
        if ending_since is None and (caught.signum or now >= deadline):
            timed_out = not caught.signum
            proc.send_signal(caught.signum or signal.SIGTERM)  # the supervisor ends the whole tree
            ending_since = now
        elif ending_since is not None and now - ending_since > END_BOUND:
            proc.kill()  # the command dies with it (PDEATHSIG)
        if status and ending_since is None:
            status(now - started, reports.status())
        _read(streams, 0.1)
    proc.returncode = os.waitstatus_to_exitcode(wait_status)
    for fd in streams:  # what is still in the pipes; a writer that outlived the supervisor cannot hold us
        os.set_blocking(fd, False)
    end = time.monotonic() + 0.5
    while streams and time.monotonic() < end:
        if not _read(streams, 0.05):
            break
    return timed_out, wait_status, usage


def _stop(proc: subprocess.Popen) -> None:
    if proc.returncode is not None:
        return
    proc.terminate()
    try:
        proc.wait(END_BOUND + 0.5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _read(streams: dict, wait: float) -> bool:
    """Read what is ready; a stream at end of file is dropped. False when nothing was ready."""
    try:
        ready, _, _ = select.select(list(streams), [], [], wait) if streams else ([], [], [])
    except InterruptedError:
        return True
    if not streams:
        time.sleep(wait)
    for fd in ready:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        if chunk:
            streams[fd](chunk)
        else:
            del streams[fd]
    return bool(ready)


class _Reports:
    """The child's JSON lines on the report pipe: the phase it is in, the facts it gathered, how it ended."""

    def __init__(self, steps: int = 0):
        self.steps = steps  # the steps asked for (--steps), for the status line's counter
        self.buffer = b""
        self.phase = "starting Python"
        self.facts: dict = {}
        self.outcome: dict = {}
        self.losses: list = []
        self.step = 0  # the last training step the child reported

    def feed(self, chunk: bytes) -> None:
        *lines, self.buffer = (self.buffer + chunk).split(b"\n")
        for line in lines:
            try:
                message = parse_json(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            self.phase = message.get("phase", self.phase)
            self.facts = message.get("facts", self.facts)
            self.outcome = message.get("outcome", self.outcome)
            if "loss" in message:
                self.losses.append(message["loss"])
            if isinstance(message.get("step"), int):
                self.step = message["step"]

    def status(self) -> str:
        """The phase, with the step counter while --steps runs: "stepping · step 3/10"."""
        if not self.step:
            return self.phase
        return (
            f"{self.phase}{STEP_MARK}{self.step}/{self.steps}" if self.steps else f"{self.phase}{STEP_MARK}{self.step}"
        )


class _CappedLog:
    """The script's output: the first LOG_HEAD bytes as they come, and the last LOG_TAIL bytes at the end, with
    a line saying how much was left out between them (a script printing without end fills no disk)."""

    def __init__(self, secrets: tuple[str, ...] = ()):
        self.secrets = secrets
        self.file = tempfile.NamedTemporaryFile(prefix="precision-doctor-live-", suffix=".log", delete=False)
        self.path = self.file.name
        self.head = 0
        self.tail = bytearray()
        self.left_out = 0

    def write(self, chunk: bytes) -> None:
        room = LOG_HEAD - self.head
        if room > 0:
            self.file.write(chunk[:room])
            self.head += min(room, len(chunk))
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * LOG_TAIL:
                excess = len(self.tail) - LOG_TAIL
                del self.tail[:excess]
                self.left_out += excess

    def close(self) -> None:
        if self.file.closed:
            return
        if len(self.tail) > LOG_TAIL:
            self.left_out += len(self.tail) - LOG_TAIL
            del self.tail[:-LOG_TAIL]
        if self.left_out:
            self.file.write(f"\n[precision-doctor: {self.left_out} bytes of output left out]\n".encode())
        self.file.write(self.tail)
        self.file.close()
        if self.secrets:  # the kept log says what the report says: the environment's secrets redacted
            with open(self.path, "r+b") as log:
                data = log.read()
                cut = self.head if self.left_out else len(data)  # where output was left out, a secret may be cut
                head = without_values(data[:cut].decode("utf-8", "surrogateescape"), self.secrets)
                rest = without_values(data[cut:].decode("utf-8", "surrogateescape"), self.secrets)
                if self.left_out:
                    head, rest = _cut_secrets(head, rest, self.secrets)
                log.seek(0)
                log.write((head + rest).encode("utf-8", "surrogateescape"))
                log.truncate()

    def discard(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self.path = ""


def _cut_secrets(head: str, rest: str, secrets: tuple[str, ...]) -> tuple[str, str]:
    """The head ending in the start of a secret, and the tail (after the "left out" line) starting with its end:
    each part of the secret the cut left is redacted too."""
    marker_end = rest.find("]\n") + 2 if rest.startswith("\n[precision-doctor:") else 0
    marker, tail = rest[:marker_end], rest[marker_end:]
    for value in secrets:
        for n in range(len(value) - 1, MIN_ENVIRONMENT_SECRET - 1, -1):
            if head.endswith(value[:n]):
                head = head[:-n] + REDACTED
                break
        for n in range(len(value) - 1, MIN_ENVIRONMENT_SECRET - 1, -1):
            if tail.startswith(value[-n:]):
                tail = REDACTED + tail[n:]
                break
    return head, marker + tail


class _Caught:
    """SIGINT/SIGTERM/SIGHUP to the doctor while the child runs: noted, so the child's tree is ended first."""

    def __init__(self):
        self.signum = 0
        self._previous: dict = {}

    def __enter__(self) -> _Caught:
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED:
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum, _frame) -> None:
        self.signum = self.signum or signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _interrupted(signum: int):
    if signum == signal.SIGINT:
        raise KeyboardInterrupt  # the command line says "interrupted" and exits 130
    name = signal.Signals(signum).name
    print(f"precision-doctor: {name}: ended the live run and every process it started", file=sys.stderr)
    raise SystemExit(128 + signum)


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
