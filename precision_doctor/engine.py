"""The runner: every enabled rule over the facts, each finding stamped with its rule's declaration, ranked.

The facts come in whole, or with some scripts already judged by `Judge` (the per-script half of a run) in the
worker process that probed them; the engine derives each script's setup once, injects what each rule's parameters
name, and applies the policy: selection, per-file ignores, inline suppressions. A
rule's findings can never exceed its declaration: the severity only up to the declared escalation, the
fix's applicability never looser than declared.
"""

from __future__ import annotations

import gc
from dataclasses import field, replace

from .derive import Derived, derive_setup, plan_launch
from .derive.launch import LaunchPlan, plan_of_script
from .derive.memory_plan import plan_memory_for
from .derive.setup import Fact, Setup
from .diagnose import match_exception
from .model.facts import Facts, Location, ScriptFacts, Suppression
from .model.findings import SEVERITY_RANK, Confidence, Draft, Evidence, Finding, Fix, Phase, Severity, stricter
from .model.util import record, unique
from .rules.catalog import rules
from .rules.registry import REGISTRY, Rule
from .settings import Policy
from .system import content_cache


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
    setups: dict[str, Setup] = field(default_factory=dict)  # each script judged in this process: its derived setup
    plan: LaunchPlan | None = None  # the run's launch plan: processes per node and the rendezvous port


@record
class SuppressionUse:
    """What the suppression comments did, for the rules that judge them (PD001)."""

    marks: tuple[Suppression, ...]
    used: frozenset[tuple[str, str, int]]  # (rule id or "*", path, line) of each comment that silenced something
    enabled: frozenset[str]  # the rules this run checked
    known: frozenset[str]  # every rule id


@record
class ScriptVerdict:
    """What the rules that judge one script found there: each result with the position of its rule in the run,
    so that scripts judged anywhere (here, or in the worker process that probed them) merge into the order of one
    loop over the rules. A script judged in this process keeps its setup (a worker sends back only the results)."""

    results: tuple[tuple[int, str, object], ...]  # (rule position, "finding" | "crashed" | "withdrawn" |
    #                                                "silenced", the result)
    setup: Setup | None = None


class Judge:
    """The per-script half of a run: the rules that judge each script on its own (and the launch rules, for a
    script that starts its processes itself), over the run's machine, launch and job. Needs none of the other
    scripts, so a worker process runs it on the script it just probed and sends back only the results, not the
    script's facts."""

    def __init__(self, facts: Facts, policy: Policy | None = None, keep_setups: bool = False):
        self.facts = facts
        self.keep_setups = keep_setups
        self.policy = policy or Policy()
        self.chosen = [r for r in rules() if self.policy.enabled(r.id)]
        self.plan = plan_launch(facts.launch, facts.machine, facts.stack)
        self.runnable = [(i, r) for i, r in enumerate(self.chosen) if not r.after_findings and not _missing(r, facts)]

    def key(self) -> str | None:
        """A digest of everything a verdict depends on besides the script (the run's facts without scripts, its
        launch plan, the rules chosen; the rules' own code is in every cache entry's fingerprint); None where it
        cannot be taken, and then no verdict is cached."""
        context = replace(self.facts, scripts=(), jobs=(), context=())
        return content_cache.digest((context, self.plan, self.policy, [r.id for r in self.chosen], self.keep_setups))

    def __call__(self, script: ScriptFacts) -> ScriptVerdict:
        facts = self.facts
        setup = derive_setup(script, facts)
        own = plan_of_script(self.plan, setup.accelerator, script.imports, facts.launch, facts.machine)
        derived = Derived(self.plan, {script.path: setup}, {script.path: own} if own is not self.plan else {})
        available = _available(facts, derived, script, None)
        results: list[tuple[int, str, object]] = []
        for i, r in self.runnable:
            # a launch rule also runs for a script that starts its own processes (Lightning), with that plan
            if not (r.per_script or ("plan" in r.params and script.path in derived.plans)):
                continue
            results.extend(_judged(i, r, facts, derived, script, available))
        return ScriptVerdict(tuple(results), setup if self.keep_setups else None)


