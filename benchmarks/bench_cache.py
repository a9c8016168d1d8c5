"""What the content cache saves (figures, not a pass/fail test).

Prints, for a folder run over a copy of DIR (the real-world folder: training scripts, notebooks and recipes):
the cold run (an empty cache), the unchanged second and third runs (a cold run that used worker processes keeps no
whole-run answer: the second run, answered from each file's entries, keeps one, and the third replays it), a run
after one file was edited, a run after a sibling module's dtype changed (and whether its importer's findings
changed), a run after a requirements pin changed (and whether the findings changed), and one script alone, cold and
cached. Each figure is the median of --runs runs of
a fresh `precision-doctor check` process (wall and CPU seconds); the ratios are to the cold run. Targets: unchanged
<= 10 % of cold, one file edited <= 25 %.

    python benchmarks/bench_cache.py DIR [--runs 5] [--target a100]

The pin case runs with `--python` set to an interpreter without transformers (this one's own would decide the
version: an installed release wins over a declared one), found as python3 on PATH, or given with --bare-python.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
HELPER = "def load():\n    return AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.{dtype})\n"
IMPORTER = (
    HEAD + "from bench_helper import load\n"
    "model = load()\n"
    "Trainer(model=model, args=TrainingArguments(output_dir='o', fp16=True)).train()\n"
)
PINNED = HEAD + "model = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n"


def timed(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """Wall and CPU seconds (the process and its workers) of one run, and its standard output."""
    start, before = time.perf_counter(), os.times()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall, after = time.perf_counter() - start, os.times()
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, done.stdout


def findings(report: str, path_part: str) -> set[str]:
    return {f["id"] for f in json.loads(report)["findings"] if path_part in f["path"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--target", default="a100")
    parser.add_argument("--bare-python", default=shutil.which("python3") or "", help="an interpreter without torch")
    opts = parser.parse_args()
    exe = shutil.which("precision-doctor")
    doctor = [exe] if exe else [sys.executable, "-m", "precision_doctor"]
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        shutil.copytree(opts.folder, tree, symlinks=True)
        (tree / "bench_helper.py").write_text(HEAD + HELPER.format(dtype="float16"))
        (tree / "bench_importer.py").write_text(IMPORTER)
        pinned = tree / "pinned"
        pinned.mkdir()
        (pinned / "requirements.txt").write_text("torch==2.5.1\ntransformers==4.46.3\n")
        (pinned / "train.py").write_text(PINNED)
        edited = sorted(tree.rglob("*.py"))[len(list(tree.rglob("*.py"))) // 2]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        check = doctor + ["check", str(tree), "--format", "json", "--fail-on", "never", "--quiet"]
        check += ["--target", opts.target]
        if opts.bare_python:
            check += ["--python", opts.bare_python]

        def with_cache(folder: str) -> list[str]:
            return check + ["--cache-dir", folder]

        timed(check + ["--no-cache"], env)  # the OS file cache and bytecode, for every figure alike
        colds, warms, agains, edits = [], [], [], []
        for i in range(opts.runs):
            cache = str(Path(scratch) / f"cache{i}")
            colds.append(timed(with_cache(cache), env)[:2])
            warms.append(timed(with_cache(cache), env)[:2])
            agains.append(timed(with_cache(cache), env)[:2])
            with open(edited, "a") as f:
                f.write(f"# edit {i}\n")
            edits.append(timed(with_cache(cache), env)[:2])
        cache = str(Path(scratch) / "cache0")
        before = timed(with_cache(cache), env)[2]
        (tree / "bench_helper.py").write_text(HEAD + HELPER.format(dtype="float32"))
        sibling = timed(with_cache(cache), env)
        (pinned / "requirements.txt").write_text("torch==2.5.1\ntransformers==5.2.0\n")
        pin = timed(with_cache(cache), env)
        nocache = [timed(check + ["--no-cache"], env)[:2] for _ in range(opts.runs)]

        one = doctor + ["check", str(ROOT / "fixtures/seed001_titan_fp16/buggy/train.py"), "--target", "titan-rtx"]
        one += ["--fail-on", "never", "--format", "json"]
        one_cache = str(Path(scratch) / "one")
        timed(one + ["--cache-dir", one_cache], env)
        single_cold = [timed(one + ["--no-cache"], env)[:2] for _ in range(opts.runs)]
        single_warm = [timed(one + ["--cache-dir", one_cache], env)[:2] for _ in range(opts.runs)]

    files = json.loads(before)["files"]["checked"]

    def med(samples: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)

    cold = med(colds)
    print(f"folder: {opts.folder} ({files} files checked), target {opts.target}, median of {opts.runs} runs")
    for name, (wall, cpu) in (
        ("no cache (--no-cache)", med(nocache)),
        ("cold (empty cache)", cold),
        ("unchanged", med(warms)),
        ("unchanged, again", med(agains)),
        ("one file edited", med(edits)),
    ):
        print(f"  {name:24} wall {wall:6.2f} s  cpu {cpu:6.2f} s   {cpu / cold[1] * 100:5.1f} % of cold (cpu)")
    helper_changed = findings(before, "bench_importer") != findings(sibling[2], "bench_importer")
    print(
        f"  {'sibling dtype changed':24} wall {sibling[0]:6.2f} s  cpu {sibling[1]:6.2f} s   importer's findings "
        f"{sorted(findings(before, 'bench_importer'))} -> {sorted(findings(sibling[2], 'bench_importer'))}"
        f" ({'changed' if helper_changed else 'UNCHANGED'})"
    )
    pin_changed = findings(sibling[2], "pinned") != findings(pin[2], "pinned")
    print(
        f"  {'requirements pin changed':24} wall {pin[0]:6.2f} s  cpu {pin[1]:6.2f} s   pinned script's findings "
        f"{sorted(findings(sibling[2], 'pinned'))} -> {sorted(findings(pin[2], 'pinned'))}"
        f" ({'changed' if pin_changed else 'UNCHANGED'})"
    )
    sc, sw = med(single_cold), med(single_warm)
    print(
        f"one script (seed-001): no cache wall {sc[0] * 1000:5.0f} ms cpu {sc[1] * 1000:5.0f} ms; cached wall "
        f"{sw[0] * 1000:5.0f} ms cpu {sw[1] * 1000:5.0f} ms"
    )


if __name__ == "__main__":
    main()
