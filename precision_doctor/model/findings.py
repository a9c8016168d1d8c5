"""What a check reports: a finding with its evidence, the error the job would hit, and a fix.

Fixes are data (edits, shell commands, manual steps) so checks stay free of libcst and the fixer
can apply them later; their applicability says whether one may be applied without review.
"""

from __future__ import annotations

from typing import Literal

from .facts import Location
from .util import StrEnum, record


class Severity(StrEnum):
    ERROR = "error"  # the job crashes, or trains numerically broken, with near certainty
    WARNING = "warning"  # it runs, but degraded, slow, likely to diverge, or on a vanishing API
    INFO = "info"


class Phase(StrEnum):
    """When the job hits the problem, in order: ranking puts what crashes first, first."""

    LAUNCH = "launch"
    CONFIG = "config"
    LOAD = "load"
    WRAP = "wrap"
    FIRST_STEP = "first-step"
    LATER_STEPS = "later-steps"


class Confidence(StrEnum):
    CERTAIN = "certain"
    LIKELY = "likely"


# what a rule may write in a Draft instead of the member: the engine turns it into the member
SeverityName = Literal["error", "warning", "info"]
PhaseName = Literal["launch", "config", "load", "wrap", "first-step", "later-steps"]
ConfidenceName = Literal["certain", "likely"]


class Applicability(StrEnum):
    """Ruff's three kinds of fix, from least to most restricted."""

    SAFE = "safe"  # keeps the script's intent: `fix --yes` applies it
    UNSAFE = "unsafe"  # changes behaviour a person should review: applied with --unsafe
    DISPLAY = "display"  # shown, never applied


SEVERITIES = tuple(Severity)
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
PHASES = tuple(Phase)
PHASE_RANK = {p: i for i, p in enumerate(PHASES)}
CONFIDENCES = tuple(Confidence)
APPLICABILITY_RANK = {a: i for i, a in enumerate(Applicability)}


def stricter(a: Applicability, b: Applicability) -> Applicability:
    return a if APPLICABILITY_RANK[a] >= APPLICABILITY_RANK[b] else b


@record
class Evidence:
    """One value that combined into the problem, where it is written and where it came from."""

    location: Location | None
    excerpt: str  # the source line (or the flag) as written
    note: str  # what it contributes: "weights float16", "fp16 AMP (GradScaler)"
    origin: str = "code"  # code | default | script-arg | launcher | env | accelerate-config | profile | assumed
    trail: tuple[str, ...] = ()  # the assignments the value passed through, "train.py:23 use_fp16 = args.fp16"


@record
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
    library: str = ""  # for call edits: the package the call must come from (never rewrite a look-alike)

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


@record
class Fix:
    description: str
    applicability: Applicability = Applicability.UNSAFE
    edits: tuple[Edit, ...] = ()
    commands: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what not to do instead, and why
    variants: tuple[tuple[Edit, ...], ...] = ()  # other edits to the same end, tried in order when `edits` fail

    @property
    def effective(self) -> Applicability:
        """What `fix` can do with it, as reports label it: its edits at their applicability, or display only when it
        has none (a recipe's or a DeepSpeed JSON's change is listed as a step, never written), so a fix labelled
        safe is one `fix --yes` applies."""
        return self.applicability if self.edits else Applicability.DISPLAY

    @property
    def safe(self) -> bool:
        return self.effective == Applicability.SAFE

    def appliable(self, unsafe: bool) -> bool:
        """May `fix` apply these edits: safe ones always, unsafe ones with --unsafe, display-only never."""
        return bool(self.edits) and (
            self.applicability == Applicability.SAFE or (unsafe and self.applicability == Applicability.UNSAFE)
        )


@record
class Finding:
    rule_id: str
    name: str
    severity: Severity
    message: str
    path: str
    evidence: tuple[Evidence, ...] = ()
    error: str = ""  # the message the job would die with (or the symptom)
    why: str = ""
    fix: Fix | None = None
    phase: Phase = Phase.FIRST_STEP
    confidence: Confidence = Confidence.CERTAIN

    @property
    def locations(self) -> tuple[Location, ...]:
        return tuple(e.location for e in self.evidence if e.location is not None)

    def sort_key(self) -> tuple:
        first = self.locations[0] if self.locations else Location(self.path, 0)
        return (
            SEVERITY_RANK[self.severity],
            PHASE_RANK.get(self.phase, 99),
            CONFIDENCES.index(self.confidence),
            first.path,
            first.line,
            self.rule_id,
        )


@record
class Draft:
    """What a check yields; the engine stamps id, name and the declared severity onto it."""

    message: str
    evidence: tuple[Evidence, ...] = ()
    fix: Fix | None = None
    error: str = ""  # defaults to the rule's declared error text
    phase: Phase | PhaseName | None = None  # defaults to the rule's declared phase
    severity: Severity | SeverityName | None = None  # lower than declared, or up to the declared escalation
    confidence: Confidence | ConfidenceName = Confidence.CERTAIN
    path: str = ""
