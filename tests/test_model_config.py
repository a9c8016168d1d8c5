"""Checkpoints beyond the shipped table: a config.json the user names for a model the job downloads
(`--model-config`), the model id taken from the launch line, and MoE configs read by their experts' width."""

import json
import subprocess
import sys

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.model.errors import InputError
from precision_doctor.model.facts import CheckpointSource
from precision_doctor.probes.checkpoint import count_parameters, from_config, give_model_configs
from precision_doctor.probes.collect import gather

from .conftest import machine_probes

SCRIPT = (
    "import argparse\nimport torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "parser = argparse.ArgumentParser()\n"
    "parser.add_argument('--model_name_or_path', default='gpt2')\n"
    "args = parser.parse_args()\n"
    "model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=torch.bfloat16)\n"
    "Trainer(model=model, args=TrainingArguments('out', bf16=True, per_device_train_batch_size=1)).train()\n"
)
LLAMA_7B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


@pytest.fixture(autouse=True)
def no_given_configs():
    yield
    give_model_configs([])


def memory_rules(tmp_path, launcher, model_configs=()):
    (tmp_path / "train.py").write_text(SCRIPT)
    give_model_configs(list(model_configs))
    facts = gather([], target="a100-40gb", launcher=launcher, stack_overrides=dict(CURRENT), **machine_probes())
    return {f.rule_id for f in engine.run(facts).findings if f.rule_id.startswith("PD6")}, facts


def test_a_7b_full_fine_tune_named_on_the_launch_line_is_flagged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found, _ = memory_rules(tmp_path, "torchrun train.py --model_name_or_path meta-llama/Llama-2-7b-hf")
    assert "PD603" in found  # 7B in bf16 with AdamW: weights, gradients and state pass 40 GB
    found, _ = memory_rules(tmp_path, "torchrun train.py --model_name_or_path gpt2")
    assert not found


def test_a_community_copy_is_unknown_until_its_config_is_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    launch = "torchrun train.py --model_name_or_path someone/llama2-7b-copy"
    found, facts = memory_rules(tmp_path, launch)
    assert not found
    unknown = facts.scripts[0].checkpoints["someone/llama2-7b-copy"]
    assert unknown.source == CheckpointSource.UNKNOWN and "--model-config" in unknown.detail
    (tmp_path / "cfg.json").write_text(json.dumps(LLAMA_7B))
    found, facts = memory_rules(tmp_path, launch, ["someone/llama2-7b-copy=cfg.json"])
    assert "PD603" in found
    checkpoint = facts.scripts[0].checkpoints["someone/llama2-7b-copy"]
    assert checkpoint.source == CheckpointSource.GIVEN and "--model-config" in checkpoint.detail
    # a config given for another id is not this model's
    found, _ = memory_rules(tmp_path, launch, ["other/model=cfg.json"])
    assert not found


@pytest.mark.parametrize(
    "content,message",
    [(None, "no such file"), ("{", "not valid JSON"), ('{"hidden_size": 8}', "not a model's config.json")],
)
def test_a_bad_model_config_is_one_line_exit_2(tmp_path, content, message):
    path = tmp_path / "cfg.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=message):
        give_model_configs([str(path)])
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(tmp_path / "train.py"), "--model-config", str(path)],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


def test_moe_configs_are_read_by_each_experts_width():
    qwen3_moe = {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,  # a dense width no layer of this model uses
        "moe_intermediate_size": 768,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    }
    facts = from_config("Qwen/Qwen3-30B-A3B", CheckpointSource.LOCAL, "config.json", qwen3_moe)
    assert facts.intermediate_size == 768
    assert abs(count_parameters(facts) / 30_532_122_624 - 1) < 0.01  # the model card's 30.5B
