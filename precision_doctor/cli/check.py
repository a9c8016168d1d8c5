"""`precision-doctor check`: the static check (and --live), its options and its report formats."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..model.errors import InputError
from ..system import progress
from ._common import (
    EXIT_FINDINGS,
    EXIT_OK,
    FAIL_ON,
    FORMATS,
    MAX_JOBS,
    MAX_STEPS,
    MAX_TIMEOUT_S,
    bounded,
    deliver,
    report_console,
    settings_for,
    stdout_is_terminal,
    training_python,
    write_output,
)


def register(sub) -> None:
    check = sub.add_parser(
        "check",
        help="check training scripts statically (never runs them)",
        description="Check training scripts statically (never runs them). The scripts' own arguments go after `--`.",
    )
    check.add_argument(
        "paths", nargs="*", metavar="PATH", help="training scripts, or folders of them (none: check the machine alone)"
    )
    check.add_argument(
        "--target",
        metavar="NAME[:COUNT]",
        help="the GPU the job runs on, e.g. titan-rtx, a100:8, cpu (see `precision-doctor targets`)",
    )
    check.add_argument(
        "--facts",
        metavar="FILE",
        help="check against a machine snapshot (`precision-doctor "
        "snapshot -o FILE` on the cluster node) instead of this one",
    )
    check.add_argument(
        "--launcher",
        metavar="CMD",
        help='the launch command, e.g. "accelerate launch --num_processes 2 --mixed_precision bf16"',
    )
    check.add_argument(
        "--model-config",
        action="append",
        default=[],
        metavar="[ID=]PATH",
        help="the config.json (or its folder) of a model the job downloads, when it is not in the Hugging Face "
        "cache here nor in the doctor's table; ID= names the model id it is for (repeatable)",
    )
    check.add_argument(
        "--hub",
        action="store_true",
        help="fetch the config.json and safetensors index of a model found nowhere here nor in the doctor's table "
        "from the Hugging Face Hub ($HF_ENDPOINT, $HF_TOKEN), kept for the next run; off by default: no network",
    )
    check.add_argument(
        "--python",
        metavar="PATH",
        help="the training environment's python (its installed versions are read, it is never run; "
        "default: $VIRTUAL_ENV / $CONDA_PREFIX, else the projects' declared requirements)",
    )
    report_options(check)
    check.add_argument(
        "--fail-on", choices=FAIL_ON, default=None, help="exit 1 on findings at or above this severity (default error)"
    )
    check.add_argument("--select", metavar="IDS", help="only these rules: ids or prefixes, comma-separated (PD2,PD101)")
    check.add_argument("--ignore", metavar="IDS", help="skip these rules (added to the configured ignore list)")
    check.add_argument(
        "--jobs",
        "-j",
        type=bounded(int, 0, MAX_JOBS),
        default=0,
        metavar="N",
        help="worker processes for large trees (default: one per core)",
    )
    check.add_argument(
        "--config",
        metavar="FILE",
        help="the pyproject.toml to read (default: the nearest one with [tool.precision-doctor])",
    )
    check.add_argument(
        "--live",
        action="store_true",
        help="run the script (in a child process) up to where training starts and inspect the real "
        "model, args and optimizer; needs the training environment",
    )
    check.add_argument(
        "--steps",
        type=bounded(int, 0, MAX_STEPS),
        default=0,
        metavar="N",
        help="with --live: let N real optimizer steps run and diagnose what breaks",
    )
    check.add_argument(
        "--timeout",
        type=bounded(float, 1, MAX_TIMEOUT_S),
        default=900.0,
        metavar="S",
        help="with --live: end the script (and its process group) after S seconds (default 900)",
    )
    check.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="keep each file's facts here between runs (default $XDG_CACHE_HOME/precision-doctor, "
        "else ~/.cache/precision-doctor); never inside a checked repository",
    )
    check.add_argument("--no-cache", action="store_true", help="read every file afresh and keep nothing between runs")
    check.add_argument(
        "--no-server",
        action="store_true",
        help="check in this process even when `precision-doctor server` runs",
    )


def report_options(check: argparse.ArgumentParser) -> None:
    """How `check` reports: the format, where it goes, and how much of a large run it lists."""
    report = check.add_argument_group("report")
    report.add_argument(
        "--format",
        dest="fmt",
        choices=FORMATS,
        default="text",
        help="text (default); json; sarif (code scanning); concise (path:line:col: ID [severity] "
        "message); github (workflow-command annotations on a pull request)",
    )
    report.add_argument(
        "--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout (`-` is stdout)"
    )
    report.add_argument("--statistics", action="store_true", help="only the number of findings per rule")
    report.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="folder runs: list the files with no problems too (they are counted, not listed)",
    )
    report.add_argument(
        "--show-unknowns",
        action="store_true",
        help="folder runs: list the values the doctor could not decide, file by file (they are "
        "counted in one line otherwise)",
    )
    report.add_argument(
        "--include-facts",
        action="store_true",
        help="json: add the fact record the rules read and each script's derived setup",
    )
    report.add_argument(
        "--keep-going",
        action="store_true",
        help="a named file that cannot be checked (an empty __init__.py, a syntax error) is reported "
        "as not checked and the run goes on, as in a folder; for pre-commit and xargs",
    )
    report.add_argument("--quiet", "-q", action="store_true", help="only the findings (and no live status line)")
    report.add_argument("--no-color", action="store_true", help="plain text even on a terminal")


def run_check(opts, script_args: tuple[str, ...]) -> int:
    from ..system import content_cache

    content_cache.configure(enabled=not opts.no_cache, folder=opts.cache_dir)
    try:
        command_line = getattr(opts, "command_line", None)
        closed = sys.stdout is None or sys.stderr is None  # started with `>&-`: no report to keep
        if command_line is None or closed or opts.no_cache or opts.live or opts.output:
            return _run_check(opts, script_args)
        # the same command over unchanged inputs: the answer it gave (system/run_answer.py), before any rule loads
        from ..system import programs, run_answer

        programs.distrust(opts.paths)  # as the run's first look does: a cache inside a checked tree is not read
        content_cache.prepare(create=False)  # only to look: a cache made here could be in a tree the run checks
        name = run_answer.question(list(command_line))
        replayed = run_answer.replay(name) if content_cache.is_open() else None
        # closed again: the run opens it once it has distrusted every tree it checks (launched scripts, job scripts)
        content_cache.close()
        if replayed is not None:
            output, code = replayed
            return deliver(lambda: sys.stdout.write(output), code)
        return run_answer.answer(name, lambda: _run_check(opts, script_args))
    finally:
        content_cache.configure(enabled=False)


def _run_check(opts, script_args: tuple[str, ...]) -> int:
    import os

    from .. import engine
    from ..model.findings import SEVERITY_RANK
    from ..probes.checkpoint import give_model_configs
    from ..probes.collect import gather_judged

    settings = settings_for(opts)
    root = os.path.dirname(settings.source) if settings.source else "."
    give_model_configs(opts.model_config, hub=opts.hub)
    # workers judge the scripts they probe, unless the report shows the facts the rules read or a live run
    # adds to them (then every script's facts come back whole and are judged here)
    judge_with = None if opts.live or opts.include_facts else (lambda run: engine.Judge(run, settings.policy))
    with folder_progress(opts.quiet):
        facts, verdicts = gather_judged(
            opts.paths,
            judge_with,
            target=settings.target,
            launcher=settings.launcher,
            script_args=script_args,
            facts_file=settings.facts,
            jobs=min(opts.jobs or MAX_JOBS, os.cpu_count() or 1),
            exclude=settings.exclude,
            root=root,
            partitions=settings.partitions,
            python=training_python(opts),
            keep_going=opts.keep_going,
        )
    if not opts.paths and os.environ.get("CI") and not stdout_is_terminal():  # after the input was found good
        print(
            "precision-doctor: no path given: only the machine was checked, no training script "
            "(pass the scripts or folders to check)",
            file=sys.stderr,
        )
    if opts.live:
        facts = with_live(opts, facts, script_args)
    result = engine.run(facts, settings.policy, verdicts)
    failing = settings.fail_on != "never" and any(
        SEVERITY_RANK[f.severity] <= SEVERITY_RANK[settings.fail_on] for f in result.findings
    )
    code = EXIT_FINDINGS if failing else EXIT_OK
    if opts.statistics and not opts.output:
        from ..report.text import render_statistics

        return deliver(lambda: render_statistics(result, report_console(no_color=opts.no_color)), code)
    if opts.fmt == "text" and not opts.output:
        from ..report.text import render as render_text

        return deliver(
            lambda: render_text(
                result,
                facts,
                report_console(no_color=opts.no_color),
                quiet=opts.quiet,
                verbose=opts.verbose,
                show_unknowns=True if opts.show_unknowns else None,
            ),
            code,
        )
    return deliver(
        lambda: write_output(opts.output, render_data(opts.fmt, result, facts, opts.no_color, opts, code)), code
    )


PROGRESS_FROM = 20  # files: a bar for fewer would only flicker


@contextmanager
def folder_progress(quiet: bool) -> Iterator[None]:
    """A bar on stderr while the files are read and judged: on a terminal only, never in CI, a pipe or with
    --quiet; it clears itself before the report."""
    if quiet or os.environ.get("CI") or not sys.stderr.isatty():
        yield
        return
    bar = _Bar()
    with progress.listening(bar):
        try:
            yield
        finally:
            bar.close()


class _Bar(progress.Listener):
    def __init__(self) -> None:
        self.total = 0
        self.done = 0
        self.shown: Any = None

    def expect(self, files: int) -> None:
        self.total += files
        if self.shown is None and self.total >= PROGRESS_FROM:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            from ..system import run_answer

            self.shown = Progress(
                TextColumn("checking"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(file=run_answer.underlying(sys.stderr)),
                transient=True,
            )
            self.shown.start()
            self.task = self.shown.add_task("files", total=self.total, completed=self.done)
        elif self.shown is not None:
            self.shown.update(self.task, total=self.total)

    def advance(self, files: int = 1) -> None:
        self.done += files
        if self.shown is not None:
            self.shown.update(self.task, completed=self.done)

    def close(self) -> None:
        if self.shown is not None:
            self.shown.stop()


def with_live(opts, facts, script_args: tuple[str, ...]):
    from dataclasses import replace

    from ..probes.live.runner import STEP_MARK, run_live

    if len(facts.scripts) != 1 or not opts.paths or not os.path.isfile(opts.paths[0]):
        raise InputError("--live runs one training script: pass exactly one .py file")
    if opts.steps < 0:
        raise InputError("--steps must be 0 or more")
    shown: list[str] = []

    def status(elapsed: float, phase: str) -> None:
        if opts.quiet:
            return
        if sys.stderr.isatty():
            sys.stderr.write(f"\r\033[Klive {elapsed:5.1f}s  {phase}")
            sys.stderr.flush()
        elif phase.split(STEP_MARK)[0] not in shown:  # a log, not a terminal: each phase once, not each step
            shown.append(phase.split(STEP_MARK)[0])
            print(f"live {elapsed:5.1f}s  {phase}", file=sys.stderr)

    live = run_live(opts.paths[0], script_args, steps=opts.steps, timeout=opts.timeout, status=status)
    if sys.stderr.isatty() and not opts.quiet:
        sys.stderr.write("\r\033[K")
    return replace(facts, live=live)


def render_data(fmt: str, result, facts, no_color: bool, opts=None, exit_code: int = 0) -> str:
    import io

    if opts is not None and getattr(opts, "statistics", False):
        from rich.console import Console  # (rich is imported only where a table is drawn: CI formats start faster)

        from ..report.text import render_statistics

        buf = io.StringIO()
        render_statistics(result, Console(file=buf, no_color=True, highlight=False, width=200))
        return buf.getvalue()
    if fmt == "json":
        from ..report.json_report import render

        return render(result, facts, include_facts=bool(opts and opts.include_facts)) + "\n"
    if fmt == "sarif":
        from ..report.sarif import render

        return render(result, facts, exit_code) + "\n"
    if fmt == "concise":
        from ..report.lines import render_concise

        return render_concise(result)
    if fmt == "github":
        from ..report.lines import render_github

        return render_github(result)
    from rich.console import Console

    from ..report.text import render as render_text

    buf = io.StringIO()
    render_text(
        result,
        facts,
        Console(file=buf, no_color=True, highlight=False, width=200),
        quiet=bool(opts and opts.quiet),
        verbose=bool(opts and opts.verbose),
        show_unknowns=True if opts is not None and opts.show_unknowns else None,
    )
    return buf.getvalue()
