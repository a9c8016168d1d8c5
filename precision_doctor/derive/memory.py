"""Will the job fit? GPU memory per device, before anything runs: weights, gradients, optimizer state,
activations, CUDA context and allocator reserve, under the parallelism the launch implies.

The model-state terms follow the byte counts everyone uses (and match `accelerate estimate-memory` and DeepSpeed's
`estimate_zero2/3_model_states_mem_needs` on their own terms, tests/test_memory.py). Activations are counted per
token: elements saved for backward per layer as a multiple of the hidden size, the key/value width and the
intermediate size (plus heads x sequence where attention scores are materialised), and outside the layers as a
multiple of the hidden size and the vocabulary. The multiples are what transformers' implementations save,
counted with torch.autograd.graph.saved_tensors_hooks on models built from configs
(benchmarks/memory_accuracy.py re-measures them), in each precision regime: fp32, half weights, and fp32 weights
under half autocast, where norms, the residual stream and the loss stay in fp32. Beyond what is saved, the peak
holds the logits the forward returns and, at the start of backward, the loss's fp32 gradient: both measured on a
GPU, as is what the caching allocator reserves beyond them (benchmarks/memory_cuda.py). Everything here is a pure
function of its inputs.
"""

from __future__ import annotations

import math
from dataclasses import field, replace

from ..knowledge import dtypes
from ..model.facts import CheckpointFacts
from ..model.util import record

GIB = 1024**3
MIB = 1024**2
# Outside torch's allocator: the CUDA context, loaded kernels, library handles. An H200 with torch 2.11 and CUDA 13
# held 695 MiB there before its first step and 767 MiB after training steps (benchmarks/memory_cuda.py).
CUDA_CONTEXT_BYTES = 768 * MIB
# What torch's caching allocator reserves beyond the allocated peak: freed blocks it keeps but cannot reuse for the
# next requests of other sizes. Fitted on twelve Trainer jobs on an H200 (three families x full bf16, fp32 weights
# under fp16 AMP, LoRA and QLoRA with checkpointing; fixtures/memory_h200_jobs.json): reserved minus allocated was
# 3-24 % of the activations without checkpointing and 27-65 % with it (each recomputed layer and the
# vocabulary-wide loss buffers freed between them), a share of the trained states (the
# optimizer's temporaries, fp32 weights' half copies; frozen weights are placed once and never freed) and about a
# quarter of one sample's fp32 logits (the largest blocks the loss frees; measured at 1,024 tokens only). With these
# the estimate is -4.8 % to +8.8 % of reserved plus the context on every job measured. The reserve is what an
# uncapped allocator keeps: near its limit it flushes its cache and retries before it fails, so past the GPU only
# the tensors' own peak (tensors_peak) says a job will not fit; between the two it may or may not.
RESERVE_OF_TRANSIENT = 0.08
RESERVE_OF_TRANSIENT_CHECKPOINTED = 0.30
RESERVE_OF_TRAINED_STATES = 0.12
RESERVE_OF_LOGITS_BLOCK = 0.25
# How far below what the GPU held the estimate can be (reserved memory plus the context): 5.1 % at most on the
# twelve H200 jobs above (fixtures/memory_h200_jobs.json), so 6 %. A batch is safe when its estimate plus this
# margin fits; above that, up to the batch whose tensors alone fit, it is uncertain (memory --plot).
MEASURED_UNDERESTIMATE = 0.06
# PD605: a plan that fits with less to spare than that error is within it (peak x 1.06 > what the GPU has: 5.7 %)
HEADROOM_WARNING = 1 - 1 / (1 + MEASURED_UNDERESTIMATE)
BYTES = {dtypes.FLOAT32: 4, dtypes.FLOAT16: 2, dtypes.BFLOAT16: 2}


@record
class ActivationFactor:
    """Elements of the compute dtype saved for backward per token (a float32 tensor in a half regime counts two).
    Per layer: h * hidden + kv * key/value width + i * intermediate (+ scores * heads * sequence where the attention
    kernel materialises the scores); outside the layers: head_h * hidden + head_v * vocabulary (the loss's
    log-probabilities)."""

    h: float
    kv: float
    i: float
    scores: float  # eager attention: probabilities, dropout mask and output
    head_h: float
    head_v: float
    checkpoint_h: float = 1.0  # per layer kept under gradient checkpointing: the layer input (fp32 under autocast)
    always_scores: bool = False  # a position bias added to the scores: every kernel materialises them
    # a speech encoder-decoder (Whisper): its encoder layers save h per source frame, its decoder layers decoder_h
    # per text token and cross_h per source frame (the cross-attention keys and values), its audio frontend (the
    # convolutions over the mel frames) source_h per source frame
    decoder_h: float = 0.0
    cross_h: float = 0.0
    source_h: float = 0.0


