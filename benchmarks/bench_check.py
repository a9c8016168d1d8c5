"""Speed and memory of static `check` (figures, not a pass/fail test).

Prints: cold wall time and peak RSS of `precision-doctor check <seed-001 fixture>` (median of N runs)
beside `python -c pass`, and scripts per second over a generated tree of 1,000 training scripts.
Targets: <= 150 ms median cold wall, <= 60 MiB peak RSS, >= 300 scripts/s; probing this machine's GPUs,
processes and ports adds <= 50 ms; the parallel walk is >= 1.6x one process on 2 cores and grows linearly.

    python benchmarks/bench_check.py [--runs 15] [--tree 1000] [--growth] [--real DIR [--real-runs 3]]
                                     [--beside CHECKOUT ...]

`--real DIR` times a folder run over a tree of real scripts (e.g. a checkout of many training repositories):
lines per second per core (`--jobs 1`), the ratio to `ast.parse` alone over the same files, the speed-up of
`--jobs 2`, the peak RSS of the one-process run and the size of its JSON report. Targets: >= 4x the lines/s of
the code the repository-scale issue measured, <= 100 MiB, >= 1.8x on 2 cores, JSON < 1 MB for 300 files. That code
is main when the issue was filed, bbfd222: the issue found 13x the time of ast.parse, and bbfd222 takes 11-12x
on a corpus of 655 files from 22 training repositories (eaf13ba, the commit before the first speed commit, had
already gained a third of that: do not take it for the baseline). `--beside CHECKOUT` (repeatable) times another
checkout of the doctor (a `git worktree` of such a commit) turn about with this one, for the speed-up itself
rather than a ratio. Wall and CPU time are both shown: on a machine shared with other work the CPU time (user +
system of the command and its workers) is the steadier measure of lines per core, and each ratio is taken within
one round (ast.parse, then the two checks), so a busy minute slows both its sides.
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


def measure(cmd: list[str], checkout: str | None = None) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MiB) and CPU seconds (user + system, its workers included) of one child process;
    with `checkout`, `python -m precision_doctor` runs that checkout's code (from its folder: `-m` looks there
    first)."""
    start = time.perf_counter()
    before = os.times()
    env = {**ENV, "PYTHONPATH": str(Path(checkout).resolve())} if checkout else dict(ENV)
    cache = tempfile.mkdtemp(prefix="bench-cache-")  # every run reads its files afresh: benchmarks/bench_cache.py
    env["XDG_CACHE_HOME"] = cache  # times the content cache, and an older checkout takes no --no-cache
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=checkout or ROOT, env=env)
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    shutil.rmtree(cache, ignore_errors=True)
    after = os.times()  # children's times: the worker processes of a --jobs run are waited for by the doctor
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, usage.ru_maxrss / 1024, max(cpu, usage.ru_utime + usage.ru_stime)


def median_of(cmd: list[str], runs: int) -> tuple[float, float]:
    wall, rss, _ = medians_of(cmd, runs)
    return wall, rss


def medians_of(cmd: list[str], runs: int) -> tuple[float, float, float]:
    """Median wall seconds, peak RSS and CPU seconds over `runs` runs (after one to warm the file cache)."""
    measure(cmd)  # warm the OS file cache; "cold" means a fresh interpreter, not a cold disk
    samples = [measure(cmd) for _ in range(runs)]
    return tuple(statistics.median(s[i] for s in samples) for i in range(3))  # type: ignore[return-value]


def alternating(cmd: list[str], checkout: str, runs: int) -> tuple[float, float, float]:
    """Median CPU seconds of `cmd` with this code and with `checkout`'s, run turn about (one warm-up each), and the
    median of the per-turn ratios there / here: how many times faster this code is, in the same minutes."""
    measure(cmd), measure(cmd, checkout)
    turns = [(measure(cmd)[2], measure(cmd, checkout)[2]) for _ in range(runs)]
    return (
        statistics.median(t[0] for t in turns),
        statistics.median(t[1] for t in turns),
        statistics.median(t[1] / t[0] for t in turns),
    )


