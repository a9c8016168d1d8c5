"""Values written where users write them: the launch line's arguments read by the script's own command-line
library (click, typer, fire, jsonargparse, HfArgumentParser), Hydra's composed config and its overrides, config
classes (class attributes, dataclass instances, `__init__` attributes), and a recipe's settings given on its
tool's command line. Each source fires where the value makes the job fail and stays silent on its twin."""

import shutil
from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
LOAD = "model = AutoModelForCausalLM.from_pretrained({model}, dtype=torch.float16)\n"
TRAIN = "Trainer(model=model, args=TrainingArguments('out', fp16={fp16})).train()\n"
HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


def body(model: str, fp16: str, indent: str = "    ") -> str:
    return indent + LOAD.format(model=model) + indent + TRAIN.format(fp16=fp16)


CLICK = (
    "import click\n" + HEAD + "@click.command()\n"
    "@click.option('--model-name', default='gpt2')\n"
    "@click.option('--fp16/--no-fp16', default=False)\n"
    "def main(model_name, fp16):\n" + body("model_name", "fp16") + "main()\n"
)
TYPER = (
    "import typer\n" + HEAD + "app = typer.Typer()\n@app.command()\n"
    "def main(model_name: str = typer.Option('gpt2', '--model-name'), fp16: bool = False):\n"
    + body("model_name", "fp16")
    + "app()\n"
)
FIRE = (
    "import fire\n"
    + HEAD
    + "def main(model_name='gpt2', fp16=False):\n"
    + body("model_name", "fp16")
    + "fire.Fire(main)\n"
)
JSONARGPARSE = (
    "from jsonargparse import CLI\n"
    + HEAD
    + "def main(model_name: str = 'gpt2', fp16: bool = False):\n"
    + body("model_name", "fp16")
    + "CLI(main)\n"
)
HF_ARGS = (
    "from transformers import HfArgumentParser\n" + HEAD + "(args,) = HfArgumentParser(TrainingArguments)"
    ".parse_args_into_dataclasses()\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
    "Trainer(model=model, args=args).train()\n"
)


def rules(result) -> set[str]:
    return {f.rule_id for f in result.findings}


@pytest.mark.parametrize(
    "code,fires,silent",
    [
        (CLICK, "python train.py --fp16", "python train.py"),
        (CLICK, "torchrun train.py --fp16", "torchrun train.py --fp16 --no-fp16"),
        (TYPER, "python train.py --fp16", "python train.py --no-fp16"),
        (FIRE, "python train.py --fp16", "python train.py --nofp16"),
        (FIRE, "python train.py --fp16=True", "python train.py --fp16=False"),
        (JSONARGPARSE, "python train.py --fp16 true", "python train.py --fp16 false"),
        (HF_ARGS, "accelerate launch train.py --output_dir out --fp16", "python train.py --output_dir out"),
    ],
    ids=["click", "click-torchrun", "typer", "fire-flag", "fire-literal", "jsonargparse", "hfargumentparser"],
)
def test_launch_line_arguments_reach_the_scripts_parser(run_check, code, fires, silent):
    result, _ = run_check(code, target="a100", launcher=fires)
    assert "PD201" in rules(result)  # fp16 weights under fp16 AMP
    result, _ = run_check(code, target="a100", launcher=silent)
    assert "PD201" not in rules(result)


def test_a_model_id_from_a_click_option_reaches_the_memory_rules(run_check):
    launch = "python train.py --model-name meta-llama/Llama-2-7b-hf"
    result, facts = run_check(CLICK, target="a100-40gb", launcher=launch)
    assert "meta-llama/Llama-2-7b-hf" in facts.scripts[0].checkpoints
    assert {"PD602", "PD603"} & rules(result)
    result, _ = run_check(CLICK, target="a100-40gb", launcher="python train.py")
    assert not {"PD602", "PD603"} & rules(result)


HYDRA = (
    "import hydra\n" + HEAD + "@hydra.main(config_path='conf', config_name='config', version_base=None)\n"
    "def main(cfg):\n"
    "    model = AutoModelForCausalLM.from_pretrained(cfg.model.name, dtype=getattr(torch, cfg.model.dtype))\n"
    "    Trainer(model=model, args=TrainingArguments('out', fp16=cfg.training.fp16)).train()\n"
    "main()\n"
)


@pytest.fixture
def hydra_conf(tmp_path):
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "config.yaml").write_text("defaults:\n  - model: half\n  - _self_\ntraining:\n  fp16: true\n")
    (tmp_path / "conf" / "model" / "half.yaml").write_text("name: gpt2\ndtype: float16\n")
    (tmp_path / "conf" / "model" / "full.yaml").write_text("name: gpt2\ndtype: float32\n")


