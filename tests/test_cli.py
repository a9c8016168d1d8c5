"""The command line as a user meets it: exit codes, one-line errors, rules and targets listings."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEED001 = "fixtures/seed001_titan_fp16/buggy/train.py"


def doctor(*args, cwd=ROOT, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for frag in fragments:
        assert frag in lines[0], lines[0]


def test_missing_file(tmp_path):
    assert_one_line_error(doctor("check", str(tmp_path / "nope.py")), "no such file")


def test_directory_without_training_code(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "environment.yml").write_text("name: ml\n")  # YAML that is no recipe
    assert_one_line_error(doctor("check", str(tmp_path)), "no training code")


def test_syntax_error_says_where(tmp_path):
    p = tmp_path / "broken.py"
    p.write_text("import torch\nmodel = (\n")
    assert_one_line_error(doctor("check", str(p)), "broken.py:", "syntax error")


def test_non_utf8(tmp_path):
    p = tmp_path / "latin.py"
    p.write_bytes(b"import torch\n# caf\xe9\n")
    assert_one_line_error(doctor("check", str(p)), "latin.py:2", "not UTF-8")


@pytest.mark.parametrize("name", ["empty.py", "__init__.py"])
def test_an_empty_file_is_nothing_to_check_and_no_error(tmp_path, name):
    """A pre-commit run over a commit that touches only an empty `__init__.py` passes (issue 32)."""
    p = tmp_path / name
    p.write_text("  \n")
    proc = doctor("check", str(p), "--target", "a100")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert f"{name}  nothing to check (the file is empty)" in proc.stdout
    assert "unknown" not in proc.stdout  # not a value the doctor could not decide
    proc = doctor("check", str(p), "--target", "a100", "--format", "json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["unknowns"][0]["what"] == "nothing to check"


def test_huge_generated_file(tmp_path):
    p = tmp_path / "generated.py"
    p.write_text("x = 1\n" * 500_000)
    assert_one_line_error(doctor("check", str(p)), "too large")


def test_deeply_nested_expression_is_bad_input_not_a_crash(tmp_path):
    p = tmp_path / "deep.py"
    p.write_text("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    proc = doctor("check", str(p))
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr


def test_unknown_target_and_bad_format():
    assert_one_line_error(doctor("check", SEED001, "--target", "tpu-v5"), "unknown GPU", "precision-doctor targets")
    assert_one_line_error(doctor("check", SEED001, "--format", "xml"), "--format")
    assert_one_line_error(doctor("check", SEED001, "--fail-on", "fatal"), "--fail-on")
    assert_one_line_error(doctor("check", SEED001, "--launcher", "nohup"), "starts no command")


def test_fail_on_levels():
    assert doctor("check", SEED001, "--target", "titan-rtx").returncode == 1
    assert doctor("check", SEED001, "--target", "titan-rtx", "--fail-on", "never").returncode == 0
    fixed = "fixtures/seed001_titan_fp16/fixed/train.py"
    assert doctor("check", fixed, "--target", "titan-rtx").returncode == 0
    assert doctor("check", fixed, "--target", "titan-rtx", "--fail-on", "info").returncode == 0


def test_warning_level_gate():
    proc = doctor(
        "check",
        "fixtures/seed004_h100_amp_guide/train.py",
        "--target",
        "h100",
        "--fail-on",
        "warning",
        "--",
        "--mixed_precision",
        "bf16",
    )
    assert proc.returncode == 1
    assert (
        doctor(
            "check", "fixtures/seed004_h100_amp_guide/train.py", "--target", "h100", "--", "--mixed_precision", "bf16"
        ).returncode
        == 0
    )  # warnings only, default gate is error


def test_script_args_after_double_dash_reach_the_scripts_parser():
    quiet = doctor("check", "fixtures/shapes/hf_argparser.py", "--format", "json")
    loud = doctor(
        "check", "fixtures/shapes/hf_argparser.py", "--format", "json", "--", "--fp16", "--torch_dtype", "float16"
    )
    assert json.loads(quiet.stdout)["findings"] == []
    assert [f["id"] for f in json.loads(loud.stdout)["findings"]] == ["PD201"]


def test_launcher_script_args_are_used_too():
    proc = doctor(
        "check",
        "fixtures/shapes/hf_argparser.py",
        "--format",
        "json",
        "--launcher",
        "torchrun --nproc_per_node 1 fixtures/shapes/hf_argparser.py --fp16 --torch_dtype float16",
    )
    assert [f["id"] for f in json.loads(proc.stdout)["findings"]] == ["PD201"]


def test_directory_of_scripts_gives_one_combined_report():
    proc = doctor("check", "fixtures/seed004_h100_amp_guide", "--format", "json", "--include-facts", "--target", "h100")
    paths = {s["path"] for s in json.loads(proc.stdout)["facts"]["scripts"]}
    assert {Path(p).name for p in paths} == {"train.py", "train_fixed.py"}


def test_rules_lists_every_rule_and_rule_prints_the_doc():
    proc = doctor("rules")
    assert proc.returncode == 0
    for rid in ("PD201", "PD204", "PD215"):
        assert rid in proc.stdout
    doc = doctor("rule", "PD201")
    assert doc.returncode == 0
    for section in (
        "What it does",
        "Why is this bad?",
        "Attempting to unscale FP16 gradients",
        "Use instead",
        "Fix safety",
    ):
        assert section in doc.stdout
    assert doctor("rule", "pure-fp16-no-loss-scaling").returncode == 0
    assert_one_line_error(doctor("rule", "PD999"), "no rule")


def test_targets_lists_profiles():
    proc = doctor("targets")
    for name in ("titan-rtx", "a100-80gb", "h100", "l40s", "t4", "cpu"):
        assert name in proc.stdout


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {}])
def test_plain_output_when_piped(env):
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", SEED001, "--target", "titan-rtx"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, **env},
    )
    assert "\x1b[" not in proc.stdout
    assert "error PD201" in proc.stdout


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"FORCE_COLOR": "1"},
        {"FORCE_COLOR": ""},
        {"NO_COLOR": "1", "FORCE_COLOR": "1"},
        {"TTY_COMPATIBLE": "1"},
        {"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"},
    ],
)
def test_a_piped_report_is_coloured_exactly_where_rich_would_colour_it(env):
    """The plain report is written without rich (cli.report_console); the environment variables rich reads still
    decide, as rich decides: the installed rich is asked what it would do with the same environment."""
    import io
    import os

    from rich.console import Console

    base = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", SEED001, "--target", "titan-rtx"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **env},
    )
    rich_view = Console(file=io.StringIO(), _environ={**base, **env})
    assert ("\x1b[" in proc.stdout) == (rich_view.is_terminal and not rich_view.no_color), proc.stdout[:300]
    assert "PD201" in proc.stdout


def test_a_report_on_a_terminal_is_coloured():
    pty = pytest.importorskip("pty")
    import os

    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "precision_doctor", "check", SEED001, "--target", "titan-rtx"],
        cwd=ROOT,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:  # read as it writes: a report longer than the terminal's buffer would block it otherwise
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    out = b"".join(chunks).decode()
    assert proc.wait(timeout=60) == 1 and "\x1b[" in out and "PD201" in out


def test_rich_colour_on_a_terminal_and_quiet_mode():
    import io

    from rich.console import Console

    from precision_doctor import engine
    from precision_doctor.probes.collect import gather
    from precision_doctor.report.text import render

    facts = gather([str(ROOT / SEED001)], target="titan-rtx")
    result = engine.run(facts)
    buf = io.StringIO()
    render(result, facts, Console(file=buf, force_terminal=True, color_system="standard", width=200))
    coloured = buf.getvalue()
    assert "\x1b[" in coloured and "✗ error" in coloured
    buf = io.StringIO()
    render(result, facts, Console(file=buf, width=200), quiet=True)
    assert "machine:" not in buf.getvalue() and "PD201" in buf.getvalue()


def test_unreadable_files_found_in_a_folder_are_listed_not_fatal(tmp_path):
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "broken.py").write_text("def (\n")
    for name in ("train.py", "model_utility_configs.py"):
        (tmp_path / name).write_text((ROOT / "fixtures/seed001_titan_fp16/ultimate_fix" / name).read_text())
    proc = doctor("check", str(tmp_path), "--format", "json", "--target", "titan-rtx")
    doc = json.loads(proc.stdout)
    skipped = {Path(u["path"]).name: u["reason"] for u in doc["unknowns"] if u["what"] == "not checked"}
    assert set(skipped) == {"broken.py"} and "syntax error" in skipped["broken.py"]
    # an empty file is no error and nothing to check, not "not checked"
    assert any(Path(u["path"]).name == "empty.py" and u["what"] == "nothing to check" for u in doc["unknowns"])
    assert proc.returncode == 1  # the real script's PD204 still gates


@pytest.mark.parametrize("columns", ["60", "100", "0", "x"])
def test_help_is_wrapped_to_the_terminal_width_as_argparse_wraps_it(columns, monkeypatch):
    """The help formatter takes the width from $COLUMNS (or the terminal, else 80) exactly as argparse's own does
    (without importing shutil): the same help, line for line."""
    import argparse

    from precision_doctor.cli.app import build_parser

    monkeypatch.setenv("COLUMNS", columns)
    parser = build_parser()
    check = parser._subparsers._group_actions[0].choices["check"]
    ours = check.format_help()
    theirs = argparse.ArgumentParser._get_formatter  # the base class's: shutil.get_terminal_size
    monkeypatch.setattr(type(check), "_get_formatter", theirs)
    assert ours == check.format_help()
    assert parser.format_help() == argparse.ArgumentParser.format_help(parser)


@pytest.mark.parametrize("command", [["check"], ["memory"]])
def test_no_color_means_no_styles_even_where_colour_is_forced(command):
    """--no-color under FORCE_COLOR (a CI runner that forces colour): no escape sequence at all, bold included."""
    import os

    env = {**os.environ, "FORCE_COLOR": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "precision_doctor",
            command[0],
            SEED001,
            *command[1:],
            "--target",
            "titan-rtx",
            "--no-color",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.stdout and "\x1b[" not in proc.stdout, proc.stdout[:200]
    coloured = subprocess.run(
        [sys.executable, "-m", "precision_doctor", command[0], SEED001, *command[1:], "--target", "titan-rtx"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert "\x1b[" in coloured.stdout  # the twin: forced colour without --no-color is styled
