"""Nothing the doctor starts outlives it: a live run's whole process tree (children, double-forked daemons) ends
with the script, at the timeout and with the doctor (signals, SIGKILL); worker processes die with the doctor and
a dead worker costs only its item. Plain Python scripts that sleep and fork stand in for training scripts."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from precision_doctor.probes.live.runner import run_live
from precision_doctor.system.pool import FORKS, Lost, run_parallel

DOCTOR = [sys.executable, "-m", "precision_doctor", "check"]

# starts `sleep`, and a daemon that left the session (setsid) and its parent (double fork), then waits
TREE = """
    import os, subprocess, sys, time
    sleeper = subprocess.Popen(["sleep", "300"])
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            time.sleep(300)
        os._exit(0)
    os.close(w)
    daemon = os.read(r, 32).decode()
    os.wait()
    with open(PIDS + ".tmp", "w") as fh:
        fh.write(f"{os.getpid()} {sleeper.pid} {daemon}")
    os.rename(PIDS + ".tmp", PIDS)
    {after}
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Census:
    """The processes a test started: pids, pid files the scripts write, and everything below the doctors.
    Whatever a failing run left is killed afterwards, so no test leaks processes."""

    def __init__(self):
        self.pids: set[int] = set()
        self.roots: list[int] = []
        self.files: list[Path] = []

    def add(self, *pids: int) -> None:
        self.pids.update(pids)

    def root(self, pid: int) -> None:
        self.roots.append(pid)
        self.pids.add(pid)

    def everything(self) -> set[int]:
        found = set(self.pids)
        for path in self.files:
            try:
                found.update(int(p) for p in path.read_text().split())
            except (OSError, ValueError):
                pass
        for pid in self.roots:
            try:
                found.update(p.pid for p in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                pass
        return found


@pytest.fixture
def census():
    taken = Census()
    yield taken
    for pid in taken.everything():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def survivors(pids, within: float) -> list[int]:
    deadline = time.monotonic() + within
    while True:
        left = sorted(p for p in pids if alive(p))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def tree_script(tmp_path: Path, after: str) -> tuple[Path, Path]:
    pids = tmp_path / "pids"
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(TREE).replace("PIDS", repr(str(pids))).replace("{after}", after))
    return path, pids


def wait_for(path: Path, census: Census, within: float = 20) -> list[int]:
    census.files.append(path)
    deadline = time.monotonic() + within
    while not path.exists():
        assert time.monotonic() < deadline, "the script never wrote its pids"
        time.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


def doctor(args, tmp_path, **kw) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.Popen(
        DOCTOR + [*args, "--target", "cpu"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw
    )


@pytest.mark.parametrize(
    "sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129), (signal.SIGKILL, -signal.SIGKILL)]
)
def test_a_signal_to_the_doctor_ends_the_live_scripts_whole_tree(tmp_path, census, sig, code):
    path, pidfile = tree_script(tmp_path, "time.sleep(300)")
    proc = doctor([str(path), "--live", "--timeout", "120", "-q"], tmp_path)
    census.root(proc.pid)
    wait_for(pidfile, census)
    census.add(*census.everything())  # the supervisor too, before the doctor goes
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=4)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the doctor was still running 4 s after {sig.name}")
    assert proc.returncode == code
    assert time.monotonic() - sent < 3
    assert not survivors(census.everything(), within=2.5), f"left running after {sig.name} to the doctor"


def test_what_a_script_started_and_left_running_ends_with_it(tmp_path, census):
    path, pidfile = tree_script(tmp_path, "print('done')")
    proc = doctor([str(path), "--live", "--timeout", "60", "-q"], tmp_path)
    census.root(proc.pid)
    census.files.append(pidfile)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("the doctor was still waiting 10 s after the script ended")
    assert proc.returncode == 0 and "ran to its end" in out
    assert not survivors(census.everything(), within=0.5), "a process the script started outlived the run"


def test_a_daemon_the_script_double_forked_is_ended_at_the_timeout(tmp_path, census):
    path, pidfile = tree_script(tmp_path, "time.sleep(300)")
    census.files.append(pidfile)
    live = run_live(str(path), (), timeout=2)
    assert live.ended == "timed out"
    assert not survivors(census.everything(), within=0.5), "the double-forked daemon survived --timeout"


