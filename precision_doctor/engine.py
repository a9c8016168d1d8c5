"""The rule registry and the engine that runs checks over facts and ranks their findings.

A rule is a plain function registered by `@rule(...)` alone; the decorator carries its id, name,
default severity, documentation and the examples that must fire and must stay silent. The
function's parameter names say which facts it reads (`script`, `setup`, `machine`, `stack`,
`launch`, `facts`); the engine injects them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ._util import unique
from .config import Policy
from .facts import Facts
from .findings import SEVERITY_RANK, Draft, Evidence, Finding, Fix

INJECTABLE = ("facts", "script", "setup", "machine", "stack", "launch", "live")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: str
    phase: str
    summary: str  # one line
    what: str  # what it detects
    why: str  # why it breaks
    error: str  # the real message the job dies with, or the symptom
    fix: str  # the endorsed fix
    fix_safety: str
    fires: tuple[Example, ...]
    silent: tuple[Example, ...]
    needs: tuple[str, ...]  # facts that must be known for the rule to run ("machine")
    escalates_to: str  # the most a finding may be raised to (a declared exception, e.g. warning -> error)
    func: Callable[..., Iterable[Draft]]
    params: tuple[str, ...]
    per_script: bool


REGISTRY: dict[str, Rule] = {}


def rule(id: str, name: str, *, severity: str, phase: str, summary: str, what: str, why: str, error: str,
         fix: str, fires: list[Example], silent: list[Example], fix_safety: str = "",
         needs: tuple[str, ...] = (), escalates_to: str = "") -> Callable:
    def register(func: Callable) -> Callable:
        code = func.__code__
        params = code.co_varnames[:code.co_argcount]
        unknown = [p for p in params if p not in INJECTABLE]
        if unknown:
            raise TypeError(f"{func.__name__}: cannot inject {unknown}; use {INJECTABLE}")
        if id in REGISTRY:
            raise ValueError(f"rule id {id} registered twice")
        if not fires or not silent:
            raise ValueError(f"{id}: a rule needs at least one firing example and one silent look-alike")
        REGISTRY[id] = Rule(id=id, name=name, severity=severity, phase=phase, summary=summary, what=what,
                            why=why, error=error, fix=fix, fix_safety=fix_safety, fires=tuple(fires),
                            silent=tuple(silent), needs=needs, escalates_to=escalates_to or severity,
                            func=func, params=params,
                            per_script="script" in params or "setup" in params)
        return func

    return register


def rules() -> list[Rule]:
    from . import checks  # noqa: F401  (registers every rule)

    return sorted(REGISTRY.values(), key=lambda r: r.id)


def get_rule(rule_id: str) -> Rule | None:
    rules()
    key = rule_id.upper()
    found = REGISTRY.get(key)
    if found is None:
        found = next((r for r in REGISTRY.values() if r.name == rule_id), None)
    return found


@dataclass(frozen=True)
class Skipped:
    rule_id: str
    reason: str


@dataclass(frozen=True)
class Withdrawn:
    """A static finding the live model contradicts."""

    rule_id: str
    message: str
    path: str
    reason: str


@dataclass(frozen=True)
class Result:
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    crashed: tuple[Skipped, ...]
    withdrawn: tuple[Withdrawn, ...] = ()


def run(facts: Facts, policy: Policy | None = None,
        presolved: dict[str, tuple[list[Finding], list[Skipped]]] | None = None) -> Result:
    """Every enabled rule over the facts, ranked. `presolved` holds per-script findings worker processes
    already computed (script path -> findings, crashed checks); those scripts' rules are not run again."""
    policy = policy or Policy()
    findings, skipped, crashed, withdrawn = _raw(facts, policy, per_script=None if presolved is None else False)
    for found, broke in (presolved or {}).values():
        findings.extend(found)
        crashed.extend(broke)
    if facts.live is not None:
        from .checks.live import outcome_drafts  # what really happened in the live run

        for rule_id, draft in outcome_drafts(facts):
            if policy.enabled(rule_id) and rule_id in REGISTRY:
                findings.append(_stamp(REGISTRY[rule_id], draft, facts.scripts[0].path if facts.scripts else ""))
    findings = [f for f in findings if not policy.ignored_in(f.rule_id, f.path)]
    crashed = unique(crashed, key=lambda c: (c.rule_id, c.reason))
    findings = apply_suppressions(unique(findings, key=lambda f: (f.rule_id, f.message, f.locations)), facts, policy)
    findings.sort(key=Finding.sort_key)
    return Result(tuple(findings), tuple(skipped), tuple(crashed), tuple(withdrawn))


def _why_withdrawn(facts: Facts) -> str:
    live = facts.live
    parts = []
    if live.model.get("trainable_dtypes"):
        parts.append("trainable parameters " + ", ".join(f"{d} x{n}" for d, n in live.model["trainable_dtypes"].items()))
    if live.trainer:
        parts.append(f"Trainer wraps the model in: {live.trainer.get('wrap', '?')}")
    return "the live model shows " + "; ".join(parts) if parts else "the live model contradicts it"


