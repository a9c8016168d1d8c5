"""`precision-doctor explain`: read a training log or traceback and name the known failure behind it.

Signatures come from the rules' own declared error texts (so a new rule is recognised the day it is added),
plus the variants and tells the catalogue records: DataParallel frames, "Training with DataParallel", a
progress-bar total that halves between two runs, dtype-mismatch warnings, loss-scale storms. Logs are read
line by line, so a 100 MB log costs a few lines of memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from .catalog import get_rule, rules
from .registry import Rule

MAX_EVIDENCE = 4  # log lines kept per signature
_TQDM = re.compile(r"\b(\d+)/(\d+) \[")


def _declared_signature(r: Rule) -> str | None:
    """The fixed part of a rule's declared exception message, as a regex."""
    m = re.match(r"^(?:[\w.]+(?:Error|Exception|Warning|Interrupt)): (.+)$", r.error, re.S)
    if not m:
        return None
    text = m.group(1).split("\n")[0]
    text = re.split(r"\{|\.\.\.|, but got: |\. Please |\. This error", text)[0].strip()
    if len(text) < 12:
        return None
    return re.escape(text[:90]).replace(r"\ ", " ")


@dataclass
class Signature:
    rule: Rule
    patterns: list[re.Pattern]
    tells: list[re.Pattern]


def signatures() -> list[Signature]:
    """Every rule's declared log signature: its error text (where that proves it) and its variants and tells."""
    out = []
    for r in rules():
        if not r.log.from_logs:
            continue
        declared = _declared_signature(r) if r.log.error_is_signature else None
        pats = [p for p in (declared,) if p] + list(r.log.patterns)
        if not pats and not r.log.tells:
            continue
        out.append(Signature(r, [re.compile(p) for p in pats], [re.compile(t) for t in r.log.tells]))
    return out


@dataclass
class Diagnosis:
    rule: Rule
    confidence: float
    evidence: list[tuple[int, str]] = field(default_factory=list)
    tells: list[tuple[int, str]] = field(default_factory=list)
    count: int = 0  # error lines seen
    tell_count: int = 0  # tell lines seen

    def to_json(self) -> dict:
        lines = sorted(set(self.evidence + self.tells))
        return {"id": self.rule.id, "name": self.rule.name, "confidence": round(self.confidence, 2),
                "evidence": [text for _, text in lines], "lines": [n for n, _ in lines], "cause": self.rule.why,
                "error": self.rule.error, "fix": self.rule.fix}


def diagnose(stream: Iterable[str]) -> list[Diagnosis]:
    """Scan a log once; rank the known causes by how well the log proves them."""
    sigs = signatures()
    # one search per line for the common case of a line that matches nothing
    anything = re.compile("|".join(f"(?:{p.pattern})" for sig in sigs for p in sig.patterns + sig.tells))
    hits: dict[str, Diagnosis] = {}
    totals: list[tuple[int, int, str]] = []  # progress-bar totals seen, in order (line, total, text)
    for number, raw in enumerate(stream, 1):
        line = raw.rstrip("\n")
        if len(line) > 4000:
            line = line[:4000]
        m = _TQDM.search(line)
        if m and int(m.group(2)) > 0 and (not totals or totals[-1][1] != int(m.group(2))):
            if len(totals) < 64:
                totals.append((number, int(m.group(2)), line.strip()[:200]))
        if not anything.search(line):
            continue
        for sig in sigs:
            if any(p.search(line) for p in sig.patterns):
                d = hits.setdefault(sig.rule.id, Diagnosis(sig.rule, 0.0))
                d.count += 1
                if len(d.evidence) < MAX_EVIDENCE:
                    d.evidence.append((number, line.strip()))
            if sig.tells and any(t.search(line) for t in sig.tells):
                d = hits.setdefault(sig.rule.id, Diagnosis(sig.rule, 0.0))
                d.tell_count += 1
                if len(d.tells) < MAX_EVIDENCE:
                    d.tells.append((number, line.strip()))
    _halving_progress_bar(totals, hits)
    for d in hits.values():
        d.confidence = _confidence(d, hits)
    ranked = sorted((d for d in hits.values() if d.confidence > 0), key=lambda d: (-d.confidence, d.rule.id))
    return ranked


def _halving_progress_bar(totals: list[tuple[int, int, str]], hits: dict[str, Diagnosis]) -> None:
    """The same run shows N steps, then N/2: a second stage ran under DataParallel (a tell of the rules that
    declare it)."""
    for i, (n1, t1, text1) in enumerate(totals):
        for n2, t2, text2 in totals[i + 1:]:
            if t1 == 2 * t2 or t1 == 2 * t2 - 1:
                for r in rules():
                    if r.log.halving_progress:
                        d = hits.setdefault(r.id, Diagnosis(r, 0.0))
                        d.tells.extend([(n1, text1), (n2, text2)])
                        d.tell_count += 2
                return


def _confidence(d: Diagnosis, hits: dict[str, Diagnosis]) -> float:
    """How well the log proves the rule, from what its declaration says each kind of line is worth."""
    log = d.rule.log
    proven = log.proven if log.proven is not None else 0.9 if d.rule.severity == "error" else 0.5
    told = d.tell_count >= log.tells_needed
    if d.evidence and d.tells:
        conf = log.both if log.both is not None else proven
    elif d.evidence:
        conf = proven
    else:
        conf = log.tells_alone if told else 0.0
    if conf and any(other in hits and hits[other].tells for other in log.yields_to):
        conf = min(conf, log.yielding)
    return conf


def match_exception(traceback: str, message: str = "") -> Rule | None:
    """The rule an exception's traceback proves (confidence at least 0.5), or None."""
    lines = traceback.split("\n") if traceback else [message]
    found = [d for d in diagnose(lines) if d.confidence >= 0.5]
    return found[0].rule if found else None
