"""PD407 against peft itself: a small Llama built from a config on the CPU, the LoRA config the script or recipe
gives, and the error peft really raises, which the doctor must predict word for word."""

import pytest

from .conftest import check_code

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

_SCRIPT = (
    "from peft import LoraConfig, get_peft_model\n"
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n\n"
    "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', dtype='bfloat16')\n"
    "model = get_peft_model(model, LoraConfig(r=4, target_modules={targets!r}))\n"
    "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
)


def _peft_error(targets) -> str:
    """What get_peft_model raises on a small Llama with these targets ("" when it attaches adapters)."""
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=64
    )
    model = transformers.LlamaForCausalLM(config)
    try:
        peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=targets, target_parameters=[]))
    except ValueError as exc:
        return f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.parametrize("targets", ["q_proj", "v_proj", [], ["q_proj"], "all-linear", r".*\.q_proj", None])
def test_the_doctor_predicts_what_peft_raises(tmp_path, monkeypatch, targets):
    monkeypatch.chdir(tmp_path)
    raised = _peft_error(targets)
    result, _ = check_code(tmp_path, _SCRIPT.format(targets=targets), target="a100")
    found = [f for f in result.findings if f.rule_id == "PD407"]
    if raised:
        assert len(found) == 1 and found[0].error == raised
    else:
        assert not found


def test_an_axolotl_recipe_without_targets_is_the_empty_list_peft_refuses(tmp_path, monkeypatch):
    """Axolotl builds LoraConfig(target_modules=cfg.lora_target_modules or []) (loaders/adapter.py:171-190): with no
    target in the recipe peft raises; the fix names the recipe's keys."""
    monkeypatch.chdir(tmp_path)
    recipe = "base_model: meta-llama/Llama-3.2-1B\nadapter: qlora\nload_in_4bit: true\nlora_r: 16\nbf16: true\n"
    result, _ = check_code(tmp_path, recipe, target="a100", name="config.yml")
    found = [f for f in result.findings if f.rule_id == "PD407"]
    assert len(found) == 1 and found[0].error == _peft_error([])
    assert "lora_target_linear: true" in found[0].fix.description
    saved = recipe + "lora_model_dir: ./adapter\n"  # a saved adapter brings its own targets
    result, _ = check_code(tmp_path, saved, target="a100", name="config.yml")
    assert not [f for f in result.findings if f.rule_id == "PD407"]


def _peft_error_with(**config) -> str:
    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=64
        )
    )
    try:
        peft.get_peft_model(model, peft.LoraConfig(r=4, target_parameters=[], **config))
    except ValueError as exc:
        module = type(exc).__module__
        return f"{'' if module == 'builtins' else module + '.'}{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.parametrize(
    "keywords, config",
    [
        # names joined in one string: still one pattern
        ("target_modules='q_proj,k_proj,v_proj'", {"target_modules": "q_proj,k_proj,v_proj"}),
        # peft says so differently when a module was excluded (modules_to_save)
        ("target_modules=[], modules_to_save=['lm_head']", {"target_modules": [], "modules_to_save": ["lm_head"]}),
        (
            "target_modules='q_proj', modules_to_save=['lm_head']",
            {"target_modules": "q_proj", "modules_to_save": ["lm_head"]},
        ),
        # refused as the config is built
        ("target_modules='q_proj', layers_to_transform=[0]", {"target_modules": "q_proj", "layers_to_transform": [0]}),
    ],
)
def test_each_way_of_targeting_nothing_gets_the_error_peft_raises(tmp_path, monkeypatch, keywords, config):
    monkeypatch.chdir(tmp_path)
    raised = _peft_error_with(**config)
    code = _SCRIPT.replace("target_modules={targets!r}", keywords)
    result, _ = check_code(tmp_path, code, target="a100")
    found = [f for f in result.findings if f.rule_id == "PD407"]
    assert raised and len(found) == 1 and found[0].error == raised


def test_a_target_assigned_after_the_config_is_built_is_what_peft_sees(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = (
        _SCRIPT.split("model = get_peft_model")[0]
        + "cfg = LoraConfig(r=4, target_modules='q_proj')\ncfg.target_modules = ['q_proj', 'v_proj']\n"
        + "model = get_peft_model(model, cfg)\nTrainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
    )
    result, _ = check_code(tmp_path, code, target="a100")
    assert not [f for f in result.findings if f.rule_id == "PD407"]


def test_a_model_the_script_builds_itself_may_hold_the_name_at_its_top(tmp_path, monkeypatch):
    """`self.fc1` of a small nn.Module is the full name "fc1": peft matches the string (reproduced)."""
    monkeypatch.chdir(tmp_path)
    code = (
        "import torch\nfrom peft import LoraConfig, get_peft_model\n"
        "from transformers import Trainer, TrainingArguments\n\n"
        "class MLP(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc1 = torch.nn.Linear(8, 8)\n        self.fc2 = torch.nn.Linear(8, 2)\n\n"
        "model = get_peft_model(MLP(), LoraConfig(r=4, target_modules='fc1'))\n"
        "Trainer(model=model, args=TrainingArguments('out')).train()\n"
    )
    result, _ = check_code(tmp_path, code, target="a100")
    assert not [f for f in result.findings if f.rule_id == "PD407"]


def test_an_axolotl_recipe_with_excluded_modules_gets_peft_s_other_message(tmp_path, monkeypatch):
    """Axolotl passes lora_exclude_modules as exclude_modules (loaders/adapter.py): with no target, peft says that
    no module was targeted, as it does when a module was excluded."""
    monkeypatch.chdir(tmp_path)
    recipe = (
        "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 16\nbf16: true\n"
        "lora_exclude_modules:\n  - lm_head\n"
    )
    result, _ = check_code(tmp_path, recipe, target="a100", name="config.yml")
    found = [f for f in result.findings if f.rule_id == "PD407"]
    assert len(found) == 1 and found[0].error == _peft_error_with(target_modules=[], exclude_modules=["lm_head"])
