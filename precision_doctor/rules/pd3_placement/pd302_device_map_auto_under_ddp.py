"""PD302 device-map-auto-under-ddp: `device_map="auto"` (a model spread over GPUs) in a multi-process DDP, DeepSpeed
or FSDP launch."""

from __future__ import annotations

from ...derive import LaunchPlan, Setup, decide, device_map_kind, evidence_of
from ...derive.placement import AXOLOTL
from ...derive.sharding import zero3_shards_the_load
from ...model.facts import MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Edit, Fix
from .._common import present, set_kwarg
from ..registry import Example, rule
from ._placement import QLORA, per_rank


@rule(
    "PD302",
    "device-map-auto-under-ddp",
    severity="error",
    phase="wrap",
    summary='`device_map="auto"` (a model spread over GPUs) in a multi-process DDP, DeepSpeed or FSDP launch.',
    what='`from_pretrained(..., device_map="auto" | "balanced" | "sequential")` with `torchrun '
    "--nproc_per_node N` / `accelerate launch --num_processes N` (N > 1).",
    why="Each rank would hold a model split over every GPU; DDP needs one full replica per process on its own GPU, "
    "and accelerate refuses the combination.",
    error="ValueError: You can't train a model that has been loaded with `device_map='auto'` in any distributed "
    "mode. Please rerun your script specifying `--num_processes=1` or by launching with `python "
    "{{myscript.py}}`.",
    fix='One replica per process: `device_map={"": PartialState().process_index}` or '
    '`{"": int(os.environ["LOCAL_RANK"])}`; or run one process with `python` for naive pipeline parallelism.',
    applicability=Applicability.SAFE,
    fix_safety="Safe under DDP: each rank loads the whole model on its own GPU.",
    fires=[
        Example(
            QLORA.format(device_map=", device_map='auto'", args=""),
            launcher="torchrun --nproc_per_node 2 train.py",
            fixed=(
                "import torch\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "import os\n"
                "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4',"
                " bnb_4bit_compute_dtype=torch.bfloat16)\n"
                "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-7B', quantization_config=q,"
                ' dtype=torch.bfloat16, device_map={"": int(os.environ["LOCAL_RANK"])})\n'
                "model = prepare_model_for_kbit_training(model)\n"
                "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
            ),
        ),
        Example(
            "import torch\n"
            "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
            "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16, device_map='auto')\n"
            "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n",
            launcher="accelerate launch --use_deepspeed --zero_stage 3 --num_processes 2 train.py",
            note="ZeRO-3 from the launch, registered after the load: drop the map, never a per-rank one",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16)\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
            ),
        ),
    ],
    silent=[
        Example(
            per_rank(QLORA.format(device_map=", device_map={'': 0}", args="")),
            launcher="torchrun --nproc_per_node 2 train.py",
            note="correct DDP QLoRA",
        ),
        Example(QLORA.format(device_map=", device_map='auto'", args=""), launcher="python train.py"),
    ],
)
def device_map_auto_under_ddp(
    script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts, plan: LaunchPlan
):
    n, n_ev = plan.multi_process, plan.processes_evidence
    if n <= 1 or AXOLOTL in script.imports:
        return  # Axolotl replaces any device_map by {"": LOCAL_RANK} when WORLD_SIZE != 1 (normalize_config)
    if setup is not None and zero3_shards_the_load(setup, stack):
        return  # ZeRO-3 refuses any device_map at load (PD502, whose fix removes it): a per-rank map is no cure
    zero3 = setup is not None and setup.sharding.kind == "deepspeed" and setup.sharding.stage == 3
    for load in script.of("model_load"):
        v = decide(load.kwarg("device_map"), machine, stack)
        if device_map_kind(v) == "spread":
            yield Draft(
                f"device_map={v.text} spreads the model over the GPUs, but {n} processes each load it"
                + (
                    " (ZeRO-3 is registered only when the training arguments are built, after this load)"
                    if zero3
                    else ""
                ),
                evidence=(evidence_of(v, f"device_map={v.text}", load), n_ev)
                + (setup.sharding.evidence[-1:] if zero3 else ()),
                fix=_zero3_fix(load)
                if zero3
                else Fix(
                    "one full replica per process: device_map={'': int(os.environ['LOCAL_RANK'])}",
                    applicability=Applicability.SAFE,
                    edits=present(set_kwarg(load, "device_map", '{"": int(os.environ["LOCAL_RANK"])}')),
                ),
            )


def _zero3_fix(load) -> Fix:
    """Under ZeRO-3 the ranks share the model by partitioning it: no device map at all, each rank loads to the
    CPU and DeepSpeed moves its shard to its GPU (a per-rank map would put a full replica on every GPU first)."""
    shown = load.callee.rsplit(".", 1)[-1]
    return Fix(
        "drop device_map=: ZeRO-3 partitions the model over the ranks",
        applicability=Applicability.SAFE,
        edits=(Edit("remove_kwarg", load.location.path, load.location.line, call=shown, name="device_map"),),
        notes=("Build the training arguments before loading to load under zero.Init, which never holds a full copy.",),
    )
