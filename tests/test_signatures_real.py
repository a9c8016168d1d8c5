"""PD217's verdicts against the installed transformers itself: the errors it declares are the ones the library
raises, what it lets through the library accepts, and the fields it reads from the installed source are the fields
the dataclass really has (read with `dataclasses.fields`, which the doctor itself never imports)."""

import dataclasses
import inspect
import os
from dataclasses import replace

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.signatures import accepted, table
from precision_doctor.model.facts import PackageVersion, StackFacts, VersionSource
from precision_doctor.probes.collect import gather
from precision_doctor.probes.installed_signatures import installed_signatures
from precision_doctor.probes.stack import installed_versions, training_environment

from .fake_nvml import NO_NVML

transformers = pytest.importorskip("transformers")
os.environ["HF_HUB_OFFLINE"] = "1"

HEAD = "from transformers import HfArgumentParser, Trainer, TrainingArguments\n"


def _installed_check(tmp_path, code, script_args=()):
    """The doctor with this interpreter's own environment as the training environment: versions and fields are
    read from the installed packages."""
    path = tmp_path / "train.py"
    path.write_text(code)
    env = training_environment()
    assert env is not None, "the test environment has transformers installed"
    facts = gather([str(path)], environ={}, system=NO_NVML, python=env.folder, script_args=tuple(script_args))
    return engine.run(facts), facts


def _pd217(result):
    return [f for f in result.findings if f.rule_id == "PD217"]


WANTED = frozenset(
    {
        "transformers.TrainingArguments",
        "transformers.Seq2SeqTrainingArguments",
        "transformers.Trainer",
        "transformers.from_pretrained",
        "peft.LoraConfig",
    }
)


def test_the_fields_read_from_the_installed_source_are_the_dataclass_fields(tmp_path):
    _, facts = _installed_check(tmp_path, HEAD + "TrainingArguments('o')\n")
    env = training_environment()
    stack = replace(
        facts.scripts[0].stack,
        signatures=installed_signatures(
            env.site_dirs, tuple(sorted(installed_versions(env.site_dirs).items())), WANTED, releases_read=True
        ),
    )
    assert "transformers.TrainingArguments" in stack.signatures  # read from the installed files
    for cls in (transformers.TrainingArguments, transformers.Seq2SeqTrainingArguments):
        real = {f.name for f in dataclasses.fields(cls) if f.init}
        assert set(accepted(f"transformers.{cls.__name__}", stack).names) == real
    assert set(accepted("transformers.Trainer", stack).names) == set(
        inspect.signature(transformers.Trainer.__init__).parameters
    ) - {"self"}


def test_the_table_holds_what_the_installed_release_declares(tmp_path):
    """For a release the table was generated from, the installed source and the table agree (which is why such a
    release is not read again at run time)."""
    env = training_environment()
    installed = installed_versions(env.site_dirs)
    read = installed_signatures(env.site_dirs, tuple(sorted(installed.items())), WANTED, releases_read=True)
    stack = StackFacts(packages={n: PackageVersion(n, v, VersionSource.INSTALLED) for n, v in installed.items()})
    for cid in WANTED:
        if (
            cid.split(".")[0] in installed
            and installed[cid.split(".")[0]] in table()["releases"].get(cid.split(".")[0], {}).values()
        ):
            from_source = accepted(cid, replace(stack, signatures=read))
            assert from_source is not None and from_source.names == accepted(cid, stack).names, cid


@pytest.mark.parametrize("keyword", ["warmup_ratio", "learning_rat", "evaluation_strategy"])
def test_a_refused_keyword_is_the_real_type_error(tmp_path, keyword):
    accepts = {f.name for f in dataclasses.fields(transformers.TrainingArguments) if f.init}
    if keyword in accepts:
        pytest.skip(f"the installed transformers still has {keyword}")
    with pytest.raises(TypeError) as err:
        transformers.TrainingArguments("o", **{keyword: 0.1})
    result, _ = _installed_check(
        tmp_path, HEAD + f"args = TrainingArguments('o', {keyword}=0.1)\nTrainer(model=None, args=args).train()\n"
    )
    [finding] = _pd217(result)
    assert finding.error == f"TypeError: {err.value}"
    assert finding.severity == "error" and "(installed" in finding.message


def test_what_the_doctor_accepts_the_library_accepts(tmp_path):
    code = HEAD + "args = TrainingArguments('o', warmup_steps=0.1, eval_strategy='no', bf16=False)\n"
    transformers.TrainingArguments("o", warmup_steps=0.1, eval_strategy="no", bf16=False)
    result, _ = _installed_check(tmp_path, code + "Trainer(model=None, args=args).train()\n")
    assert not _pd217(result)


def test_an_unused_recipe_key_is_the_real_value_error(tmp_path):
    (tmp_path / "args.yaml").write_text("output_dir: out\nlearning_rat: 1.0e-4\n")
    parser = transformers.HfArgumentParser(transformers.TrainingArguments)
    with pytest.raises(ValueError) as err:
        parser.parse_yaml_file(str(tmp_path / "args.yaml"))
    code = (
        HEAD + "(args,) = HfArgumentParser(TrainingArguments).parse_yaml_file('args.yaml')\n"
        "Trainer(model=None, args=args).train()\n"
    )
    os.chdir(tmp_path)
    result, _ = _installed_check(tmp_path, code)
    [finding] = _pd217(result)
    assert finding.error == f"ValueError: {err.value}"
    assert finding.evidence[0].location.line == 2


def test_command_line_options_as_argparse_reads_them(tmp_path):
    parser = transformers.HfArgumentParser(transformers.TrainingArguments)
    with pytest.raises(ValueError) as err:
        parser.parse_args_into_dataclasses(["--output_dir", "o", "--lerning_rate", "3"])
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", "o", "--learning_rat", "3"])  # an abbreviation
    assert args.learning_rate == 3
    code = (
        HEAD + "(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()\n"
        "Trainer(model=None, args=args).train()\n"
    )
    result, _ = _installed_check(tmp_path, code, ("--output_dir", "o", "--lerning_rate", "3"))
    [finding] = _pd217(result)
    assert finding.error == f"ValueError: {err.value}"
    result, _ = _installed_check(tmp_path, code, ("--output_dir", "o", "--learning_rat", "3"))
    assert not _pd217(result)


def test_bitsandbytes_config_really_takes_and_ignores_a_typo(tmp_path):
    import torch

    cfg = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_type=torch.bfloat16)
    assert cfg.bnb_4bit_compute_dtype == torch.float32  # the typo had no effect
    result, _ = _installed_check(
        tmp_path,
        "import torch\nfrom transformers import BitsAndBytesConfig\n"
        "q = BitsAndBytesConfig(load_in_4bit=True, "
        "bnb_4bit_compute_type=torch.bfloat16)\n",
    )
    [finding] = _pd217(result)
    assert finding.severity == "warning"


def test_from_pretrained_hands_a_removed_keyword_to_the_model(tiny_llama, tmp_path):
    loader = accepted("transformers.from_pretrained", _installed_check(tmp_path, HEAD)[1].scripts[0].stack)
    if "use_auth_token" in loader.names:
        pytest.skip("the installed transformers still takes use_auth_token")
    with pytest.raises(TypeError) as err:
        transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, use_auth_token="x")
    transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, num_labels=3, token=None)  # a config attribute
    code = (
        "from transformers import AutoModelForCausalLM\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(tiny_llama)!r}, use_auth_token='x', num_labels=3)\n"
    )
    result, _ = _installed_check(tmp_path, code)
    [finding] = _pd217(result)
    assert finding.error == f"TypeError: {err.value}"
