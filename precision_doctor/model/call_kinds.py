"""The kinds of call the script probe records, and how each is recognised: one declared table.

`CallKind` is a str enum, so `call.kind == "trainer"` and JSON facts read as before. `RECOGNISERS` is in
priority order and the first that matches names the kind: exact library names first, then names a library
re-exports under many modules, then generic method names (`.to()`, `.step()`) that any object may have, so a
library call is never taken for a method of the same name. `FROM_CONTEXT` kinds are not recognised from the
call alone: the collector gives them from what surrounds it (a loop variable, a call of a local function).
"""

from __future__ import annotations

from collections.abc import Callable

from .util import StrEnum


class CallKind(StrEnum):
    AUTOCAST = "autocast"
    GRAD_SCALER = "grad_scaler"
    CLIP_GRAD = "clip_grad"
    TRAINING_ARGS = "training_args"
    TRAINER = "trainer"
    ACCELERATOR = "accelerator"
    SET_DEVICE = "set_device"
    INIT_PROCESS_GROUP = "init_process_group"
    FSDP = "fsdp"
    FSDP_MIXED_PRECISION = "fsdp_mixed_precision"
    HF_DEEPSPEED_CONFIG = "hf_deepspeed_config"
    DEEPSPEED_INITIALIZE = "deepspeed_initialize"  # deepspeed.initialize(model=..., config=...): the raw engine
    DDP = "ddp"
    FP8_AUTOCAST = "fp8_autocast"
    BNB_CONFIG = "bnb_config"
    PEFT_CONFIG = "peft_config"
    GET_PEFT_MODEL = "get_peft_model"
    PREPARE_KBIT = "prepare_kbit"
    CAST_MIXED = "cast_mixed"
    OPTIMIZER = "optimizer"
    PEFT_LOAD = "peft_load"
    ADD_ADAPTER = "add_adapter"  # model.add_adapter(LoraConfig): peft's inject_adapter_in_model, in place
    CAST_TRAINABLE = "cast_trainable"  # diffusers' cast_training_params(model, dtype): the trainable ones only
    MODEL_LOAD = "model_load"  # from_pretrained, or from_config: a model built afresh from a config's shape
    CONFIG_LOAD = "config_load"  # AutoConfig.from_pretrained(id): the shape (and dtype) from_config builds
    PEFT_WRAP_POLICY = "peft_wrap_policy"  # peft's fsdp_auto_wrap_policy(model): LoRA leaves as their own FSDP units
    CAST = "cast"
    TENSOR_ON_DEVICE = "tensor_on_device"  # torch.randn(..., device="cuda"): a tensor made on a device
    GC_ENABLE = "gc_enable"
    MERGE_ADAPTERS = "merge_adapters"  # peft's merge_and_unload() / unload(): the adapters leave the model
    INPUT_GRADS = "input_grads"
    METHOD = "method"  # a training-loop method: scaler.scale(), loss.backward(), optimizer.step(), ...
    PREPARE = "prepare"
    TRAIN = "train"
    # given by the collector from context
    LOCAL_CALL = "local_call"  # a function defined in the script, arguments bound to its parameters
    FLOW = "flow"  # `model = load_model(...)`: a local or imported helper whose result is assigned
    CALL_VAR = "call_var"  # a call of something the script assigned: `model(**batch)`
    LOOP_VAR = "loop_var"  # `for batch in loader:`

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


FROM_CONTEXT = (CallKind.LOCAL_CALL, CallKind.FLOW, CallKind.CALL_VAR, CallKind.LOOP_VAR)


# --- library names the table uses --------------------------------------------------------------

