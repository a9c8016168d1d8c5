"""PD502 zero3-with-device-map: ZeRO-3 registered before from_pretrained(device_map=... / low_cpu_mem_usage=True /
quantization)."""

from __future__ import annotations

from ...derive import Setup, decide, evidence_of
from ...derive.sharding import zero3_shards_the_load
from ...model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import present, remove_kwarg
from ..registry import Example, rule
from ._distributed import HEAD, _script, in_script_first


@rule(
    "PD502",
    "zero3-with-device-map",
    severity="error",
    phase="load",
    summary="ZeRO-3 registered before from_pretrained(device_map=... / low_cpu_mem_usage=True / quantization).",
    what="TrainingArguments with a stage-3 DeepSpeed config (or `HfDeepSpeedConfig`) created before the model is "
    "loaded with a `device_map`, `low_cpu_mem_usage=True` or a quantization config.",
    why="Under ZeRO-3 `from_pretrained` shards the weights as it loads them (zero.Init); a device map or low-memory "
    "loading places them itself, and the two cannot be combined.",
    error="ValueError: DeepSpeed Zero-3 is not compatible with passing a `device_map`.",
    fix="Drop `device_map` / `low_cpu_mem_usage` under ZeRO-3 and let DeepSpeed shard at load time.",
    applicability=Applicability.SAFE,
    fix_safety="Safe under ZeRO-3.",
    fires=[
        Example(
            _script(
                "{'zero_optimization': {'stage': 3}, 'bf16': {'enabled': 'auto'}}",
                ", bf16=True",
                load=", dtype=torch.bfloat16, device_map='auto'",
                order="args-first",
            ),
            fixed=_script(
                "{'zero_optimization': {'stage': 3}, 'bf16': {'enabled': 'auto'}}",
                ", bf16=True",
                load=", dtype=torch.bfloat16",
                order="args-first",
            ),
        ),
        Example(
            HEAD + "args = TrainingArguments('out', bf16=True)\n"
            "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16, device_map='auto')\n"
            "Trainer(model=model, args=args).train()\n",
            fixed=HEAD + "args = TrainingArguments('out', bf16=True)\n"
            "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16)\n"
            "Trainer(model=model, args=args).train()\n",
            launcher="accelerate launch --use_deepspeed --zero_stage 3 --num_processes 2 train.py",
            note="ZeRO-3 from the launcher: TrainingArguments registers it",
        ),
    ],
    silent=[
        Example(
            _script(
                "{'zero_optimization': {'stage': 3}, 'bf16': {'enabled': 'auto'}}",
                ", bf16=True",
                load=", dtype=torch.bfloat16",
                order="args-first",
            )
        ),
        Example(
            HEAD + "args = TrainingArguments('out', bf16=True)\n"
            "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16, device_map='auto')\n"
            "Trainer(model=model, args=args).train()\n",
            launcher="accelerate launch --use_deepspeed --zero_stage 2 --num_processes 2 train.py",
        ),
    ],
)
def zero3_with_device_map(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    if not zero3_shards_the_load(setup, stack):
        return  # no ZeRO-3, or registered after loading (zero.Init does not apply to this load)
    where, load = setup.sharding.evidence, setup.model_load
    if load is None:  # (zero3_shards_the_load asks for a load)
        return
    for name in ("device_map", "low_cpu_mem_usage", "quantization_config", "load_in_4bit", "load_in_8bit"):
        v = decide(load.kwarg(name), machine, stack)
        if v.state == KNOWN and v.value not in (None, False):
            yield Draft(
                f"ZeRO-3 is registered before from_pretrained(..., {name}=...)",
                evidence=in_script_first((evidence_of(v, f"{name}=", load),) + where, script),
                fix=Fix(
                    f"drop {name}= under ZeRO-3",
                    applicability=Applicability.UNSAFE if name == "quantization_config" else Applicability.SAFE,
                    edits=present(remove_kwarg(load, name)),  # code only: fix writes no recipe
                ),
            )
            return
