"""LLaMA-Factory 0.9.6.dev0 (commit ff6d4d1) as it validates a recipe: the in-domain refusals of
`hparams/parser.py`, `hparams/finetuning_args.py` and `model/model_utils/quantization.py` (file:line at that
commit). `finetuning_type` defaults to lora and `stage` to sft (finetuning_args.py:460-467). docs/peer_checks.md
lists every check and which rule mirrors it."""

from __future__ import annotations

from ..versions import canonical_name
from ._check import RecipeCheck, RecipeView

FAMILY = "LLaMA-Factory"
_PR = "src/llamafactory/hparams/parser.py"
_FA = "src/llamafactory/hparams/finetuning_args.py"
_QU = "src/llamafactory/model/model_utils/quantization.py"
_AT = "src/llamafactory/model/model_utils/attention.py"
_LK = "src/llamafactory/model/model_utils/liger_kernel.py"
_MA = "src/llamafactory/hparams/model_args.py"

# configure_attn_implementation loads gpt_oss with this hub kernel, whatever `flash_attn` says (attention.py:34-44):
# FlashAttention-3 with attention sinks, built for Ampere and Hopper
GPT_OSS_KERNEL = "kernels-community/vllm-flash-attn3"

_BASE = (
    "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\ndataset: alpaca_en_demo\n"
    "template: llama3\noutput_dir: saves/llama3-1b\nper_device_train_batch_size: 2\nbf16: true\n"
)
_LORA = _BASE + "finetuning_type: lora\nlora_target: all\n"
_QLORA = _LORA + "quantization_bit: 4\n"
ZERO3 = '{"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"}\n'
ZERO2 = '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"}\n'


# `flash_attn` as configure_attn_implementation (model/model_utils/attention.py:65-99) turns it into the attention
# transformers loads: auto keeps transformers' default; fa2/fa3 are used only when flash-attn is installed, else
# the default is kept with a warning (attention.py:77-90).
FLASH_ATTN = {"disabled": "eager", "sdpa": "sdpa", "fa2": "flash_attention_2", "fa3": "flash_attention_3"}
FLASH_ATTN_IF_INSTALLED = (
    "LLaMA-Factory uses FlashAttention only where flash-attn is installed, else keeps the default attention "
    "(model_utils/attention.py:77-90)"
)


# model types LLaMA-Factory applies Liger to (model/model_utils/liger_kernel.py:41-95; gpt_oss only with a fork
# of liger-kernel): elsewhere it logs "Current model does not support liger kernel." and leaves the loss as it is
LIGER_PATCHED = frozenset(
    {
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "glm",
        "glm4",
        "glm4v",
        "granite",
        "llama",
        "llava",
        "mistral",
        "mixtral",
        "mllama",
        "olmo2",
        "paligemma",
        "phi3",
        "qwen2",
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
    }
)


# model types whose modeling code builds an nn.Conv3d (transformers 5.24 models/*/modeling_*.py: the vision
# towers' patch embeddings of Qwen-VL / Omni / 3.5, GLM-4V, Emu3, video encoders)
CONV3D_MODEL_TYPES = frozenset(
    {
        "cohere_compass",
        "emu3",
        "exaone4_5",
        "glm4v",
        "glm4v_moe",
        "glm5_next",
        "glm_ocr",
        "minimax_m3_vl",
        "qwen2_5_omni",
        "qwen2_5_vl",
        "qwen2_vl",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_omni_moe",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen4_exp",
        "videomae",
        "vivit",
        "vjepa2",
    }
)


def _finetuning(v: RecipeView) -> str:
    return str(v.get("finetuning_type", "lora"))


def _quantized(v: RecipeView) -> bool:
    return v.get("quantization_bit") is not None


def _adapters(v: RecipeView) -> list[str]:
    """`adapter_name_or_path` as ModelArguments splits it (a comma-separated string)."""
    found = v.get("adapter_name_or_path")
    return [a.strip() for a in str(found).split(",")] if found else []


def _lora_only_option(v: RecipeView) -> str:
    """The first LoRA-only option set on a recipe that is not LoRA, in FinetuningArguments' order (FA:624-635)."""
    if _finetuning(v) == "lora":
        return ""
    if v.get("loraplus_lr_ratio") is not None:
        return "loraplus_lr_ratio"
    return next((k for k in ("use_rslora", "use_dora", "pissa_init") if v.get(k)), "")


def _distributed_refusal(v: RecipeView) -> str:
    """What a distributed run refuses of the memory-saving optimizers (parser.py:505-516)."""
    if v.get("use_galore") and v.get("galore_layerwise"):
        return "Distributed training does not support layer-wise GaLore."
    if v.get("use_apollo") and v.get("apollo_layerwise"):
        return "Distributed training does not support layer-wise APOLLO."
    if v.get("use_badam"):
        if v.get("badam_mode", "layer") == "ratio":
            return "Radio-based BAdam does not yet support distributed training, use layer-wise BAdam."
        if not _zero3(v):
            return "Layer-wise BAdam only supports DeepSpeed ZeRO-3 training."
    return ""


def _zero3(v: RecipeView) -> bool:
    return v.sharding == "deepspeed" and v.zero_stage == 3


def _method(v: RecipeView) -> str:
    """quantization_method, bitsandbytes by default (QuantizationMethod.BNB)."""
    return str(v.get("quantization_method", "bnb")).lower().replace("bitsandbytes", "bnb")


def _hqq_refusal(v: RecipeView) -> str:
    if v.get("quantization_bit") not in (8, 6, 5, 4, 3, 2, 1):
        return "HQQ only accepts 1/2/3/4/5/6/8-bit quantization."
    if _zero3(v):
        return "HQQ quantization is incompatible with DeepSpeed ZeRO-3 or FSDP."
    return ""


def _eetq_refusal(v: RecipeView) -> str:
    if v.get("quantization_bit") != 8:
        return "EETQ only accepts 8-bit quantization."
    if _zero3(v):
        return "EETQ quantization is incompatible with DeepSpeed ZeRO-3 or FSDP."
    return ""


