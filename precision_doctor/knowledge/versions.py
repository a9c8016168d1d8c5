"""Which release of each library the rules were checked against, and how versions compare: an unknown or
unreadable version is taken to be that release."""

from __future__ import annotations

import re

from ..model.facts import StackFacts

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
    """Whether the job's release is at or past a boundary, as pip orders releases (packaging.version): a
    pre-release, release candidate or dev build (`2.3.0a0+git...`, `5.0.0rc1`, `4.56.0.dev0`) comes before its
    final release, a local build (`2.4.0+cu121`) is its release. An unknown or unreadable version is taken to be
    the release the rules were checked against."""
    text = stack.get(name).version
    if parse_version(text) is None:
        text = CURRENT.get(name, "0")
    return _ordered(text) >= _ordered(version)


def _ordered(text: str):
    """The version as packaging orders it; a version it cannot read, by its release numbers alone."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text.strip().lstrip("vV"))
    except InvalidVersion:
        return Version(".".join(str(n) for n in version_tuple(text)))
