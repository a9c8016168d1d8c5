"""Versions of the ML stack, read from package metadata (never by importing the packages)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ..facts import LibraryBehaviour, PackageVersion, StackFacts, VersionSource
from ..sources import Unreadable, is_regular_file, read_text_bounded

# The releases the rules were checked against; assumed when a package is neither installed nor declared.
CURRENT = {
    "torch": "2.13.0", "transformers": "5.23.0", "accelerate": "1.15.0", "peft": "0.21.2",
    "bitsandbytes": "0.50.0", "trl": "1.16.0", "deepspeed": "0.18.0",
}
TRACKED = ("torch", "transformers", "accelerate", "peft", "bitsandbytes", "trl", "deepspeed",
           "transformer-engine", "torchao")


def probe_stack(script_dirs: list[Path] | None = None, overrides: dict[str, str] | None = None) -> StackFacts:
    packages: dict[str, PackageVersion] = {}
    declared = _declared(script_dirs or [])
    installed = installed_versions() if not overrides else {}
    for name in TRACKED:
        if overrides and name in overrides:
            packages[name] = PackageVersion(name, overrides[name], VersionSource.GIVEN)
            continue
        if name in installed:
            packages[name] = PackageVersion(name, installed[name], VersionSource.INSTALLED)
            continue
        if name in declared:
            packages[name] = PackageVersion(name, declared[name], VersionSource.DECLARED)
        elif name in CURRENT:
            packages[name] = PackageVersion(name, CURRENT[name], VersionSource.ASSUMED)
    behaviours = installed_behaviours(packages["transformers"].version) \
        if packages["transformers"].source == VersionSource.INSTALLED else {}
    return StackFacts(packages=packages, behaviours=behaviours)


# What the installed libraries do, where only their source tells (keys of StackFacts.behaviours).
TRAINER_SKIPS_DP_FOR_4BIT = "transformers.trainer.skips_dataparallel_for_4bit"  # transformers PR#45407


def installed_behaviours(transformers_version: str) -> dict[str, LibraryBehaviour]:
    """Read from the installed transformers' trainer.py, once per run: does `_wrap_model` exempt 4-bit models
    from DataParallel? Nothing is recorded when the file cannot be found or read."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "transformers" / "trainer.py"
        if not candidate.is_file():
            continue
        try:
            lines = candidate.read_text(encoding="utf-8", errors="replace").split("\n")
        except OSError:
            return {}
        start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("def _wrap_model")), None)
        if start is None:
            return {}
        body = lines[start:start + 60]
        hit = next((i for i, line in enumerate(body) if "is_loaded_in_4bit" in line), None)
        where = start + (hit if hit is not None else 0) + 1
        shown = (body[hit] if hit is not None else body[0]).strip()
        return {TRAINER_SKIPS_DP_FOR_4BIT: LibraryBehaviour(
            hit is not None, f"transformers {transformers_version} trainer.py:{where}  {shown[:120]}")}
    return {}


_DIST_INFO = re.compile(r"^([A-Za-z0-9_.]+)-([0-9][^-]*?)\.(dist-info|egg-info)$")


def installed_versions() -> dict[str, str]:
    """Versions from the *.dist-info folder names on sys.path: what importlib.metadata reads, minus its
    import cost, and without importing any package."""
    wanted = {n.replace("-", "_").lower(): n for n in TRACKED}
    found: dict[str, str] = {}
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            m = _DIST_INFO.match(name)
            if m:
                key = m.group(1).replace("-", "_").replace(".", "_").lower()
                if key in wanted and wanted[key] not in found:
                    found[wanted[key]] = m.group(2)
    return found


_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*(==|>=|~=)\s*([0-9][0-9A-Za-z.+\-]*)")


def _declared(dirs: list[Path]) -> dict[str, str]:
    """Pins from requirements*.txt / pyproject.toml next to the scripts (== or lower bounds)."""
    found: dict[str, str] = {}
    for d in dirs:
        for candidate in [d / "requirements.txt", d.parent / "requirements.txt", d / "pyproject.toml"]:
            if not is_regular_file(candidate):
                continue
            try:
                lines = read_text_bounded(candidate, errors="replace").splitlines()
            except Unreadable:
                continue
            for line in lines:
                m = _PIN.match(line.strip().strip('",'))
                if m:
                    found.setdefault(m.group(1).lower().replace("_", "-"), m.group(3))
    return found


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
    """An unknown or unreadable version is taken to be the release the rules were checked against."""
    got = parse_version(stack.get(name).version) or version_tuple(CURRENT.get(name, "0"))
    return got >= version_tuple(version)
