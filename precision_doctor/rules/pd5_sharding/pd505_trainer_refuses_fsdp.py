"""PD505 trainer-refuses-fsdp: Trainer refuses FSDP together with DeepSpeed, or outside a distributed launch."""

from __future__ import annotations

from ...derive import LaunchPlan, Setup, evidence_of
from ...derive.launch import one_process
from ...model.facts import KNOWN, LaunchFacts, Value
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule

_SCRIPT = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', dtype=torch.bfloat16)\n"
    "args = TrainingArguments('out', bf16=True{args})\n"
    "Trainer(model=model, args=args).train()\n"
)
_DS = ", deepspeed={'zero_optimization': {'stage': 2}, 'bf16': {'enabled': 'auto'}}"
_FSDP = ", fsdp='full_shard auto_wrap'"


def _on(v: Value) -> bool:
    """A written fsdp / deepspeed setting that turns it on (a non-empty string, list or dict)."""
    return v.state == KNOWN and bool(v.value) and v.value is not False


@rule(
    "PD505",
    "trainer-refuses-fsdp",
    severity="error",
    phase="wrap",
    summary="Trainer refuses FSDP together with DeepSpeed, or outside a distributed launch.",
    what="`TrainingArguments(fsdp=...)` with `deepspeed=...` as well, or with FSDP started as one plain `python` "
    "process (no torchrun / accelerate launch): `Trainer.__init__` checks both (transformers 5.24 trainer.py:472-478, "
    "the same checks since FSDP support in 4.x).",
    why="DeepSpeed and FSDP each shard the model, its gradients and optimizer state their own way and cannot both "
    "wrap it; FSDP needs a process group of ranks, which only a distributed launch sets up.",
    error="ValueError: Using --fsdp xxx together with --deepspeed is not possible, deactivate one of those flags.",
    fix="Keep one of fsdp / deepspeed; launch FSDP with `torchrun --nproc_per_node N` or `accelerate launch`.",
    applicability=Applicability.DISPLAY,
    fires=[
        Example(_SCRIPT.format(args=_FSDP + _DS), target="a100:2", launcher="torchrun --nproc_per_node 2 train.py"),
        Example(
            _SCRIPT.format(args=_FSDP),
            target="a100:2",
            launcher="python train.py",
            note="one process: Using fsdp only works in distributed training",
        ),
    ],
    silent=[
        Example(_SCRIPT.format(args=_FSDP), target="a100:2", launcher="torchrun --nproc_per_node 2 train.py"),
        Example(_SCRIPT.format(args=_DS), target="a100:2", launcher="torchrun --nproc_per_node 2 train.py"),
        Example(_SCRIPT.format(args=_FSDP), target="a100:2", note="no launch given: not judged"),
    ],
)
def trainer_refuses_fsdp(setup: Setup, launch: LaunchFacts, plan: LaunchPlan):
    args = setup.training_args
    if setup.style != "trainer" or args is None:
        return
    fsdp = args.kwarg("fsdp")
    if not _on(fsdp):
        return
    deepspeed = args.kwarg("deepspeed")
    if _on(deepspeed):
        yield Draft(
            "fsdp and deepspeed are both set: Trainer refuses to start with both",
            evidence=(evidence_of(fsdp, f"fsdp={fsdp.text}", args), evidence_of(deepspeed, "DeepSpeed", args)),
            fix=Fix("keep one of them: FSDP (drop deepspeed=) or DeepSpeed (drop fsdp=)", Applicability.DISPLAY),
        )
        return
    if plan.spawner or one_process(launch, plan) != "yes":
        return  # a distributed launch (or one not given: not judged)
    yield Draft(
        "FSDP in a job started as one plain python process: Trainer refuses FSDP outside distributed training",
        evidence=(
            evidence_of(fsdp, f"fsdp={fsdp.text}", args),
            Evidence(None, launch.command, "one process, no process group", "launcher"),
        ),
        error="ValueError: Using fsdp only works in distributed training.",
        fix=Fix(
            f"launch it distributed: torchrun --nproc_per_node N {setup.path} (or accelerate launch)",
            Applicability.DISPLAY,
            commands=(f"torchrun --nproc_per_node 2 {setup.path}",),
        ),
    )
