"""Axolotl 0.18.0 (commit 067b021) as it validates a recipe: the in-domain checks of `utils/schemas/validation.py`,
`utils/schemas/config.py` and `utils/schemas/peft.py` (file:line at that commit), and the attention names its legacy
flags map to. docs/peer_checks.md lists every check and which rule mirrors it."""

from __future__ import annotations

from ._check import RecipeCheck, RecipeView

FAMILY = "Axolotl"
_V = "src/axolotl/utils/schemas/validation.py"
_C = "src/axolotl/utils/schemas/config.py"
_PF = "src/axolotl/utils/schemas/peft.py"

# `normalize_attn_implementation` (config.py:1527; utils/schemas/enums.py LEGACY_ATTN_FLAG_TO_IMPL, in its priority
# order): what each deprecated flag becomes; `attn_implementation` itself is passed to from_pretrained ("fp8" loads
# as sdpa)
LEGACY_ATTENTION = {
    "xformers_attention": "xformers",
    "sage_attention": "sage",
    "flex_attention": "flex_attention",
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "eager_attention": "eager",
}
# check_compute_capability_w_sageattn's allow-list (config.py:1811-1822)
SAGE_CAPABILITIES = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_120")
EIGHT_BIT_BNB_OPTIMIZERS = ("adamw_8bit", "adamw_bnb_8bit")

_BASE = "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 2\ngradient_accumulation_steps: 4\n"
_LORA = _BASE + "adapter: lora\nlora_r: 16\nlora_target_linear: true\nbf16: true\n"
_QLORA = _BASE + "adapter: qlora\nload_in_4bit: true\nlora_r: 16\nlora_target_linear: true\nbf16: true\n"
_FSDP = _BASE + "bf16: true\nfsdp_config:\n  offload_params: false\n  state_dict_type: FULL_STATE_DICT\n"


def attention(v: RecipeView) -> str:
    """The attention implementation Axolotl settles on: `attn_implementation`, else the first legacy flag set."""
    written = v.get("attn_implementation")
    if isinstance(written, str) and written:
        return written
    return next((name for flag, name in LEGACY_ATTENTION.items() if v.get(flag)), "")


# Pydantic runs a model's "before" validators in reverse order of definition, so some of Axolotl's checks see the
# recipe as written and others see it after `check_fsdp_version_in_fsdp_config` (validation.py:1105-1124) moved
# fsdp_config's `version`/`fsdp_version` to the top level and `check_fsdp_config_kwargs_prefix` (1083-1103) dropped
# the `fsdp_` prefix of fsdp_config's keys; "after" validators see typed fields (`v.typed`). Each check reads the
# view its validator sees.


def fsdp_config(v: RecipeView) -> dict:
    """fsdp_config after the prefix normaliser: `fsdp_offload_params` reads as `offload_params`."""
    found = v.get("fsdp_config")
    if not isinstance(found, dict):
        return {}
    return {
        (k[len("fsdp_") :] if isinstance(k, str) and k.startswith("fsdp_") and k != "fsdp_version" else k): value
        for k, value in found.items()
    }


def _raw_fsdp_config(v: RecipeView) -> dict:
    """fsdp_config as written (before the prefix normaliser)."""
    found = v.get("fsdp_config")
    return found if isinstance(found, dict) else {}


def fsdp_version_normalised(v: RecipeView) -> object:
    """`fsdp_version` once normalised: the top-level key, else fsdp_config's `version` / `fsdp_version`, else 1
    where an fsdp_config is given (the value as written: "2" stays a string)."""
    found = v.get("fsdp_version")
    config = v.get("fsdp_config")
    if not found and isinstance(config, dict) and config:
        found = config.get("version") or config.get("fsdp_version")
    if not found and config:
        found = 1
    return found


def fsdp_version(v: RecipeView) -> str:
    """What the after-validators compare, `str(self.fsdp_version)` (an int field: "2" parses as 2)."""
    found = fsdp_version_normalised(v)
    return str(found).strip() if found is not None else "None"


def fsdp(v: RecipeView) -> bool:
    return bool(v.get("fsdp") or v.get("fsdp_config"))


def _reentrant(v: RecipeView) -> object:
    return v.get("gradient_checkpointing_kwargs.use_reentrant")


def _npu_refusal(v: RecipeView) -> str:
    """check_npu_config (validation.py:1241-1284), in its order, where `is_torch_npu_available()` holds: the job's
    environment has torch_npu (Ascend's PyTorch adapter) and the job's machine shows no NVIDIA GPU (transformers
    asks `torch.npu.is_available()`: a target GPU means the job runs elsewhere). It sees the recipe after
    normalize_attn_implementation (config.py:1525-1575, a validator of the model class itself, run before the
    mixins'): legacy flags are mapped to attn_implementation and removed, so their own branch is never reached."""
    if not v.installed("torch-npu") or v.gpu is not None:
        return ""
    if v.get("attn_implementation") and any(v.get(flag) for flag in LEGACY_ATTENTION):
        return ""  # normalize_attn_implementation refuses the pair first (config.py:1550-1555)
    implementation = attention(v) or ("flash_attention_2" if v.get("gemma4_hybrid_attn_impl") else "")
    if implementation in ("flash_attention_2", "flash_attention_3", "sdpa"):
        return f"attn_implementation={implementation!r} is currently not supported on Ascend NPU."
    optimizer = v.get("optimizer")
    if isinstance(optimizer, str) and "bit" in optimizer:
        return f"{optimizer} is currently not supported in Ascend npu, choose another one please."
    for quantized in ("load_in_8bit", "load_in_4bit"):
        if v.get(quantized):
            return f"Quantification is currently not supported in Ascend npu, please disable {quantized}."
    if v.get("tf32"):
        return "tf32 dtype is currently not supported in Ascend npu, please disable this configuration"
    return ""


def _qlora_refusal(v: RecipeView) -> str:
    """validate_qlora (peft.py:201-224): the message a qlora recipe gets, if any."""
    if v.get("adapter") != "qlora":
        return ""
    if v.typed("merge_lora"):
        if v.typed("load_in_8bit"):
            return "Can't merge qlora if loaded in 8bit"
        if v.typed("gptq"):
            return "Can't merge qlora if gptq"
        if v.typed("load_in_4bit"):
            return "Can't merge qlora if loaded in 4bit"
        return ""
    if v.typed("load_in_8bit"):
        return "Can't load qlora in 8bit"
    if v.typed("gptq"):
        return "Can't load qlora if gptq"
    if not v.typed("load_in_4bit"):
        return "Require cfg.load_in_4bit to be True for qlora"
    return ""


def _pin_memory_refusal(v: RecipeView) -> str:
    """check_fsdp2_cpu_offload_pin_memory (validation.py:1050-1065), after both normalisers."""
    config = fsdp_config(v)
    if not v.get("fsdp_config") or config.get("cpu_offload_pin_memory") is not False:
        return ""
    if str(fsdp_version_normalised(v)) != "2":
        return "FSDP1 does not support disabling cpu_offload_pin_memory, please set `fsdp_version` to 2"
    if not config.get("offload_params"):
        return "disabling cpu_offload_pin_memory requires enabling offload_params"
    return ""


def _sharded_optimizer_refusal(v: RecipeView, name: str) -> str:
    """check_muon_deepspeed_fsdp / check_flashoptim_deepspeed_fsdp (validation.py:889-903, 947-964)."""
    if v.get("deepspeed"):
        if name == "muon":
            return "Muon optimizer is currently incompatible with DeepSpeed"
        return f"{name} optimizer is incompatible with DeepSpeed. Flash optimizers only support DDP and FSDP2."
    if fsdp(v) and fsdp_version(v) != "2":
        if name == "muon":
            return "Muon optimizer is only compatible with FSDP2. Set fsdp_version: 2 to use Muon with FSDP."
        return f"{name} optimizer is only compatible with FSDP2. Set fsdp_version: 2 to use flash optimizers with FSDP."
    return ""


def _fp32_norms_refusal(v: RecipeView) -> str:
    if not v.typed("fp32_norms"):
        return ""
    if v.get("fsdp_config") is None:
        return "fp32_norms requires FSDP to be enabled (fsdp_config block must be set)."
    if fsdp_version(v) != "2":
        return (
            "fp32_norms requires fsdp_version: 2. FSDP1's flat-param dtype uniformity constraint is incompatible "
            "with keeping norms in fp32 while decoder layers run in bf16."
        )
    return ""


def _fp8_attention_refusal(v: RecipeView) -> str:
    if attention(v) != "fp8":
        return ""
    if v.gpu is not None and v.gpu.capability < (9, 0):
        return f"attn_implementation=fp8 requires compute capability sm_90 or higher (Hopper+). Detected {v.gpu.sm!r}."
    if not v.torch_at_least("2.11"):
        return "attn_implementation=fp8 requires PyTorch >= 2.11.0."
    return ""


def _bf16_on(v: RecipeView) -> bool:
    """Whether the run trains in bf16: `bf16: auto` (the default) is what transformers' check answers, unless fp16
    is set. Axolotl's own packing warning runs while `bf16` is still `auto`, so it also warns for an fp16 recipe;
    the doctor warns only where bf16 really runs."""
    bf16 = v.typed("bf16", "auto")
    if bf16 == "auto":
        return v.typed("fp16") is not True and v.bf16_answer()
    return bool(bf16 or v.typed("bfloat16"))


def _compute_capability(v: RecipeView) -> str:
    return v.gpu.sm if v.gpu is not None else ""


# the attention backends Axolotl packs samples with (utils/schemas/enums.py ATTN_IMPLS_SUPPORTING_PACKING), and
# those that isolate packed samples (config.py `attn_decontaminates_packing`: these, sdpa and eager)
PACKING_ATTENTION = (
    "flash_attention_2",
    "flash_attention_3",
    "flex_attention",
    "xformers",
    "sage",
    "kernels-community/flash-attn2",
    "kernels-community/flash-attn3",
    "kernels-community/sage-attention",
)
CANONICAL_ATTENTION = (
    "eager",
    "sdpa",
    "flash_attention_2",
    "flash_attention_3",
    "flex_attention",
    "xformers",
    "sage",
    "fp8",
)
SHORT_ATTENTION = {"flash": "flash_attention_2", "flex": "flex_attention", "sdp": "sdpa"}
# ATTN_IMPLS_USING_FLASH_LIB (enums.py): the backends context parallelism's ring attention runs on
FLASH_LIB_ATTENTION = (
    "flash_attention_2",
    "flash_attention_3",
    "kernels-community/flash-attn2",
    "kernels-community/flash-attn3",
)