# Counted on transformers 5.x (see the module doc); families not listed use the Llama factor.
ACTIVATION_FACTORS = {
    "llama": ActivationFactor(h=8, kv=2, i=4, scores=1, head_h=3, head_v=1),
    "gpt2": ActivationFactor(h=5, kv=5, i=5, scores=3, head_h=3, head_v=1),
    "bert": ActivationFactor(h=5, kv=5, i=2, scores=3, head_h=6, head_v=1),
    "t5": ActivationFactor(h=8, kv=8, i=3, scores=4.5, head_h=10, head_v=1, always_scores=True),
    "vit": ActivationFactor(h=4, kv=4, i=2, scores=3, head_h=4, head_v=0),
    "whisper": ActivationFactor(h=9, kv=0, i=2, scores=1, head_h=2.2, head_v=1, decoder_h=14, cross_h=2, source_h=7),
}
_FAMILY_OF = {
    "mistral": "llama",
    "mixtral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
    "gemma": "llama",
    "gemma2": "llama",
    "gemma3": "llama",
    "gemma3_text": "llama",
    "phi3": "llama",
    "qwen2_vl": "llama",
    "qwen2_5_vl": "llama",
    "smollm3": "llama",
    "deepseek_v2": "llama",
    "deepseek_v3": "llama",
    "opt": "gpt2",
    "phi": "gpt2",
    "falcon": "gpt2",
    "bloom": "gpt2",
    "roberta": "bert",
    "deberta-v2": "bert",
    "mt5": "t5",
    "umt5": "t5",
}


# With LoRA the frozen base saves less: a frozen linear layer keeps no input for its weight's gradient.
LORA_ACTIVATION_FACTORS = {
    "llama": ActivationFactor(h=5, kv=2, i=3, scores=1, head_h=0, head_v=1),
    "gpt2": ActivationFactor(h=4, kv=4, i=4, scores=3, head_h=0, head_v=1),
    "bert": ActivationFactor(h=4, kv=4, i=1, scores=3, head_h=0.5, head_v=1),
}

# Half regimes, counted the same way under bf16 autocast (as Trainer runs them), with each family's default dropout.
# Half weights: norms upcast to fp32, softmax and the loss run in fp32. fp32 weights under autocast ("amp"): the
# residual stream and norms stay fp32 and every linear layer saves its own half copy of its input. Llama's eager
# attention was counted in fp32 only.
HALF = "half"
AMP = "amp"
HALF_ACTIVATION_FACTORS = {
    (HALF, "llama"): ActivationFactor(h=10, kv=2, i=4, scores=1, head_h=4.5, head_v=2),
    (AMP, "llama"): ActivationFactor(h=15, kv=2, i=4, scores=1, head_h=5.5, head_v=2, checkpoint_h=2),
    (HALF, "gpt2"): ActivationFactor(h=8, kv=5, i=5, scores=6, head_h=3, head_v=2),
    # GPT-2 under autocast: set by the H200 run (its attention dropout kernel keeps more than the CPU counts: 7 %)
    (AMP, "gpt2"): ActivationFactor(h=12.5, kv=5, i=5, scores=6, head_h=5, head_v=3, checkpoint_h=2),
    (HALF, "bert"): ActivationFactor(h=8, kv=5, i=2, scores=6, head_h=7, head_v=2),
    (AMP, "bert"): ActivationFactor(h=11.5, kv=5, i=2, scores=6, head_h=9, head_v=2, checkpoint_h=2),
    (HALF, "t5"): ActivationFactor(h=17, kv=8, i=3, scores=9, head_h=17.5, head_v=2, always_scores=True),
    (AMP, "t5"): ActivationFactor(
        h=42, kv=8, i=3.5, scores=6.5, head_h=9, head_v=1, checkpoint_h=2, always_scores=True
    ),
    (HALF, "whisper"): ActivationFactor(
        h=9.1, kv=0, i=2, scores=1, head_h=2.2, head_v=2, decoder_h=14.1, cross_h=2, source_h=7
    ),
    (AMP, "whisper"): ActivationFactor(
        h=13.1, kv=0, i=2, scores=1, head_h=3.3, head_v=2, checkpoint_h=2, decoder_h=19.1, cross_h=4, source_h=7
    ),
}
HALF_LORA_ACTIVATION_FACTORS = {
    "llama": ActivationFactor(h=8, kv=2.5, i=3, scores=1, head_h=0.5, head_v=2),
    "gpt2": ActivationFactor(h=6.5, kv=5, i=4, scores=6, head_h=0, head_v=2),
    "bert": ActivationFactor(h=7.5, kv=5, i=1, scores=6, head_h=0, head_v=2),
}

# Bytes per attention score (heads x sequence, per token and layer) GPT-2 kept on a GPU under SDPA, where the CPU
# counts above run the math kernel and keep the scores themselves: measured on an H200 with GPT-2's default
# attention dropout (benchmarks/memory_cuda.py: 1.26 in bf16; 0.43 beside fp16 AMP's per-token count). Not
# measured for the families that share GPT-2's factors (OPT, Phi, Falcon, Bloom: no attention dropout by
# default) nor under flash-attention.
GPU_SCORE_BYTES = {(HALF, "gpt2"): 1.26, (AMP, "gpt2"): 0.43}