TRAINER_SUFFIX = "Trainer"
# Sentence Transformers' trainers and arguments subclass transformers' (with its defaults): read as Trainer's
TRAINER_LIBRARIES = ("transformers.", "trl.", "sentence_transformers.")
TRAINING_ARGUMENT_CLASSES = {
    "TrainingArguments",
    "Seq2SeqTrainingArguments",
    "SentenceTransformerTrainingArguments",
    "CrossEncoderTrainingArguments",
    "SparseEncoderTrainingArguments",
}
# models that load their transformers checkpoint in the constructor (probes/frameworks.py reads `model_kwargs`)
SENTENCE_TRANSFORMERS_MODELS = {
    f"sentence_transformers.{m}"
    for m in (
        "SentenceTransformer",
        "CrossEncoder",
        "SparseEncoder",
        "SentenceTransformer.SentenceTransformer",
        "cross_encoder.CrossEncoder",
        "sparse_encoder.SparseEncoder",
    )
}
MODEL_LOADER_EXCLUDE = (
    "Tokenizer",
    "Processor",
    "FeatureExtractor",
    "Config",
    "ImageProcessor",
    "PeftModel",
    "Dataset",
    "Pipeline",
)
# Libraries whose `Model.from_pretrained` is their own API, not transformers' (Unsloth's FastLanguageModel takes
# `load_in_4bit=` and `dtype=None` as documented keywords): not transformers' loads. Unsloth's `Fast*Model` loaders
# are recorded by their own recogniser and read with Unsloth's defaults (probes/frameworks.py).
FOREIGN_LOADERS = ("unsloth",)
CAST_METHODS = {"half", "bfloat16", "float", "double", "to", "cuda", "cpu"}
LOOP_METHODS = {"scale", "unscale_", "step", "update", "backward", "zero_grad"}
OPTIMIZER_PREFIXES = (
    "torch.optim.",
    "bitsandbytes.optim.",
    "bnb.optim.",
    "transformers.optimization.",
    "apex.optimizers.",
    "deepspeed.ops.adam.",
)
PEFT_CONFIGS = {
    "LoraConfig",
    "AdaLoraConfig",
    "IA3Config",
    "LoHaConfig",
    "LoKrConfig",
    "OFTConfig",
    "BOFTConfig",
    "VeraConfig",
    "PromptTuningConfig",
    "PrefixTuningConfig",
    "PromptEncoderConfig",
}
AUTOCASTS = {
    "torch.autocast",
    "torch.amp.autocast",
    "torch.cuda.amp.autocast",
    "torch.cpu.amp.autocast",
    "torch.amp.autocast_mode.autocast",
}
GRAD_SCALERS = {
    "torch.amp.GradScaler",
    "torch.cuda.amp.GradScaler",
    "torch.cpu.amp.GradScaler",
    "torch.GradScaler",
    "torch.amp.grad_scaler.GradScaler",
}
LIGHTNING_CLASSES = {
    "lightning.Trainer",
    "lightning.pytorch.Trainer",
    "pytorch_lightning.Trainer",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
    "lightning_fabric.Fabric",
}  # probes/frameworks.py
CLIPPERS = {"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad_norm"}
# LightningCLI builds the Trainer, the LightningModule and the DataModule from the job's arguments and configs
LIGHTNING_CLI_CLASSES = {
    "lightning.pytorch.cli.LightningCLI",
    "pytorch_lightning.cli.LightningCLI",
    "pytorch_lightning.utilities.cli.LightningCLI",  # Lightning 1.x
}


def is_trl_config(qualified: str) -> bool:
    last = qualified.rsplit(".", 1)[-1]
    return qualified.startswith("trl") and last.endswith("Config") and last not in ("ModelConfig", "ScriptArguments")


def is_training_arguments(qualified: str) -> bool:
    return qualified.rsplit(".", 1)[-1] in TRAINING_ARGUMENT_CLASSES or is_trl_config(qualified)


def is_trainer_class(qualified: str) -> bool:
    return qualified.startswith(TRAINER_LIBRARIES) and qualified.rsplit(".", 1)[-1].endswith(TRAINER_SUFFIX)


# --- the table ---------------------------------------------------------------------------------


# torch's tensor factories (a `device=` keyword makes the tensor there, and the process's CUDA context with it)
TENSOR_CREATORS = frozenset(
    {
        "torch.randn",
        "torch.rand",
        "torch.randint",
        "torch.zeros",
        "torch.ones",
        "torch.empty",
        "torch.full",
        "torch.tensor",
        "torch.arange",
        "torch.linspace",
        "torch.randn_like",
        "torch.rand_like",
        "torch.zeros_like",
        "torch.ones_like",
        "torch.empty_like",
    }
)


