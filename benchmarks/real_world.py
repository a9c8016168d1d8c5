"""Regression figures over a folder of real training scripts (figures, not a pass/fail test).

Runs `precision-doctor check DIR --format json` once over the whole folder and once per file, and prints:
files and lines; findings per rule and per severity; error-level findings file by file; every finding
that a per-file run and the folder run disagree on; unknowns per file and their commonest reasons;
files the doctor did not check and why; wall time and lines/s of the folder run.

    python benchmarks/real_world.py DIR [--target NAME] [--jobs N] [--limit N] [--json OUT]

The doctor is this checkout's, run by the current interpreter: versions are read from that interpreter's
environment first, so run it from one without the ML stack to judge each project by its own requirements.
`--limit N` runs only the first N files one by one (the folder run always covers DIR). Report fields are
read defensively: a field a newer report drops or renames is counted as missing, never a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEVERITY_ORDER = ("error", "warning", "info")
NOT_CHECKED = "not checked"
# Folders a walk never enters (what the doctor skips outside a git repository).
SKIP_DIRS = {"__pycache__", "venv", "env", "site-packages", "node_modules", "build", "dist"}


# ---------------------------------------------------------------- running the doctor


def doctor_env() -> dict[str, str]:
    """This checkout first on the path, so the children run the doctor next to this script."""
    env = dict(os.environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + rest)
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def run_check(paths: list[str], cwd: Path, target: str | None, jobs: int | None, facts: bool = False) -> dict:
    """One `check` run: its parsed report, exit code, wall seconds, and the error line when it gave no report."""
    cmd = [
        sys.executable,
        "-m",
        "precision_doctor",
        "check",
        *paths,
        "--format",
        "json",
        "--fail-on",
        "never",
        "--quiet",
    ]
    if target:
        cmd += ["--target", target]
    if facts:  # the folder run: the files it checked and the stack it judged by
        cmd += ["--include-facts"]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=doctor_env())
    wall = time.perf_counter() - start
    report, problem = None, ""
    try:
        report = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        problem = "output is not JSON"
    if not isinstance(report, dict):
        report = None
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        problem = problem or (lines[-1].strip() if lines else f"no report (exit {proc.returncode})")
    # --quiet leaves stderr empty on a clean run: anything there is noise a user would see
    stderr = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    return {"report": report, "rc": proc.returncode, "wall": wall, "problem": problem, "stderr": stderr}


# ---------------------------------------------------------------- reading a report defensively


def _list(doc: dict | None, key: str) -> list:
    value = doc.get(key) if isinstance(doc, dict) else None
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _norm(path: object) -> str:
    return os.path.normpath(str(path)) if path else ""


def finding_file(f: dict) -> str:
    locations = _list(f, "locations")
    return _norm(f.get("path") or (locations[0].get("path") if locations else ""))


def finding_site(f: dict) -> tuple[str, int | None]:
    """Where a finding points first: its first location (which may sit in a helper module), else its file."""
    for loc in _list(f, "locations") + _list(f, "evidence"):
        if loc.get("path"):
            line = loc.get("line")
            return _norm(loc["path"]), line if isinstance(line, int) else None
    return finding_file(f), None


def finding_key(f: dict) -> tuple:
    """What makes two runs' findings the same finding: rule, severity and the place it points at."""
    path, line = finding_site(f)
    return (str(f.get("id", "?")), str(f.get("severity", "?")), path, line)


def where(key: tuple) -> str:
    return f"{key[2]}:{key[3] if key[3] is not None else '?'}"


def checked_files(report: dict | None) -> list[str]:
    facts = report.get("facts") if isinstance(report, dict) else None
    return [_norm(s.get("path")) for s in _list(facts, "scripts") if s.get("path")]


def stack_line(report: dict | None) -> str:
    """`torch 2.4.0 (declared), ...` from whatever the report says about the stack."""
    facts = report.get("facts") if isinstance(report, dict) else None
    stack = facts.get("stack") if isinstance(facts, dict) else None
    packages = stack.get("packages") if isinstance(stack, dict) else None
    if not isinstance(packages, dict):
        return "?"
    parts = []
    for name, info in sorted(packages.items()):
        if isinstance(info, dict):
            parts.append(f"{name} {info.get('version', '?')} ({info.get('source', '?')})")
    return ", ".join(parts) or "?"


