"""Does `fix --yes` keep what `check` promises? (figures, not a pass/fail test)

For every script of a copy of DIR whose `check` report carries a fix marked safe, runs `fix SCRIPT --yes`, then
checks the whole copy again: a finding whose fix was labelled safe and that is still there is a broken promise;
so is an error a file has that it did not have before. Prints the counts and each broken promise.

    python benchmarks/fix_promise.py DIR [--target a100]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def doctor(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("precision-doctor")
    cmd = [exe] if exe else [sys.executable, "-m", "precision_doctor"]
    env = {**os.environ, "XDG_STATE_HOME": str(cwd / ".state-outside")}  # fix's undo data, out of the way
    return subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True, env=env)


def findings(report: str) -> list[dict]:
    return json.loads(report)["findings"]


def not_checked(report: str) -> set[str]:
    """The files a report could not check (a fix that broke a file's syntax shows here)."""
    return {u.get("path", "") for u in json.loads(report)["unknowns"] if u.get("what") == "not checked"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--target", default="a100")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        shutil.copytree(opts.folder, tree, symlinks=True)
        common = ["--target", opts.target, "--no-cache"]
        before = doctor("check", ".", "--format", "json", "--fail-on", "never", *common, cwd=tree)
        promised: dict[str, list[dict]] = {}
        errors_before: dict[str, set[str]] = {}
        for f in findings(before.stdout):
            if f["fix"] and f["fix"].get("safe"):
                promised.setdefault(f["path"], []).append(f)
            if f["severity"] == "error":
                errors_before.setdefault(f["path"], set()).add(f["id"])
        refused = []
        for path in sorted(promised):
            if not path.endswith((".py", ".ipynb")):
                continue
            done = doctor("fix", path, "--yes", "--target", opts.target, cwd=tree)
            if done.returncode not in (0, 1):
                refused.append(f"{path}: fix exit {done.returncode}: {done.stderr.strip()[:200]}")
        after = doctor("check", ".", "--format", "json", "--fail-on", "never", *common, cwd=tree)
        if after.returncode not in (0, 1):
            raise SystemExit(f"check after the fixes: exit {after.returncode}: {after.stderr.strip()[:300]}")
        left = {(f["path"], f["id"], f["message"]) for f in findings(after.stdout)}
        kept, broken = 0, []
        for path, fixes in sorted(promised.items()):
            for f in fixes:
                if (path, f["id"], f["message"]) in left:
                    broken.append(f"{path}: {f['id']} {f['message'][:120]}")
                else:
                    kept += 1
        worse = [
            f"{f['path']}: new error {f['id']}: {f['message'][:120]}"
            for f in findings(after.stdout)
            if f["severity"] == "error" and f["id"] not in errors_before.get(f["path"], set())
        ]
        unreadable_before = not_checked(before.stdout)
        worse += [f"{path}: not checked after the fixes" for path in not_checked(after.stdout) - unreadable_before]
    total = sum(len(v) for v in promised.values())
    print(f"{opts.folder}: {len(promised)} files with a fix marked safe, {total} such findings")
    print(f"  kept (finding gone after fix --yes): {kept}")
    print(f"  broken (finding still there): {len(broken)}")
    for line in broken:
        print(f"    {line}")
    print(f"  fixed files worse than before or unreadable: {len(worse)}")
    for line in worse + refused:
        print(f"    {line}")


if __name__ == "__main__":
    main()
