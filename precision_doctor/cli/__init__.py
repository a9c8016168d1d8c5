"""Command line: `precision-doctor check|rules|rule|targets`.

Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it, 2 bad usage or unreadable
input, 3 an internal error of the doctor.

Built on argparse: the CLI framework is on the hot path of every `check` (<= 150 ms cold) and is
installed into the user's training environment, so it adds no import cost and no dependency.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from .. import __version__
from ..model.errors import InputError

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
FAIL_ON = ("error", "warning", "info", "never")
FORMATS = ("text", "json", "sarif", "concise", "github")


MAX_JOBS = 1024  # workers; more than the CPUs is clamped to the CPUs
MAX_STEPS = 1_000_000
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def _bounded(kind: type, low: float, high: float):
    """An argparse type: a number of `kind` from `low` to `high` (a finite one), or a one-line usage error."""
    def parse(text: str):
        try:
            value = kind(text) if len(text) <= 32 else None
        except ValueError:
            value = None
        if value is None or not low <= value <= high:  # also NaN, which compares False
            raise argparse.ArgumentTypeError(f"{text[:32]!r}: expected a {'whole ' if kind is int else ''}number "
                                             f"from {low:g} to {high:g}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


class _Parser(argparse.ArgumentParser):
    options: tuple[str, ...] = ()  # every option of every command, for "did you mean" on an unrecognised one

    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        raise InputError(f"{message}{_suggestion(message, self.options)} (see `{self.prog} --help`)")

    def _get_formatter(self):
        # argparse's formatter reads the terminal's width with shutil, which imports three compression modules
        # (3 ms of every check's start): the same width, from os
        return self.formatter_class(prog=self.prog, width=_terminal_columns() - 2)


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns without importing shutil: $COLUMNS, else the terminal's, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", 0))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


def _suggestion(message: str, options: tuple[str, ...]) -> str:
    """"did you mean" for a mistyped command, option or choice, from argparse's own message."""
    import re

    from ..model.errors import did_you_mean

    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        return did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
    unknown = re.search(r"unrecognized arguments: (.*)", message)
    if unknown:
        for word in unknown.group(1).split():
            if word.startswith("-"):
                hint = did_you_mean(word.split("=", 1)[0].replace("_", "-"), options)
                if hint:
                    return hint
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="precision-doctor",
                     description="Preflight doctor for deep-learning training jobs: finds precision, dtype and "
                                 "placement bugs before you submit.")
    parser.add_argument("--version", action="version", version=f"precision-doctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    check = sub.add_parser("check", help="check training scripts statically (never runs them)",
                           description="Check training scripts statically (never runs them). "
                                       "The scripts' own arguments go after `--`.")
    check.add_argument("paths", nargs="*", metavar="PATH",
                       help="training scripts, or folders of them (none: check the machine alone)")
    check.add_argument("--target", metavar="NAME[:COUNT]",
                       help="the GPU the job runs on, e.g. titan-rtx, a100:8, cpu (see `precision-doctor targets`)")
    check.add_argument("--facts", metavar="FILE", help="check against a machine snapshot (`precision-doctor "
                                                         "snapshot -o FILE` on the cluster node) instead of this one")
    check.add_argument("--launcher", metavar="CMD",
                       help='the launch command, e.g. "accelerate launch --num_processes 2 --mixed_precision bf16"')
    check.add_argument("--python", metavar="PATH",
                       help="the training environment's python (its installed versions are read, it is never run; "
                            "default: $VIRTUAL_ENV / $CONDA_PREFIX, else the projects' declared requirements)")
    _report_options(check)
    check.add_argument("--fail-on", choices=FAIL_ON, default=None,
                       help="exit 1 on findings at or above this severity (default error)")
    check.add_argument("--select", metavar="IDS", help="only these rules: ids or prefixes, comma-separated (PD2,PD101)")
    check.add_argument("--ignore", metavar="IDS", help="skip these rules (added to the configured ignore list)")
    check.add_argument("--jobs", "-j", type=_bounded(int, 0, MAX_JOBS), default=0, metavar="N",
                       help="worker processes for large trees (default: one per core)")
    check.add_argument("--config", metavar="FILE", help="the pyproject.toml to read (default: the nearest one "
                                                         "with [tool.precision-doctor])")
    check.add_argument("--live", action="store_true",
                       help="run the script (in a child process) up to where training starts and inspect the real "
                            "model, args and optimizer; needs the training environment")
    check.add_argument("--steps", type=_bounded(int, 0, MAX_STEPS), default=0, metavar="N",
                       help="with --live: let N real optimizer steps run and diagnose what breaks")
    check.add_argument("--timeout", type=_bounded(float, 1, MAX_TIMEOUT_S), default=900.0, metavar="S",
                       help="with --live: end the script (and its process group) after S seconds (default 900)")

    fix = sub.add_parser("fix", help="apply the fixes: a diff per finding, then [y]es/[n]o/[a]ll/[q]uit",
                         description="Apply the code fixes of the findings, most severe first. Safe fixes with "
                                     "--yes; fixes that need review with --unsafe too. Without a terminal (or with "
                                     "--diff) it prints the patch and changes nothing.")
    fix.add_argument("paths", nargs="*", metavar="PATH", help="training scripts, or folders of them; with --undo: "
                                                              "the backup folder `fix` printed (default: this "
                                                              "folder's project)")
    fix.add_argument("--undo", action="store_true", help="restore the files of the last fix run, byte for byte")
    fix.add_argument("--force", action="store_true", help="with --undo: restore even files changed since the fix")
    fix.add_argument("--yes", action="store_true", help="apply every safe fix without asking")
    fix.add_argument("--unsafe", action="store_true", help="with --yes or --diff: include fixes that need review")
    fix.add_argument("--diff", action="store_true", help="print the patch (patch -p0 / git apply -p0), apply nothing")
    for flag, kw in (("--target", {"metavar": "NAME[:COUNT]"}), ("--facts", {"metavar": "FILE"}),
                     ("--launcher", {"metavar": "CMD"}), ("--select", {"metavar": "IDS"}),
                     ("--ignore", {"metavar": "IDS"}), ("--config", {"metavar": "FILE"}),
                     ("--python", {"metavar": "PATH"})):
        fix.add_argument(flag, help="as for check", **kw)
    fix.set_defaults(fail_on=None, jobs=1, fmt="text", output=None, quiet=False, no_color=False, statistics=False,
                     verbose=False, show_unknowns=False, include_facts=False)
    explain = sub.add_parser("explain", help="diagnose a training log or traceback (file or stdin)",
                             description="Read a training log or traceback and name the known failures behind it, "
                                         "ranked by how well the log proves them. Exit 0 whether or not a cause is "
                                         "found; 2 when the log cannot be read.")
    explain.add_argument("log", nargs="?", default="-", metavar="LOG", help="a log file, or - for stdin (default)")
    explain.add_argument("--script", metavar="PATH", help="also check this script and point at the lines that cause it")
    explain.add_argument("--format", dest="fmt", choices=("text", "json"), default="text")
    for flag in ("--target", "--facts", "--launcher"):
        explain.add_argument(flag, help="with --script: as for check")
    add_memory_parser(sub)
    rules_cmd = sub.add_parser("rules", help="list every rule: id, name, severity, one line")
    rules_cmd.add_argument("--format", dest="fmt", choices=("text", "json"), default="text",
                           help="json: every rule's id, name, severities, phase, summary and doc address")
    rule = sub.add_parser("rule", help="print a rule's full documentation")
    rule.add_argument("rule_id", metavar="RULE", help="a rule id (PD201) or name")
    sub.add_parser("targets", help="list the GPU profiles --target accepts")
    snap = sub.add_parser("snapshot", help="write this machine's facts (or a profile's) as JSON for --facts",
                          description="Write the machine facts the checks read (GPUs, compute modes, GPU processes, "
                                      "busy ports, launch environment, accelerate config, installed versions) as "
                                      "JSON. Run it on the cluster node; check scripts anywhere with --facts.")
    snap.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    snap.add_argument("--target", metavar="NAME[:COUNT]", help="a profile's facts, to adjust by hand")
    snap.add_argument("--launcher", metavar="CMD", help="the launch command whose port to test")
    snap.add_argument("--all-nodes", action="store_true",
                      help="inside a SLURM allocation: probe every node through srun and write one multi-node "
                           "snapshot")
    snap.add_argument("--node-json", action="store_true", help=argparse.SUPPRESS)  # one node's line for --all-nodes
    parser.options = tuple(sorted({o for p in (parser, *sub.choices.values()) for a in p._actions
                                   for o in a.option_strings if o.startswith("--")}))
    return parser


