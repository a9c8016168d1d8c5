"""Speed and memory of `precision-doctor explain` on a large training log (figures, not a pass/fail test).

Writes a synthetic log of the given size — Trainer metric dicts, tqdm progress bars (\\r updates on one line),
NCCL/info chatter, warnings and a few very long lines — with a real failure at the end, then times a cold
`precision-doctor explain LOG` in a child process. Prints MB/s, wall time and peak RSS.
Target: a 300 MB log in under 20 s (>= 15 MB/s) with peak RSS that does not grow with the log.

    python benchmarks/bench_explain.py [--mb 300] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHATTER = [
    "{{'loss': {loss:.4f}, 'grad_norm': {gn:.4f}, 'learning_rate': 1.9e-05, 'epoch': {ep:.2f}}}",
    "[INFO|trainer.py:2314] 2025-01-0{d} 12:00:{s:02d},123 >> Saving model checkpoint to out/checkpoint-{step}",
    "node{d}:1234:1234 [0] NCCL INFO Channel 0{d}/24 :    0   1   2   3   4   5   6   7",
    "step {step} | loss {loss:.4f} | lr 1.0e-05 | tokens/s 18234.5 | mem 61.2 GiB | elapsed {s}s",
    "/usr/lib/python3/site-packages/torch/utils/checkpoint.py:61: UserWarning: None of the inputs have "
    "requires_grad=True. Gradients will be None",
    "wandb: Tracking run with wandb version 0.19.{d}",
]


def write_log(path: Path, size_mb: int) -> None:
    rng = random.Random(0)
    target = size_mb * 1_000_000
    written = 0
    step = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < target:
            step += 1
            if step % 500 == 0:  # a tqdm bar: many \r updates on one line
                line = (
                    "".join(
                        f"\r {p:3d}%|{'█' * (p // 10):<10}| {p * 10}/1000 [00:{p % 60:02d}<01:00,  5.37it/s]"
                        for p in range(0, 101, 2)
                    )
                    + "\n"
                )
            elif step % 20_000 == 0:  # a dumped tensor or config: one very long line
                line = "tensor([" + ", ".join(f"{rng.random():.4f}" for _ in range(20_000)) + "])\n"
            else:
                line = (
                    rng.choice(_CHATTER).format(
                        loss=rng.random() * 3, gn=rng.random(), ep=step / 1e5, d=step % 8, s=step % 60, step=step
                    )
                    + "\n"
                )
            fh.write(line)
            written += len(line)
        fh.write(
            'Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n'
            "ValueError: Attempting to unscale FP16 gradients.\n"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="log size in MB (default 300)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    opts = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="pd-bench-explain-"))
    log = folder / "train.log"
    write_log(log, opts.mb)
    size = log.stat().st_size
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "precision_doctor", "explain", str(log), "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read().decode()
    found = "PD201" in out
    print(
        f"explain: {size / 1e6:.0f} MB in {wall:.1f} s = {size / 1e6 / wall:.1f} MB/s, "
        f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB, failure found: {found}"
    )
    if not opts.keep:
        log.unlink()
        folder.rmdir()
    else:
        print(f"log kept: {log}")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
