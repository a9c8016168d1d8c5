"""`precision-doctor explain`: read a training log or traceback and name the known failure behind it.

Signatures come from the rules' own declared error texts (so a new rule is recognised the day it is added),
plus the variants and tells the catalogue records: DataParallel frames, "Training with DataParallel", a
progress-bar total that halves between two runs, dtype-mismatch warnings, loss-scale storms. Logs are read
line by line, so a 100 MB log costs a few lines of memory.
"""

from __future__ import annotations

import io
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from .model.errors import InputError
from .rules.catalog import rules
from .rules.registry import Rule
from .system import sources

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
        return {
            "id": self.rule.id,
            "name": self.rule.name,
            "confidence": round(self.confidence, 2),
            "evidence": [text for _, text in lines],
            "lines": [n for n, _ in lines],
            "cause": self.rule.why,
            "error": self.rule.error,
            "fix": self.rule.fix,
        }


def diagnose(source: Iterable[str] | IO) -> list[Diagnosis]:
    """Scan a log once; rank the known causes by how well the log proves them. `source` is a stream (binary or
    text, read in chunks whatever its line lengths) or an iterable of lines."""
    sigs = signatures()
    anchors = _anchors(sigs)
    hits: dict[str, Diagnosis] = {}
    totals: list[tuple[int, int, str]] = []  # progress-bar totals seen, in order (line, total, text)
    number = 0  # lines before the current chunk
    chunks = _chunks_of_stream(source) if hasattr(source, "read") else _chunks_of_lines(source)
    for chunk in chunks:
        seen = number
        last = 0
        for start, wanted in sorted(_candidates(chunk, anchors).items()):
            seen += chunk.count(b"\n", last, start)
            last = start
            end = chunk.find(b"\n", start)
            line = chunk[start : end if end != -1 else len(chunk)][:MAX_LINE].decode("utf-8", "replace")
            _scan_line(seen + 1, line, [sigs[i] for i in sorted(wanted) if i >= 0], TQDM_PROBE in wanted, hits, totals)
        number += chunk.count(b"\n")
    _halving_progress_bar(totals, hits)
    for d in hits.values():
        d.confidence = _confidence(d, hits)
    ranked = sorted((d for d in hits.values() if d.confidence > 0), key=lambda d: (-d.confidence, d.rule.id))
    return ranked


def _scan_line(
    number: int,
    line: str,
    sigs: list[Signature],
    tqdm: bool,
    hits: dict[str, Diagnosis],
    totals: list[tuple[int, int, str]],
) -> None:
    m = _TQDM.search(line) if tqdm else None
    if m and int(m.group(2)) > 0 and (not totals or totals[-1][1] != int(m.group(2))):
        if len(totals) < 64:
            totals.append((number, int(m.group(2)), line.strip()[:200]))
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


# --- reading a log fast: only the lines that can match are searched ----------------------------------------------
# Almost every line of a training log matches nothing. Each pattern has a literal it cannot match without (its
# anchor); a chunk of the log's bytes is searched for the anchors (a fast substring search), and only the lines
# holding one are decoded and given to the regexes. Line ends are Python's universal newlines (\n, \r\n, \r: a
# progress bar's \r updates are lines of their own).

MAX_LINE = 4000  # bytes of a line that are searched and kept; the rest of a longer line is skipped unread
CHUNK = 1 << 19  # bytes read at a time
TQDM_PROBE = -1  # the progress-bar pattern's index among the anchored probes
# Metric names on nearly every line of a training log: a poor anchor when a pattern has another literal.
_EVERY_LINE = {"loss", "grad_norm", "step", "epoch", "learning_rate"}


def _anchors(sigs: list[Signature]) -> dict[bytes, set[int]]:
    """anchor -> indexes of the signatures (TQDM_PROBE for the progress bar) whose patterns need it. A pattern
    without a usable literal is anchored on b"" (every line); one whose anchor holds a shorter anchor is searched
    through that one (a line holding the longer holds the shorter)."""
    wanted: dict[bytes, set[int]] = {}
    probes = [(TQDM_PROBE, _TQDM)] + [(i, p) for i, sig in enumerate(sigs) for p in sig.patterns + sig.tells]
    for index, pattern in probes:
        wanted.setdefault(_anchor(pattern.pattern).encode("utf-8"), set()).add(index)
    out: dict[bytes, set[int]] = {}
    for anchor in sorted(wanted, key=len):
        inner = next((a for a in out if a in anchor), None)
        out.setdefault(anchor if inner is None else inner, set()).update(wanted[anchor])
    return out