def _report_options(check: argparse.ArgumentParser) -> None:
    """How `check` reports: the format, where it goes, and how much of a large run it lists."""
    report = check.add_argument_group("report")
    report.add_argument("--format", dest="fmt", choices=FORMATS, default="text",
                        help="text (default); json; sarif (code scanning); concise (path:line:col: ID [severity] "
                             "message); github (workflow-command annotations on a pull request)")
    report.add_argument("--output", "-o", metavar="FILE",
                        help="write the report to FILE instead of stdout (`-` is stdout)")
    report.add_argument("--statistics", action="store_true", help="only the number of findings per rule")
    report.add_argument("--verbose", "-v", action="store_true",
                        help="folder runs: list the files with no problems too (they are counted, not listed)")
    report.add_argument("--show-unknowns", action="store_true",
                        help="folder runs: list the values the doctor could not decide, file by file (they are "
                             "counted in one line otherwise)")
    report.add_argument("--include-facts", action="store_true",
                        help="json: add the fact record the rules read and each script's derived setup")
    report.add_argument("--keep-going", action="store_true",
                        help="a named file that cannot be checked (an empty __init__.py, a syntax error) is reported "
                             "as not checked and the run goes on, as in a folder; for pre-commit and xargs")
    report.add_argument("--quiet", "-q", action="store_true", help="only the findings (and no live status line)")
    report.add_argument("--no-color", action="store_true", help="plain text even on a terminal")


