"""The command line itself: the parser, the commands, and one run of them (see the package's docstring)."""

from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..model.errors import InputError
from . import check, completion, explain, fix, memory, rules, server, snapshot
from ._common import EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, Parser, detach_stdout

# each command's name -> the module that declares its parser, and the function that runs it as run(opts, script_args)
COMMANDS = {
    "check": (check, check.run_check),
    "fix": (fix, fix.run_fix_command),
    "explain": (explain, explain.run_explain),
    "memory": (memory, memory.run_memory),
    "rules": (rules, lambda opts, _: rules.list_rules(opts.fmt)),
    "rule": (rules, lambda opts, _: rules.show_rule(opts.rule_id)),
    "targets": (rules, lambda opts, _: rules.list_targets()),
    "snapshot": (snapshot, lambda opts, _: snapshot.write_snapshot(opts)),
    "server": (server, server.run_server),
    "completion": (completion, lambda opts, _: completion.print_completion(build_parser(), opts.shell)),
}


def build_parser(command: str = "") -> argparse.ArgumentParser:
    """The parser of every command; with `command`, of that command's module alone (what a run parses: building
    every command's options is milliseconds of each start), whose errors still suggest from every command's."""
    parser = Parser(
        prog="precision-doctor",
        description="Preflight doctor for deep-learning training jobs: finds precision, dtype and "
        "placement bugs before you submit.",
    )
    parser.add_argument("--version", action="version", version=f"precision-doctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    modules = [COMMANDS[command][0]] if command in COMMANDS else list(dict.fromkeys(m for m, _ in COMMANDS.values()))
    for module in modules:
        module.register(sub)
    if command in COMMANDS:
        parser.whole = lambda: build_parser()
        parser.command = command
        return parser
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
    named = next((a for a in args if not a.startswith("-")), "")  # the command, for suggestions; argparse decides
    parser = build_parser(named)
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
            return COMMANDS[opts.command][1](opts, script_args)
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
