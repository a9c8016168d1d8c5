"""PD403 kbit-gradient-checkpointing-no-input-grads: Reentrant gradient checkpointing over a frozen (k-bit) base
whose inputs don't require grad."""

from __future__ import annotations

from ...derive import Setup, call_evidence
from ...knowledge.versions import at_least
from ...model.facts import MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Edit, Fix
from ..registry import Example, rule
from ._quantization import qlora


@rule(
    "PD403",
    "kbit-gradient-checkpointing-no-input-grads",
    severity="error",
    phase="first-step",
    summary="Reentrant gradient checkpointing over a frozen (k-bit) base whose inputs don't require grad.",
    what="A quantized base wrapped with `get_peft_model` without `prepare_model_for_kbit_training` or "
    "`enable_input_require_grads()`, then trained with gradient checkpointing in its reentrant form (the "
    "transformers <= 4.57 default). TRL's SFTTrainer with `peft_config` prepares the model itself.",
    why="Reentrant checkpointing only produces a graph when a block's inputs require grad; frozen embeddings give "
    "inputs that don't, so the loss has no grad_fn. transformers 5 enables input grads itself.",
    error="RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
    fix="`prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)` before `get_peft_model`, or "
    '`model.enable_input_require_grads()`, or `gradient_checkpointing_kwargs={"use_reentrant": False}`.',
    applicability=Applicability.SAFE,
    fix_safety="Safe: prepares what the training needs.",
    fires=[
        Example(
            qlora(prep=False, args=", gradient_checkpointing=True"),
            versions={"transformers": "4.57.1"},
            fixed=(
                "import torch\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4',"
                " bnb_4bit_compute_dtype=torch.bfloat16)\n"
                "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B',"
                " quantization_config=q, dtype=torch.bfloat16, device_map={'': 0})\n"
                "model = prepare_model_for_kbit_training(model)\n"
                "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=True,"
                " gradient_checkpointing=True)).train()\n"
            ),
        ),
        Example(
            qlora(prep=False)
            .replace("Trainer(", "SFTTrainer(")
            .replace("TrainingArguments('out', bf16=True)", "SFTConfig(output_dir='out', bf16=True)")
            .replace("import torch\n", "import torch\nfrom trl import SFTConfig, SFTTrainer\n"),
            versions={"transformers": "4.57.1", "trl": "0.24.0"},
            note="SFTConfig turns gradient checkpointing on by default from trl 0.22",
            fixed=qlora(prep=True)
            .replace("Trainer(", "SFTTrainer(")
            .replace("TrainingArguments('out', bf16=True)", "SFTConfig(output_dir='out', bf16=True)")
            .replace("import torch\n", "import torch\nfrom trl import SFTConfig, SFTTrainer\n"),
        ),
    ],
    silent=[
        Example(qlora(prep=True, args=", gradient_checkpointing=True"), versions={"transformers": "4.57.1"}),
        Example(
            qlora(prep=False)
            .replace("Trainer(", "SFTTrainer(")
            .replace("import torch\n", "import torch\nfrom trl import SFTTrainer\n"),
            versions={"transformers": "4.57.1", "trl": "0.24.0"},
            note="a plain TrainingArguments given to SFTTrainer keeps its gradient_checkpointing=False",
        ),
        Example(
            "from unsloth import FastLanguageModel\nfrom trl import SFTConfig, SFTTrainer\n"
            "model, tok = FastLanguageModel.from_pretrained('unsloth/llama-3-8b-bnb-4bit', load_in_4bit=True)\n"
            "model = FastLanguageModel.get_peft_model(model, r=16, use_gradient_checkpointing='unsloth')\n"
            "SFTTrainer(model=model, args=SFTConfig(output_dir='out'), train_dataset=None).train()\n",
            versions={"transformers": "4.57.1"},
            note="Unsloth's get_peft_model prepares the model itself",
        ),
        Example(qlora(prep=False, args=", gradient_checkpointing=True")),
        Example(
            qlora(
                prep=False, args=", gradient_checkpointing=True, gradient_checkpointing_kwargs={'use_reentrant': False}"
            ),
            versions={"transformers": "4.57.1"},
        ),
    ],
)
def kbit_gradient_checkpointing_no_input_grads(
    script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts
):

    if not setup.peft.value or setup.peft.call is None or setup.peft.call.kind != "get_peft_model":
        return
    if setup.peft.call.callee.startswith("unsloth."):
        return  # Unsloth's get_peft_model prepares the model for training itself (input grads, its checkpointing)
    if at_least(stack, "transformers", "5.0") or script.of("prepare_kbit", "input_grads"):
        return
    gc = setup.placement.checkpointing
    on, reentrant, ev = gc.on, gc.reentrant, gc.evidence
    if not on or not reentrant:
        return
    base = "a k-bit base" if setup.quantized.value else "a frozen base"
    wrap = setup.peft.call
    yield Draft(
        f"{base} gets LoRA adapters without prepare_model_for_kbit_training / enable_input_require_grads, "
        f"and reentrant gradient checkpointing then finds no input that requires grad",
        evidence=(call_evidence(wrap, "adapters on a frozen base"),) + ev,
        fix=Fix(
            "model = prepare_model_for_kbit_training(model) before get_peft_model",
            applicability=Applicability.SAFE,
            edits=(
                Edit(
                    "insert_before",
                    wrap.location.path,
                    wrap.location.line,
                    new="model = prepare_model_for_kbit_training(model)",
                ),
            ),
        ),
    )