def _decontaminates(v: RecipeView) -> bool:
    return attention(v) in PACKING_ATTENTION or attention(v) in ("sdpa", "eager")


def _qgalore_refusal(v: RecipeView) -> str:
    """check_qgalore (validation.py:905-945)."""
    if v.get("adapter"):
        return (
            "q_galore_adamw8bit operates on full-precision parameters and is incompatible with "
            f"adapter='{v.get('adapter')}'. Remove the adapter setting or pick a different optimizer."
        )
    if v.get("deepspeed"):
        return "q_galore_adamw8bit is not yet validated with DeepSpeed. Use DDP or FSDP2 with use_orig_params=True."
    if fsdp(v):
        if fsdp_version(v) != "2":
            return "q_galore_adamw8bit requires FSDP2. Set fsdp_version: 2."
        if fsdp_config(v).get("use_orig_params") is not True:
            return (
                "q_galore_adamw8bit requires fsdp_config.use_orig_params=True so that per-parameter projection "
                "state survives FSDP sharding."
            )
    return ""


def _batch_flattening_refusal(v: RecipeView) -> str:
    """check_batch_flattening_fa (validation.py:966-982); `auto` is resolved, never refused."""
    flattening = v.typed("batch_flattening")
    if not flattening or flattening == "auto":
        return ""
    if attention(v) not in PACKING_ATTENTION:
        return (
            "batch_flattening requires a varlen-capable attention backend (e.g., attn_implementation: "
            "flash_attention_2)."
        )
    if v.typed("sample_packing"):
        return "batch_flattening not compatible with sample_packing"
    return ""


def _selective_checkpointing_refusal(v: RecipeView) -> str:
    """check_selective_checkpointing (validation.py:1450-1481), before Axolotl adds its own reentrant default."""
    if not v.typed("selective_checkpointing") and not v.get("selective_checkpointing"):
        return ""
    if not v.typed("gradient_checkpointing"):
        return "selective_checkpointing requires gradient_checkpointing"
    if _reentrant(v):
        return (
            "selective_checkpointing requires non-reentrant checkpointing (gradient_checkpointing_kwargs."
            "use_reentrant: false)"
        )
    offloading = v.get("activation_offloading")
    if offloading and offloading != "hidden_states":
        return (
            "selective_checkpointing is only compatible with activation_offloading: hidden_states (or false); the "
            "TRL offloader paths bypass HF gradient checkpointing"
        )
    return ""


def _attention_name_refusal(v: RecipeView) -> str:
    """validate_attn_implementation (config.py:1590-1615): canonical names and hub kernel paths only."""
    written = v.get("attn_implementation")
    if written is None or (isinstance(written, str) and (written in CANONICAL_ATTENTION or "/" in written)):
        return ""
    if not isinstance(written, str):
        return f"attn_implementation must be a string, got {type(written).__name__}"
    if written in SHORT_ATTENTION:
        return (
            f"attn_implementation={written!r} is not accepted. Use the canonical name "
            f"{SHORT_ATTENTION[written]!r} instead."
        )
    return f"attn_implementation={written!r} is not a recognized backend."


def _qat_refusal(v: RecipeView) -> str:
    """check_qat_config (config.py:2084-2111)."""
    if not v.get("qat"):
        return ""
    if v.get("peft"):
        return "QAT and PEFT cannot be used together."
    if v.get("load_in_8bit"):
        return "QAT and load_in_8bit cannot be used together."
    if v.get("load_in_4bit"):
        return "QAT and load_in_4bit cannot be used together."
    if not v.torch_at_least("2.6"):
        return "QAT is not supported on torch version < 2.6.0"
    return ""


def _moe_quantization_refusal(v: RecipeView) -> str:
    """check_quantize_moe_experts (config.py:1874-1897); the ROCm branch is not judged."""
    if v.get("lora_target_linear"):
        return (
            "lora_target_linear is not compatible with quantize_moe_experts. Use lora_target_parameters to target "
            "expert weights instead."
        )
    if v.get("adapter") not in ("lora", "qlora"):
        return "quantize_moe_experts requires adapter: lora or qlora"
    if not (v.get("load_in_4bit") or v.get("load_in_8bit")):
        return "quantize_moe_experts requires load_in_4bit or load_in_8bit"
    return ""


def _number(v: RecipeView, key: str, default: float = 1) -> float:
    """A numeric setting as written (a number in a string too), else `default`."""
    found = v.typed(key, default)
    return found if isinstance(found, (int, float)) and not isinstance(found, bool) else default


def _relora_refusal(v: RecipeView) -> str:
    """check_relora (validation.py:1580-1611); an adapter a plugin registers is not judged."""
    if not v.get("jagged_restart_steps"):
        return "jagged_restart_steps must be set to use ReLoRA"
    if not v.get("adapter"):
        return "cfg.adapter must support ReLoRA to use ReLoRA restart semantics"
    if fsdp(v):
        return "fsdp not supported with ReLoRA"
    if v.get("deepspeed"):
        return "deepspeed not supported with ReLoRA"
    if v.get("lr_scheduler") == "one_cycle":
        return "ReLoRA is not compatible with the one_cycle scheduler"
    if v.typed("flash_attn_fuse_mlp"):
        return "Fused modules are not supported with ReLoRA"
    return ""


def _context_parallel_refusal(v: RecipeView) -> str:
    """The context-parallel checks (validation.py:1652-1663), `sequence_parallel_degree` being its old name; the
    GLM DSA kernels bring their own and are not judged."""
    size = v.typed("context_parallel_size") or v.typed("sequence_parallel_degree") or 1
    if not isinstance(size, (int, float)) or size <= 1 or v.get("use_glm_dsa_kernels"):
        return ""
    if attention(v) not in FLASH_LIB_ATTENTION:
        return (
            "context_parallel_size > 1 requires flash attention (attn_implementation: flash_attention_2 or "
            "flash_attention_3)."
        )
    batch = v.typed("micro_batch_size", 1)
    if v.typed("sample_packing") and isinstance(batch, (int, float)) and batch > 1:
        return "micro_batch_size must be set to 1 when sample_packing is enabled due to a `ring-flash-attn` requirement"
    return ""


def _invalid_patterns(v: RecipeView) -> list[str]:
    """check_lora_target_modules_regex (config.py:1732-1751): entries Python's re refuses."""
    import re

    written = v.get("lora_target_modules")
    if not isinstance(written, list):
        return []
    invalid = []
    for pattern in written:
        if isinstance(pattern, str):
            try:
                re.compile(pattern)
            except re.error:
                invalid.append(pattern)
    return invalid


# validate_ao_dtype (quantization.py:12-28)
TORCHAO_DTYPES = ("int4", "int8", "float8_e4m3fn", "fp8", "float8", "nvfp4", "mxfp4")


def _torchao_dtype_refusal(v: RecipeView) -> str:
    for block in ("qat", "quantization"):
        for field in ("weight_dtype", "activation_dtype"):
            written = v.get(f"{block}.{field}")
            if written is not None and written not in TORCHAO_DTYPES:
                return (
                    f"Invalid dtype: '{written}'. Must be one of: ['int4', 'int8', 'float8_e4m3fn', 'nvfp4', "
                    "'mxfp4', 'fp8', 'float8']"
                )
    return ""


def _better_transformer_warning(v: RecipeView) -> str:
    """check_better_transformers' warnings (validation.py:1516-1530): an adapter, or no half-precision load."""
    if v.typed("flash_optimum") is not True:
        return ""
    if v.get("adapter"):
        return "BetterTransformers probably doesn't work with PEFT adapters"
    if v.typed("bfloat16") is not True and v.typed("float16") is not True and not _amp_written(v):
        return "You should probably set bfloat16 or float16 to true to load the model in float16 for BetterTransformers"
    return ""


def _amp_written(v: RecipeView) -> bool:
    """`self.fp16 or self.bf16` in an "after" validator: `bf16` is still "auto" (truthy) unless written false."""
    return bool(v.typed("fp16") or v.typed("bf16", "auto"))


def _ebft_strided(v: RecipeView) -> bool:
    return v.get("rl") == "ebft" and v.get("ebft.mode") == "strided"