_CODE = re.compile(r"`[^`]*`|'[^']*'|\"[^\"]*\"")
_LEADING_EXPR = re.compile(r"^\S+(?:\([^)]*\))?(?:\[[^\]]*\])?\s+(?=(?:is|are|names|depends|comes|was|has|returns)\b)")


def reason_class(reason: str) -> str:
    """An unknown's reason with the script's own code taken out, so reasons of one kind count together."""
    text = _CODE.sub("…", reason.strip())
    text = _LEADING_EXPR.sub("<expr> ", text)
    text = re.sub(r"\b\d+\b", "N", text)
    return text[:120]


# ---------------------------------------------------------------- the figures


def walk_py(folder: Path) -> list[str]:
    found = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIP_DIRS and not d.startswith(".") and not (Path(here) / d / "pyvenv.cfg").exists()
        )
        code = [f for f in sorted(files) if f.endswith((".py", ".ipynb"))]
        found += [_norm(os.path.relpath(Path(here) / f, folder)) for f in code]
    return found


def count_lines(folder: Path, files: list[str]) -> int:
    total = 0
    for f in files:
        try:
            with open(folder / f, "rb") as fh:
                total += sum(1 for _ in fh)
        except OSError:
            pass
    return total


def unknowns_by_file(report: dict | None) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """Unknowns per file, and the files the doctor did not check with the reason."""
    per_file: dict[str, list[dict]] = defaultdict(list)
    not_checked: dict[str, str] = {}
    for u in _list(report, "unknowns"):
        path = _norm(u.get("path"))
        if str(u.get("what", "")).strip().lower() == NOT_CHECKED:
            not_checked[path] = str(u.get("reason", ""))
        else:
            per_file[path].append(u)
    return per_file, not_checked


def compare(folder_findings: dict[str, list[dict]], single: dict[str, dict]) -> list[dict]:
    """Per file: findings only its own run has, only the folder run has, reported under another file by the
    folder run, or with a different message."""
    elsewhere = {finding_key(f): path for path, fs in folder_findings.items() for f in fs}
    diffs = []
    for path, run in sorted(single.items()):
        if run["report"] is None:
            continue
        mine = {finding_key(f): f for f in _list(run["report"], "findings")}
        theirs = {finding_key(f): f for f in folder_findings.get(path, [])}
        for key in sorted(set(mine) | set(theirs), key=str):
            a, b = mine.get(key), theirs.get(key)
            if a and b and a.get("message") == b.get("message"):
                continue
            if b is None and key in elsewhere:
                kind = f"folder run reports it under {elsewhere[key]}"
            else:
                kind = "per-file only" if b is None else "folder only" if a is None else "message differs"
            diffs.append(
                {
                    "file": path,
                    "kind": kind,
                    "id": key[0],
                    "severity": key[1],
                    "at": where(key),
                    "per_file": (a or {}).get("message"),
                    "folder": (b or {}).get("message"),
                }
            )
    return diffs


