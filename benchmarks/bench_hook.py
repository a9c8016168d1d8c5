"""One script as a pre-commit hook or an editor sees it (figures, not a pass/fail test).

Prints the median and the fastest of --runs runs of a fresh `precision-doctor check` process on a copy of the
seed-001 script in a git repository, its content cache warm: the script just edited (a comment appended before
each run: its facts are read afresh, the libraries' signatures come from the cache) and unchanged (the last
answer replayed), each in a process of its own (`--no-server`) and served by `precision-doctor server`; beside
`python -c pass`, the interpreter alone. Target: the edited script <= 100 ms wall on a quiet core.

    python benchmarks/bench_hook.py [--runs 21] [--target a100]

The doctor is the one installed for this interpreter (its `precision-doctor` program beside it, else
`python -m precision_doctor` from a folder outside this checkout); the server runs in a private runtime folder of
its own and is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED001 = ROOT / "fixtures" / "seed001_titan_fp16" / "buggy"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--target", default="a100")
    args = parser.parse_args()
    program = Path(sys.executable).with_name("precision-doctor")
    doctor = [str(program)] if program.exists() else [sys.executable, "-m", "precision_doctor"]
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as work:
        work_path = Path(work)
        repo = work_path / "job"
        shutil.copytree(SEED001, repo)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        runtime = work_path / "runtime"
        runtime.mkdir(mode=0o700)
        env = {
            k: v for k, v in os.environ.items() if k not in ("PRECISION_DOCTOR_NO_SERVER", "PYTHONDONTWRITEBYTECODE")
        }
        env.update(XDG_RUNTIME_DIR=str(runtime), XDG_CACHE_HOME=str(work_path / "cache"))
        script = repo / "train.py"
        check = [*doctor, "check", str(script), "--target", args.target]

        def run(cmd: list[str], edit: bool) -> float:
            if edit:
                with open(script, "a") as handle:
                    handle.write(f"# edited {time.time()}\n")
            start = time.perf_counter()
            subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return time.perf_counter() - start

        def figure(cmd: list[str], edit: bool = False) -> str:
            for _ in range(3):  # bytecode written, the cache warm
                run(cmd, edit)
            samples = [run(cmd, edit) for _ in range(args.runs)]
            return f"median {statistics.median(samples) * 1000:5.0f} ms, fastest {min(samples) * 1000:5.0f} ms"

        print(f"python -c pass                     {figure([sys.executable, '-c', 'pass'])}")
        print(f"edited script, its own process     {figure([*check, '--no-server'], edit=True)}")
        print(f"unchanged script, its own process  {figure([*check, '--no-server'])}")
        started = subprocess.run([*doctor, "server", "start"], cwd=repo, env=env, capture_output=True, text=True)
        if started.returncode != 0:
            raise SystemExit(f"the server did not start: {started.stderr.strip()}")
        try:
            print(f"edited script, served              {figure(check, edit=True)}")
            print(f"unchanged script, served           {figure(check)}")
            print(
                subprocess.run([*doctor, "server", "status"], cwd=repo, env=env, capture_output=True, text=True).stdout
            )
        finally:
            subprocess.run([*doctor, "server", "stop"], cwd=repo, env=env, capture_output=True)


if __name__ == "__main__":
    main()
