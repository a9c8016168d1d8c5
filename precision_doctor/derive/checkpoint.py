"""The checkpoint a model load reads, as the probe found it (probes/checkpoint.py), for every derivation and rule
that needs its shape, stored dtype or attention support."""

from __future__ import annotations

from ..model.facts import (
    KNOWN,
    Call,
    CheckpointFacts,
    CheckpointSource,
    ScriptFacts,
    builds_from_config,
    config_load_of,
    model_source,
)

_SOURCE_NOTE = {
    CheckpointSource.LOCAL: "its config.json",
    CheckpointSource.HF_CACHE: "the Hugging Face cache",
    CheckpointSource.TABLE: "the doctor's table of popular checkpoints",
}


# config keys that change a model's shape: a from_config model built from a config with one of them set is not the
# checkpoint's size (`AutoConfig.from_pretrained(id, num_hidden_layers=8)`, `config.hidden_size = 512`)
_SHAPE_KEYS = frozenset(
    {
        "hidden_size",
        "n_embd",
        "d_model",
        "num_hidden_layers",
        "n_layer",
        "num_layers",
        "intermediate_size",
        "n_inner",
        "d_ff",
        "num_attention_heads",
        "n_head",
        "num_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "tie_word_embeddings",
        "num_local_experts",
        "num_experts",
        "num_experts_per_tok",
        "decoder_layers",
        "encoder_layers",
    }
)


def checkpoint_of(load: Call | None, script: ScriptFacts) -> CheckpointFacts | None:
    """What the load's checkpoint is; None when the model id is not known or nothing is known of it, or when
    from_config builds it from a config whose shape the script changes."""
    if load is None:
        return None
    if builds_from_config(load):
        config = config_load_of(load, script.calls)
        if config is not None and _SHAPE_KEYS & set(config.kwargs):
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
