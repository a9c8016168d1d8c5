"""`precision-doctor fix`: walk the findings that carry a code edit, show each as a diff, apply the chosen ones
safely, re-check, and list the fixes that are commands or manual steps."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.syntax import Syntax

from .. import engine
from ..model.errors import InputError
from ..model.findings import SEVERITIES, SEVERITY_RANK, Applicability, Finding, Severity, stricter
from ..model.redact import markup as escape  # data from scripts: redacted, controls visible, markup literal
from ..model.redact import printable

EXIT_OK, EXIT_FINDINGS, EXIT_INTERRUPTED = 0, 1, 130


def _key(f: Finding) -> tuple:
    """A finding across re-checks: two loads with the same problem give the same message, not the same line text."""
    return (f.rule_id, f.path, f.message, f.evidence[0].excerpt if f.evidence else "")


def _counts(findings) -> str:
    return " · ".join(f"{sum(1 for f in findings if f.severity == s)} {s}" for s in SEVERITIES)


def _serious(f: Finding) -> bool:
    return SEVERITY_RANK[f.severity] <= SEVERITY_RANK[Severity.WARNING]


def _new_findings(before: list[Finding], after: list[Finding]) -> list[Finding]:
    """Findings at warning or above that `after` has and `before` had not: a rule firing more often, or more
    severely, than it did."""
    new = []
    for rule_id in dict.fromkeys(f.rule_id for f in after if _serious(f)):
        was = [SEVERITY_RANK[f.severity] for f in before if f.rule_id == rule_id and _serious(f)]
        now = [f for f in after if f.rule_id == rule_id and _serious(f)]
        if len(now) > len(was) or min(SEVERITY_RANK[f.severity] for f in now) < min(was):
            seen = {_key(f) for f in before}
            new.extend([f for f in now if _key(f) not in seen] or now[:1])
    return new


def _gone(f: Finding, before: list[Finding], after: list[Finding]) -> bool:
    """The finding no longer fires: its rule fires fewer times on its file than it did."""

    def same(g: Finding) -> bool:
        return g.rule_id == f.rule_id and g.path == f.path

    return sum(map(same, after)) < sum(map(same, before))


@dataclass
class Step:
    """What answering yes to one finding does: its edits, and those of the findings they set off (fixed together),
    as one change per file, verified on the in-memory result before anything is shown. `problem` says why it is
    shown for review only."""

    findings: list[Finding]
    changes: list = field(default_factory=list)  # fixer.FileChange, from the texts as they are now
    texts: dict[str, str] = field(default_factory=dict)  # every file as it would be after the step
    after: list[Finding] = field(default_factory=list)  # the check of that result
    applicability: Applicability = Applicability.SAFE
    problem: str = ""

    @property
    def finding(self) -> Finding:
        return self.findings[0]


class Session:
    """One fix run. Every fix is applied in memory first and checked there: the result parses, names nothing that is
    undefined (imports it needs are added), and a re-check of the result with the same machine and launch shows the
    finding gone and no new finding at warning or above (a fix that sets one off is tried together with that one's
    fix). --diff, --yes and the interactive session walk the same steps, so they propose the same edits. Before a
    file is first written its original goes into the run's undo backup."""

    MAX_TOGETHER = 3  # findings set off in turn by one fix, fixed with it

    def __init__(
        self, check: Callable[[], list[Finding]], select: frozenset[str] | None, unsafe: bool, write: bool = True
    ):
        from .undo import Backup

        self.check_files = check
        self.select = select
        self.unsafe = unsafe
        self.write = write
        # findings offered, by key: twins share a key (the same call written twice), so the n-th twin is still open
        # while fewer than n of that key were decided
        self.decided: Counter[tuple] = Counter()
        self.applied: list[Finding] = []
        self.left: list[tuple[Finding, str]] = []  # (finding, why it was not applied)
        self.backup = Backup()
        self.originals: dict[str, object] = {}  # path -> fixer.SourceFile as first read
        self.texts: dict[str, str] = {}  # path -> text after the steps taken so far
        self.first = self.now = check()

    def check(self, texts: dict[str, str] | None = None) -> list[Finding]:
        from ..system.sources import proposed

        with proposed(texts if texts is not None else self.texts):
            return self.check_files()

    def fixable(self, findings: list[Finding]) -> list[Finding]:
        return [
            f
            for f in findings
            if f.fix and f.fix.appliable(unsafe=True) and (self.select is None or f.rule_id in self.select)
        ]

    def candidates(self, findings: list[Finding]) -> list[Finding]:
        seen: Counter[tuple] = Counter()
        out = []
        for f in self.fixable(findings):
            key = _key(f)
            if seen[key] >= self.decided[key]:
                out.append(f)
            seen[key] += 1
        return out

    def text(self, path: str) -> str:
        from .edits import read_source_file

        if path not in self.originals:
            self.originals[path] = read_source_file(path)
        return self.texts.get(path, self.originals[path].text)

    def _container(self, path: str) -> str:
        """A notebook's JSON as first read (its steps so far are in its code text)."""
        return getattr(self.originals[path], "container", "")

    def _edited(self, texts: dict[str, str], edits) -> dict[str, str]:
        from .edits import apply_edits

        out = dict(texts)
        by_file: dict[str, list] = {}
        for e in edits:
            by_file.setdefault(e.path, []).append(e)
        for path, file_edits in by_file.items():
            out[path] = apply_edits(out.get(path, self.text(path)), file_edits)
        return out

    def plan(self, f: Finding) -> Step:
        """The step for `f`, verified; with `problem` set when no way of fixing it passes."""
        from .edits import EditFailed

        failed = None
        for edits in (f.fix.edits, *f.fix.variants):
            try:
                step = self._verified(f, edits)
            except EditFailed as exc:
                step = Step([f], applicability=f.fix.applicability, problem=f"the edit does not apply: {exc}")
            if not step.problem:
                return step
            failed = failed if failed is not None and failed.changes else step
        return failed

    def _verified(self, f: Finding, edits) -> Step:
        from .edits import EditFailed, FileChange

        texts = self._edited(self.texts, edits)
        after = self.check(texts)
        group, applicability = [f], f.fix.applicability
        for _ in range(self.MAX_TOGETHER):  # a fix that sets off another finding: fix that one with it
            new = [
                g
                for g in _new_findings(self.now, after)
                if g.fix and g.fix.appliable(unsafe=True) and _key(g) not in {_key(x) for x in group}
            ]
            if not new or not _gone(f, self.now, after):
                break
            try:
                texts = self._edited(texts, new[0].fix.edits)
            except EditFailed:
                break
            group.append(new[0])
            applicability = stricter(applicability, new[0].fix.applicability)
            after = self.check(texts)
        changes = [
            FileChange(p, self.text(p), t, self.originals[p].bom, self._container(p))
            for p, t in texts.items()
            if t != self.text(p)
        ]
        step = Step(group, changes, texts, after, applicability)
        if not changes:
            step.problem = "the edit changes nothing"
        elif not _gone(f, self.now, after):
            step.problem = f"{f.rule_id} still fires on the result"
        else:
            new = _new_findings(self.now, after)
            if new:
                step.problem = "the result would set off " + ", ".join(
                    f"{g.rule_id} ({g.severity}: {g.message})" for g in new[:3]
                )
        return step

    def take(self, step: Step) -> None:
        """Make the step's change: written (undo backup first) unless this is --diff, which only keeps it in mind."""
        from ..system.safe_io import NotWritten
        from .edits import SourceFile, write_change

        if self.write:
            for c in step.changes:
                self.backup.keep(c.path, c.before_bytes, c.after_bytes)  # before the file changes, never after
                try:
                    write_change(c)
                except NotWritten:
                    self.backup.forget(c.path)  # refused before writing: no undo for it (any other failure keeps it)
                    raise
                if c.container:  # a notebook's JSON is now the one written: the next step writes over that
                    was: Any = self.originals[c.path]
                    self.originals[c.path] = SourceFile(was.path, was.text, was.bom, container=c.file_after)
        self.texts.update({c.path: c.after for c in step.changes})
        self.applied.extend(step.findings)
        # a twin with the same key (the same call written twice) is offered next: a step is only taken when its
        # rule fires fewer times on the file (`_gone`), so offering it again always ends
        for g in step.findings:
            self.decided[_key(g)] = max(0, self.decided[_key(g)] - 1)
        # a finding declined on a line the step edited has new line text: it stays declined under its new key
        before, after = {_key(g) for g in self.now}, {_key(g) for g in step.after}
        for key, count in list(self.decided.items()):
            moved = next((k for k in after - before if k[:3] == key[:3]), None) if key not in after else None
            if count and moved is not None:
                self.decided[moved] += count
                del self.decided[key]
        self.now = step.after

    def changes(self):
        """Each changed file as one change, from the original to what the steps taken made of it."""
        from .edits import FileChange

        return [
            FileChange(p, self.originals[p].text, t, self.originals[p].bom, self._container(p))
            for p, t in self.texts.items()
            if t != self.originals[p].text
        ]


