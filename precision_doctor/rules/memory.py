"""Memory preflight: will the job fit on its GPUs, and where does it run out (PD601-PD605)."""

from __future__ import annotations

from ..derive import LaunchPlan, Setup, call_evidence, decide, device_map_kind
from ..derive.checkpoint import describe_source
from ..derive.memory import GIB, HEADROOM_WARNING, cheapest_fit, largest_batch, offloaded_layers
from ..derive.memory_plan import MemoryPlan, first_failure, plan_memory
from ..model.facts import KNOWN, LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ..model.findings import Applicability, Draft, Evidence, Fix
from .registry import Example, LogSignature, rule

_HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
_LOG = LogSignature(from_logs=False, error_is_signature=False)


def _trainer(model: str, args: str = "", load: str = "dtype=torch.bfloat16") -> str:
    return (_HEAD + f"model = AutoModelForCausalLM.from_pretrained('{model}', {load})\n"
            f"args = TrainingArguments('out', bf16=True{', ' + args if args else ''})\n"
            "Trainer(model=model, args=args, train_dataset=ds).train()\n")


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def breakdown_text(m: MemoryPlan) -> str:
    b = m.breakdown
    parts = ", ".join(f"{name} {gib(v)}" for name, v in b.rows() if v)
    return f"{parts} (per GPU, of {gib(m.budget)} on {m.gpu.name})"


def _evidence(m: MemoryPlan, setup: Setup) -> tuple[Evidence, ...]:
    c = m.checkpoint
    ev = [call_evidence(setup.model_load, f"{c.parameters / 1e9:.2f}B parameters: {describe_source(c)}")]
    ev.extend(Evidence(None, a, "assumed", "assumed") for a in m.shape.assumed)
    return tuple(ev)


def _plan(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts, launch: LaunchFacts,
          plan: LaunchPlan) -> MemoryPlan | None:
    if not setup.trains:
        return None
    m = plan_memory(setup, script, machine, stack, launch, plan)
    return m if isinstance(m, MemoryPlan) else None


def _advice(m: MemoryPlan) -> Fix:
    fits = largest_batch(m.checkpoint, m.shape, m.budget)
    change = cheapest_fit(m.checkpoint, m.shape, m.budget)
    notes = []
    if fits:
        notes.append(f"the largest per_device_train_batch_size that fits is {fits}")
    text = change.description if change else "a larger GPU, or more GPUs with ZeRO-3 / FSDP"
    if change:
        notes.append(f"with it the peak is {gib(change.breakdown.peak)} of {gib(m.budget)}")
    return Fix(text, applicability=Applicability.DISPLAY, notes=tuple(notes))


def _hedged(m: MemoryPlan, with_activations: bool) -> dict:
    """An assumed batch or sequence length decides a verdict that counts activations: a warning, likely."""
    if with_activations and m.shape.assumed:
        return {"severity": "warning", "confidence": "likely"}
    return {}


_FIRES_7B_T4 = _trainer("meta-llama/Llama-2-7b-hf")
_SILENT_7B_H100_LORA = ("import torch\nfrom peft import LoraConfig, get_peft_model\n" + _HEAD.split("\n", 1)[1]
                        + "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf', "
                          "dtype=torch.bfloat16)\nmodel = get_peft_model(model, LoraConfig(r=16))\n"
                          "args = TrainingArguments('out', bf16=True, per_device_train_batch_size=2, "
                          "gradient_checkpointing=True)\nTrainer(model=model, args=args, train_dataset=ds).train()\n")


@rule(
    "PD601", "oom-at-load", severity="error", phase="load",
    summary="The weights alone do not fit in the GPU's memory: out of memory while loading.",
    what="The checkpoint's weights, in the dtype they are loaded in (4/8-bit where quantized), sharded as the launch "
         "implies, exceed what the GPU has free.",
    why="Every process puts its copy (or shard) of the weights on its GPU before anything else runs.",
    error=_OOM,
    fix="Load in bf16/fp16 rather than fp32, quantize (QLoRA), shard with ZeRO-3 / FSDP, or use a larger GPU.",
    log=_LOG,
    fires=[Example(_trainer("meta-llama/Meta-Llama-3-70B", load="dtype=torch.bfloat16"), target="a100-80gb")],
    silent=[Example(_trainer("meta-llama/Meta-Llama-3-8B", "per_device_train_batch_size=1, "
                             "gradient_checkpointing=True, optim='adamw_bnb_8bit'"), target="h100")],
)
def oom_at_load(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts, launch: LaunchFacts,
                plan: LaunchPlan):
    m = _plan(setup, script, machine, stack, launch, plan)
    if m is None or first_failure(m) != "load":
        return
    yield Draft(f"will not fit: out of memory at load. The weights of {m.checkpoint.model_id} take "
                f"{gib(m.breakdown.weights)} per GPU, {m.gpu.name} has {gib(m.budget)}: {breakdown_text(m)}",
                evidence=_evidence(m, setup), fix=_advice(m))


