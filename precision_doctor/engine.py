"""The runner: every enabled rule over the facts, each finding stamped with its rule's declaration, ranked.

The facts come in whole (collection never runs a rule); the engine derives the setup once, injects what
each rule's parameters name, and applies the policy: selection, per-file ignores, inline suppressions. A
rule's findings can never exceed its declaration: the severity only up to the declared escalation, the
fix's applicability never looser than declared.
"""

from __future__ import annotations

import gc
from dataclasses import replace

from ._util import record, unique
from .catalog import rules
from .config import Policy
from .derive import Derived, derive
from .derive.setup import Fact
from .diagnose import match_exception
from .facts import Facts, Location, Suppression
from .findings import SEVERITY_RANK, Confidence, Draft, Evidence, Finding, Fix, Phase, stricter
from .registry import REGISTRY, Rule


@record
class Skipped:
    rule_id: str
    reason: str


@record
class Withdrawn:
    """A static finding the live model contradicts."""

    rule_id: str
    message: str
    path: str
    reason: str


@record
class Silenced:
    """A rule that stayed silent on a script while a derived fact it read was unknown: the value that kept it
    quiet and where it is written: the expression itself, else those arguments of the call holding it that its
    reason names, else the call."""

    rule_id: str
    path: str
    fact: str  # the setup's field (or method) the rule read: "weights", "amp", "trainable_dtypes"
    reason: str
    locations: tuple[Location, ...] = ()


@record
class Result:
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    crashed: tuple[Skipped, ...]
    withdrawn: tuple[Withdrawn, ...] = ()
    silenced: tuple[Silenced, ...] = ()


@record
class SuppressionUse:
    """What the suppression comments did, for the rules that judge them (PD001)."""

    marks: tuple[Suppression, ...]
    used: frozenset[tuple[str, str, int]]  # (rule id or "*", path, line) of each comment that silenced something
    enabled: frozenset[str]  # the rules this run checked
    known: frozenset[str]  # every rule id