# Bytes per token per vocabulary entry beyond what is saved, measured on an H200 (torch 2.11, transformers 5.17;
# Llama in bf16, bf16 autocast and LoRA, GPT-2 under fp16 autocast): the logits the forward returns and the loss's
# working copies, still held when the forward ends (3.6-3.9), and the loss's fp32 gradient at the start of
# backward (4.0). The fp32 regime was not measured on a GPU; its logits are no smaller.
LOGITS_KEPT_BYTES = 4
LOSS_GRADIENT_BYTES = 4


def regime(shape: TrainingShape) -> str:
    """fp32 | half (half weights, or a quantized base computing in half) | amp (fp32 weights, half autocast)."""
    if BYTES.get(shape.compute_dtype, 4) == 4:
        return dtypes.FLOAT32
    return AMP if shape.weight_dtype == dtypes.FLOAT32 and not shape.quantized else HALF


def activation_factor(model_type: str, lora: bool = False, precision: str = dtypes.FLOAT32) -> ActivationFactor:
    family = _FAMILY_OF.get(model_type, model_type)
    family = family if family in ACTIVATION_FACTORS else "llama"
    fp32 = LORA_ACTIVATION_FACTORS.get(family, ACTIVATION_FACTORS[family]) if lora else ACTIVATION_FACTORS[family]
    if precision == dtypes.FLOAT32:
        return fp32
    measured = HALF_LORA_ACTIVATION_FACTORS.get(family) if lora else HALF_ACTIVATION_FACTORS.get((precision, family))
    if measured is None:  # not counted in half precision (ViT, and T5 with LoRA): the fp32 counts, the loss in fp32
        return replace(fp32, head_v=2 * fp32.head_v)
    return replace(measured, checkpoint_h=2) if lora and precision == AMP else measured


# bytes of optimizer state per trainable parameter, for fp32 parameters
OPTIMIZER_STATE_BYTES = {
    "adamw": 8,
    "adam": 8,
    "adamw-8bit": 2,
    "paged-adamw-8bit": 2,
    "paged-adamw": 8,
    "adafactor": 0,
    "sgd-momentum": 4,
    "sgd": 0,
    "lion": 4,
}


@record
class Parallelism:
    gpus: int = 1  # processes (one GPU each), or the GPUs a device_map spreads over
    kind: str = "single"  # single | ddp | zero1 | zero2 | zero3 | fsdp-full | fsdp-grad-op | fsdp-hybrid | device-map
    offload_optimizer: bool = False
    offload_params: bool = False
    gpus_per_node: int = 0  # hybrid sharding: within a node (0: all of them)

    def describe(self) -> str:
        """'DDP over 8 GPUs (a full copy on each)', 'ZeRO-3 over 4 GPUs, parameters offloaded to the CPU'."""
        if self.kind == "single":
            return "one process on one GPU"
        what = {
            "ddp": "DDP",
            "device-map": "device_map",
            "fsdp-full": "FSDP full sharding",
            "fsdp-grad-op": "FSDP grad-op sharding",
            "fsdp-hybrid": "FSDP hybrid sharding",
        }.get(self.kind, self.kind.replace("zero", "ZeRO-"))
        text = f"{what} over {self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        if self.kind == "ddp":
            text += " (a full copy on each)"
        offloaded = [n for n, on in (("optimizer", self.offload_optimizer), ("parameters", self.offload_params)) if on]
        return text + (f", {' and '.join(offloaded)} offloaded to the CPU" if offloaded else "")


@record
class TrainingShape:
    """What the memory depends on besides the checkpoint."""

    weight_dtype: str = dtypes.FLOAT32
    compute_dtype: str = dtypes.FLOAT32  # activations: the autocast dtype under AMP
    quantized: str = ""  # "" | 4bit | 8bit (bitsandbytes)
    lora_rank: int = 0  # 0: full fine-tune
    lora_modules: str = "default"  # peft's default targets for the architecture (q and v), or "all-linear"
    adapter_dtype: str = dtypes.FLOAT32
    optimizer: str = "adamw"
    batch: int = 8
    sequence: int = 1024
    checkpointing: bool = False
    scores_materialised: bool = False  # eager attention (sdpa/flash keep O(sequence) memory)
    flash_attention: bool = False  # attn_implementation="flash_attention_2"/"_3"
    parallelism: Parallelism = Parallelism()
    master_weights: bool = False  # DeepSpeed/apex mixed precision: an fp32 copy beside half weights
    vocabulary_head: bool = True  # logits over the vocabulary (a language model); False: a task head (num_labels)
    kbit_upcast: bool = False  # peft's prepare_model_for_kbit_training: what is not quantized is cast to fp32
    chunked_loss: bool = False  # the output layer and the loss fused in chunks (Liger, Cut Cross-Entropy): no logits
    saved_modules: int = 0  # parameters of peft's modules_to_save: trainable copies beside the frozen originals
    # a full fine-tune of half weights whose embeddings, output layer and norms are kept in fp32 (Axolotl's loader):
    # their weights, gradients and state in fp32, the residual stream in fp32, a half copy of the output layer
    fp32_embeddings: bool = False
    assumed: tuple[str, ...] = ()  # what was not known and is assumed: "sequence length 1024 (...)"


