"""The memory question for one script: which checkpoint, trained how, on which GPUs, under which parallelism;
read from the derived setup and the facts, then estimated (derive/memory.py). What the script does not say is
assumed, and the plan says what."""

from __future__ import annotations

from dataclasses import field

from ..knowledge import dtypes
from ..knowledge.families import LIGER_MODEL_TYPES
from ..model.facts import (
    KNOWN,
    CheckpointFacts,
    Facts,
    Gpu,
    LaunchFacts,
    MachineFacts,
    ScriptFacts,
    StackFacts,
    model_source,
)
from ..model.util import record
from .checkpoint import checkpoint_of
from .launch import LaunchPlan, device_map_kind
from .memory import (
    MEASURED_UNDERESTIMATE,
    MIB,
    WHISPER_MAX_LABELS,
    Breakdown,
    Parallelism,
    TrainingShape,
    estimate,
    source_frames,
)
from .optimizer import optimizer_of
from .setup import Setup, decide, other_device

DEFAULT_BATCH = 8  # TrainingArguments.per_device_train_batch_size
TRL_MAX_LENGTH = 1024  # SFTConfig.max_length


@record
class MemoryPlan:
    checkpoint: CheckpointFacts
    shape: TrainingShape
    breakdown: Breakdown
    budget: int  # bytes a process may use on its GPU: total minus what other processes hold
    gpu: Gpu
    gpus: int
    spread_budgets: tuple[int, ...] = ()  # device_map spread: each GPU's budget (max_memory, else free)
    recipe_keys: dict[str, str] = field(default_factory=dict)  # a recipe's key per Trainer keyword (its fixes)

    @property
    def headroom(self) -> float:
        return 1 - self.breakdown.peak / self.budget if self.budget else -1.0


def first_failure(m: MemoryPlan) -> str:
    """Where the job first runs out of memory: load | forward | backward | step | second step, or "" when its
    tensors fit (what the caching allocator reserves beyond them is flushed before it fails: a peak that fits only
    without that reserve is uncertain, `uncertain`)."""
    b = m.breakdown
    if m.shape.parallelism.kind == "device-map":
        return ""  # device_map spreads the weights and offloads what does not fit (PD604)
    if b.at_load > m.budget:
        return "load"
    for phase, need in (("forward", b.at_forward), ("backward", b.at_backward), ("step", b.at_step)):
        if need > m.budget:
            return phase
    if b.tensors_peak > m.budget:
        return "second step"  # the first step fits; the next runs with the optimizer state it created
    return ""


def uncertain(m: MemoryPlan) -> bool:
    """The tensors fit, but not with the estimate's measured error on top of the allocator's reserve."""
    return not first_failure(m) and m.breakdown.peak * (1 + MEASURED_UNDERESTIMATE) > m.budget


def _why_unknown(load, script: ScriptFacts) -> str:
    """` (why)` when the checkpoint the load names was looked up and not found or not judged, else ""."""
    source = model_source(load, script.calls)
    found = script.checkpoints.get(source.value) if isinstance(source.value, str) else None
    return f" ({found.detail})" if found is not None and not found.known and found.detail else ""


def plan_memory_for(setup: Setup, script: ScriptFacts, facts: Facts, plan: LaunchPlan) -> MemoryPlan | str:
    """One script's plan, with its own project's stack: what the memory rules and `precision-doctor memory` read."""
    return plan_memory(setup, script, facts.machine, script.stack or facts.stack, facts.launch, plan)