def _ebft_token_samples(v: RecipeView) -> tuple[int, int, int]:
    """check_ebft_strided_sequence_len's arithmetic (validation.py:1865-1886): (full_seq, n_samples, product)."""

    def number(key: str, default: int) -> int:
        found = v.get(key, default)
        return found if isinstance(found, int) and not isinstance(found, bool) else default

    seq_len = number("sequence_len", 512)
    n_samples = number("ebft.n_samples_per_prompt", 4)
    gen_len = number("ebft.generate_max_len", 8)
    stride = number("ebft.stride", 8) or 8
    context = number("ebft.context_length", 8)
    full_seq = seq_len + ((seq_len - gen_len - context) // stride + 1) * gen_len
    return full_seq, n_samples, full_seq * n_samples


def _context_parallel_size(v: RecipeView) -> float:
    size = v.typed("context_parallel_size") or v.typed("sequence_parallel_degree") or 1
    return size if isinstance(size, (int, float)) and not isinstance(size, bool) else 1


# the SSM/attention hybrids whose context parallelism Axolotl says is unvalidated (validation.py:1714-1718)
SSM_HYBRID_MODEL_TYPES = ("nemotron_h", "falcon_h1", "granitemoehybrid")


def _context_parallel_note(v: RecipeView) -> str:
    """What check_context_parallel_size logs on a context-parallel recipe it accepts (validation.py:1642-1651,
    1704-1729)."""
    size = _context_parallel_size(v)
    if size <= 1:
        return ""
    if v.get("use_glm_dsa_kernels"):
        return (
            "context_parallel_size > 1 with use_glm_dsa_kernels: the DSA kernels handle context parallelism "
            "(compressed-KV all-gather); skipping the flash/ring-attention requirement."
        )
    if _context_parallel_refusal(v):
        return ""
    if v.model_type in SSM_HYBRID_MODEL_TYPES:
        return (
            f"context_parallel_size={size:g} with model_type={v.model_type}: SSM/Mamba layers use P2P hidden-state "
            "passing and additive output correction across CP ranks. Attention layers use ring attention. This is "
            "mathematically exact but has not been extensively validated end-to-end — verify loss curves match "
            "single-GPU baselines."
        )
    return (
        f"Sequence parallelism (SP) is enabled with context_parallel_size={size:g}. Please note that logged losses "
        "may differ slightly to the non-SP losses due to transformers Trainer implementation details."
    )


def _fp8_backend_missing(v: RecipeView) -> bool:
    """check_fp8's second branch (config.py:1788-1791): accelerate's is_fp8_available() asks for ms-amp,
    transformer-engine or torchao >= 0.6.1 (accelerate utils/imports.py:92-153, 187-189)."""
    if not v.typed("fp8") or v.gpu is None or v.gpu.capability < (9, 0):
        return False
    answers = (v.installed("ms-amp"), v.installed("transformer-engine"), v.installed("torchao", "0.6.1"))
    return all(a is False for a in answers)


CHECKS: tuple[RecipeCheck, ...] = (
    RecipeCheck(
        FAMILY,
        f"{_V}:443-450",
        "refuses",
        "fp8_enable_fsdp_float8_all_gather requires FSDP2 (fsdp_version: 2) to be used.",
        ("fp8_enable_fsdp_float8_all_gather", "fsdp_version", "fsdp_config.fsdp_version"),
        lambda v: bool(v.get("fp8_enable_fsdp_float8_all_gather")) and v.get("fsdp_version") != 2,
        fix="set `fsdp_version: 2` (float8 all-gather is an FSDP2 feature), or drop "
        "`fp8_enable_fsdp_float8_all_gather`",
        fires=_FSDP + "fp8: true\nfp8_enable_fsdp_float8_all_gather: true\n",
        accepted=_FSDP + "fsdp_version: 2\nfp8: true\nfp8_enable_fsdp_float8_all_gather: true\n",
        target="h100",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:454-467",
        "refuses",
        "`use_reentrant` must be false when used with partially frozen model.",
        ("unfrozen_parameters", "gradient_checkpointing_kwargs.use_reentrant"),
        lambda v: bool(v.get("unfrozen_parameters")) and _reentrant(v) is True,
        fix="set `gradient_checkpointing_kwargs: {use_reentrant: false}`: reentrant checkpointing gives no "
        "gradient to trainable layers whose inputs come from frozen ones (transformers#21381)",
        fires=_BASE + "bf16: true\ngradient_checkpointing: true\ngradient_checkpointing_kwargs:\n"
        "  use_reentrant: true\nunfrozen_parameters:\n  - ^lm_head.weight$\n",
        accepted=_BASE + "bf16: true\ngradient_checkpointing: true\ngradient_checkpointing_kwargs:\n"
        "  use_reentrant: false\nunfrozen_parameters:\n  - ^lm_head.weight$\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:626-644",
        "warns",
        "qlora + zero3 with use_reentrant: false may result in a CheckpointError about recomputed values",
        ("adapter", "gradient_checkpointing_kwargs.use_reentrant", "deepspeed"),
        lambda v: (
            v.get("adapter") == "qlora"
            and _reentrant(v) is False
            and isinstance(v.get("deepspeed"), str)
            and "zero3" in str(v.get("deepspeed"))
        ),
        consequence="torch.utils.checkpoint.CheckpointError: Recomputed values for the following tensors have "
        "different metadata than during the forward pass.",
        fix="use reentrant checkpointing (`use_reentrant: true`) with QLoRA under ZeRO-3",
        fires=_QLORA + "deepspeed: deepspeed_configs/zero3_bf16.json\ngradient_checkpointing: true\n"
        "gradient_checkpointing_kwargs:\n  use_reentrant: false\n",
        accepted=_QLORA + "deepspeed: deepspeed_configs/zero3_bf16.json\ngradient_checkpointing: true\n"
        "gradient_checkpointing_kwargs:\n  use_reentrant: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:716-738",
        "refuses",
        "The `use_reentrant: True` implementation of gradient checkpointing is not supported for distributed RL "
        "training with QLoRA. Please set `use_reentrant: False` in `gradient_checkpointing_kwargs`.",
        ("rl", "gradient_checkpointing", "gradient_checkpointing_kwargs.use_reentrant", "load_in_4bit", "adapter"),
        # a "before" validator: raw values; `capabilities.n_gpu` is the WORLD_SIZE each rank starts with
        # (cli/config.py:369), which the launch decides
        lambda v: (
            bool(v.get("rl"))
            and bool(v.get("gradient_checkpointing"))
            and bool(v.get("gradient_checkpointing_kwargs.use_reentrant"))
            and bool(v.get("load_in_4bit"))
            and v.get("adapter") == "qlora"
            and (v.world_size or 1) > 1
        ),
        fix="set `gradient_checkpointing_kwargs: {use_reentrant: false}` (reentrant checkpointing with QLoRA is "
        "broken in TRL's distributed RL trainers)",
        fires=_QLORA + "rl: dpo\ngradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n",
        accepted=_QLORA + "rl: dpo\ngradient_checkpointing: true\ngradient_checkpointing_kwargs:\n"
        "  use_reentrant: false\n",
        target="a100:2",
        launcher="axolotl train config.yml",
        reads_launch=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1224-1229",
        "refuses",
        "deepspeed and fsdp cannot be used together.",
        ("deepspeed", "fsdp"),
        lambda v: bool(v.get("deepspeed")) and bool(v.get("fsdp")),
        fix="choose one: drop `fsdp` (and its fsdp_config) or drop `deepspeed`",
        fires=_BASE + "bf16: true\ndeepspeed: deepspeed_configs/zero2.json\nfsdp:\n  - full_shard\n  - auto_wrap\n",
        accepted=_BASE + "bf16: true\ndeepspeed: deepspeed_configs/zero2.json\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1139-1154",
        "refuses",
        "FSDP2 not compatible with adamw_8bit, use `adamw_torch_8bit` instead",
        ("optimizer", "fsdp_version", "fsdp_config.fsdp_version"),
        lambda v: (
            bool(v.get("fsdp_config")) and v.get("optimizer") in EIGHT_BIT_BNB_OPTIMIZERS and fsdp_version(v) == "2"
        ),
        fix="use `optimizer: adamw_torch_8bit` (torchao's 8-bit AdamW shards under FSDP2; bitsandbytes' CUDA ops "
        "fail on DTensor parameters)",
        says=lambda v: f"FSDP2 not compatible with {v.get('optimizer')}, use `adamw_torch_8bit` instead",
        fires=_FSDP + "fsdp_version: 2\noptimizer: adamw_8bit\n",
        accepted=_FSDP + "fsdp_version: 2\noptimizer: adamw_torch_8bit\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1126-1137",
        "refuses",
        "FSDP Offload not compatible with adamw_8bit",
        ("optimizer", "fsdp_config.offload_params", "fsdp_version"),
        lambda v: (
            bool(v.get("fsdp_config"))
            and "8bit" in str(v.get("optimizer") or "")
            and bool(fsdp_config(v).get("offload_params"))
            and fsdp_version(v) != "2"
        ),
        fix="keep the optimizer state on the GPU (`offload_params: false`), move to `fsdp_version: 2`, or use a "
        "32-bit optimizer",
        says=lambda v: f"FSDP Offload not compatible with {v.get('optimizer')}",
        fires=_BASE + "bf16: true\nfsdp_config:\n  offload_params: true\noptimizer: adamw_8bit\n",
        accepted=_BASE + "bf16: true\nfsdp_config:\n  offload_params: true\noptimizer: adamw_torch_fused\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1050-1065",
        "refuses",
        "FSDP1 does not support disabling cpu_offload_pin_memory, please set `fsdp_version` to 2",
        ("fsdp_config.cpu_offload_pin_memory", "fsdp_version", "fsdp_config.offload_params"),
        lambda v: bool(_pin_memory_refusal(v)),
        fix="set `fsdp_version: 2` and `offload_params: true` with `cpu_offload_pin_memory: false`, or drop it",
        says=_pin_memory_refusal,
        fires=_BASE + "bf16: true\nfsdp_config:\n  offload_params: true\n  cpu_offload_pin_memory: false\n",
        accepted=_BASE + "bf16: true\nfsdp_version: 2\nfsdp_config:\n  offload_params: true\n"
        "  cpu_offload_pin_memory: false\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1067-1081",
        "refuses",
        "FSDP2 does not support load_in_8bit or load_in_4bit with dpo. Please use DeepSpeed or set `fsdp_version` "
        "to 1.",
        ("fsdp_version", "rl", "load_in_8bit", "load_in_4bit"),
        lambda v: (
            fsdp_version_normalised(v) == 2
            and v.get("rl") in ("dpo", "kto", "orpo", "ipo")
            and bool(v.get("load_in_8bit") or v.get("load_in_4bit"))
        ),
        fix="train this preference recipe with DeepSpeed, or `fsdp_version: 1`, or without k-bit loading",
        says=lambda v: (
            f"FSDP2 does not support load_in_8bit or load_in_4bit with {v.get('rl')}. Please use DeepSpeed or set "
            "`fsdp_version` to 1."
        ),
        fires=_QLORA + "rl: dpo\nfsdp_version: 2\nfsdp_config:\n  offload_params: false\n",
        accepted=_QLORA + "rl: dpo\nfsdp_version: 1\nfsdp_config:\n  offload_params: false\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1212-1222",
        "refuses",
        "max_memory and gpu_memory_limit are mutually exclusive and cannot be used together.",
        ("max_memory", "gpu_memory_limit"),
        lambda v: v.has("max_memory") and v.has("gpu_memory_limit"),
        fix="keep one of `max_memory` and `gpu_memory_limit`",
        fires=_LORA + "gpu_memory_limit: 20GiB\nmax_memory:\n  0: 20GiB\n",
        accepted=_LORA + "gpu_memory_limit: 20GiB\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1231-1239",
        "refuses",
        "model_quantization_config and load_in_8bit or load_in_4bit cannot be used together.",
        ("model_quantization_config", "load_in_8bit", "load_in_4bit"),
        lambda v: bool(v.get("model_quantization_config")) and bool(v.get("load_in_8bit") or v.get("load_in_4bit")),
        fix="quantize one way: drop `load_in_4bit`/`load_in_8bit` or `model_quantization_config`",
        fires=_QLORA + "model_quantization_config: Mxfp4Config\n",
        accepted=_QLORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_PF}:215-223",
        "refuses",
        "Require cfg.load_in_4bit to be True for qlora",
        ("adapter", "load_in_4bit", "load_in_8bit", "gptq"),
        lambda v: bool(_qlora_refusal(v)),
        fix="QLoRA trains LoRA adapters over a 4-bit base: set `load_in_4bit: true` (and not 8-bit or GPTQ), or "
        "use `adapter: lora`",
        says=_qlora_refusal,
        fires=_BASE + "adapter: qlora\nload_in_8bit: true\nlora_r: 16\nbf16: true\n",
        accepted=_QLORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_PF}:240-250",
        "refuses",
        "lora_dropout must be 0 when lora_target_parameters is set. PEFT's ParamWrapper does not support "
        "lora_dropout != 0.",
        ("lora_target_parameters", "lora_dropout"),
        lambda v: bool(v.get("lora_target_parameters")) and bool(v.typed("lora_dropout")),
        fix="set `lora_dropout: 0` with `lora_target_parameters`",
        fires=_LORA + "lora_dropout: 0.05\nlora_target_parameters:\n  - mlp.experts.gate_up_proj\n",
        accepted=_LORA + "lora_dropout: 0.0\nlora_target_parameters:\n  - mlp.experts.gate_up_proj\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:585-590",
        "refuses",
        "lr_groups and loraplus_lr_ratio cannot be used together.",
        ("lr_groups", "loraplus_lr_ratio"),
        lambda v: bool(v.get("lr_groups")) and bool(v.get("loraplus_lr_ratio")),
        fix="use LoRA+ (`loraplus_lr_ratio`) or `lr_groups`, not both",
        fires=_LORA + "loraplus_lr_ratio: 16\nlr_groups:\n  - name: embeddings\n    modules: [embed_tokens]\n"
        "    lr: 0.00001\n",
        accepted=_LORA + "loraplus_lr_ratio: 16\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:614-618",
        "refuses",
        "Fused modules are not supported with LoRA/QLoRA",
        ("adapter", "flash_attn_fuse_mlp"),
        lambda v: v.get("adapter") in ("lora", "qlora") and bool(v.typed("flash_attn_fuse_mlp")),
        fix="drop `flash_attn_fuse_mlp` (fused MLP modules hide the projections LoRA targets)",
        fires=_LORA + "flash_attn_fuse_mlp: true\n",
        accepted=_LORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:646-659",
        "refuses",
        "lora_mlp_kernel, lora_qkv_kernel, and lora_o_kernel are not compatible with 8-bit LoRA a the moment.",
        ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "adapter", "load_in_8bit"),
        lambda v: (
            v.any_of("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel")
            and v.get("adapter") == "lora"
            and bool(v.get("load_in_8bit"))
        ),
        fix="turn the LoRA kernels off for an 8-bit base, or load it in 4-bit (QLoRA)",
        fires=_BASE + "adapter: lora\nload_in_8bit: true\nlora_r: 16\nlora_mlp_kernel: true\n",
        accepted=_BASE + "adapter: lora\nload_in_8bit: true\nlora_r: 16\nlora_mlp_kernel: false\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:205-212",
        "refuses",
        "scaling_softmax requires flex attention. Add `attn_implementation: flex_attention` to your config.",
        ("scaling_softmax", "attn_implementation"),
        lambda v: bool(v.typed("scaling_softmax")) and attention(v) != "flex_attention",
        fix="set `attn_implementation: flex_attention` with `scaling_softmax`",
        fires=_LORA + "scaling_softmax: true\nattn_implementation: sdpa\n",
        accepted=_LORA + "scaling_softmax: true\nattn_implementation: flex_attention\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1550-1555",
        "refuses",
        "attn_implementation='sdpa' cannot be combined with legacy attention flags (flash_attention). The legacy "
        "flags are deprecated — set only `attn_implementation`.",
        ("attn_implementation", *LEGACY_ATTENTION),
        lambda v: bool(v.get("attn_implementation")) and v.any_of(*LEGACY_ATTENTION),
        fix="keep only `attn_implementation` and delete the legacy flag",
        fires=_LORA + "attn_implementation: sdpa\nflash_attention: true\n",
        accepted=_LORA + "attn_implementation: sdpa\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1006-1034",
        "refuses",
        "Only one cross entropy optimization can be enabled at a time.",
        ("cut_cross_entropy", "chunked_cross_entropy", "liger_cross_entropy", "liger_fused_linear_cross_entropy"),
        lambda v: (
            sum(
                bool(v.get(k))
                for k in (
                    "cut_cross_entropy",
                    "chunked_cross_entropy",
                    "liger_cross_entropy",
                    "liger_fused_linear_cross_entropy",
                )
            )
            > 1
        ),
        fix="keep one cross-entropy kernel",
        fires=_LORA + "cut_cross_entropy: true\nliger_fused_linear_cross_entropy: true\n",
        accepted=_LORA + "cut_cross_entropy: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1444-1448",
        "refuses",
        "activation_offloading requires gradient_checkpointing",
        ("activation_offloading", "gradient_checkpointing"),
        lambda v: bool(v.typed("activation_offloading")) and not v.typed("gradient_checkpointing"),
        fix="turn on `gradient_checkpointing` with `activation_offloading`",
        fires=_LORA + "activation_offloading: true\n",
        accepted=_LORA + "gradient_checkpointing: true\nactivation_offloading: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:889-903",
        "refuses",
        "Muon optimizer is currently incompatible with DeepSpeed",
        ("optimizer", "deepspeed", "fsdp_version"),
        lambda v: v.get("optimizer") == "muon" and bool(_sharded_optimizer_refusal(v, "muon")),
        fix="train Muon under DDP or FSDP2 (`fsdp_version: 2`)",
        says=lambda v: _sharded_optimizer_refusal(v, "muon"),
        fires=_BASE + "bf16: true\noptimizer: muon\ndeepspeed: deepspeed_configs/zero2.json\n",
        accepted=_BASE + "bf16: true\noptimizer: muon\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:947-964",
        "refuses",
        "flash_adamw optimizer is incompatible with DeepSpeed. Flash optimizers only support DDP and FSDP2.",
        ("optimizer", "deepspeed", "fsdp_version"),
        lambda v: (
            str(v.get("optimizer") or "").startswith("flash_")
            and bool(_sharded_optimizer_refusal(v, str(v.get("optimizer"))))
        ),
        fix="train flash optimizers under DDP or FSDP2 (`fsdp_version: 2`)",
        says=lambda v: _sharded_optimizer_refusal(v, str(v.get("optimizer"))),
        fires=_BASE + "bf16: true\noptimizer: flash_adamw\nfsdp_config:\n  offload_params: false\n",
        accepted=_BASE + "bf16: true\noptimizer: flash_adamw\nfsdp_version: 2\nfsdp_config:\n  offload_params: false\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1660-1674",
        "refuses",
        "fp32_norms requires fsdp_version: 2. FSDP1's flat-param dtype uniformity constraint is incompatible with "
        "keeping norms in fp32 while decoder layers run in bf16.",
        ("fp32_norms", "fsdp_version"),
        lambda v: bool(_fp32_norms_refusal(v)),
        fix="use `fp32_norms` under FSDP2 only (`fsdp_version: 2` with an fsdp_config)",
        says=_fp32_norms_refusal,
        fires=_FSDP + "fp32_norms: true\n",
        accepted=_FSDP + "fsdp_version: 2\nfp32_norms: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:2113-2128",
        "refuses",
        "FSDP2 is not supported on torch version < 2.7.0",
        ("fsdp_version", "fsdp_config"),
        lambda v: bool(v.get("fsdp_config")) and str(v.get("fsdp_version")) == "2" and not v.torch_at_least("2.7"),
        fix="install torch >= 2.7 for FSDP2, or use `fsdp_version: 1`",
        fires=_FSDP + "fsdp_version: 2\n",
        accepted=_FSDP + "fsdp_version: 1\n",
        versions={"torch": "2.6.0"},
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:2023-2038",
        "refuses",
        "Flex attention is not supported on torch version < 2.6.0",
        ("attn_implementation", "flex_attention"),
        lambda v: attention(v) == "flex_attention" and not v.torch_at_least("2.6"),
        fix="install torch >= 2.6 for flex attention, or use `attn_implementation: sdpa`",
        fires=_LORA + "attn_implementation: flex_attention\n",
        accepted=_LORA + "attn_implementation: sdpa\n",
        versions={"torch": "2.5.1"},
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1810-1822",
        "refuses",
        "SageAttention supports compute capability between sm_80 and sm_120. Please use a different attention "
        "implementation.",
        ("attn_implementation", "sage_attention"),
        lambda v: attention(v) == "sage" and _compute_capability(v) not in SAGE_CAPABILITIES,
        fix="use `attn_implementation: sdpa` on this GPU",
        fires=_LORA + "attn_implementation: sage\nsample_packing: true\n",
        accepted=_LORA + "attn_implementation: sdpa\nsample_packing: true\n",
        target="t4",
        gpu=True,
        truth="the check is an allow-list: it also refuses sm_87 (Jetson Orin) and sm_100/sm_103 (B200, GB200), "
        "which SageAttention's own kernels support",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1824-1852",
        "refuses",
        "attn_implementation=fp8 requires compute capability sm_90 or higher (Hopper+).",
        ("attn_implementation",),
        lambda v: bool(_fp8_attention_refusal(v)),
        fix="use fp8 attention on Hopper or newer with torch >= 2.11; `attn_implementation: sdpa` elsewhere",
        says=_fp8_attention_refusal,
        fires=_LORA + "attn_implementation: fp8\n",
        accepted=_LORA + "attn_implementation: fp8\n",
        target="a100",
        accepted_target="h100",
        gpu=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1794-1808",
        "warns",
        "sample_packing & torch sdpa with bf16 is unsupported may results in 0.0 loss. This may work on H100s.",
        ("sample_packing", "attn_implementation", "sdp_attention", "bf16", "bfloat16"),
        lambda v: (
            bool(v.typed("sample_packing"))
            and attention(v) == "sdpa"
            and _bf16_on(v)
            and _compute_capability(v) != "sm_90"
        ),
        consequence="the loss may read 0.0 from the first step: packed bf16 rows through SDPA's kernels",
        fix="use `attn_implementation: flash_attention_2` (or flex_attention) with sample_packing, or pack off",
        fires=_LORA + "sample_packing: true\nattn_implementation: sdpa\n",
        accepted=_LORA + "sample_packing: true\nattn_implementation: flash_attention_2\n",
        target="a100",
        gpu=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1698-1709",
        "warns",
        "We recommend turning on `pad_to_sequence_len` for SageAttention without packing. The loss has been "
        "observed to explode otherwise.",
        ("attn_implementation", "sample_packing", "pad_to_sequence_len"),
        lambda v: attention(v) == "sage" and not v.typed("sample_packing") and not v.typed("pad_to_sequence_len"),
        consequence="the loss has been observed to explode",
        fix="set `pad_to_sequence_len: true` (or `sample_packing: true`) with SageAttention",
        fires=_LORA + "attn_implementation: sage\n",
        accepted=_LORA + "attn_implementation: sage\npad_to_sequence_len: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1711-1718",
        "warns",
        "SageAttention full finetuning has been observed to drop loss to 0. Monitor the loss, or switch to "
        "LoRA/QLoRA or another attention method.",
        ("attn_implementation", "adapter"),
        lambda v: attention(v) == "sage" and not v.get("adapter"),
        consequence="the loss has been observed to drop to 0",
        fix="train LoRA/QLoRA with SageAttention, or use another attention for a full fine-tune",
        fires=_BASE + "bf16: true\nattn_implementation: sage\nsample_packing: true\n",
        accepted=_BASE + "bf16: true\nattn_implementation: flash_attention_2\nsample_packing: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:186-203",
        "warns",
        "`sample_packing` without an attention backend does not handle cross-sample decontamination. Set "
        "`attn_implementation` to a packing-capable backend (e.g. flash_attention_2).",
        ("sample_packing", "attn_implementation"),
        lambda v: bool(v.typed("sample_packing")) and not _decontaminates(v),
        consequence="packed samples attend to each other's tokens: each example learns from its neighbours",
        fix="set `attn_implementation: flash_attention_2` (or flex_attention, sdpa, eager) with sample_packing",
        says=lambda v: (
            f"`sample_packing` with `attn_implementation={attention(v)!r}` does not handle cross-sample "
            "decontamination."
            if attention(v)
            else "`sample_packing` without an attention backend does not handle cross-sample decontamination."
        ),
        fires=_LORA + "sample_packing: true\n",
        accepted=_LORA + "sample_packing: true\nattn_implementation: flash_attention_2\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:592-603",
        "refuses",
        "`unfrozen_parameters` used with `peft_layers_to_transform` can have unexpected behavior.",
        ("adapter", "peft_layers_to_transform", "unfrozen_parameters"),
        lambda v: bool(v.get("adapter") and v.get("peft_layers_to_transform") and v.get("unfrozen_parameters")),
        fix="restrict the adapter with `peft_layers_to_transform` or unfreeze with `unfrozen_parameters`, not both",
        fires=_LORA + "peft_layers_to_transform: [0, 1]\nunfrozen_parameters:\n  - ^lm_head.weight$\n",
        accepted=_LORA + "peft_layers_to_transform: [0, 1]\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:605-612",
        "refuses",
        "peft_layers_pattern requires peft_layers_to_transform to be set",
        ("peft_layers_pattern", "peft_layers_to_transform"),
        lambda v: bool(v.get("peft_layers_pattern")) and not v.get("peft_layers_to_transform"),
        fix="give `peft_layers_to_transform` with `peft_layers_pattern`",
        fires=_LORA + "peft_layers_pattern: layers\n",
        accepted=_LORA + "peft_layers_pattern: layers\npeft_layers_to_transform: [0, 1]\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:620-624",
        "refuses",
        "LoRA/QLoRA is not supported with use_onebitllms",
        ("use_onebitllms", "adapter"),
        lambda v: bool(v.typed("use_onebitllms")) and v.get("adapter") in ("lora", "qlora"),
        fix="train onebitllms without a LoRA adapter",
        fires=_LORA + "use_onebitllms: true\n",
        accepted=_LORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:667-680",
        "refuses",
        "lora_mlp_kernel, lora_qkv_kernel, and lora_o_kernel are not compatible with trust_remote_code. Please "
        "disable trust_remote_code or explicitly set lora_*_kernel to false.",
        ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "trust_remote_code"),
        lambda v: v.any_of("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel") and bool(v.get("trust_remote_code")),
        fix="turn the LoRA kernels off for a remote-code model, or drop `trust_remote_code`",
        fires=_LORA + "trust_remote_code: true\nlora_qkv_kernel: true\n",
        accepted=_LORA + "trust_remote_code: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1241-1284",
        "refuses",
        "Quantification is currently not supported in Ascend npu, please disable load_in_4bit.",
        (
            "attn_implementation",
            "flash_attention",
            "sdp_attention",
            "optimizer",
            "load_in_8bit",
            "load_in_4bit",
            "tf32",
        ),
        lambda v: bool(_npu_refusal(v)),
        says=_npu_refusal,
        raises="NotImplementedError",
        fix="on Ascend NPU: eager attention, no bitsandbytes quantization or 8-bit optimizer, `tf32: false`",
        fires=_QLORA,
        accepted=_BASE + "adapter: lora\nlora_r: 16\nlora_target_linear: true\nbf16: true\n"
        "attn_implementation: eager\n",
        versions={"axolotl": "0.18.0", "torch-npu": "2.7.1"},
        accepted_versions={"axolotl": "0.18.0", "torch-npu": "2.7.1"},
        target="cpu",  # no NVIDIA GPU: the Ascend node itself
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:686-691",
        "refuses",
        "`sample_packing: true` does not work with RLHF training",
        ("sample_packing", "rl"),
        # KTO's own check (defined after it, so run before it) refuses packing with its own message
        lambda v: bool(v.get("sample_packing")) and bool(v.get("rl")) and v.get("rl") != "kto",
        fix="turn `sample_packing` off for preference / RL training",
        fires=_LORA + "rl: dpo\nsample_packing: true\n",
        accepted=_LORA + "rl: dpo\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:693-702",
        "refuses",
        "sample_packing is not supported with kto",
        ("rl", "sample_packing", "eval_sample_packing"),
        lambda v: v.get("rl") == "kto" and bool(v.get("sample_packing") or v.get("eval_sample_packing")),
        fix="turn `sample_packing` and `eval_sample_packing` off for KTO",
        fires=_LORA + "rl: kto\nremove_unused_columns: false\nsample_packing: true\n",
        accepted=_LORA + "rl: kto\nremove_unused_columns: false\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:905-945",
        "refuses",
        "q_galore_adamw8bit requires FSDP2. Set fsdp_version: 2.",
        ("optimizer", "adapter", "deepspeed", "fsdp_version", "fsdp_config.use_orig_params"),
        lambda v: v.get("optimizer") == "q_galore_adamw8bit" and bool(_qgalore_refusal(v)),
        fix="Q-GaLore trains the full model: no adapter, no DeepSpeed; under FSDP, FSDP2 with use_orig_params: true",
        says=_qgalore_refusal,
        fires=_BASE + "bf16: true\noptimizer: q_galore_adamw8bit\nfsdp_config:\n  offload_params: false\n",
        accepted=_BASE + "bf16: true\noptimizer: q_galore_adamw8bit\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:966-982",
        "refuses",
        "batch_flattening requires a varlen-capable attention backend (e.g., attn_implementation: flash_attention_2).",
        ("batch_flattening", "attn_implementation", "sample_packing"),
        lambda v: bool(_batch_flattening_refusal(v)),
        fix="use batch_flattening with flash_attention_2 / flex_attention and without sample_packing, or "
        "`batch_flattening: auto`",
        says=_batch_flattening_refusal,
        fires=_LORA + "batch_flattening: true\nattn_implementation: sdpa\n",
        accepted=_LORA + "batch_flattening: true\nattn_implementation: flash_attention_2\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1396-1400",
        "refuses",
        "FSDP is not supported for falcon models",
        ("base_model", "fsdp"),
        lambda v: "falcon" in str(v.get("base_model") or "").lower() and bool(v.get("fsdp")),
        fix="train Falcon with DeepSpeed or DDP",
        fires="base_model: tiiuae/falcon-7b\nmicro_batch_size: 1\ngradient_accumulation_steps: 4\nbf16: true\n"
        "fsdp:\n  - full_shard\n  - auto_wrap\n",
        accepted="base_model: tiiuae/falcon-7b\nmicro_batch_size: 1\ngradient_accumulation_steps: 4\nbf16: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1402-1408",
        "refuses",
        "gradient_checkpointing is not supported for MPT models",
        ("base_model", "gradient_checkpointing"),
        lambda v: "mpt" in str(v.get("base_model") or "").lower() and bool(v.typed("gradient_checkpointing")),
        fix="turn gradient checkpointing off for MPT",
        fires="base_model: mosaicml/mpt-7b\nmicro_batch_size: 1\ngradient_accumulation_steps: 4\nbf16: true\n"
        "gradient_checkpointing: true\n",
        accepted="base_model: mosaicml/mpt-7b\nmicro_batch_size: 1\ngradient_accumulation_steps: 4\nbf16: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1410-1423",
        "refuses",
        "gradient_checkpointing for nemotron_h requires sample_packing: true.",
        ("base_model", "gradient_checkpointing", "sample_packing"),
        lambda v: (
            "nemotron-h" in str(v.get("base_model") or "").lower()
            and bool(v.typed("gradient_checkpointing"))
            and not v.typed("sample_packing")
        ),
        fix="turn on `sample_packing` with gradient checkpointing for Nemotron-H",
        fires="base_model: nvidia/Nemotron-H-8B-Base-8K\nmicro_batch_size: 1\ngradient_accumulation_steps: 4\n"
        "bf16: true\ngradient_checkpointing: true\n",
        accepted="base_model: nvidia/Nemotron-H-8B-Base-8K\nmicro_batch_size: 1\ngradient_accumulation_steps: 4\n"
        "bf16: true\ngradient_checkpointing: true\nsample_packing: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1450-1481",
        "refuses",
        "selective_checkpointing requires gradient_checkpointing",
        ("selective_checkpointing", "gradient_checkpointing", "gradient_checkpointing_kwargs.use_reentrant"),
        lambda v: bool(_selective_checkpointing_refusal(v)),
        fix="selective checkpointing is non-reentrant gradient checkpointing: turn `gradient_checkpointing` on with "
        "`use_reentrant: false`",
        says=_selective_checkpointing_refusal,
        fires=_LORA + "selective_checkpointing: true\n",
        accepted=_LORA + "gradient_checkpointing: true\nselective_checkpointing: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1496-1514",
        "refuses",
        "activation_offloading: hidden_states with reentrant checkpointing is incompatible with "
        "`unfrozen_parameters` (partially frozen model).",
        ("activation_offloading", "gradient_checkpointing_kwargs.use_reentrant", "unfrozen_parameters"),
        lambda v: (
            v.get("activation_offloading") == "hidden_states"
            and bool(_reentrant(v))
            and bool(v.get("unfrozen_parameters"))
        ),
        fix="use non-reentrant checkpointing (`use_reentrant: false`, the default for hidden_states offloading)",
        fires=_BASE + "bf16: true\ngradient_checkpointing: true\nactivation_offloading: hidden_states\n"
        "gradient_checkpointing_kwargs:\n  use_reentrant: true\nunfrozen_parameters:\n  - ^lm_head.weight$\n",
        accepted=_BASE + "bf16: true\ngradient_checkpointing: true\nactivation_offloading: hidden_states\n"
        "unfrozen_parameters:\n  - ^lm_head.weight$\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1543-1552",
        "refuses",
        "FSDP cpu_ram_efficient_loading is not supported for Mxfp4Config model quantization.",
        ("model_quantization_config", "fsdp_config.cpu_ram_efficient_loading"),
        lambda v: (
            v.get("model_quantization_config") == "Mxfp4Config"
            and isinstance(v.get("fsdp_config"), dict)
            and v.get("fsdp_config.cpu_ram_efficient_loading") is True
        ),
        fix="set `cpu_ram_efficient_loading: false` for an MXFP4 model under FSDP",
        fires=_LORA + "model_quantization_config: Mxfp4Config\nfsdp_version: 2\nfsdp_config:\n"
        "  cpu_ram_efficient_loading: true\n",
        accepted=_LORA + "model_quantization_config: Mxfp4Config\nfsdp_version: 2\nfsdp_config:\n"
        "  cpu_ram_efficient_loading: false\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1775-1783",
        "refuses",
        "tensor_parallel_size is not supported with paged_adamw_8bit, adamw_8bit, and adamw_bnb_8bit optimizers",
        ("tensor_parallel_size", "optimizer"),
        lambda v: (
            _number(v, "tensor_parallel_size") > 1
            and v.get("optimizer") in ("paged_adamw_8bit", *EIGHT_BIT_BNB_OPTIMIZERS)
        ),
        fix="use a 32-bit optimizer (or adamw_torch_8bit) with tensor parallelism",
        fires=_BASE + "bf16: true\ntensor_parallel_size: 2\noptimizer: adamw_8bit\n",
        accepted=_BASE + "bf16: true\ntensor_parallel_size: 2\noptimizer: adamw_torch_fused\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1577-1588",
        "refuses",
        "large_head_attention must be one of ['auto', 'sdpa', 'triton_flash']",
        ("large_head_attention",),
        lambda v: (
            v.get("large_head_attention") is not None
            and str(v.get("large_head_attention")).lower() not in ("auto", "sdpa", "triton_flash")
        ),
        fix="`large_head_attention` is one of auto, sdpa, triton_flash",
        says=lambda v: (
            "large_head_attention must be one of ['auto', 'sdpa', 'triton_flash'], got "
            f"{v.get('large_head_attention')!r}"
        ),
        fires=_LORA + "large_head_attention: triton\n",
        accepted=_LORA + "large_head_attention: triton_flash\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1590-1615",
        "refuses",
        "attn_implementation='flash' is not accepted. Use the canonical name 'flash_attention_2' instead.",
        ("attn_implementation",),
        lambda v: bool(_attention_name_refusal(v)),
        fix="write the canonical name: eager, sdpa, flash_attention_2, flash_attention_3, flex_attention, "
        "xformers, sage, fp8, or a hub kernel path",
        says=_attention_name_refusal,
        fires=_LORA + "attn_implementation: flash\n",
        accepted=_LORA + "attn_implementation: flash_attention_2\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:2005-2021",
        "refuses",
        "ADOPT optimizer is incompatible with torch version < 2.5.1",
        ("optimizer",),
        lambda v: "adopt" in str(v.get("optimizer") or "") and not v.torch_at_least("2.5.1"),
        fix="install torch >= 2.5.1 for ADOPT, or use another optimizer",
        fires=_LORA + "optimizer: adopt_adamw\n",
        accepted=_LORA + "optimizer: adamw_torch_fused\n",
        versions={"torch": "2.4.1"},
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:2084-2111",
        "refuses",
        "QAT and load_in_4bit cannot be used together.",
        ("qat", "peft", "load_in_8bit", "load_in_4bit"),
        lambda v: bool(_qat_refusal(v)),
        fix="quantization-aware training trains the full model in high precision: no k-bit loading, no `peft:` "
        "block, torch >= 2.6",
        says=_qat_refusal,
        fires=_QLORA + "qat:\n  weight_dtype: int4\n",
        accepted=_BASE + "bf16: true\nqat:\n  weight_dtype: int4\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1874-1897",
        "refuses",
        "quantize_moe_experts requires load_in_4bit or load_in_8bit",
        ("quantize_moe_experts", "lora_target_linear", "adapter", "load_in_4bit", "load_in_8bit"),
        lambda v: bool(v.get("quantize_moe_experts")) and bool(_moe_quantization_refusal(v)),
        fix="quantize_moe_experts needs a LoRA/QLoRA adapter over a 4- or 8-bit base, with lora_target_parameters "
        "(not lora_target_linear)",
        says=_moe_quantization_refusal,
        fires=_BASE + "bf16: true\nadapter: lora\nquantize_moe_experts: true\n",
        accepted=_BASE + "bf16: true\nadapter: qlora\nload_in_4bit: true\nquantize_moe_experts: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1539-1548",
        "refuses",
        "gemma4_hybrid_attn_impl requires attn_implementation=flash_attention_2 (sliding-window layers run under FA2).",
        ("gemma4_hybrid_attn_impl", "attn_implementation"),
        lambda v: (
            bool(v.get("gemma4_hybrid_attn_impl"))
            and bool(v.get("attn_implementation"))
            and v.get("attn_implementation") != "flash_attention_2"
        ),
        fix="leave `attn_implementation` unset (Axolotl picks flash_attention_2) or set flash_attention_2",
        fires=_LORA + "gemma4_hybrid_attn_impl: true\nattn_implementation: sdpa\n",
        accepted=_LORA + "gemma4_hybrid_attn_impl: true\n",
    ),
    RecipeCheck(
        FAMILY,
        "src/axolotl/utils/schemas/deprecated.py:127-140",
        "refuses",
        "`s2_attention` (shifted-sparse attention) is no longer supported.",
        ("s2_attention", "flash_attn_rms_norm"),
        lambda v: bool(v.get("s2_attention") or v.get("flash_attn_rms_norm")),
        fix="remove the setting: Axolotl no longer supports it",
        says=lambda v: (
            "`s2_attention` (shifted-sparse attention) is no longer supported."
            if v.get("s2_attention")
            else "`flash_attn_rms_norm` is no longer supported."
        ),
        fires=_LORA + "s2_attention: true\n",
        accepted=_LORA,
        raises="DeprecationWarning",
    ),
    RecipeCheck(
        FAMILY,
        "src/axolotl/utils/schemas/fsdp.py:84-89",
        "refuses",
        "fsdp_config.min_num_params is required when auto_wrap_policy is SIZE_BASED_WRAP",
        ("fsdp_config.auto_wrap_policy", "fsdp_config.min_num_params"),
        lambda v: (
            fsdp_config(v).get("auto_wrap_policy") == "SIZE_BASED_WRAP" and fsdp_config(v).get("min_num_params") is None
        ),
        fix="give `min_num_params` with SIZE_BASED_WRAP, or wrap by layer class (TRANSFORMER_BASED_WRAP)",
        fires=_FSDP + "  auto_wrap_policy: SIZE_BASED_WRAP\n",
        accepted=_FSDP + "  auto_wrap_policy: SIZE_BASED_WRAP\n  min_num_params: 100000000\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1854-1872",
        "refuses",
        "lora_mlp_kernel, lora_qkv_kernel, and lora_o_kernel are not compatible with FSDP1.",
        ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "lora_embedding_kernel", "fsdp_config"),
        # reads the machine's GPU count and the recipe as written (a config.py "before" validator)
        lambda v: (
            v.any_of("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "lora_embedding_kernel")
            and v.gpu_count > 1
            and v.has("fsdp_config")
            and str(v.get("fsdp_version")) != "2"
        ),
        fix="use the LoRA kernels under FSDP2 (`fsdp_version: 2`), or turn them off",
        fires=_LORA + "lora_mlp_kernel: true\nfsdp_config:\n  offload_params: false\n",
        accepted=_LORA + "lora_mlp_kernel: true\nfsdp_version: 2\nfsdp_config:\n  offload_params: false\n",
        target="a100:2",
        gpu=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1580-1611",
        "refuses",
        "jagged_restart_steps must be set to use ReLoRA",
        ("relora", "jagged_restart_steps", "adapter", "fsdp_config", "deepspeed", "lr_scheduler"),
        lambda v: bool(v.typed("relora")) and bool(_relora_refusal(v)),
        fix="ReLoRA restarts LoRA adapters: give `jagged_restart_steps`, a lora/qlora adapter, no FSDP or "
        "DeepSpeed, no one_cycle scheduler, no fused MLP",
        says=_relora_refusal,
        fires=_LORA + "relora: true\n",
        accepted=_LORA + "relora: true\njagged_restart_steps: 100\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1188-1206",
        "refuses",
        "DeepCompile is only supported with DeepSpeed",
        ("deepcompile", "deepspeed"),
        lambda v: bool(v.get("deepcompile")) and not v.get("deepspeed"),
        fix="DeepCompile compiles DeepSpeed's engine: give a `deepspeed` config, or drop `deepcompile`",
        fires=_LORA + "deepcompile: true\n",
        accepted=_LORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1652-1663",
        "refuses",
        "context_parallel_size > 1 requires flash attention (attn_implementation: flash_attention_2 or "
        "flash_attention_3).",
        ("context_parallel_size", "sequence_parallel_degree", "attn_implementation", "sample_packing"),
        lambda v: bool(_context_parallel_refusal(v)),
        fix="context parallelism runs ring flash attention: `attn_implementation: flash_attention_2`, and "
        "`micro_batch_size: 1` with sample_packing",
        says=_context_parallel_refusal,
        fires=_LORA + "context_parallel_size: 2\nattn_implementation: sdpa\n",
        accepted=_LORA + "context_parallel_size: 2\nattn_implementation: flash_attention_2\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:703-714",
        "refuses",
        "GRPO + SP + Liger not currently supported",
        ("rl", "trl.use_liger_loss", "context_parallel_size"),
        lambda v: (
            v.get("rl") == "grpo" and bool(v.get("trl.use_liger_loss")) and _number(v, "context_parallel_size") > 1
        ),
        fix="turn off `trl.use_liger_loss` for GRPO with context parallelism",
        fires=_LORA + "rl: grpo\ntrl:\n  use_liger_loss: true\ncontext_parallel_size: 2\n"
        "attn_implementation: flash_attention_2\n",
        accepted=_LORA + "rl: grpo\ntrl:\n  use_liger_loss: false\ncontext_parallel_size: 2\n"
        "attn_implementation: flash_attention_2\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1732-1751",
        "refuses",
        "lora_target_modules contains invalid regex pattern(s)",
        ("lora_target_modules",),
        lambda v: bool(_invalid_patterns(v)),
        fix="write each lora_target_modules entry as a valid Python regex or a plain module name",
        says=lambda v: (
            f"lora_target_modules contains invalid regex pattern(s): {_invalid_patterns(v)}. Please "
            "provide valid Python regex patterns or plain module name strings."
        ),
        fires=_LORA + "lora_target_modules:\n  - q_proj\n  - '*.v_proj'\n",
        accepted=_LORA + "lora_target_modules:\n  - q_proj\n  - '.*v_proj'\n",
    ),
    RecipeCheck(
        FAMILY,
        "src/axolotl/utils/schemas/quantization.py:12-28",
        "refuses",
        "Invalid dtype: 'int2'. Must be one of: ['int4', 'int8', 'float8_e4m3fn', 'nvfp4', 'mxfp4', 'fp8', 'float8']",
        ("qat.weight_dtype", "qat.activation_dtype", "quantization.weight_dtype", "quantization.activation_dtype"),
        lambda v: bool(_torchao_dtype_refusal(v)),
        fix="use one of int4, int8, float8_e4m3fn (fp8, float8), nvfp4, mxfp4",
        says=_torchao_dtype_refusal,
        fires=_BASE + "bf16: true\nqat:\n  weight_dtype: int2\n",
        accepted=_BASE + "bf16: true\nqat:\n  weight_dtype: int4\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PF}:189-198",
        "refuses",
        "Adapter 'dora' is not built in and was not registered by a plugin. Add the plugin that provides this "
        "adapter to `plugins:`.",
        ("adapter", "plugins"),
        # with plugins listed, one may register it: not judged
        lambda v: (
            bool(v.get("adapter"))
            and v.get("adapter") not in ("lora", "qlora", "llama-adapter")
            and not v.get("plugins")
        ),
        fix="use `adapter: lora` (DoRA is `peft_use_dora: true` on it) or list the plugin that provides the adapter",
        says=lambda v: (
            f"Adapter '{v.get('adapter')}' is not built in and was not registered by a plugin. Add the "
            "plugin that provides this adapter to `plugins:`."
        ),
        fires=_BASE + "bf16: true\nadapter: dora\n",
        accepted=_BASE + "bf16: true\nadapter: lora\npeft_use_dora: true\n",
    ),
    # advice-level warnings Axolotl logs as it reads the recipe (PD702): the job runs, as the consequence says
    RecipeCheck(
        FAMILY,
        f"{_V}:427-432",
        "warns",
        "torch_compile is strongly recommended for FP8 training in order to see speed improvements. Please consider "
        "setting `torch_compile: true` in your config.",
        ("fp8", "torch_compile"),
        lambda v: bool(v.get("fp8")) and not v.get("torch_compile"),
        consequence="fp8 trains without a speed-up over bf16: the fp8 casts are not fused",
        fix="set `torch_compile: true`",
        fires=_BASE + "bf16: true\nfp8: true\n",
        accepted=_BASE + "bf16: true\nfp8: true\ntorch_compile: true\n",
        target="h100",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:433-442",
        "warns",
        "FP8 + FSDP2 + activation checkpointing may be slower than BF16 training. Please considering setting "
        "`activation_checkpointing: false` in your FSDP config.",
        ("fp8", "fsdp_config.activation_checkpointing", "fsdp_config.fsdp_activation_checkpointing"),
        lambda v: (
            bool(v.get("fp8"))
            and isinstance(v.get("fsdp_config"), dict)
            and True
            in (v.get("fsdp_config.activation_checkpointing"), v.get("fsdp_config.fsdp_activation_checkpointing"))
        ),
        consequence="fp8 with FSDP's activation checkpointing may train slower than bf16",
        fix="set `activation_checkpointing: false` in fsdp_config (or train in bf16)",
        fires=_FSDP + "  activation_checkpointing: true\nfp8: true\ntorch_compile: true\nfsdp_version: 2\n",
        accepted=_FSDP + "fp8: true\ntorch_compile: true\nfsdp_version: 2\n",
        target="h100",
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1675-1679",
        "warns",
        "fp32_norm_classes is set but fp32_norms is not enabled; it will be ignored.",
        ("fp32_norm_classes", "fp32_norms"),
        lambda v: bool(v.get("fp32_norm_classes")) and not v.typed("fp32_norms"),
        consequence="the norm classes listed stay in the training dtype",
        fix="set `fp32_norms: true`, or drop `fp32_norm_classes`",
        fires=_LORA + "fp32_norm_classes:\n  - LlamaRMSNorm\n",
        accepted=_LORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1682-1696",
        "warns",
        "`sdpa_varlen` only affects packed rows; enable `sample_packing` or it is a no-op.",
        ("sdpa_varlen", "sample_packing"),
        lambda v: bool(v.typed("sdpa_varlen")) and (not v.typed("sample_packing") or not v.torch_at_least("2.10")),
        says=lambda v: (
            "`sdpa_varlen` only affects packed rows; enable `sample_packing` or it is a no-op."
            if not v.typed("sample_packing")
            else "`sdpa_varlen` needs torch >= 2.10 (torch.nn.attention.varlen); it will be ignored and stock SDPA "
            "used."
        ),
        consequence="stock SDPA runs instead",
        fix="turn `sample_packing` on (on torch >= 2.10), or drop `sdpa_varlen`",
        fires=_LORA + "sdpa_varlen: true\n",
        accepted=_LORA + "sdpa_varlen: true\nsample_packing: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1036-1048",
        "warns",
        "FSDP1 is deprecated and will be removed in an upcoming release of Axolotl (transformers plans to in v5.20). "
        "We recommend migrating to fsdp_version: 2 for better performance and compatibility.",
        ("fsdp_config", "fsdp_version"),
        lambda v: bool(v.get("fsdp_config")) and str(fsdp_version_normalised(v)) != "2",
        consequence="FSDP1 runs today; a later Axolotl or transformers release drops it",
        fix="set `fsdp_version: 2` (docs.axolotl.ai/docs/multi-gpu.html#sec-fsdp)",
        fires=_FSDP,
        accepted=_FSDP + "fsdp_version: 2\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1083-1103",
        "warns",
        "Configuring FSDP fields with the `fsdp_` prefix is deprecated. Please omit the `fsdp_` prefix from the any "
        "fields in `fsdp_config`.",
        ("fsdp_config",),
        lambda v: any(
            isinstance(k, str) and k.startswith("fsdp_") and k != "fsdp_version" for k in _raw_fsdp_config(v)
        ),
        consequence="the keys are read without their prefix",
        fix="drop the `fsdp_` prefix of the keys in fsdp_config",
        fires=_BASE + "bf16: true\nfsdp_version: 2\nfsdp_config:\n  fsdp_offload_params: false\n",
        accepted=_BASE + "bf16: true\nfsdp_version: 2\nfsdp_config:\n  offload_params: false\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:873-879",
        "warns",
        "adamw hyperparameters found, but no adamw optimizer set",
        ("adam_beta1", "adam_beta2", "adam_epsilon", "optimizer"),
        lambda v: (
            any(v.get(k) for k in ("adam_beta1", "adam_beta2", "adam_epsilon"))
            and v.has("optimizer")
            and "adamw" not in str(v.get("optimizer")).lower()
        ),
        consequence="the beta/epsilon values are not used by the optimizer chosen",
        fix="drop adam_beta1/adam_beta2/adam_epsilon, or choose an AdamW optimizer",
        fires=_LORA + "optimizer: sgd\nadam_beta2: 0.95\n",
        accepted=_LORA + "optimizer: adamw_torch_fused\nadam_beta2: 0.95\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1425-1442",
        "warns",
        "`offload` is deprecated for gradient_checkpointing, use `activation_offloading: true` or "
        "`activation_offloading: legacy`",
        ("gradient_checkpointing",),
        lambda v: v.get("gradient_checkpointing") in ("offload", "offload_disk"),
        says=lambda v: (
            "`offload_disk` is deprecated for gradient_checkpointing, use `activation_offloading: disk`"
            if v.get("gradient_checkpointing") == "offload_disk"
            else "`offload` is deprecated for gradient_checkpointing, use `activation_offloading: true` or "
            "`activation_offloading: legacy`"
        ),
        consequence="Axolotl turns it into gradient_checkpointing: true with activation offloading",
        fix="write `gradient_checkpointing: true` and `activation_offloading: true` (or `disk`)",
        fires=_LORA + "gradient_checkpointing: offload\n",
        accepted=_LORA + "gradient_checkpointing: true\nactivation_offloading: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:228-242",
        "warns",
        "`pad_to_sequence_len: true` is recommended when using sample_packing",
        ("sample_packing", "pad_to_sequence_len"),
        lambda v: bool(v.get("sample_packing")) and v.get("pad_to_sequence_len") is False,
        consequence="packed batches vary in length, which can fragment the GPU's memory (Axolotl sets it for you "
        "when it is left unset)",
        fix="drop `pad_to_sequence_len: false` (or set it true)",
        fires=_LORA + "sample_packing: true\npad_to_sequence_len: false\n",
        accepted=_LORA + "sample_packing: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1516-1530",
        "refuses",
        "AMP is not supported with BetterTransformer",
        ("flash_optimum", "bf16", "fp16"),
        lambda v: v.typed("flash_optimum") is True and _amp_written(v),
        fix="load the model in half precision without AMP (`bf16: false`, `bfloat16: true`), or drop "
        "`flash_optimum`: transformers' SDPA attention is what BetterTransformer gave",
        fires=_BASE + "flash_optimum: true\n",  # `bf16` left at its default, "auto"
        accepted=_BASE + "flash_optimum: true\nbf16: false\nbfloat16: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1516-1530",
        "warns",
        "BetterTransformers probably doesn't work with PEFT adapters",
        ("flash_optimum", "adapter", "bfloat16", "float16"),
        lambda v: bool(_better_transformer_warning(v)),
        says=_better_transformer_warning,
        consequence="BetterTransformer's fused layers replace the modules the adapter targets, or the model trains "
        "in fp32",
        fix="drop `flash_optimum` (SDPA attention needs no conversion), or load in half precision "
        "(`bfloat16: true`) without an adapter",
        fires=_LORA.replace("bf16: true\n", "bf16: false\nbfloat16: true\n") + "flash_optimum: true\n",
        accepted=_LORA.replace("bf16: true\n", "bf16: false\nbfloat16: true\n"),
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1800-1822",
        "refuses",
        "EBFT strided mode: `torch_compile: true` with `gradient_checkpointing: true` causes CheckpointError "
        "(BlockMask metadata mismatch during recomputation). Remove `torch_compile` — the flex_attention kernel "
        "compiles itself internally.",
        ("rl", "ebft.mode", "torch_compile", "gradient_checkpointing"),
        lambda v: _ebft_strided(v) and v.get("torch_compile") is True and bool(v.get("gradient_checkpointing")),
        fix="drop `torch_compile` (flex_attention compiles its own kernel)",
        fires=_BASE + "bf16: true\nrl: ebft\nebft:\n  mode: strided\ntorch_compile: true\n"
        "gradient_checkpointing: true\n",
        accepted=_BASE + "bf16: true\nrl: ebft\nebft:\n  mode: strided\ngradient_checkpointing: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1800-1822",
        "warns",
        "EBFT strided mode: `torch_compile: true` causes dynamo recompiles from variable sequence lengths across "
        "steps. Consider removing it — flex_attention compiles itself internally.",
        ("rl", "ebft.mode", "torch_compile", "gradient_checkpointing"),
        lambda v: _ebft_strided(v) and v.get("torch_compile") is True and not v.get("gradient_checkpointing"),
        consequence="steps recompile as sequence lengths change: slower, not faster",
        fix="drop `torch_compile`",
        fires=_BASE + "bf16: true\nrl: ebft\nebft:\n  mode: strided\ntorch_compile: true\n",
        accepted=_BASE + "bf16: true\nrl: ebft\nebft:\n  mode: strided\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1824-1843",
        "warns",
        "EBFT strided mode with flex_attention: setting `use_reentrant: true` in gradient_checkpointing_kwargs "
        "(required for flex_attention compatibility). Non-reentrant checkpointing causes CheckpointError with "
        "BlockMask metadata.",
        ("rl", "ebft.mode", "attn_implementation", "gradient_checkpointing", "gradient_checkpointing_kwargs"),
        lambda v: (
            _ebft_strided(v)
            and attention(v) == "flex_attention"
            and bool(v.typed("gradient_checkpointing"))
            and not _reentrant(v)
        ),
        consequence="Axolotl switches to reentrant checkpointing itself; the recipe does not say what runs",
        fix="write `gradient_checkpointing_kwargs: {use_reentrant: true}`",
        fires=_BASE + "bf16: true\nrl: ebft\nebft:\n  mode: strided\nattn_implementation: flex_attention\n"
        "gradient_checkpointing: true\n",
        accepted=_BASE + "bf16: true\nrl: ebft\nebft:\n  mode: strided\nattn_implementation: flex_attention\n"
        "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1845-1863",
        "refuses",
        "EBFT strided mode: `activation_offloading: true` is incompatible with `attn_implementation: "
        "flex_attention`. Activation offloading replaces gradient checkpointing with FSDP-style wrapping that "
        "conflicts with flex_attention's reentrant checkpoint requirement. Remove `activation_offloading` — the "
        "strided trainer uses micro-batched forward passes for memory efficiency instead.",
        ("rl", "ebft.mode", "activation_offloading", "attn_implementation"),
        lambda v: _ebft_strided(v) and v.typed("activation_offloading") is True and attention(v) == "flex_attention",
        fix="drop `activation_offloading`",
        fires=_BASE + "bf16: true\nrl: ebft\nebft:\n  mode: strided\nattn_implementation: flex_attention\n"
        "activation_offloading: true\n",
        accepted=_BASE + "bf16: true\nrl: ebft\nebft:\n  mode: strided\nattn_implementation: flex_attention\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1865-1886",
        "warns",
        "EBFT strided: full_seq_len * n_samples token-samples per step. This may require >24GB VRAM for a 1B+ "
        "model. Consider reducing sequence_len, n_samples_per_prompt, or stride.",
        ("rl", "ebft.mode", "sequence_len", "ebft.n_samples_per_prompt", "ebft.generate_max_len", "ebft.stride"),
        lambda v: _ebft_strided(v) and _ebft_token_samples(v)[2] > 20000,
        says=lambda v: (
            "EBFT strided: full_seq_len={} * n_samples={} = {} token-samples per step. This may require >24GB "
            "VRAM for a 1B+ model. Consider reducing sequence_len, n_samples_per_prompt, or stride."
        ).format(*_ebft_token_samples(v)),
        consequence="the strided trainer's activations may not fit the GPU (CUDA out of memory in the first step)",
        fix="lower `sequence_len` or `ebft.n_samples_per_prompt`, or raise `ebft.stride`",
        fires=_BASE + "bf16: true\nrl: ebft\nsequence_len: 4096\nebft:\n  mode: strided\n",
        accepted=_BASE + "bf16: true\nrl: ebft\nsequence_len: 1024\nebft:\n  mode: strided\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:980-991",
        "warns",
        "batch_flattening with use_liger_loss: flattening will only apply to the scoring path (deferred "
        "logprobs). The training forward pass uses Liger's fused lm_head+loss kernel instead.",
        ("batch_flattening", "trl.use_liger_loss", "micro_batch_size", "attn_implementation"),
        lambda v: (
            bool(v.typed("batch_flattening"))
            and not _batch_flattening_refusal(v)
            and (
                bool(v.get("trl.use_liger_loss"))
                or (v.typed("micro_batch_size", 1) == 1 and v.typed("batch_flattening") != "auto")
            )
        ),
        says=lambda v: (
            "batch_flattening has no effect with micro_batch_size == 1"
            if v.typed("micro_batch_size", 1) == 1 and v.typed("batch_flattening") != "auto"
            else "batch_flattening with use_liger_loss: flattening will only apply to the scoring path (deferred "
            "logprobs). The training forward pass uses Liger's fused lm_head+loss kernel instead."
        ),
        consequence="the training forward pass is not flattened: no padding is saved there",
        fix="drop `batch_flattening` (or `trl.use_liger_loss`), or raise `micro_batch_size` above 1",
        fires=_LORA.replace("bf16: true\n", "bf16: true\nrl: grpo\n")
        + "attn_implementation: flash_attention_2\nbatch_flattening: true\ntrl:\n  use_liger_loss: true\n",
        accepted=_LORA.replace("bf16: true\n", "bf16: true\nrl: grpo\n")
        + "attn_implementation: flash_attention_2\nbatch_flattening: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1642-1651, 1704-1729",
        "warns",
        "Sequence parallelism (SP) is enabled. Please note that logged losses may differ slightly to the non-SP "
        "losses due to transformers Trainer implementation details.",
        ("context_parallel_size", "sequence_parallel_degree", "use_glm_dsa_kernels", "base_model"),
        lambda v: bool(_context_parallel_note(v)),
        says=_context_parallel_note,
        consequence="the logged loss is not the single-GPU loss: compare curves against a short single-GPU run",
        fix="nothing to change; compare the first steps' loss against a single-GPU run of the same data",
        fires=_LORA + "attn_implementation: flash_attention_2\ncontext_parallel_size: 2\n",
        accepted=_LORA + "attn_implementation: flash_attention_2\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_V}:1665-1702",
        "refuses",
        "context_parallel_size > 1 but ring_flash_attn is not installed. Please install it with `pip install "
        "axolotl[ring-flash-attn] or `pip install ring-flash-attn>=0.1.4`.",
        ("context_parallel_size", "sequence_parallel_degree", "use_glm_dsa_kernels"),
        lambda v: (
            _context_parallel_size(v) > 1
            and not v.get("use_glm_dsa_kernels")
            and not _context_parallel_refusal(v)
            and v.installed("ring-flash-attn") is False
        ),
        raises="ImportError",
        fix="`pip install ring-flash-attn>=0.1.4` in the job's environment (`axolotl[ring-flash-attn]`)",
        fires=_LORA + "attn_implementation: flash_attention_2\ncontext_parallel_size: 2\n",
        accepted=_LORA + "attn_implementation: flash_attention_2\ncontext_parallel_size: 2\n",
        versions={"axolotl": "0.18.0"},
        accepted_versions={"axolotl": "0.18.0", "ring-flash-attn": "0.1.8"},
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1788-1791",
        "refuses",
        "fp8 requested, but missing one of ms-amp, transformers-engine or torchao.",
        ("fp8",),
        _fp8_backend_missing,
        gpu=True,
        fix="install torchao >= 0.6.1 (or transformer-engine) in the job's environment",
        fires=_LORA + "fp8: true\ntorch_compile: true\n",
        accepted=_LORA + "fp8: true\ntorch_compile: true\n",
        target="h100",
        versions={"axolotl": "0.18.0"},
        accepted_versions={"axolotl": "0.18.0", "torchao": "0.13.0"},
    ),
    RecipeCheck(
        FAMILY,
        f"{_C}:1761-1766",
        "advises",
        "bf16 support detected, but not enabled for this configuration.",
        ("bf16", "bfloat16", "fp16"),
        lambda v: not v.typed("bf16", "auto") and not v.typed("bfloat16") and v.bf16_answer(),
        gpu=True,
        consequence="the job trains in fp16 (or fp32) on a GPU with bf16: a GradScaler and fp16's narrow range "
        "where bf16 needs neither",
        fix="`bf16: true` (and drop `fp16`), or leave `bf16` at its default, `auto`",
        fires=_BASE + "bf16: false\nfp16: true\n",
        accepted=_BASE + "bf16: true\n",
    ),
)
