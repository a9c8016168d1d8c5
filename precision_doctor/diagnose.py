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

from .engine import Rule, rules

MAX_EVIDENCE = 4  # log lines kept per signature

# Variants of a rule's error the declared text does not cover (older messages, other libraries' wording).
VARIANTS: dict[str, tuple[str, ...]] = {
    "PD203": (r"expected dtype c10::BFloat16 for `?end`? but got dtype float",
              r"Tensors of the same index must be on the same device and the same dtype"),
    "PD208": (r"mat1 and mat2 must have the same dtype", r"expected mat1 and mat2 to have the same dtype",
              r"Input type \(.*\) and weight type \(.*\) should be the same",
              r"expected scalar type (Half|BFloat16) but found Float"),
    "PD301": (r"mat1 and mat2 must have the same dtype", r"expected mat1 and mat2 to have the same dtype",
              r"module must have its parameters and buffers on device cuda:0 \(device_ids\[0\]\)",
              r"Caught RuntimeError in replica \d+ on device \d+"),
    "PD110": (r"Address already in use", r"EADDRINUSE", r"another process is utilizing it",
              r"failed to bind to .*:\d+ \(errno: 98"),
    "PD108": (r"CUDA-capable device\(s\) is/are busy or unavailable", r"all CUDA-capable devices are busy"),
    "PD109": (r"CUDA-capable device\(s\) is/are busy or unavailable",),
    "PD401": (r"`\.to` is not supported for `4-bit` or `8-bit` bitsandbytes models",
              r"`\.half\(\)` is not supported for quantized model", r"`\.float\(\)` is not supported for quantized"),
    "PD204": (r"['\"]?loss['\"]?\s*[:=]\s*['\"]?nan", r"['\"]?loss['\"]?\s*[:=]\s*['\"]?inf\b"),
    "PD210": (r"['\"]?(loss|grad_norm)['\"]?\s*[:=]\s*['\"]?nan",),
    "PD503": (r"Current loss scale already at minimum",),
    "PD111": (r"invalid device ordinal",),
    "PD106": (r"FlashAttention only supports Ampere GPUs or newer",),
    "PD215": (r"FlashAttention only support fp16 and bf16 data type",
              r"Flash Attention 2\.0 only supports torch\.float16 and torch\.bfloat16"),
    "PD216": (r"unexpected keyword argument 'tokenizer'",),
    "PD406": (r"unexpected keyword argument 'load_in_(4|8)bit'", r"load_in_4bit` and `load_in_8bit` arguments are "
              r"deprecated"),
    "PD504": (r"Must flatten tensors with uniform dtype", r"requires uniform dtype",
              r"Cannot flatten integer dtype tensors", r"Integer parameters are unsupported"),
    "PD402": (r"Input type into Linear4bit is torch\.\w+, but bnb_4bit_compute_dtype=torch\.float32",),
    "PD304": (r"Cannot copy out of meta tensor", r"You can't move a model that has some modules offloaded"),
    "PD101": (r"Your setup doesn't support bf16/gpu", r"bf16 mixed precision requires PyTorch >= 1\.10 and a "
              r"supported device", r"Current CUDA Device does not support bfloat16",
              r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0"),
    "PD105": (r"can only be used on CUDA", r"User provided device_type of 'cuda', but CUDA is not available"),
    "PD104": (r"compute capability 8\.9 or higher required for FP8", r"requires `transformer_engine` or `MS-AMP`",
              r"no FP8-compatible backend was installed"),
}

# Lines that point at one rule among several sharing an error text.
TELLS: dict[str, tuple[str, ...]] = {
    "PD301": (r"torch/nn/parallel/data_parallel\.py", r"Training with DataParallel", r"parallel_apply\.py"),
    "PD113": (r"Mismatch dtype between input and weight",),
    "PD503": (r"Gradient overflow\. +Skipping step",),
    "PD201": (r"grad_scaler\.py", r"unscale_"),
}
STORM = 5  # "Gradient overflow. Skipping step" this many times is a collapsing loss scale
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


# An out-of-memory error has many causes: the log alone never proves these rules.
NOT_FROM_LOGS = {"PD001", "PD115", "PD109"}


def signatures() -> list[Signature]:
    out = []
    for r in rules():
        if r.id in NOT_FROM_LOGS and r.id not in VARIANTS:
            continue
        declared = _declared_signature(r) if r.id not in NOT_FROM_LOGS else None
        pats = [p for p in (declared,) if p] + list(VARIANTS.get(r.id, ()))
        if not pats and r.id not in TELLS:
            continue
        out.append(Signature(r, [re.compile(p) for p in pats], [re.compile(t) for t in TELLS.get(r.id, ())]))
    return out


@dataclass
class Diagnosis:
    rule: Rule
    confidence: float
    evidence: list[tuple[int, str]] = field(default_factory=list)
    tells: list[tuple[int, str]] = field(default_factory=list)
    count: int = 0

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
                if len(d.tells) < MAX_EVIDENCE:
                    d.tells.append((number, line.strip()))
                if sig.rule.id == "PD503":
                    d.count += 1
    _halving_progress_bar(totals, hits)
    for d in hits.values():
        d.confidence = _confidence(d, hits)
    ranked = sorted((d for d in hits.values() if d.confidence > 0), key=lambda d: (-d.confidence, d.rule.id))
    return ranked


def _halving_progress_bar(totals: list[tuple[int, int, str]], hits: dict[str, Diagnosis]) -> None:
    """Seed 003's tell: the same run shows N steps, then N/2: a second stage ran under DataParallel."""
    for i, (n1, t1, text1) in enumerate(totals):
        for n2, t2, text2 in totals[i + 1:]:
            if t1 == 2 * t2 or t1 == 2 * t2 - 1:
                d = hits.setdefault("PD301", Diagnosis(next(r for r in rules() if r.id == "PD301"), 0.0))
                d.tells.extend([(n1, text1), (n2, text2)])
                return


def _confidence(d: Diagnosis, hits: dict[str, Diagnosis]) -> float:
    rid = d.rule.id
    if rid == "PD503":  # a storm of skipped steps, or the final abort
        aborted = any("minimum" in text for _, text in d.evidence)
        storms = sum(1 for _, t in d.tells if "Gradient overflow" in t)
        return 0.9 if aborted else 0.6 if d.count >= STORM or storms >= STORM else 0.0
    if rid == "PD301":
        if d.tells and d.evidence:
            return 0.95
        return 0.5 if d.tells else 0.35 if d.evidence else 0.0
    if rid == "PD208":
        return 0.3 if "PD301" in hits and hits["PD301"].tells else 0.6 if d.evidence else 0.0
    if rid in ("PD204", "PD210"):
        return 0.45 if d.evidence else 0.0
    if rid in ("PD108", "PD109") and d.evidence:
        return 0.6
    if rid == "PD113":
        return 0.4 if d.tells else 0.0
    if rid == "PD201" and not d.evidence:
        return 0.0  # GradScaler frames alone prove nothing
    if not d.evidence:
        return 0.0
    return 0.9 if d.rule.severity == "error" else 0.5  # a warning in a log is a clue, not the crash

