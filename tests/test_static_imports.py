"""Static mode never imports torch, transformers or libcst (a user's laptop or CI runner may lack them)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys, io, contextlib
from precision_doctor.cli import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    code = main(["check", "fixtures/seed001_titan_fp16/buggy/train.py", "--target", "titan-rtx"])
heavy = sorted(m for m in ("torch", "transformers", "libcst", "accelerate", "peft", "trl")
               if m in sys.modules)
lazy = sorted(m for m in ("yaml", "msgspec", "pathspec") if m in sys.modules)  # loaded only when needed
print(__import__("json").dumps({"code": code, "heavy": heavy, "lazy": lazy, "out": buf.getvalue()[:200]}))
"""


def test_check_imports_no_ml_stack():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 1, proc.stderr
    assert result["heavy"] == []
    assert result["lazy"] == []  # no YAML read, no config table or snapshot, no .gitignore: none of them loads
