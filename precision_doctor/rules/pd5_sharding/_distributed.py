"""What the distributed rules share: deepSpeed and FSDP: precision settings that disagree, ZeRO-3 with device maps,
fp16 loss-scale collapse, and."""

from __future__ import annotations

from ...derive import Setup
from ...model.facts import Call, ScriptFacts
from ...model.findings import Evidence

# accelerate 1.0.0's DeepSpeedPlugin.set_deepspeed_weakref registers the config with transformers whatever
# zero3_init_flag says; before it, only with the flag on (read in v0.34.0 and v1.0.0 utils/dataclasses.py)
HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


def _script(
    ds: str,
    args: str = "",
    load: str = ", dtype=torch.float32",
    model: str = "meta-llama/Llama-3.1-8B",
    order: str = "load-first",
) -> str:
    load_line = f"model = AutoModelForCausalLM.from_pretrained('{model}'{load})\n"
    args_line = f"args = TrainingArguments('out', deepspeed={ds}{args})\n"
    body = load_line + args_line if order == "load-first" else args_line + load_line
    return HEAD + body + "Trainer(model=model, args=args).train()\n"


def deepspeed_config(setup: Setup) -> tuple[dict | None, tuple[Evidence, ...], Call | None]:
    """The DeepSpeed config the job runs with, wherever it is set up (derive/sharding.py), and where."""
    sharding = setup.sharding
    if sharding.kind != "deepspeed" or sharding.config is None:
        return None, (), None
    return sharding.config, sharding.evidence, sharding.call


def in_script_first(evidence: tuple[Evidence, ...], script: ScriptFacts) -> tuple[Evidence, ...]:
    """The script's own lines first (the finding points where its fix goes), then the launch config's."""
    return tuple(sorted(evidence, key=lambda e: e.location is None or e.location.path not in script.files))


def effective_precision(setup: Setup) -> str:
    """The mixed precision accelerate hands DeepSpeed: Trainer's fp16/bf16, else (Accelerator's, or for a Trainer
    with neither flag) ACCELERATE_MIXED_PRECISION, which `accelerate launch` sets from its flag or config: all of
    it resolved in setup.amp."""
    return str(setup.amp.value) if setup.amp.known else ""
