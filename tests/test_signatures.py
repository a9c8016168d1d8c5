"""Keywords the library version in use does not accept (PD217), judged against each release's own fields: calls,
subclasses of the argument dataclasses, YAML recipes read by HfArgumentParser / TrlParser, and options after `--`;
which version applies (installed, declared, assumed) and how sure the verdict is."""

from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.probes.collect import gather

from .conftest import bare_env
from .fake_nvml import NO_NVML

HEAD = (
    "from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B')\n"
)


def pd217(result):
    return [f for f in result.findings if f.rule_id == "PD217"]


def _project(
    tmp_path: Path,
    code: str,
    requirements: str | None = None,
    python: Path | None = None,
    files: dict[str, str] | None = None,
    script_args=(),
):
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / ".git").mkdir(exist_ok=True)
    (project / "train.py").write_text(code)
    if requirements is not None:
        (project / "requirements.txt").write_text(requirements)
    for name, text in (files or {}).items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    facts = gather(
        [str(project / "train.py")],
        environ={},
        system=NO_NVML,
        python=str(python or bare_env(tmp_path)),
        script_args=tuple(script_args),
    )
    return engine.run(facts)


# --- Python calls --------------------------------------------------------------------------------

WARMUP = HEAD + (
    "args = TrainingArguments(output_dir='out', learning_rate=2e-5, warmup_ratio=0.03, bf16=True)\n"
    "Trainer(model=model, args=args).train()\n"
)


def test_a_4x_only_keyword_on_transformers_5_is_an_error_naming_its_successor(run_check):
    result, _ = run_check(WARMUP, versions={"transformers": "5.23.0"})
    [finding] = pd217(result)
    assert finding.severity == "error" and finding.confidence == "certain"
    assert "warmup_ratio" in finding.message and "warmup_steps" in finding.message
    assert finding.error == "TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'warmup_ratio'"
    assert finding.evidence[0].location.line == 3
    [edit] = finding.fix.edits
    assert (edit.kind, edit.old, edit.new) == ("rename_kwarg", "warmup_ratio", "warmup_steps")
    assert finding.fix.applicability == "unsafe"  # warmup_steps reads a ratio only below 1


def test_the_same_script_on_the_last_release_that_has_it_is_silent(run_check):
    result, _ = run_check(WARMUP, versions={"transformers": "5.14.1"})
    assert not pd217(result)


def test_a_declared_transformers_below_5_keeps_the_script_silent(tmp_path):
    """`transformers<5` in the project's requirements: a fresh install gets 4.57, which has warmup_ratio."""
    assert not pd217(_project(tmp_path, WARMUP, "transformers<5\ntorch\n"))


def test_a_pinned_transformers_5_is_an_error(tmp_path):
    [finding] = pd217(_project(tmp_path, WARMUP, "transformers==5.20.0\n"))
    assert finding.severity == "error"
    assert "transformers 5.20.0 (declared" in finding.message


def test_a_range_is_judged_as_a_fresh_install_and_names_the_pin_that_keeps_the_call(tmp_path):
    """`transformers>=4.40`: a fresh install (what a CI gate or a new cluster image does) gets the newest release,
    which refuses the keyword: an error, as PD216 and PD406 read a range. The range's older releases that accept
    it are named, with the pin that keeps the call, beside the fix that changes it."""
    [finding] = pd217(_project(tmp_path, WARMUP, "transformers>=4.40\n"))
    assert finding.severity == "error" and finding.confidence == "certain"
    assert "a fresh install of transformers>=4.40 gets" in finding.message
    assert "pin transformers<=5.14.1" in finding.message  # warmup_ratio's last release in the table


def test_an_assumed_version_is_a_warning_that_says_so(tmp_path):
    [finding] = pd217(_project(tmp_path, WARMUP))
    assert finding.severity == "warning" and "assumed" in finding.message


def test_a_keyword_newer_than_the_release_names_its_old_spelling(run_check):
    code = HEAD + "args = TrainingArguments('out', eval_strategy='steps')\nTrainer(model=model, args=args).train()\n"
    result, _ = run_check(code, versions={"transformers": "4.40.2"})
    [finding] = pd217(result)
    assert "evaluation_strategy" in finding.message
    [edit] = finding.fix.edits
    assert (edit.old, edit.new) == ("eval_strategy", "evaluation_strategy") and finding.fix.safe
    result, _ = run_check(code, versions={"transformers": "4.41.0"})
    assert not pd217(result)


def test_a_typo_names_the_field_it_misses_for_review(run_check):
    code = HEAD + "args = TrainingArguments('out', learning_rat=2e-5)\nTrainer(model=model, args=args).train()\n"
    result, _ = run_check(code)
    [finding] = pd217(result)
    assert "did you mean `learning_rate`" in finding.message
    assert finding.fix.edits[0].new == "learning_rate" and finding.fix.applicability == "unsafe"


