"""Malformed values at every boundary: wrong types in the configuration and in snapshots, numbers out of any sane
range, and outputs that cannot be written. Each is one line and exit 2 when the user typed it, "unknown" when it
came from a file or the environment the user did not type, and never exit 3, a hang or a crashed rule."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from precision_doctor.cli import app as cli
from precision_doctor.knowledge.versions import at_least, parse_version
from precision_doctor.model.facts import BusyPort, HostFacts, PackageVersion, StackFacts
from precision_doctor.model.strict_json import dumps
from precision_doctor.probes.collect import snapshot_json
from precision_doctor.probes.target import machine_from_target

ROOT = Path(__file__).resolve().parents[1]
DOCTOR = [sys.executable, "-m", "precision_doctor"]
AMP = "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\nscaler = torch.cuda.amp.GradScaler()\n"  # one warning
HUGE = "9" * 5000


def run(argv, capsys) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_exit_2(code: int, err: str, fragment: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert fragment in err, err


def strict(text: str):
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(AMP)
    return path


# --- types: [tool.precision-doctor] ------------------------------------------------------------------


@pytest.mark.parametrize(
    "table,fragment",
    [
        ("target = 123", "[tool.precision-doctor]: target: expected a string, got 123"),
        ('select = "PD2"', 'select: expected an array of strings, got "PD2"'),
        ("ignore = [1]", "ignore[0]: expected a string, got 1"),
        ("per-file-ignores = [1]", "per-file-ignores: expected an object of arrays of strings, got [1]"),
        ('per-file-ignores = { "a.py" = 1 }', "per-file-ignores[...]: expected an array of strings"),
        ('exclude = "build"', 'exclude: expected an array of strings, got "build"'),
        ("fail-on = 3", "fail-on: expected one of 'error', 'warning', 'info', 'never', got 3"),
        ("launcher = { a = 1 }", 'launcher: expected a string, got {"a": 1}'),
    ],
)
def test_wrong_types_in_the_configuration_name_the_key(tmp_path, script, capsys, table, fragment):
    config = tmp_path / "pyproject.toml"
    config.write_text(f"[tool.precision-doctor]\n{table}\n")
    code, _, err = run(["check", script, "--config", config], capsys)
    one_line_exit_2(code, err, fragment)


# --- types: --facts snapshots ------------------------------------------------------------------------


def snapshot() -> dict:
    machine = machine_from_target("a100:2")
    from dataclasses import replace

    host = HostFacts(
        hostname="node",
        ports_checked=(29500,),
        busy_ports=(BusyPort(29500, 77),),
        env={"MASTER_PORT": "29500"},
        accelerate_config={"main_process_port": 29500},
    )
    stack = StackFacts(packages={"torch": PackageVersion("torch", "2.4.0", "installed")})
    return json.loads(snapshot_json(replace(machine, host=host), stack))


def check_snapshot(tmp_path, script, capsys, content: str, *extra: str):
    node = tmp_path / "node.json"
    node.write_text(content)
    return run(["check", script, "--facts", node, "--format", "json", "--include-facts", *extra], capsys)


def test_a_well_formed_snapshot_still_reads(tmp_path, script, capsys):
    code, out, _ = check_snapshot(tmp_path, script, capsys, json.dumps(snapshot()))
    assert code == 0 and strict(out)["facts"]["machine"]["gpus"][1]["capability"] == [8, 0]


@pytest.mark.parametrize(
    "path,value,fragment",
    [
        (
            ("machine", "gpus", 0, "capability"),
            "8.0",
            'machine.gpus[0].capability: expected an array of 2 integers, got "8.0"',
        ),
        (
            ("machine", "gpus", 0, "capability"),
            [8, 0, 1],
            "machine.gpus[0].capability: expected an array of 2 integers",
        ),
        (("machine", "gpus"), {"0": {}}, "machine.gpus: expected an array of objects"),
        (("machine", "gpus", 1, "memory_total_mib"), "80GB", "machine.gpus[1].memory_total_mib: expected an integer"),
        (("machine", "host", "busy_ports", 0, "port"), "29500", "machine.host.busy_ports[0].port: expected an integer"),
        (("machine", "host", "env"), ["MASTER_PORT"], "machine.host.env: expected an object of strings"),
        (("machine", "origin"), "mars", "machine.origin: expected one of 'this-machine', 'target', 'snapshot'"),
        (("machine", "known"), "yes", 'machine.known: expected true or false, got "yes"'),
        (("stack", "packages"), [], "stack.packages: expected an object of objects, got []"),
        (("machine",), [], "machine: expected an object, got []"),
    ],
)
def test_wrong_types_in_a_snapshot_name_the_path(tmp_path, script, capsys, path, value, fragment):
    data = snapshot()
    node = data
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    code, _, err = check_snapshot(tmp_path, script, capsys, json.dumps(data))
    one_line_exit_2(code, err, f"--facts {tmp_path / 'node.json'}: {fragment}")


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("[" * 100_000 + "]" * 100_000, "the top level: expected an object, got an array"),
        (
            '{"kind": "precision-doctor-snapshot", "version": 1, "machine": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "nested too deeply",
        ),
        (
            '{"kind": "precision-doctor-snapshot", "version": 1, "machine": {"known": true, "source": "", '
            '"probed_at": NaN}}',
            "not a JSON snapshot",
        ),
        (
            '{"kind": "precision-doctor-snapshot", "version": 1, "machine": {"known": true, "source": "", '
            f'"probed_at": 1{"0" * 400}.0}}}}',
            "number out of range",
        ),
        (
            '{"kind": "precision-doctor-snapshot", "version": 1, "machine": {"known": true, "source": "", '
            f'"gpus": [{{"index": {HUGE}}}]}}}}',
            "integer value out of range",
        ),
    ],
)
def test_snapshots_that_are_not_strict_json_or_too_deep(tmp_path, script, capsys, content, fragment):
    code, _, err = check_snapshot(tmp_path, script, capsys, content)
    one_line_exit_2(code, err, fragment)


def test_a_snapshot_with_more_gpus_than_a_node_has(tmp_path, script, capsys):
    data = snapshot()
    data["machine"]["gpus"] = data["machine"]["gpus"][:1] * 2000
    code, _, err = check_snapshot(tmp_path, script, capsys, json.dumps(data))
    one_line_exit_2(code, err, "machine.gpus: 2000 GPUs; a node has at most 1024")


def test_values_rules_read_untyped_are_unknown_not_crashes(tmp_path, script, capsys):
    """The port and counts in a snapshot's env and accelerate config are the node's, not typed by the user:
    nonsense there is unknown (the default port), never a crashed rule."""
    data = snapshot()
    data["machine"]["host"]["env"]["MASTER_PORT"] = "²"
    data["machine"]["host"]["accelerate_config"] = {
        "main_process_port": 70000,
        "num_processes": [[[]]],
        "mixed_precision": {"a": 1},
    }
    data["stack"]["packages"]["torch"]["version"] = HUGE
    code, out, err = check_snapshot(
        tmp_path, script, capsys, json.dumps(data), "--launcher", "accelerate launch --num_processes 2"
    )
    report = strict(out)
    assert code in (0, 1), err
    assert report["crashed"] == []


# --- numbers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--target", "h100:99999999"], "the count after ':' must be a whole number from 1 to 1024"),
        (["--target", f"h100:{HUGE}"], "the count after ':' must be a whole number from 1 to 1024"),
        (["--target", "h100:²"], "the count after ':' must be a whole number"),
        (
            ["--jobs", "99999999999999999999"],
            "--jobs/-j: '99999999999999999999': expected a whole number from 0 to 1024",
        ),
        (["--jobs", HUGE], "--jobs/-j"),
        (
            ["--launcher", "torchrun --master_port 99999 train.py"],
            "--master_port '99999': expected a whole number from 1",
        ),
        (["--launcher", "torchrun --master_port=² train.py"], "--master_port '²': expected a whole number"),
        (["--launcher", "accelerate launch --main_process_port 0 train.py"], "--main_process_port '0'"),
        (["--launcher", f"torchrun --nproc_per_node {HUGE} train.py"], "--nproc_per_node '99999999999999999...'"),
        (
            ["--launcher", "deepspeed --num_gpus 4096 train.py"],
            "--num_gpus '4096': expected a whole number from 1 to 1024",
        ),
        (["--steps", "-1"], "--steps: '-1'"),
        (["--timeout", "nan"], "--timeout: 'nan': expected a number"),
        (["--timeout", "1e999"], "--timeout: '1e999'"),
    ],
)
def test_numbers_typed_on_the_command_line_are_bounded(script, capsys, argv, fragment):
    code, _, err = run(["check", script, *argv], capsys)
    one_line_exit_2(code, err, fragment)
    assert len(err) < 400  # a 5,000-digit value is not echoed whole


def test_jobs_above_the_cpu_count_is_clamped(tmp_path, capsys):
    for i in range(40):  # enough scripts for the worker pool
        (tmp_path / f"s{i}.py").write_text(AMP)
    code, out, err = run(
        [
            "check",
            tmp_path,
            "--jobs",
            "1024",
            "--target",
            "t4",
            "--format",
            "json",
            "--include-facts",
            "--fail-on",
            "warning",
        ],
        capsys,
    )
    assert code == 1 and len(strict(out)["facts"]["scripts"]) == 40, err


def test_torchrun_word_counts_are_kept_as_written(script, capsys):
    code, out, err = run(
        [
            "check",
            script,
            "--format",
            "json",
            "--include-facts",
            "--target",
            "t4",
            "--launcher",
            "torchrun --nproc_per_node gpu train.py",
        ],
        capsys,
    )
    assert code in (0, 1), err
    assert strict(out)["facts"]["launch"]["num_processes"]["value"] == "gpu"


def test_numbers_from_the_environment_and_config_files_are_unknown(tmp_path, script):
    """MASTER_PORT=² and main_process_port 70000 come from the machine, not the user's command: the doctor
    tests no such port and goes on (exit 0/1), where it used to crash on int('²') or bind(70000)."""
    config = tmp_path / "accelerate.yaml"
    config.write_text(f"main_process_port: 70000\nnum_processes: {HUGE}\nmixed_precision: bf16\n")
    env = {
        **os.environ,
        "MASTER_PORT": "²",
        "ACCELERATE_CONFIG_FILE": str(config),
        "WORLD_SIZE": "²",
        "LOCAL_RANK": "0",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        DOCTOR + ["check", str(script), "--format", "json", "--include-facts"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr
    report = strict(proc.stdout)
    assert report["crashed"] == []
    assert 70000 not in report["facts"]["machine"]["host"]["ports_checked"]


def test_a_version_pin_that_is_no_version_is_unknown(tmp_path, capsys):
    (tmp_path / "requirements.txt").write_text(f"torch=={HUGE}\ntransformers==1{'.0' * 40}\n")
    (tmp_path / "train.py").write_text(AMP)
    code, out, err = run(
        ["check", tmp_path / "train.py", "--target", "t4", "--format", "json", "--fail-on", "warning"], capsys
    )
    report = strict(out)
    assert code == 1 and report["crashed"] == [], err
    assert "PD213" in {f["id"] for f in report["findings"]}  # torch taken as the current release, not as 0


@pytest.mark.parametrize(
    "text,parsed",
    [
        ("2.4.0+cu121", (2, 4, 0)),
        ("v1.8", (1, 8)),
        ("0.43.2", (0, 43, 2)),
        ("2.5.0rc1", (2, 5, 0)),
        (HUGE, None),
        ("1" + ".0" * 40, None),
        ("12345678901.2", None),
        ("latest", None),
        ("", None),
    ],
)
def test_version_parsing(text, parsed):
    assert parse_version(text) == parsed


def test_an_unparseable_version_is_taken_as_the_current_release():
    stack = StackFacts(packages={"torch": PackageVersion("torch", HUGE, "declared")})
    assert at_least(stack, "torch", "2.4")


# --- outputs -----------------------------------------------------------------------------------------


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    doctor = " ".join(DOCTOR)
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command.replace('DOCTOR', doctor)}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("fmt", ["json", "text", "sarif"])
def test_a_closed_output_pipe_never_turns_a_failing_gate_into_a_pass(script, fmt):
    proc = shell(f"DOCTOR check {script} --target t4 --fail-on warning --format {fmt} | true", script.parent)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""  # no "Exception ignored ... BrokenPipeError"


def test_a_closed_output_pipe_on_a_clean_run_is_0(script):
    proc = shell(f"DOCTOR check {script} --target t4 --format json | true", script.parent)
    assert proc.returncode == 0, proc.stderr


def test_a_patch_into_a_closed_pipe_is_still_1(tmp_path):
    """`fix --diff` exits 1 when there is a patch; a reader that stops early does not make it 0."""
    for name in ("train.py", "model_utility_configs.py"):
        shutil.copy(ROOT / "fixtures/seed001_titan_fp16/buggy" / name, tmp_path / name)
    proc = shell("DOCTOR fix train.py --target titan-rtx --diff --unsafe | true", tmp_path)
    assert proc.returncode == 1, proc.stderr


def test_explain_into_a_closed_pipe_is_0_as_documented(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("RuntimeError: \"LayerNormKernelImpl\" not implemented for 'Half'\n" * 2000)
    proc = shell(f"DOCTOR explain {log} | true", tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("redirect,fragment", [("> /dev/full", "No space left on device"), (">&-", "stdout is closed")])
def test_stdout_that_cannot_take_the_report_is_exit_2(script, redirect, fragment):
    for fmt in ("json", "text"):
        proc = shell(f"DOCTOR check {script} --target t4 --format {fmt} {redirect}", script.parent)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and fragment in proc.stderr, proc.stderr


def test_closed_stdin_is_read_as_empty(script):
    proc = shell(f"DOCTOR fix {script} --target t4 <&- >/dev/null", script.parent)
    assert proc.returncode in (0, 1) and "internal error" not in proc.stderr, proc.stderr
    proc = shell("DOCTOR explain <&-", script.parent)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_non_finite_numbers_are_strings_in_every_json_output(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_text(
        "from transformers import TrainingArguments\n"
        'args = TrainingArguments(output_dir="o", learning_rate=1e999, weight_decay=-1e999, '
        'adam_epsilon=float("nan"), fp16=True)\n'
    )
    code, out, err = run(["check", path, "--target", "t4", "--format", "json", "--include-facts"], capsys)
    assert code in (0, 1), err
    kwargs = [c["kwargs"] for c in strict(out)["facts"]["scripts"][0]["calls"] if "learning_rate" in c["kwargs"]][0]
    assert kwargs["learning_rate"]["value"] == "Infinity" and kwargs["weight_decay"]["value"] == "-Infinity"
    code, out, err = run(["check", path, "--target", "t4", "--format", "sarif"], capsys)
    strict(out)


def test_strict_json_writer():
    doc = {"a": [math.inf, -math.inf, math.nan, 1.5], "b": {"c": (math.nan,)}}
    assert strict(dumps(doc)) == {"a": ["Infinity", "-Infinity", "NaN", 1.5], "b": {"c": ["NaN"]}}


def test_a_machine_only_check_in_ci_with_stdout_closed_is_exit_2(tmp_path):
    """`CI=1 check --target X >&-`: the "only the machine was checked" notice asks whether stdout is a terminal;
    a closed stdout is not one (it was an internal error, exit 3)."""
    proc = shell("CI=1 DOCTOR check --target titan-rtx >&-", tmp_path)
    assert proc.returncode == 2 and "internal error" not in proc.stderr, proc.stderr
    assert "stdout is closed" in proc.stderr


def test_a_report_to_a_stream_that_cannot_show_its_symbols_keeps_its_verdict(script):
    """PYTHONIOENCODING=ascii (an old CI log): the report's · and → are written as escapes, the verdict stands (a
    warning passes, --fail-on warning fails), no crash."""
    for extra, verdict in (("", 0), ("--fail-on warning", 1)):
        proc = shell(f"PYTHONIOENCODING=ascii DOCTOR check {script} --target t4 {extra}", script.parent)
        assert proc.returncode == verdict and proc.stderr == "", proc.stderr
        assert "PD213" in proc.stdout and "\\xb7" in proc.stdout


def test_output_dash_is_stdout(script):
    proc = shell(f"DOCTOR check {script} --target t4 --format json -o -", script.parent)
    assert proc.returncode == 0 and json.loads(proc.stdout)["findings"], proc.stderr
    assert not (script.parent / "-").exists()
