"""Static mode never imports torch, transformers or libcst (a user's laptop or CI runner may lack them)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys, io, contextlib
from precision_doctor.cli.app import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    code = main(["check", "fixtures/seed001_titan_fp16/buggy/train.py", "--target", "titan-rtx"])
heavy = sorted(m for m in ("torch", "transformers", "libcst", "accelerate", "peft", "trl")
               if m in sys.modules)
lazy = sorted(m for m in ("yaml", "msgspec", "pathspec", "rich") if m in sys.modules)  # loaded only when needed
print(__import__("json").dumps({"code": code, "heavy": heavy, "lazy": lazy, "out": buf.getvalue()[:200]}))
"""


def test_check_imports_no_ml_stack():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 1, proc.stderr
    assert result["heavy"] == []
    # no YAML read, no config table or snapshot, no .gitignore: none of them loads; a report not written to a
    # terminal is plain text, written without rich
    assert result["lazy"] == []


FRAMEWORKS = ("lightning", "pytorch_lightning", "lightning_fabric", "sentence_transformers", "unsloth", "diffusers")
FRAMEWORK_SCRIPTS = (
    "fixtures/configs/scripts/lightning/deepspeed.py",
    "fixtures/configs/scripts/sentence_transformers/train.py",
    "fixtures/configs/scripts/unsloth/train.py",
    "fixtures/configs/scripts/diffusers/train_text_to_image.py",
)


def test_check_never_imports_the_frameworks_it_reads(tmp_path):
    """Each framework is installed here as a package that records its own import: checking scripts that use them
    must leave no record (the doctor reads their calls from the AST and mirrors their defaults from tables)."""
    marks = tmp_path / "imported"
    marks.mkdir()
    site = tmp_path / "site"
    for name in FRAMEWORKS:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(
            f"open({str(marks / name)!r}, 'w').close()\nraise ImportError('static mode imported {name}')\n"
        )
    probe = (
        "import sys, io, contextlib\nsys.path.insert(0, sys.argv[1])\nfrom precision_doctor.cli.app import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    codes = [main(['check', s, '--target', 'a100:4', '--', '--mixed_precision', 'fp16'])\n"
        "             for s in sys.argv[2:]]\n"
        f"print(__import__('json').dumps({{'codes': codes, 'loaded': sorted(m for m in {FRAMEWORKS!r} "
        f"if m in sys.modules)}}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(site), *FRAMEWORK_SCRIPTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["codes"] == [1, 1, 1, 1], proc.stderr  # each fixture has its error: it was read
    assert result["loaded"] == [] and not list(marks.iterdir())
