"""`precision-doctor fix`: walk the findings that carry a code edit, show each as a diff, apply the chosen ones
safely, re-check, and list the fixes that are commands or manual steps."""

from __future__ import annotations

import os
import sys
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

from . import engine
from .errors import InputError
from .findings import SEVERITIES, Finding
from .redact import printable

EXIT_OK, EXIT_FINDINGS, EXIT_INTERRUPTED = 0, 1, 130


def _key(f: Finding) -> tuple:
    return (f.rule_id, f.path, f.message)


def _counts(findings) -> str:
    return " · ".join(f"{sum(1 for f in findings if f.severity == s)} {s}" for s in SEVERITIES)


class Session:
    """One fix run: re-checks after every write, so each edit is computed against the file as it is now. Before a file
    is first changed its original goes into the run's undo backup, so every run can be undone however it ends."""

    def __init__(self, check: Callable[[], list[Finding]], select: frozenset[str] | None, unsafe: bool):
        from .undo import Backup

        self.check = check
        self.select = select
        self.unsafe = unsafe
        self.decided: set[tuple] = set()
        self.applied: list[Finding] = []
        self.left: list[tuple[Finding, str]] = []  # (finding, why it was not applied)
        self.backup = Backup()
        self.first = check()

    def fixable(self, findings: list[Finding]) -> list[Finding]:
        return [f for f in findings if f.fix and f.fix.appliable(unsafe=True)
                and (self.select is None or f.rule_id in self.select)]

    def candidates(self, findings: list[Finding]) -> list[Finding]:
        return [f for f in self.fixable(findings) if _key(f) not in self.decided]

    def preview(self, f: Finding):
        """The file changes this finding's edits make, computed on the files as they are now."""
        from .fixer import FileChange, apply_edits, read_source_file

        by_file: dict[str, list] = {}
        for e in f.fix.edits:
            by_file.setdefault(e.path, []).append(e)
        changes = []
        for path, edits in by_file.items():
            source = read_source_file(path)
            after = apply_edits(source.text, edits)
            if after != source.text:
                changes.append(FileChange(path, source.text, after, source.bom))
        return changes

    def apply(self, f: Finding, changes) -> None:
        from .fixer import write_change

        for c in changes:
            self.backup.keep(c.path, c.before_bytes, c.after_bytes)  # before the file changes, never after
            write_change(c)
        self.applied.append(f)


def run_fix(check: Callable[[], list[Finding]], *, yes: bool, diff_only: bool, unsafe: bool,
            select: frozenset[str] | None, console: Console, ask: Callable[[str], str] | None = None) -> int:
    if not yes and not diff_only and ask is None and not sys.stdin.isatty():
        diff_only = True  # no terminal to ask on: show the patch, change nothing
    session = Session(check, select, unsafe)
    if diff_only:
        return _diff_only(session)
    try:
        _walk(session, yes, unsafe, ask or _prompt, console)
    except KeyboardInterrupt:
        _summary(session, console, ended="interrupted (Ctrl-C)")
        return EXIT_INTERRUPTED
    except EOFError:
        return _summary(session, console, ended="ended (Ctrl-D)")
    except InputError:  # a write refused (the file changed, the folder is read-only): say what was done, then why
        if session.applied:
            _summary(session, console, ended="stopped")
        raise
    return _summary(session, console)


def _walk(session: Session, yes: bool, unsafe: bool, ask: Callable[[str], str], console: Console) -> None:
    from .fixer import EditFailed

    apply_all = yes
    findings = session.first
    while True:
        todo = session.candidates(findings)
        if not todo:
            return
        f = todo[0]
        session.decided.add(_key(f))
        if yes and not f.fix.safe and not unsafe:
            session.left.append((f, "needs review: add --unsafe to apply it with --yes, or run `fix` in a terminal"))
            continue
        try:
            changes = session.preview(f)
        except EditFailed as exc:
            session.left.append((f, f"the edit did not apply: {exc}"))
            continue
        if not changes:
            continue
        if not apply_all:
            _show(console, f, changes)
            answer = ask("Apply? [y]es / [n]o / [a]ll / [q]uit")
            if answer == "q":
                session.left.append((f, "not applied: you quit"))
                return
            if answer == "n":
                session.left.append((f, "not applied: you answered no"))
                continue
            apply_all = answer == "a"
        session.apply(f, changes)
        findings = session.check()