def test_a_script_that_closes_its_descriptors_and_ignores_sigterm_is_ended_on_time(tmp_path, census):
    path = tmp_path / "train.py"
    path.write_text(
        "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n"
        "os.closerange(0, 4096)\ntime.sleep(300)\n"
    )
    started = time.monotonic()
    try:
        proc = subprocess.run(
            DOCTOR + [str(path), "--live", "--timeout", "2", "--target", "cpu", "--format", "json", "--include-facts"],
            capture_output=True,
            text=True,
            timeout=12,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the doctor waited past --timeout for a script that closed its descriptors")
    finally:
        census.files.append(tmp_path / "pid")
    live = json.loads(proc.stdout)["facts"]["live"]
    assert live["ended"] == "timed out" and live["wall_s"] <= 2 + 2
    assert time.monotonic() - started < 2 + 5  # the interpreter and the static pass come on top
    assert not survivors(census.everything(), within=0.5)


def test_the_log_is_capped_kept_on_failure_and_removed_on_success(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    noisy = tmp_path / "noisy.py"
    noisy.write_text(
        "import sys\nprint('first line')\nline = 'x' * 1023 + '\\n'\n"
        "for _ in range(20 * 1024):\n    sys.stdout.write(line)\n"
        "print('last line')\nraise SystemExit(3)\n"
    )
    live = run_live(str(noisy), (), timeout=60)
    assert live.ended == "exited" and live.exit_code == 3
    log = Path(live.log_path)
    size = log.stat().st_size
    assert size <= 3 << 20, f"{size} bytes of log for 20 MiB of output"  # head and tail, a few MiB at most
    text = log.read_text()
    assert text.startswith("first line") and text.rstrip().endswith("last line")
    assert "bytes of output left out" in text and live.log_tail[-1] == "last line"

    # a run that reaches training: the first Optimizer.step, with a stand-in torch next to the script (the
    # child hooks `torch.optim.optimizer` as it loads; importing the real torch would take seconds)
    (tmp_path / "torch" / "optim").mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("from . import nn\n")
    (tmp_path / "torch" / "nn.py").write_text("class Module:\n    pass\n")
    (tmp_path / "torch" / "optim" / "__init__.py").write_text("")
    (tmp_path / "torch" / "optim" / "optimizer.py").write_text(
        "class Optimizer:\n    def __init__(self):\n        self.param_groups, self.state = [], {}\n\n"
        "    def step(self):\n        pass\n"
    )
    fine = tmp_path / "fine.py"
    fine.write_text("from torch.optim.optimizer import Optimizer\nprint('loading')\nOptimizer().step()\n")
    live = run_live(str(fine), (), timeout=60)
    assert live.ended == "stopped" and live.log_path == ""
    assert sorted(p.name for p in tmp_path.glob("precision-doctor-live-*")) == [log.name]


@pytest.mark.parametrize(
    "body,said",
    [
        ("import time\ntime.sleep(300)\n", "did not reach training before the timeout"),
        ("print('no training here')\n", "ran to its end without reaching"),
    ],
)
def test_a_live_run_that_never_reached_training_is_not_reported_clean(tmp_path, body, said):
    path = tmp_path / "train.py"
    path.write_text(body)
    proc = subprocess.run(
        DOCTOR + [str(path), "--live", "--timeout", "1.5", "--target", "cpu"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    out = proc.stdout
    assert said in out
    script_line = next(line for line in out.splitlines() if line.startswith(str(path)))
    assert "no problems found" not in script_line and "live run" in script_line
    assert "use --live" not in out and "before reaching training" in out


def test_a_process_that_left_the_session_and_killed_the_supervisor_is_ended(tmp_path, census):
    """The script's child calls setsid() (no process group, no parent-death signal reaches it) and kills the
    supervisor: the doctor, not only the supervisor, owns the tree, and ends it."""
    pidfile = tmp_path / "escaped"
    path = tmp_path / "train.py"
    path.write_text(
        textwrap.dedent(f"""
        import os, time
        supervisor = os.getppid()
        if os.fork() == 0:
            os.setsid()
            open({str(pidfile)!r} + ".tmp", "w").write(str(os.getpid()))
            os.rename({str(pidfile)!r} + ".tmp", {str(pidfile)!r})
            os.kill(supervisor, 9)
            time.sleep(300)
            os._exit(0)
        time.sleep(300)
    """)
    )
    proc = doctor([str(path), "--live", "--timeout", "60", "-q"], tmp_path)
    census.root(proc.pid)
    census.files.append(pidfile)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the doctor was still running 20 s after its supervisor was killed")
    assert "died without reporting" in out
    (escaped,) = wait_for(pidfile, census, within=1)
    assert not survivors([escaped], within=0.5), "the process that killed the supervisor outlived the doctor"


def test_a_process_that_forks_on_and_exits_after_killing_the_supervisor_is_ended(tmp_path, census):
    """It changes its pid faster than one round of signals can reach it: its whole process group is killed."""
    pidfile = tmp_path / "hopping"
    path = tmp_path / "train.py"
    path.write_text(
        textwrap.dedent(f"""
        import os, time
        supervisor = os.getppid()
        if os.fork() == 0:
            os.setsid()
            os.kill(supervisor, 9)
            while True:
                if os.fork():
                    os._exit(0)
                open({str(pidfile)!r} + ".tmp", "w").write(str(os.getpid()))
                os.rename({str(pidfile)!r} + ".tmp", {str(pidfile)!r})  # whole, even if killed mid-write
                time.sleep(0.001)
        time.sleep(300)
    """)
    )
    proc = doctor([str(path), "--live", "--timeout", "60", "-q"], tmp_path)
    census.root(proc.pid)
    census.files.append(pidfile)
    proc.communicate(timeout=30)
    time.sleep(0.5)
    before = pidfile.read_text()
    time.sleep(0.5)
    assert pidfile.read_text() == before, "the hopping process is still forking after the doctor ended"
    assert not survivors([int(before)], within=0.5)


SECRETS = {"MY_DB_PASSWORD": "hunter2-correct-horse", "WANDB_API_KEY": "0f1e2d3c4b5a69788796a5b4c3d2e1f0aabbccdd"}


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "concise", "github"])
def test_secrets_of_the_scripts_environment_never_reach_the_report(tmp_path, fmt):
    """The script prints one secret of its environment and raises with another: every format, and the log the
    doctor keeps, show neither value."""
    path = tmp_path / "train.py"
    path.write_text(
        "import os\nprint('connecting with', os.environ['MY_DB_PASSWORD'])\n"
        "raise RuntimeError('wandb refused key ' + os.environ['WANDB_API_KEY'])\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path), **SECRETS}
    proc = subprocess.run(
        DOCTOR
        + [str(path), "--live", "--target", "cpu", "--format", fmt, "--include-facts" if fmt == "json" else "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    said = proc.stdout + proc.stderr
    assert "raise" in said or "RuntimeError" in said or fmt in ("concise", "github"), said
    logs = list(tmp_path.glob("precision-doctor-live-*.log"))
    assert logs, "a failed run keeps its log"
    for text in (said, *(log.read_text() for log in logs)):
        for value in SECRETS.values():
            assert value not in text
    if fmt in ("text", "json"):
        assert "<redacted>" in said


def test_a_secret_the_log_cut_in_two_or_the_script_escaped_is_still_redacted(tmp_path, monkeypatch):
    """The log keeps its head and tail: a secret printed across the cut leaves a piece on each side. And a script
    shows a value the way Python writes it: a KeyError doubles its backslashes."""
    from precision_doctor.probes.live import runner

    monkeypatch.setattr(runner, "LOG_HEAD", 4096)
    monkeypatch.setattr(runner, "LOG_TAIL", 4096)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    secret, slashed = "SuperSecretValue0123456789abcdefXYZ", "Pa55\\wordSecret"
    monkeypatch.setenv("SERVICE_TOKEN", secret)
    monkeypatch.setenv("DB_PASSWORD", slashed)
    path = tmp_path / "train.py"
    path.write_text(
        "import os, sys\nsys.stdout.write('x' * (4096 - 20) + os.environ['SERVICE_TOKEN'])\n"
        "sys.stdout.write('y' * 30000 + '\\n')\nsys.stdout.flush()\n"
        "{}[os.environ['DB_PASSWORD']]\n"
    )
    live = run_live(str(path), (), timeout=60)
    assert live.ended == "raised"
    text = Path(live.log_path).read_text() + json.dumps(live.to_json() if hasattr(live, "to_json") else str(live))
    for piece in (secret[:20], secret[-20:], "Pa55", "wordSecret"):
        assert piece not in text, piece


# --- worker processes ----------------------------------------------------------------------------------------


def square(x):
    return x * x


def dies_on_five(x):
    if x == 5:
        os._exit(7)
    return x


def killed_once(item):
    x, marker = item
    if x == 3 and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def raises_on_two(x):
    if x == 2:
        raise ValueError("bad item 2")
    return x


def test_the_pool_keeps_order_and_raises_what_the_function_raises():
    assert run_parallel(square, range(50), jobs=3) == [x * x for x in range(50)]
    with pytest.raises(ValueError, match="bad item 2"):
        run_parallel(raises_on_two, range(8), jobs=2)


def slow_square(x):
    time.sleep(0.01)
    return x * x


def test_the_doctors_own_work_runs_once_while_the_workers_do_theirs():
    ran = []

    def meanwhile():  # runs in this process, after the workers have their first items and before they are done
        ran.append(len(multiprocessing.active_children()))

    assert run_parallel(slow_square, range(40), jobs=2, meanwhile=meanwhile) == [x * x for x in range(40)]
    assert ran == [2]
    assert run_parallel(square, [3], jobs=2, meanwhile=lambda: ran.append("alone")) == [9]
    assert ran == [2, "alone"]  # one item: no workers, and the work still runs


def read_file(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def warns(path):
    print("careful", file=sys.stderr)
    return read_file(path)


@pytest.mark.skipif(not FORKS, reason="workers are forked where the OS allows it")
def test_what_workers_read_counts_as_the_doctors_own_reads(tmp_path):
    """A run computed in workers is known as fully as one computed here (its answer can be kept): each item's reads
    come back with its result; a worker that said something on stderr makes the run unkeepable, as the doctor's
    own stderr does."""
    from precision_doctor.system import reads

    files = [tmp_path / f"f{i}.txt" for i in range(6)]
    for i, f in enumerate(files):
        f.write_text(str(i))
    with reads.recording() as frame:
        assert run_parallel(read_file, files, jobs=2) == [str(i) for i in range(6)]
    assert {("open", str(f)) for f in files} <= frame.reads and not frame.unsafe
    assert reads.manifest(frame, None) is not None
    with reads.recording() as frame:
        run_parallel(warns, files, jobs=2)
    assert frame.unsafe == "a worker process wrote to stderr" and reads.manifest(frame, None) is None


def test_a_worker_that_dies_costs_only_its_item(tmp_path):
    results = run_parallel(dies_on_five, range(20), jobs=3)
    assert [r for i, r in enumerate(results) if i != 5] == [i for i in range(20) if i != 5]
    assert isinstance(results[5], Lost) and "exit code 7" in results[5].reason
    marker = str(tmp_path / "killed")
    results = run_parallel(killed_once, [(x, marker) for x in range(10)], jobs=2, chunk=3)
    assert results == list(range(10))  # the killed worker's item was tried again, its batch finished elsewhere


def test_weighted_batches_are_even_in_cost_not_in_count():
    """A folder's large scripts go a few at a time and its small ones many at a time, in order, so that one worker
    is not left with a batch of large files while the other has run dry."""
    from precision_doctor.system.pool import _Pool

    weights = [50.0] * 4 + [1.0] * 200  # four large files, then two hundred small ones
    chunk = len(weights) // 8  # as the doctor sets it: about four rounds per worker
    pool = _Pool(square, list(range(len(weights))), jobs=2, chunk=chunk, weights=weights)
    batches = []
    while pool.pending:
        batches.append(pool._next_batch())
    assert [i for b in batches for i in b] == list(range(len(weights)))  # each item once, in order
    costs = [sum(weights[i] for i in b) for b in batches]
    assert [len(b) for b in batches[:4]] == [1, 1, 1, 1]  # each large file alone
    assert len(batches[-1]) == 1  # single small files at the end
    average = sum(weights) / len(weights)
    # chunk items' worth, or one
    assert all(c <= chunk * average or len(b) == 1 for b, c in zip(batches, costs, strict=False))
    assert any(len(b) > 10 for b in batches)  # small files travel together
    unweighted = _Pool(square, list(range(len(weights))), jobs=2, chunk=chunk)
    assert unweighted._next_batch() == list(range(25))  # by count: the four large files with 21 small ones
    with pytest.raises(ValueError, match="3 weights for 2 items"):
        run_parallel(square, [1, 2], jobs=2, weights=[1.0, 1.0, 1.0])


def test_a_batch_runs_on_to_the_end_of_its_folder_within_twice_its_share():
    """A folder's scripts import the same modules: split between two workers, each would read them. A batch that
    reaches its cost inside a folder takes the rest of that folder when it fits in twice the batch; a folder too
    large for that is still split, the last batches still shrink so that the workers end together, and nothing is
    lost or reordered."""
    from precision_doctor.system.pool import _Pool

    groups = ["a"] * 7 + ["b"] * 8 + ["c"] * 60 + ["d"] * 8
    chunk = 10
    pool = _Pool(square, list(range(len(groups))), jobs=2, chunk=chunk, weights=[1.0] * len(groups), groups=groups)
    batches = []
    while pool.pending:
        batches.append(pool._next_batch())
    assert [i for b in batches for i in b] == list(range(len(groups)))
    assert batches[0] == list(range(15))  # folders a and b whole: 15 items, within twice the 10 of a batch
    assert len([b for b in batches if groups[b[0]] == "c"]) > 1  # 60 scripts: more than one batch
    assert all(len(b) <= 2 * chunk for b in batches) and len(batches[-1]) == 1
    plain = _Pool(square, list(range(len(groups))), jobs=2, chunk=chunk, weights=[1.0] * len(groups))
    assert plain._next_batch() == list(range(10))  # without groups: the batch ends inside folder b
    with pytest.raises(ValueError, match="1 groups for 2 items"):
        run_parallel(square, [1, 2], jobs=2, groups=["a"])


BIG_ITEMS = """
from precision_doctor.system.pool import run_parallel

def echo(item):
    return item * 3  # results larger than a pipe holds, while large batches wait to be sent

items = ["x" * 400_000 + str(i) for i in range(24)]
assert run_parallel(echo, items, jobs=2, chunk=4) == [i * 3 for i in items]
print("ok")
"""


def test_large_items_and_results_never_block_the_pool():
    done = subprocess.run([sys.executable, "-c", BIG_ITEMS], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


POOL_PARENT = """
import os, sys, time
from precision_doctor.system.pool import run_parallel

def sleepy(x):
    open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
    time.sleep(60)

print("started", flush=True)
run_parallel(sleepy, range(6), jobs=3, chunk=1)
"""


def _as_from_a_terminal():
    """Ctrl-C as a terminal delivers it: a suite started in the background (`cmd &`, nohup) has SIGINT ignored,
    and a child inherits that, so it would rightly never answer SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_workers_die_with_the_doctor_and_release_its_stdout(tmp_path, census, sig):
    proc = subprocess.Popen(
        [sys.executable, "-c", POOL_PARENT, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    census.root(proc.pid)
    deadline = time.monotonic() + 20
    while len(list(tmp_path.iterdir())) < 3:
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.05)
    census.add(*(int(p.name) for p in tmp_path.iterdir()))
    proc.send_signal(sig)
    try:
        proc.communicate(timeout=2)  # end of file on the doctor's stdout: no worker holds it
    except subprocess.TimeoutExpired:
        pytest.fail(f"after {sig.name} the doctor's stdout stayed open or it kept running")
    assert not survivors(census.everything(), within=2), f"workers outlived {sig.name} to the doctor"