TEMPLATES = [
    "seed001_titan_fp16/buggy/train.py",
    "seed002_fp16_device_map/simple_finetune.py",
    "seed004_h100_amp_guide/train.py",
    "shapes/hf_argparser.py",
    "shapes/argparse_and_kwargs.py",
    "shapes/hardware_branches.py",
    "seed000_accelerate_implicit_bf16/train.py",
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
    parser.add_argument("--real", metavar="DIR", help="also time a folder run over this tree of real scripts")
    parser.add_argument("--real-runs", type=int, default=3, metavar="N", help="runs per figure of --real (median)")
    parser.add_argument("--only-real", action="store_true", help="with --real: skip the other figures")
    parser.add_argument(
        "--beside",
        metavar="CHECKOUT",
        action="append",
        default=[],
        help="also time another checkout of the doctor (e.g. a `git worktree` of an earlier commit) "
        "turn about with this one: the speed-up per core (repeatable)",
    )
    opts = parser.parse_args()
    exe = shutil.which("precision-doctor")
    doctor = [exe] if exe else [sys.executable, "-m", "precision_doctor"]
    if opts.real:
        real_tree(doctor, Path(opts.real).resolve(), opts.real_runs, opts.beside)
        if opts.only_real:
            return
    base_wall, base_rss = median_of([sys.executable, "-c", "pass"], opts.runs)
    wall, rss = median_of(doctor + ["check", str(SEED001), "--target", "titan-rtx", "--fail-on", "never"], opts.runs)
    print(f"python -c pass                      median wall {base_wall * 1000:6.1f} ms   peak RSS {base_rss:5.1f} MiB")
    print(
        f"check seed-001 fixture (cold)       median wall {wall * 1000:6.1f} ms   peak RSS {rss:5.1f} MiB"
        f"   (targets: <= 150 ms, <= 60 MiB)"
    )
    single = [
        sys.executable,
        "-m",
        "precision_doctor",
        "check",
        str(SEED001),
        "--target",
        "titan-rtx",
        "--fail-on",
        "never",
    ]
    for checkout in opts.beside:
        here, there, faster = alternating(single, checkout, opts.runs)
        print(
            f"  beside {checkout}: {there * 1000:6.1f} ms CPU, this code {here * 1000:6.1f} ms "
            f"(x{faster:.2f} as fast, turn about)"
        )
    probed, _ = median_of(doctor + ["check", str(SEED001), "--fail-on", "never"], opts.runs)
    print(
        f"  + probing this machine (no --target) median wall {probed * 1000:6.1f} ms   "
        f"probes add {(probed - wall) * 1000:+5.1f} ms   (target: <= 50 ms)"
    )

    def tree_seconds(n: int, jobs: int, repeat: int = 3) -> float:
        """Median of `repeat` runs over one generated tree (a shared 2-core machine is noisy)."""
        with tempfile.TemporaryDirectory() as tmp:
            make_tree(Path(tmp), n)
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                subprocess.run(
                    doctor + ["check", tmp, "--quiet", "--fail-on", "never", "--jobs", str(jobs)],
                    stdout=subprocess.DEVNULL,
                    check=True,
                    env=ENV,
                )
                times.append(time.perf_counter() - start)
            return statistics.median(times)

    one = tree_seconds(opts.tree, 1)
    print(
        f"tree of {opts.tree} scripts, one process   {one:6.2f} s   {opts.tree / one:7.0f} scripts/s"
        f"   (target: >= 300 scripts/s)"
    )
    cores = os.cpu_count() or 1
    par = tree_seconds(opts.tree, cores)
    print(
        f"tree of {opts.tree} scripts, {cores} workers     {par:6.2f} s   {opts.tree / par:7.0f} scripts/s"
        f"   speed-up x{one / par:.2f}   (target: >= x1.6 on 2 cores)"
    )
    if opts.growth:
        for n in (100, 1000, 5000):
            t = tree_seconds(n, cores, repeat=1)
            print(f"  growth: {n:5d} scripts  {t:6.2f} s  {t / n * 1000:6.2f} ms/script")


PARSE_ALL = """
import ast, sys, time
sources = [open(p, "rb").read() for p in sys.argv[1:]]
start = time.process_time()
for src in sources:
    try:
        ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
print(time.process_time() - start)
"""


def two_cores(files: list[Path]) -> float:
    """Wall time of ast.parse over all the files in one process, over that of two processes taking half each at
    once: what a second core gives on this machine at this minute (on a shared machine, less than x2)."""

    def timed(groups: list[list[Path]]) -> float:
        start = time.perf_counter()
        procs = [
            subprocess.Popen([sys.executable, "-c", PARSE_ALL, *map(str, g)], stdout=subprocess.DEVNULL, env=ENV)
            for g in groups
        ]
        for proc in procs:
            proc.wait()
        return time.perf_counter() - start

    return timed([files]) / timed([files[0::2], files[1::2]])


def real_tree(doctor: list[str], folder: Path, runs: int, beside: list[str] = ()) -> None:
    """A folder run over real scripts, against ast.parse over the same files. The machine may be shared: each
    round times ast.parse, the one-process check and the 2-worker check one after the other, and the figures are
    medians over the rounds (a ratio is taken within its round, so a busy minute slows both of its sides)."""
    sys.path.insert(0, str(ROOT))
    from precision_doctor.system.walk import python_files

    files = python_files(folder).files
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    base = doctor + ["check", str(folder), "--quiet", "--fail-on", "never", "--target", "a100"]
    measure(base + ["--jobs", "1"])  # warm the OS file cache and the bytecode
    rounds = []
    for _ in range(runs):
        parsed = subprocess.run(
            [sys.executable, "-c", PARSE_ALL, *map(str, files)], capture_output=True, text=True, check=True, env=ENV
        )
        parse_s = float(parsed.stdout)
        one, rss, one_cpu = measure(base + ["--jobs", "1"])
        two, _, two_cpu = measure(base + ["--jobs", "2"])
        rounds.append((parse_s, one, rss, one_cpu, two, two_cpu))

    def med(i: int) -> float:
        return statistics.median(r[i] for r in rounds)

    def ratio(i: int, j: int) -> float:
        return statistics.median(r[i] / r[j] for r in rounds)

    parse_s, one, rss, one_cpu, two, two_cpu = (med(i) for i in range(6))
    ceiling = statistics.median(two_cores(files) for _ in range(runs))
    report = subprocess.run(base + ["--jobs", "2", "--format", "json"], capture_output=True, env=ENV).stdout
    print(f"real tree {folder}: {len(files)} files, {lines} lines; medians of {runs} rounds")
    print(f"  ast.parse alone               {parse_s:6.2f} s   {lines / parse_s:9.0f} lines/s (CPU time)")
    print(
        f"  check, one process            {one:6.2f} s   {lines / one:9.0f} lines/s per core   "
        f"x{ratio(1, 0):.1f} the time of ast.parse   peak RSS {rss:5.1f} MiB   (target: <= 100 MiB)"
    )
    print(
        f"    in CPU time                 {one_cpu:6.2f} s   {lines / one_cpu:9.0f} lines/s per core   "
        f"x{ratio(3, 0):.1f} the time of ast.parse   (wall time counts other programs on a shared "
        f"machine; CPU time does not)"
    )
    print(
        f"  check, 2 workers              {two:6.2f} s   speed-up x{ratio(1, 4):.2f}   "
        f"(target: >= x1.8 on 2 cores)   CPU {two_cpu:.2f} s (x{ratio(5, 3):.2f} of one process)"
    )
    print(
        f"    what 2 cores give here      x{ceiling:.2f}   (two independent processes parsing half the files each, "
        f"against one parsing all: the ceiling of any 2-worker speed-up on this machine now)"
    )
    print(f"  --format json                 {len(report) / 1e6:6.2f} MB   (target: < 1 MB for 300 files)")
    cmd = [
        sys.executable,
        "-m",
        "precision_doctor",
        "check",
        str(folder),
        "--quiet",
        "--fail-on",
        "never",
        "--target",
        "a100",
        "--jobs",
        "1",
    ]
    for checkout in beside:
        here, there, faster = alternating(cmd, checkout, runs)
        print(
            f"  beside {checkout}: {there:6.2f} s CPU, this code {here:6.2f} s: x{faster:.2f} the lines/s per core "
            f"(turn about; target: x4 the code the issue measured, bbfd222)"
        )


if __name__ == "__main__":
    main()