@rule(
    "PD602", "oom-at-first-forward", severity="error", phase="first-step",
    summary="Weights and the first batch's activations do not fit: out of memory in the first forward or backward.",
    what="The weights fit, but the activations saved for backward (batch x sequence x hidden x layers, times a "
         "per-architecture factor; gradient checkpointing keeps only each layer's input) do not, or do not with "
         "what backward adds as it starts (the loss's fp32 gradient, or a checkpointed layer recomputed).",
    why="The forward keeps every layer's intermediate tensors until backward frees them.",
    error=_OOM,
    fix="Gradient checkpointing, a smaller per_device_train_batch_size with gradient accumulation, or shorter "
        "sequences.",
    log=_LOG,
    fires=[Example(_trainer("meta-llama/Meta-Llama-3-8B", "per_device_train_batch_size=32, optim='adamw_bnb_8bit'",
                            load="dtype=torch.bfloat16"), target="h100",
                   note="bf16 weights fit; 32 x 1024 tokens of activations do not")],
    silent=[Example(_trainer("meta-llama/Meta-Llama-3-8B", "per_device_train_batch_size=1, optim='adamw_bnb_8bit', "
                             "gradient_checkpointing=True"), target="h100")],
)
def oom_at_first_forward(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts,
                         launch: LaunchFacts, plan: LaunchPlan):
    m = _plan(setup, script, machine, stack, launch, plan)
    where = first_failure(m) if m is not None else ""
    if where not in ("forward", "backward"):
        return
    s = m.shape
    when = "at the first forward" if where == "forward" else \
        f"as the first backward starts (it adds {gib(m.breakdown.backward)})"
    yield Draft(f"will not fit: out of memory {when}. {s.batch} x {s.sequence} tokens of activations "
                f"take {gib(m.breakdown.activations)}: {breakdown_text(m)}", evidence=_evidence(m, setup),
                fix=_advice(m), **_hedged(m, True))


@rule(
    "PD603", "oom-at-optimizer-step", severity="error", phase="first-step",
    summary="Gradients and optimizer state do not fit: out of memory at the first optimizer step.",
    what="Weights and activations fit, but the trainable parameters' gradients and the optimizer's state (AdamW: two "
         "fp32 moments, 8 bytes per parameter; fp32 master weights under DeepSpeed mixed precision) do not.",
    why="AdamW allocates its state at the first step, while the gradients are still held.",
    error=_OOM,
    fix="Train LoRA adapters, use an 8-bit optimizer, or shard the optimizer state with ZeRO / FSDP.",
    log=_LOG,
    fires=[Example(_trainer("meta-llama/Llama-2-7b-hf", "per_device_train_batch_size=1, gradient_checkpointing=True",
                            load="dtype=torch.float32"),
                   target="a100-80gb", note="7B full fine-tune in fp32 weights with AdamW: 16 bytes per parameter")],
    silent=[Example(_SILENT_7B_H100_LORA, target="a100-80gb")],
)
def oom_at_optimizer_step(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts,
                          launch: LaunchFacts, plan: LaunchPlan):
    m = _plan(setup, script, machine, stack, launch, plan)
    if m is None or first_failure(m) not in ("step", "second step"):
        return
    b = m.breakdown
    if b.at_step > m.budget:
        when = (f"at the first optimizer step. Gradients {gib(b.gradients)} and optimizer state "
                f"{gib(b.optimizer + b.master)} ({m.shape.optimizer}) on top of the weights")
    else:  # the step fits; the next forward and backward run with the state it created
        when = (f"in the second step: the optimizer state the first step creates ({gib(b.optimizer + b.master)}, "
                f"{m.shape.optimizer}) stays while the next batch's activations and backward are added")
    yield Draft(f"will not fit: out of memory {when}: {breakdown_text(m)}", evidence=_evidence(m, setup),
                fix=_advice(m), **_hedged(m, b.at_step <= m.budget))