class CallSite:
    """What the table looks at: the call as the probe read it, without the AST."""

    __slots__ = ("callee", "last", "method", "owner", "bare", "keywords", "local_trainers", "local_args")

    def __init__(
        self,
        callee: str,
        method: str = "",
        owner: str = "",
        bare: bool = False,
        keywords: frozenset[str] = frozenset(),
        local_trainers: frozenset[str] = frozenset(),
        local_args: frozenset[str] = frozenset(),
    ):
        self.callee = callee  # qualified dotted name, "" for a call of an expression
        self.last = callee.rsplit(".", 1)[-1]
        self.method = method  # the attribute called (`half` in `model.half()`), "" for a plain name
        self.owner = owner  # last name of the object a method is called on (`AutoModel` in AutoModel.from_pretrained)
        self.bare = bare  # no arguments at all
        self.keywords = keywords
        self.local_trainers = local_trainers  # classes of the script that subclass a Trainer
        self.local_args = local_args  # ... and TrainingArguments


class Recogniser:
    """Matches when every condition given holds: `names` (the qualified callee is one of them), `last` (its last
    name is), `prefixes` (it starts with one), `methods` (an attribute call of one), `when` (a predicate)."""

    __slots__ = ("kind", "names", "last", "prefixes", "methods", "when")

    def __init__(
        self, kind: CallKind, names=(), last=(), prefixes=(), methods=(), when: Callable[[CallSite], bool] | None = None
    ):
        self.kind = kind
        self.names = frozenset(names)
        self.last = frozenset(last)
        self.prefixes = tuple(prefixes)
        self.methods = frozenset(methods)
        self.when = when

    def matches(self, site: CallSite) -> bool:
        return (
            (not self.names or site.callee in self.names)
            and (not self.last or site.last in self.last)
            and (not self.prefixes or site.callee.startswith(self.prefixes))
            and (not self.methods or site.method in self.methods)
            and (self.when is None or self.when(site))
        )


def _model_owner(site: CallSite) -> bool:
    owner = site.owner
    if site.callee.split(".", 1)[0] in FOREIGN_LOADERS:
        return False
    return (
        bool(owner)
        and not any(x in owner for x in MODEL_LOADER_EXCLUDE)
        and (
            owner.startswith(("Auto", "AutoPeft"))
            or "For" in owner
            or owner.endswith("Model")
            or owner.endswith("LMHeadModel")
        )
    )


def _model_config(site: CallSite) -> bool:
    """`AutoConfig.from_pretrained(...)`, `LlamaConfig.from_pretrained(...)`: a transformers model config (not a
    peft, bitsandbytes or generation config, which name no model)."""
    owner = site.owner
    return owner == "AutoConfig" or (
        owner.endswith("Config") and site.callee.startswith("transformers.") and owner not in _NOT_MODEL_CONFIGS
    )


_NOT_MODEL_CONFIGS = {"GenerationConfig", "BitsAndBytesConfig", "PeftConfig"}


def _optimizer_class(site: CallSite) -> bool:
    return site.last[:1].isupper() and "Scheduler" not in site.last and "LR" not in site.last


