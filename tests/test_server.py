"""`precision-doctor server`: a check it serves prints, exits and reads exactly as a check run in its own process,
and a server that is gone, stale, frozen, idle or unsafe is passed over without the user noticing anything but the
time. Everything runs through the installed `precision-doctor` program, as a hook runs it, with this checkout first
on the import path."""

import json
import os
import pty
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from precision_doctor.system import server_client

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = Path(sys.executable).with_name("precision-doctor")
pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the server needs fork() and Unix sockets"),
    pytest.mark.skipif(not PROGRAM.exists(), reason="the precision-doctor program is not installed beside python"),
]
SEED001 = ROOT / "fixtures" / "seed001_titan_fp16" / "buggy" / "train.py"
CLEAN = "import torch\nmodel = torch.nn.Linear(4, 4)\nprint(model(torch.ones(1, 4)))\n"


def environment(runtime: Path, code: Path = ROOT, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != server_client.NO_SERVER_VARIABLE}
    return {**env, "XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(code), **extra}


def doctor(env, *args, cwd=ROOT, **kwargs):
    return subprocess.run(
        [str(PROGRAM), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, **kwargs
    )


def served_count(env) -> int | None:
    """How many checks the server has served, or None when none runs."""
    said = doctor(env, "server", "status").stdout
    if "no server" in said:
        return None
    return int(said.split("(")[1].split(" check")[0])


def server_pid(env) -> int:
    return int(doctor(env, "server", "status").stdout.split()[1])


def private(folder: Path) -> Path:
    folder.mkdir(mode=0o700)
    return folder


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """A server of this checkout, in a runtime folder of its own."""
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    env = environment(runtime)
    started = doctor(env, "server", "start", "--idle-minutes", "10")
    assert started.returncode == 0, started.stderr
    assert "running since" in started.stdout
    yield env
    doctor(env, "server", "stop")


def test_a_served_check_prints_and_exits_as_a_check_run_here(running, tmp_path):
    clean = tmp_path / "clean.py"
    clean.write_text(CLEAN)
    cases = [
        ("check", SEED001, "--target", "titan-rtx"),  # an error: exit 1
        ("check", SEED001, "--target", "titan-rtx", "--format", "json"),
        ("check", clean, "--target", "a100"),  # nothing found: exit 0
        ("check", tmp_path / "missing.py"),  # bad input: one line, exit 2
        ("check", SEED001, "--target", "no-such-gpu"),
    ]
    before = served_count(running)
    for case in cases:
        served = doctor(running, *case)
        here = doctor(running, *case, "--no-server")
        assert (served.returncode, served.stdout, served.stderr) == (here.returncode, here.stdout, here.stderr), case
    assert [doctor(running, *c).returncode for c in cases[2:]] == [0, 2, 2]
    assert "PD201" in doctor(running, *cases[0]).stdout
    assert served_count(running) == before + len(cases) + 3 + 1  # every check without --no-server was served


def test_a_served_check_runs_in_the_callers_folder_environment_and_terminal(running, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(SEED001.parent, job)
    before = served_count(running)
    relative = doctor(running, "check", "train.py", "--target", "titan-rtx", "--format", "json", cwd=job)
    assert relative.returncode == 1, relative.stderr
    assert {f["id"] for f in json.loads(relative.stdout)["findings"]} >= {"PD201"}
    assert served_count(running) == before + 1

    # the caller's terminal: a pseudo-terminal gets colour, as it does in a process of its own
    def on_a_terminal(*extra, env=running):
        main, child = pty.openpty()
        try:
            proc = subprocess.run(
                [str(PROGRAM), "check", "train.py", "--target", "titan-rtx", *extra],
                cwd=job,
                env={**env, "COLUMNS": "100"},
                stdout=child,
                stderr=subprocess.PIPE,
                timeout=120,
            )
            os.close(child)
            child = -1
            out = b""
            while True:
                try:
                    chunk = os.read(main, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            return proc.returncode, out.decode()
        finally:
            os.close(main)
            if child >= 0:
                os.close(child)

    code, coloured = on_a_terminal()
    assert (code, coloured) == on_a_terminal("--no-server")
    assert "\x1b[" in coloured and "PD201" in coloured
    # and the caller's environment: NO_COLOR there turns the colour off here
    code, plain = on_a_terminal(env={**running, "NO_COLOR": "1"})
    assert code == 1 and "\x1b[" not in plain and "PD201" in plain
    assert served_count(running) == before + 3


def test_what_the_server_does_not_serve_runs_here(running, tmp_path):
    before = served_count(running)
    assert doctor(running, "check", SEED001, "--target", "titan-rtx", "--no-server").returncode == 1
    assert doctor(running, "check", SEED001, "--target", "titan-rtx", "--no-serv").returncode == 1  # (abbreviated)
    quiet = {**running, server_client.NO_SERVER_VARIABLE: "1"}
    assert doctor(quiet, "check", SEED001, "--target", "titan-rtx").returncode == 1
    assert doctor(running, "rules").returncode == 0  # only `check` is served
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    live = doctor(running, "check", script, "--liv", "--timeout", "30")  # live mode's processes end with this one
    assert live.returncode == 0 and "without reaching a training entry point" in live.stdout, live.stderr
    # what a process started here would run or may do differs: another interpreter flag, another import path,
    # other resource limits: another server's (none here)
    other_flags = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "precision_doctor", "check", SEED001, "--target", "titan-rtx"],
        cwd=ROOT,
        env=running,
        capture_output=True,
        timeout=120,
    )
    assert other_flags.returncode == 1
    other_path = {**running, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    assert doctor(other_path, "check", SEED001, "--target", "titan-rtx").returncode == 1
    lower = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 1  # (a lower soft limit is always allowed)
    limited = subprocess.run(
        ["bash", "-c", f'ulimit -S -n {lower} && exec "{PROGRAM}" check "{SEED001}" --target titan-rtx'],
        env=running,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert limited.returncode == 1 and "PD201" in limited.stdout, limited.stderr
    assert served_count(running) == before


def default_signals(*ignored):
    """For a child: every signal a caller may send at its default (a suite started in the background of a script
    runs with SIGINT and SIGQUIT ignored, and its children with it), but `ignored`; in a process group of its own
    that has its parent outside it (the suite's own may be orphaned, where the kernel discards Ctrl-Z)."""

    def reset():
        os.setpgid(0, 0)
        for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGHUP, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN if signum in ignored else signal.SIG_DFL)

    return reset


def a_long_served_check(running, folder, files=4000, ignored=()):
    """Start a check of a folder big enough to take seconds (some ten for 4,000 files), and wait until the server
    has taken it."""
    folder.mkdir()
    body = SEED001.read_text()
    for i in range(files):
        (folder / f"train_{i}.py").write_text(body + f"\n# {i}\n")
    before = served_count(running)
    proc = subprocess.Popen(
        [str(PROGRAM), "check", folder, "--target", "a100", "--no-cache", "--jobs", "1"],
        cwd=ROOT,
        env=running,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals(*ignored),
    )
    deadline = time.monotonic() + 60
    while served_count(running) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served_count(running) == before + 1
    time.sleep(0.3)
    return proc


def test_an_interrupt_reaches_the_served_check(running, tmp_path):
    proc = a_long_served_check(running, tmp_path / "many")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, out[-500:], err[-500:])
    assert "interrupted" in err  # said by the served check itself


def test_a_terminating_signal_ends_the_caller_as_it_would_end_a_check_of_its_own(running, tmp_path):
    proc = a_long_served_check(running, tmp_path / "many")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM  # killed by it, not an exit code


def test_a_signal_the_caller_ignores_is_ignored_by_the_served_check(running, tmp_path):
    proc = a_long_served_check(running, tmp_path / "many", files=600, ignored=(signal.SIGHUP,))  # (under nohup)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "600 scripts" in out, err[-500:]  # it ran to its end


def test_a_served_check_ends_with_the_check_that_asked_for_it(running, tmp_path):
    psutil = pytest.importorskip("psutil")
    server = psutil.Process(server_pid(running))
    proc = a_long_served_check(running, tmp_path / "many")
    workers = server.children()
    assert workers  # the forked process running it
    proc.kill()  # SIGKILL: nothing can be passed on
    proc.wait(timeout=10)
    gone, alive = psutil.wait_procs(workers, timeout=3)  # (the check would have run for seconds more)
    assert not alive


def test_ctrl_z_stops_the_served_check_with_its_caller_and_going_on_resumes_it(running, tmp_path):
    psutil = pytest.importorskip("psutil")
    server = psutil.Process(server_pid(running))
    proc = a_long_served_check(running, tmp_path / "many")
    (worker,) = server.children()
    try:
        proc.send_signal(signal.SIGTSTP)
        deadline = time.monotonic() + 10
        while worker.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.status() == psutil.STATUS_STOPPED
        assert psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED
        proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 10
        while worker.status() == psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.status() != psutil.STATUS_STOPPED
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_server_restarts_while_a_check_it_served_still_runs(tmp_path):
    env = environment(private(tmp_path / "runtime"))
    assert doctor(env, "server", "start").returncode == 0
    try:
        proc = a_long_served_check(env, tmp_path / "many")
        assert doctor(env, "server", "stop").returncode == 0
        again = doctor(env, "server", "start")  # the check holds none of the server's own (its lock)
        assert again.returncode == 0, again.stderr
        assert proc.poll() is None  # (still running)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        doctor(env, "server", "stop")


def test_preloading_never_loads_what_static_checks_never_import():
    probe = (
        "import json, sys\n"
        "from precision_doctor.system import server\n"
        "left_out = server.preload()\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & server.NEVER_LOADED)\n"
        "rules = 'precision_doctor.rules.pd2_precision' in sys.modules\n"
        "print(json.dumps([loaded, left_out, len(sys.modules), rules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    loaded, left_out, count, rules_loaded = json.loads(out)
    assert loaded == []
    assert "precision_doctor.fix.edits" in left_out  # (libcst)
    assert rules_loaded and count > 300  # and the rest is loaded: the rules, the probes, the report


def test_a_server_whose_files_changed_steps_aside(tmp_path):
    copy = tmp_path / "doctor"
    shutil.copytree(ROOT / "precision_doctor", copy / "precision_doctor", ignore=shutil.ignore_patterns("__pycache__"))
    env = environment(private(tmp_path / "runtime"), code=copy)
    rules = copy / "precision_doctor" / "rules" / "pd2_precision"

    def edit():
        (rules / "_precision.py").write_text((rules / "_precision.py").read_text() + "\n# edited\n")

    def add():  # (a rule is a file: a pull that only adds one changes what a check runs)
        (rules / "_added.py").write_text("# added\n")

    try:
        for change in (edit, add):
            assert doctor(env, "server", "start").returncode == 0  # (the second: a fresh one takes its place)
            assert served_count(env) == 0
            first = doctor(env, "check", SEED001, "--target", "titan-rtx")
            assert first.returncode == 1 and served_count(env) == 1
            change()
            again = doctor(env, "check", SEED001, "--target", "titan-rtx")
            assert (again.returncode, again.stdout) == (1, first.stdout), change  # answered here, the same
            assert served_count(env) is None, change  # and the stale server is gone
    finally:
        doctor(env, "server", "stop")


def test_a_frozen_server_holds_no_caller(tmp_path):
    env = environment(private(tmp_path / "runtime"))
    assert doctor(env, "server", "start").returncode == 0
    pid = server_pid(env)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        here = doctor(env, "check", SEED001, "--target", "titan-rtx")  # (its output read to the end)
        assert here.returncode == 1 and "PD201" in here.stdout
        assert time.monotonic() - started < 30  # the server, never answering, holds none of its descriptors
        status = doctor(env, "server", "status")
        assert status.returncode == 2 and "does not answer" in status.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
        doctor(env, "server", "stop")


def test_a_dead_or_idle_server_is_passed_over(tmp_path):
    runtime = private(tmp_path / "runtime")
    env = environment(runtime)
    started = doctor(env, "server", "start", "--idle-minutes", "0.05")
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split()[1])
    os.kill(pid, signal.SIGKILL)  # dead: its socket stays behind
    time.sleep(0.2)
    assert list((runtime / "precision-doctor").glob("*.sock"))
    here = doctor(env, "check", SEED001, "--target", "titan-rtx")
    assert here.returncode == 1 and "PD201" in here.stdout
    assert served_count(env) is None

    assert doctor(env, "server", "start", "--idle-minutes", "0.02").returncode == 0  # a new one takes its place
    assert served_count(env) == 0
    deadline = time.monotonic() + 30
    while served_count(env) is not None and time.monotonic() < deadline:  # idle 1.2 s: it stops by itself
        time.sleep(0.2)
    assert served_count(env) is None
    assert not list((runtime / "precision-doctor").glob("*.sock"))


def test_a_socket_folder_others_can_enter_or_a_socket_that_is_no_socket_is_never_used(tmp_path):
    runtime = private(tmp_path / "runtime")
    (runtime / "precision-doctor").mkdir(mode=0o755)
    (runtime / "precision-doctor").chmod(0o755)
    env = environment(runtime)
    refused = doctor(env, "server", "start")
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1 and "not a private folder" in refused.stderr
    assert doctor(env, "check", SEED001, "--target", "titan-rtx").returncode == 1  # checked here all the same

    env = environment(private(tmp_path / "other"))
    assert doctor(env, "server", "start").returncode == 0
    path = Path(doctor(env, "server", "status").stdout.split(": ", 1)[1].strip())
    doctor(env, "server", "stop")
    path.mkdir()  # a folder where the socket goes
    refused = doctor(env, "server", "start")
    assert refused.returncode == 2 and "is no socket" in refused.stderr and "Traceback" not in refused.stderr
    assert doctor(env, "check", SEED001, "--target", "titan-rtx").returncode == 1


def test_the_socket_folder_is_the_runtime_folder_else_an_absolute_temporary_one(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert server_client.state_folder() == str(tmp_path / "precision-doctor")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("TMPDIR", "relative/tmp")  # (not where a process in another folder would look)
    assert server_client.state_folder() == f"/tmp/precision-doctor-{os.getuid()}"
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert server_client.state_folder() == str(tmp_path / f"precision-doctor-{os.getuid()}")


def test_interpreter_options_the_server_must_share_reach_it(tmp_path):
    env = environment(private(tmp_path / "runtime"))
    flags = [sys.executable, "-X", "int_max_str_digits=5000", "-m", "precision_doctor"]
    started = subprocess.run([*flags, "server", "start"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    try:
        assert started.returncode == 0, started.stderr
    finally:
        subprocess.run([*flags, "server", "stop"], cwd=ROOT, env=env, capture_output=True, timeout=60)


def test_auto_starts_a_server_for_the_next_check_without_holding_this_one(tmp_path):
    env = environment(private(tmp_path / "runtime"), PRECISION_DOCTOR_SERVER="auto")
    try:
        started = time.monotonic()
        first = doctor(env, "check", SEED001, "--target", "titan-rtx")  # (output read to its end: the server
        assert first.returncode == 1 and "PD201" in first.stdout  # holds none of this process's descriptors)
        assert time.monotonic() - started < 60
        deadline = time.monotonic() + 30
        while served_count(env) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert served_count(env) == 0
        second = doctor(env, "check", SEED001, "--target", "titan-rtx")
        assert (second.returncode, second.stdout) == (1, first.stdout)
        assert served_count(env) == 1
    finally:
        doctor(env, "server", "stop")
    other = private(tmp_path / "other")
    refused = environment(other, PRECISION_DOCTOR_SERVER="auto")  # a check that refuses a server starts none
    assert doctor(refused, "check", SEED001, "--target", "titan-rtx", "--no-server").returncode == 1
    time.sleep(2)
    assert served_count(refused) is None and not list(other.rglob("*.log"))
