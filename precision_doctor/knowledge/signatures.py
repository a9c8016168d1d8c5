"""Which keywords a library class or function accepts at the version a script runs with: TrainingArguments and its
subclasses, TRL's configs, trainers and ModelConfig, BitsAndBytesConfig, peft's configs, Trainer.__init__,
from_pretrained.

Two sources, one answer: the installed package's own source when the training environment has it (read by
probes/signatures.py into `StackFacts.signatures`), else the table generated from the released wheels
(data/signatures.json, built by tools/gen_signatures.py: each field with the releases that accept it, one release per
minor version). A class inherits the keywords of its bases, each at the version of its own package (TRL's SFTConfig
takes TrainingArguments' fields as the installed transformers declares them). The table is data shipped with the
doctor, read once; nothing here looks at the user's files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path

from ..model.facts import ClassFacts, PackageVersion, StackFacts, VersionSource
from ..model.util import record

PACKAGES = {
    "transformers": "transformers",
    "trl": "trl",
    "peft": "peft",
    "sentence_transformers": "sentence-transformers",
    "llamafactory": "llamafactory",
}  # import name -> distribution
BY_PATCH = {"llamafactory"}  # read at every release (tools/gen_signatures.py): looked up by release, not minor
# The dataclasses `llamafactory-cli train` fills from a recipe (hparams/parser.py _TRAIN_ARGS); before its own
# TrainingArguments (0.9.2) the third was transformers' Seq2SeqTrainingArguments.
LLAMAFACTORY_TRAIN = (
    "llamafactory.ModelArguments",
    "llamafactory.DataArguments",
    "llamafactory.TrainingArguments",
    "llamafactory.FinetuningArguments",
    "llamafactory.GeneratingArguments",
)
LLAMAFACTORY_TRAINING_BEFORE = "transformers.Seq2SeqTrainingArguments"
LOADER = "transformers.from_pretrained"  # keywords of from_pretrained; the rest goes to the model's config
TRAINERS = ("transformers.Trainer", "transformers.Seq2SeqTrainer")
# Keywords a rule of their own reports, with what only it knows (a deprecation window, a refusal next to another
# keyword): keyword-not-accepted (PD217) leaves them to it. Each is judged with the same fields (accepted()).
SPECIALISED = {
    (LOADER, "load_in_4bit"): "PD406",
    (LOADER, "load_in_8bit"): "PD406",
    (TRAINERS[0], "tokenizer"): "PD216",
    (TRAINERS[1], "tokenizer"): "PD216",
}


@lru_cache(maxsize=1)
def table() -> dict:
    # the package's own file (importlib.resources would import a zip reader for it: a tenth of a check's start)
    return json.loads((Path(__file__).resolve().parent / "data" / "signatures.json").read_text("utf-8"))


def class_id(callee: str) -> str | None:
    """The table's id of a library callee as the script names it: `transformers.training_args.TrainingArguments` ->
    `transformers.TrainingArguments`, `trl.experimental.orpo.ORPOConfig` -> `trl.experimental.ORPOConfig`,
    `AutoModelForCausalLM.from_pretrained` -> the loader. None: not a class the table knows."""
    top, _, rest = callee.partition(".")
    if top not in PACKAGES or not rest:
        return None
    parts = callee.split(".")
    if top == "transformers" and parts[-1] == "from_pretrained":
        return LOADER
    last = parts[-1]
    classes = table()["classes"]
    for candidate in (f"{top}.experimental.{last}", f"{top}.{last}") if "experimental" in parts else (f"{top}.{last}",):
        if candidate in classes:
            return candidate
    return None


# --- versions -> the release the table read -----------------------------------------------------


def _minor_key(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    except ValueError:
        return None


def table_key(package: str, version: str) -> str:
    """The table's name for the release that stands for a version: its minor, or for a BY_PATCH package itself."""
    return version if package in BY_PATCH else ".".join(version.split(".")[:2])


def _release_key(package: str, version: str) -> tuple[int, ...] | None:
    """What a version is looked up by: its minor, or for a BY_PATCH package its release (`0.9.6.dev0` -> 0.9.6)."""
    if package not in BY_PATCH:
        return _minor_key(version)
    from .versions import parse_version

    parts = parse_version(version)
    return None if parts is None else (parts + (0, 0))[:3]


@lru_cache(maxsize=64)
def _minors(package: str) -> tuple[str, ...]:
    """The minor releases the table read, oldest first (the order its ranges count in)."""
    return tuple(sorted(table()["releases"].get(package, {}), key=lambda m: _release_key(package, m) or ()))