class _PlainReport:
    """The report's console where the report is plain text: stdout as it is at the time of writing, no rich."""

    is_terminal = False
    no_color = True

    @property
    def file(self):
        return sys.stdout


def _report_console(no_color: bool = False):
    """rich's console where the check's report may be styled, else a plain writer: a check in CI, a hook or a pipe
    never imports rich (a sixth of a single check's time). Plain exactly where rich would write plain text:
    --no-color or NO_COLOR, or stdout not a terminal with neither FORCE_COLOR nor TTY_COMPATIBLE set."""
    environ = os.environ
    if no_color or environ.get("NO_COLOR", "") != "":
        return _PlainReport()
    if "FORCE_COLOR" in environ or "TTY_COMPATIBLE" in environ:
        return _console()
    return _console() if _stdout_is_terminal() else _PlainReport()


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # no stdout (started with it closed), or a closed one
        return False


def _console(no_color: bool = False):
    from rich.console import Console

    class ReportConsole(Console):
        def on_broken_pipe(self) -> None:  # rich would exit 1 here; _deliver decides the exit code
            raise BrokenPipeError

    # --no-color: no styles at all (rich's no_color drops colours but keeps bold and underline)
    return ReportConsole(highlight=False, no_color=no_color or None, soft_wrap=False,
                         **({"color_system": None} if no_color else {}))


def _deliver(write, verdict: int) -> int:
    """Write a report to stdout and return the verdict. A reader that stops reading (`| head`, `| true`) does not
    change it: a gate whose output pipe closed still fails on its findings, and passes only when it would have
    passed anyway. Stdout that cannot take the report (disk full, closed) is an error: exit 2, never a pass."""
    try:
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise OSError(errno.EBADF, "stdout is closed")
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        _detach_stdout()
        return verdict
    except OSError as exc:
        _detach_stdout()
        raise InputError(f"cannot write the report to stdout ({exc.strerror or exc}); "
                         f"write it to a file with -o FILE") from None
    return verdict


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered is not written (and failed) again at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def settings_for(opts):
    """pyproject settings under the command-line flags: a flag given on the command line wins."""
    from dataclasses import replace
    from pathlib import Path

    from ..rules.catalog import rules
    from ..settings import Settings, find_pyproject, load_settings, read_table, resolve_ids

    known = {r.id for r in rules()}
    path = Path(opts.config) if opts.config else find_pyproject(Path(opts.paths[0]) if opts.paths else Path.cwd())
    if opts.config and not path.is_file():
        raise InputError(f"--config {opts.config}: no such file")
    settings = load_settings(read_table(path), str(path), known, str(path.parent)) if path else Settings()
    policy = settings.policy
    if opts.select:
        policy = replace(policy, select=resolve_ids(opts.select.split(","), known, "--select"))
    if opts.ignore:
        policy = replace(policy, ignore=policy.ignore | resolve_ids(opts.ignore.split(","), known, "--ignore"))
    machine_flag = opts.target or opts.facts
    return replace(settings, policy=policy, fail_on=opts.fail_on or settings.fail_on,
                   launcher=opts.launcher or settings.launcher,
                   target=opts.target if machine_flag else settings.target,
                   facts=opts.facts if machine_flag else settings.facts)