def _judged(
    position: int, r: Rule, facts: Facts, derived: Derived, script, available: dict
) -> list[tuple[int, str, object]]:
    withdrawn: list[Withdrawn] = []
    silenced: list[Silenced] = []
    try:
        found: list = [
            (position, "finding", f) for f in _run_rule(r, facts, derived, script, withdrawn, silenced, available)
        ]
    except Exception as exc:  # a crashed check is a result, not a crash of the tool
        found = [(position, "crashed", Skipped(r.id, f"{type(exc).__name__}: {exc}"))]
    return found + [(position, "withdrawn", w) for w in withdrawn] + [(position, "silenced", s) for s in silenced]


def run(facts: Facts, policy: Policy | None = None, verdicts: tuple[ScriptVerdict | None, ...] | None = None) -> Result:
    """Every enabled rule over the facts. `verdicts`, one per script (or None), are scripts already judged
    (`Judge`) where they were probed: those scripts' facts may come without their calls. The cyclic collector
    pauses meanwhile: the rules make no reference cycles, and each of its collections would rescan the facts
    (two thirds of a 500-file run's rule time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        result = _run(facts, policy, verdicts)
    finally:
        if enabled:
            gc.enable()
    if facts.context:  # an importer's own findings (every place in the importer) are not the named helper's
        kept = [f for f in result.findings if not f.locations or any(p.path not in facts.context for p in f.locations)]
        result = replace(result, findings=tuple(kept))
    return result


def _run(facts: Facts, policy: Policy | None, verdicts: tuple[ScriptVerdict | None, ...] | None) -> Result:
    if not facts.jobs:
        return _run_one(facts, policy, verdicts)
    # a folder's job scripts, each its own run; a finding two runs share (a module both import) is listed once
    results = [_run_one(replace(facts, jobs=()), policy, verdicts)] + [_job_run(run, policy) for run in facts.jobs]
    main = results[0]
    return Result(
        tuple(sorted(unique([f for r in results for f in r.findings], key=_same), key=Finding.sort_key)),
        main.skipped,
        tuple(unique([c for r in results for c in r.crashed], key=lambda c: (c.rule_id, c.reason))),
        tuple(w for r in results for w in r.withdrawn),
        tuple(unique([x for r in results for x in r.silenced], key=lambda x: x)),
        {k: v for r in results for k, v in r.setups.items()},
        main.plan,
    )


def _job_run(run: Facts, policy: Policy | None) -> Result:
    """A job's run: its findings on the launch and the machine (no file) are the job script's."""
    result = _run(run, policy, None)
    if run.job is None:
        return result
    return replace(result, findings=tuple(f if f.path else replace(f, path=run.job.path) for f in result.findings))


def _same(f: Finding) -> tuple:
    """What makes two findings one: the rule, the message and the places (a module two scripts import)."""
    return (f.rule_id, f.message, f.locations)


def _run_one(facts: Facts, policy: Policy | None, verdicts: tuple[ScriptVerdict | None, ...] | None) -> Result:
    policy = policy or Policy()
    judge = Judge(facts, policy, keep_setups=True)
    chosen = judge.chosen
    derived = Derived(judge.plan, {})  # the run's: no script's setup
    results: list[tuple[int, int, str, object]] = []  # (rule position, script position or -1, kind, result)
    setups: dict[str, Setup] = {}
    for n, script in enumerate(facts.scripts):
        verdict = verdicts[n] if verdicts is not None and verdicts[n] is not None else judge(script)
        results.extend((i, n, kind, item) for i, kind, item in verdict.results)
        if verdict.setup is not None:
            setups[script.path] = verdict.setup
    run_level = [(i, r) for i, r in judge.runnable if not r.per_script]
    available = _available(facts, derived, None, None)
    for i, r in run_level:
        results.extend((i, -1, kind, item) for _, kind, item in _judged(i, r, facts, derived, None, available))
    results.sort(key=lambda x: (x[0], x[1]))  # rule by rule, the run before its scripts: one loop's order
    findings: list[Finding] = [item for _, _, kind, item in results if kind == "finding"]
    crashed = [item for _, _, kind, item in results if kind == "crashed"]
    withdrawn = [item for _, _, kind, item in results if kind == "withdrawn"]
    silenced = [item for _, _, kind, item in results if kind == "silenced"]
    skipped = [Skipped(r.id, _missing(r, facts)) for r in chosen if not r.after_findings and _missing(r, facts)]
    if facts.live is not None:
        findings.extend(_live_exception(facts, policy))
    findings = [f for f in findings if not policy.ignored_in(f.rule_id, f.path)]
    findings, use = _suppress(unique(findings, key=_same), facts, chosen)
    for r in chosen:
        if r.after_findings:
            findings.extend(_stamp(r, d, "") for d in r.func(**_inject(r, facts, derived, None, use)))
    findings.sort(key=Finding.sort_key)
    crashed = unique(crashed, key=lambda c: (c.rule_id, c.reason))
    return Result(
        tuple(findings),
        tuple(skipped),
        tuple(crashed),
        tuple(withdrawn),
        tuple(unique(silenced, key=lambda s: s)),
        setups,
        judge.plan,
    )


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
    return _Available(
        {
            "facts": facts,
            "machine": facts.machine,
            "stack": stack,
            "launch": facts.launch,
            "plan": derived.plan_for(script.path) if script else derived.plan,
            "script": script,
            "setup": derived.setups.get(script.path) if script else None,
            "live": (facts.live if live_known else None) if live == "facts" else live,
            "suppressions": use,
            "job": facts.job,
        }
    )


class _Available(dict):
    """The values rules may name. `memory` is the script's memory plan, derived on the first call of the rule that
    asks for it and kept for the next (a function, so that a rule which returns before it needs the plan has not
    read it: the unknowns the plan read kept only the rules that read it silent)."""

    def __missing__(self, key: str):
        if key != "memory":
            raise KeyError(key)
        self["memory"] = self._memory
        return self._memory

    def _memory(self):
        if _MEMORY in self:
            return self[_MEMORY]
        script, setup = self["script"], self["setup"]
        reads = _ReadRecorder(setup) if setup is not None else None  # what kept the memory rules silent
        self[_MEMORY] = plan_memory_for(reads, script, self["facts"], self["plan"]) if reads is not None else None
        self[_MEMORY_READS] = reads.unknown if reads is not None else []
        return self[_MEMORY]


_MEMORY, _MEMORY_READS = "memory plan", "memory plan reads"  # kept beside the values, under names no rule can take


def _run_rule(
    r: Rule,
    facts: Facts,
    derived: Derived,
    script,
    withdrawn: list[Withdrawn],
    silenced: list[Silenced],
    available: dict,
) -> list[Finding]:
    path = script.path if script else ""
    injected = {p: available[p] for p in r.params}
    read_memory: list[bool] = []
    if "memory" in injected:
        plan = injected["memory"]
        injected["memory"] = lambda: read_memory.append(True) or plan()
    reads = None
    if injected.get("setup") is not None:
        injected["setup"] = reads = _ReadRecorder(injected["setup"])
    drafts = list(r.func(**injected))
    if not drafts:
        unknown = (reads.unknown if reads is not None else []) + (available[_MEMORY_READS] if read_memory else [])
        silenced.extend(_silenced_by(r.id, path, unknown))
        if read_memory:
            silenced.extend(_no_memory_plan(r.id, path, available[_MEMORY], available.get("setup")))
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


# why a script has no memory plan that says nothing about the script: no GPU to judge against, or no model
_NOT_THE_SCRIPTS = ("no model load found", "no GPU on the target machine", "the GPU's memory is not known")


def _no_memory_plan(rule_id: str, path: str, plan, setup) -> list[Silenced]:
    """A memory rule silent because the script's memory could not be estimated (an unknown checkpoint, one stored
    quantized, a parallelism the estimate does not model): the reason, at the model's load."""
    if not isinstance(plan, str) or plan.startswith(_NOT_THE_SCRIPTS) or setup is None or setup.model_load is None:
        return []
    return [Silenced(rule_id, path, "memory", plan, (setup.model_load.location,))]


