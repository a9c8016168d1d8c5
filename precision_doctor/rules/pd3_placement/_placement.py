"""What the placement rules share: device placement: DataParallel over placed models, device maps under DDP, reentrant
checkpointing under."""

from __future__ import annotations

QLORA = (
    "import torch\nfrom peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
    "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments\n"
    "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
    "bnb_4bit_compute_dtype=torch.bfloat16)\n"
    "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-7B', quantization_config=q, "
    "dtype=torch.bfloat16{device_map})\n"
    "model = prepare_model_for_kbit_training(model)\n"
    "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
    "Trainer(model=model, args=TrainingArguments('out', bf16=True{args})).train()\n"
)


def per_rank(code: str) -> str:
    """The same recipe with one full replica per DDP rank."""
    return code.replace("import torch\n", "import os, torch\nlocal_rank = int(os.environ['LOCAL_RANK'])\n", 1).replace(
        "device_map={'': 0}", "device_map={'': local_rank}"
    )


# A checkpoint that brings its own model code (PD307, PD308): its config.json (auto_map) and configuration file
CHATBASE_CONFIG = (
    '{"model_type": "chatbase", "architectures": ["ChatBaseForCausalLM"], "auto_map": {"AutoConfig": '
    '"configuration_chatbase.ChatBaseConfig", "AutoModelForCausalLM": "modeling_chatbase.ChatBaseForCausalLM"}, '
    '"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16, "vocab_size": 50432, '
    '"torch_dtype": "bfloat16"}\n'
)
CHATBASE_CONFIGURATION = (
    "from transformers import PretrainedConfig\n\n\n"  # (one line would pass the length limit)
    "class ChatBaseConfig(PretrainedConfig):\n    model_type = 'chatbase'\n"
)
