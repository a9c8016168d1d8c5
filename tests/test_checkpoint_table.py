"""The shipped checkpoint table against transformers itself: for the decoder families whose row fields decide the
whole model (the rest are the config class's defaults), building that model on the meta device gives exactly the
row's parameter count, its tying and its head shape."""

from __future__ import annotations

import pytest

from precision_doctor.probes.checkpoint import checkpoint_facts, shipped_table


def _llama_like(row: dict) -> dict:
    return dict(
        hidden_size=row["hidden_size"],
        intermediate_size=row["intermediate_size"],
        num_hidden_layers=row["layers"],
        num_attention_heads=row["heads"],
        num_key_value_heads=row["kv_heads"],
        vocab_size=row["vocab_size"],
        tie_word_embeddings=row["tied_embeddings"],
        **({"head_dim": row["head_dim"]} if "head_dim" in row else {}),
    )


def _falcon(row: dict) -> dict:
    grouped = row["kv_heads"] > 1  # Falcon-40B's grouped KV heads; Falcon-7B's one multi-query head
    return dict(
        hidden_size=row["hidden_size"],
        num_hidden_layers=row["layers"],
        num_attention_heads=row["heads"],
        vocab_size=row["vocab_size"],
        new_decoder_architecture=grouped,
        **({"num_kv_heads": row["kv_heads"]} if grouped else {"multi_query": True}),
    )


# model_type -> the config keyword arguments a row's fields give; every other setting is the class default
CONFIG_FROM_ROW = {
    "llama": _llama_like,
    "mistral": _llama_like,
    "qwen2": _llama_like,
    "qwen3": _llama_like,
    "phi3": _llama_like,
    "smollm3": _llama_like,
    "olmo2": _llama_like,
    "granite": _llama_like,
    "qwen3_moe": lambda r: {
        **_llama_like(r),
        "moe_intermediate_size": r["intermediate_size"],  # a MoE row's intermediate_size is one expert's width
        "num_experts": r["experts"],
        "num_experts_per_tok": r["experts_per_token"],
    },
    "falcon": _falcon,
    "gpt2": lambda r: dict(n_embd=r["hidden_size"], n_layer=r["layers"], n_head=r["heads"], vocab_size=r["vocab_size"]),
    "opt": lambda r: dict(
        hidden_size=r["hidden_size"],
        ffn_dim=r["intermediate_size"],
        num_hidden_layers=r["layers"],
        num_attention_heads=r["heads"],
        vocab_size=r["vocab_size"],
        word_embed_proj_dim=r["hidden_size"],
    ),
    "bloom": lambda r: dict(
        hidden_size=r["hidden_size"], n_layer=r["layers"], n_head=r["heads"], vocab_size=r["vocab_size"]
    ),
}


def _rows() -> list[dict]:
    unique = {row["id"]: row for row in shipped_table().values()}
    return [row for row in unique.values() if row["model_type"] in CONFIG_FROM_ROW]


def test_the_cross_check_covers_every_family_it_names():
    covered = {row["model_type"] for row in _rows()}
    assert covered == set(CONFIG_FROM_ROW)
    assert len(_rows()) >= 35


def test_table_rows_match_transformers_own_count():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    wrong = []
    for row in _rows():
        config = transformers.AutoConfig.for_model(row["model_type"], **CONFIG_FROM_ROW[row["model_type"]](row))
        with torch.device("meta"):
            model = getattr(transformers, row["architecture"])(config)
        counted = sum(p.numel() for p in model.parameters())  # a tied head is one parameter, counted once
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        facts = checkpoint_facts(row["id"], (), {"HF_HUB_CACHE": "/nonexistent"})
        if (counted, tied) != (facts.parameters, facts.tied_embeddings):
            wrong.append(
                f"{row['id']}: table {facts.parameters} tied={facts.tied_embeddings}, "
                f"transformers {counted} tied={tied}"
            )
    assert not wrong, "\n".join(wrong)
