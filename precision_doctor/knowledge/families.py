"""Model families with behaviour the rules depend on, each defined once."""

from __future__ import annotations

import re

# Pre-trained in bf16 with activations beyond fp16's 65504: documented fp16 overflow (FAILURES.md #10).
# Llama, Mistral and Qwen are routinely fine-tuned in fp16 and are deliberately absent.
FP16_OVERFLOW_FAMILIES = re.compile(
    r"(^|[/_\-])(flan-t5|t5|mt5|umt5|byt5|gemma\d?|gemma-\d|deepseek-v2)"
    r"([/_\-.]|$)",
    re.I,
)


def overflows_fp16(family: str) -> bool:
    """A model id or `model_type` of a family that overflows fp16."""
    return bool(family) and (family in FP16_OVERFLOW_MODEL_TYPES or FP16_OVERFLOW_FAMILIES.search(family) is not None)


# `model_type`s of the same fp16-overflow families (a checkpoint's config names them this way).
FP16_OVERFLOW_MODEL_TYPES = frozenset({"t5", "mt5", "umt5", "gemma", "gemma2", "gemma3", "gemma3_text", "deepseek_v2"})


def overflows_fp16_model_type(model_type: str) -> bool:
    return model_type in FP16_OVERFLOW_MODEL_TYPES


# Attention implementations each architecture accepts for `attn_implementation=`, as transformers 5.x declares
# them (`_supports_sdpa`, `_supports_flash_attn` in each modeling file). Not listed: assume all three.
ALL_ATTENTION = ("eager", "sdpa", "flash_attention_2")
ATTENTION_SUPPORT = {
    "bloom": ("eager",),
    "deberta-v2": ("eager",),
    "deberta": ("eager",),
    "gemma2": ("eager", "flash_attention_2"),  # logit soft-capping: no sdpa
    "t5": ("eager", "sdpa"),
    "mt5": ("eager", "sdpa"),
    "umt5": ("eager", "sdpa"),
}


def attention_support(model_type: str) -> tuple[str, ...]:
    return ATTENTION_SUPPORT.get(model_type, ALL_ATTENTION) if model_type else ()


# model types whose config class defaults `tie_word_embeddings` to False (transformers 5.23
# `models/*/configuration_*.py`; the same defaults as the 4.x `__init__` signatures). A config.json that omits the key
# takes its class's default; every other class inherits PretrainedConfig's True.
UNTIED_BY_DEFAULT = frozenset(
    {
        "llama",
        "llama4",
        "llama4_text",
        "mistral",
        "mistral4",
        "ministral",
        "ministral3",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen3_5",
        "qwen3_5_text",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "phi",
        "phi3",
        "phimoe",
        "gpt_neox",
        "gptj",
        "codegen",
        "deepseek_v2",
        "deepseek_v3",
        "dbrx",
        "olmo",
        "olmo2",
        "olmo3",
        "olmoe",
        "granite",
        "granitemoe",
        "granitemoehybrid",
        "gpt_oss",
        "glm",
        "glm4",
        "glm4_moe",
        "jamba",
        "nemotron",
        "persimmon",
        "stablelm",
        "internlm3",
        "exaone4",
        "hunyuan_v1_dense",
        "hunyuan_v1_moe",
        "minimax",
        "falcon_h1",
        "bamba",
        "mamba2",
        "helium",
        "seed_oss",
        "llava",
        "llava_next",
        "idefics2",
        "idefics3",
        "chameleon",
        "fuyu",
    }
)


def tied_by_default(model_type: str) -> bool:
    return model_type not in UNTIED_BY_DEFAULT


# How a family's blocks are built, for counting parameters and activations from its config:
# gated: a gated MLP (three matrices); norm: rms (weight) or layer (weight and bias); bias: linear layers carry
# biases (qkv: only the query/key/value projections); positions: learned position embeddings.
ARCHITECTURE_SHAPES = {
    "llama": dict(gated=True, norm="rms", bias=""),
    "mistral": dict(gated=True, norm="rms", bias=""),
    "mixtral": dict(gated=True, norm="rms", bias=""),
    "qwen2": dict(gated=True, norm="rms", bias="qkv"),
    "qwen2_moe": dict(gated=True, norm="rms", bias="qkv"),
    "qwen3": dict(gated=True, norm="rms", bias="", qk_norm=True),
    "qwen3_moe": dict(gated=True, norm="rms", bias="", qk_norm=True),
    "gemma": dict(gated=True, norm="rms", bias=""),
    "gemma2": dict(gated=True, norm="rms", bias="", extra_norms=2),
    "gemma3_text": dict(gated=True, norm="rms", bias="", extra_norms=2, qk_norm=True),
    "phi3": dict(gated=True, norm="rms", bias=""),
    "smollm3": dict(gated=True, norm="rms", bias=""),
    "phi": dict(gated=False, norm="layer", bias="all", parallel=True),
    "falcon": dict(gated=False, norm="layer", bias="", parallel=True),
    "gpt2": dict(gated=False, norm="layer", bias="all", positions=True),
    "opt": dict(gated=False, norm="layer", bias="all", positions=True),
    "bloom": dict(gated=False, norm="layer", bias="all", embed_norm=True),
    "bert": dict(gated=False, norm="layer", bias="all", positions=True, encoder=True, pooler=True),
    "roberta": dict(gated=False, norm="layer", bias="all", positions=True, encoder=True, pooler=True),
    "vit": dict(gated=False, norm="layer", bias="all", encoder=True),
}


# The architectures Liger patches with its fused linear cross-entropy (liger_kernel/transformers/monkey_patch.py,
# MODEL_TYPE_TO_APPLY_LIGER_FN, liger-kernel 0.6): elsewhere `use_liger_kernel` leaves the loss as it is.
LIGER_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "qwen2_vl",
        "qwen2_5_vl",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "phi3",
        "granite",
        "olmo2",
        "glm4",
        "smollm3",
    }
)