def run(facts: Facts, policy: Policy | None = None) -> Result:
    """Every enabled rule over the facts. The cyclic collector pauses meanwhile: the rules make no reference
    cycles, and each of its collections would rescan the facts (two thirds of a 500-file run's rule time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(facts, policy)
    finally:
        if enabled:
            gc.enable()


def _run(facts: Facts, policy: Policy | None) -> Result:
    policy = policy or Policy()
    derived = derive(facts)
    chosen = [r for r in rules() if policy.enabled(r.id)]
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    crashed: list[Skipped] = []
    withdrawn: list[Withdrawn] = []
    silenced: list[Silenced] = []
    available = {}  # per script: the same for every rule
    for r in chosen:
        if r.after_findings:
            continue
        reason = _missing(r, facts)
        if reason:
            skipped.append(Skipped(r.id, reason))
            continue
        # a launch rule also runs for each script that starts its own processes (Lightning), with that plan
        own_plans = [s for s in facts.scripts if s.path in derived.plans] if "plan" in r.params else []
        for script in (facts.scripts if r.per_script else [None] + own_plans):
            key = id(script)
            if key not in available:
                available[key] = _available(facts, derived, script, None)
            try:
                findings.extend(_run_rule(r, facts, derived, script, withdrawn, silenced, available[key]))
            except Exception as exc:  # a crashed check is a result, not a crash of the tool
                crashed.append(Skipped(r.id, f"{type(exc).__name__}: {exc}"))
    if facts.live is not None:
        findings.extend(_live_exception(facts, policy))
    findings = [f for f in findings if not policy.ignored_in(f.rule_id, f.path)]
    findings, use = _suppress(unique(findings, key=lambda f: (f.rule_id, f.message, f.locations)), facts, chosen)
    for r in chosen:
        if r.after_findings:
            findings.extend(_stamp(r, d, "") for d in r.func(**_inject(r, facts, derived, None, use)))
    findings.sort(key=Finding.sort_key)
    crashed = unique(crashed, key=lambda c: (c.rule_id, c.reason))
    return Result(tuple(findings), tuple(skipped), tuple(crashed), tuple(withdrawn),
                  tuple(unique(silenced, key=lambda s: s)))


def _missing(r: Rule, facts: Facts) -> str:
    """Why the facts the rule needs are not there ("" when they are)."""
    reasons = []
    for name in r.needs:
        if name == "machine" and not facts.machine.known:
            reasons.append(f"machine unknown: {facts.machine.reason}")
        elif name == "host" and facts.machine.host is None:
            reasons.append(f"host not probed ({facts.machine.source})")
        elif name == "live" and (facts.live is None or not facts.live.known):
            reasons.append(_live_missing(facts.live))
    return "; ".join(reasons)


def _live_missing(live) -> str:
    if live is None:
        return "live facts not gathered (use --live)"
    if not live.reached_training:
        return f"live facts not gathered: the live run {live.ended} before reaching training"
    return f"live facts not gathered: the live run saw no model at {live.stopped_at}"


def _inject(r: Rule, facts: Facts, derived: Derived, script, use: SuppressionUse | None, live="facts") -> dict:
    available = _available(facts, derived, script, use, live)
    return {p: available[p] for p in r.params}


def _available(facts: Facts, derived: Derived, script, use: SuppressionUse | None, live="facts") -> dict:
    """What a rule may name as a parameter, for one script (None: the run)."""
    live_known = facts.live is not None and facts.live.known
    stack = script.stack if script is not None and script.stack is not None else facts.stack  # its project's
    return {"facts": facts, "machine": facts.machine, "stack": stack, "launch": facts.launch,
            "plan": derived.plan_for(script.path) if script else derived.plan, "script": script,
            "setup": derived.setups.get(script.path) if script else None,
            "live": (facts.live if live_known else None) if live == "facts" else live, "suppressions": use,
            "job": facts.job}


def _run_rule(r: Rule, facts: Facts, derived: Derived, script, withdrawn: list[Withdrawn],
              silenced: list[Silenced], available: dict) -> list[Finding]:
    path = script.path if script else ""
    injected = {p: available[p] for p in r.params}
    reads = None
    if injected.get("setup") is not None:
        injected["setup"] = reads = _ReadRecorder(injected["setup"])
    drafts = list(r.func(**injected))
    if reads is not None and not drafts:
        silenced.extend(_silenced_by(r.id, path, reads.unknown))
    live_known = facts.live is not None and facts.live.known
    if live_known and "live" in r.params and "live" not in r.needs and not drafts:
        # the live model confirms nothing of what reading the script alone claimed: say what it withdrew
        static = list(r.func(**_inject(r, facts, derived, script, None, live=None)))
        withdrawn.extend(Withdrawn(r.id, d.message, path, _why_withdrawn(facts)) for d in static)
    return [_stamp(r, d, path) for d in drafts]


class _ReadRecorder:
    """The setup as a rule sees it, noting each derived fact the rule reads (as an attribute or a method's result)
    that is unknown: what kept the rule silent, for the report's unknowns."""

    __slots__ = ("_setup", "unknown")

    def __init__(self, setup):
        self._setup = setup
        self.unknown: list = []

    def __getattr__(self, name):
        value = getattr(self._setup, name)
        if callable(value):
            def recorded(*args, **kwargs):
                return self._note(name, value(*args, **kwargs))
            return recorded
        return self._note(name, value)

    def _note(self, name: str, value):
        if isinstance(value, Fact) and value.value is None and value.unknown and (value.source or value.call):
            self.unknown.append((name, value))
        return value


def _silenced_by(rule_id: str, path: str, unknown: list) -> list[Silenced]:
    out = []
    for name, fact in unknown:
        if fact.source is not None and fact.source.location is not None:
            where = (fact.source.location,)
        else:
            call = fact.call
            where = tuple(v.location or call.location for n, v in call.kwargs.items()
                          if n in fact.unknown and not v.known) or (call.location,)
        out.append(Silenced(rule_id, path, name, fact.unknown, where))
    return out


def _why_withdrawn(facts: Facts) -> str:
    live = facts.live
    parts = []
    if live.model and live.model.trainable_dtypes:
        parts.append("trainable parameters " + ", ".join(f"{d} x{n}" for d, n in live.model.trainable_dtypes.items()))
    if live.trainer:
        parts.append(f"Trainer wraps the model in: {live.trainer.wrap}")
    return "the live model shows " + "; ".join(parts) if parts else "the live model contradicts it"


def _live_exception(facts: Facts, policy: Policy) -> list[Finding]:
    """The exception a `--live --steps` run raised, as a finding of the rule whose declared log signature it
    matches (the same matching `explain` does)."""
    live = facts.live
    if live.ended != "raised" or live.error is None:
        return []
    r = match_exception(live.error.traceback, live.error.message)
    if r is None or not policy.enabled(r.id):
        return []
    where = tuple(Evidence(Location(f.file, f.line) if f.file else None, f.code,
                           f"{f.function}() raised here" if i == 0 else f"in {f.function}()", "live")
                  for i, f in enumerate(reversed(live.error.frames[-4:])))
    step = live.optimizer_steps
    kind, message = live.error.type, live.error.message
    draft = Draft(f"the live run raised it {'before the first optimizer step' if not step else f'after {step} steps'}"
                  f": {kind}: {message[:200]}",
                  evidence=where or (Evidence(None, f"live run at {live.stopped_at or 'the end'}", "exception",
                                              "live"),),
                  error=f"{kind}: {message[:400]}", phase=Phase.FIRST_STEP if not step else Phase.LATER_STEPS,
                  fix=Fix(r.fix))
    return [_stamp(r, draft, facts.scripts[0].path if facts.scripts else "")]


def _suppress(findings: list[Finding], facts: Facts, chosen: list[Rule]) -> tuple[list[Finding], SuppressionUse]:
    """Drop findings a `# precision-doctor: ignore[...]` comment on one of their lines names, and record which
    comments silenced something."""
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
    return kept, SuppressionUse(tuple(marks), frozenset(used), frozenset(r.id for r in chosen), frozenset(REGISTRY))


def _stamp(r: Rule, d: Draft, path: str) -> Finding:
    severity = r.severity
    if d.severity and SEVERITY_RANK[d.severity] >= SEVERITY_RANK[r.escalates_to]:
        severity = d.severity  # lower than declared, or up to the escalation the rule declares, never beyond
    fix = d.fix
    if fix is not None:
        fix = replace(fix, applicability=stricter(fix.applicability, r.applicability))
    confidence = Confidence(d.confidence)
    if any(e.origin == "env-default" for e in d.evidence):  # rests on a variable the environment may set otherwise
        confidence = Confidence.LIKELY
    return Finding(rule_id=r.id, name=r.name, severity=severity, message=d.message, path=d.path or path,
                   evidence=d.evidence, error=d.error or r.error, why=r.why, fix=fix,
                   phase=d.phase or r.phase, confidence=confidence)
