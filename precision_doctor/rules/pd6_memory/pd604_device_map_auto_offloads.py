"""PD604 device-map-auto-offloads: device_map="auto" will put layers on the CPU: the GPUs cannot hold the weights."""

from __future__ import annotations

from collections.abc import Callable

from ...derive import Setup, call_evidence, decide, device_map_kind
from ...derive.memory import offloaded_layers
from ...derive.memory_plan import MemoryPlan
from ...model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._memory import HEAD, LOG, _evidence, gib

# transformers' bitsandbytes quantizers check the inferred device map (quantizer_bnb_4bit.py / _8bit.py
# `validate_environment`, called from integrations/accelerate.py `_get_device_map`): a map with CPU or disk
# modules (not all on the CPU) is refused unless llm_int8_enable_fp32_cpu_offload=True.
QUANTIZED = (
    HEAD + "from transformers import BitsAndBytesConfig\n"
    "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16{extra})\n"
    "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-72B', quantization_config=q, dtype=torch.bfloat16, "
    "device_map='auto')\n"
)
BNB_REFUSES_OFFLOAD = (
    "ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the "
    "quantized model. If you want to dispatch the model on the CPU or the disk while keeping these modules in "
    "32-bit, you need to set `llm_int8_enable_fp32_cpu_offload=True` and pass a custom `device_map` to "
    "`from_pretrained`."
)


def _fp32_cpu_offload_allowed(script: ScriptFacts, machine: MachineFacts, stack: StackFacts) -> bool:
    return any(
        decide(c.kwarg("llm_int8_enable_fp32_cpu_offload"), machine, stack).is_(True) for c in script.of("bnb_config")
    )


@rule(
    "PD604",
    "device-map-auto-offloads",
    severity="error",
    phase="load",
    summary='device_map="auto" will put layers on the CPU: the GPUs cannot hold the weights.',
    what='A spreading device_map ("auto", "balanced", ...) on GPUs whose memory (or max_memory) is smaller than '
    "the weights: accelerate offloads the remaining layers to the CPU. A warning (slow); an error when the "
    "script then moves the model, which fails on the offloaded meta tensors (PD304), or when the model is loaded "
    "in 4-/8-bit by bitsandbytes, which refuses CPU modules without `llm_int8_enable_fp32_cpu_offload=True`.",
    why="Offloaded layers are streamed to the GPU in every forward (very slow); their parameters are meta tensors "
    "on the model, which `.to()` / `.cuda()` cannot copy.",
    error="NotImplementedError: Cannot copy out of meta tensor; no data!",
    fix="Load in 4-bit/8-bit or bf16, raise max_memory, or use more / larger GPUs; never move a dispatched model.",
    log=LOG,
    fires=[
        Example(
            HEAD + "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-32B', dtype=torch.bfloat16, "
            "device_map='auto')\nmodel.to('cuda')\n",
            target="a6000",
            note="32B in bf16 is 61 GiB; an RTX A6000 has 48 GiB",
        ),
        Example(
            QUANTIZED.format(extra=""),
            target="l4",
            note="72B in 4-bit is ~40 GiB; an L4 has 22 GiB: refused at load, not slow",
        ),
        Example(
            QUANTIZED.format(extra=", llm_int8_enable_fp32_cpu_offload=True"),
            target="l4",
            note="CPU offload of a 4-bit model asked for: slow, a warning",
        ),
    ],
    silent=[
        Example(
            HEAD + "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-32B', dtype=torch.bfloat16, "
            "device_map='auto')\n",
            target="a100-80gb",
        ),
        Example(QUANTIZED.format(extra=""), target="a100-80gb", note="72B in 4-bit fits in 80 GB"),
    ],
)
def device_map_auto_offloads(
    setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts, memory: Callable[[], MemoryPlan | str]
):
    load = setup.model_load
    if load is None or device_map_kind(decide(load.kwarg("device_map"), machine, stack)) != "spread":
        return
    m = memory()
    if not isinstance(m, MemoryPlan) or m.shape.parallelism.kind != "device-map":
        return
    n = offloaded_layers(m.checkpoint, m.shape, list(m.spread_budgets))
    if not n:
        return
    moves = [
        c
        for c in setup.casts + tuple(x for x in script.of("cast") if x.receiver in setup.model_names)
        if c.callee.rsplit(".", 1)[-1] in ("cuda", "to")
        and (
            c.callee.endswith(".cuda")
            or any(v.state == KNOWN and isinstance(v.value, str) and v.value.startswith("cuda") for v in c.args)
        )
    ]
    weights = m.breakdown.weights_total
    if setup.quantized.value in ("4bit", "8bit") and not _fp32_cpu_offload_allowed(script, machine, stack):
        yield Draft(
            f"device_map='auto' would place {n} of {m.checkpoint.layers} layers of the {setup.quantized.value[0]}-bit "
            f"model on the CPU (the weights take {gib(weights)}, {m.gpus} GPU{'s hold' if m.gpus > 1 else ' holds'} "
            f"{gib(sum(m.spread_budgets))}): bitsandbytes loading refuses a device map with CPU modules",
            evidence=_evidence(m, setup)[:1] + setup.quantized.evidence,
            error=BNB_REFUSES_OFFLOAD,
            fix=Fix(
                "run on GPUs with more memory (or more GPUs), or a smaller model; to accept CPU offload, "
                "BitsAndBytesConfig(llm_int8_enable_fp32_cpu_offload=True): those modules stay float32 on the "
                "CPU, every forward streams them (very slow)",
                applicability=Applicability.DISPLAY,
            ),
        )
        return
    message = (
        f"device_map='auto' will offload {n} of {m.checkpoint.layers} layers to the CPU: the weights take "
        f"{gib(weights)}, {m.gpus} GPU{'s hold' if m.gpus > 1 else ' holds'} {gib(sum(m.spread_budgets))}"
    )
    evidence = _evidence(m, setup)[:1]  # weights only: the batch and sequence play no part
    if moves:
        message += "; the model is then moved, which fails on the offloaded meta tensors"
        evidence += (call_evidence(moves[0], "moved after dispatch"),)
    yield Draft(
        message,
        evidence=evidence,
        severity=None if moves else "warning",
        error="" if moves else "Some parameters are on the meta device because they were offloaded to the cpu.",
        fix=Fix(
            (
                "run on GPUs with more memory"
                if setup.quantized.value
                else "load in 4-bit (BitsAndBytesConfig(load_in_4bit=True)) or bf16, or run on GPUs with more memory"
            )
            + ("; and remove the move: the device_map already placed every module" if moves else ""),
            applicability=Applicability.DISPLAY,
        ),
    )