def _live_missing(live) -> str:
    if live is None:
        return "live facts not gathered (use --live)"
    if not live.reached_training:
        return f"live facts not gathered: the live run {live.ended} before reaching training"
    return f"live facts not gathered: the live run saw no model at {live.stopped_at}"


def script_findings(facts: Facts, policy: Policy) -> tuple[list[Finding], list[Skipped]]:
    """The per-script rules over the facts' scripts, unranked and unsuppressed: a worker's share of run()."""
    findings, _, crashed, _ = _raw(facts, policy, per_script=True)
    return findings, crashed


def _raw(facts: Facts, policy: Policy, per_script: bool | None):
    """Run the chosen rules (all, only per-script ones, or only machine-wide ones)."""
    from .derive import derive_setup

    chosen = [r for r in rules() if policy.enabled(r.id) and r.id != UNUSED_SUPPRESSION
              and (per_script is None or r.per_script == per_script)]
    setups = {s.path: derive_setup(s, facts) for s in facts.scripts} if per_script is not False else {}
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    crashed: list[Skipped] = []
    withdrawn: list[Withdrawn] = []
    live_known = facts.live is not None and facts.live.known
    for r in chosen:
        missing = [n for n in r.needs if getattr(facts, n) is None or not getattr(facts, n).known]
        if missing:
            reason = "; ".join(f"{n} unknown: {getattr(facts, n).reason}" if n == "machine" else
                               _live_missing(facts.live) if n == "live" else f"{n} not given"
                               for n in missing)
            skipped.append(Skipped(r.id, reason))
            continue
        contexts = facts.scripts if r.per_script else (None,)
        for script in contexts:
            available = {"facts": facts, "machine": facts.machine, "stack": facts.stack, "launch": facts.launch,
                         "script": script, "setup": setups.get(script.path) if script else None,
                         "live": facts.live if live_known else None}
            try:
                drafts = list(r.func(**{p: available[p] for p in r.params}))
                if live_known and "live" in r.params and "live" not in r.needs:
                    # what reading the script alone would have said, to name what the live model withdrew
                    static = list(r.func(**{p: (None if p == "live" else available[p]) for p in r.params}))
                    if not drafts:  # the live model confirms nothing of what the script reading claimed
                        withdrawn.extend(Withdrawn(r.id, d.message, script.path if script else "",
                                                   _why_withdrawn(facts)) for d in static)
            except Exception as exc:  # a crashed check is a result, not a crash of the tool
                crashed.append(Skipped(r.id, f"{type(exc).__name__}: {exc}"))
                continue
            for d in drafts:
                findings.append(_stamp(r, d, script.path if script else ""))
    return findings, skipped, crashed, withdrawn


UNUSED_SUPPRESSION = "PD001"


def apply_suppressions(findings: list[Finding], facts: Facts, policy: Policy) -> list[Finding]:
    """Drop findings a `# precision-doctor: ignore[...]` comment on one of their lines names; report the comments
    that suppressed nothing (PD001), the way ruff reports an unused noqa."""
    marks = unique((s for script in facts.scripts for s in script.suppressions),
                   key=lambda s: (s.location.path, s.location.line))
    by_line = {(s.location.path, s.location.line): s for s in marks}
    used: set[tuple[str, str, int]] = set()
    kept = []
    for f in findings:
        hit = next((by_line[(loc.path, loc.line)] for loc in f.locations if (loc.path, loc.line) in by_line
                    and (not by_line[(loc.path, loc.line)].ids or f.rule_id in by_line[(loc.path, loc.line)].ids)),
                   None)
        if hit is None:
            kept.append(f)
        else:
            used.add((f.rule_id if hit.ids else "*", hit.location.path, hit.location.line))
    if not policy.enabled(UNUSED_SUPPRESSION):
        return kept
    meta = REGISTRY[UNUSED_SUPPRESSION]
    for s in marks:
        for rid in s.ids or ("*",):
            if (rid, s.location.path, s.location.line) in used:
                continue
            if rid != "*" and rid in REGISTRY and not policy.enabled(rid):
                continue  # the rule is off: the comment may matter again when it is back on
            what = "every rule" if rid == "*" else rid
            why = f"{rid} is not a rule" if rid != "*" and rid not in REGISTRY else "nothing fires on this line"
            kept.append(_stamp(meta, Draft(f"suppression of {what} matches nothing: {why}",
                                           evidence=(Evidence(s.location, "", "unused suppression"),),
                                           fix=Fix("remove the comment (or the id from it)", safe=True)),
                               s.location.path))
    return kept


def _stamp(r: Rule, d: Draft, path: str) -> Finding:
    severity = r.severity
    if d.severity and SEVERITY_RANK[d.severity] >= SEVERITY_RANK[r.escalates_to]:
        severity = d.severity  # lower than declared, or up to the escalation the rule declares, never beyond
    return Finding(rule_id=r.id, name=r.name, severity=severity, message=d.message, path=d.path or path,
                   evidence=d.evidence, error=d.error or r.error, why=r.why, fix=d.fix,
                   phase=d.phase or r.phase, confidence=d.confidence)