# transformers' default `optim` is adamw_torch_fused with torch >= 2.8 (training_args.py, from 4.55.0, LLaMA-Factory's
# floor), adamw_torch before; GaLore builds its optimizer only from these (trainer_utils.py:239-246), APOLLO only
# from adamw_torch (326-333)
GALORE_OPTIMIZERS = ("adamw_torch", "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "adafactor")
FUSED_DEFAULT_FROM_TORCH = "2.8"


def _optimizer(v: RecipeView) -> str:
    written = v.get("optim")
    if written:
        return str(written)
    return "adamw_torch_fused" if v.torch_at_least(FUSED_DEFAULT_FROM_TORCH) else "adamw_torch"


def _low_rank_optimizer_refusal(v: RecipeView) -> str:
    """The NotImplementedError, with `optim` as TrainingArguments holds it (an OptimizerNames member, which an
    f-string prints by name on Python >= 3.11)."""
    optim = _optimizer(v)
    unknown = (v.get("use_galore") and optim not in GALORE_OPTIMIZERS) or (
        not v.get("use_galore") and v.get("use_apollo") and optim != "adamw_torch"
    )
    return f"Unknown optim: OptimizerNames.{optim.upper()}." if unknown else ""


def _layerwise_refusal(v: RecipeView) -> str:
    if v.get("gradient_accumulation_steps", 1) == 1 or _low_rank_optimizer_refusal(v):
        return ""
    if v.get("use_galore") and v.get("galore_layerwise"):
        return "Per-layer GaLore does not support gradient accumulation."
    if not v.get("use_galore") and v.get("use_apollo") and v.get("apollo_layerwise"):
        return "Per-layer APOLLO does not support gradient accumulation."
    return ""


def _kt_refusal(v: RecipeView) -> str:
    """configure_kt_checkpointing and get_kt_activation_policy (model_args.py:586-604, 535-545), which the train
    parser runs through apply_kt_config (parser.py:660); FSDP_ACTIVATION_CHECKPOINTING from the environment is
    not read here."""
    if not v.get("use_kt"):
        return ""
    if v.get("use_unsloth") or v.get("use_unsloth_gc"):
        return "KTransformers cannot be combined with Unsloth checkpoint wrapping."
    if v.get("gradient_checkpointing"):
        return (
            "KTransformers uses LLaMA-Factory's `disable_gradient_checkpointing`; remove `gradient_checkpointing: "
            "true`."
        )
    if v.get("gradient_checkpointing_kwargs") is not None:
        return "KTransformers supplies its checkpoint context; remove `gradient_checkpointing_kwargs`."
    fsdp_config = v.get("fsdp_config")
    if isinstance(fsdp_config, dict) and fsdp_config.get("activation_checkpointing"):
        return "Disable FSDP activation checkpointing when using KTransformers."
    if v.get("kt_cpu_activation") == "recompute" and v.get("disable_gradient_checkpointing"):
        return (
            "`kt_cpu_activation: recompute` requires GPU gradient checkpointing. Set `disable_gradient_checkpointing: "
            "false` or use `kt_cpu_activation: retain`."
        )
    return ""


def _megatron_bridge_on(v: RecipeView) -> bool:
    """`finetuning_args.use_megatron_bridge` as get_train_args leaves it (parser.py:395-411): the launch variables
    decide, not the recipe. USE_MCA (checked first) keeps the recipe's value; USE_MEGATRON_BRIDGE turns it on
    (`_configure_mbridge_training_args`, parser.py:361-366); with neither it is set False, so a recipe's
    `use_megatron_bridge: true` alone trains with the Hugging Face Trainer and none of these checks run."""
    if v.env_enabled("USE_MCA"):
        return bool(v.get("use_megatron_bridge"))
    return v.env_enabled("USE_MEGATRON_BRIDGE")


def _mca_on(v: RecipeView) -> bool:
    """`finetuning_args.use_mca` likewise: USE_MCA sets it (`_configure_mca_training_args`); under
    USE_MEGATRON_BRIDGE the recipe's value stays; with neither it is set False."""
    if v.env_enabled("USE_MCA"):
        return True
    return v.env_enabled("USE_MEGATRON_BRIDGE") and bool(v.get("use_mca"))


MEGATRON_PARALLEL_SIZES = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
)


def _megatron_parallel_refusal(v: RecipeView) -> str:
    """_validate_megatron_bridge_parallel_args (parser.py:336-348, called at 444): the product of the parallel
    sizes (MegatronBridgeArguments, each 1 by default) against WORLD_SIZE, where the launch says it."""
    if v.world_size is None:
        return ""
    parallel = 1
    for key in MEGATRON_PARALLEL_SIZES:
        size = v.get(key, 1)  # as written: parse_dict builds the dataclass without converting types
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            return ""  # not a count: the job fails otherwise (`"4" > 2` is a TypeError), not with this message
        parallel *= size
    if parallel > v.world_size:
        return f"Total Megatron Bridge parallel size ({parallel}) exceeds `world_size` ({v.world_size})."
    if v.world_size % parallel:
        return f"Total Megatron Bridge parallel size ({parallel}) must divide `world_size` ({v.world_size})."
    return ""


def _megatron_bridge_refusal(v: RecipeView) -> str:
    """The Megatron Bridge checks of _check_train_args (parser.py:431-444), in their order, where the launch
    turns Megatron Bridge on (and its package is there: without it the parser raises first)."""
    if not _megatron_bridge_on(v) or _megatron_bridge_missing(v):
        return ""
    if _mca_on(v) or v.get("use_hyper_parallel"):
        return "Megatron Bridge cannot be used together with MCA or HyperParallel."
    if v.get("stage", "sft") not in ("pt", "sft"):
        return "Megatron Bridge only supports the `pt` and `sft` stages."
    if _finetuning(v) not in ("full", "lora"):
        return "Megatron Bridge only supports `full` and `lora` finetuning."
    if _quantized(v):
        return "Quantized models are not supported with Megatron Bridge."
    if v.get("deepspeed") is not None:
        return "Megatron Bridge is incompatible with DeepSpeed."
    return ""


# _check_extra_dependencies (parser.py:252-301): what each feature needs installed, in the order it is checked
# (check_version(..., mandatory=True) raises transformers' require_version errors, utils/versions.py:100-105, 42-45)
EXTRA_DEPENDENCIES = (
    ("use_kt", ("kt-kernel", "transformers-kt", "accelerate-kt")),
    ("use_unsloth", ("unsloth",)),
    ("enable_liger_kernel", ("liger-kernel",)),
    ("use_galore", ("galore_torch",)),
    ("use_apollo", ("apollo_torch",)),
    ("use_badam", ("badam>=1.2.1",)),
    ("use_adam_mini", ("adam-mini",)),
    ("use_megatron_bridge", ("megatron-bridge",)),
    ("deepspeed", ("deepspeed",)),
)


def _require_version(v: RecipeView, requirement: str) -> str:
    """What LLaMA-Factory's mandatory check_version(requirement) raises in the job's environment (transformers'
    require_version, utils/versions.py:100-105 and 42-45); "" where it passes or the environment is not the job's.
    `requirement` is written as LLaMA-Factory writes it ("galore_torch", "badam>=1.2.1")."""
    written, _, floor = requirement.partition(">=")
    name = canonical_name(written)
    if v.installed(name) is False:
        return (
            f"The '{requirement}' distribution was not found and is required by this application. To fix: run "
            f"`pip install {requirement}`."
        )
    if floor and v.installed(name, floor) is False:
        return (
            f"{requirement} is required for a normal functioning of this module, but found "
            f"{written}=={v.stack.get(name).version}. To fix: run `pip install {requirement}`."
        )
    return ""