@lru_cache(maxsize=256)
def release_index(package: str, version: str) -> int | None:
    """Which of the table's releases stands for this version: its minor (or the newest older one read); the newest
    for a version past the table. None: older than the table, or no version."""
    minors = _minors(package)
    key = _release_key(package, version) if version else None
    if key is None or not minors:
        return None
    keys = [_release_key(package, m) for m in minors]
    if key < keys[0]:
        return None
    return max(i for i, k in enumerate(keys) if k <= key)


def beyond_table(package: str, version: str) -> bool:
    """A release newer than any the table was generated from (it is judged as the newest one read)."""
    minors = _minors(package)
    key = _release_key(package, version) if version else None
    newest = _release_key(package, minors[-1]) if minors else None
    return newest is not None and key is not None and key > newest


@lru_cache(maxsize=4096)
def _indices(package: str, spans: str) -> frozenset[int]:
    """ "4.36-4.45,5.3,5.10-" -> the indices of the releases it covers."""
    minors = _minors(package)
    where = {m: i for i, m in enumerate(minors)}
    out: set[int] = set()
    for span in filter(None, spans.split(",")):
        first, dash, last = span.partition("-")
        lo = where.get(first)
        hi = (len(minors) - 1 if not last else where.get(last)) if dash else lo
        if lo is not None and hi is not None:
            out.update(range(lo, hi + 1))
    return frozenset(out)


def describe_spans(package: str, spans: str) -> str:
    """ "4.40-5.14" -> "transformers 4.40-5.14"; an open end names the newest release read, and a span from the
    oldest release read says "up to": the keyword may be older than the table ("4.36-5.1" -> "up to 5.1")."""
    minors = _minors(package)
    shown = []
    for s in spans.split(","):
        first, _, last = s.partition("-")
        last = (last or minors[-1]) if "-" in s else first
        shown.append(
            f"up to {last}"
            if minors and first == minors[0] and last != first
            else f"{first}-{last}"
            if last != first
            else first
        )
    return f"{package} {','.join(shown)}"


# Keywords a release removed in favour of a value of another one (the table's renames are name-for-name):
# transformers 5.2.0 dropped `group_by_length` for `train_sampling_strategy="group_by_length"` (training_args.py
# `train_sampling_strategy` choices random|sequential|group_by_length|batch_rebalance).
MOVED_INTO_VALUE = {
    ("transformers.TrainingArguments", "group_by_length"): ("train_sampling_strategy", "group_by_length")
}


def moved_into_value(cid: str, name: str, local: dict[str, ClassFacts] | None = None) -> tuple[str, str] | None:
    """(keyword, value) that now carries what `name` set on this class or a base, per MOVED_INTO_VALUE."""
    return next((MOVED_INTO_VALUE[(c, name)] for c in _lineage(cid, local) if (c, name) in MOVED_INTO_VALUE), None)


# --- what a class accepts ----------------------------------------------------------------------


@record
class Accepted:
    """Every keyword a class (and what it inherits) accepts at the versions in use."""

    names: frozenset[str]
    open: str = ""  # "ignores": any other keyword is taken and dropped (BitsAndBytesConfig logs "Unused kwargs")
    read: tuple[str, ...] = ()  # where each part was read: "transformers 5.23.0 (installed) training_args.py:179"
    packages: frozenset[str] = frozenset()  # the distributions whose versions decided it


@record
class Versions:
    """The release each package is judged at: from the stack, or set for one package (another release in a range)."""

    stack: StackFacts
    override: tuple[tuple[str, int], ...] = ()

    def index(self, package: str) -> int | None:
        for name, i in self.override:
            if name == package:
                return i
        return release_index(package, self.stack.get(package).version)

    def with_release(self, package: str, index: int) -> Versions:
        return Versions(self.stack, tuple(o for o in self.override if o[0] != package) + ((package, index),))


def accepted(
    cid: str,
    versions: Versions | StackFacts,
    local: dict[str, ClassFacts] | None = None,
    _seen: frozenset[str] = frozenset(),
) -> Accepted | None:
    """What `cid` (a table id, or a class of the script in `local`) accepts. None: unknown (the version is outside the
    table, the class does not exist at that version, or a base cannot be read)."""
    if isinstance(versions, StackFacts):
        versions = Versions(versions)
    if cid in _seen:
        return Accepted(frozenset())
    seen = _seen | {cid}
    if local and cid in local:
        return _local(local[cid], versions, local, seen)
    entry = table()["classes"].get(cid)
    installed = versions.stack.signatures.get(cid) if not versions.override else None
    if installed is not None:
        package = entry["package"] if entry else cid.split(".", 1)[0]
        own = Accepted(frozenset(installed.names), installed.open, (installed.evidence,), frozenset({package}))
        return _combine(own, installed.bases, installed.init, versions, local, seen)
    if entry is None:
        return None
    package = entry["package"]
    if package in ("sentence-transformers", "llamafactory") and not versions.stack.get(package).version:
        return _any_release(cid, entry, versions, local, seen)
    i = versions.index(package)
    if i is None or i not in _indices(package, entry["exists"]):
        return None
    own, bases, own_init = _table_entry_at(cid, i)
    return _combine(own, bases, own_init, versions, local, seen)


