"""Command line: `precision-doctor check|rules|rule|targets`.

Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it, 2 bad usage or unreadable
input, 3 an internal error of the doctor.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from .errors import InputError

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
FAIL_ON = ("error", "warning", "info", "never")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Preflight doctor for deep-learning training jobs: finds precision, dtype and placement "
                       "bugs before you submit.")

_script_args: tuple[str, ...] = ()  # what follows `--` on the command line: the script's own arguments


def _console(stderr: bool = False, no_color: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, no_color=no_color or None, soft_wrap=False)


@app.command()
def check(
    paths: List[str] = typer.Argument(..., help="Training scripts, or folders of them."),
    target: Optional[str] = typer.Option(None, "--target", help="The GPU the job runs on: NAME[:COUNT] "
                                         "(e.g. titan-rtx, a100:8, cpu). See `precision-doctor targets`."),
    launcher: Optional[str] = typer.Option(None, "--launcher", help="The launch command, e.g. "
                                           "\"accelerate launch --num_processes 2 --mixed_precision bf16\"."),
    fmt: str = typer.Option("text", "--format", help="text or json."),
    fail_on: str = typer.Option("error", "--fail-on", help="Exit 1 on findings at or above: error, warning, info, "
                                "never."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the findings."),
    no_color: bool = typer.Option(False, "--no-color", help="Plain text even on a terminal."),
) -> None:
    """Check training scripts statically (never runs them). Script arguments go after `--`."""
    from . import engine
    from .collect import gather
    from .findings import SEVERITY_RANK
    from .report import FORMATS

    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: choose one of {', '.join(FORMATS)}")
    if fail_on not in FAIL_ON:
        raise InputError(f"--fail-on {fail_on}: choose one of {', '.join(FAIL_ON)}")
    facts = gather(paths, target=target, launcher=launcher, script_args=_script_args)
    result = engine.run(facts)
    if fmt == "json":
        from .report.json_report import render as render_json

        sys.stdout.write(render_json(result, facts) + "\n")
    else:
        from .report.text import render as render_text

        render_text(result, facts, _console(no_color=no_color), quiet=quiet)
    if fail_on != "never" and any(SEVERITY_RANK[f.severity] <= SEVERITY_RANK[fail_on] for f in result.findings):
        raise typer.Exit(EXIT_FINDINGS)


@app.command("rules")
def list_rules() -> None:
    """List every rule: id, name, severity, one line."""
    from .engine import rules

    console = _console()
    for r in rules():
        console.print(f"{r.id}  {r.name:<40} {r.severity:<8} {r.summary}", soft_wrap=True, markup=False)


@app.command("rule")
def show_rule(rule_id: str = typer.Argument(..., help="A rule id (PD201) or name.")) -> None:
    """Print a rule's full documentation."""
    from .engine import get_rule
    from .explain import rule_doc

    r = get_rule(rule_id)
    if r is None:
        raise InputError(f"no rule {rule_id!r}; `precision-doctor rules` lists them")
    _console().print(rule_doc(r), markup=False, soft_wrap=True)


@app.command("targets")
def list_targets() -> None:
    """List the GPU profiles `--target` accepts."""
    from .probes.target import PROFILES

    console = _console()
    console.print(f"{'cpu':<14} {'(no GPU)':<32}", markup=False)
    for p in PROFILES:
        caps = ", ".join(x for x, ok in (("bf16", p.capability >= (8, 0)), ("tf32", p.capability >= (8, 0)),
                                          ("fp8", p.capability >= (8, 9))) if ok) or "fp16 only"
        alias = f"  (also: {', '.join(p.aliases)})" if p.aliases else ""
        console.print(f"{p.name:<14} {p.gpu_name:<32} sm_{p.capability[0]}{p.capability[1]}  "
                      f"{p.memory_gib:>3} GiB  {caps}{alias}", markup=False)


def main(argv: list[str] | None = None) -> int:
    global _script_args
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        split = args.index("--")
        args, _script_args = args[:split], tuple(args[split + 1:])
    else:
        _script_args = ()
    try:
        code = app(args=args, prog_name="precision-doctor", standalone_mode=False)
    except InputError as exc:
        print(f"precision-doctor: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except typer.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    except KeyboardInterrupt:
        print("precision-doctor: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback of locals
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return EXIT_USAGE
        if isinstance(exc, click.exceptions.Abort):
            return 130
        print(f"precision-doctor: internal error: {type(exc).__name__}: {exc} "
              f"(please report it with the command you ran)", file=sys.stderr)
        return EXIT_INTERNAL
    return code if isinstance(code, int) else EXIT_OK


def entry() -> None:
    sys.exit(main())