def _silenced_by(rule_id: str, path: str, unknown: list) -> list[Silenced]:
    out = []
    for name, fact in unknown:
        if fact.source is not None and fact.source.location is not None:
            where = (fact.source.location,)
        else:
            call = fact.call
            where = tuple(
                v.location or call.location for n, v in call.kwargs.items() if n in fact.unknown and not v.known
            ) or (call.location,)
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
    where = tuple(
        Evidence(
            Location(f.file, f.line) if f.file else None,
            f.code,
            f"{f.function}() raised here" if i == 0 else f"in {f.function}()",
            "live",
        )
        for i, f in enumerate(reversed(live.error.frames[-4:]))
    )
    step = live.optimizer_steps
    kind, message = live.error.type, live.error.message
    draft = Draft(
        f"the live run raised it {'before the first optimizer step' if not step else f'after {step} steps'}"
        f": {kind}: {message[:200]}",
        evidence=where or (Evidence(None, f"live run at {live.stopped_at or 'the end'}", "exception", "live"),),
        error=f"{kind}: {message[:400]}",
        phase=Phase.FIRST_STEP if not step else Phase.LATER_STEPS,
        fix=Fix(r.fix),
    )
    return [_stamp(r, draft, facts.scripts[0].path if facts.scripts else "")]