def _diff_only(session: Session) -> int:
    """Every applicable code fix as one patch on stdout, nothing written; everything else goes to stderr.
    Exit 1 when there is something to apply."""
    from .fixer import EditFailed, FileChange, apply_edits, read_source_file

    err = Console(stderr=True, highlight=False)
    per_file: dict[str, list] = {}
    skipped_unsafe = []
    for f in session.candidates(session.first):
        if not f.fix.safe and not session.unsafe:
            skipped_unsafe.append(f)
            continue
        for e in f.fix.edits:
            per_file.setdefault(e.path, []).append(e)
    changes = []
    for path, edits in per_file.items():
        try:
            source = read_source_file(path)
            after = apply_edits(source.text, edits)
        except EditFailed as exc:
            err.print(f"[yellow]{escape(path)}: edits not combined ({escape(str(exc))}); run `fix` "
                      f"interactively[/yellow]", soft_wrap=True)
            continue
        if after != source.text:
            changes.append(FileChange(path, source.text, after, source.bom))
    labels, root = _patch_paths([c.path for c in changes])
    text = "".join(c.diff(labels[c.path]) for c in changes)
    sys.stdout.write(text)
    if text and root != os.path.realpath(os.getcwd()):
        print(f"# the patch's paths are relative to {root}: cd there, then `patch -p0 < FILE` or "
              f"`git apply -p0 FILE`", file=sys.stderr)
    for f in skipped_unsafe:
        print(f"# {f.rule_id} needs review (unsafe: {f.fix.description}); add --unsafe or run `fix` in a terminal",
              file=sys.stderr)
    _manual(session.first, err)
    return EXIT_FINDINGS if text else EXIT_OK


def _patch_paths(paths: list[str]) -> tuple[dict[str, str], str]:
    """Each file's name in the patch, and the folder those names are relative to. The file a link points to is
    named (GNU patch and git apply both refuse to patch through a link). Names are relative to the current folder
    when every file is inside it; otherwise to the deepest folder holding them all, because both tools refuse
    `../` and absolute names."""
    cwd = os.path.realpath(os.getcwd())
    real = {p: os.path.realpath(p) for p in paths}
    if all(os.path.commonpath([cwd, r]) == cwd for r in real.values()):
        root = cwd
    else:
        root = os.path.commonpath([os.path.dirname(r) for r in real.values()])
    return {p: os.path.relpath(r, root) for p, r in real.items()}, root


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


def _summary(session: Session, console: Console, ended: str = "") -> int:
    """What was applied and what was left (with why), the counts before and after, and the command that undoes it."""
    after = session.check() if session.applied else session.first
    if ended:
        console.print(f"\nsession {ended}")
    left = list(session.left)
    if ended:  # the fixes never offered are left too
        reached = {_key(f) for f, _ in left} | {_key(f) for f in session.applied}
        left += [(f, "not applied: the session ended before it") for f in session.fixable(after)
                 if _key(f) not in reached]
    if session.applied:
        n = len(session.applied)
        console.print(f"\napplied {n} fix{'es' if n != 1 else ''}: {_counts(session.first)} → {_counts(after)}")
        for f in session.applied:
            console.print(f"  applied  {f.rule_id} {f.name}: {escape(f.message)}", soft_wrap=True)
    else:
        console.print("\nno code fix applied")
    for f, why in left:
        console.print(f"  left     {f.rule_id} {f.name}: {escape(f.message)}\n           {escape(why)}",
                      soft_wrap=True)
    if session.backup.folders():
        console.print(f"undo: {session.backup.command()}", soft_wrap=True, markup=False)
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

        script_probe.forget_files()  # files change between checks
        return list(engine.run(gather_facts(), policy).findings)

    return check
