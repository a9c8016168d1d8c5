"""Speed of the script probe on large scripts (figures, not a pass/fail test).

Prints the probe time for one name reassigned 1k / 4k / 20k times (`model = model.half()` on each line:
every line's call is resolved, and each lookup must find the latest assignment before it), and for a
20k-line script made of the fixture training scripts one after another. Target: a 20,000-line script in
under 2 s (issue 18 §4; the resolver used to rescan every assignment on each lookup: 4.5 s for 4k, 121 s
for 20k).

    python benchmarks/bench_resolver.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from precision_doctor.probes import script as script_probe  # noqa: E402

TEMPLATES = [
    "seed001_titan_fp16/buggy/train.py",
    "seed002_fp16_device_map/simple_finetune.py",
    "seed004_h100_amp_guide/train.py",
    "shapes/hf_argparser.py",
    "shapes/argparse_and_kwargs.py",
    "shapes/hardware_branches.py",
    "seed000_accelerate_implicit_bf16/train.py",
]


def reassignments(n: int) -> str:
    return "import torch\nmodel = torch.nn.Linear(2, 2)\n" + "model = model.half()\n" * n


def realistic(lines: int) -> str:
    """Fixture scripts one after another (a long exported notebook): many calls, options, branches."""
    parts = [(ROOT / "fixtures" / t).read_text() for t in TEMPLATES]
    parts = ["\n".join(line for line in p.splitlines() if not line.startswith("from __future__")) for p in parts]
    out: list[str] = []
    i = 0
    while len(out) < lines:
        out.extend(parts[i % len(parts)].splitlines())
        i += 1
    return "\n".join(out[:lines]) + "\n"


def time_probe(source: str, runs: int) -> tuple[float, float, int]:
    """Median wall and CPU seconds of the probe (CPU time is the steadier figure on a shared machine)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.py"
        path.write_text(source)
        walls, cpus = [], []
        calls = 0
        for _ in range(runs):
            script_probe.forget_files()
            start, start_cpu = time.perf_counter(), time.process_time()
            facts = script_probe.probe_script(path, ("--fp16",))
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - start_cpu)
            calls = len(facts.calls)
        return statistics.median(walls), statistics.median(cpus), calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    opts = parser.parse_args()
    cases = [(f"{n:>6,} reassignments of one name", reassignments(n)) for n in (1_000, 4_000, 20_000)]
    cases.append(("20,000-line realistic script", realistic(20_000)))
    for label, source in cases:
        wall, cpu, calls = time_probe(source, opts.runs)
        print(f"{label:<34} {source.count(chr(10)):>7,} lines {calls:>7,} calls  {wall:6.2f} s wall  {cpu:6.2f} s CPU")


if __name__ == "__main__":
    main()