def run_check(opts, script_args: tuple[str, ...]) -> int:
    import os

    from .. import engine
    from ..probes.collect import gather_judged
    from ..model.findings import SEVERITY_RANK

    settings = settings_for(opts)
    root = os.path.dirname(settings.source) if settings.source else "."
    # workers judge the scripts they probe, unless the report shows the facts the rules read or a live run
    # adds to them (then every script's facts come back whole and are judged here)
    judge_with = None if opts.live or opts.include_facts else \
        (lambda run: engine.Judge(run, settings.policy))
    facts, verdicts = gather_judged(opts.paths, judge_with, target=settings.target, launcher=settings.launcher,
                                    script_args=script_args, facts_file=settings.facts,
                                    jobs=min(opts.jobs or MAX_JOBS, os.cpu_count() or 1), exclude=settings.exclude,
                                    root=root, partitions=settings.partitions, python=_python(opts),
                                    keep_going=opts.keep_going)
    if not opts.paths and os.environ.get("CI") and not _stdout_is_terminal():  # after the input was found good
        print("precision-doctor: no path given: only the machine was checked, no training script "
              "(pass the scripts or folders to check)", file=sys.stderr)
    if opts.live:
        facts = _with_live(opts, facts, script_args)
    result = engine.run(facts, settings.policy, verdicts)
    failing = settings.fail_on != "never" and any(SEVERITY_RANK[f.severity] <= SEVERITY_RANK[settings.fail_on]
                                                  for f in result.findings)
    code = EXIT_FINDINGS if failing else EXIT_OK
    if opts.statistics and not opts.output:
        from ..report.text import render_statistics

        return _deliver(lambda: render_statistics(result, _report_console(no_color=opts.no_color)), code)
    if opts.fmt == "text" and not opts.output:
        from ..report.text import render as render_text

        return _deliver(lambda: render_text(result, facts, _report_console(no_color=opts.no_color),
                                            quiet=opts.quiet, verbose=opts.verbose,
                                            show_unknowns=True if opts.show_unknowns else None), code)
    return _deliver(lambda: _write(opts.output, _render_data(opts.fmt, result, facts, opts.no_color, opts, code)),
                    code)


def _python(opts) -> str | None:
    """--python, checked: an interpreter (or environment folder) whose site-packages can be found."""
    if not getattr(opts, "python", None):
        return None
    from ..probes.stack import training_environment

    if not os.path.exists(opts.python):
        raise InputError(f"--python {opts.python}: no such file; pass the training environment's python "
                         f"(e.g. /path/to/venv/bin/python)")
    env = training_environment(opts.python)
    if not env.site_dirs:
        raise InputError(f"--python {opts.python}: no site-packages found in {env.label.split(' (')[0]}; pass the "
                         f"python of a virtualenv or conda environment")
    return opts.python


def run_fix_command(opts, script_args: tuple[str, ...]) -> int:
    import os

    from ..probes.collect import gather
    from ..fix.session import run_engine_check, run_fix

    if opts.undo:
        from ..fix.undo import undo

        return undo(opts.paths, opts.force, print)
    if not opts.paths:
        raise InputError("fix: name the training scripts to fix (or --undo)")
    settings = settings_for(opts)
    root = os.path.dirname(settings.source) if settings.source else "."

    def facts():
        return gather(opts.paths, target=settings.target, launcher=settings.launcher, script_args=script_args,
                      facts_file=settings.facts, exclude=settings.exclude, root=root, python=_python(opts))

    return run_fix(run_engine_check(facts, settings.policy), yes=opts.yes, diff_only=opts.diff, unsafe=opts.unsafe,
                   select=settings.policy.select if opts.select else None, console=_console())