@pytest.mark.parametrize(
    "launch,fires",
    [
        ("python train.py", True),  # the defaults list's model group: fp16 weights, fp16 AMP
        ("python train.py model=full", False),  # another option of the group
        ("python train.py training.fp16=false", False),  # a key override
        ("python train.py model=full model.dtype=float16", True),  # a key of the chosen group, overridden
    ],
)
def test_hydra_composes_its_config_and_overrides(run_check, hydra_conf, tmp_path, launch, fires):
    result, _ = run_check(HYDRA, target="a100", launcher=launch)
    assert ("PD201" in rules(result)) is fires
    if fires and launch == "python train.py":
        weights = next(f for f in result.findings if f.rule_id == "PD201").evidence[0]
        assert weights.location.path.endswith("conf/model/half.yaml") and weights.location.line == 2


DATACLASS = (
    "from dataclasses import dataclass, field\n" + HEAD + "@dataclass\nclass Config:\n"
    "    model_name: str = 'meta-llama/Llama-2-7b-hf'\n"
    "    fp16: bool = field(default={fp16})\n"
    "cfg = Config({args})\n" + body("cfg.model_name", "cfg.fp16", indent="")
)
PLAIN_CLASS = (
    "class Config:\n    model_name = 'gpt2'\n    fp16 = {fp16}\n"
    + HEAD
    + body("Config.model_name", "Config.fp16", indent="")
)
INIT_CLASS = (
    "class Config:\n    def __init__(self, model_name='gpt2', fp16=False):\n"
    "        self.model_name = model_name\n        self.fp16 = fp16\n"
    + HEAD
    + "cfg = Config({args})\n"
    + body("cfg.model_name", "cfg.fp16", indent="")
)


@pytest.mark.parametrize(
    "fires,silent",
    [
        (DATACLASS.format(fp16=True, args=""), DATACLASS.format(fp16=False, args="")),
        (DATACLASS.format(fp16=False, args="'gpt2', True"), DATACLASS.format(fp16=True, args="fp16=False")),
        (PLAIN_CLASS.format(fp16=True), PLAIN_CLASS.format(fp16=False)),
        (INIT_CLASS.format(args="fp16=True"), INIT_CLASS.format(args="")),
        (INIT_CLASS.format(args="'gpt2', True"), INIT_CLASS.format(args="'gpt2'")),
    ],
    ids=["dataclass-default", "dataclass-passed", "class-attribute", "init-keyword", "init-positional"],
)
def test_config_classes_give_their_values(run_check, fires, silent):
    result, _ = run_check(fires, target="a100")
    assert "PD201" in rules(result)
    result, _ = run_check(silent, target="a100")
    assert "PD201" not in rules(result)


def test_a_dataclass_default_names_the_model_for_the_memory_rules(run_check):
    result, facts = run_check(DATACLASS.format(fp16=False, args=""), target="a100-40gb")
    assert "meta-llama/Llama-2-7b-hf" in facts.scripts[0].checkpoints


@pytest.mark.parametrize(
    "family,name,launch,fires,rule",
    [
        ("llamafactory", "seed001_titan_bf16_lora.yaml", "llamafactory-cli train r.yaml", True, "PD101"),
        ("llamafactory", "seed001_titan_bf16_lora.yaml", "llamafactory-cli train r.yaml bf16=false", False, "PD101"),
        ("axolotl", "seed004_v100_bf16_fixed.yml", "axolotl train r.yaml --bf16 true", True, "PD101"),
        ("axolotl", "seed004_v100_bf16_fixed.yml", "axolotl train r.yaml", False, "PD101"),
    ],
)
def test_recipe_settings_on_the_launch_line(tmp_path, monkeypatch, family, name, launch, fires, rule):
    from .test_launch_commands import check

    monkeypatch.chdir(tmp_path)
    shutil.copy(CONFIGS / family / name, tmp_path / "r.yaml")
    result, _ = check(launch, target="titan-rtx" if family == "llamafactory" else "v100")
    assert (rule in rules(result)) is fires
    if "--bf16" in launch:  # the evidence names the launch line, not a line of the recipe
        assert any(e.origin == "script-arg" for f in result.findings if f.rule_id == rule for e in f.evidence)


LIGHTNING_CLI = (
    "import torch\nfrom lightning.pytorch import LightningModule\nfrom lightning.pytorch.cli import LightningCLI\n"
    "from transformers import AutoModelForCausalLM\n\n"
    "class LitLM(LightningModule):\n"
    "    def __init__(self, model_name: str = 'gpt2', dtype: str = 'float32'):\n"
    "        super().__init__()\n"
    "        self.model = AutoModelForCausalLM.from_pretrained(model_name, dtype=getattr(torch, dtype))\n\n"
    "    def training_step(self, batch, batch_idx):\n        return self.model(**batch).loss\n\n"
    "    def configure_optimizers(self):\n        return torch.optim.AdamW(self.parameters(), lr=1e-5)\n\n"
    "def main():\n    LightningCLI(LitLM{extra})\n\n"
    "if __name__ == '__main__':\n    main()\n"
)