ANSWERS = {"y": "y", "yes": "y", "n": "n", "no": "n", "a": "a", "all": "a", "q": "q", "quit": "q"}
QUESTION = "Apply? [y]es / [n]o / [a]ll / [q]uit"


def run_fix(
    check: Callable[[], list[Finding]],
    *,
    yes: bool,
    diff_only: bool,
    unsafe: bool,
    select: frozenset[str] | None,
    console: Console,
    ask: Callable[[str], str] | None = None,
) -> int:
    if not yes and not diff_only and ask is None and not sys.stdin.isatty():
        diff_only = True  # no terminal to ask on: show the patch, change nothing
    session = Session(check, select, unsafe, write=not diff_only)
    if diff_only:
        return _diff_only(session)
    try:
        quit = _walk(session, yes, unsafe, ask or _prompter(console), console)
    except KeyboardInterrupt:
        _summary(session, console, ended="interrupted (Ctrl-C)")
        return EXIT_INTERRUPTED
    except EOFError:
        return _summary(session, console, ended="ended (Ctrl-D)")
    except InputError:  # a write refused (the file changed, the folder is read-only): say what was done, then why
        if session.applied:
            _summary(session, console, ended="stopped")
        raise
    return _summary(session, console, ended="ended (you quit)" if quit else "")