def run_explain(opts, script_args: tuple[str, ...]) -> int:
    from ..rules.catalog import related
    from ..diagnose import diagnose, open_log

    source, name = open_log(opts.log)
    with source:
        found = diagnose(source)
    findings = []
    if opts.script:
        from .. import engine
        from ..probes.collect import gather

        facts = gather([opts.script], target=opts.target, launcher=opts.launcher, script_args=script_args,
                       facts_file=opts.facts)
        findings = list(engine.run(facts).findings)
    if opts.fmt == "json":
        doc = {"version": 1, "log": name, "diagnoses": []}
        for d in found:
            item = d.to_json()
            item["script"] = [{"path": loc.path, "line": loc.line, "message": f.message}
                              for f in findings if f.rule_id in related(d.rule.id) for loc in f.locations[:1]]
            doc["diagnoses"].append(item)
        from ..model.redact import redact_data
        from ..model.strict_json import dumps

        return _deliver(lambda: sys.stdout.write(dumps(redact_data(doc), indent=2) + "\n"), EXIT_OK)
    from ..report.explain_text import render_diagnoses

    return _deliver(lambda: render_diagnoses(found, findings, name, _console(), related), EXIT_OK)


def _with_live(opts, facts, script_args: tuple[str, ...]):
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


def _render_data(fmt: str, result, facts, no_color: bool, opts=None, exit_code: int = 0) -> str:
    import io

    from rich.console import Console

    if opts is not None and getattr(opts, "statistics", False):
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
    from ..report.text import render as render_text

    buf = io.StringIO()
    render_text(result, facts, Console(file=buf, no_color=True, highlight=False, width=200),
                quiet=bool(opts and opts.quiet), verbose=bool(opts and opts.verbose),
                show_unknowns=True if opts is not None and opts.show_unknowns else None)
    return buf.getvalue()


def _write(output: str | None, text: str) -> None:
    """stdout, or FILE by safe_io's rules (a regular file replaced whole, a pipe or device written in place)."""
    if not output or output == "-":  # `-o -`: stdout, as for every tool that takes -o
        sys.stdout.write(text)
        return
    from ..system.safe_io import write_file

    write_file(output, text.encode("utf-8"), what=f"-o {output}")


def write_snapshot(opts) -> int:
    import os

    from ..probes.collect import gather_machine, snapshot_json
    from ..probes.launch import no_launcher, parse_launcher
    from ..probes.stack import probe_stack

    if opts.all_nodes:
        from ..probes.collect import gather_allocation

        if opts.target:
            raise InputError("snapshot: --all-nodes probes the allocation's nodes; --target writes a profile: "
                             "pass one of them")
        machine, stack = gather_allocation(os.environ, opts.launcher)
        _write(opts.output, snapshot_json(machine, stack) + "\n")
        print(f"wrote {opts.output or 'stdout'} ({machine.describe()})", file=sys.stderr)
        return EXIT_OK
    launch = parse_launcher(opts.launcher) if opts.launcher else no_launcher()
    machine, _ = gather_machine(opts.target, None, launch, os.environ)
    if opts.node_json:  # one line, for the srun that gathers every node's
        sys.stdout.write(" ".join(snapshot_json(machine, probe_stack()).split("\n")) + "\n")
        return EXIT_OK
    if opts.target:  # a profile to edit by hand: the fields exist, empty
        from dataclasses import replace

        from ..model.facts import HostFacts

        machine = replace(machine, host=HostFacts())
    _write(opts.output, snapshot_json(machine, probe_stack()) + "\n")
    if opts.output:
        print(f"wrote {opts.output} ({machine.describe()})", file=sys.stderr)
    return EXIT_OK


def add_memory_parser(sub) -> None:
    memory = sub.add_parser("memory", help="the per-GPU memory breakdown of a training script: will it fit?",
                            description="Estimate each script's GPU memory per device (weights, gradients, optimizer "
                                        "state, activations) before it runs. The scripts' own arguments go after `--`.")
    memory.add_argument("paths", nargs="+", metavar="PATH", help="training scripts, or folders of them")
    memory.add_argument("--target", metavar="NAME[:COUNT]", help="the GPU the job runs on, e.g. a100:4")
    memory.add_argument("--facts", metavar="FILE", help="a machine snapshot instead of this machine")
    memory.add_argument("--launcher", metavar="CMD", help="the launch command (processes per node)")
    memory.add_argument("--format", dest="fmt", choices=("text", "json"), default="text")
    memory.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    memory.add_argument("--no-color", action="store_true", help="plain text even on a terminal")


def run_memory(opts, script_args: tuple[str, ...]) -> int:
    from ..derive import derive_memory
    from ..probes.collect import gather
    from ..report.memory import render_json, render_text

    facts = gather(opts.paths, target=opts.target, launcher=opts.launcher, script_args=script_args,
                   facts_file=opts.facts, jobs=1)
    memory = derive_memory(facts)
    if opts.fmt == "text" and not opts.output:
        render_text(facts, memory, _console(no_color=opts.no_color))
    else:
        _write(opts.output, render_json(facts, memory) if opts.fmt == "json" else _plain_memory_text(facts, memory))
    return EXIT_OK


