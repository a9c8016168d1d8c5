"""Rule declarations: `@rule(...)` and everything a rule carries.

A rule is a plain function registered by the decorator alone. The declaration holds all the rule knows
besides its logic: id, name, default severity and how far a finding may escalate, the phase the job hits
it in, its documentation in ruff's sections, the applicability of its fix, the examples that must fire and
must stay silent (and the code a firing example must become once fixed), how a training log proves it, and
the rules that share its error text. The function's parameter names say which facts it reads; the engine
injects them. This module imports only the facts layer: checks import it, it imports no check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import field

from ..model.findings import Applicability, Draft, Phase, Severity
from ..model.util import record

# What a check may ask for, by parameter name.
INJECTABLE = ("facts", "script", "setup", "machine", "stack", "launch", "live", "plan", "suppressions", "job", "memory")
# Facts a rule may declare it needs; without them it is skipped with the reason. "host": ports, processes and
# environment, known without a GPU driver.
NEEDABLE = ("machine", "live", "host")


@record
class Example:
    """A script (and the machine/launch it runs on) that a rule must fire on, or stay silent on."""

    code: str
    target: str | None = None
    launcher: str | None = None
    script_args: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)  # stack overrides: {"transformers": "4.46.0"}
    note: str = ""
    machine: str | None = None  # a machine fixture (fixtures/machines/NAME.json): GPUs, processes, ports, env
    env: dict[str, str] = field(default_factory=dict)
    live: dict | None = None  # LiveFacts fields: what the real model looked like
    fixed: str | None = None  # firing examples: the code `fix --yes --unsafe` must turn it into
    job: str | None = None  # a SLURM job script (job.sbatch) that launches the code, saved as train.py beside it
    facts: str | None = None  # a snapshot (fixtures/allocations/NAME.json, a multi-node one) given as --facts
    name: str = "train.py"  # the file the code is saved as: `config.yml` for a recipe
    files: dict[str, str] = field(default_factory=dict)  # files beside it, by relative path: a checkpoint folder


@record
class LogSignature:
    """How a training log proves the rule (`explain`, and a live run's exception).

    The rule's declared `error` text is always a pattern; `patterns` adds the variants it does not cover
    (older messages, other libraries' wording). `tells` are lines that point at this rule among several
    sharing an error text. Confidence: `proven` when an error line is seen (default: 0.9 for an error rule,
    0.5 for a warning: a warning in a log is a clue, not the crash), `both` when a tell is seen too,
    `tells_alone` when only tells are (at least `tells_needed` of them), capped at `yielding` when a rule in
    `yields_to` shows a tell."""

    patterns: tuple[str, ...] = ()
    tells: tuple[str, ...] = ()
    from_logs: bool = True  # False: the log alone never proves it (an OOM has many causes)
    proven: float | None = None
    both: float | None = None
    tells_alone: float = 0.0
    tells_needed: int = 1
    yields_to: tuple[str, ...] = ()
    yielding: float = 0.3
    halving_progress: bool = False  # a progress-bar total that halves between two runs is a tell
    error_is_signature: bool = True  # False: the declared error text is a symptom with other causes (OOM)


@record
class Rule:
    id: str
    name: str
    severity: Severity
    phase: Phase
    summary: str  # one line
    what: str  # what it detects
    why: str  # why it breaks
    error: str  # the real message the job dies with, or the symptom
    fix: str  # the endorsed fix
    applicability: Applicability  # the loosest applicability a finding's fix may have
    fix_safety: str  # why the fix has that applicability
    fires: tuple[Example, ...]
    silent: tuple[Example, ...]
    needs: tuple[str, ...]  # facts that must be known for the rule to run ("machine", "live")
    escalates_to: Severity  # the most a finding may be raised to (a declared exception, e.g. warning -> error)
    log: LogSignature
    related: tuple[str, ...]  # rules sharing its error text: a log proves the text, the script tells which
    func: Callable[..., Iterable[Draft]]
    params: tuple[str, ...]

    @property
    def per_script(self) -> bool:
        return "script" in self.params or "setup" in self.params

    @property
    def after_findings(self) -> bool:
        """Runs once every other rule has, on what they found (unused suppressions)."""
        return "suppressions" in self.params


REGISTRY: dict[str, Rule] = {}


def rule(
    id: str,
    name: str,
    *,
    severity: str,
    phase: str,
    summary: str,
    what: str,
    why: str,
    error: str,
    fix: str,
    fires: list[Example],
    silent: list[Example],
    applicability: Applicability = Applicability.DISPLAY,
    fix_safety: str = "",
    needs: tuple[str, ...] = (),
    escalates_to: str = "",
    log: LogSignature = LogSignature(),
    related: tuple[str, ...] = (),
) -> Callable:
    def register(func: Callable) -> Callable:
        code = func.__code__
        params = code.co_varnames[: code.co_argcount]
        unknown = [p for p in params if p not in INJECTABLE]
        if unknown:
            raise TypeError(f"{func.__name__}: cannot inject {unknown}; use {INJECTABLE}")
        if any(n not in NEEDABLE for n in needs):
            raise TypeError(f"{id}: needs {needs}; a rule may need {NEEDABLE}")
        if id in REGISTRY:
            raise ValueError(f"rule id {id} registered twice")
        if not fires or not silent:
            raise ValueError(f"{id}: a rule needs at least one firing example and one silent look-alike")
        REGISTRY[id] = Rule(
            id=id,
            name=name,
            severity=Severity(severity),
            phase=Phase(phase),
            summary=summary,
            what=what,
            why=why,
            error=error,
            fix=fix,
            applicability=Applicability(applicability),
            fix_safety=fix_safety,
            fires=tuple(fires),
            silent=tuple(silent),
            needs=tuple(needs),
            escalates_to=Severity(escalates_to or severity),
            log=log,
            related=tuple(related),
            func=func,
            params=params,
        )
        return func

    return register
