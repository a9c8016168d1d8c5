"""Live mode's overhead (figures, not a test): `check --live` against running the same script up to
trainer.train() on its own. Targets: <= 10% more wall time; peak RSS of the live child within 10% of the
script's own (no second copy of the weights).

    python benchmarks/bench_live.py [--runs 3] [--hidden 512]
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

SCRIPT = """
import os, sys, torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained({path!r}, dtype=torch.float32)
ids = torch.randint(0, 1000, (64,))
data = [{{"input_ids": ids, "labels": ids}} for _ in range(32)]
args = TrainingArguments(output_dir={out!r}, use_cpu=True, report_to=[], per_device_train_batch_size=2)
trainer = Trainer(model=model, args=args, train_dataset=data)
if os.environ.get("STOP_BEFORE_TRAIN"):
    sys.exit(0)
trainer.train()
"""


def timed(cmd, env) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=512)
    opts = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    tmp = Path(tempfile.mkdtemp())
    try:
        import transformers

        cfg = transformers.LlamaConfig(
            hidden_size=opts.hidden,
            intermediate_size=opts.hidden * 3,
            num_hidden_layers=8,
            num_attention_heads=8,
            num_key_value_heads=8,
            vocab_size=1000,
        )
        transformers.LlamaForCausalLM(cfg).save_pretrained(tmp / "model")
        script = tmp / "train.py"
        script.write_text(SCRIPT.format(path=str(tmp / "model"), out=str(tmp / "out")))
        size = sum(f.stat().st_size for f in (tmp / "model").iterdir()) / 2**20
        alone = [timed([sys.executable, str(script)], {**env, "STOP_BEFORE_TRAIN": "1"}) for _ in range(opts.runs)]
        doctor = [
            sys.executable,
            "-m",
            "precision_doctor",
            "check",
            str(script),
            "--live",
            "--target",
            "cpu",
            "--format",
            "json",
            "--include-facts",
            "--fail-on",
            "never",
            "--quiet",
        ]
        live = [timed(doctor, env) for _ in range(opts.runs)]
        child_rss = statistics.median(json.loads(out)["facts"]["live"]["peak_rss_mib"] for _, _, out in live)
        a_wall = statistics.median(w for w, _, _ in alone)
        l_wall = statistics.median(w for w, _, _ in live)
        a_rss = statistics.median(r for _, r, _ in alone)
        print(f"model weights on disk            {size:7.1f} MiB")
        print(f"script alone to trainer.train()   median wall {a_wall:6.2f} s   peak RSS {a_rss:7.1f} MiB")
        print(
            f"check --live (whole doctor)       median wall {l_wall:6.2f} s   live child peak RSS {child_rss:7.1f} MiB"
        )
        print(
            f"overhead                          wall {100 * (l_wall / a_wall - 1):+5.1f} %   "
            f"RSS {100 * (child_rss / a_rss - 1):+5.1f} %   (targets: <= 10 %, within 10 %)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