RECOGNISERS: tuple[Recogniser, ...] = (
    # exact library names and library classes
    Recogniser(CallKind.AUTOCAST, names=AUTOCASTS),
    Recogniser(CallKind.AUTOCAST, when=lambda s: s.callee.endswith(".autocast") and not s.callee.startswith("torch")),
    Recogniser(CallKind.GRAD_SCALER, names=GRAD_SCALERS),
    Recogniser(CallKind.CLIP_GRAD, names=CLIPPERS),
    Recogniser(CallKind.TRAINING_ARGS, when=lambda s: is_training_arguments(s.callee) or s.callee in s.local_args),
    Recogniser(
        CallKind.TRAINER,
        when=lambda s: (
            (s.callee.startswith(TRAINER_LIBRARIES) and s.last.endswith(TRAINER_SUFFIX)) or s.callee in s.local_trainers
        ),
    ),
    Recogniser(CallKind.ACCELERATOR, names={"accelerate.Accelerator"} | LIGHTNING_CLASSES),
    Recogniser(CallKind.SET_DEVICE, names={"torch.cuda.set_device"}),
    Recogniser(CallKind.INIT_PROCESS_GROUP, last={"init_process_group"}, prefixes=("torch",)),
    Recogniser(CallKind.FSDP, last={"FullyShardedDataParallel", "FSDP", "fully_shard"}, prefixes=("torch",)),
    Recogniser(CallKind.FSDP_MIXED_PRECISION, last={"MixedPrecision"}, prefixes=("torch",)),
    Recogniser(CallKind.HF_DEEPSPEED_CONFIG, last={"HfDeepSpeedConfig"}),
    Recogniser(CallKind.DEEPSPEED_INITIALIZE, names={"deepspeed.initialize"}),
    Recogniser(CallKind.TENSOR_ON_DEVICE, names=TENSOR_CREATORS, when=lambda s: "device" in s.keywords),
    Recogniser(CallKind.DDP, last={"DistributedDataParallel"}, prefixes=("torch",)),
    Recogniser(CallKind.FP8_AUTOCAST, last={"fp8_autocast"}, prefixes=("transformer_engine",)),
    # names re-exported under many modules
    Recogniser(CallKind.BNB_CONFIG, last={"BitsAndBytesConfig"}),
    Recogniser(
        CallKind.PEFT_CONFIG, last=PEFT_CONFIGS, when=lambda s: s.callee.startswith("peft") or s.callee == s.last
    ),
    Recogniser(CallKind.GET_PEFT_MODEL, last={"get_peft_model"}),
    Recogniser(CallKind.PREPARE_KBIT, last={"prepare_model_for_kbit_training", "prepare_model_for_int8_training"}),
    Recogniser(CallKind.CAST_MIXED, last={"cast_mixed_precision_params"}),
    Recogniser(CallKind.OPTIMIZER, prefixes=OPTIMIZER_PREFIXES, when=_optimizer_class),
    Recogniser(CallKind.CAST_TRAINABLE, last={"cast_training_params"}),
    Recogniser(CallKind.PEFT_WRAP_POLICY, last={"fsdp_auto_wrap_policy"}),
    Recogniser(CallKind.PEFT_LOAD, methods={"from_pretrained"}, when=lambda s: s.owner.startswith("PeftModel")),
    Recogniser(CallKind.MODEL_LOAD, names=SENTENCE_TRANSFORMERS_MODELS),
    Recogniser(
        CallKind.MODEL_LOAD,
        methods={"from_pretrained"},
        prefixes=("unsloth.",),
        when=lambda s: s.owner.startswith("Fast"),
    ),
    Recogniser(CallKind.MODEL_LOAD, methods={"from_pretrained", "from_config"}, when=_model_owner),
    Recogniser(CallKind.CONFIG_LOAD, methods={"from_pretrained"}, when=_model_config),
    # generic method names, last
    Recogniser(CallKind.CAST, methods=CAST_METHODS),
    Recogniser(CallKind.ADD_ADAPTER, methods={"add_adapter"}),
    Recogniser(CallKind.GC_ENABLE, methods={"gradient_checkpointing_enable", "activation_checkpointing_enable"}),
    Recogniser(CallKind.MERGE_ADAPTERS, methods={"merge_and_unload", "unload"}),
    Recogniser(CallKind.INPUT_GRADS, methods={"enable_input_require_grads"}),
    Recogniser(CallKind.METHOD, methods=LOOP_METHODS),
    Recogniser(CallKind.PREPARE, methods={"prepare", "prepare_model", "prepare_optimizer"}),
    Recogniser(CallKind.CLIP_GRAD, methods={"clip_grad_norm_", "clip_grad_value_"}),
    Recogniser(CallKind.TRAIN, methods={"train"}, when=lambda s: s.bare or "resume_from_checkpoint" in s.keywords),
)


def kind_of(site: CallSite) -> CallKind | None:
    """The kind of the first recogniser that matches, or None for a call the doctor does not record."""
    for recogniser in RECOGNISERS:
        if recogniser.matches(site):
            return recogniser.kind
    return None
