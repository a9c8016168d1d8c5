"""The checkpoint a model load reads, as the probe found it (probes/checkpoint.py), for every derivation and rule
that needs its shape, stored dtype or attention support."""

from __future__ import annotations

from ..facts import KNOWN, Call, CheckpointFacts, CheckpointSource, ScriptFacts, model_source

_SOURCE_NOTE = {CheckpointSource.LOCAL: "its config.json", CheckpointSource.HF_CACHE: "the Hugging Face cache",
                CheckpointSource.TABLE: "the doctor's table of popular checkpoints"}


def checkpoint_of(load: Call | None, script: ScriptFacts) -> CheckpointFacts | None:
    """What the load's checkpoint is; None when the model id is not known or nothing is known of it."""
    if load is None:
        return None
    source = model_source(load, script.calls)
    if source.state != KNOWN or not isinstance(source.value, str):
        return None
    found = script.checkpoints.get(source.value)
    return found if found is not None and found.known else None


def describe_source(c: CheckpointFacts) -> str:
    """'google/gemma-2-2b (from the doctor's table of popular checkpoints)'."""
    where = _SOURCE_NOTE.get(c.source, str(c.source))
    detail = f": {c.detail}" if c.source in (CheckpointSource.LOCAL, CheckpointSource.HF_CACHE) else ""
    return f"{c.model_id} (from {where}{detail})"
