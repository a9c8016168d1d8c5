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


@rule(
    "PD604",
    "device-map-auto-offloads",
    severity="error",
    phase="load",
    summary='device_map="auto" will put layers on the CPU: the GPUs cannot hold the weights.',
    what='A spreading device_map ("auto", "balanced", ...) on GPUs whose memory (or max_memory) is smaller than '
    "the weights: accelerate offloads the remaining layers to the CPU. A warning (slow); an error when the "
    "script then moves the model, which fails on the offloaded meta tensors (PD304).",
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
        )
    ],
    silent=[
        Example(
            HEAD + "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-32B', dtype=torch.bfloat16, "
            "device_map='auto')\n",
            target="a100-80gb",
        )
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
            "load in 4-bit (BitsAndBytesConfig(load_in_4bit=True)) or bf16, or run on GPUs with more "
            "memory" + ("; and remove the move: the device_map already placed every module" if moves else ""),
            applicability=Applicability.DISPLAY,
        ),
    )
