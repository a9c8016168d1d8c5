"""Which release of each library the rules were checked against, and how versions compare: an unknown or
unreadable version is taken to be that release."""

from __future__ import annotations

import re

from ..model.facts import StackFacts

_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """A distribution's name as PEP 503 compares it: `Transformer_Engine` -> `transformer-engine`."""
    return _SEPARATORS.sub("-", name).lower()


# The releases the rules were checked against; assumed when a package is neither installed nor declared.
CURRENT = {
    "torch": "2.13.0",
    "transformers": "5.23.0",
    "accelerate": "1.15.0",
    "peft": "0.21.2",
    "bitsandbytes": "0.50.0",
    "trl": "1.16.0",
    "deepspeed": "0.18.0",
}


# What the installed libraries do, where only their source tells (keys of StackFacts.behaviours).
TRAINER_SKIPS_DP_FOR_4BIT = "transformers.trainer.skips_dataparallel_for_4bit"  # transformers PR#45407


# the Auto classes training scripts load through, whose own model types the shipped table holds (auto_mappings.json)
AUTO_MAPPING_CLASSES = (
    "AutoModel",
    "AutoModelForCausalLM",
    "AutoModelForSeq2SeqLM",
    "AutoModelForSequenceClassification",
    "AutoModelForTokenClassification",
    "AutoModelForQuestionAnswering",
    "AutoModelForMaskedLM",
    "AutoModelForImageTextToText",
    "AutoModelForVision2Seq",
    "AutoModelForSpeechSeq2Seq",
    "AutoModelForCTC",
    "AutoModelForImageClassification",
)


def native_model_key(auto_class: str, model_type: str) -> str:
    """The stack behaviour that says whether `auto_class` has `model_type` in the installed transformers' own
    mapping (what `has_local_code` asks in auto_factory.py): read by probes/installed_signatures.py."""
    return f"transformers.{auto_class}.has:{model_type}"


_RELEASE = re.compile(r"\d+(?:\.\d+)*")


def parse_version(text: str) -> tuple[int, ...] | None:
    """The release numbers a version starts with (`2.4.0+cu121` -> (2, 4, 0)), or None when it does not start with
    a sane one (a 5,000-digit pin, `latest`): such a version is unknown, never a crash."""
    m = _RELEASE.match(text.strip().lstrip("vV"))
    parts = m.group().split(".") if m else []
    if not parts or len(parts) > 10 or any(len(part) > 9 for part in parts):
        return None
    return tuple(int(part) for part in parts)


def version_tuple(text: str) -> tuple[int, ...]:
    return parse_version(text) or (0,)


def at_least(stack: StackFacts, name: str, version: str) -> bool:
    """Whether the job's release is at or past a boundary, by its release numbers: a pre-release, release candidate,
    dev or source build of a release (`2.8.0a0+git...` as NVIDIA's containers ship, `5.0.0rc2`, `4.56.0.dev0`)
    counts as that release, as the libraries' own gates count it (transformers' `is_torch_greater_or_equal(...,
    accept_dev=True)` compares torch's base version, pytorch_utils.py:37), and the behaviours the doctor's
    boundaries mark are merged before a release's candidates. pip orders such builds before the release; judged that
    way, an NGC torch 2.8.0a0 would lose transformers' fused-AdamW default and a 5.0 candidate its v5 loading. An
    unknown or unreadable version is taken to be the release the rules were checked against."""
    got = parse_version(stack.get(name).version) or version_tuple(CURRENT.get(name, "0"))
    return got >= version_tuple(version)


_REQUIREMENT = re.compile(r"^([^!=<>\s]+)([\s!=<>]{1,2}.+)")
_CLAUSE = re.compile(r"^([\s!=<>]{1,2})(.+)")
_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
}


def requirement_name(requirement: str) -> str:
    """`transformers>=4.55.0,<=5.6.0` -> "transformers", split off as `require_version` splits it."""
    match = _REQUIREMENT.match(requirement)
    return match.group(1) if match else requirement.strip()


def requirement_holds(requirement: str, version: str) -> bool | None:
    """Whether `version` passes `requirement` as transformers' `require_version` judges it (utils/versions.py:48-110
    in 5.24): the clauses are kept by operator, so a later `!=` replaces an earlier one (`<=5.8.0,!=4.57.0,!=5.6.0`
    refuses 5.6.0 and lets 4.57.0 through), and versions compare as `packaging.version` orders them (a `.dev0` or
    `rc` comes before its release). None when either side cannot be read."""
    from packaging.version import InvalidVersion, Version

    match = _REQUIREMENT.match(requirement)
    if match is None:
        return None
    wanted: dict[str, str] = {}
    for clause in match.group(2).split(","):
        part = _CLAUSE.match(clause)
        if part is None or part.group(1) not in _COMPARE:
            return None
        wanted[part.group(1)] = part.group(2)
    try:
        got = Version(version)
        return all(_COMPARE[op](got, Version(want)) for op, want in wanted.items())
    except InvalidVersion:
        return None