def gather(folder: Path, target: str | None, jobs: int | None, limit: int | None) -> dict:
    folder_run = run_check(["."], folder, target, jobs, facts=True)
    report = folder_run["report"]
    files = checked_files(report) or walk_py(folder)
    files = sorted(dict.fromkeys(files))
    lines = count_lines(folder, files)

    findings = _list(report, "findings")
    by_file: dict[str, list[dict]] = defaultdict(list)
    for f in findings:
        by_file[finding_file(f)].append(f)
    per_rule = Counter(str(f.get("id", "?")) for f in findings)
    per_severity = Counter(str(f.get("severity", "?")) for f in findings)
    unknowns, not_checked = unknowns_by_file(report)

    singles_to_run = files[:limit] if limit else files
    with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
        runs = list(pool.map(lambda f: run_check([f], folder, target, None), singles_to_run))
    single = dict(zip(singles_to_run, runs, strict=False))
    single_findings = [f for r in runs for f in _list(r["report"], "findings")]
    single_failed = {p: r["problem"] or f"exit {r['rc']}" for p, r in single.items() if r["report"] is None}
    single_not_checked = {}
    for run in runs:
        single_not_checked.update(unknowns_by_file(run["report"])[1])
    stacks = Counter(stack_line(r["report"]) for r in runs if r["report"] is not None)

    reasons = Counter(reason_class(str(u.get("reason", ""))) for us in unknowns.values() for u in us)
    whats = Counter(str(u.get("what", "?")) for us in unknowns.values() for u in us)
    errors = sorted(
        (f for f in findings if f.get("severity") == "error"),
        key=lambda f: (finding_file(f), str(finding_key(f)[2]), finding_key(f)[3] or 0, str(f.get("id"))),
    )
    folder_error_keys = {finding_key(f) for f in errors}
    single_errors = sorted(
        {
            finding_key(f): f
            for f in single_findings
            if f.get("severity") == "error" and finding_key(f) not in folder_error_keys
        }.values(),
        key=lambda f: (finding_file(f), str(finding_key(f)[2]), finding_key(f)[3] or 0),
    )
    return {
        "dir": str(folder),
        "target": target,
        "folder_rc": folder_run["rc"],
        "folder_problem": folder_run["problem"],
        "files": len(files),
        "lines": lines,
        "scripts_with_findings": len(by_file),
        "wall_s": round(folder_run["wall"], 3),
        "lines_per_s": round(lines / folder_run["wall"]) if folder_run["wall"] else 0,
        "per_file_runs": len(runs),
        "per_file_wall_s": round(sum(r["wall"] for r in runs), 3),
        "findings": len(findings),
        "per_rule": dict(sorted(per_rule.items())),
        "per_severity": {
            s: per_severity.get(s, 0) for s in list(SEVERITY_ORDER) + sorted(set(per_severity) - set(SEVERITY_ORDER))
        },
        "per_rule_single": dict(sorted(Counter(str(f.get("id", "?")) for f in single_findings).items())),
        "errors": [
            {
                "id": f.get("id"),
                "name": f.get("name"),
                "file": finding_file(f),
                "at": where(finding_key(f)),
                "confidence": f.get("confidence"),
                "message": f.get("message"),
            }
            for f in errors
        ],
        "errors_single_only": [
            {
                "id": f.get("id"),
                "name": f.get("name"),
                "file": finding_file(f),
                "at": where(finding_key(f)),
                "confidence": f.get("confidence"),
                "message": f.get("message"),
            }
            for f in single_errors
        ],
        "differences": compare(by_file, {p: single[p] for p in singles_to_run}),
        "unknowns_per_file": {p: len(us) for p, us in sorted(unknowns.items())},
        "unknowns_total": sum(len(us) for us in unknowns.values()),
        "unknown_reasons": reasons.most_common(15),
        "unknown_whats": whats.most_common(15),
        "not_checked": dict(sorted(not_checked.items())),
        "not_checked_single": dict(sorted(single_not_checked.items())),
        "single_failed": dict(sorted(single_failed.items())),
        "stderr_folder": folder_run["stderr"][:20],
        "stderr_single": {p: r["stderr"][-1] for p, r in single.items() if r["stderr"] and r["report"] is not None},
        "stack_folder": stack_line(report),
        "stacks_single": stacks.most_common(),
    }


# ---------------------------------------------------------------- printing