def _anchor(pattern: str) -> str:
    """The longest run of literal characters the pattern matches in sequence at its top level ("" if none)."""
    try:
        from re import _parser as parser  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_parse as parser
    runs, run = [], ""
    for op, arg in parser.parse(pattern):
        if op is parser.LITERAL:
            run += chr(arg)
        else:
            runs.append(run)
            run = ""
    runs.append(run)
    runs = [r for r in runs if len(r) >= 2]
    usable = [r for r in runs if r.strip("'\"") not in _EVERY_LINE] or runs
    return max(usable, key=len, default="")


def _candidates(chunk: bytes, anchors: dict[bytes, set[int]]) -> dict[int, set[int]]:
    """Start offset of each line in `chunk` that holds an anchor -> the probes to run on it."""
    out: dict[int, set[int]] = {}
    for anchor, probes in anchors.items():
        at = chunk.find(anchor)
        while at != -1 and at < len(chunk):
            start = chunk.rfind(b"\n", 0, at) + 1
            out.setdefault(start, set()).update(probes)
            end = chunk.find(b"\n", at)
            if end == -1:
                break
            at = chunk.find(anchor, end + 1)
    return out


def _chunks_of_lines(lines: Iterable[str]) -> Iterator[bytes]:
    """Lines (with or without their newline) joined into chunks of whole lines."""
    batch: list[bytes] = []
    size = 0
    for raw in lines:
        line = raw.rstrip("\n").encode("utf-8", "replace")[:MAX_LINE] + b"\n"
        batch.append(line)
        size += len(line)
        if size >= CHUNK:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


def _chunks_of_stream(stream: IO) -> Iterator[bytes]:
    """Chunks of whole lines from a stream, in bounded memory: a line longer than MAX_LINE is cut there and the
    rest of it read past (a log of NUL bytes or one endless line costs CHUNK + MAX_LINE, not the file)."""
    carry = b""
    skipping = False  # inside the unread tail of an over-long line
    held_cr = b""  # a \r at the end of a read: half of a \r\n, or a line end of its own
    while True:
        data = stream.read(CHUNK)
        if not data:
            break
        if isinstance(data, str):  # a text stream has translated its line ends already
            data = data.encode("utf-8", "replace")
        if held_cr:
            data = held_cr + data
        held_cr = b"\r" if data.endswith(b"\r") else b""
        if b"\r" in data:
            data = data[: len(data) - len(held_cr)].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if skipping:
            cut = data.find(b"\n")
            if cut == -1:
                continue
            data, skipping = data[cut + 1 :], False
        if carry:
            data = carry + data
        cut = data.rfind(b"\n")
        carry = data[cut + 1 :]
        if cut != -1:
            yield data[: cut + 1]
        if len(carry) > MAX_LINE:
            yield carry[:MAX_LINE] + b"\n"
            carry, skipping = b"", True
    if carry and not skipping:
        yield carry


def open_log(path: str) -> tuple[IO, str]:
    """The log to read and its name: a regular file or a pipe (`explain <(cmd)`), or stdin for "-". A folder, a
    device or anything else is refused (one line, exit 2); opening never waits for a FIFO's writer."""
    if path == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise InputError("explain: give a log file, or pipe one in (`... 2>&1 | precision-doctor explain`)")
        try:
            mode = os.fstat(sys.stdin.fileno()).st_mode
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            mode = stat.S_IFIFO  # a stream without a descriptor (embedded use): read what it gives
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise InputError(f"explain: stdin is {sources.kind(mode)}, not a log; pipe or name the log file")
        return getattr(sys.stdin, "buffer", sys.stdin), "stdin"
    info = _log_status(path)
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path}: is a directory; give the log file")
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
        raise InputError(f"{path}: not a log file ({sources.kind(info.st_mode)}); give the path of a training log")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(
            f"{path}: cannot be read ({sources.os_reason(exc)}); give the path of a training log"
        ) from None
    opened = os.fstat(fd).st_mode
    if not (stat.S_ISREG(opened) or stat.S_ISFIFO(opened)):  # swapped since the check
        os.close(fd)
        raise InputError(f"{path}: not a log file ({sources.kind(opened)}); give the path of a training log")
    os.set_blocking(fd, True)  # a pipe's writer may be slower than the reader
    return os.fdopen(fd, "rb"), path


def _log_status(path: str) -> os.stat_result:
    try:
        return sources.status(path)
    except sources.Unreadable as exc:
        raise InputError(f"{path}: cannot be read ({exc.reason}); give the path of a training log") from None


def _halving_progress_bar(totals: list[tuple[int, int, str]], hits: dict[str, Diagnosis]) -> None:
    """The same run shows N steps, then N/2: a second stage ran under DataParallel (a tell of the rules that
    declare it)."""
    for i, (n1, t1, text1) in enumerate(totals):
        for n2, t2, text2 in totals[i + 1 :]:
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