def _suppress(findings: list[Finding], facts: Facts, chosen: list[Rule]) -> tuple[list[Finding], SuppressionUse]:
    """Drop findings a `# precision-doctor: ignore[...]` comment on one of their lines names, and record which
    comments silenced something."""
    marks = unique(
        (s for script in facts.scripts for s in script.suppressions), key=lambda s: (s.location.path, s.location.line)
    )
    by_line = {(s.location.path, s.location.line): s for s in marks}
    used: set[tuple[str, str, int]] = set()
    kept = []
    for f in findings:
        hit = next(
            (
                by_line[(loc.path, loc.line)]
                for loc in f.locations
                if (loc.path, loc.line) in by_line
                and (not by_line[(loc.path, loc.line)].ids or f.rule_id in by_line[(loc.path, loc.line)].ids)
            ),
            None,
        )
        if hit is None:
            kept.append(f)
        else:
            used.add((f.rule_id if hit.ids else "*", hit.location.path, hit.location.line))
    return kept, SuppressionUse(tuple(marks), frozenset(used), frozenset(r.id for r in chosen), frozenset(REGISTRY))


def _stamp(r: Rule, d: Draft, path: str) -> Finding:
    severity = r.severity
    if d.severity and SEVERITY_RANK[d.severity] >= SEVERITY_RANK[r.escalates_to]:
        severity = Severity(d.severity)  # lower than declared, or up to the escalation the rule declares, never beyond
    fix = d.fix
    if fix is not None:
        fix = replace(fix, applicability=stricter(fix.applicability, r.applicability))
    confidence = Confidence(d.confidence)
    if any(e.origin == "env-default" for e in d.evidence):  # rests on a variable the environment may set otherwise
        confidence = Confidence.LIKELY
    return Finding(
        rule_id=r.id,
        name=r.name,
        severity=severity,
        message=d.message,
        path=d.path or path,
        evidence=d.evidence,
        error=d.error or r.error,
        why=r.why,
        fix=fix,
        phase=Phase(d.phase) if d.phase else r.phase,
        confidence=confidence,
    )