MEGATRON_BRIDGE_MISSING = (
    "megatron-bridge is required when USE_MEGATRON_BRIDGE=1. Please install `megatron-bridge` and its dependencies."
)


def _megatron_bridge_missing(v: RecipeView) -> bool:
    """get_train_args raises ImportError before it parses the recipe (parser.py:399-404): nothing after is reached."""
    return (
        not v.env_enabled("USE_MCA")
        and v.env_enabled("USE_MEGATRON_BRIDGE")
        and v.installed("megatron-bridge") is False
    )


def _missing_dependency(v: RecipeView) -> str:
    """The first package a feature the recipe turns on needs and the job's environment lacks (or has too old)."""
    if _megatron_bridge_missing(v):
        return ""  # refused earlier, as the parser is chosen (MEGATRON_BRIDGE_MISSING)
    for key, requirements in EXTRA_DEPENDENCIES:
        if _megatron_bridge_on(v) if key == "use_megatron_bridge" else v.get(key):
            for requirement in requirements:
                if said := _require_version(v, requirement):
                    return said
    return ""


def _gemma2_attention_change(v: RecipeView) -> str:
    """configure_attn_implementation on Gemma 2 with `flash_attn` auto (the default) or fa2 (attention.py:46-54):
    FlashAttention-2 where it is installed, else eager."""
    if v.model_type != "gemma2" or v.get("flash_attn", "auto") not in ("auto", "fa2"):
        return ""
    installed = v.installed("flash-attn")
    if installed is False:
        return "FlashAttention-2 is not installed, use eager attention."
    if installed and v.get("flash_attn", "auto") == "auto":
        return "Gemma 2 should use flash attention 2, change `flash_attn` to fa2."
    return ""


# a checkpoint stored GPTQ-quantized, as a local folder: what the PTQ checks read (quantization.py:94-131)
_GPTQ_FOLDER = "qwen2.5-0.5b-gptq"
GPTQ_FILES = {
    f"{_GPTQ_FOLDER}/config.json": '{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": '
    '896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864, '
    '"vocab_size": 151936, "torch_dtype": "float16", "quantization_config": {"quant_method": "gptq", "bits": 4}}'
}
_PTQ = _LORA.replace("meta-llama/Llama-3.2-1B", f"./{_GPTQ_FOLDER}").replace("bf16: true", "fp16: true")
# the PTQ methods LLaMA-Factory dequantizes on load (quantization.py:107-124); others stay quantized
PTQ_DEQUANTIZED = ("mxfp4", "fp8")
# what each PTQ method asks installed (quantization.py:126-131)
PTQ_DEPENDENCIES = {"gptq": "gptqmodel>=2.0.0", "awq": "autoawq"}


def _ptq_dependency_missing(v: RecipeView) -> str:
    requirement = PTQ_DEPENDENCIES.get(v.stored_quantization, "")
    return _require_version(v, requirement) if requirement else ""


def _ptq_stays_quantized(v: RecipeView) -> bool:
    """A PTQ checkpoint the model keeps quantized: LLaMA-Factory loads MXFP4 and FP8 dequantized (quantization.py:
    107-124), and transformers then drops the model's quantization_method (quantizers/base.py
    remove_quantization_config)."""
    return bool(v.stored_quantization) and v.stored_quantization not in PTQ_DEQUANTIZED


_BNB_STORED = ("bitsandbytes", "4bit", "8bit")  # a saved bitsandbytes model (CheckpointFacts.quantization)


def _dora_on_quantized(v: RecipeView) -> bool:
    """AD:239-244: DoRA on a model whose quantization_method is not bitsandbytes: a PTQ checkpoint that stays
    quantized (it takes priority over `quantization_bit`, quantization.py:94), or HQQ / EETQ on the fly."""
    if not v.get("use_dora") or _finetuning(v) != "lora":
        return False
    if v.stored_quantization:
        return _ptq_stays_quantized(v) and v.stored_quantization not in _BNB_STORED
    return _quantized(v) and _method(v) in ("hqq", "eetq")


def _quantized_model_refusal(v: RecipeView) -> str:
    """_init_adapter's checks on a model that stays quantized (adapter.py:330-335), for a PTQ checkpoint (the
    `quantization_bit` ones are PR:235-237's and PD404's)."""
    if not _ptq_stays_quantized(v) or not v.get("do_train"):
        return ""
    if _finetuning(v) not in ("lora", "oft"):
        return "Quantized models can only be used for the LoRA or OFT tuning."
    if v.get("pissa_init"):
        return "Cannot initialize PiSSA adapter on quantized models."
    return ""


