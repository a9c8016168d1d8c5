"""accelerate's own config file, recognised by `compute_environment` (or `distributed_type` with
`mixed_precision`): its `mixed_precision` for a script that builds `Accelerator()`."""

from __future__ import annotations

from ...model.call_kinds import CallKind
from ...model.facts import ScriptFacts
from ..config_files import ConfigDoc
from ._builder import Builder

NAME = "accelerate"
VERSION = "1.x"


def detects(doc: ConfigDoc) -> bool:
    return doc.has("compute_environment") or (doc.has("distributed_type") and doc.has("mixed_precision"))


def build(b: Builder) -> ScriptFacts:
    """The script it launches builds `Accelerator()` and trains: its precision is the config's."""
    mp = b.setting("mixed_precision", "no")
    at = b.where("mixed_precision", "distributed_type")
    b.add(CallKind.ACCELERATOR, "accelerate.Accelerator", at, kwargs={"mixed_precision": mp}, target="accelerator")
    b.add(CallKind.METHOD, "accelerator.backward", at, target="")
    return b.facts()