def plan_memory(
    setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts, launch: LaunchFacts, plan: LaunchPlan
) -> MemoryPlan | str:
    """The plan, or why there is none."""
    if setup.model_load is None:
        return "no model load found"
    if script.recipe is not None and script.recipe.memory_unmodelled:
        return script.recipe.memory_unmodelled
    device = other_device(script)
    if device:
        return f"the script is written for {device}: the GPU's memory is not its limit"
    checkpoint = checkpoint_of(setup.model_load, script)
    if checkpoint is None or not checkpoint.parameters:
        return "the checkpoint's size is not known" + _why_unknown(setup.model_load, script)
    if checkpoint.quantization and setup.quantized.value not in ("4bit", "8bit"):
        return (
            f"the checkpoint is stored {checkpoint.quantization}-quantized (its config's quantization_config): its "
            "packed weights and the kernels that unpack them are not modelled"
        )
    if not machine.known or not machine.gpus:
        return "no GPU on the target machine"
    gpu = min(machine.gpus, key=lambda g: g.memory_total_mib - g.memory_used_mib)
    budget = (gpu.memory_total_mib - gpu.memory_used_mib) * MIB
    if budget <= 0:
        return "the GPU's memory is not known"
    shape = training_shape(setup, script, checkpoint, machine, stack, plan)
    spread: tuple[int, ...] = ()
    if shape.parallelism.kind == "device-map":
        spread = _max_memory(setup, machine)
    keys = dict(script.recipe.spelling) if script.recipe is not None else {}
    return MemoryPlan(checkpoint, shape, estimate(checkpoint, shape), budget, gpu, len(machine.gpus), spread, keys)


def training_shape(
    setup: Setup, script: ScriptFacts, c: CheckpointFacts, machine: MachineFacts, stack: StackFacts, plan: LaunchPlan
) -> TrainingShape:
    assumed: list[str] = []
    args = setup.training_args
    weight = setup.weights.value if setup.weights.known else (c.torch_dtype or dtypes.FLOAT32)
    if not setup.weights.known:
        assumed.append(f"weights in {weight} (the load's dtype is not known: {setup.weights.unknown})")
    amp = setup.amp.value if setup.amp.known else "no"
    compute = {"fp16": dtypes.FLOAT16, "bf16": dtypes.BFLOAT16}.get(str(amp), weight)
    quantized = setup.quantized.value if isinstance(setup.quantized.value, str) else ""
    lora_rank = _lora_rank(setup, script) if setup.peft.value else 0
    batch = _int_kwarg(args, "per_device_train_batch_size", machine, stack)
    if batch is None:
        batch = DEFAULT_BATCH
        assumed.append(
            f"batch size {batch} per GPU ("
            + (
                "TrainingArguments' default"
                if args is not None and "per_device_train_batch_size" not in args.kwargs
                else "not found in the script"
            )
            + ")"
        )
    sequence = None
    for name in ("max_length", "max_seq_length"):
        sequence = sequence or _int_kwarg(args, name, machine, stack)
    if sequence is not None and args is not None and not decide(args.kwarg("packing"), machine, stack).is_(True):
        # truncation, not padding: each batch is padded to its longest sample (TRL's collator, Axolotl's and
        # LLaMA-Factory's without packing), so the estimate is the worst case, a batch of samples that long
        assumed.append(
            f"every sample {sequence} tokens long (the longest kept; without packing a batch is padded "
            "to its longest sample)"
        )
    if sequence is None and source_frames(c):  # Whisper: the audio is 30 s, the labels at most 448 tokens
        sequence = c.target_positions or WHISPER_MAX_LABELS
        assumed.append(
            f"labels of {sequence} tokens (the decoder's longest; the encoder always reads "
            f"{source_frames(c)} audio frames)"
        )
    if sequence is None:
        sequence = TRL_MAX_LENGTH if setup.trl else (512 if c.model_type in ("bert", "roberta", "deberta-v2") else 1024)
        if not (c.image_size and c.patch_size):
            assumed.append(
                f"sequence length {sequence} ("
                + ("SFTConfig's default max_length" if setup.trl else "not written in the script")
                + ")"
            )
    attn = setup.model_load.kwarg("attn_implementation") if setup.model_load else None
    eager = bool(attn is not None and attn.state == KNOWN and attn.value == "eager") or (
        c.attention and "sdpa" not in c.attention and "flash_attention_2" not in c.attention
    )
    parallelism, master = _parallelism(setup, script, machine, plan, weight, amp)
    if master:
        weight = compute if compute != dtypes.FLOAT32 else dtypes.BFLOAT16
    return TrainingShape(
        weight_dtype=weight,
        compute_dtype=compute,
        quantized=quantized,
        lora_rank=lora_rank,
        lora_modules=_lora_modules(script) if lora_rank else "default",
        adapter_dtype=setup.adapter_dtype.value or dtypes.FLOAT32,
        optimizer=_optimizer_kind(setup, stack),
        batch=batch,
        sequence=sequence,
        checkpointing=setup.placement.checkpointing.on,
        scores_materialised=bool(eager),
        flash_attention=bool(attn is not None and attn.state == KNOWN and str(attn.value).startswith("flash_")),
        parallelism=parallelism,
        master_weights=master,
        vocabulary_head=not _classifier(setup),
        kbit_upcast=bool(quantized and script.of("prepare_kbit")),
        chunked_loss=_chunked_loss(setup, script, c, machine, stack),
        fp32_embeddings=bool(script.recipe is not None and script.recipe.fp32_embeddings),
        saved_modules=_saved_module_parameters(setup, c) if lora_rank else 0,
        assumed=tuple(assumed),
    )