CHECKS: tuple[RecipeCheck, ...] = (
    RecipeCheck(
        FAMILY,
        f"{_PR}:232-233",
        "refuses",
        "Adapter is only valid for the LoRA method.",
        ("adapter_name_or_path", "finetuning_type"),
        lambda v: bool(_adapters(v)) and _finetuning(v) != "lora",
        fix="load an adapter only with `finetuning_type: lora` (merge it into the base first for full or freeze)",
        fires=_BASE + "finetuning_type: full\nadapter_name_or_path: saves/llama3-1b/lora\n",
        accepted=_LORA + "adapter_name_or_path: saves/llama3-1b/lora\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:239-240",
        "refuses",
        "Please use scripts/pissa_init.py to initialize PiSSA for a quantized model.",
        ("quantization_bit", "pissa_init"),
        lambda v: _quantized(v) and bool(v.get("pissa_init")),
        fix="initialise PiSSA with scripts/pissa_init.py and train from its output, or drop `quantization_bit`",
        fires=_QLORA + "pissa_init: true\n",
        accepted=_LORA + "pissa_init: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:242-243",
        "refuses",
        "Cannot resize embedding layers of a quantized model.",
        ("quantization_bit", "resize_vocab"),
        lambda v: _quantized(v) and bool(v.get("resize_vocab")),
        fix="resize the vocabulary on an unquantized model, or drop `resize_vocab`",
        fires=_QLORA + "resize_vocab: true\n",
        accepted=_LORA + "resize_vocab: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:245-249",
        "refuses",
        "Cannot create new adapter upon a quantized model.",
        ("quantization_bit", "adapter_name_or_path", "create_new_adapter"),
        lambda v: _quantized(v) and bool(_adapters(v)) and bool(v.get("create_new_adapter")),
        fix="continue training the given adapter (drop `create_new_adapter`), or merge it into an unquantized base",
        fires=_QLORA + "adapter_name_or_path: saves/llama3-1b/lora\ncreate_new_adapter: true\n",
        accepted=_QLORA + "adapter_name_or_path: saves/llama3-1b/lora\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:245-249",
        "refuses",
        "Quantized model only accepts a single adapter. Merge them first.",
        ("quantization_bit", "adapter_name_or_path"),
        lambda v: _quantized(v) and len(_adapters(v)) > 1,
        fix="merge the adapters into one (llamafactory-cli export) before training on a quantized base",
        fires=_QLORA + "adapter_name_or_path: saves/a,saves/b\n",
        accepted=_QLORA + "adapter_name_or_path: saves/a\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:492-493",
        "refuses",
        "Cannot use device map for quantized models in training.",
        ("quantization_device_map", "do_train"),
        lambda v: bool(v.get("do_train")) and v.get("quantization_device_map") == "auto",
        fix="drop `quantization_device_map: auto` for training (LLaMA-Factory places a quantized model on each "
        "rank's own GPU)",
        fires=_QLORA + "quantization_device_map: auto\n",
        accepted=_QLORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:495-496",
        "refuses",
        "Please use scripts/pissa_init.py to initialize PiSSA in DeepSpeed ZeRO-3.",
        ("pissa_init", "deepspeed"),
        lambda v: bool(v.get("pissa_init")) and _zero3(v),
        fix="initialise PiSSA with scripts/pissa_init.py first, or train under ZeRO-2",
        fires=_LORA + "pissa_init: true\ndeepspeed: ds_z3_config.json\n",
        accepted=_LORA + "pissa_init: true\ndeepspeed: ds_z2_config.json\n",
        files={"ds_z3_config.json": ZERO3, "ds_z2_config.json": ZERO2},
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:502-503",
        "refuses",
        "`pure_bf16` is incompatible with DeepSpeed ZeRO-3.",
        ("pure_bf16", "deepspeed"),
        lambda v: bool(v.get("pure_bf16")) and _zero3(v),
        fix="use `bf16: true` (mixed precision) under ZeRO-3, or pure_bf16 under ZeRO-2",
        fires=_LORA + "pure_bf16: true\ndeepspeed: ds_z3_config.json\n",
        accepted=_LORA + "pure_bf16: true\ndeepspeed: ds_z2_config.json\n",
        files={"ds_z3_config.json": ZERO3, "ds_z2_config.json": ZERO2},
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:518-519",
        "refuses",
        "GaLore and APOLLO are incompatible with DeepSpeed yet.",
        ("deepspeed", "use_galore", "use_apollo"),
        lambda v: bool(v.get("deepspeed")) and bool(v.get("use_galore") or v.get("use_apollo")),
        fix="train GaLore/APOLLO without DeepSpeed",
        fires=_BASE + "finetuning_type: full\nuse_galore: true\ndeepspeed: ds_z2_config.json\n",
        accepted=_BASE + "finetuning_type: full\nuse_galore: true\n",
        files={"ds_z2_config.json": ZERO2},
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:521-527",
        "refuses",
        "FP8 training is not compatible with quantization. Please disable one of them.",
        ("fp8", "quantization_bit"),
        lambda v: bool(v.get("fp8")) and _quantized(v) and not (_mca_on(v) or _megatron_bridge_on(v)),
        fix="train fp8 on an unquantized base, or drop `fp8` for QLoRA",
        fires=_QLORA + "fp8: true\n",
        accepted=_LORA + "fp8: true\n",
        target="h100",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:532-533",
        "refuses",
        "Unsloth is incompatible with DeepSpeed ZeRO-3.",
        ("use_unsloth", "deepspeed"),
        lambda v: bool(v.get("use_unsloth")) and _zero3(v),
        fix="use Unsloth without DeepSpeed ZeRO-3",
        fires=_LORA + "use_unsloth: true\ndeepspeed: ds_z3_config.json\n",
        accepted=_LORA + "use_unsloth: true\n",
        files={"ds_z3_config.json": ZERO3},
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:418-423",
        "refuses",
        "`neat_packing` cannot be set as True except SFT.",
        ("neat_packing", "stage"),
        lambda v: bool(v.get("neat_packing")) and str(v.get("stage", "sft")) != "sft",
        fix="use `neat_packing` with `stage: sft` only",
        fires=_LORA.replace("stage: sft", "stage: pt") + "neat_packing: true\n",
        accepted=_LORA + "neat_packing: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_QU}:197-199",
        "refuses",
        "Only 4-bit quantized model can use fsdp+qlora or auto device map.",
        ("quantization_bit", "deepspeed", "quantization_device_map"),
        lambda v: (
            v.get("quantization_bit") == 8
            and str(v.get("quantization_method", "bnb")) in ("bnb", "bitsandbytes")
            # the FSDP branch asks transformers' is_fsdp_enabled(), true only with FSDP_CPU_RAM_EFFICIENT_LOADING=1:
            # not judged here
            and (_zero3(v) or v.get("quantization_device_map") == "auto")
        ),
        fix="quantize to 4 bits (`quantization_bit: 4`) under ZeRO-3/FSDP",
        fires=_LORA + "quantization_bit: 8\ndeepspeed: ds_z3_config.json\n",
        accepted=_LORA + "quantization_bit: 4\ndeepspeed: ds_z3_config.json\n",
        files={"ds_z3_config.json": ZERO3},
    ),
    RecipeCheck(
        FAMILY,
        f"{_FA}:612-613",
        "refuses",
        "`use_llama_pro` is only valid for Freeze or LoRA training.",
        ("use_llama_pro", "finetuning_type"),
        lambda v: bool(v.get("use_llama_pro")) and _finetuning(v) == "full",
        fix="use LLaMA Pro with `finetuning_type: freeze` or lora",
        fires=_BASE + "finetuning_type: full\nuse_llama_pro: true\n",
        accepted=_BASE + "finetuning_type: freeze\nuse_llama_pro: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_FA}:615-616",
        "refuses",
        "Cannot use LoRA with GaLore, APOLLO or BAdam together.",
        ("finetuning_type", "use_galore", "use_apollo", "use_badam"),
        lambda v: _finetuning(v) == "lora" and v.any_of("use_galore", "use_apollo", "use_badam"),
        fix="GaLore, APOLLO and BAdam train the full model: set `finetuning_type: full`, or drop them for LoRA",
        fires=_LORA + "use_galore: true\n",
        accepted=_BASE + "finetuning_type: full\nuse_galore: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_FA}:618-619",
        "refuses",
        "Cannot use GaLore, APOLLO or BAdam together.",
        ("use_galore", "use_apollo", "use_badam"),
        lambda v: sum(bool(v.get(k)) for k in ("use_galore", "use_apollo", "use_badam")) > 1,
        fix="keep one of GaLore, APOLLO and BAdam",
        fires=_BASE + "finetuning_type: full\nuse_galore: true\nuse_apollo: true\n",
        accepted=_BASE + "finetuning_type: full\nuse_apollo: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_FA}:624-635",
        "refuses",
        "`use_dora` is only valid for LoRA training.",
        ("finetuning_type", "loraplus_lr_ratio", "use_rslora", "use_dora", "pissa_init"),
        lambda v: bool(_lora_only_option(v)),
        fix="LoRA+, rsLoRA, DoRA and PiSSA are LoRA options: use them with `finetuning_type: lora`",
        says=lambda v: f"`{_lora_only_option(v)}` is only valid for LoRA training.",
        fires=_BASE + "finetuning_type: full\nuse_dora: true\n",
        accepted=_LORA + "use_dora: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_FA}:621-622",
        "refuses",
        "Cannot use PiSSA for current training stage.",
        ("pissa_init", "stage", "pref_loss"),
        lambda v: (
            bool(v.get("pissa_init"))
            and (
                v.get("stage") in ("ppo", "kto")
                or (v.get("stage") == "dpo" and v.get("pref_loss", "sigmoid") not in ("orpo", "simpo"))
            )
        ),
        fix="PiSSA works without a reference model: use it for SFT, or DPO with `pref_loss: orpo` / `simpo`",
        fires=_LORA.replace("stage: sft", "stage: dpo") + "pissa_init: true\n",
        accepted=_LORA.replace("stage: sft", "stage: dpo") + "pissa_init: true\npref_loss: simpo\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_QU}:191-192",
        "refuses",
        "Bitsandbytes only accepts 4-bit or 8-bit quantization.",
        ("quantization_bit", "quantization_method"),
        lambda v: _quantized(v) and _method(v) == "bnb" and v.get("quantization_bit") not in (4, 8),
        fix="bitsandbytes quantizes to 4 or 8 bits: `quantization_bit: 4`",
        fires=_LORA + "quantization_bit: 2\n",
        accepted=_QLORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_QU}:206-211",
        "refuses",
        "HQQ only accepts 1/2/3/4/5/6/8-bit quantization.",
        ("quantization_method", "quantization_bit", "deepspeed"),
        lambda v: _quantized(v) and _method(v) == "hqq" and bool(_hqq_refusal(v)),
        fix="HQQ takes 1-6 or 8 bits and cannot run under ZeRO-3",
        says=_hqq_refusal,
        fires=_LORA + "quantization_method: hqq\nquantization_bit: 7\n",
        accepted=_LORA + "quantization_method: hqq\nquantization_bit: 4\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_QU}:218-223",
        "refuses",
        "EETQ only accepts 8-bit quantization.",
        ("quantization_method", "quantization_bit", "deepspeed"),
        lambda v: _quantized(v) and _method(v) == "eetq" and bool(_eetq_refusal(v)),
        fix="EETQ takes 8 bits and cannot run under ZeRO-3",
        says=_eetq_refusal,
        fires=_LORA + "quantization_method: eetq\nquantization_bit: 4\n",
        accepted=_LORA + "quantization_method: eetq\nquantization_bit: 8\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:454-455",
        "refuses",
        "PPO training is incompatible with S^2-Attn.",
        ("stage", "shift_attn"),
        lambda v: v.get("stage") == "ppo" and bool(v.get("shift_attn")),
        fix="drop `shift_attn` for PPO",
        fires=_LORA.replace("stage: sft", "stage: ppo") + "reward_model: saves/rm\nshift_attn: true\n",
        accepted=_LORA.replace("stage: sft", "stage: ppo") + "reward_model: saves/rm\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:535-536",
        "refuses",
        "KTransformers is incompatible with DeepSpeed ZeRO-3.",
        ("use_kt", "deepspeed"),
        lambda v: bool(v.get("use_kt")) and _zero3(v),
        fix="run KTransformers without DeepSpeed ZeRO-3",
        fires=_LORA + "use_kt: true\ndeepspeed: ds_z3_config.json\n",
        accepted=_LORA + "use_kt: true\n",
        files={"ds_z3_config.json": ZERO3},
    ),
    RecipeCheck(
        FAMILY,
        "src/llamafactory/model/adapter.py:276-284",
        "refuses",
        "KTransformers only supports LoRA finetuning.",
        ("use_kt", "use_unsloth", "finetuning_type"),
        lambda v: (
            (bool(v.get("use_kt")) and _finetuning(v) in ("oft",))
            or (bool(v.get("use_unsloth")) and _finetuning(v) == "oft")
        ),
        fix="KTransformers and Unsloth train LoRA adapters: `finetuning_type: lora`",
        says=lambda v: (
            "KTransformers only supports LoRA finetuning."
            if v.get("use_kt")
            else "Unsloth is currently not supported for OFT."
        ),
        fires=_BASE + "finetuning_type: oft\nuse_unsloth: true\n",
        accepted=_LORA + "use_unsloth: true\n",
    ),
    RecipeCheck(
        FAMILY,
        "src/llamafactory/train/trainer_utils.py:239-246",
        "refuses",
        "Unknown optim: OptimizerNames.ADAMW_TORCH_FUSED.",
        ("use_galore", "use_apollo", "optim"),
        lambda v: bool(_low_rank_optimizer_refusal(v)),
        fix="set `optim: adamw_torch` (GaLore also takes adamw_8bit, paged_adamw_8bit, adafactor): transformers' "
        "default optimizer on torch >= 2.8 is adamw_torch_fused, which LLaMA-Factory's GaLore/APOLLO do not know",
        says=_low_rank_optimizer_refusal,
        fires=_BASE + "finetuning_type: full\nuse_galore: true\n",
        accepted=_BASE + "finetuning_type: full\nuse_galore: true\noptim: adamw_torch\n",
        raises="NotImplementedError",
    ),
    RecipeCheck(
        FAMILY,
        "src/llamafactory/train/trainer_utils.py:248-251",
        "refuses",
        "Per-layer GaLore does not support gradient accumulation.",
        ("use_galore", "galore_layerwise", "use_apollo", "apollo_layerwise", "gradient_accumulation_steps"),
        lambda v: bool(_layerwise_refusal(v)),
        fix="set `gradient_accumulation_steps: 1` with layer-wise GaLore/APOLLO",
        says=_layerwise_refusal,
        fires=_BASE + "finetuning_type: full\nuse_galore: true\ngalore_layerwise: true\noptim: adamw_torch\n"
        "gradient_accumulation_steps: 8\n",
        accepted=_BASE + "finetuning_type: full\nuse_galore: true\ngalore_layerwise: true\noptim: adamw_torch\n"
        "gradient_accumulation_steps: 1\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:471-472",
        "refuses",
        "Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training.",
        ("deepspeed",),
        # with several GPUs visible, parser.py:468 refuses first (the check below)
        lambda v: bool(v.get("deepspeed")) and v.distributed is False and v.gpu_count <= 1,
        fix="launch DeepSpeed distributed: FORCE_TORCHRUN=1 llamafactory-cli train ... (one GPU too), or torchrun",
        fires=_LORA + "deepspeed: ds_z2_config.json\n",
        accepted=_LORA + "deepspeed: ds_z2_config.json\n",
        target="a100:1",
        launcher="llamafactory-cli train config.yml",
        accepted_launcher="FORCE_TORCHRUN=1 llamafactory-cli train config.yml",
        files={"ds_z2_config.json": ZERO2},
        reads_launch=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:505-516",
        "refuses",
        "Distributed training does not support layer-wise GaLore.",
        ("use_galore", "galore_layerwise", "use_apollo", "apollo_layerwise", "use_badam", "badam_mode", "deepspeed"),
        lambda v: v.distributed is True and bool(_distributed_refusal(v)),
        fix="train layer-wise GaLore/APOLLO and ratio BAdam on one process (no torchrun), or turn layer-wise off "
        "for DDP; layer-wise BAdam needs ZeRO-3",
        says=_distributed_refusal,
        fires=_BASE + "finetuning_type: full\nuse_galore: true\ngalore_layerwise: true\noptim: adamw_torch\n",
        accepted=_BASE + "finetuning_type: full\nuse_galore: true\noptim: adamw_torch\n",
        target="a100:2",
        launcher="llamafactory-cli train config.yml",
        reads_launch=True,
    ),
    RecipeCheck(
        FAMILY,
        "src/llamafactory/model/loader.py:197-212",
        "refuses",
        "Unsupported torch version detected: torch 2.9.x with Conv3D. This combination is known to cause severe "
        "performance regression. Please downgrade torch to <2.9 or remove Conv3D. See "
        "https://github.com/pytorch/pytorch/issues/166122",
        ("model_name_or_path", "use_kt"),
        lambda v: (
            v.model_type in CONV3D_MODEL_TYPES
            and v.torch_at_least("2.9")
            and not v.torch_at_least("2.10")
            and not v.get("use_kt")
        ),
        fix="train this vision model on torch < 2.9 or >= 2.10 (torch 2.9's Conv3d regression, pytorch#166122)",
        fires=_LORA.replace("meta-llama/Llama-3.2-1B", "Qwen/Qwen2.5-VL-7B-Instruct").replace(
            "template: llama3", "template: qwen2_vl"
        ),
        accepted=_LORA.replace("meta-llama/Llama-3.2-1B", "Qwen/Qwen2.5-VL-7B-Instruct").replace(
            "template: llama3", "template: qwen2_vl"
        ),
        versions={"torch": "2.9.1"},
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:468-469",
        "refuses",
        "Please launch distributed training with `llamafactory-cli` or `torchrun`.",
        ("use_kt",),
        lambda v: v.distributed is False and v.gpu_count > 1 and not v.get("use_kt"),
        fix="launch it with llamafactory-cli train (torchrun over the visible GPUs) or torchrun, or show it one GPU "
        "(CUDA_VISIBLE_DEVICES=0)",
        fires=_LORA,
        accepted=_LORA,
        target="a100:2",
        launcher="python src/train.py config.yml",
        accepted_launcher="llamafactory-cli train config.yml",
        reads_launch=True,
    ),
    # advice-level warnings LLaMA-Factory logs as it reads the recipe (PD702): the job runs, as the consequence says
    RecipeCheck(
        FAMILY,
        f"{_PR}:563-564",
        "warns",
        "We recommend enable `upcast_layernorm` in quantized training.",
        ("quantization_bit", "upcast_layernorm", "do_train"),
        lambda v: bool(v.get("do_train")) and _quantized(v) and not v.get("upcast_layernorm"),
        consequence="the norm weights of the quantized model stay in the compute dtype",
        fix="set `upcast_layernorm: true`",
        fires=_QLORA,
        accepted=_QLORA + "upcast_layernorm: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:566-567",
        "warns",
        "We recommend enable mixed precision training.",
        ("bf16", "fp16", "do_train"),
        lambda v: bool(v.get("do_train")) and not v.get("fp16") and not v.get("bf16"),
        consequence="no autocast: the model trains in the dtype infer_optim_dtype loads it in, with fp32 trainable "
        "weights unless pure_bf16",
        fix="set `bf16: true` (Ampere or newer) or `fp16: true`",
        fires=_LORA.replace("bf16: true\n", ""),
        accepted=_LORA,
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:569-576",
        "warns",
        "Using GaLore or APOLLO with mixed precision training may significantly increases GPU memory usage.",
        ("use_galore", "use_apollo", "pure_bf16", "do_train"),
        lambda v: (
            bool(v.get("do_train")) and bool(v.get("use_galore") or v.get("use_apollo")) and not v.get("pure_bf16")
        ),
        consequence="more GPU memory than GaLore / APOLLO save: fp32 trainable weights beside the half copies",
        fix="set `pure_bf16: true` (and drop `bf16`)",
        fires=_BASE + "finetuning_type: full\nuse_galore: true\noptim: adamw_torch\n",
        accepted=_BASE.replace("bf16: true\n", "pure_bf16: true\n")
        + "finetuning_type: full\nuse_galore: true\noptim: adamw_torch\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:543-550",
        "warns",
        "fp8_enable_fsdp_float8_all_gather requires fp8=True. Setting fp8=True.",
        ("fp8_enable_fsdp_float8_all_gather", "fp8", "use_mca", "use_megatron_bridge"),
        lambda v: (
            bool(v.get("fp8_enable_fsdp_float8_all_gather"))
            and not v.get("fp8")
            and not _mca_on(v)
            and not _megatron_bridge_on(v)
        ),
        consequence="fp8 stays off, whatever the message says",
        truth="the check sets model_args.fp8, but every reader uses training_args.fp8 (train/fp8_utils.py, the sft "
        "and pt trainers): FP8 and its float8 all-gather stay off",
        fix="set `fp8: true` yourself (on a GPU with fp8, compute capability 8.9 or newer)",
        fires=_BASE + "finetuning_type: full\nfp8_enable_fsdp_float8_all_gather: true\n",
        accepted=_BASE + "finetuning_type: full\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_AT}:55-58",
        "warns",
        "Gemma-2 should use soft-capping attention, while the SDPA attention does not support it.",
        ("flash_attn", "model_name_or_path"),
        lambda v: v.model_type == "gemma2" and v.get("flash_attn") == "sdpa",
        consequence="attention runs without Gemma 2's logit soft-capping: the model computes other scores than "
        "the ones it was trained with",
        fix="use `flash_attn: fa2` (with flash-attn installed) or `flash_attn: disabled` (eager attention)",
        fires=_LORA.replace("meta-llama/Llama-3.2-1B", "google/gemma-2-2b").replace("llama3", "gemma")
        + "flash_attn: sdpa\n",
        accepted=_LORA.replace("meta-llama/Llama-3.2-1B", "google/gemma-2-2b").replace("llama3", "gemma")
        + "flash_attn: disabled\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_LK}:87-95",
        "warns",
        "Current model does not support liger kernel.",
        ("enable_liger_kernel", "model_name_or_path"),
        lambda v: (
            bool(v.get("enable_liger_kernel"))
            and bool(v.get("do_train"))
            and bool(v.model_type)
            and v.model_type not in LIGER_PATCHED
        ),
        says=lambda v: (
            "Please install liger-kernel from https://github.com/Comet0322/Liger-Kernel."
            if v.model_type == "gpt_oss"
            else "Current model does not support liger kernel."
        ),
        consequence="Liger is not applied: the loss keeps the full logits (the memory estimate counts them)",
        fix="drop `enable_liger_kernel` for this model, or train one LLaMA-Factory patches (liger_kernel.py:41-86)",
        fires=_LORA.replace("meta-llama/Llama-3.2-1B", "HuggingFaceTB/SmolLM3-3B") + "enable_liger_kernel: true\n",
        accepted=_LORA + "enable_liger_kernel: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_MA}:535-545, 586-604",
        "refuses",
        "KTransformers uses LLaMA-Factory's `disable_gradient_checkpointing`; remove `gradient_checkpointing: true`.",
        (
            "use_kt",
            "use_unsloth",
            "use_unsloth_gc",
            "gradient_checkpointing",
            "gradient_checkpointing_kwargs",
            "fsdp_config",
            "kt_cpu_activation",
            "disable_gradient_checkpointing",
        ),
        lambda v: bool(_kt_refusal(v)),
        says=_kt_refusal,
        fix="leave checkpointing to LLaMA-Factory under KTransformers: drop `gradient_checkpointing`, its kwargs, "
        "Unsloth and FSDP activation checkpointing (`disable_gradient_checkpointing` turns it off)",
        fires=_LORA + "use_kt: true\ngradient_checkpointing: true\n",
        accepted=_LORA + "use_kt: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:431-442",
        "refuses",
        "Megatron Bridge is incompatible with DeepSpeed.",
        (
            "use_megatron_bridge",
            "use_mca",
            "use_hyper_parallel",
            "stage",
            "finetuning_type",
            "quantization_bit",
            "deepspeed",
        ),
        lambda v: bool(_megatron_bridge_refusal(v)),
        says=_megatron_bridge_refusal,
        fix="run Megatron Bridge alone: `pt` or `sft`, full or LoRA, unquantized, without DeepSpeed, MCA or "
        "HyperParallel",
        fires=_BASE + "finetuning_type: full\ndeepspeed: ds_z2_config.json\n",
        accepted=_BASE + "finetuning_type: full\n",
        files={"ds_z2_config.json": ZERO2},
        launcher="USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml",
        reads_launch=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:336-348",
        "refuses",
        "Total Megatron Bridge parallel size (4) exceeds `world_size` (2).",
        MEGATRON_PARALLEL_SIZES,
        lambda v: (
            _megatron_bridge_on(v)
            and not _megatron_bridge_missing(v)
            and not _megatron_bridge_refusal(v)
            and bool(_megatron_parallel_refusal(v))
        ),
        says=_megatron_parallel_refusal,
        fix="make tensor x pipeline x context x expert parallel sizes divide the processes the launch starts "
        "(NPROC_PER_NODE x NNODES)",
        fires=_BASE + "finetuning_type: full\ntensor_model_parallel_size: 2\npipeline_model_parallel_size: 2\n",
        accepted=_BASE + "finetuning_type: full\ntensor_model_parallel_size: 2\n",
        target="a100:2",
        launcher="USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml",
        reads_launch=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:399-404",
        "refuses",
        MEGATRON_BRIDGE_MISSING,
        (),
        _megatron_bridge_missing,
        raises="ImportError",
        fix="install megatron-bridge in the job's environment, or launch without USE_MEGATRON_BRIDGE",
        fires=_BASE + "finetuning_type: full\n",
        accepted=_BASE + "finetuning_type: full\n",
        launcher="USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml",
        versions={"llamafactory": "0.9.6"},
        accepted_versions={"llamafactory": "0.9.6", "megatron-bridge": "0.2.0"},
        reads_launch=True,
    ),
    RecipeCheck(
        FAMILY,
        "src/llamafactory/data/collator.py:500-504",
        "refuses",
        "Neat packing is not supported for gemma4, gpt_oss models for now.",
        ("neat_packing", "flash_attn", "model_name_or_path"),
        # gpt_oss never gets here: LLaMA-Factory loads it with the vLLM FlashAttention-3 kernel (attention.py:34-44),
        # not flash_attention_2; fa2 is used where flash-attn is installed (attention.py:83-90), as it asks
        lambda v: (
            v.model_type == "gemma4"
            and bool(v.get("neat_packing"))
            and v.get("flash_attn") == "fa2"
            and v.installed("flash-attn") is not False
        ),
        fix="drop `neat_packing` for Gemma 4 (use `packing: true`), or train it with `flash_attn: sdpa`",
        fires=_LORA.replace("meta-llama/Llama-3.2-1B", "./gemma-4-e2b") + "neat_packing: true\nflash_attn: fa2\n",
        accepted=_LORA.replace("meta-llama/Llama-3.2-1B", "./gemma-4-e2b") + "neat_packing: true\nflash_attn: sdpa\n",
        files={
            "gemma-4-e2b/config.json": '{"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"]}'
        },
    ),
    RecipeCheck(
        FAMILY,
        f"{_PR}:252-301",
        "refuses",
        "The 'unsloth' distribution was not found and is required by this application. To fix: run `pip install "
        "unsloth`.",
        tuple(key for key, _ in EXTRA_DEPENDENCIES),
        lambda v: bool(_missing_dependency(v)),
        says=_missing_dependency,
        raises="importlib.metadata.PackageNotFoundError",
        fix="install the package the feature needs in the job's environment, or turn the feature off",
        fires=_LORA + "use_unsloth: true\n",
        accepted=_LORA + "use_unsloth: true\n",
        versions={"llamafactory": "0.9.6"},
        accepted_versions={"llamafactory": "0.9.6", "unsloth": "2026.8.1"},
    ),
    RecipeCheck(
        FAMILY,
        f"{_AT}:46-54",
        "warns",
        "FlashAttention-2 is not installed, use eager attention.",
        ("flash_attn", "model_name_or_path"),
        lambda v: bool(_gemma2_attention_change(v)),
        says=_gemma2_attention_change,
        consequence="LLaMA-Factory picks Gemma 2's attention by what is installed: eager (no soft-capping loss, "
        "more memory than FlashAttention) without flash-attn",
        fix="install flash-attn and write `flash_attn: fa2`, or write `flash_attn: disabled` to choose eager",
        fires=_LORA.replace("meta-llama/Llama-3.2-1B", "google/gemma-2-2b").replace("llama3", "gemma"),
        accepted=_LORA.replace("meta-llama/Llama-3.2-1B", "google/gemma-2-2b").replace("llama3", "gemma")
        + "flash_attn: fa2\n",
        versions={"llamafactory": "0.9.6"},
        accepted_versions={"llamafactory": "0.9.6", "flash-attn": "2.8.3"},
    ),
    RecipeCheck(
        FAMILY,
        f"{_AT}:60-63",
        "warns",
        "Youtu-VL does not support SDPA, forcing eager attention.",
        ("flash_attn", "model_name_or_path"),
        lambda v: v.model_type in ("youtu", "youtu_vl") and v.get("flash_attn", "auto") in ("auto", "sdpa"),
        consequence="eager attention: the scores are materialised, more memory than SDPA",
        fix="write `flash_attn: disabled` (or fa2 with flash-attn installed) so the recipe says what runs",
        fires=_LORA.replace("meta-llama/Llama-3.2-1B", "./youtu-llm-2b") + "flash_attn: sdpa\n",
        accepted=_LORA.replace("meta-llama/Llama-3.2-1B", "./youtu-llm-2b") + "flash_attn: disabled\n",
        files={"youtu-llm-2b/config.json": '{"model_type": "youtu", "architectures": ["YoutuForCausalLM"]}'},
    ),
    RecipeCheck(
        FAMILY,
        f"{_AT}:71-74",
        "warns",
        "torch>=2.1.1 is required for SDPA attention.",
        ("flash_attn",),
        lambda v: v.get("flash_attn") == "sdpa" and not v.torch_at_least("2.1.1"),
        consequence="SDPA is not requested: the model loads with transformers' default attention",
        fix="upgrade torch to 2.1.1 or newer, or write `flash_attn: auto`",
        fires=_LORA + "flash_attn: sdpa\n",
        accepted=_LORA + "flash_attn: sdpa\n",
        versions={"torch": "2.0.1"},
    ),
    RecipeCheck(
        FAMILY,
        "src/llamafactory/model/model_utils/longlora.py:357-370",
        "warns",
        "Current model does not support shift short attention.",
        ("shift_attn", "model_name_or_path"),
        # SUPPORTED_CLASS_FOR_S2ATTN = {"llama"} (extras/constants.py:136)
        lambda v: (
            bool(v.get("shift_attn")) and bool(v.get("do_train")) and bool(v.model_type) and v.model_type != "llama"
        ),
        consequence="shift short attention (LongLoRA) is not applied: full attention over the whole context, with "
        "its memory",
        fix="drop `shift_attn` for this model (LongLoRA's S2-Attn is patched into Llama only)",
        fires=_LORA.replace("meta-llama/Llama-3.2-1B", "Qwen/Qwen2.5-0.5B") + "shift_attn: true\n",
        accepted=_LORA + "shift_attn: true\n",
    ),
    RecipeCheck(
        FAMILY,
        f"{_QU}:94-96",
        "warns",
        "`quantization_bit` will not affect on the PTQ-quantized models.",
        ("quantization_bit", "model_name_or_path"),
        lambda v: bool(v.stored_quantization) and _quantized(v),
        consequence="the checkpoint loads as it is stored; `quantization_bit` (and its method) are ignored",
        fix="drop `quantization_bit`: the checkpoint is already quantized",
        fires=_PTQ + "quantization_bit: 4\n",
        accepted=_PTQ,
        files=GPTQ_FILES,
        reads_checkpoint=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_QU}:101-105",
        "refuses",
        "DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models.",
        ("deepspeed", "model_name_or_path"),
        # the FSDP branch asks transformers' is_fsdp_enabled(), true only with FSDP_CPU_RAM_EFFICIENT_LOADING=1:
        # not judged here
        lambda v: _ptq_stays_quantized(v) and _zero3(v),
        fix="train the PTQ checkpoint under ZeRO-2 (or DDP), or start from the unquantized checkpoint",
        fires=_PTQ + "deepspeed: ds_z3_config.json\n",
        accepted=_PTQ + "deepspeed: ds_z2_config.json\n",
        files={**GPTQ_FILES, "ds_z3_config.json": ZERO3, "ds_z2_config.json": ZERO2},
        reads_checkpoint=True,
    ),
    RecipeCheck(
        FAMILY,
        f"{_QU}:126-131",
        "refuses",
        "The 'gptqmodel>=2.0.0' distribution was not found and is required by this application. To fix: run `pip "
        "install gptqmodel>=2.0.0`.",
        ("model_name_or_path",),
        lambda v: bool(_ptq_dependency_missing(v)),
        says=_ptq_dependency_missing,
        raises="importlib.metadata.PackageNotFoundError",
        fix="install the package the checkpoint's quantization needs in the job's environment",
        fires=_PTQ,
        accepted=_PTQ,
        files=GPTQ_FILES,
        versions={"llamafactory": "0.9.6"},
        accepted_versions={"llamafactory": "0.9.6", "gptqmodel": "5.0.0"},
        reads_checkpoint=True,
    ),
    RecipeCheck(
        FAMILY,
        "src/llamafactory/model/adapter.py:239-244",
        "refuses",
        "DoRA is not compatible with PTQ-quantized models.",
        ("use_dora", "quantization_bit", "quantization_method", "model_name_or_path"),
        _dora_on_quantized,
        fix="use plain LoRA on a quantized model (drop `use_dora`), or quantize with bitsandbytes "
        "(`quantization_bit: 4`) from the unquantized checkpoint",
        fires=_PTQ + "use_dora: true\n",
        accepted=_PTQ,
        files=GPTQ_FILES,
        reads_checkpoint=True,
    ),
    RecipeCheck(
        FAMILY,
        "src/llamafactory/model/adapter.py:330-335",
        "refuses",
        "Quantized models can only be used for the LoRA or OFT tuning.",
        ("finetuning_type", "pissa_init", "model_name_or_path"),
        lambda v: bool(_quantized_model_refusal(v)),
        says=_quantized_model_refusal,
        fix="train LoRA or OFT adapters on the PTQ checkpoint, or fine-tune the unquantized checkpoint",
        fires=_PTQ.replace("finetuning_type: lora\n", "finetuning_type: full\n"),
        accepted=_PTQ,
        files=GPTQ_FILES,
        reads_checkpoint=True,
    ),
)
