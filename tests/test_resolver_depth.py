"""Deeply nested scripts (issue 18 §4, depth): whatever `ast.parse` accepts the doctor reads; what it
refuses is a one-line exit 2; a RecursionError in the probe makes one file "not checked", never exit 3."""

import ast
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from precision_doctor.probes import script as script_probe
from precision_doctor.probes.script import probe_script

ROOT = Path(__file__).resolve().parents[1]


def deep(shape: str, n: int) -> str:
    """A statement nested `n` levels deep in one of the shapes that crashed the recursive scope visitor."""
    if shape == "binop":
        return "x = " + " + ".join(["a"] * n) + "\n"
    if shape == "elif":
        return "if a == 0:\n    x = 0\n" + "".join(f"elif a == {i}:\n    x = {i}\n" for i in range(1, n))
    if shape == "attribute":
        return "x = a" + ".b" * n + "\n"
    if shape == "lambda":
        return "x = " + "lambda: " * n + "0\n"
    if shape == "hardware_elif":  # every branch a GPU check: the value splits on each
        return "if torch.cuda.is_bf16_supported():\n    x = 0\n" + "".join(
            f"elif torch.cuda.get_device_capability()[0] >= {i}:\n    x = {i}\n" for i in range(1, n)
        )
    raise ValueError(shape)


def script(shape: str, n: int) -> str:
    return (
        "import torch\nfrom transformers import TrainingArguments\na = 1\n"
        + deep(shape, n)
        + "TrainingArguments(output_dir='o', bf16=True, learning_rate=x)\n"
    )


SHAPES = ["binop", "elif", "attribute", "lambda", "hardware_elif"]


@cache
def parse_limit(shape: str) -> int:
    """The smallest depth `ast.parse` refuses here (RecursionError, MemoryError, SyntaxError), by bisection.

    The parser's limit counts the caller's stack too, so a fresh process accepts somewhat deeper files."""

    def parses(n: int) -> bool:
        try:
            ast.parse(script(shape, n))
            return True
        except (RecursionError, MemoryError, SyntaxError):
            return False

    low, high = 1, 2
    while parses(high):
        low, high = high, high * 2
        assert high < 200_000, "ast.parse accepts any depth of this shape"
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if parses(mid) else (low, mid)
    return high


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("where", ["at 325 levels", "just below the parser's limit"])
def test_every_depth_python_parses_is_read(tmp_path, shape, where):
    n = 325 if where == "at 325 levels" else parse_limit(shape) - 1
    path = tmp_path / f"{shape}.py"
    path.write_text(script(shape, n))
    facts = probe_script(path)
    assert not [u for u in facts.unknowns if u.what == "not checked"]
    args = next(c for c in facts.calls if c.kind == "training_args")
    assert args.kwarg("bf16").is_(True)
    assert args.kwarg("learning_rate").state in ("known", "dynamic", "conditional")


def test_a_depth_python_refuses_is_a_one_line_input_error(tmp_path):
    shape = "binop"
    path = tmp_path / "too_deep.py"
    path.write_text(script(shape, 2 * parse_limit(shape)))  # refused in any process
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "too_deep.py" in lines[0] and "nested too deeply" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_deep_file_in_a_folder_does_not_take_the_run_down(tmp_path):
    (tmp_path / "deep.py").write_text(script("lambda", parse_limit("lambda") - 1))
    (tmp_path / "train.py").write_text((ROOT / "fixtures" / "seed001_titan_fp16" / "buggy" / "train.py").read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(tmp_path), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_recursion_error_in_the_probe_makes_the_file_not_checked(tmp_path, monkeypatch):
    def too_deep(self):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(script_probe._Collector, "collect", too_deep)
    path = tmp_path / "train.py"
    path.write_text("import torch\nmodel = torch.nn.Linear(2, 2).half()\n")
    facts = probe_script(path)
    assert [u.what for u in facts.unknowns] == ["not checked"]
    assert "nested too deeply" in facts.unknowns[0].reason and facts.calls == ()


def test_a_recursive_function_passing_its_parameter_on_is_followed_once_per_call_site(tmp_path, monkeypatch):
    """`f(node.left)` inside f: each self-call's argument is the parameter again. Following every other call site
    from each one grew factorially (a 4 KB AST walker took 4 s); the parameter is now settled once."""
    from precision_doctor.probes.resolve import Resolver

    branches = "".join(f"    if kind == {i}:\n        return walk(node.child{i}, kind)\n" for i in range(8))
    path = tmp_path / "train.py"
    path.write_text(
        "import torch\n"
        "from transformers import AutoModelForCausalLM\n"
        f"def walk(node, kind):\n{branches}    return node\n"
        "dtype = walk(torch.float16, 0)\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=dtype)\n"
    )
    followed = []
    passed = Resolver._passed
    monkeypatch.setattr(Resolver, "_passed", lambda self, *a: followed.append(a[0]) or passed(self, *a))
    facts = probe_script(path)
    assert len(followed) <= 50  # a few per call site (1,096,008 before the guard), not one per path through them
    load = next(c for c in facts.calls if c.kind == "model_load")
    assert load.kwarg("dtype").state != "known"  # a recursive call passes another value: not decided
