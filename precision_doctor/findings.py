"""What a check reports: a finding with its evidence, the error the job would hit, and a fix.

Fixes are data (edits, shell commands, manual steps) so checks stay free of libcst and the fixer
can apply them later; `safe` says whether applying one without review keeps the script's intent.
"""

from __future__ import annotations

from dataclasses import dataclass

from .facts import Location

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

# When the job hits the problem, in order: ranking puts what crashes first, first.
PHASES = ("launch", "config", "load", "wrap", "first-step", "later-steps")
PHASE_RANK = {p: i for i, p in enumerate(PHASES)}

CONFIDENCES = ("certain", "likely")


@dataclass(frozen=True)
class Evidence:
    """One value that combined into the problem, where it is written and where it came from."""

    location: Location | None
    excerpt: str  # the source line (or the flag) as written
    note: str  # what it contributes: "weights float16", "fp16 AMP (GradScaler)"
    origin: str = "code"  # code | default | script-arg | launcher | env | accelerate-config | profile | assumed
    trail: tuple[str, ...] = ()  # the assignments the value passed through, "train.py:23 use_fp16 = args.fp16"


@dataclass(frozen=True)
class Edit:
    """One source change, matched by line and callee/keyword name (never by column)."""

    kind: str  # replace_value | set_kwarg | remove_kwarg | rename_kwarg | replace_callee | insert_before
    #            | insert_after | add_import
    path: str
    line: int
    call: str = ""  # callee as written on that line, e.g. "from_pretrained"
    name: str = ""  # keyword name for *_kwarg
    old: str = ""
    new: str = ""
    column: int = 0  # a tie-breaker only, when the same expression appears twice on the line

    def describe(self) -> str:
        where = f"{self.path}:{self.line}"
        if self.kind == "replace_value":
            return f"{where}  {self.old} → {self.new}"
        if self.kind == "set_kwarg":
            return f"{where}  {self.call}(..., {self.name}={self.new})"
        if self.kind == "remove_kwarg":
            return f"{where}  remove {self.name}= from {self.call}(...)"
        if self.kind == "rename_kwarg":
            return f"{where}  {self.old}= → {self.new}= in {self.call}(...)"
        if self.kind == "replace_callee":
            first = f"{self.name}, " if self.name else ""
            return f"{where}  {self.old}(...) → {self.new}({first}...)"
        if self.kind == "insert_after":
            return f"{where}  add after this line: {self.new}"
        if self.kind == "insert_before":
            return f"{where}  add before this line: {self.new}"
        return f"{where}  add: {self.new}"


@dataclass(frozen=True)
class Fix:
    description: str
    safe: bool = False
    edits: tuple[Edit, ...] = ()
    commands: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what not to do instead, and why


@dataclass(frozen=True)
class Finding:
    rule_id: str
    name: str
    severity: str
    message: str
    path: str
    evidence: tuple[Evidence, ...] = ()
    error: str = ""  # the message the job would die with (or the symptom)
    why: str = ""
    fix: Fix | None = None
    phase: str = "first-step"
    confidence: str = "certain"

    @property
    def locations(self) -> tuple[Location, ...]:
        return tuple(e.location for e in self.evidence if e.location is not None)

    def sort_key(self) -> tuple:
        first = self.locations[0] if self.locations else Location(self.path, 0)
        return (SEVERITY_RANK[self.severity], PHASE_RANK.get(self.phase, 99),
                CONFIDENCES.index(self.confidence), first.path, first.line, self.rule_id)


@dataclass(frozen=True)
class Draft:
    """What a check yields; the engine stamps id, name and the declared severity onto it."""

    message: str
    evidence: tuple[Evidence, ...] = ()
    fix: Fix | None = None
    error: str = ""  # defaults to the rule's declared error text
    phase: str = ""  # defaults to the rule's declared phase
    severity: str = ""  # only a lower severity than declared is accepted
    confidence: str = "certain"
    path: str = ""