@lru_cache(maxsize=1024)
def _table_entry_at(cid: str, i: int) -> tuple[Accepted, tuple[str, ...], bool]:
    """A table class at the package's i-th release: its own keywords, its bases and whether it has its own __init__
    (read once per run: every script asks again)."""
    entry = table()["classes"][cid]
    package = entry["package"]
    names = frozenset(n for n, spans in entry["names"].items() if i in _indices(package, spans))
    open_ = next((kind for kind, spans in entry.get("open", {}).items() if i in _indices(package, spans)), "")
    bases = tuple(b for b, spans in entry.get("bases", {}).items() if i in _indices(package, spans))
    own_init = i in _indices(package, entry.get("init", ""))
    read = f"{package} {_minors(package)[i]} (table)"
    return Accepted(names, open_, (read,), frozenset({package})), bases, own_init


def _any_release(cid, entry, versions, local, seen) -> Accepted | None:
    """A package whose version is not known (sentence-transformers, which the stack does not track; LLaMA-Factory
    neither installed nor declared): what any release read accepts. LLaMA-Factory counts among the packages that
    decided it, so that its unknown version makes a verdict a warning."""
    names = frozenset(entry["names"])
    bases = tuple(entry.get("bases", {}))
    package = entry["package"]
    decided = frozenset({package}) if package == "llamafactory" else frozenset()
    return _combine(
        Accepted(names, "", (f"{package} (any release read)",), decided), bases, False, versions, local, seen
    )


def _combine(own: Accepted, bases: Iterable[str], own_init: bool, versions, local, seen) -> Accepted | None:
    """A dataclass adds up its bases' fields; a class with its own __init__ takes its parameters (and its bases'
    when it passes **kwargs on); a class without one takes its base's."""
    bases = tuple(bases)
    if own_init and own.open != "forwards":
        return own  # its own __init__ decides: what it ignores is taken, the rest is refused
    names, open_, read, packages = set(own.names), "", list(own.read), set(own.packages)
    for base in bases:
        got = accepted(base, versions, local, seen)
        if got is None:
            return None
        names |= got.names
        open_ = open_ or got.open
        read += [r for r in got.read if r not in read]
        packages |= got.packages
    return Accepted(frozenset(names), open_, tuple(read), frozenset(packages))


def _local(cls: ClassFacts, versions, local, seen) -> Accepted | None:
    bases = []
    for base in cls.bases:
        cid = (
            base
            if base in local
            else class_id(base) or (base.rsplit(".", 1)[-1] if base.rsplit(".", 1)[-1] in local else None)
        )
        if cid is None:
            return None  # a base the doctor cannot read: what it takes is unknown
        bases.append(cid)
    own = Accepted(frozenset(cls.fields), "forwards" if cls.forwards else "", (f"{cls.name} ({cls.location})",))
    if not bases:
        return own if (cls.dataclass or cls.init) else None
    return _combine(own, bases, cls.init and not cls.dataclass, versions, local, seen)


def local_id(callee: str, local: dict[str, ClassFacts]) -> str | None:
    """The key of a script's own class called as `callee` (`MyArgs`, `my_args.MyArgs` from a sibling module)."""
    if callee in local:
        return callee
    last = callee.rsplit(".", 1)[-1]
    return last if last in local and "." in callee and callee.split(".", 1)[0] not in PACKAGES else None


