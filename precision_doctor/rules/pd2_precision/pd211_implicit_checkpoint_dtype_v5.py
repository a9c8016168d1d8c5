"""PD211 implicit-checkpoint-dtype-v5: No dtype passed to from_pretrained on transformers >= 5: the checkpoint's
dtype is loaded, not fp32."""

from __future__ import annotations

from ...derive import Setup, call_evidence, load_dtype_value
from ...knowledge import dtypes
from ...knowledge.versions import at_least
from ...model.facts import ABSENT, StackFacts, VersionSource, builds_from_config
from ...model.findings import Applicability, Draft, Edit, Fix
from ..registry import Example, rule
from ._precision import lora_script, trainer_script


@rule(
    "PD211",
    "implicit-checkpoint-dtype-v5",
    severity="warning",
    phase="load",
    summary="No dtype passed to from_pretrained on transformers >= 5: the checkpoint's dtype is loaded, not fp32.",
    what="`from_pretrained(...)` without `dtype=`/`torch_dtype=` in a training script, on transformers 5 or newer.",
    why='transformers 5 changed the default to `dtype="auto"`: scripts that relied on fp32 now train bf16/fp16 '
    "weights — PD202 with fp16=True on a bf16 checkpoint, PD201 on an fp16 one, or silent pure-bf16 training.",
    error="no exception by itself; with fp16=True on a bf16 checkpoint: RuntimeError: "
    "\"_amp_foreach_non_finite_check_and_unscale_cuda\" not implemented for 'BFloat16'",
    fix="Pass the dtype explicitly: `dtype=torch.float32` for fp16 AMP / fp32 master weights, or "
    "`dtype=torch.bfloat16` together with `bf16=True` when pure bf16 is intended.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: restores the transformers 4 behaviour the script was written for.",
    related=("PD202",),
    fires=[
        Example(
            trainer_script("", ", fp16=True"),
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B",'
                " dtype=torch.float32)\n"
                'args = TrainingArguments(output_dir="out", fp16=True)\n'
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
    ],
    silent=[
        Example(trainer_script(", dtype=torch.float32", ", fp16=True")),
        Example(trainer_script("", ", fp16=True"), versions={"transformers": "4.46.0"}),
        Example(
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2')\n"
            "student = torch.nn.Linear(8, 8)\nopt = torch.optim.AdamW(student.parameters())\n"
            "student.load_state_dict({k: v for k, v in model.state_dict().items() if k.startswith('lm')})\n"
            "opt.step()\n",
            note="the loaded model is only read: another module is trained",
        ),
        Example(lora_script("", ", fp16=True"), note="a frozen base under fp32 adapters"),
        Example(
            "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2').half()\n"
            "Trainer(model=model, args=TrainingArguments('out'), train_dataset=ds).train()\n",
            note="an fp32 checkpoint cast before training: the cast, not the load's default, decides (PD204's)",
        ),
    ],
)
def implicit_checkpoint_dtype_v5(setup: Setup, stack: StackFacts):
    load = setup.model_load
    if not setup.trains or load is None or not setup.load_traced or not at_least(stack, "transformers", "5.0"):
        return  # only the model training starts from: an inference, export or teacher load is not trained
    if builds_from_config(load):
        return  # from_config took its config's dtype before transformers 5 too: nothing changed
    written = load_dtype_value(load)[1]
    if written.state != ABSENT and not written.is_(None):
        return
    if setup.quantized.value or setup.peft.value:
        return  # quantized loads pick their compute dtype from the quantization config; adapters train in fp32
    if setup.loaded.value == dtypes.FLOAT32 or setup.weights.call is not setup.loaded.call:
        return  # an fp32 checkpoint loads as fp32: nothing changed; a cast before training decides the dtype anyway
    version = stack.get("transformers")
    intended = "torch.bfloat16" if setup.amp.value == "bf16" else "torch.float32"
    loaded = setup.loaded.value or "unknown for a hub checkpoint"
    yield Draft(
        f"from_pretrained() without dtype loads the checkpoint's dtype ({loaded}) on transformers "
        f"{version.version} ({version.source}), not float32",
        evidence=(call_evidence(load, "no dtype= / torch_dtype="),) + setup.amp.evidence,
        fix=Fix(
            f"pass dtype={intended} explicitly",
            applicability=Applicability.SAFE,
            edits=(
                Edit(
                    "set_kwarg",
                    load.location.path,
                    load.location.line,
                    call="from_pretrained",
                    name="dtype",
                    new=intended,
                ),
            ),
        ),
        confidence="likely" if version.source == VersionSource.ASSUMED or not setup.weights.known else "certain",
    )