# A task head with a handful of outputs (a classifier's logits are num_labels wide), or none (a bare backbone):
# no vocabulary-wide logits
LANGUAGE_MODEL_NAMES = ("LMHeadModel", "LanguageModel")  # GPT2LMHeadModel, Unsloth's FastLanguageModel
CLASSIFIER_HEADS = (
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMultipleChoice",
    "ForImageClassification",
    "ForAudioClassification",
)


def _classifier(setup: Setup) -> bool:
    load = setup.model_load
    classes = [part for part in load.callee.split(".") if part[:1].isupper()] if load is not None else []
    if not classes:
        return False
    name = classes[-1]  # XxxModel / AutoModel: the bare backbone, no head at all
    return name.endswith(CLASSIFIER_HEADS) or (name.endswith("Model") and not name.endswith(LANGUAGE_MODEL_NAMES))


def _int_kwarg(call, name: str, machine: MachineFacts, stack: StackFacts) -> int | None:
    if call is None:
        return None
    v = decide(call.kwarg(name), machine, stack)
    return v.value if v.state == KNOWN and isinstance(v.value, int) and not isinstance(v.value, bool) else None


def _lora_rank(setup: Setup, script: ScriptFacts) -> int:
    for c in script.of("peft_config"):
        v = c.kwarg("r")
        if v.state == KNOWN and isinstance(v.value, int):
            return v.value
    return 8  # LoraConfig's default


def _chunked_loss(setup: Setup, script: ScriptFacts, c: CheckpointFacts, machine: MachineFacts, stack) -> bool:
    """The loss fused with the output layer: a recipe's Liger / Cut Cross-Entropy setting (its reader knows which
    models the framework patches), or the Trainer's `use_liger_kernel=True` (transformers applies Liger's defaults,
    fused linear cross-entropy on) on an architecture Liger patches."""
    if script.recipe is not None and script.recipe.chunked_loss:
        return True
    if c.model_type not in LIGER_MODEL_TYPES:
        return False
    args = setup.training_args
    return args is not None and decide(args.kwarg("use_liger_kernel"), machine, stack).is_(True)


# peft's modules_to_save names that are the vocabulary-wide layers (each a vocabulary x hidden matrix)
VOCABULARY_LAYERS = ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_out", "shared")


def _saved_module_parameters(setup: Setup, c: CheckpointFacts) -> int:
    """Parameters of the modules_to_save copies the estimate can size: the embedding and the output layer (the
    usual ones: new tokens); another module named is not counted."""
    names = setup.modules_to_save.value if isinstance(setup.modules_to_save.value, tuple | list) else ()
    layer = (c.vocab_size or 0) * (c.hidden_size or 0)
    return sum(layer for n in names if isinstance(n, str) and n.rsplit(".", 1)[-1] in VOCABULARY_LAYERS)