def _walk(session: Session, yes: bool, unsafe: bool, ask: Callable[[str], str] | None, console: Console | None) -> bool:
    """Offer the fixes most severe first. `ask` None: take every fix the flags allow without asking (--diff).
    True when the person quit."""
    apply_all = yes or ask is None
    while True:
        todo = session.candidates(session.now)
        if not todo:
            return False
        f = todo[0]
        session.decided[_key(f)] += 1
        if apply_all and not f.fix.safe and not unsafe:
            session.left.append((f, "needs review: add --unsafe to apply it with --yes, or run `fix` in a terminal"))
            continue
        step = session.plan(f)
        if step.problem:
            if console is not None and not apply_all and step.changes:
                _show(console, step, review_only=True)
            session.left.append((f, f"shown for review only: {step.problem}"))
            continue
        if apply_all and step.applicability != Applicability.SAFE and not unsafe:
            others = ", ".join(g.rule_id for g in step.findings[1:])
            session.left.append((f, f"needs review: it must be fixed together with {others}; add --unsafe"))
            continue
        if not apply_all:
            _show(console, step)
            answer = _answer(ask)
            if answer == "q":
                session.left.append((f, "not applied: you quit"))
                return True
            if answer == "n":
                session.left.append((f, "not applied: you answered no"))
                continue
            apply_all = answer == "a"
        session.take(step)


def _answer(ask: Callable[[str], str]) -> str:
    while True:
        answer = ANSWERS.get(ask(QUESTION).strip().lower())
        if answer:
            return answer


def _diff_only(session: Session) -> int:
    """The fixes --yes would apply (with --unsafe: those needing review too), each file as one patch on stdout,
    nothing written; everything else goes to stderr. Exit 1 when there is something to apply."""
    err = Console(stderr=True, highlight=False)
    _walk(session, yes=True, unsafe=session.unsafe, ask=None, console=None)
    changes = session.changes()
    labels, root = _patch_paths([c.path for c in changes])
    text = "".join(c.diff(labels[c.path]) for c in changes)
    sys.stdout.write(text)
    if text and root != os.path.realpath(os.getcwd()):
        print(
            f"# the patch's paths are relative to {root}: cd there, then `patch -p0 < FILE` or `git apply -p0 FILE`",
            file=sys.stderr,
        )
    for f, why in session.left:
        print(printable(f"# {f.rule_id} not in the patch: {why}"), file=sys.stderr)
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


def _show(console: Console, step: Step, review_only: bool = False) -> None:
    f = step.finding
    style = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}[f.severity]
    tag = "[green]safe[/green]" if step.applicability == Applicability.SAFE else "[yellow]review[/yellow]"
    console.print(f"\n[{style}]{f.severity}[/{style}] [bold]{f.rule_id}[/bold] {f.name}  {tag}")
    console.print(f"  {escape(f.message)}", soft_wrap=True)
    console.print(f"  [dim]fix:[/dim] {escape(f.fix.description)}", soft_wrap=True)
    for g in step.findings[1:]:
        console.print(
            f"  [dim]with:[/dim] {g.rule_id} {escape(g.fix.description)} (this fix sets it off otherwise)",
            soft_wrap=True,
        )
    for note in f.fix.notes:
        console.print(f"  [yellow]note[/yellow] {escape(note)}", soft_wrap=True)
    for c in step.changes:
        console.print(
            Syntax(printable(c.diff(), keep_newlines=True), "diff", theme="ansi_dark", background_color="default")
        )
    if review_only:
        console.print(f"  [yellow]shown for review only, not applied:[/yellow] {escape(step.problem)}", soft_wrap=True)


def _prompter(console: Console) -> Callable[[str], str]:
    def ask(question: str) -> str:
        return console.input(question + " ", markup=False)  # as written: markup would eat [y], [n], [a], [q]

    return ask


def _summary(session: Session, console: Console, ended: str = "") -> int:
    """What was applied and what was left (with why), the counts before and after, and the command that undoes it."""
    after = session.now
    if ended:
        console.print(f"\nsession {ended}")
    left = list(session.left)
    if ended:  # the fixes never offered are left too
        reached = {_key(f) for f, _ in left} | {_key(f) for f in session.applied}
        left += [
            (f, "not applied: the session ended before it") for f in session.fixable(after) if _key(f) not in reached
        ]
    if session.applied:
        n = len(session.applied)
        console.print(f"\napplied {n} fix{'es' if n != 1 else ''}: {_counts(session.first)} → {_counts(after)}")
        for f in session.applied:
            console.print(f"  applied  {f.rule_id} {f.name}: {escape(f.message)}", soft_wrap=True)
    else:
        console.print("\nno code fix applied")
    for f, why in left:
        console.print(f"  left     {f.rule_id} {f.name}: {escape(f.message)}\n           {escape(why)}", soft_wrap=True)
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
        from ..probes import script as script_probe

        script_probe.forget_files()  # files change between checks
        return list(engine.run(gather_facts(), policy).findings)

    return check
