"""Command line: `precision-doctor check|fix|explain|memory|snapshot|rules|rule|targets|completion`.

Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it, 2 bad usage or unreadable
input, 3 an internal error of the doctor.

Built on argparse: the CLI framework is on the hot path of every `check` (<= 150 ms cold) and is
installed into the user's training environment, so it adds no import cost and no dependency.

Each command is a module of this package with `register(sub)` (its parser) and the function that runs it;
COMMANDS below is the one place they are listed."""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..model.errors import InputError
from . import check, completion, explain, fix, memory, rules, snapshot
from ._common import EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, Parser, detach_stdout

# each command's name -> the function that runs it, called as run(opts, script_args)
COMMANDS = {
    "check": check.run_check,
    "fix": fix.run_fix_command,
    "explain": explain.run_explain,
    "memory": memory.run_memory,
    "rules": lambda opts, _: rules.list_rules(opts.fmt),
    "rule": lambda opts, _: rules.show_rule(opts.rule_id),
    "targets": lambda opts, _: rules.list_targets(),
    "snapshot": lambda opts, _: snapshot.write_snapshot(opts),
    "completion": lambda opts, _: completion.print_completion(build_parser(), opts.shell),
}
_PARSERS = (check, fix, explain, memory, rules, snapshot, completion)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="precision-doctor",
        description="Preflight doctor for deep-learning training jobs: finds precision, dtype and "
        "placement bugs before you submit.",
    )
    parser.add_argument("--version", action="version", version=f"precision-doctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    for command in _PARSERS:
        command.register(sub)
    parser.options = tuple(
        sorted(
            {
                o
                for p in (parser, *sub.choices.values())
                for a in p._actions
                for o in a.option_strings
                if o.startswith("--")
            }
        )
    )
    owners: dict[str, list[str]] = {}
    for name, command_parser in sub.choices.items():
        for o in {o for a in command_parser._actions for o in a.option_strings if o.startswith("--")}:
            owners.setdefault(o, []).append(name)
    parser.owners = {o: tuple(names) for o, names in owners.items()}
    return parser


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command_line = tuple(args)
    script_args: tuple[str, ...] = ()
    if "--" in args:  # everything after `--` belongs to the training script's own parser
        split = args.index("--")
        args, script_args = args[:split], tuple(args[split + 1 :])
    parser = build_parser()
    named = next((a for a in args if not a.startswith("-")), "")  # the command, for suggestions; argparse decides
    if isinstance(parser, Parser) and named in COMMANDS:
        parser.command = named
    opts = None
    for stream in (sys.stdout, sys.stderr):  # a terminal or log that cannot show ✗ or → gets \u2717, not a crash
        if hasattr(stream, "reconfigure") and not stream.closed:
            stream.reconfigure(errors="backslashreplace")
    try:
        opts = parser.parse_args(args)
        # as typed, when the process was started with it: what a replayed answer is found by (system/run_answer.py);
        # a caller in the same process (the API, tests) has memos a recorded run could not see through
        opts.command_line = command_line if argv is None else None
        if opts.command in COMMANDS:
            return COMMANDS[opts.command](opts, script_args)
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
        detach_stdout()
        return EXIT_FINDINGS if getattr(opts, "command", "") == "fix" and getattr(opts, "diff", False) else EXIT_OK
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        print(
            f"precision-doctor: internal error: {type(exc).__name__}: {exc} "
            f"(please report it with the command you ran)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def entry() -> None:
    if sys.stdin is None:  # started with stdin closed (`<&-`): read as empty, never as a crash
        sys.stdin = open(os.devnull, encoding="utf-8")
    sys.exit(main())
