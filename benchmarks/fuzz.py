"""Fuzz the whole command line: `python benchmarks/fuzz.py [N] [--seed S]` runs N cases (default 2000) of
tests/fuzzing.py in-process and prints the figures: cases by kind, the exit-code histogram, the slowest case, and
every failure (exit 3, a hang, output that is not strict JSON, a crashed rule, exit 2 without one line).
Exit status 1 when any case failed."""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzzing import TIME_LIMIT_S, cases, run_cases  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("n", nargs="?", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=10, help="failures to print in full")
    parser.add_argument(
        "--repository-share",
        type=float,
        default=0.4,
        help="the share of job scripts, recipes, model facts and requirements files (default 0.4)",
    )
    opts = parser.parse_args()
    start = time.perf_counter()
    todo = cases(opts.n, opts.seed, repository_share=opts.repository_share)
    built = time.perf_counter() - start
    outcomes = run_cases(todo, TIME_LIMIT_S)
    wall = time.perf_counter() - start
    kinds = collections.Counter(o.case.kind for o in outcomes)
    codes = collections.Counter("hang" if o.code is None else o.code for o in outcomes)
    failures = [o for o in outcomes if o.failed]
    slowest = max(outcomes, key=lambda o: o.seconds)
    times = sorted(o.seconds for o in outcomes)
    print(f"cases      {len(outcomes)} ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}), seed {opts.seed}")
    print(f"exit codes {dict(sorted(codes.items(), key=str))}")
    for kind in sorted(kinds):
        by_kind = collections.Counter("hang" if o.code is None else o.code for o in outcomes if o.case.kind == kind)
        print(f"  {kind:<13}{dict(sorted(by_kind.items(), key=str))}")
    print(
        f"time       {wall:.1f} s wall ({built:.1f} s generating); per case median {times[len(times) // 2] * 1000:.0f}"
        f" ms, p99 {times[int(len(times) * 0.99)] * 1000:.0f} ms"
    )
    print(
        f"slowest    {slowest.seconds * 1000:.0f} ms ({slowest.case.kind}, {len(slowest.case.source)} chars, "
        f"args {' '.join(slowest.case.args) or '-'})"
    )
    print(f"failures   {len(failures)}")
    by_problem = collections.Counter(o.problem.split(":")[0][:80] for o in failures)
    for problem, n in by_problem.most_common():
        print(f"  {n:5d}  {problem}")
    for o in failures[: opts.show]:
        print(f"\n--- {o.case.kind} {' '.join(o.case.args)}: {o.problem}\n{o.case.source[:600]}")
        if o.case.snapshot:
            print(f"--- snapshot\n{o.case.snapshot[:600]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