@rule(
    "PD604", "device-map-auto-offloads", severity="error", phase="load",
    summary="device_map=\"auto\" will put layers on the CPU: the GPUs cannot hold the weights.",
    what="A spreading device_map (\"auto\", \"balanced\", ...) on GPUs whose memory (or max_memory) is smaller than "
         "the weights: accelerate offloads the remaining layers to the CPU. A warning (slow); an error when the "
         "script then moves the model, which fails on the offloaded meta tensors (PD304).",
    why="Offloaded layers are streamed to the GPU in every forward (very slow); their parameters are meta tensors "
        "on the model, which `.to()` / `.cuda()` cannot copy.",
    error="NotImplementedError: Cannot copy out of meta tensor; no data!",
    fix="Load in 4-bit/8-bit or bf16, raise max_memory, or use more / larger GPUs; never move a dispatched model.",
    log=_LOG,
    fires=[Example(_HEAD + "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-32B', dtype=torch.bfloat16, "
                   "device_map='auto')\nmodel.to('cuda')\n", target="a6000",
                   note="32B in bf16 is 61 GiB; an RTX A6000 has 48 GiB")],
    silent=[Example(_HEAD + "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-32B', dtype=torch.bfloat16, "
                    "device_map='auto')\n", target="a100-80gb")],
)
def device_map_auto_offloads(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts,
                             launch: LaunchFacts, plan: LaunchPlan):
    load = setup.model_load
    if load is None or device_map_kind(decide(load.kwarg("device_map"), machine, stack)) != "spread":
        return
    m = plan_memory(setup, script, machine, stack, launch, plan)
    if not isinstance(m, MemoryPlan) or m.shape.parallelism.kind != "device-map":
        return
    n = offloaded_layers(m.checkpoint, m.shape, list(m.spread_budgets))
    if not n:
        return
    moves = [c for c in setup.casts + tuple(x for x in script.of("cast") if x.receiver in setup.model_names)
             if c.callee.rsplit(".", 1)[-1] in ("cuda", "to") and (c.callee.endswith(".cuda") or any(
                 v.state == KNOWN and isinstance(v.value, str) and v.value.startswith("cuda") for v in c.args))]
    weights = m.breakdown.weights_total
    message = (f"device_map='auto' will offload {n} of {m.checkpoint.layers} layers to the CPU: the weights take "
               f"{gib(weights)}, {m.gpus} GPU{'s hold' if m.gpus > 1 else ' holds'} {gib(sum(m.spread_budgets))}")
    evidence = _evidence(m, setup)[:1]  # weights only: the batch and sequence play no part
    if moves:
        message += "; the model is then moved, which fails on the offloaded meta tensors"
        evidence += (call_evidence(moves[0], "moved after dispatch"),)
    yield Draft(message, evidence=evidence, severity=None if moves else "warning",
                error="" if moves else "Some parameters are on the meta device because they were offloaded to the "
                                       "cpu.",
                fix=Fix("load in 4-bit (BitsAndBytesConfig(load_in_4bit=True)) or bf16, or run on GPUs with more "
                        "memory" + ("; and remove the move: the device_map already placed every module"
                                    if moves else ""),
                        applicability=Applicability.DISPLAY))


@rule(
    "PD605", "memory-headroom-low", severity="warning", phase="first-step",
    summary="The job fits with less than 10% of the GPU's memory to spare: a longer batch or fragmentation OOMs.",
    what="The estimated peak per GPU (weights, gradients, optimizer state, activations, CUDA context, allocator "
         "reserve) is within 10% of what the GPU has free.",
    why="Sequence lengths vary batch to batch and the caching allocator fragments; a plan with no margin dies at a "
        "random step.",
    error=_OOM,
    fix="Leave a margin: a smaller per-device batch with gradient accumulation, or gradient checkpointing.",
    log=_LOG,
    fires=[Example(_trainer("meta-llama/Llama-3.2-1B", "per_device_train_batch_size=4"), target="l4",
                   note="bf16 weights, gradients and AdamW: 9.2 GiB; 4 x 1024 tokens of activations, the logits of "
                        "a 128k vocabulary and the loss gradient: 12.6 GiB")],
    silent=[Example(_trainer("meta-llama/Llama-3.2-1B", "per_device_train_batch_size=1",
                             load="dtype=torch.float32"), target="a100-80gb")],
)
def memory_headroom_low(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts,
                        launch: LaunchFacts, plan: LaunchPlan):
    m = _plan(setup, script, machine, stack, launch, plan)
    if m is None or first_failure(m) or m.shape.parallelism.kind == "device-map" or \
            m.headroom >= HEADROOM_WARNING:
        return
    yield Draft(f"fits with {m.headroom:.0%} to spare: peak {gib(m.breakdown.peak)} of {gib(m.budget)}: "
                f"{breakdown_text(m)}", evidence=_evidence(m, setup), fix=_advice(m),
                confidence="likely" if m.shape.assumed else "certain")
