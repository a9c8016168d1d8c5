"""What every command shares: exit codes, the argument parser's one-line errors, the report's console and how a report
reaches stdout (or -o FILE), and the settings a command runs with."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable
from typing import Any

from ..model.errors import InputError

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


FAIL_ON = ("error", "warning", "info", "never")


FORMATS = ("text", "json", "sarif", "concise", "github")


MAX_JOBS = 1024  # workers; more than the CPUs is clamped to the CPUs


MAX_STEPS = 1_000_000


MAX_TIMEOUT_S = 7 * 24 * 3600.0


def bounded(kind: type, low: float, high: float):
    """An argparse type: a number of `kind` from `low` to `high` (a finite one), or a one-line usage error."""

    def parse(text: str):
        try:
            value = kind(text) if len(text) <= 32 else None
        except ValueError:
            value = None
        if value is None or not low <= value <= high:  # also NaN, which compares False
            raise argparse.ArgumentTypeError(
                f"{text[:32]!r}: expected a {'whole ' if kind is int else ''}number from {low:g} to {high:g}"
            )
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


class Parser(argparse.ArgumentParser):
    options: tuple[str, ...] = ()  # every option of every command, for "did you mean" on an unrecognised one
    owners: dict[str, tuple[str, ...]] = {}  # option -> the commands that take it
    command = ""  # the command the line names, once known: suggestions come from its options
    whole: Callable[[], Any] | None = None  # builds every command's parser, where this one holds one command's

    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        every = self.whole() if self.whole is not None else self
        hint = _suggestion(message, every.options, every.owners, self.command)
        raise InputError(f"{message}{hint} (see `{self.prog} --help`)")

    def _get_formatter(self):
        # argparse's formatter reads the terminal's width with shutil, which imports three compression modules
        # (3 ms of every check's start): the same width, from os
        return self.formatter_class(prog=self.prog, width=_terminal_columns() - 2)

    def format_help(self) -> str:
        text = super().format_help()
        return coloured_help(text) if colour_wanted(sys.stdout) else text


def colour_wanted(stream) -> bool:
    """Colour on a terminal, as the conventions say: NO_COLOR turns it off, FORCE_COLOR on, TERM=dumb off."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def coloured_help(text: str) -> str:
    """argparse's help with its section headings bold and its options cyan, the layout untouched (colour is added
    to the laid-out text, so no escape code ever counts toward a column)."""
    import re

    bold, cyan, reset = "\x1b[1m", "\x1b[36m", "\x1b[0m"
    text = re.sub(r"(?m)^(usage:|[A-Za-z][^\n:]*:)$|^(usage:)(?= )", lambda m: f"{bold}{m.group(0)}{reset}", text)
    return re.sub(r"(?<![\w/.-])(--?[A-Za-z][\w-]*)", lambda m: f"{cyan}{m.group(1)}{reset}", text)


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


def _suggestion(
    message: str, options: tuple[str, ...], owners: dict[str, tuple[str, ...]] | None = None, command: str = ""
) -> str:
    """ "did you mean" for a mistyped command, option or choice, from argparse's own message."""
    import re

    from ..model.errors import did_you_mean

    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        return did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
    unknown = re.search(r"unrecognized arguments: (.*)", message)
    if unknown:
        owners = owners or {}
        if command:  # the command's own options, not another's
            options = tuple(o for o in options if command in owners.get(o, (command,)))
        for word in unknown.group(1).split():
            name = word.split("=", 1)[0]
            taken_by = owners.get(name, ())
            if command in taken_by:  # `precision-doctor --no-cache check x.py`
                return f"; {name} goes after the command: `precision-doctor {command} {name} ...`"
            if taken_by:  # spelt right, given to a command that does not take it
                return f"; {name} is an option of `{'`, `'.join(taken_by)}` only"
            if word.startswith("-"):
                hint = did_you_mean(name.replace("_", "-"), options)
                if hint:
                    return hint
    return ""


class _PlainReport:
    """The report's console where the report is plain text: stdout as it is at the time of writing, no rich."""

    is_terminal = False
    no_color = True

    @property
    def file(self):
        return sys.stdout


def report_console(no_color: bool = False):
    """rich's console where the check's report may be styled, else a plain writer: a check in CI, a hook or a pipe
    never imports rich (a sixth of a single check's time). Plain exactly where rich would write plain text:
    --no-color or NO_COLOR, or stdout not a terminal with neither FORCE_COLOR nor TTY_COMPATIBLE set."""
    environ = os.environ
    if no_color or environ.get("NO_COLOR", "") != "":
        return _PlainReport()
    if "FORCE_COLOR" in environ or "TTY_COMPATIBLE" in environ:
        return console()
    return console() if stdout_is_terminal() else _PlainReport()


def stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # no stdout (started with it closed), or a closed one
        return False


def console(no_color: bool = False):
    from rich.console import Console

    class ReportConsole(Console):
        def on_broken_pipe(self) -> None:  # rich would exit 1 here; deliver decides the exit code
            raise BrokenPipeError

    # --no-color: no styles at all (rich's no_color drops colours but keeps bold and underline)
    return ReportConsole(
        highlight=False, no_color=no_color or None, soft_wrap=False, **({"color_system": None} if no_color else {})
    )


def deliver(write, verdict: int) -> int:
    """Write a report to stdout and return the verdict. A reader that stops reading (`| head`, `| true`) does not
    change it: a gate whose output pipe closed still fails on its findings, and passes only when it would have
    passed anyway. Stdout that cannot take the report (disk full, closed) is an error: exit 2, never a pass."""
    try:
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise OSError(errno.EBADF, "stdout is closed")
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        detach_stdout()
        return verdict
    except OSError as exc:
        detach_stdout()
        raise InputError(
            f"cannot write the report to stdout ({exc.strerror or exc}); write it to a file with -o FILE"
        ) from None
    return verdict


def detach_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered is not written (and failed) again at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def write_output(output: str | None, text: str) -> None:
    """stdout, or FILE by safe_io's rules (a regular file replaced whole, a pipe or device written in place)."""
    if not output or output == "-":  # `-o -`: stdout, as for every tool that takes -o
        sys.stdout.write(text)
        return
    from ..system.safe_io import write_file

    write_file(output, text.encode("utf-8"), what=f"-o {output}")


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
    return replace(
        settings,
        policy=policy,
        fail_on=opts.fail_on or settings.fail_on,
        launcher=opts.launcher or settings.launcher,
        target=opts.target if machine_flag else settings.target,
        facts=opts.facts if machine_flag else settings.facts,
    )


def training_python(opts) -> str | None:
    """--python, checked: an interpreter (or environment folder) whose site-packages can be found."""
    if not getattr(opts, "python", None):
        return None
    from ..probes.stack import training_environment

    if not os.path.exists(opts.python):
        raise InputError(
            f"--python {opts.python}: no such file; pass the training environment's python "
            f"(e.g. /path/to/venv/bin/python)"
        )
    env = training_environment(opts.python)
    if not env.site_dirs:
        raise InputError(
            f"--python {opts.python}: no site-packages found in {env.label.split(' (')[0]}; pass the "
            f"python of a virtualenv or conda environment"
        )
    return opts.python
