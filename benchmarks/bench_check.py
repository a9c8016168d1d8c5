"""Speed and memory of static `check` (figures, not a pass/fail test).

Prints: cold wall time and peak RSS of `precision-doctor check <seed-001 fixture>` (median of N runs)
beside `python -c pass`, and scripts per second over a generated tree of 1,000 training scripts.
Targets: <= 150 ms median cold wall, <= 60 MiB peak RSS, >= 300 scripts/s; probing this machine's GPUs,
processes and ports adds <= 50 ms; the parallel walk is >= 1.6x one process on 2 cores and grows linearly.

    python benchmarks/bench_check.py [--runs 15] [--tree 1000] [--growth]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED001 = ROOT / "fixtures" / "seed001_titan_fp16" / "buggy" / "train.py"


# A fresh process on an installed package: bytecode exists (pip compiles it at install), so let the warm-up
# run write it even where PYTHONDONTWRITEBYTECODE is set.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=ENV)
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024


def median_of(cmd: list[str], runs: int) -> tuple[float, float]:
    measure(cmd)  # warm the OS file cache; "cold" means a fresh interpreter, not a cold disk
    samples = [measure(cmd) for _ in range(runs)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


TEMPLATES = [
    "seed001_titan_fp16/buggy/train.py", "seed002_fp16_device_map/simple_finetune.py",
    "seed004_h100_amp_guide/train.py", "shapes/hf_argparser.py", "shapes/argparse_and_kwargs.py",
    "shapes/hardware_branches.py", "seed000_accelerate_implicit_bf16/train.py",
]


def make_tree(dest: Path, n: int) -> None:
    rng = random.Random(0)
    sources = [(ROOT / "fixtures" / t).read_text() for t in TEMPLATES]
    for i in range(n):
        text = rng.choice(sources).replace("float16", rng.choice(["float16", "bfloat16", "float32"]))
        sub = dest / f"project{i // 50:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"train_{i:04d}.py").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tree", type=int, default=1000)
    parser.add_argument("--growth", action="store_true", help="also time 100, 1,000 and 5,000 scripts")
    opts = parser.parse_args()
    exe = shutil.which("precision-doctor")
    doctor = [exe] if exe else [sys.executable, "-m", "precision_doctor"]
    base_wall, base_rss = median_of([sys.executable, "-c", "pass"], opts.runs)
    wall, rss = median_of(doctor + ["check", str(SEED001), "--target", "titan-rtx", "--fail-on", "never"],
                          opts.runs)
    print(f"python -c pass                      median wall {base_wall * 1000:6.1f} ms   peak RSS {base_rss:5.1f} MiB")
    print(f"check seed-001 fixture (cold)       median wall {wall * 1000:6.1f} ms   peak RSS {rss:5.1f} MiB"
          f"   (targets: <= 150 ms, <= 60 MiB)")
    probed, _ = median_of(doctor + ["check", str(SEED001), "--fail-on", "never"], opts.runs)
    print(f"  + probing this machine (no --target) median wall {probed * 1000:6.1f} ms   "
          f"probes add {(probed - wall) * 1000:+5.1f} ms   (target: <= 50 ms)")
    def tree_seconds(n: int, jobs: int, repeat: int = 3) -> float:
        """Median of `repeat` runs over one generated tree (a shared 2-core machine is noisy)."""
        with tempfile.TemporaryDirectory() as tmp:
            make_tree(Path(tmp), n)
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                subprocess.run(doctor + ["check", tmp, "--quiet", "--fail-on", "never", "--jobs", str(jobs)],
                               stdout=subprocess.DEVNULL, check=True, env=ENV)
                times.append(time.perf_counter() - start)
            return statistics.median(times)

    one = tree_seconds(opts.tree, 1)
    print(f"tree of {opts.tree} scripts, one process   {one:6.2f} s   {opts.tree / one:7.0f} scripts/s"
          f"   (target: >= 300 scripts/s)")
    cores = os.cpu_count() or 1
    par = tree_seconds(opts.tree, cores)
    print(f"tree of {opts.tree} scripts, {cores} workers     {par:6.2f} s   {opts.tree / par:7.0f} scripts/s"
          f"   speed-up x{one / par:.2f}   (target: >= x1.6 on 2 cores)")
    if opts.growth:
        for n in (100, 1000, 5000):
            t = tree_seconds(n, cores, repeat=1)
            print(f"  growth: {n:5d} scripts  {t:6.2f} s  {t / n * 1000:6.2f} ms/script")


if __name__ == "__main__":
    main()