@pytest.fixture
def lightning_configs(tmp_path):
    (tmp_path / "half.yaml").write_text(
        "trainer:\n  accelerator: gpu\n  precision: 16-mixed\nmodel:\n  dtype: float16\n"
    )
    (tmp_path / "top.yaml").write_text(
        "fit:\n  trainer:\n    precision: 16-mixed\n  model:\n    class_path: LitLM\n    init_args:\n"
        "      dtype: float16\n"
    )
    (tmp_path / "eight.yaml").write_text("trainer:\n  accelerator: gpu\n  devices: 8\n  strategy: ddp\n")


@pytest.mark.parametrize(
    "extra,launch,fired,absent",
    [
        # the config after the subcommand: fp16 weights (model section) under 16-mixed's GradScaler
        ("", "python train.py fit --config half.yaml", {"PD201"}, set()),
        ("", "python train.py fit --config half.yaml --trainer.precision bf16-mixed", set(), {"PD201"}),
        ("", "python train.py fit -c half.yaml --model.dtype=float32", set(), {"PD201"}),
        # a config before the subcommand holds it as a key
        ("", "python train.py --config top.yaml fit", {"PD201"}, set()),
        # trainer_defaults, overridden by nothing, with the model's dtype from the launch line
        (", trainer_defaults={'precision': '16-mixed'}", "python train.py fit --model.dtype float16", {"PD201"}, set()),
        (", trainer_defaults={'precision': '16-mixed'}", "python train.py fit", set(), {"PD201"}),
        # devices the node does not have: Lightning's own refusal
        ("", "python train.py fit --config eight.yaml", {"PD111"}, set()),
        ("", "python train.py fit --config eight.yaml --trainer.devices 4", set(), {"PD111"}),
        # default_config_files, under the launch line's settings
        (", parser_kwargs={'default_config_files': ['half.yaml']}", "python train.py fit", {"PD201"}, set()),
        (
            ", parser_kwargs={'fit': {'default_config_files': ['half.yaml']}}",
            "python train.py fit --model.dtype bfloat16 --trainer.precision bf16-mixed",
            set(),
            {"PD201"},
        ),
        # run=False: no subcommand, args= replaces the launch line
        (", run=False, args=['--config', 'half.yaml']", "python train.py", {"PD201"}, set()),
    ],
)
def test_lightning_cli_builds_its_classes_from_configs_and_the_launch_line(
    run_check, lightning_configs, extra, launch, fired, absent
):
    result, _ = run_check(LIGHTNING_CLI.format(extra=extra), target="a100:4", launcher=launch)
    assert fired <= rules(result), sorted(rules(result))
    assert not absent & rules(result), sorted(rules(result))


def test_lightning_cli_points_at_the_config_line(run_check, lightning_configs):
    result, _ = run_check(LIGHTNING_CLI.format(extra=""), target="a100", launcher="python train.py fit -c half.yaml")
    finding = next(f for f in result.findings if f.rule_id == "PD201")
    places = {(Path(e.location.path).name, e.location.line) for e in finding.evidence if e.location}
    assert ("half.yaml", 3) in places and ("half.yaml", 5) in places, places


def test_lightning_cli_without_a_launch_line_says_what_it_assumed(run_check):
    result, facts = run_check(LIGHTNING_CLI.format(extra=""), target="a100")
    reasons = [u.reason for s in facts.scripts for u in s.unknowns if u.what == "LightningCLI's Trainer settings"]
    assert reasons and "launch line" in reasons[0]


LIGHTNING_HPARAMS = (
    "import torch\nfrom lightning.pytorch import LightningModule\nfrom lightning.pytorch.cli import LightningCLI\n"
    "from transformers import AutoModelForCausalLM\n\n"
    "class LitLM(LightningModule):\n"
    "    def __init__(self, model_name: str = 'gpt2'):\n"
    "        super().__init__()\n        self.save_hyperparameters()\n\n"
    "    def configure_model(self):\n"
    "        self.model = AutoModelForCausalLM.from_pretrained(self.hparams.model_name)\n\n"
    "    def training_step(self, batch, batch_idx):\n        return self.model(**batch).loss\n\n"
    "    def configure_optimizers(self):\n        return torch.optim.AdamW(self.parameters(), lr=1e-5)\n\n"
    "LightningCLI(LitLM)\n"
)


def test_a_model_id_from_lightning_cli_reaches_the_memory_rules_through_hparams(run_check):
    launch = "python train.py fit --model.model_name meta-llama/Llama-2-7b-hf --trainer.precision bf16-mixed"
    result, facts = run_check(LIGHTNING_HPARAMS, target="a100-40gb", launcher=launch)
    assert "meta-llama/Llama-2-7b-hf" in facts.scripts[0].checkpoints
    assert {"PD602", "PD603"} & rules(result)
    result, _ = run_check(LIGHTNING_HPARAMS, target="a100-40gb", launcher="python train.py fit")
    assert not {"PD602", "PD603"} & rules(result)
