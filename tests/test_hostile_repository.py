"""What a repository hands the doctor besides scripts, written to break it: job scripts whose values are computed
when the job runs or whose expansion and arithmetic explode, model facts nested, huge or of the wrong type,
requirements files that include themselves, and training environments whose metadata is a FIFO or a link to
/dev/zero. Each gives a report (exit 0 or 1, strict JSON) quickly, with what it cannot judge unknown: never exit 2
for a valid job, never exit 3, never a hang."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from precision_doctor.cli import app as cli
from precision_doctor.probes.shell_arithmetic import evaluate

TRAIN = (
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('./ckpt')\n"
    "args = TrainingArguments(output_dir='o', bf16=True, per_device_train_batch_size=8)\n"
    "Trainer(model=model, args=args).train()\n"
)
WITHIN_S = 20


def check(path: Path, *args, capsys) -> tuple[int, dict, str]:
    started = time.monotonic()
    code = cli.main(["check", str(path), "--format", "json", *map(str, args)])
    out, err = capsys.readouterr()
    assert time.monotonic() - started < WITHIN_S
    assert code in (0, 1), err
    return code, json.loads(out), err


def job(tmp_path: Path, body: str) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:a100:4\n" + body)
    return path


# --- job scripts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("port", ["$(shuf -i 20000-30000 -n 1)", "`shuf -i 20000-30000 -n 1`", "$((20000 + RANDOM))"])
def test_a_port_the_job_computes_when_it_runs_is_unknown_not_a_usage_error(tmp_path, capsys, port):
    path = job(
        tmp_path,
        f"export MASTER_PORT={port}\nsrun torchrun --nnodes 2 --nproc_per_node 4 --master_port $MASTER_PORT train.py\n",
    )
    code, report, err = check(path, capsys=capsys)
    assert "--launcher" not in err
    assert "PD117" not in {f["id"] for f in report["findings"]}  # read, and judged: 2 nodes, --nnodes 2


def test_per_task_values_stay_unknown(tmp_path, capsys):
    path = job(
        tmp_path,
        "srun torchrun --nnodes 2 --node_rank $SLURM_PROCID --nproc_per_node $SLURM_GPUS_ON_NODE "
        "--master_port $((29500 + SLURM_PROCID)) train.py\n",
    )
    check(path, capsys=capsys)


def test_a_value_the_launcher_would_refuse_is_judged_not_refused(tmp_path, capsys):
    path = job(tmp_path, "srun torchrun --nnodes 2 --nproc_per_node 4 --master_port 99999 train.py\n")
    check(path, capsys=capsys)
    code = cli.main(["check", str(tmp_path / "train.py"), "--launcher", "torchrun --master_port 99999 train.py"])
    assert code == 2  # typed by the user: a typo, one line
    assert "--launcher: --master_port '99999'" in capsys.readouterr().err


def test_variable_expansion_is_bounded(tmp_path, capsys):
    lines = "V1=abcdefghij\n" + "".join(f'V{i}="$V{i - 1}$V{i - 1}$V{i - 1}$V{i - 1}"\n' for i in range(2, 40))
    path = job(tmp_path, lines + "srun torchrun --nnodes 2 --nproc_per_node 4 train.py --run_name $V39\n")
    check(path, capsys=capsys)


def test_arithmetic_bombs_are_bounded(tmp_path, capsys):
    body = (
        "P=$((1" + "*3" * 1000 + "))\nX=2\n" + "X=$((X*X))\n" * 40 + "export MASTER_PORT=$(( (X % 20000) + 10000 ))\n"
        "srun torchrun --nnodes 2 --nproc_per_node 4 --master_port $MASTER_PORT train.py --seed $P\n"
    )
    check(job(tmp_path, body), capsys=capsys)


@pytest.mark.skipif(shutil.which("bash") is None, reason="compared with bash itself")
@pytest.mark.parametrize(
    "expression",
    [
        "1+2*3",
        "-2**2",
        "2**3**2",
        "-7/2",
        "-7%2",
        "7%-2",
        "2**63",
        "2**64",
        "9223372036854775807+1",
        "1<<65",
        "~5",
        "!0",
        "(1+2)*(3-4)",
        "0x1f+010",
        "16#ff",
        "3>2&&1||0",
        "-(-9223372036854775807-1)/-1",
        "1" + "*3" * 1000,
    ],
)
def test_shell_arithmetic_is_bashs(expression):
    done = subprocess.run(["bash", "-c", f"echo $(( {expression} ))"], capture_output=True, text=True)
    assert str(evaluate(expression)) == done.stdout.strip()


@pytest.mark.parametrize("expression", ["1/0", "2**-1", "08", "a+1", "1?2:3", "(" * 1000 + "1" + ")" * 1000])
def test_shell_arithmetic_it_does_not_model_is_unknown(expression):
    assert evaluate(expression) is None


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "concise", "github"])
def test_values_from_a_job_script_never_reach_the_terminal_raw(tmp_path, fmt):
    (tmp_path / "train.py").write_text("print('train')\n")
    path = tmp_path / "job.sbatch"
    path.write_text(
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --partition=gpu\x1b[31mRED\x1b]0;owned\x07\n"
        "#SBATCH --gres=gpu:2\nsrun python train.py\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(path), "--format", fmt, "-v"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/nonexistent"},
    )
    assert done.returncode in (0, 1), done.stderr
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout + done.stderr


# --- model facts -------------------------------------------------------------------------------------------------

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
}


def checkpoint(tmp_path: Path, config: str | dict, header: dict | None = None, index: dict | None = None) -> Path:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if header is not None:
        data = json.dumps(header).encode()
        (tmp_path / "ckpt" / "model.safetensors").write_bytes(struct.pack("<Q", len(data)) + data + b"\0" * 16)
    if index is not None:
        (tmp_path / "ckpt" / "model.safetensors.index.json").write_text(json.dumps(index))
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def memory_reason(path: Path, capsys) -> str:
    code = cli.main(["memory", str(path), "--target", "a100", "--format", "json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    (entry,) = json.loads(out)["scripts"]
    return entry.get("unknown", "")


def test_a_config_nested_a_hundred_thousand_deep_is_unknown(tmp_path, capsys):
    path = checkpoint(tmp_path, '{"model_type": "llama", "a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    check(path, "--target", "a100", capsys=capsys)
    assert "size is not known" in memory_reason(path, capsys)


@pytest.mark.parametrize("field", ["num_hidden_layers", "vocab_size", "hidden_size"])
def test_an_impossible_size_is_unknown_with_its_reason(tmp_path, capsys, field):
    path = checkpoint(tmp_path, {**LLAMA, field: 10**300})
    check(path, "--target", "a100", capsys=capsys)
    assert f"{field} = a 301-digit number is no real model's" in memory_reason(path, capsys)


@pytest.mark.parametrize(
    "entry",
    [
        {"dtype": ["F16"], "shape": [2, 2]},
        {"dtype": {"a": 1}, "shape": [2, 2]},
        {"dtype": "F16", "shape": [2**62, 2**62]},
        {"dtype": "F16", "shape": "x"},
    ],
)
def test_an_ill_typed_safetensors_header_is_no_crash(tmp_path, capsys, entry):
    config = {k: v for k, v in LLAMA.items() if k != "torch_dtype"}
    path = checkpoint(
        tmp_path, config, header={"w": {**entry, "data_offsets": [0, 8]}}, index={"metadata": {"total_size": 10**300}}
    )
    check(path, "--target", "a100", capsys=capsys)
    memory_reason(path, capsys)


# --- requirements and training environments ---------------------------------------------------------------------


def bare_environment(root: Path) -> Path:
    (root / "env" / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (root / "env" / "bin").mkdir()
    (root / "env" / "bin" / "python").write_text("")
    return root / "env" / "bin" / "python"


def test_a_requirements_file_that_includes_itself_is_read_once(tmp_path, capsys):
    (tmp_path / "requirements.txt").write_text("transformers==4.46.0\n" + "-r requirements.txt\n" * 300)
    (tmp_path / "train.py").write_text(TRAIN)
    code, report, _ = check(
        tmp_path / "train.py", "--include-facts", "--python", bare_environment(tmp_path), capsys=capsys
    )
    packages = report["facts"]["scripts"][0]["stack"]["packages"]
    assert packages["transformers"]["version"] == "4.46.0"


@pytest.mark.parametrize("planted", ["fifo", "dev-zero"])
@pytest.mark.parametrize("how", ["--python", "VIRTUAL_ENV"])
def test_an_environments_metadata_that_is_a_fifo_or_dev_zero_is_skipped(tmp_path, capsys, monkeypatch, planted, how):
    python = bare_environment(tmp_path)
    info = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "transformers-4.46.0.dist-info"
    info.mkdir()
    if planted == "fifo":
        os.mkfifo(info / "METADATA")
    else:
        (info / "METADATA").symlink_to("/dev/zero")
    (tmp_path / "train.py").write_text(TRAIN)
    args = ["--python", python] if how == "--python" else []
    if how == "VIRTUAL_ENV":
        monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "env"))
    check(tmp_path / "train.py", *args, capsys=capsys)


@pytest.mark.parametrize("line", ["-r a\x00b", "transformers" + " " * 1_000_000 + "x", "-r " + "d/" * 3000 + "r.txt"])
def test_a_requirements_line_no_file_could_hold_is_skipped_quickly(tmp_path, capsys, line):
    (tmp_path / "requirements.txt").write_text("transformers==4.46.0\n" + line + "\n")
    (tmp_path / "train.py").write_text(TRAIN)
    code, report, _ = check(
        tmp_path / "train.py", "--include-facts", "--python", bare_environment(tmp_path), capsys=capsys
    )
    assert report["facts"]["scripts"][0]["stack"]["packages"]["transformers"]["version"] == "4.46.0"


def test_a_virtual_env_no_folder_could_be_is_no_crash(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / ("v" * 5000)))
    (tmp_path / "train.py").write_text(TRAIN)
    check(tmp_path / "train.py", capsys=capsys)


def test_a_pyproject_nested_past_any_parser_is_unknown_or_one_line(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'x'\ndependencies = {deep}\n")
    code, report, _ = check(tmp_path / "train.py", "--include-facts", capsys=capsys)  # versions from it: unknown
    (tmp_path / "pyproject.toml").write_text(f"[tool.precision-doctor]\nignore = {deep}\n")
    assert cli.main(["check", str(tmp_path / "train.py")]) == 2  # settings that cannot be read: never skipped
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not valid TOML" in err, err


def test_a_job_line_of_megabytes_is_skipped_with_its_reason(tmp_path, capsys):
    path = job(tmp_path, "export NOISE=" + "a" * 4_000_000 + "\nsrun torchrun --nnodes 2 --nproc_per_node 4 train.py\n")
    code, report, _ = check(path, capsys=capsys)
    assert "PD117" not in {f["id"] for f in report["findings"]}  # the launch line after it is still read


def test_a_variable_in_arithmetic_is_its_whole_expression_as_in_bash(tmp_path, capsys):
    """bash evaluates a variable's text as an expression of its own: PER=12-4; $((PER/2)) is 4, not 12-4/2 = 10."""
    path = job(tmp_path, "PER=12-4\nNPROC=$((PER/2))\nsrun torchrun --nnodes 2 --nproc_per_node $NPROC train.py\n")
    code, report, _ = check(path, "--include-facts", capsys=capsys)
    ids = {f["id"] for f in report["findings"]}
    assert not ids & {"PD111", "PD116"}, ids  # 4 processes on 4 GPUs a node


@pytest.mark.parametrize("expression", ["2#102", "010#1", "16#", "1#1", "65#1", "\u0661+1"])
def test_shell_arithmetic_bash_refuses_is_unknown(expression):
    assert evaluate(expression) is None


def test_json_strings_hold_no_raw_control_characters(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    path = tmp_path / "job.sbatch"
    path.write_bytes(
        b"#!/bin/bash\r\n#SBATCH --nodes=1\r\n#SBATCH --job-name=a\x01b\x7fc\r\n#SBATCH --gres=gpu:2\r\n"
        b"srun python train.py\r\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(path), "--format", "json", "--include-facts"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/nonexistent"},
    )
    assert done.returncode in (0, 1), done.stderr
    json.loads(done.stdout)
    assert not any(c in done.stdout for c in "\r\x01\x7f"), "a raw control character in the JSON report"
