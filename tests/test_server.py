"""`precision-doctor server`: a check it serves prints, exits and reads exactly as a check run in its own process,
and a server that is gone, stale, idle or unsafe is passed over without the user noticing anything but the time."""

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from precision_doctor.system import server_client

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the server needs fork() and Unix sockets")

ROOT = Path(__file__).resolve().parents[1]
SEED001 = ROOT / "fixtures" / "seed001_titan_fp16" / "buggy" / "train.py"
CLEAN = "import torch\nmodel = torch.nn.Linear(4, 4)\nprint(model(torch.ones(1, 4)))\n"


def environment(runtime: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != server_client.NO_SERVER_VARIABLE}
    return {**env, "XDG_RUNTIME_DIR": str(runtime), **extra}


def doctor(env, *args, cwd=ROOT, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


def served_count(env, cwd=ROOT) -> int | None:
    """How many checks the server has served, or None when none runs."""
    said = doctor(env, "server", "status", cwd=cwd).stdout
    if "no server" in said:
        return None
    return int(said.split("(")[1].split(" check")[0])


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
                [sys.executable, "-m", "precision_doctor", "check", "train.py", "--target", "titan-rtx", *extra],
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


def test_what_the_server_does_not_serve_runs_here(running, tmp_path):
    before = served_count(running)
    assert doctor(running, "check", SEED001, "--target", "titan-rtx", "--no-server").returncode == 1
    assert doctor(running, "check", SEED001, "--target", "titan-rtx", "--no-serv").returncode == 1  # (abbreviated)
    quiet = {**running, server_client.NO_SERVER_VARIABLE: "1"}
    assert doctor(quiet, "check", SEED001, "--target", "titan-rtx").returncode == 1
    assert doctor(running, "rules").returncode == 0  # only `check` is served
    other_flags = subprocess.run(  # another interpreter's flags (warning filters here): another interpreter's server
        [sys.executable, "-W", "ignore", "-m", "precision_doctor", "check", SEED001, "--target", "titan-rtx"],
        cwd=ROOT,
        env=running,
        capture_output=True,
        timeout=120,
    )
    assert other_flags.returncode == 1
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    live = doctor(running, "check", script, "--liv", "--timeout", "30")  # live mode's processes end with this one
    assert live.returncode == 0 and "without reaching a training entry point" in live.stdout, live.stderr
    assert served_count(running) == before


def a_long_served_check(running, folder):
    """Start a check of a folder big enough to take seconds (some ten), and wait until the server has taken it."""
    folder.mkdir()
    body = SEED001.read_text()
    for i in range(4000):
        (folder / f"train_{i}.py").write_text(body + f"\n# {i}\n")
    before = served_count(running)
    proc = subprocess.Popen(
        [sys.executable, "-m", "precision_doctor", "check", folder, "--target", "a100", "--no-cache", "--jobs", "1"],
        cwd=ROOT,
        env=running,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
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


def test_a_served_check_ends_with_the_check_that_asked_for_it(running, tmp_path):
    psutil = pytest.importorskip("psutil")
    server = psutil.Process(int(doctor(running, "server", "status").stdout.split()[1]))
    proc = a_long_served_check(running, tmp_path / "many")
    workers = server.children()
    assert workers  # the forked process running it
    proc.kill()  # SIGKILL: nothing can be passed on
    proc.wait(timeout=10)
    gone, alive = psutil.wait_procs(workers, timeout=3)  # (the check would have run for seconds more)
    assert not alive


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
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = environment(runtime, PYTHONPATH=str(copy))
    elsewhere = tmp_path / "work"  # (not the checkout: `-m` would import the checkout's doctor from there)
    elsewhere.mkdir()
    assert doctor(env, "server", "start", cwd=elsewhere).returncode == 0
    try:
        assert served_count(env, cwd=elsewhere) == 0
        first = doctor(env, "check", SEED001, "--target", "titan-rtx", cwd=elsewhere)
        assert first.returncode == 1 and served_count(env, cwd=elsewhere) == 1
        rule = copy / "precision_doctor" / "rules" / "pd2_precision" / "_precision.py"
        rule.write_text(rule.read_text() + "\n# edited\n")
        again = doctor(env, "check", SEED001, "--target", "titan-rtx", cwd=elsewhere)
        assert (again.returncode, again.stdout) == (1, first.stdout)  # answered here, the same
        assert served_count(env, cwd=elsewhere) is None  # and the stale server is gone
    finally:
        doctor(env, "server", "stop", cwd=elsewhere)


def test_a_dead_or_idle_server_is_passed_over(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
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


def test_a_socket_folder_others_can_enter_is_never_used(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    (runtime / "precision-doctor").mkdir(mode=0o755)
    (runtime / "precision-doctor").chmod(0o755)
    env = environment(runtime)
    refused = doctor(env, "server", "start")
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1 and "not a private folder" in refused.stderr
    assert doctor(env, "check", SEED001, "--target", "titan-rtx").returncode == 1  # checked here all the same


def test_auto_starts_a_server_for_the_next_check_without_holding_this_one(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = environment(runtime, PRECISION_DOCTOR_SERVER="auto")
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
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    refused = environment(other, PRECISION_DOCTOR_SERVER="auto")  # a check that refuses a server starts none
    assert doctor(refused, "check", SEED001, "--target", "titan-rtx", "--no-server").returncode == 1
    time.sleep(2)
    assert served_count(refused) is None and not list(other.rglob("*.log"))