def decided_by(
    cid: str,
    versions: Versions | StackFacts,
    local: dict[str, ClassFacts] | None = None,
    _seen: frozenset[str] = frozenset(),
) -> str:
    """The class whose own signature decides a keyword of `cid` that is not its own: `cid` itself when it has its
    own __init__ (or is not a plain subclass), else the base its constructor is inherited from."""
    if isinstance(versions, StackFacts):
        versions = Versions(versions)
    if cid in _seen:
        return cid
    if local and cid in local:
        cls = local[cid]
        if cls.dataclass or (cls.init and not cls.forwards) or len(cls.bases) != 1:
            return cid
        base = cls.bases[0]
        nxt = base if base in local else class_id(base) or base.rsplit(".", 1)[-1]
        return decided_by(nxt, versions, local, _seen | {cid})
    entry = table()["classes"].get(cid)
    if entry is None or entry.get("defaults") is not None:
        return cid
    i = versions.index(entry["package"])
    if i is None or i in _indices(entry["package"], entry.get("init", "")):
        return cid
    bases = [b for b, spans in entry.get("bases", {}).items() if i in _indices(entry["package"], spans)]
    return decided_by(bases[0], versions, local, _seen | {cid}) if len(bases) == 1 else cid


# --- history, renames, suggestions ---------------------------------------------------------------


def spans_of(
    cid: str, name: str, local: dict[str, ClassFacts] | None = None, _seen: frozenset[str] = frozenset()
) -> tuple[str, str] | None:
    """(package, releases) that accept `name` on `cid` or the base that declares it, from the table."""
    if cid in _seen:
        return None
    seen = _seen | {cid}
    if local and cid in local:
        for base in local[cid].bases:
            found = spans_of(class_id(base) or base.rsplit(".", 1)[-1], name, local, seen)
            if found:
                return found
        return None
    entry = table()["classes"].get(cid)
    if entry is None:
        return None
    if name in entry["names"]:
        return entry["package"], entry["names"][name]
    for base in entry.get("bases", {}):
        found = spans_of(base, name, local, seen)
        if found:
            return found
    return None


def rename_of(
    cid: str, name: str, local: dict[str, ClassFacts] | None = None, _seen: frozenset[str] = frozenset()
) -> str | None:
    """The name a deprecation gave `name` on this class or a base (checked by the generator against the fields)."""
    if cid in _seen:
        return None
    seen = _seen | {cid}
    if local and cid in local:
        bases = [class_id(b) or b.rsplit(".", 1)[-1] for b in local[cid].bases]
    else:
        entry = table()["classes"].get(cid) or {}
        if name in entry.get("renames", {}):
            return entry["renames"][name]
        bases = list(entry.get("bases", {}))
    for base in bases:
        found = rename_of(base, name, local, seen)
        if found:
            return found
    return None


def _lineage(cid: str, local: dict[str, ClassFacts] | None = None) -> Iterator[str]:
    """The class and every base it inherits from, each once: the script's own classes through their written bases,
    the library's through the table's."""
    stack, seen = [cid], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        yield current
        if local and current in local:
            stack += [class_id(b) or b.rsplit(".", 1)[-1] for b in local[current].bases]
        else:
            stack += list((table()["classes"].get(current) or {}).get("bases", {}))


def former_name(cid: str, name: str, local: dict[str, ClassFacts] | None = None) -> str | None:
    """The older spelling of a renamed keyword (`eval_strategy` -> `evaluation_strategy`), for a release that
    predates the new name."""
    for current in _lineage(cid, local):
        if local and current in local:
            continue
        for old, new in (table()["classes"].get(current) or {}).get("renames", {}).items():
            if new == name:
                return old
    return None


def suggestion(name: str, names: Iterable[str]) -> str | None:
    """The accepted keyword a typo most likely meant (`learning_rat` -> `learning_rate`)."""
    import difflib

    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.8)
    return close[0] if close else None


# --- how sure: the versions a declared range allows ----------------------------------------------


def release_of(package: str, index: int) -> str:
    """The release the table read for its `index`-th minor (oldest first)."""
    return table()["releases"][package][_minors(package)[index]]


def releases_in_range(package: str, version: PackageVersion) -> list[int]:
    """The table's releases a declared range allows (`transformers>=4.40`, or `transformers` with no range: all),
    newest last; [] when the version is a pin, installed, given, or the range cannot be read."""
    if version.source != VersionSource.DECLARED or version.spec.startswith(("==", "===")):
        return []
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(version.spec)
    except InvalidSpecifier:
        return []
    built = [table()["releases"][package][m] for m in _minors(package)]
    return [i for i, v in enumerate(built) if spec.contains(v, prereleases=True)]


def trl_config_keys(stack: StackFacts) -> str:
    """What the TRL in use does with a `--config` key no dataclass has (read from each release's TrlParser):
    "raises" (0.19+), "raises_legacy" (<= 0.12), "ignores" (0.13-0.18), or "unknown"."""
    i = release_index("trl", stack.get("trl").version)
    if i is None:
        return "unknown"
    for kind, spans in table()["parsers"]["trl.TrlParser"]["config_keys"].items():
        if i in _indices("trl", spans):
            return kind
    return "unknown"
