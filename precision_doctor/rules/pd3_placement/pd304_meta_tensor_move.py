"""PD304 meta-tensor-move: Moving a model whose device_map offloads modules to the CPU or disk."""

from __future__ import annotations

from ...derive import Setup, call_evidence, decide, device_map_kind, evidence_of
from ...model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, LogSignature, rule


@rule(
    "PD304",
    "meta-tensor-move",
    severity="error",
    phase="load",
    summary="Moving a model whose device_map offloads modules to the CPU or disk.",
    what='`.to(device)` / `.cuda()` on a model loaded with a `device_map` that puts modules on `"cpu"`/`"disk"` '
    "(or with `offload_folder`): those weights are meta tensors behind accelerate hooks.",
    why="Offloaded weights live elsewhere and are streamed in by hooks; the module holds meta tensors with no data "
    "to copy.",
    error="RuntimeError: You can't move a model that has some modules offloaded to cpu or disk.",
    fix="Don't move dispatched models: let the device_map place them, pick one that fits on the GPU "
    '(`device_map={"": 0}`), or quantize.',
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    log=LogSignature(
        patterns=(r"Cannot copy out of meta tensor", r"You can't move a model that has some modules offloaded")
    ),
    fires=[
        Example(
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-70B', dtype=torch.bfloat16, "
            "device_map={'model': 0, 'lm_head': 'cpu'})\nmodel = model.to('cuda')\n"
        )
    ],
    silent=[
        Example(
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B', dtype=torch.bfloat16, "
            "device_map={'model': 0, 'lm_head': 'cpu'})\n"
        )
    ],
)
def meta_tensor_move(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    load = setup.model_load
    if load is None:
        return
    dm = decide(load.kwarg("device_map"), machine, stack)
    offload = device_map_kind(dm) == "offload" or load.kwarg("offload_folder").state == KNOWN
    if not offload:
        return
    for c in setup.casts + tuple(x for x in script.of("cast") if x.receiver in setup.model_names):
        method = c.callee.rsplit(".", 1)[-1]
        if method in ("cuda", "to") and (
            method == "cuda"
            or any(
                v.state == KNOWN and isinstance(v.value, str) and v.value.startswith(("cuda", "cpu")) for v in c.args
            )
        ):
            yield Draft(
                "the model's device_map offloads modules to the CPU or disk, and it is then moved as a whole",
                evidence=(
                    evidence_of(dm, f"device_map={dm.text}", load)
                    if dm.state == KNOWN
                    else call_evidence(load, "offload_folder="),
                    call_evidence(c, "moved after dispatch"),
                ),
                fix=Fix(
                    "remove the move: the device_map already placed every module", applicability=Applicability.UNSAFE
                ),
            )
            return