def test_a_dict_unpacked_into_training_arguments_points_at_the_yaml_line(run_check, tmp_path):
    (tmp_path / "train.yaml").write_text("output_dir: out\nbf16: true\nevaluation_strategy: steps\n")
    code = HEAD.replace("from transformers", "import yaml\nfrom transformers") + (
        "cfg = yaml.safe_load(open('train.yaml'))\nargs = TrainingArguments(**cfg)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    result, _ = run_check(code)
    [finding] = pd217(result)
    where = finding.evidence[0].location
    assert where.path.endswith("train.yaml") and where.line == 3
    assert not finding.fix.edits  # the keyword is written in the YAML, not in the call


def test_bitsandbytes_config_ignores_an_unknown_keyword_a_warning(run_check):
    code = HEAD.replace("AutoTokenizer,", "AutoTokenizer, BitsAndBytesConfig,") + (
        "import torch\nq = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_type=torch.bfloat16)\n"
    )
    result, _ = run_check(code)
    [finding] = pd217(result)
    assert (
        finding.severity == "warning" and "ignores" in finding.message and "bnb_4bit_compute_dtype" in finding.message
    )


def test_trainer_tokenizer_stays_pd216s_and_trl_trainers_get_pd217(run_check):
    code = (
        HEAD + "tok = AutoTokenizer.from_pretrained('gpt2')\nTrainer(model=model, args=TrainingArguments('o'), "
        "tokenizer=tok).train()\n"
    )
    result, _ = run_check(code)
    assert {f.rule_id for f in result.findings} >= {"PD216"} and not pd217(result)
    trl = (
        "from trl import SFTConfig, SFTTrainer\nfrom transformers import AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained('gpt2')\n"
        "SFTTrainer(model='Qwen/Qwen2.5-0.5B', args=SFTConfig('o'), tokenizer=tok).train()\n"
    )
    result, _ = run_check(trl, versions={"trl": "1.16.0"})
    [finding] = pd217(result)
    assert "SFTTrainer" in finding.message and "processing_class" in finding.message
    assert not [f for f in result.findings if f.rule_id == "PD216"]
    result, _ = run_check(trl, versions={"trl": "0.11.4"})  # before the rename: tokenizer is the parameter
    assert not pd217(result)


def test_a_local_trainer_subclass_inherits_pd216(run_check):
    code = HEAD + (
        "class MyTrainer(Trainer):\n    def compute_loss(self, model, inputs, **kw):\n"
        "        return model(**inputs).loss\n"
        "tok = AutoTokenizer.from_pretrained('gpt2')\n"
        "MyTrainer(model=model, args=TrainingArguments('o'), tokenizer=tok).train()\n"
    )
    result, _ = run_check(code)
    assert "PD216" in {f.rule_id for f in result.findings} and not pd217(result)


def test_from_pretrained_judges_only_keywords_a_release_took(run_check):
    """An unknown keyword may be an attribute of the model's config (rope_scaling, num_labels): not judged; one a
    release took and this one does not reaches the model's __init__."""
    code = (
        "from transformers import AutoModelForCausalLM\n"
        "m = AutoModelForCausalLM.from_pretrained('gpt2', use_auth_token='x', num_labels=3, "
        "rope_scaling={'type': 'linear', 'factor': 2.0})\n"
    )
    result, _ = run_check(code)
    [finding] = pd217(result)
    assert "use_auth_token" in finding.message and "token" in finding.fix.description
    assert finding.error.startswith("TypeError: GPT2LMHeadModel.__init__() got an unexpected keyword argument")
    load_in = (
        "from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained('gpt2', "
        "load_in_4bit=True)\n"
    )
    result, _ = run_check(load_in)
    assert "PD406" in {f.rule_id for f in result.findings} and not pd217(result)


def test_peft_lora_config_on_an_old_peft(run_check):
    code = HEAD + "from peft import LoraConfig\ncfg = LoraConfig(r=8, use_dora=True)\n"
    result, _ = run_check(code, versions={"peft": "0.8.2"})
    [finding] = pd217(result)
    assert "use_dora" in finding.message and "peft 0.9-" in finding.message
    result, _ = run_check(code, versions={"peft": "0.9.0"})
    assert not pd217(result)


# --- subclasses ------------------------------------------------------------------------------------

SUBCLASS = (
    "from dataclasses import dataclass, field\n"
    "from transformers import Seq2SeqTrainingArguments, Seq2SeqTrainer, AutoModelForSeq2SeqLM\n"
    "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base')\n"
    "@dataclass\nclass DistillArgs(Seq2SeqTrainingArguments):\n"
    "    temperature: float = field(default=2.0)\n"
    "@dataclass\nclass MyArgs(DistillArgs):\n    alpha: float = 0.5\n"
)


def test_inherited_and_own_fields_of_a_user_subclass_are_accepted(run_check):
    code = SUBCLASS + (
        "args = MyArgs(output_dir='o', predict_with_generate=True, temperature=1.5, alpha=0.2, "
        "eval_strategy='steps')\nSeq2SeqTrainer(model=model, args=args).train()\n"
    )
    result, _ = run_check(code)
    assert not pd217(result)


def test_a_user_subclass_refuses_what_no_class_in_its_chain_has(run_check):
    code = SUBCLASS + (
        "args = MyArgs(output_dir='o', temperatur=1.5, warmup_ratio=0.1)\n"
        "Seq2SeqTrainer(model=model, args=args).train()\n"
    )
    result, _ = run_check(code)
    found = {f.message.split("`")[1]: f for f in pd217(result)}
    assert set(found) == {"temperatur", "warmup_ratio"}
    assert "did you mean `temperature`" in found["temperatur"].message
    assert found["temperatur"].error == "TypeError: MyArgs.__init__() got an unexpected keyword argument 'temperatur'"
    result, _ = run_check(code.replace("temperatur=", "temperature="), versions={"transformers": "4.57.1"})
    assert not pd217(result)


def test_a_trl_config_subclass_inherits_trainingarguments_of_the_installed_transformers(run_check):
    """SFTConfig's fields are TRL's own plus TrainingArguments' as the transformers in use declares them."""
    code = (
        "from dataclasses import dataclass\nfrom trl import SFTConfig, SFTTrainer\n"
        "@dataclass\nclass MyConfig(SFTConfig):\n    reward_scale: float = 1.0\n"
        "SFTTrainer(model='Qwen/Qwen2.5-0.5B', args=MyConfig('o', max_length=512, reward_scale=2.0, "
        "warmup_ratio=0.1)).train()\n"
    )
    result, _ = run_check(code, versions={"transformers": "4.57.1", "trl": "0.24.0"})
    assert not pd217(result)
    result, _ = run_check(code, versions={"transformers": "5.23.0", "trl": "1.16.0"})
    [finding] = pd217(result)
    assert "warmup_ratio" in finding.message and "transformers 5.23.0" in finding.message


# --- recipes and the command line ------------------------------------------------------------------

TRL_SCRIPT = (
    "from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser\n"
    "if __name__ == '__main__':\n"
    "    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))\n"
    "    script_args, training_args, model_args = parser.parse_args_and_config()\n"
    "    SFTTrainer(model=model_args.model_name_or_path, args=training_args).train()\n"
)
RECIPE = (
    "# Model arguments\nmodel_name_or_path: Qwen/Qwen2.5-0.5B\ndtype: bfloat16\n\n"
    "# SFT trainer config\nbf16: true\nlearning_rat: 2.0e-05\nmax_length: 1024\n"
    "dataset_name: trl-lib/Capybara\noutput_dir: data/qwen-sft\n"
)


def test_a_recipe_key_no_dataclass_has_fires_at_its_yaml_line(run_check, tmp_path):
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    result, _ = run_check(TRL_SCRIPT, script_args=("--config", "recipe.yaml"))
    [finding] = pd217(result)
    assert finding.evidence[0].location.path.endswith("recipe.yaml") and finding.evidence[0].location.line == 7
    assert "`learning_rat` in --config recipe.yaml" in finding.message
    assert "did you mean `learning_rate`" in finding.message
    assert finding.error.startswith("ValueError: Unknown arguments from config file: ['--learning_rat', '2e-05']")
    (tmp_path / "recipe.yaml").write_text(RECIPE.replace("learning_rat:", "learning_rate:"))
    result, _ = run_check(TRL_SCRIPT, script_args=("--config", "recipe.yaml"))
    assert not pd217(result)


def test_trl_releases_that_drop_unknown_config_keys_stay_silent(run_check, tmp_path):
    (tmp_path / "recipe.yaml").write_text(RECIPE.replace("max_length: 1024\n", ""))
    result, _ = run_check(TRL_SCRIPT, script_args=("--config", "recipe.yaml"), versions={"trl": "0.15.2"})
    assert not pd217(result)
    result, _ = run_check(TRL_SCRIPT, script_args=("--config", "recipe.yaml"), versions={"trl": "0.12.2"})
    found = {f.message.split("`")[1]: f for f in pd217(result)}
    # ScriptArguments had no dataset_name before 0.13, and ModelConfig called dtype torch_dtype before 0.23
    assert set(found) == {"learning_rat", "dataset_name", "dtype"}
    assert "this release calls it `torch_dtype`" in found["dtype"].message
    assert "Some specified config arguments are not used by the TrlParser" in found["learning_rat"].error


def test_parse_yaml_file_refuses_unused_keys_unless_allowed(run_check, tmp_path):
    (tmp_path / "args.yaml").write_text("output_dir: out\nbf16: true\nlora_alpah: 32\nlearning_rate: 1.0e-4\n")
    code = (
        "from dataclasses import dataclass\nfrom transformers import HfArgumentParser, Trainer, TrainingArguments\n"
        "@dataclass\nclass LoraArguments:\n    lora_r: int = 8\n    lora_alpha: int = 16\n"
        "parser = HfArgumentParser((TrainingArguments, LoraArguments))\n"
        "args, lora = parser.parse_yaml_file('args.yaml')\nTrainer(model=None, args=args).train()\n"
    )
    result, _ = run_check(code)
    [finding] = pd217(result)
    assert finding.evidence[0].location.line == 3 and "did you mean `lora_alpha`" in finding.message
    assert finding.error == "ValueError: Some keys are not used by the HfArgumentParser: ['lora_alpah']"
    result, _ = run_check(
        code.replace("parse_yaml_file('args.yaml')", "parse_yaml_file('args.yaml', allow_extra_keys=True)")
    )
    assert not pd217(result)


def test_command_line_options_are_read_the_way_argparse_reads_them(run_check):
    code = (
        "from transformers import HfArgumentParser, Trainer, TrainingArguments\n"
        "parser = HfArgumentParser(TrainingArguments)\nparser.add_argument('--seed_everything', type=int)\n"
        "(args,) = parser.parse_args_into_dataclasses()\nTrainer(model=None, args=args).train()\n"
    )
    result, _ = run_check(code, script_args=("--output_dir", "o", "--lerning_rate", "1e-4"))
    [finding] = pd217(result)
    assert "--lerning_rate on the command line" in finding.message
    assert finding.error == (
        "ValueError: Some specified arguments are not used by the HfArgumentParser: ['--lerning_rate', '1e-4']"
    )
    # an abbreviation argparse completes, the dashed spelling, --no_ for a flag, an option the script adds
    for ok in (
        ("--learning_rat", "1e-4"),
        ("--learning-rate", "1e-4"),
        ("--no_remove_unused_columns",),
        ("--seed_everything", "3"),
    ):
        result, _ = run_check(code, script_args=("--output_dir", "o") + ok)
        assert not pd217(result), ok
    remaining = code.replace(
        "parse_args_into_dataclasses()", "parse_args_into_dataclasses(return_remaining_strings=True)"
    )
    result, _ = run_check(remaining.replace("(args,) =", "args, rest ="), script_args=("--lerning_rate", "1"))
    assert not pd217(result)


def test_an_inherited_field_in_a_recipe_of_a_user_subclass_is_accepted(run_check, tmp_path):
    (tmp_path / "args.yaml").write_text("output_dir: out\ntemperature: 2.0\nwarmup_steps: 10\n")
    code = SUBCLASS.replace("Seq2SeqTrainer, ", "Seq2SeqTrainer, HfArgumentParser, ") + (
        "(args,) = HfArgumentParser(MyArgs).parse_yaml_file('args.yaml')\n"
        "Seq2SeqTrainer(model=model, args=args).train()\n"
    )
    result, _ = run_check(code)
    assert not pd217(result)


# --- the installed package's source ----------------------------------------------------------------


def test_the_installed_source_decides_over_the_table(tmp_path):
    """A training environment whose transformers declares a field no released wheel has (a dev build): the field is
    accepted, and one its source lacks is refused, with the installed file as the evidence of what was read."""
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    (site / "transformers").mkdir(parents=True)
    (site / "transformers-5.24.0.dev0.dist-info").mkdir()
    (site / "transformers-5.24.0.dev0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: transformers\nVersion: 5.24.0.dev0\n"
    )
    (site / "transformers" / "training_args.py").write_text(
        "from dataclasses import dataclass, field\n\n\n@dataclass\nclass TrainingArguments:\n"
        "    output_dir: str | None = field(default=None)\n    bf16: bool = field(default=False)\n"
        "    speculative_steps: int = field(default=0)\n"
    )
    (env / "bin").mkdir()
    (env / "bin" / "python").write_text("")
    code = HEAD + (
        "args = TrainingArguments(output_dir='o', speculative_steps=4, bf16=True, learning_rate=1e-4)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    result = _project(tmp_path, code, python=env / "bin" / "python")
    [finding] = pd217(result)
    assert "`learning_rate`" in finding.message and "transformers 5.24.0.dev0 (installed" in finding.message
    assert finding.severity == "error"


# --- reading source, the table, the facts ------------------------------------------------------------

LIBRARY = '''
from dataclasses import dataclass, field
from typing import ClassVar, Optional
from .utils import deprecate_kwarg
from .base import BaseArguments as _Base


@dataclass
class TrainingArguments(_Base):
    """Docs."""

    framework = "pt"
    default_optim = "adamw_torch"
    registry: ClassVar[dict] = {}
    output_dir: Optional[str] = field(default=None)
    bf16: bool = field(default=False, metadata={"help": "bf16"})
    tf32: Optional[bool] = None
    optim: str = field(default=default_optim)
    callbacks: list = field(default_factory=list)
    distributed_state: object = field(default=None, init=False)


class Trainer:
    @deprecate_kwarg("tokenizer", new_name="processing_class", version="5.0.0")
    def __init__(self, model=None, args=None, processing_class=None, **kwargs):
        super().__init__(**kwargs)


class Loader:
    @classmethod
    def from_pretrained(cls, path, *model_args, config=None, **kwargs):
        state_dict = kwargs.pop("state_dict", None)
        for name in ["mirror", "from_tf"]:
            kwargs.pop(name, None)
        if "device_map" in kwargs:
            pass
'''


def test_library_source_reads_fields_parameters_and_popped_keywords():
    from precision_doctor.probes.library_source import read_class

    args = read_class(LIBRARY, "TrainingArguments")
    assert list(args.fields) == ["output_dir", "bf16", "tf32", "optim", "callbacks"]  # no ClassVar, no init=False
    assert args.dataclass and args.bases == (".base:BaseArguments",)
    assert (args.fields["bf16"].kind, args.fields["bf16"].default) == ("bool", False)
    assert args.fields["tf32"].kind == "bool" and args.fields["optim"].default == "adamw_torch"
    assert args.fields["callbacks"].default == []
    trainer = read_class(LIBRARY, "Trainer")
    assert set(trainer.fields) == {"model", "args", "processing_class"} and trainer.init
    assert trainer.open == "forwards" and trainer.aliases == {"tokenizer": "processing_class"}
    loader = read_class(LIBRARY, "Loader", "from_pretrained")
    assert set(loader.fields) == {"path", "config", "state_dict", "mirror", "from_tf", "device_map"}


def test_a_method_before_a_column_0_comment_and_a_class_named_like_a_longer_one_are_read():
    """transformers writes `# Copied from ...` at column 0 between classes: the last method of a class still parses
    (it used to be lost when cutting it out left the comment's margin); `class Loader` is not `class LoaderMixin`."""
    from precision_doctor.probes.library_source import read_class

    text = """
class LoaderMixin:
    def __init__(self, wrong=1):
        pass


class Loader(LoaderMixin):
    @staticmethod
    def helper():
        pass

    def __init__(
        self,
        in_channels,
        bias=True,
    ):
        super().__init__(bias=bias)


# Copied from elsewhere.Loader with Elsewhere->Here
class Next:
    pass
"""
    loader = read_class(text, "Loader")
    assert loader.init and loader.bases == ("LoaderMixin",)
    assert list(loader.fields) == ["in_channels", "bias"] and loader.fields["bias"].default is True
    assert read_class(text, "Missing") is None and read_class(text, "Load") is None


def test_the_table_says_what_it_was_built_from():
    from precision_doctor.knowledge.signatures import table

    data = table()
    assert data["generated_by"] == "tools/gen_signatures.py"
    assert data["releases"]["transformers"]["4.57"] == "4.57.6" and "5.23" in data["releases"]["transformers"]
    ta = data["classes"]["transformers.TrainingArguments"]
    assert ta["names"]["warmup_ratio"] == "4.36-5.14" and ta["renames"]["evaluation_strategy"] == "eval_strategy"
    assert data["parsers"]["trl.TrlParser"]["config_keys"]["ignores"] == "0.13-0.18"


def test_the_generator_writes_release_ranges_by_minor():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen", Path(__file__).resolve().parents[1] / "tools" / "gen_signatures.py"
    )
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    minors = ["4.36", "4.37", "4.38", "5.0"]
    assert gen.ranges([True, True, False, True], minors) == "4.36-4.37,5.0-"
    assert gen.ranges([False, True, False, False], minors) == "4.37"


def test_argument_dataclass_defaults_come_from_the_table():
    from precision_doctor.probes.dataclass_defaults import library_fields

    sft = library_fields("trl.SFTConfig")
    assert sft["bf16"] == (bool, None) and sft["gradient_checkpointing"] == (bool, True)  # TRL's own defaults
    assert sft["fp16"] == (bool, False) and sft["max_length"][0] is int  # inherited, and its own
    args = library_fields("transformers.TrainingArguments")
    assert args["optim"] == (str, "adamw_torch") and args["max_grad_norm"] == (float, 1.0)
    assert library_fields("trl.ModelConfig")["dtype"] == (str, "float32")
    st = library_fields("sentence_transformers.SentenceTransformerTrainingArguments")
    assert "batch_sampler" in st and st["fp16"] == (bool, False)


def test_facts_with_classes_and_parsed_arguments_round_trip(run_check, tmp_path):
    from precision_doctor.model.facts import Facts

    (tmp_path / "recipe.yaml").write_text(RECIPE)
    result, facts = run_check(SUBCLASS + TRL_SCRIPT, script_args=("--config", "recipe.yaml", "--lerning_rate", "1"))
    again = Facts.from_json(facts.to_json())
    assert again.scripts[0].classes == facts.scripts[0].classes
    assert [p.keys.keys() for p in again.scripts[0].parsed] == [p.keys.keys() for p in facts.scripts[0].parsed]
    assert [f.message for f in engine.run(again).findings] == [f.message for f in result.findings]


def test_sentence_transformers_arguments_keep_their_own_fields_and_transformers_ones(run_check):
    """Its own fields are those of any sentence-transformers release (the stack does not track its version), the
    rest are TrainingArguments' at the transformers in use. sentence-transformers 5.7 declares warmup_ratio itself
    (to keep it past transformers 5.15): not refused."""
    code = (
        "from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, "
        "SentenceTransformerTrainingArguments\nfrom sentence_transformers.training_args import BatchSamplers\n"
        "model = SentenceTransformer('all-MiniLM-L6-v2')\n"
        "args = SentenceTransformerTrainingArguments(output_dir='o', batch_sampler=BatchSamplers.NO_DUPLICATES, "
        "fp16=True, warmup_ratio=0.1, no_cuda=True)\n"
    )
    result, facts = run_check(code)
    assert any(c.kind == "training_args" for c in facts.scripts[0].calls)
    [finding] = pd217(result)
    assert "no_cuda" in finding.message and "use_cpu" in finding.message and finding.severity == "error"
    result, _ = run_check(code, versions={"transformers": "4.57.1"})
    assert not pd217(result)


def test_the_keywords_fixture_and_its_twin(tmp_path, monkeypatch):
    """The README's example: a TRL recipe written for older releases, on the releases its project pins."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "keywords"
    monkeypatch.chdir(fixture)
    python = str(bare_env(tmp_path))
    facts = gather(
        [str(fixture / "sft.py")],
        environ={},
        system=NO_NVML,
        python=python,
        script_args=("--config", "recipes/sft.yaml"),
    )
    found = sorted((f.evidence[0].location.line, f.message.split("`")[1], f.severity) for f in pd217(engine.run(facts)))
    assert found == [(13, "warmup_ratio", "error"), (14, "max_seq_length", "error")]
    facts = gather(
        [str(fixture / "sft.py")],
        environ={},
        system=NO_NVML,
        python=python,
        script_args=("--config", "recipes/sft_fixed.yaml"),
    )
    assert not [f for f in engine.run(facts).findings if f.severity == "error"]


def test_a_keyword_the_script_passes_only_on_releases_that_have_it_is_silent(run_check):
    """Version-gated spellings and a try/except fallback: the refused spelling never runs on this release."""
    gated = HEAD + (
        "import transformers\nfrom packaging import version\n"
        "if version.parse(transformers.__version__) >= version.parse('4.41'):\n"
        "    args = TrainingArguments('o', eval_strategy='steps')\n"
        "else:\n    args = TrainingArguments('o', evaluation_strategy='steps')\n"
        "Trainer(model=model, args=args).train()\n"
    )
    fallback = HEAD + (
        "try:\n    args = TrainingArguments('o', eval_strategy='steps')\n"
        "except TypeError:\n    args = TrainingArguments('o', evaluation_strategy='steps')\n"
        "Trainer(model=model, args=args).train()\n"
    )
    for code in (gated, fallback):
        for transformers in ("4.40.2", "5.23.0"):
            result, _ = run_check(code, versions={"transformers": transformers})
            assert not pd217(result), (transformers, code)
    unguarded = HEAD + (
        "import os\nif os.environ.get('EVAL'):\n"
        "    args = TrainingArguments('o', evaluation_strategy='steps')\n"
        "else:\n    args = TrainingArguments('o')\nTrainer(model=model, args=args).train()\n"
    )
    result, _ = run_check(unguarded)
    assert [f.message.split("`")[1] for f in pd217(result)] == ["evaluation_strategy"]


def test_a_declared_requirement_without_a_range_is_judged_as_a_fresh_install(tmp_path):
    """`transformers` alone in requirements.txt: a fresh install gets the newest release, as for any range."""
    [finding] = pd217(_project(tmp_path, WARMUP, "transformers\naccelerate\n"))
    assert finding.severity == "error" and "a fresh install of transformers gets" in finding.message


def test_a_trl_config_that_moved_to_experimental_and_back_is_read(run_check):
    """TRL's KTOConfig was a wrapper of trl.experimental's for some releases and the reverse for others: the table
    holds both as bases of each other, and the defaults still resolve (no endless inheritance)."""
    from precision_doctor.probes.dataclass_defaults import library_fields

    assert library_fields("trl.KTOConfig")["beta"][0] is float
    code = (
        "from transformers import AutoModelForCausalLM, HfArgumentParser\n"
        "from trl import KTOConfig, KTOTrainer, ModelConfig, ScriptArguments\n"
        "parser = HfArgumentParser((ScriptArguments, KTOConfig, ModelConfig))\n"
        "script_args, training_args, model_args = parser.parse_args_into_dataclasses()\n"
        "model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)\n"
        "KTOTrainer(model, args=training_args).train()\n"
    )
    result, facts = run_check(code, script_args=("--output_dir", "o", "--bf16", "--desirable_weigth", "1.0"))
    assert not [u for u in facts.scripts[0].unknowns if u.what == "not checked"]
    [finding] = pd217(result)
    assert "did you mean `desirable_weight`" in finding.message


def test_a_release_newer_than_the_table_is_judged_as_the_newest_read_with_a_warning(run_check):
    result, _ = run_check(WARMUP, versions={"transformers": "5.40.0"})
    [finding] = pd217(result)
    assert finding.severity == "warning" and "newer than the transformers releases" in finding.message


SFT_TOKENIZER = """{first}
from trl import SFTConfig, SFTTrainer
model, tokenizer = load()
trainer = SFTTrainer(model=model, tokenizer=tokenizer, args=SFTConfig("out"), train_dataset=data)
trainer.train()
"""


def test_sft_trainer_tokenizer_is_refused_by_trl_but_taken_once_unsloth_is_imported(run_check):
    """TRL 1.x's SFTTrainer has no `tokenizer=`; `import unsloth` rebuilds every TRL trainer with one that feeds
    processing_class (unsloth/models/rl.py), which is why Unsloth notebooks pass it."""
    plain, _ = run_check(SFT_TOKENIZER.format(first="import torch"), versions={"trl": "1.16.0"})
    pd217 = [f for f in plain.findings if f.rule_id == "PD217"]
    assert pd217 and "tokenizer" in pd217[0].message and pd217[0].severity == "error"
    unsloth, _ = run_check(
        SFT_TOKENIZER.format(first="from unsloth import FastLanguageModel"), versions={"trl": "1.16.0"}
    )
    assert "PD217" not in {f.rule_id for f in unsloth.findings}


TOKENIZER = HEAD + "Trainer(model=model, args=TrainingArguments('out'), tokenizer=tok).train()\n"


def pd216(result):
    return [f for f in result.findings if f.rule_id == "PD216"]


def test_trainer_tokenizer_is_an_error_only_where_every_release_refuses_it(tmp_path):
    """Trainer(tokenizer=) is gone from transformers 5: an error on a pinned 5.x or a range a fresh install resolves
    to 5.x, a warning where nothing is installed nor declared (the job may run a 4.x that still takes it)."""
    for name in ("pinned", "assumed", "ranged"):
        (tmp_path / name).mkdir()
    [pinned] = pd216(_project(tmp_path / "pinned", TOKENIZER, "transformers==5.20.0\n"))
    assert pinned.severity == "error" and "no longer exists" in pinned.message
    [assumed] = pd216(_project(tmp_path / "assumed", TOKENIZER))
    assert assumed.severity == "warning" and "assumed" in assumed.message
    [ranged] = pd216(_project(tmp_path / "ranged", TOKENIZER, "transformers>=4.46\n"))
    assert ranged.severity == "error"


def test_a_span_from_the_oldest_release_read_is_not_called_its_start():
    """The table starts at transformers 4.36: a keyword it finds there may be much older, so the message says
    "up to" rather than naming 4.36 as where the keyword begins."""
    from precision_doctor.knowledge.signatures import describe_spans

    assert describe_spans("transformers", "4.36-5.1") == "transformers up to 5.1"
    assert describe_spans("transformers", "4.40-4.50") == "transformers 4.40-4.50"
    assert describe_spans("transformers", "4.36-4.40,4.45-4.47") == "transformers up to 4.40,4.45-4.47"


TORCH_DTYPE = (
    "import torch\nfrom transformers import AutoModelForCausalLM\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n"
)


@pytest.mark.parametrize(
    "requirements, safe",
    [
        ("transformers>=4.40\n", False),  # 4.40-4.55 take no dtype=: the rename alone breaks them
        ("transformers>=4.56\n", True),
        ("transformers==5.23.0\n", True),
    ],
)
def test_the_dtype_rename_is_safe_only_where_every_allowed_release_takes_it(tmp_path, requirements, safe):
    """Issue 32: `fix` wrote dtype= into a project whose requirements allow transformers releases that refuse it.
    Where the declared range reaches below 4.56 the rename is offered for review, with the pin to raise."""
    [finding] = [f for f in _project(tmp_path, TORCH_DTYPE, requirements).findings if f.rule_id == "PD214"]
    assert (finding.fix.applicability == "safe") is safe
    if not safe:
        assert "transformers>=4.56" in finding.fix.description
        assert any("transformers>=4.40" in note for note in finding.fix.notes)


# --- LLaMA-Factory recipes --------------------------------------------------------------------------

LF_RECIPE = (
    "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\nlearning_rate: 1.0e-4\n"
)


def _llamafactory_env(tmp_path: Path, version: str, model_fields: str, editable: str = "") -> Path:
    """A training environment with LLaMA-Factory `version` installed (its hparams modules as the release lays them
    out: hparams/*_args.py) and transformers 4.57.6; `editable` ("finder" or "pth"): installed with `pip install -e`
    from a checkout elsewhere, as setuptools' finder module or a plain .pth file points at it."""
    env = tmp_path / "lf-env"
    site = env / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    source = tmp_path / "LLaMA-Factory" / "src" if editable else site
    hparams = source / "llamafactory" / "hparams"
    hparams.mkdir(parents=True)
    if editable == "finder":
        (site / "__editable__.llamafactory-0.9.6.dev0.pth").write_text(
            "import __editable___llamafactory_0_9_6_dev0_finder; "
            "__editable___llamafactory_0_9_6_dev0_finder.install()\n"
        )
        (site / "__editable___llamafactory_0_9_6_dev0_finder.py").write_text(
            f"import sys\nMAPPING: dict[str, str] = {{'llamafactory': {str(source / 'llamafactory')!r}}}\n"
            "def install():\n    raise SystemExit('never run by the doctor')\n"
        )
    elif editable == "pth":
        (site / "__editable__.llamafactory-0.9.6.dev0.pth").write_text(f"{source}\n")
    for dist, v in (("llamafactory", version), ("transformers", "4.57.6")):
        (site / f"{dist}-{v}.dist-info").mkdir()
        (site / f"{dist}-{v}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {v}\n")
    dataclass = "from dataclasses import dataclass, field\n\n\n@dataclass\nclass {name}:\n{fields}"
    modules = {
        "model_args.py": ("ModelArguments", "    model_name_or_path: str = field(default=None)\n" + model_fields),
        "data_args.py": ("DataArguments", "    dataset: str = None\n    template: str = None\n"),
        "finetuning_args.py": ("FinetuningArguments", "    stage: str = 'sft'\n    finetuning_type: str = 'lora'\n"),
        "generating_args.py": ("GeneratingArguments", "    do_sample: bool = True\n"),
    }
    for module, (name, fields) in modules.items():
        (hparams / module).write_text(dataclass.format(name=name, fields=fields))
    (hparams / "training_args.py").write_text(
        "from dataclasses import dataclass\nfrom transformers import Seq2SeqTrainingArguments\n\n\n"
        "@dataclass\nclass TrainingArguments(Seq2SeqTrainingArguments):\n    pass\n"
    )
    (env / "bin").mkdir()
    (env / "bin" / "python").write_text("")
    return env / "bin" / "python"


def _check_recipe(tmp_path: Path, recipe: str, python: Path):
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "train.yaml").write_text(recipe)
    facts = gather([str(project / "train.yaml")], environ={}, system=NO_NVML, python=str(python))
    return engine.run(facts)


def test_an_installed_llamafactory_decides_which_recipe_keys_its_parser_takes(tmp_path):
    """A development install (0.9.6.dev0, past the table) is read from its own source: a key it added is taken, a
    typo is an error naming the field it misses, and the transformers fields come through its TrainingArguments."""
    python = _llamafactory_env(tmp_path, "0.9.6.dev0", "    kt_new_option: bool = False\n")
    assert not pd217(_check_recipe(tmp_path, LF_RECIPE + "kt_new_option: true\n", python))
    [finding] = pd217(_check_recipe(tmp_path, LF_RECIPE + "lerning_rate: 1.0e-5\n", python))
    assert finding.severity == "error" and "llamafactory 0.9.6.dev0 (installed" in finding.message
    assert "did you mean `learning_rate`?" in finding.message
    assert finding.error == "ValueError: Some keys are not used by the HfArgumentParser: ['lerning_rate']"


@pytest.mark.parametrize("editable", ["finder", "pth"])
def test_an_editable_llamafactory_install_is_read_from_its_checkout(tmp_path, editable):
    """`pip install -e .` (LLaMA-Factory's README): the source is where the install points, read as text (the
    finder module is never run); a key only the checkout has is taken, a typo still an error."""
    python = _llamafactory_env(tmp_path, "0.9.6.dev0", "    kt_new_option: bool = False\n", editable=editable)
    assert not pd217(_check_recipe(tmp_path, LF_RECIPE + "kt_new_option: true\n", python))
    [finding] = pd217(_check_recipe(tmp_path, LF_RECIPE + "lerning_rate: 1.0e-5\n", python))
    assert finding.severity == "error" and "llamafactory 0.9.6.dev0 (installed" in finding.message


def test_an_llamafactory_release_the_table_read_judges_its_recipe_keys(tmp_path):
    """Without LLaMA-Factory installed, a pin decides the release, to the patch: `kt_optimize_rule` came with
    KTransformers' options in 0.9.4 and went in 0.9.5."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.yaml").write_text(LF_RECIPE + "kt_optimize_rule: rule.yaml\n")
    python = bare_env(tmp_path)
    for pin, fires in (("0.9.3", True), ("0.9.4", False), ("0.9.5", True)):
        (project / "requirements.txt").write_text(f"llamafactory=={pin}\ntransformers==4.51.3\n")
        facts = gather([str(project / "train.yaml")], environ={}, system=NO_NVML, python=str(python))
        found = pd217(engine.run(facts))
        assert bool(found) == fires, pin
        if fires:
            assert found[0].severity == "error" and f"llamafactory {pin} (declared" in found[0].message


@pytest.mark.parametrize(
    "release, launcher, key, expected",
    [
        ("0.9.1", "ALLOW_EXTRA_ARGS=1 llamafactory-cli train train.yaml", "lora_rnak: 8", "error"),  # read from 0.9.2
        ("0.9.2", "ALLOW_EXTRA_ARGS=1 llamafactory-cli train train.yaml", "lora_rnak: 8", "warning"),  # dropped
        ("0.9.3", "USE_MCA=1 llamafactory-cli train train.yaml", "tensor_model_parallel_size: 2", "error"),  # 0.9.4
        ("0.9.4", "USE_MCA=1 llamafactory-cli train train.yaml", "tensor_model_parallel_size: 2", None),
        ("0.9.5", "USE_MEGATRON_BRIDGE=1 llamafactory-cli train train.yaml", "tensor_model_parallel_size: 2", "error"),
        ("0.9.1", None, "tensor_model_parallel_size: 2", "error"),  # no USE_MCA to set in 0.9.1
        ("0.9.5", None, "tensor_model_parallel_size: 2", "warning"),  # the launch may set USE_MCA
        ("0.9.5", "llamafactory-cli eval train.yaml", "task: mmlu_test", None),  # eval's parser has `task`
    ],
)
def test_llamafactory_launch_variables_count_from_the_release_that_reads_them(
    tmp_path, release, launcher, key, expected
):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.yaml").write_text(LF_RECIPE + key + "\n")
    (project / "requirements.txt").write_text(f"llamafactory=={release}\ntransformers==4.51.3\n")
    facts = gather(
        [str(project / "train.yaml")],
        environ={},
        system=NO_NVML,
        python=str(bare_env(tmp_path)),
        launcher=launcher,
    )
    found = pd217(engine.run(facts))
    assert [f.severity for f in found] == ([expected] if expected else [])


def test_an_llamafactory_eval_recipe_is_not_judged_as_a_training_recipe(tmp_path):
    """LLaMA-Factory's own eval example (no stage, no do_train): `llamafactory-cli eval` parses it with
    EvaluationArguments, which has `task`, `n_shot`, `lang`."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "eval.yaml").write_text(
        "model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nadapter_name_or_path: saves/llama3-8b/lora/sft\n"
        "finetuning_type: lora\ntask: mmlu_test\ntemplate: fewshot\nlang: en\nn_shot: 5\nsave_dir: saves/eval\n"
        "batch_size: 4\n"
    )
    (project / "requirements.txt").write_text("llamafactory==0.9.3\ntransformers==4.51.3\n")
    facts = gather([str(project / "eval.yaml")], environ={}, system=NO_NVML, python=str(bare_env(tmp_path)))
    assert not pd217(engine.run(facts))


def test_a_pinned_llamafactory_caps_the_transformers_a_fresh_install_gets(tmp_path):
    """`transformers>=4.55.0` beside `llamafactory==0.9.5` resolves to at most 5.6.0 (0.9.5's METADATA:
    transformers<=5.6.0), not the newest transformers: the recipe is judged there."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.yaml").write_text(LF_RECIPE + "fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n")
    (project / "requirements.txt").write_text("llamafactory==0.9.5\ntransformers>=4.55.0\n")
    python = str(bare_env(tmp_path))
    facts = gather([str(project / "train.yaml")], environ={}, system=NO_NVML, python=python)
    [finding] = pd217(engine.run(facts))
    assert "gets 5.6.0" in finding.message and "5.23" not in finding.message
    (project / "requirements.txt").write_text("llamafactory==0.9.3\ntransformers>=4.45.0\n")
    (project / "train.yaml").write_text(LF_RECIPE + "warmup_ratio: 0.1\n")  # 0.9.3 caps at 4.52.4, which has it
    facts = gather([str(project / "train.yaml")], environ={}, system=NO_NVML, python=python)
    assert not pd217(engine.run(facts))


def test_words_after_an_llamafactory_recipe_are_keys_as_omegaconf_reads_them(tmp_path):
    """`llamafactory-cli train x.yaml lora_rank=16` sets a key; `--learning_rate 1e-4` is two keys of their own
    (OmegaConf.from_cli), both refused by the parser."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.yaml").write_text(LF_RECIPE)
    (project / "requirements.txt").write_text("llamafactory==0.9.3\ntransformers==4.51.3\n")
    python = str(bare_env(tmp_path))

    def keys_refused(words: str) -> list[str]:
        launcher = f"llamafactory-cli train {project / 'train.yaml'} {words}"
        facts = gather([str(project / "train.yaml")], environ={}, system=NO_NVML, python=python, launcher=launcher)
        return [f.message.split("`")[1] for f in pd217(engine.run(facts))]

    assert keys_refused("lora_rank=16 learning_rate=1e-5") == []
    assert keys_refused("--learning_rate 1e-4") == ["--learning_rate", "1e-4"]
    assert keys_refused("lora_rnak=16") == ["lora_rnak"]


def test_words_after_the_recipe_kill_a_run_before_llamafactory_0_9_3(tmp_path):
    """Before 0.9.3 `read_args` reads the recipe only when it is the one argument: with `lora_rank=16` after it,
    argparse gets both words, the recipe's keys are never read, and the run dies on a field it requires: with
    0.9.2's dataclasses on transformers 4.49 that is ModelArguments' own check (reproduced by importing them),
    before transformers 4.49 argparse's required `--output_dir`."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.yaml").write_text(LF_RECIPE)
    python = str(bare_env(tmp_path))
    for release, transformers, words, expected in (
        ("0.9.2", "4.49.0", "lora_rank=16", "ValueError: Please provide `model_name_or_path`."),
        ("0.9.2", "4.45.2", "lora_rank=16", "error: the following arguments are required: --output_dir"),
        ("0.9.3", "4.51.3", "lora_rank=16", None),
        ("0.9.2", "4.49.0", "", None),
    ):
        (project / "requirements.txt").write_text(f"llamafactory=={release}\ntransformers=={transformers}\n")
        launcher = f"llamafactory-cli train train.yaml {words}".strip()
        facts = gather([str(project / "train.yaml")], environ={}, system=NO_NVML, python=python, launcher=launcher)
        found = pd217(engine.run(facts))
        if expected is None:
            assert not found, (release, words)
        else:
            [finding] = found
            assert finding.severity == "error" and "llamafactory 0.9.2" in finding.message
            assert finding.error == expected