def render(fig: dict) -> str:
    out: list[str] = []
    say = out.append
    say(f"real-world benchmark: {fig['dir']}  target {fig['target'] or 'this machine'}")
    if fig["folder_problem"]:
        say(f"  folder run gave no report (exit {fig['folder_rc']}): {fig['folder_problem']}")
    say("")
    say("== files")
    say(f"  files {fig['files']}   lines {fig['lines']}   with findings {fig['scripts_with_findings']}")
    say(f"  stack (folder run): {fig['stack_folder']}")
    if len(fig["stacks_single"]) > 1:
        say(f"  per-file runs used {len(fig['stacks_single'])} different stacks")
    say("")
    say(f"== findings per rule  (folder run {fig['findings']}; per-file runs {sum(fig['per_rule_single'].values())})")
    for rule in sorted(set(fig["per_rule"]) | set(fig["per_rule_single"])):
        say(f"  {rule:8} {fig['per_rule'].get(rule, 0):5}   per-file {fig['per_rule_single'].get(rule, 0):5}")
    say("")
    say("== findings per severity")
    for sev, n in fig["per_severity"].items():
        say(f"  {sev:8} {n:5}")
    say("")
    say(
        f"== error-level findings ({len(fig['errors'])} in the folder run, "
        f"{len(fig['errors_single_only'])} more in per-file runs)"
    )
    for label, errors in (("", fig["errors"]), ("per-file runs only: ", fig["errors_single_only"])):
        current = None
        for e in errors:
            if e["file"] != current:
                current = e["file"]
                say(f"  {label}{current}")
            say(f"    {e['id']} {e['at']}  {e['message']}")
    say("")
    moved = [d for d in fig["differences"] if d["kind"].startswith("folder run reports it under")]
    say(
        f"== per-file vs folder-run differences ({len(fig['differences'])} over {fig['per_file_runs']} per-file runs: "
        f"{len(fig['differences']) - len(moved)} in verdict, {len(moved)} the same finding reported under another "
        f"file — a per-file run reports what the scripts it checks import, or a helper's importers)"
    )
    for d in fig["differences"]:
        say(f"  {d['file']}  {d['id']} {d['severity']} at {d['at']}  {d['kind']}")
        if d["kind"] == "message differs":
            say(f"      per-file: {d['per_file']}")
            say(f"      folder:   {d['folder']}")
    for path, why in fig["single_failed"].items():
        say(f"  {path}  per-file run gave no report: {why}")
    say("")
    say(f"== unknowns per file ({fig['unknowns_total']} in {len(fig['unknowns_per_file'])} files)")
    for path, n in sorted(fig["unknowns_per_file"].items(), key=lambda kv: (-kv[1], kv[0]))[:25]:
        say(f"  {n:4}  {path}")
    if len(fig["unknowns_per_file"]) > 25:
        say(f"  ... {len(fig['unknowns_per_file']) - 25} more files")
    say("  top reasons")
    for reason, n in fig["unknown_reasons"]:
        say(f"  {n:4}  {reason}")
    say("  top values")
    for what, n in fig["unknown_whats"]:
        say(f"  {n:4}  {what}")
    say("")
    say(
        f"== not checked ({len(fig['not_checked'])} in the folder run, "
        f"{len(fig['not_checked_single'])} in per-file runs)"
    )
    for path, why in fig["not_checked"].items():
        say(f"  {path}  {why}")
    for path, why in fig["not_checked_single"].items():
        if path not in fig["not_checked"]:
            say(f"  {path}  (per-file run only) {why}")
    say("")
    say(
        f"== stderr ({len(fig['stderr_single'])} per-file runs wrote to stderr under --quiet; "
        f"folder run {len(fig['stderr_folder'])} lines)"
    )
    for line in fig["stderr_folder"]:
        say(f"  folder run: {line}")
    for path, line in fig["stderr_single"].items():
        say(f"  {path}: {line}")
    say("")
    say("== time")
    say(
        f"  folder run {fig['wall_s']:.2f} s   {fig['lines_per_s']} lines/s   "
        f"({fig['per_file_runs']} per-file runs took {fig['per_file_wall_s']:.1f} s of process time)"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="a folder of training scripts")
    parser.add_argument("--target", help="GPU profile passed to check --target (default: this machine)")
    parser.add_argument("--jobs", type=int, help="workers: passed to the folder run, and per-file runs at once")
    parser.add_argument("--limit", type=int, help="run only the first N files one by one")
    parser.add_argument("--json", metavar="OUT", help="also save the figures as JSON")
    opts = parser.parse_args(argv)
    folder = Path(opts.dir)
    if not folder.is_dir():
        print(f"real_world.py: {opts.dir} is not a folder; pass a folder of training scripts", file=sys.stderr)
        return 2
    fig = gather(folder.resolve(), opts.target, opts.jobs, opts.limit)
    print(render(fig))
    if opts.json:
        Path(opts.json).write_text(json.dumps(fig, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
