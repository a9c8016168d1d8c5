"""`precision-doctor fix`: walk the findings that carry a code edit, show each as a diff, apply the chosen ones
safely, re-check, and list the fixes that are commands or manual steps."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

from . import engine
from .errors import InputError
from .findings import SEVERITIES, Finding
from .redact import printable

EXIT_OK, EXIT_FINDINGS = 0, 1


def _key(f: Finding) -> tuple:
    return (f.rule_id, f.path, f.message)


def _counts(findings) -> str:
    return " · ".join(f"{sum(1 for f in findings if f.severity == s)} {s}" for s in SEVERITIES)


class Session:
    """One fix run: re-checks after every write, so each edit is computed against the file as it is now."""

    def __init__(self, check: Callable[[], list[Finding]], select: frozenset[str] | None, unsafe: bool):
        self.check = check
        self.select = select
        self.unsafe = unsafe
        self.decided: set[tuple] = set()
        self.applied: list[tuple[Finding, str]] = []  # (finding, diff)
        self.failed: list[tuple[Finding, str]] = []
        self.first = check()

    def candidates(self, findings: list[Finding]) -> list[Finding]:
        return [f for f in findings if f.fix and f.fix.appliable(unsafe=True) and _key(f) not in self.decided
                and (self.select is None or f.rule_id in self.select)]

    def preview(self, f: Finding):
        """The file changes this finding's edits make, computed on the files as they are now."""
        from .fixer import EditFailed, FileChange, apply_edits

        by_file: dict[str, list] = {}
        for e in f.fix.edits:
            by_file.setdefault(e.path, []).append(e)
        changes = []
        for path, edits in by_file.items():
            try:
                before = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise EditFailed(f"{path}: cannot be read ({exc.strerror})") from None
            after = apply_edits(before, edits)
            if after != before:
                changes.append(FileChange(path, before, after))
        return changes

    def apply(self, f: Finding, changes) -> None:
        from .fixer import digest, write_atomically

        for c in changes:
            write_atomically(Path(c.path), c.after, digest(c.before))
        self.applied.append((f, "".join(c.diff() for c in changes)))


def run_fix(check: Callable[[], list[Finding]], *, yes: bool, diff_only: bool, unsafe: bool,
            select: frozenset[str] | None, console: Console, ask: Callable[[str], str] | None = None) -> int:
    from .fixer import EditFailed

    if not yes and not diff_only and ask is None and not sys.stdin.isatty():
        diff_only = True  # no terminal to ask on: show the patch, change nothing
    session = Session(check, select, unsafe)
    if diff_only:
        return _diff_only(session, console)
    ask = ask or _prompt
    apply_all = yes
    findings = session.first
    while True:
        todo = session.candidates(findings)
        if not todo:
            break
        f = todo[0]
        session.decided.add(_key(f))
        if yes and not f.fix.safe and not unsafe:
            continue  # --yes applies fixes that need review only with --unsafe
        try:
            changes = session.preview(f)
        except (EditFailed, InputError) as exc:
            session.failed.append((f, str(exc)))
            continue
        if not changes:
            continue
        if not apply_all:
            _show(console, f, changes)
            answer = ask("Apply? [y]es / [n]o / [a]ll / [q]uit")
            if answer == "q":
                break
            if answer == "n":
                continue
            apply_all = answer == "a"
        session.apply(f, changes)
        findings = session.check()
    return _summary(session, console)


def _diff_only(session: Session, console: Console) -> int:
    """Every applicable code fix as one patch, nothing written. Exit 1 when there is something to apply."""
    from .fixer import EditFailed, FileChange, apply_edits

    per_file: dict[str, list] = {}
    skipped_unsafe = []
    for f in session.candidates(session.first):
        if not f.fix.safe and not session.unsafe:
            skipped_unsafe.append(f)
            continue
        for e in f.fix.edits:
            per_file.setdefault(e.path, []).append(e)
    patch = []
    for path, edits in per_file.items():
        before = Path(path).read_text(encoding="utf-8")
        try:
            after = apply_edits(before, edits)
        except EditFailed as exc:
            console.print(f"[yellow]{escape(path)}: edits not combined ({escape(str(exc))}); run `fix` "
                          f"interactively[/yellow]", soft_wrap=True)
            continue
        patch.append(FileChange(path, before, after).diff())
    text = "".join(patch)
    sys.stdout.write(text)
    for f in skipped_unsafe:
        print(f"# {f.rule_id} needs review (unsafe: {f.fix.description}); add --unsafe or run `fix` in a terminal",
              file=sys.stderr)
    _manual(session.first, Console(stderr=True, highlight=False))
    return EXIT_FINDINGS if text else EXIT_OK


def _show(console: Console, f: Finding, changes) -> None:
    style = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}[f.severity]
    console.print(f"\n[{style}]{f.severity}[/{style}] [bold]{f.rule_id}[/bold] {f.name}  "
                  f"{'[green]safe[/green]' if f.fix.safe else '[yellow]review[/yellow]'}")
    console.print(f"  {escape(f.message)}", soft_wrap=True)
    console.print(f"  [dim]fix:[/dim] {escape(f.fix.description)}", soft_wrap=True)
    for note in f.fix.notes:
        console.print(f"  [yellow]note[/yellow] {escape(note)}", soft_wrap=True)
    for c in changes:
        console.print(Syntax(printable(c.diff(), keep_newlines=True), "diff", theme="ansi_dark",
                             background_color="default"))


def _prompt(question: str) -> str:
    from rich.prompt import Prompt

    return Prompt.ask(question, choices=["y", "n", "a", "q"], default="n")


def _summary(session: Session, console: Console) -> int:
    after = session.check() if session.applied else session.first
    for f, why in session.failed:
        console.print(f"[yellow]{f.rule_id}: not applied: {escape(why)}[/yellow]", soft_wrap=True)
    if session.applied:
        patch = "".join(d for _, d in session.applied)
        undo = Path(tempfile.mkdtemp(prefix="precision-doctor-")) / "applied.patch"
        undo.write_text(patch, encoding="utf-8")
        console.print(f"\napplied {len(session.applied)} fix{'es' if len(session.applied) != 1 else ''}: "
                      f"{_counts(session.first)} → {_counts(after)}")
        console.print(f"undo: patch -p0 -R < {undo}", soft_wrap=True, markup=False)
    else:
        console.print("\nno code fix applied")
    _manual(after, console)
    return EXIT_FINDINGS if any(f.severity == "error" for f in after) else EXIT_OK


def _manual(findings: list[Finding], console: Console) -> None:
    rest = [f for f in findings if f.fix and not f.fix.edits and (f.fix.commands or f.fix.description)]
    if not rest:
        return
    console.print("\n[bold]to do by hand[/bold]")
    for f in rest:
        console.print(f"  {f.rule_id} {escape(f.fix.description)}", soft_wrap=True)
        for cmd in f.fix.commands:
            console.print(f"    $ {escape(cmd)}", soft_wrap=True)


def run_engine_check(gather_facts: Callable, policy) -> Callable[[], list[Finding]]:
    def check() -> list[Finding]:
        from .probes import script as script_probe

        script_probe._MODULE_CACHE.clear()  # files change between checks
        return list(engine.run(gather_facts(), policy).findings)

    return check
