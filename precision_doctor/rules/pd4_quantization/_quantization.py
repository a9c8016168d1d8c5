"""What the quantization rules share: bitsandbytes quantization and PEFT adapters on top of it (PD401-PD406)."""

from __future__ import annotations

HEAD = (
    "import torch\nfrom peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
    "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments\n"
)


LOAD4 = (
    "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4'{compute})\n"
    "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B', quantization_config=q, "
    "dtype=torch.bfloat16, device_map={{'': 0}})\n"
)


PREP = "model = prepare_model_for_kbit_training(model)\n"


LORA = "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"


TRAIN = "Trainer(model=model, args=TrainingArguments('out', bf16=True{args})).train()\n"


BF16 = ", bnb_4bit_compute_dtype=torch.bfloat16"


def qlora(compute: str = BF16, prep: bool = True, lora: bool = True, args: str = "", middle: str = "") -> str:
    return (
        HEAD
        + LOAD4.format(compute=compute)
        + middle
        + (PREP if prep else "")
        + (LORA if lora else "")
        + TRAIN.format(args=args)
    )