# a feed-forward projection's name in the architectures the estimate knows: adapters there mean every linear layer
MLP_NAMES = ("gate", "up_proj", "down_proj", "fc1", "fc2", "c_fc", "mlp", "w1", "w2", "dense_h_to_4h")


def _lora_modules(script: ScriptFacts) -> str:
    """peft's default targets ("default": the attention's query and value), or "all-linear" where the config
    names it or any feed-forward projection (the estimate counts those two layouts)."""
    for c in script.of("peft_config"):
        v = c.kwarg("target_modules")
        if v.state != KNOWN or not v.value:
            continue
        names = [v.value] if isinstance(v.value, str) else v.value if isinstance(v.value, list | tuple) else []
        # a name, or a regex naming one (`.*(gate|up|down)_proj`)
        if any(isinstance(n, str) and (n in ("all-linear", "all") or any(p in n for p in MLP_NAMES)) for n in names):
            return "all-linear"
    return "default"


def _parallelism(
    setup: Setup, script: ScriptFacts, machine: MachineFacts, plan: LaunchPlan, weight: str, amp
) -> tuple[Parallelism, bool]:
    """How the training state is spread, and whether an fp32 master copy sits beside half weights."""
    sharding = setup.sharding
    # no launch given: a DeepSpeed / FSDP job is launched on every visible GPU
    processes = plan.processes or (len(machine.gpus) if sharding.kind else 1)
    if sharding.kind == "deepspeed" and sharding.config is not None:
        kind = f"zero{sharding.stage}" if sharding.stage else "ddp"
        return Parallelism(processes, kind, sharding.offload_optimizer, sharding.offload_params), amp in (
            "fp16",
            "bf16",
        )
    if sharding.kind == "fsdp" and sharding.fsdp:
        kind = {"hybrid_shard": "fsdp-hybrid", "shard_grad_op": "fsdp-grad-op", "no_shard": "ddp"}.get(
            sharding.fsdp, "fsdp-full"
        )
        return Parallelism(
            processes, kind, offload_params=sharding.offload_params, gpus_per_node=len(machine.gpus)
        ), False
    if (
        setup.model_load is not None
        and device_map_kind(setup.model_load.kwarg("device_map")) == "spread"
        and processes == 1
    ):
        return Parallelism(len(machine.gpus), "device-map"), False
    return Parallelism(processes, "ddp" if processes > 1 else "single"), False


def _max_memory(setup: Setup, machine: MachineFacts) -> tuple[int, ...]:
    """Each GPU's budget for device_map: max_memory={0: "20GiB", ...} where written, else what is free."""
    free = [(g.memory_total_mib - g.memory_used_mib) * MIB for g in machine.gpus]
    v = setup.model_load.kwarg("max_memory") if setup.model_load else None
    if v is None or v.state != KNOWN or not isinstance(v.value, dict):
        return tuple(int(f * 0.9) for f in free)  # accelerate keeps about a tenth free for activations
    out = []
    for i, f in enumerate(free):
        limit = v.value.get(i, v.value.get(str(i)))
        out.append(min(f, _size(limit)) if limit is not None else 0)
    return tuple(out)


def _size(text) -> int:
    if isinstance(text, int):
        return text
    s = str(text).strip().upper().replace(" ", "")
    for unit, mult in (("GIB", 1024**3), ("MIB", 1024**2), ("GB", 10**9), ("MB", 10**6)):
        if s.endswith(unit):
            try:
                return int(float(s[: -len(unit)]) * mult)
            except ValueError:
                return 0
    return 0


def _optimizer_kind(setup: Setup, stack: StackFacts) -> str:
    opt = optimizer_of(setup, stack)
    return opt.kind if opt is not None else "adamw"
