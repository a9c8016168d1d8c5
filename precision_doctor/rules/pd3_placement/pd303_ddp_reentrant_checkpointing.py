"""PD303 ddp-reentrant-checkpointing: Reentrant gradient checkpointing under DDP with unused parameters or adapters."""

from __future__ import annotations

from ...derive import LaunchPlan, Setup, decide
from ...model.facts import ABSENT, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import present, set_kwarg
from ..registry import Example, rule
from ._placement import QLORA, per_rank

# a checkpoint whose class still has the pre-4.35 setter and checkpoints its layers itself (as ChatGLM2-6B's does)
_OLD_FORMAT = {
    "chatold-1b/config.json": '{"model_type": "chatold", "auto_map": {"AutoConfig": '
    '"configuration_chatold.ChatOldConfig", "AutoModelForCausalLM": "modeling_chatold.ChatOldForCausalLM"}}\n',
    "chatold-1b/configuration_chatold.py": "from transformers import PretrainedConfig\n\n\n"
    "class ChatOldConfig(PretrainedConfig):\n    model_type = 'chatold'\n",
    "chatold-1b/modeling_chatold.py": "import torch.utils.checkpoint\nfrom torch import nn\n"
    "from transformers import PreTrainedModel\n\nfrom .configuration_chatold import ChatOldConfig\n\n\n"
    "class ChatOldForCausalLM(PreTrainedModel):\n    config_class = ChatOldConfig\n"
    "    supports_gradient_checkpointing = True\n\n    def __init__(self, config):\n"
    "        super().__init__(config)\n        self.layer = nn.Linear(8, 8)\n"
    "        self.gradient_checkpointing = False\n\n"
    "    def _set_gradient_checkpointing(self, module, value=False):\n"
    "        if isinstance(module, ChatOldForCausalLM):\n            module.gradient_checkpointing = value\n\n"
    "    def forward(self, hidden):\n        if self.gradient_checkpointing and self.training:\n"
    "            return torch.utils.checkpoint.checkpoint(self.layer, hidden)\n        return self.layer(hidden)\n",
}
_OLD_FORMAT_SCRIPT = (
    "import os\nfrom peft import LoraConfig, get_peft_model\n"
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('./chatold-1b', trust_remote_code=True,"
    " device_map={'': int(os.environ['LOCAL_RANK'])})\n"
    "model = get_peft_model(model, LoraConfig(r=8, target_modules=['layer']))\n"
    "args = TrainingArguments('out', gradient_checkpointing=True,"
    " gradient_checkpointing_kwargs={'use_reentrant': False}{more})\n"
    "Trainer(model=model, args=args, train_dataset=data).train()\n"
)


@rule(
    "PD303",
    "ddp-reentrant-checkpointing",
    severity="error",
    phase="first-step",
    summary="Reentrant gradient checkpointing under DDP with unused parameters or adapters.",
    what="A multi-process DDP launch, gradient checkpointing with `use_reentrant=True` (the transformers 4 default), "
    "and `ddp_find_unused_parameters=True` / `DistributedDataParallel(find_unused_parameters=True)` (common with "
    "LoRA, whose frozen base leaves parameters unused) — which a Trainer sets itself for a PeftModel when "
    "`ddp_find_unused_parameters` is unset.",
    why="Reentrant checkpointing runs a second backward inside the first; DDP's reducer then sees the same "
    "parameters marked ready twice.",
    error="RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following "
    "reasons: 1) Use of a module parameter outside the `forward` function. 2) Reused parameters in multiple "
    "reentrant backward passes.",
    fix='`gradient_checkpointing_kwargs={"use_reentrant": False}` (Trainer argument or '
    "`model.gradient_checkpointing_enable(...)`), and `ddp_find_unused_parameters=False`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: non-reentrant checkpointing computes the same gradients. Where the checkpoint's own code "
    "checkpoints reentrantly (a pre-4.35 `_set_gradient_checkpointing(module, value)` class, whose checkpointing "
    "keyword arguments transformers ignores), the fix is find_unused_parameters=False instead: unsafe, DDP then "
    "needs a gradient for every trainable parameter each step.",
    fires=[
        Example(
            per_rank(
                QLORA.format(
                    device_map=", device_map={'': 0}",
                    args=", gradient_checkpointing=True, ddp_find_unused_parameters=True",
                )
            ),
            launcher="torchrun --nproc_per_node 2 train.py",
            versions={"transformers": "4.57.1"},
            fixed=(
                "import os, torch\n"
                "local_rank = int(os.environ['LOCAL_RANK'])\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4',"
                " bnb_4bit_compute_dtype=torch.bfloat16)\n"
                "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-7B', quantization_config=q,"
                " dtype=torch.bfloat16, device_map={'': local_rank})\n"
                "model = prepare_model_for_kbit_training(model)\n"
                "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=True,"
                " gradient_checkpointing=True, ddp_find_unused_parameters=True,"
                ' gradient_checkpointing_kwargs={"use_reentrant": False})).train()\n'
            ),
        ),
        Example(
            per_rank(QLORA.format(device_map=", device_map={'': 0}", args=", gradient_checkpointing=True")),
            launcher="torchrun --nproc_per_node 2 train.py",
            versions={"transformers": "4.57.1"},
            note="the Trainer turns find_unused_parameters on for a PeftModel, which is no PreTrainedModel",
            fixed=(
                "import os, torch\n"
                "local_rank = int(os.environ['LOCAL_RANK'])\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4',"
                " bnb_4bit_compute_dtype=torch.bfloat16)\n"
                "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-7B', quantization_config=q,"
                " dtype=torch.bfloat16, device_map={'': local_rank})\n"
                "model = prepare_model_for_kbit_training(model)\n"
                "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=True,"
                ' gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant":'
                " False})).train()\n"
            ),
        ),
        Example(
            per_rank(
                QLORA.format(
                    device_map=", device_map={'': 0}",
                    args=", activation_checkpointing=True, activation_checkpointing_kwargs={'use_reentrant': True}",
                )
            ),
            launcher="torchrun --nproc_per_node 2 train.py",
            note="transformers 5.24's names for gradient_checkpointing(_kwargs)",
            fixed=(
                "import os, torch\n"
                "local_rank = int(os.environ['LOCAL_RANK'])\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4',"
                " bnb_4bit_compute_dtype=torch.bfloat16)\n"
                "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-7B', quantization_config=q,"
                " dtype=torch.bfloat16, device_map={'': local_rank})\n"
                "model = prepare_model_for_kbit_training(model)\n"
                "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=True,"
                ' activation_checkpointing=True, activation_checkpointing_kwargs={"use_reentrant":'
                " False})).train()\n"
            ),
        ),
        Example(
            _OLD_FORMAT_SCRIPT.replace("{more}", ""),
            launcher="torchrun --nproc_per_node 2 train.py",
            files=_OLD_FORMAT,
            note="its own code calls torch's checkpoint without use_reentrant; the keyword never reaches it",
            fixed=_OLD_FORMAT_SCRIPT.replace("{more}", ", ddp_find_unused_parameters=False"),
        ),
    ],
    silent=[
        Example(
            per_rank(
                QLORA.format(
                    device_map=", device_map={'': 0}",
                    args=", gradient_checkpointing=True, gradient_checkpointing_kwargs={'use_reentrant': False}",
                )
            ),
            launcher="torchrun --nproc_per_node 2 train.py",
            versions={"transformers": "4.57.1"},
        ),
        Example(
            per_rank(QLORA.format(device_map=", device_map={'': 0}", args=", gradient_checkpointing=True")),
            launcher="torchrun --nproc_per_node 2 train.py",
        ),
        Example(
            per_rank(
                QLORA.format(
                    device_map=", device_map={'': 0}",
                    args=", gradient_checkpointing=True, ddp_find_unused_parameters=False",
                )
            ),
            launcher="torchrun --nproc_per_node 2 train.py",
            versions={"transformers": "4.57.1"},
        ),
        Example(
            per_rank(
                QLORA.format(
                    device_map=", device_map={'': 0}",
                    args=", gradient_checkpointing=True, deepspeed={'zero_optimization': {'stage': 2}}",
                )
            ),
            launcher="torchrun --nproc_per_node 2 train.py",
            versions={"transformers": "4.57.1"},
            note="DeepSpeed runs no DDP reducer",
        ),
        Example(
            _OLD_FORMAT_SCRIPT.replace("{more}", ""),
            launcher="torchrun --nproc_per_node 2 train.py",
            files={
                **_OLD_FORMAT,
                "chatold-1b/modeling_chatold.py": _OLD_FORMAT["chatold-1b/modeling_chatold.py"].replace(
                    "checkpoint(self.layer, hidden)", "checkpoint(self.layer, hidden, use_reentrant=False)"
                ),
            },
            note="its own call passes use_reentrant=False",
        ),
    ],
)
def ddp_reentrant_checkpointing(
    script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts, plan: LaunchPlan
):
    n, n_ev = plan.multi_process, plan.processes_evidence
    if n <= 1 or setup.style not in ("trainer", "loop", "accelerate") or setup.sharding.kind in ("deepspeed", "fsdp"):
        return  # (DeepSpeed and FSDP run no DDP reducer: accelerate 1.15 accelerator.py:659-669, 1884-1898)
    gc = setup.placement.checkpointing
    on, reentrant, ev = gc.on, gc.reentrant, gc.evidence
    if not on or not reentrant:
        return
    flag = (
        decide(setup.training_args.kwarg("ddp_find_unused_parameters"), machine, stack)
        if setup.training_args is not None
        else None
    )
    unused = flag is not None and flag.is_(True)
    unused = unused or any(
        decide(d.kwarg("find_unused_parameters"), machine, stack).is_(True) for d in script.of("ddp")
    )
    # Trainer turns find_unused_parameters off for a checkpointing PreTrainedModel, but a PeftModel is not one: with
    # ddp_find_unused_parameters unset it is on (transformers 5.24 trainer.py:749-756)
    wrapped = (
        setup.style == "trainer"
        and flag is not None
        and (flag.state == ABSENT or flag.is_(None))
        and setup.peft.value
        and setup.peft.call is not None
        and setup.peft.call.kind in ("get_peft_model", "peft_load", "trainer")
    )
    if not unused and not wrapped:
        return  # Trainer turns find_unused_parameters off when checkpointing; reentrant then works
    why = "find_unused_parameters=True" + (
        " (the Trainer's default for a PeftModel, which is no PreTrainedModel)" if wrapped and not unused else ""
    )
    spelled = (
        "activation_checkpointing_kwargs"
        if setup.training_args is not None and "activation_checkpointing_kwargs" in setup.training_args.kwargs
        else "gradient_checkpointing_kwargs"
    )
    if gc.by_model_code:
        # the checkpoint's own code calls torch's checkpoint, and gradient_checkpointing_kwargs never reaches it
        yield Draft(
            f"reentrant gradient checkpointing under {n}-process DDP with {why}: DDP marks parameters ready twice "
            "(the model's own code checkpoints reentrantly; gradient_checkpointing_kwargs does not reach it)",
            evidence=(n_ev,) + ev,
            fix=Fix(
                "find_unused_parameters=False (`ddp_find_unused_parameters=False` for a Trainer), as LLaMA-Factory "
                "sets for LoRA; DDP then raises at the first step if a trainable parameter gets no gradient",
                applicability=Applicability.UNSAFE,
                edits=present(set_kwarg(setup.training_args, "ddp_find_unused_parameters", "False"))
                if setup.training_args is not None
                else (),
            ),
        )
        return
    edits = (
        present(set_kwarg(setup.training_args, spelled, '{"use_reentrant": False}'))
        if setup.training_args is not None
        else ()
    )
    yield Draft(
        f"reentrant gradient checkpointing under {n}-process DDP with {why}: DDP marks parameters ready twice",
        evidence=(n_ev,) + ev,
        fix=Fix(
            "gradient_checkpointing_kwargs={'use_reentrant': False}", applicability=Applicability.SAFE, edits=edits
        ),
    )