@record
class Breakdown:
    """Bytes per GPU."""

    weights: int
    gradients: int
    optimizer: int
    master: int
    activations: int  # held when the forward ends: saved for backward, autocast's weight copies, the logits
    backward: int  # added at the start of backward: the loss's gradient, or a checkpointed layer recomputed
    context: int
    reserve: int
    per_sample: int  # activations and backward's addition for one sample: what each step of batch size adds
    offloaded_layers: int = 0  # device_map spread: layers that do not fit on the GPUs go to the CPU
    weights_total: int = 0  # the whole model's weights, before sharding
    # tied embeddings: backward ends by adding the input embedding's gradient to the output layer's, both held with
    # their sum for a moment beside every other gradient (traced: 2 x the matrix in its dtype, half or fp32)
    gradient_sum: int = 0

    # What the tensors and the context need at each phase, the allocator's reserve left out: past the GPU's memory
    # the job runs out whatever the allocator does (it flushes its cache and retries before it fails).

    @property
    def at_load(self) -> int:
        return self.weights + self.context

    @property
    def at_forward(self) -> int:
        return self.weights + self.activations + self.context

    @property
    def at_backward(self) -> int:
        """The first backward's start: no gradients or optimizer state yet."""
        return self.weights + self.activations + self.backward + self.context

    @property
    def at_step(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.master + self.context

    @property
    def peak(self) -> int:
        return sum(size for _, size in self.peak_parts())

    @property
    def tensors_peak(self) -> int:
        """The peak without the allocator's reserve: past the GPU's memory the job runs out whatever the allocator
        does (on the H200 every run whose tensors fit trained or ran out; every run whose tensors did not fit ran
        out)."""
        return self.peak - self.reserve

    def peak_parts(self) -> list[tuple[str, int]]:
        """What the peak is made of, bottom to top. Steady state: the next step runs with the optimizer state
        allocated; its backward starts with every activation held and the loss's gradient added ("activations"),
        and gradients grow as activations are freed ("gradients" where they are the larger)."""
        held = self.activations + self.backward
        summed = self.gradients + self.gradient_sum
        middle = ("activations", held) if held >= summed else ("gradients", summed)
        return [
            ("weights", self.weights),
            ("optimizer state", self.optimizer),
            ("fp32 master weights and gradients", self.master),
            middle,
            ("CUDA context", self.context),
            ("allocator reserve", self.reserve),
        ]

    def rows(self) -> list[tuple[str, int]]:
        return [
            ("weights", self.weights),
            ("gradients", self.gradients),
            ("optimizer state", self.optimizer),
            ("fp32 master weights and gradients", self.master),
            ("activations", self.activations),
            ("loss gradient / recomputed layer", self.backward),
            *((("tied embedding's gradient sum", self.gradient_sum),) if self.gradient_sum else ()),
            ("CUDA context", self.context),
            ("allocator reserve", self.reserve),
        ]


def linear_parameters(c: CheckpointFacts) -> int:
    """Parameters in the blocks' linear layers (what bitsandbytes quantizes and LoRA wraps); embeddings, norms
    and the output head stay as they are."""
    embed = (c.vocab_size or 0) * (c.hidden_size or 0) * (1 if c.tied_embeddings is not False else 2)
    return max(0, (c.parameters or 0) - embed)


def weights_bytes(c: CheckpointFacts, dtype: str, quantized: str = "", rest_dtype: str = "") -> int:
    """The weights as stored on the GPU. bitsandbytes 4-bit: half a byte per parameter plus a float32 absmax per
    64-parameter block; 8-bit: a byte plus a float32 scale per output row (~1/hidden); the rest in `rest_dtype`,
    else `dtype`."""
    params = c.parameters or 0
    if not quantized:
        return params * BYTES.get(dtype, 4)
    linear = linear_parameters(c)
    rest = (params - linear) * BYTES.get(rest_dtype or dtype, 2)
    if quantized == "4bit":
        return int(linear * (0.5 + 4 / 64)) + rest
    return int(linear * (1 + 4 / max(c.hidden_size or 1, 1))) + rest


def _lora_shapes(c: CheckpointFacts, modules: str) -> list[tuple[int, int]]:
    """(in, out) of the linear layers LoRA wraps in one block: peft's defaults, or every linear layer."""
    h, inter = c.hidden_size or 0, c.intermediate_size or 0
    heads = c.heads or 1
    head_dim = c.head_dim or (h // heads if heads else 0)
    q, kv = heads * head_dim, (c.kv_heads or heads) * head_dim
    family = _FAMILY_OF.get(c.model_type, c.model_type)
    if modules == "all-linear":
        mlp = [(h, inter), (h, inter), (inter, h)] if family == "llama" else [(h, inter), (inter, h)]
        return [(h, q), (h, kv), (h, kv), (q, h)] + mlp
    if family == "gpt2" and c.model_type in ("gpt2", "bloom", "falcon"):
        return [(h, q + 2 * kv)]  # one fused query-key-value projection
    return [(h, q), (h, kv)]


def lora_parameters(c: CheckpointFacts, rank: int, modules: str = "default") -> int:
    """A (in x r) and B (r x out) for each wrapped layer of each block."""
    stacks = 2 if c.encoder_decoder else 1
    return (c.layers or 0) * stacks * rank * sum(i + o for i, o in _lora_shapes(c, modules))


def sequence_tokens(c: CheckpointFacts, sequence: int) -> int:
    if c.image_size and c.patch_size:
        return (c.image_size // c.patch_size) ** 2 + 1
    return sequence


# Whisper's encoder reads 30 s of audio, always: the model refuses mel features of any other length than twice
# max_source_positions (transformers 5.24 models/whisper/modeling_whisper.py:611-614), 1500 frames by default
# (configuration_whisper.py:146), and its labels are at most max_target_positions (448) tokens.
WHISPER_SOURCE_FRAMES = 1500
WHISPER_MAX_LABELS = 448
WHISPER_MEL_BINS = 80


def source_frames(c: CheckpointFacts) -> int:
    """The frames a speech encoder reads per sample (0 for a model without one)."""
    if _FAMILY_OF.get(c.model_type, c.model_type) != "whisper":
        return 0
    return c.source_positions or WHISPER_SOURCE_FRAMES


def activation_bytes(c: CheckpointFacts, shape: TrainingShape, batch: int | None = None) -> int:
    """Bytes saved for backward at the end of the forward, for `batch` samples."""
    f = activation_factor(c.model_type, lora=bool(shape.lora_rank), precision=regime(shape))
    h, layers = c.hidden_size or 0, c.layers or 0
    s = sequence_tokens(c, shape.sequence)
    samples = shape.batch if batch is None else batch
    tokens = samples * s
    per_layer = _per_layer(c, shape, f, s)
    outside = f.head_h * h + f.head_v * _logits_width(c, shape)
    if c.image_size and c.patch_size:
        outside += 3 * c.patch_size**2  # the pixels the patch embedding saves, per patch
    stacks = 2 if c.encoder_decoder else 1
    element = BYTES.get(shape.compute_dtype, 4)
    if frames := source_frames(c):  # each stack at its own length: the audio frames, the text tokens
        source = samples * frames
        if shape.checkpointing:  # each layer's input, and the encoder's output every decoder layer reads
            kept = (layers * (source + tokens) + source) * f.checkpoint_h * h
        else:
            heads = c.heads or 1
            cross_scores = f.scores * heads * frames if shape.scores_materialised else 0
            kept = layers * (
                source * (_per_layer(c, shape, f, frames) + f.cross_h * h)
                + tokens * (per_layer + (f.decoder_h - f.h) * h + cross_scores)
            )
        return int((kept + source * f.source_h * h + tokens * outside) * element)
    if shape.checkpointing:
        kept = layers * stacks * f.checkpoint_h * h  # each layer's input; a layer is recomputed only in backward
    else:
        kept = layers * stacks * per_layer
    residual = 0
    if _fp32_residual(shape):
        extra = FP32_RESIDUAL_CHECKPOINTED_BYTES if shape.checkpointing else FP32_RESIDUAL_BYTES
        residual = tokens * layers * stacks * h * extra
    return int(tokens * (kept + outside) * element) + residual


def _per_layer(c: CheckpointFacts, shape: TrainingShape, f: ActivationFactor, s: int) -> float:
    """Elements one layer saves per token."""
    h, heads = c.hidden_size or 0, c.heads or 1
    head_dim = c.head_dim or (h // heads if heads else 0)
    kv = (c.kv_heads or heads) * head_dim
    inter = (c.intermediate_size or 0) * (c.experts_per_token if c.experts and c.experts_per_token else 1)
    if shape.scores_materialised or f.always_scores:
        scores = f.scores * heads * s
    elif shape.flash_attention:
        scores = 0.0
    else:
        scores = GPU_SCORE_BYTES.get((regime(shape), c.model_type), 0.0) / BYTES.get(shape.compute_dtype, 4) * heads * s
    lora = len(_lora_shapes(c, shape.lora_modules)) * shape.lora_rank if shape.lora_rank else 0  # adapters' A outputs
    return f.h * h + f.kv * kv + f.i * inter + scores + lora


def backward_bytes(c: CheckpointFacts, shape: TrainingShape, batch: int | None = None) -> int:
    """What backward adds at its start on top of the forward's activations: the loss's fp32 gradient, or under
    checkpointing the layer it recomputes, whichever is larger (the loss's tensors are freed before the first
    recompute)."""
    f = activation_factor(c.model_type, lora=bool(shape.lora_rank), precision=regime(shape))
    s = sequence_tokens(c, shape.sequence)
    tokens = (shape.batch if batch is None else batch) * s
    loss = tokens * LOSS_GRADIENT_BYTES * _logits_width(c, shape)
    if not shape.checkpointing:
        return int(loss)
    element = BYTES.get(shape.compute_dtype, 4)
    layer = tokens * _per_layer(c, shape, f, s) * element
    if frames := source_frames(c):  # the largest layer recomputed: an encoder layer over the audio frames
        samples = shape.batch if batch is None else batch
        layer = max(
            layer + tokens * (f.decoder_h - f.h) * (c.hidden_size or 0) * element,
            samples * frames * _per_layer(c, shape, f, frames) * element,
        )
    return int(max(loss, layer))


def logits_bytes(c: CheckpointFacts, shape: TrainingShape, batch: int | None = None) -> int:
    """The logits (and the loss's working copies) still held when the forward ends, beyond what is saved."""
    tokens = (shape.batch if batch is None else batch) * sequence_tokens(c, shape.sequence)
    return int(tokens * LOGITS_KEPT_BYTES * _logits_width(c, shape))


def autocast_copies(c: CheckpointFacts, shape: TrainingShape) -> int:
    """fp32 weights under half autocast: the half copy of every weight it casts for a matmul, kept until the forward
    ends. Checkpointed layers run their forward without grad and keep none; the output head outside them does."""
    h = c.hidden_size or 0
    if _fp32_residual(shape) and shape.compute_dtype != dtypes.FLOAT32:  # the fp32 output layer's half copy
        return 2 * _vocabulary(c, shape) * h
    if regime(shape) != AMP:
        return 0
    head = _vocabulary(c, shape) * h
    if source_frames(c):  # Whisper's two convolutions over the mel frames (kernel 3; 80 mel bins but large-v3's 128)
        head += 3 * h * (WHISPER_MEL_BINS + h)
    return 2 * (head + (linear_parameters(c) if not shape.checkpointing else 0))


def _vocabulary(c: CheckpointFacts, shape: TrainingShape) -> int:
    """The width of the output layer: the vocabulary for a language-model head, else none worth counting."""
    return (c.vocab_size or 0) if shape.vocabulary_head else 0


def _logits_width(c: CheckpointFacts, shape: TrainingShape) -> int:
    """The width of the logits held for the loss: none where the loss is fused with the output layer in chunks
    (Liger's fused linear cross-entropy, Cut Cross-Entropy hold one chunk at a time, a few MiB)."""
    return 0 if shape.chunked_loss else _vocabulary(c, shape)


def estimate(c: CheckpointFacts, shape: TrainingShape) -> Breakdown:
    p = shape.parallelism
    n = max(p.gpus, 1)
    params = c.parameters or 0
    full_weights = weights_bytes(c, shape.weight_dtype, shape.quantized, dtypes.FLOAT32 if shape.kbit_upcast else "")
    trainable = lora_parameters(c, shape.lora_rank, shape.lora_modules) if shape.lora_rank else params
    adapters = trainable * BYTES.get(shape.adapter_dtype, 4) if shape.lora_rank else 0
    grad_bytes = BYTES.get(shape.adapter_dtype if shape.lora_rank else shape.weight_dtype, 4)
    gradients = trainable * grad_bytes
    optimizer = trainable * _state_bytes(shape, shape.adapter_dtype if shape.lora_rank else shape.weight_dtype)
    # DeepSpeed mixed precision: fp32 master weights and an fp32 gradient partition beside the half weights
    master = trainable * 8 if shape.master_weights else 0
    weights = full_weights + adapters
    if _fp32_embeddings(shape):
        embedding = embedding_parameters(c)
        half = BYTES.get(shape.weight_dtype, 2)
        weights += embedding * (4 - half)
        gradients += embedding * (4 - half)
        optimizer += embedding * (_state_bytes(shape, dtypes.FLOAT32) - _state_bytes(shape, shape.weight_dtype))
    copies = shape.saved_modules if shape.lora_rank else 0  # modules_to_save: trained as a full layer, base dtype
    if copies:
        weights += copies * BYTES.get(shape.weight_dtype, 2)
        gradients += copies * BYTES.get(shape.weight_dtype, 2)
        optimizer += copies * _state_bytes(shape, shape.weight_dtype)
        master += copies * 8 if shape.master_weights else 0
    weights_total = weights  # before sharding
    largest = _largest_layer(c) * BYTES.get(shape.weight_dtype, 2)
    offloaded = 0
    if p.kind in ("zero1", "zero2", "zero3"):
        optimizer, master = _shard(optimizer, n), _shard(master, n)
        if p.kind == "zero3":  # half gradients are reduce-scattered straight into the fp32 partition
            gradients = 0 if shape.master_weights else _shard(gradients, n)
        if p.kind == "zero3":
            weights = _shard(weights, n) + 2 * largest  # a gathered layer, and the next one prefetched
        if p.offload_optimizer:  # the optimizer step runs on the CPU: gradients are streamed there
            optimizer = master = 0
            gradients = 0
        if p.offload_params and p.kind == "zero3":
            weights = 2 * largest
    elif p.kind.startswith("fsdp"):
        shard_over = p.gpus_per_node if p.kind == "fsdp-hybrid" and p.gpus_per_node else n
        optimizer, gradients = _shard(optimizer, shard_over), _shard(gradients, shard_over)
        if p.kind != "fsdp-grad-op":
            weights = _shard(weights, shard_over) + 2 * largest
        if p.offload_params:
            weights, optimizer, gradients = 2 * largest, 0, 0
    elif p.kind == "device-map":
        weights = math.ceil(weights / n)  # the layers are spread; activations pass through one GPU at a time
    saved = activation_bytes(c, shape, batch=1) + logits_bytes(c, shape, batch=1)
    activations = saved * shape.batch
    backward = backward_bytes(c, shape)
    per_sample = saved + backward_bytes(c, shape, batch=1)
    activations += _shard(autocast_copies(c, shape), n if p.kind in ("zero3", "fsdp-full") else 1)
    context = CUDA_CONTEXT_BYTES
    transient = RESERVE_OF_TRANSIENT_CHECKPOINTED if shape.checkpointing else RESERVE_OF_TRANSIENT
    trained = gradients + optimizer + master + (0 if shape.lora_rank or shape.quantized else weights)
    logits_block = sequence_tokens(c, shape.sequence) * _logits_width(c, shape) * 4  # one sample's, in fp32
    reserve = int(
        transient * (activations + backward)
        + RESERVE_OF_TRAINED_STATES * trained
        + RESERVE_OF_LOGITS_BLOCK * logits_block
    )
    return Breakdown(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        master=master,
        activations=activations,
        backward=backward,
        context=context,
        reserve=reserve,
        per_sample=per_sample,
        offloaded_layers=offloaded,
        weights_total=weights_total,
        gradient_sum=_tied_gradient_sum(c, shape),
    )


def _tied_gradient_sum(c: CheckpointFacts, shape: TrainingShape) -> int:
    """The moment backward adds the tied input embedding's gradient to the output layer's: in a full fine-tune on
    one GPU or under DDP (sharded gradients are not traced), two vocabulary x hidden matrices in the embedding's
    dtype (benchmarks/memory_trace.py, Llama-3.2-1B 2x512: bf16 and fp32 embeddings)."""
    if shape.lora_rank or not c.tied_embeddings or not _vocabulary(c, shape):
        return 0
    if shape.master_weights or shape.parallelism.kind not in ("single", "ddp"):
        return 0
    dtype = dtypes.FLOAT32 if _fp32_embeddings(shape) else shape.weight_dtype
    return 2 * _vocabulary(c, shape) * (c.hidden_size or 0) * BYTES.get(dtype, 4)


def _fp32_embeddings(shape: TrainingShape) -> bool:
    return shape.fp32_embeddings and not shape.lora_rank and shape.weight_dtype in (dtypes.FLOAT16, dtypes.BFLOAT16)


def _fp32_residual(shape: TrainingShape) -> bool:
    """The residual stream runs in fp32 under half compute: the embedding it starts from is fp32 (Axolotl's loader;
    peft's prepare_model_for_kbit_training on a quantized base, whose norms and output layer are fp32 too). Measured
    on an H200 for QLoRA with checkpointing: 2.1-2.3 bytes per token, layer and hidden unit beyond a bf16 stream,
    and a half copy of the output layer (benchmarks/memory_cuda.py)."""
    kbit = shape.kbit_upcast and bool(shape.quantized) and BYTES.get(shape.compute_dtype, 4) == 2
    return _fp32_embeddings(shape) or kbit


def embedding_parameters(c: CheckpointFacts) -> int:
    """The input embedding and the output layer (one matrix when tied)."""
    return (c.vocab_size or 0) * (c.hidden_size or 0) * (1 if c.tied_embeddings else 2)


# Measured by benchmarks/memory_trace.py (Llama-3.2-1B, Qwen2.5-0.5B, bf16 weights with fp32 embeddings and norms
# under bf16 autocast): what an fp32 residual stream adds per token, layer and hidden unit, saved for backward
FP32_RESIDUAL_BYTES = 10  # 10.1 measured on both
FP32_RESIDUAL_CHECKPOINTED_BYTES = 2  # each checkpointed layer's input in fp32 rather than half


def _state_bytes(shape: TrainingShape, dtype: str) -> int:
    """Optimizer state per trainable parameter of `dtype`: torch's Adam (and SGD's momentum) keeps its state in the
    parameter's dtype, so half parameters hold half of it, unless DeepSpeed's fp32 master copy is what steps."""
    state = OPTIMIZER_STATE_BYTES.get(shape.optimizer, 8)
    if not shape.master_weights and dtype in (dtypes.FLOAT16, dtypes.BFLOAT16) and state in (8, 4):
        return state // 2
    return state


def _shard(total: int, n: int) -> int:
    return math.ceil(total / max(n, 1))


def _largest_layer(c: CheckpointFacts) -> int:
    """Parameters of the largest single module: the embedding, or one MLP matrix."""
    h = c.hidden_size or 0
    return max((c.vocab_size or 0) * h, (c.intermediate_size or 0) * h)


def largest_batch(c: CheckpointFacts, shape: TrainingShape, budget: int, tensors_only: bool = False) -> int:
    """The largest per-device batch whose steady-state peak (with the allocator's reserve, or `tensors_only`)
    fits in `budget` bytes (0: not even one)."""

    def fits(batch: int) -> bool:
        b = estimate(c, replace(shape, batch=batch))
        return (b.tensors_peak if tensors_only else b.peak) <= budget

    low, high = 0, max(shape.batch, 1)
    while fits(high) and high < 1 << 16:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def batch_ranges(c: CheckpointFacts, shape: TrainingShape, budget: int) -> tuple[int, int]:
    """(the largest batch that fits even with the estimate as far below real use as measured, the largest whose
    tensors fit): the batches between the two are uncertain, past the second the job runs out of memory."""
    safe = largest_batch(c, shape, int(budget / (1 + MEASURED_UNDERESTIMATE)))
    return safe, largest_batch(c, shape, budget, tensors_only=True)


@record
class Change:
    """A change that makes the job fit, and what it costs the user."""

    description: str
    shape: TrainingShape
    breakdown: Breakdown = field(compare=False, default=None)


def cheapest_fit(c: CheckpointFacts, shape: TrainingShape, budget: int) -> Change | None:
    """The least intrusive single change (in this order) after which the steady-state peak fits with the
    estimate's measured error to spare; failing that, one that fits the estimate alone, said to be uncertain."""
    safe_budget = int(budget / (1 + MEASURED_UNDERESTIMATE))
    for limit, tensors_only, hedge in (
        (safe_budget, False, ""),
        (budget, True, " (fits only within the estimate's measured error)"),
    ):
        for description, changed in _changes(c, shape, limit, tensors_only):
            b = estimate(c, changed)
            if (b.tensors_peak if tensors_only else b.peak) <= limit:
                return Change(description + hedge, changed, b)
    return None


def _changes(
    c: CheckpointFacts, shape: TrainingShape, limit: int, tensors_only: bool = False
) -> list[tuple[str, TrainingShape]]:
    """The single changes to try, least intrusive first; the batch size is the largest under `limit`."""
    candidates: list[tuple[str, TrainingShape]] = []
    if not shape.checkpointing:
        candidates.append(
            ("turn on gradient checkpointing (gradient_checkpointing=True)", replace(shape, checkpointing=True))
        )
    fitting = largest_batch(c, replace(shape, batch=1), limit, tensors_only) if shape.batch > 1 else 0
    if 1 <= fitting < shape.batch:
        candidates.append(
            (
                f"per_device_train_batch_size={fitting} with gradient_accumulation_steps="
                f"{math.ceil(shape.batch / fitting)} (an effective batch of at least {shape.batch})",
                replace(shape, batch=fitting),
            )
        )
    if shape.optimizer in ("adamw", "adam") and not shape.lora_rank:
        candidates.append(('an 8-bit optimizer (optim="adamw_bnb_8bit")', replace(shape, optimizer="adamw-8bit")))
    p = shape.parallelism
    if p.gpus > 1 and p.kind in ("single", "ddp", "zero1", "zero2"):
        candidates.append(
            (
                f"DeepSpeed ZeRO-3 over the {p.gpus} GPUs",
                replace(shape, parallelism=replace(p, kind="zero3"), master_weights=shape.master_weights),
            )
        )
    if not shape.lora_rank:
        candidates.append(("train LoRA adapters (peft) instead of every weight", replace(shape, lora_rank=16)))
    if shape.quantized != "4bit":
        candidates.append(
            (
                "QLoRA: load in 4-bit (BitsAndBytesConfig(load_in_4bit=True)) and train LoRA adapters",
                replace(shape, quantized="4bit", lora_rank=shape.lora_rank or 16, weight_dtype=dtypes.BFLOAT16),
            )
        )
    if shape.sequence > 256 and not c.image_size:
        candidates.append(
            (f"shorter sequences (max_length={shape.sequence // 2})", replace(shape, sequence=shape.sequence // 2))
        )
    return candidates


def offloaded_layers(c: CheckpointFacts, shape: TrainingShape, budgets: list[int]) -> int:
    """device_map="auto": how many blocks accelerate places on the CPU because the GPUs' budgets (max_memory,
    else what is free) do not hold the weights."""
    total = weights_bytes(c, shape.weight_dtype, shape.quantized)  # placed at load, before peft upcasts
    room = sum(max(b - CUDA_CONTEXT_BYTES, 0) for b in budgets)
    if total <= room or not c.layers:
        return 0
    per_layer = max(total // (c.layers * (2 if c.encoder_decoder else 1)), 1)
    return min(math.ceil((total - room) / per_layer), c.layers)