def _plain_memory_text(facts, memory) -> str:
    import io

    from rich.console import Console

    from ..report.memory import render_text

    buffer = io.StringIO()
    render_text(facts, memory, Console(file=buffer, no_color=True, highlight=False, width=120))
    return buffer.getvalue()


def list_rules(fmt: str = "text") -> int:
    from ..rules.catalog import rules
    from ..report.ruledoc import severity_label

    if fmt == "json":
        import json

        from ..report.ruledoc import help_uri

        doc = [{"id": r.id, "name": r.name, "severity": r.severity, "escalates_to": r.escalates_to,
                "phase": r.phase, "summary": r.summary, "fix_applicability": r.applicability, "needs": list(r.needs),
                "help_uri": help_uri(r.id)} for r in rules()]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK
    for r in rules():
        print(f"{r.id}  {r.name:<40} {severity_label(r):<20} {r.summary}")
    return EXIT_OK


def show_rule(rule_id: str) -> int:
    from ..rules.catalog import get_rule
    from ..report.ruledoc import rule_doc

    r = get_rule(rule_id)
    if r is None:
        from ..rules.catalog import rules
        from ..model.errors import did_you_mean, rule_id_key

        hint = did_you_mean(rule_id, [x.id for x in rules()], rule_id_key) or \
            did_you_mean(rule_id, [x.name for x in rules()])
        raise InputError(f"no rule {rule_id!r}{hint or ';'} `precision-doctor rules` lists them")
    print(rule_doc(r))
    return EXIT_OK


def list_targets() -> int:
    from ..probes.target import PROFILES

    print(f"{'cpu':<14} (no GPU)")
    for p in PROFILES:
        caps = ", ".join(x for x, ok in (("bf16", p.capability >= (8, 0)), ("tf32", p.capability >= (8, 0)),
                                          ("fp8", p.capability >= (8, 9))) if ok) or "fp16 only"
        alias = f"  (also: {', '.join(p.aliases)})" if p.aliases else ""
        print(f"{p.name:<14} {p.gpu_name:<32} sm_{p.capability[0]}{p.capability[1]}  {p.memory_mib / 1024:>5.1f} GiB  "
              f"{caps}{alias}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    script_args: tuple[str, ...] = ()
    if "--" in args:  # everything after `--` belongs to the training script's own parser
        split = args.index("--")
        args, script_args = args[:split], tuple(args[split + 1:])
    parser = build_parser()
    opts = None
    for stream in (sys.stdout, sys.stderr):  # a terminal or log that cannot show ✗ or → gets \u2717, not a crash
        if hasattr(stream, "reconfigure") and not stream.closed:
            stream.reconfigure(errors="backslashreplace")
    try:
        opts = parser.parse_args(args)
        if opts.command == "check":
            return run_check(opts, script_args)
        if opts.command == "fix":
            return run_fix_command(opts, script_args)
        if opts.command == "explain":
            return run_explain(opts, script_args)
        if opts.command == "memory":
            return run_memory(opts, script_args)
        if opts.command == "rules":
            return list_rules(opts.fmt)
        if opts.command == "rule":
            return show_rule(opts.rule_id)
        if opts.command == "targets":
            return list_targets()
        if opts.command == "snapshot":
            return write_snapshot(opts)
        parser.print_help()
        return EXIT_USAGE
    except InputError as exc:
        from ..model.redact import printable

        print(f"precision-doctor: error: {printable(str(exc))}", file=sys.stderr)  # it may quote a file's bytes
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("precision-doctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away: keep the verdict. `fix --diff` was writing a patch, so there is one (exit 1)
        _detach_stdout()
        return EXIT_FINDINGS if getattr(opts, "command", "") == "fix" and getattr(opts, "diff", False) else EXIT_OK
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        print(f"precision-doctor: internal error: {type(exc).__name__}: {exc} "
              f"(please report it with the command you ran)", file=sys.stderr)
        return EXIT_INTERNAL


def entry() -> None:
    if sys.stdin is None:  # started with stdin closed (`<&-`): read as empty, never as a crash
        sys.stdin = open(os.devnull, encoding="utf-8")
    sys.exit(main())
